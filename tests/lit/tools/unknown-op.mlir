// Unknown ops and dialects: one diagnostic per chunk at the op name, saying whether the
// dialect or only the op is unknown; exit status 1. With --allow-unregistered-dialect the
// unknown-dialect op is kept opaque (an unknown op of a known dialect still fails).
// RUN: not pkc-opt --split-input-file %s 2>&1 | FileCheck %s
// RUN: not pkc-opt --split-input-file --allow-unregistered-dialect %s 2>&1 | FileCheck %s --check-prefix=ALLOW

func.func @custom_form() {
  // CHECK: unknown-op.mlir:[[# @LINE + 1]]:3: error: unknown operation 'arith.frobnicate': dialect 'arith' has no such op
  arith.frobnicate
  func.return
}

// -----

func.func @generic_form() {
  // CHECK: unknown-op.mlir:[[# @LINE + 1]]:8: error: unknown operation 'foo.bar': dialect 'foo' is not registered
  %0 = "foo.bar"() : () -> i32
  // CHECK-NEXT: %0 = "foo.bar"() : () -> i32
  // CHECK-NEXT: ^^^^^^^^^
  func.return
}
// CHECK-NOT: error

// ALLOW:     unknown operation 'arith.frobnicate'
// ALLOW:     "foo.bar"() : () -> i32
// ALLOW-NOT: error
