// A verifier failure: one diagnostic `file:line:col: error: 'op.name' op message` at the
// failing op (its position in this file), then the source line with a caret; exit 1.
// RUN: not pkc-opt %s 2>&1 | FileCheck %s

func.func @f() -> i32 {
  // CHECK:      verifier-error.mlir:[[# @LINE + 3]]:3: error: 'func.return' op Expected arguments to have the same types as the function output types: expected [i32], got []
  // CHECK-NEXT:   func.return
  // CHECK-NEXT:   ^
  func.return
}
// CHECK-NOT: error
