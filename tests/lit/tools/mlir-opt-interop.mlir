// The generic form printed by pkc-opt is accepted by upstream mlir-opt
// (--allow-unregistered-dialect), and what mlir-opt prints (custom or generic form) is
// read back by pkc-opt.
// REQUIRES: mlir-opt
// RUN: pkc-opt %s --print-op-generic > %t.generic.mlir
// RUN: mlir-opt --allow-unregistered-dialect %t.generic.mlir | FileCheck %s --check-prefix=MLIR
// RUN: mlir-opt --allow-unregistered-dialect %t.generic.mlir | pkc-opt | FileCheck %s --check-prefix=BACK
// RUN: mlir-opt --allow-unregistered-dialect --mlir-print-op-generic %t.generic.mlir | pkc-opt --print-op-generic | FileCheck %s --check-prefix=GENERIC
// An opaque op of a dialect neither tool knows survives the trip too.
// RUN: pkc-opt --allow-unregistered-dialect %S/Inputs/opaque.mlir --print-op-generic | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic | pkc-opt --allow-unregistered-dialect | FileCheck %s --check-prefix=OPAQUE

// MLIR:      module {
// MLIR-NEXT:   func.func @f(%arg0: i32, %arg1: i32) -> i32 {
// MLIR-NEXT:     %0 = arith.addi %arg0, %arg1 : i32
// MLIR-NEXT:     %1 = arith.muli %0, %arg0 : i32
// MLIR-NEXT:     return %1 : i32
// MLIR:        func.func @loop(%arg0: index) -> f32 {
// MLIR:          scf.for

// BACK:      builtin.module {
// BACK-NEXT:   func.func @f(%arg0: i32, %arg1: i32) -> i32 {
// BACK-NEXT:     %0 = arith.addi %arg0, %arg1 : i32
// BACK-NEXT:     %1 = arith.muli %0, %arg0 : i32
// BACK-NEXT:     func.return %1 : i32
// BACK-NEXT:   }
// BACK:        func.func @loop(%arg0: index) -> f32 {
// BACK:          %{{.*}} = scf.for %{{.*}} = %{{.*}} to %arg0 step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// BACK:            %{{.*}} = arith.addf %{{.*}}, %{{.*}} : f32
// BACK-NEXT:       scf.yield %{{.*}} : f32

// GENERIC:      "builtin.module"() ({
// GENERIC-NEXT:   "func.func"() <{function_type = (i32, i32) -> i32, sym_name = "f"}> ({
// GENERIC-NEXT:   ^bb0(%[[A:.*]]: i32, %[[B:.*]]: i32):
// GENERIC-NEXT:     %{{.*}} = "arith.addi"(%[[A]], %[[B]]) <{overflowFlags = #arith.overflow<none>}> : (i32, i32) -> i32

// OPAQUE:      %0 = "mystery.op"(%arg0) {level = 3 : i64} : (i32) -> i32
// OPAQUE-NEXT: func.return %0 : i32

func.func @f(%a: i32, %b: i32) -> i32 {
  %c = arith.addi %a, %b : i32
  %d = arith.muli %c, %a : i32
  func.return %d : i32
}

func.func @loop(%n: index) -> f32 {
  %lb = arith.constant 0 : index
  %st = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %r = scf.for %i = %lb to %n step %st iter_args(%acc = %z) -> (f32) {
    %next = arith.addf %acc, %one : f32
    scf.yield %next : f32
  }
  func.return %r : f32
}
