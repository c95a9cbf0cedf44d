// --verify-diagnostics fails (exit 1) and says why when an expected error is missing,
// is on another line, or an error nobody expected occurs.
// RUN: not pkc-opt --split-input-file --verify-diagnostics %s 2>&1 | FileCheck %s

// A chunk that verifies, with an expectation that is never produced.
func.func @fine() {
  // CHECK: verify-diagnostics-fail.mlir:[[# @LINE + 1]]:6: error: expected error "this never happens" was not produced on line [[# @LINE + 2]]
  // expected-error @+1 {{this never happens}}
  func.return
}

// -----

// The error happens on the line after the one the annotation names.
func.func @wrong_line() -> i32 {
  // CHECK: verify-diagnostics-fail.mlir:[[# @LINE + 3]]:3: error: unexpected error: 'func.return' op Expected arguments
  // CHECK: verify-diagnostics-fail.mlir:[[# @LINE + 1]]:6: error: expected error "Expected arguments" was not produced on line [[# @LINE + 1]]
  // expected-error {{Expected arguments}}
  func.return
}

// -----

// Right line, wrong text.
func.func @wrong_text() -> i32 {
  // CHECK: verify-diagnostics-fail.mlir:[[# @LINE + 3]]:3: error: unexpected error: 'func.return' op Expected arguments
  // CHECK: verify-diagnostics-fail.mlir:[[# @LINE + 1]]:6: error: expected error "some other message" was not produced on line [[# @LINE + 2]]
  // expected-error @+1 {{some other message}}
  func.return
}

// -----

// No annotation at all.
func.func @unexpected() -> i32 {
  // CHECK: verify-diagnostics-fail.mlir:[[# @LINE + 1]]:3: error: unexpected error: 'func.return' op Expected arguments
  func.return
}
// CHECK-NOT: error
