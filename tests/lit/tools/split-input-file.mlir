// --split-input-file: chunks are processed on their own and the outputs are joined
// with `// -----`. Without it, the same file is one module with both functions.
// RUN: pkc-opt --split-input-file %s | FileCheck %s
// RUN: pkc-opt %s | FileCheck %s --check-prefix=WHOLE

// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @first() {
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NEXT: // -----
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   func.func @second() {
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NOT:  // -----

// WHOLE:     builtin.module {
// WHOLE-NEXT:  func.func @first() {
// WHOLE:       func.func @second() {
// WHOLE-NOT: // -----

func.func @first() {
  func.return
}

// -----

func.func @second() {
  func.return
}
