// --verify-diagnostics: each expected-error annotation must be produced on its line
// and no other error may occur; then the tool succeeds (exit 0) and prints nothing to
// stderr. All the designators: none (same line), @+N, @-N, @above, @below, -re.
// RUN: pkc-opt --split-input-file --verify-diagnostics %s 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=ERR --allow-empty --input-file %t.err
// ERR-NOT: {{.}}

// Chunks without errors still print their output; failing chunks print nothing.
// CHECK:      func.func @fine()
// CHECK-NEXT:   func.return
// CHECK:      // -----
// CHECK-NEXT: // -----
func.func @fine() {
  func.return
}

// -----

func.func @next_line() -> i32 {
  // expected-error @+1 {{'func.return' op Expected arguments to have the same types as the function output types}}
  func.return
}

// -----

func.func @previous_line() -> i32 {
  func.return
  // expected-error @-1 {{expected [i32], got []}}
}

// -----

func.func @above() -> i32 {
  func.return
  // expected-error @above {{'func.return' op}}
}

// -----

// expected-error @below {{unknown operation 'foo.bar': dialect 'foo' is not registered}}
"foo.bar"() : () -> ()

// -----

func.func @same_line(%a: i32) {
  %c = arith.addi %a : i32 // expected-error {{Expected ','}}
}

// -----

// expected-error-re @+1 {{unknown operation 'arith.{{[a-z]+}}': dialect 'arith' has no such op}}
arith.frobnicate
