// A syntax error: exactly one diagnostic, `file:line:col: error: message`, the source
// line with a caret under the offending token, exit status 1, no traceback.
// RUN: not pkc-opt %s 2>&1 | FileCheck %s --match-full-lines --strict-whitespace
// RUN: not pkc-opt < %s 2>&1 | FileCheck %s --check-prefix=STDIN

func.func @f(%a: i32) -> i32 {
  %c = arith.addi %a : i32
  func.return %c : i32
}

// CHECK:{{.*}}syntax-error.mlir:7:22: error: Expected ','
// CHECK-NEXT:  %c = arith.addi %a : i32
// CHECK-NEXT:                     ^
// CHECK-NOT:{{.*}}error{{.*}}
// STDIN: <stdin>:7:22: error: Expected ','
