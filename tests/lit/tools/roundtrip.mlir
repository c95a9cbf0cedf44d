// Custom-form round trip of builtin/func/arith/scf: printing is stable (print, parse,
// print again gives the same text) and keeps every op.
// RUN: pkc-opt %s | FileCheck %s
// RUN: pkc-opt %s | pkc-opt | FileCheck %s
// RUN: pkc-opt %s > %t.1.mlir && pkc-opt %t.1.mlir > %t.2.mlir && diff %t.1.mlir %t.2.mlir
// Locations are recorded for diagnostics but never printed.
// RUN: pkc-opt %s | FileCheck %s --check-prefix=NOLOC
// NOLOC-NOT: loc(

// CHECK-LABEL: func.func @add(%a: i32, %b: i32) -> i32 {
// CHECK-NEXT:    %c = arith.addi %a, %b : i32
// CHECK-NEXT:    %d = arith.muli %c, %a : i32
// CHECK-NEXT:    func.return %d : i32
// CHECK-NEXT:  }
func.func @add(%a: i32, %b: i32) -> i32 {
  %c = arith.addi %a, %b : i32
  %d = arith.muli %c, %a : i32
  func.return %d : i32
}

// CHECK-LABEL: func.func @consts() -> (f32, index) {
// CHECK-NEXT:    %0 = arith.constant 1.500000e+00 : f32
// CHECK-NEXT:    %1 = arith.constant 4 : index
// CHECK-NEXT:    func.return %0, %1 : f32, index
func.func @consts() -> (f32, index) {
  %0 = arith.constant 1.5 : f32
  %1 = arith.constant 4 : index
  func.return %0, %1 : f32, index
}

// CHECK-LABEL: func.func @loop(%n: index) -> i32 {
// CHECK:         %{{.*}} = scf.for %{{.*}} = %{{.*}} to %n step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (i32) {
// CHECK:           scf.yield %{{.*}} : i32
// CHECK:         func.return %{{.*}} : i32
func.func @loop(%n: index) -> i32 {
  %lb = arith.constant 0 : index
  %st = arith.constant 1 : index
  %z = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %r = scf.for %i = %lb to %n step %st iter_args(%acc = %z) -> (i32) {
    %next = arith.addi %acc, %one : i32
    scf.yield %next : i32
  }
  func.return %r : i32
}
