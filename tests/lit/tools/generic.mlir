// --print-op-generic prints MLIR's generic form; the generic form parses back to the
// same custom form.
// RUN: pkc-opt %s --print-op-generic | FileCheck %s
// RUN: pkc-opt %s --print-op-generic | pkc-opt | FileCheck %s --check-prefix=BACK

// CHECK:      "builtin.module"() ({
// CHECK-NEXT:   "func.func"() <{function_type = (i32, i32) -> i32, sym_name = "f"}> ({
// CHECK-NEXT:   ^bb0(%a: i32, %b: i32):
// CHECK-NEXT:     %c = "arith.addi"(%a, %b) <{overflowFlags = #arith.overflow<none>}> : (i32, i32) -> i32
// CHECK-NEXT:     "func.return"(%c) : (i32) -> ()
// CHECK-NEXT:   }) : () -> ()
// CHECK-NEXT: }) : () -> ()
// CHECK-NOT:  loc(

// BACK:      builtin.module {
// BACK-NEXT:   func.func @f(%a: i32, %b: i32) -> i32 {
// BACK-NEXT:     %c = arith.addi %a, %b : i32
// BACK-NEXT:     func.return %c : i32
// BACK-NEXT:   }
// BACK-NEXT: }
func.func @f(%a: i32, %b: i32) -> i32 {
  %c = arith.addi %a, %b : i32
  func.return %c : i32
}
