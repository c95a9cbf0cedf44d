// Input from a file, from stdin ('-' or no argument), output to stdout or to -o FILE;
// a missing input file is one error line and exit status 1.
// RUN: pkc-opt %s | FileCheck %s
// RUN: pkc-opt < %s | FileCheck %s
// RUN: pkc-opt - < %s | FileCheck %s
// RUN: pkc-opt %s -o %t.out && FileCheck %s --input-file %t.out
// RUN: not pkc-opt %t.does-not-exist.mlir 2>&1 | FileCheck %s --check-prefix=MISSING

// CHECK: func.func @f()
// MISSING:      pkc-opt: error: could not open input file '{{.*}}does-not-exist.mlir': no such file
// MISSING-NOT:  Traceback

func.func @f() {
  func.return
}
