// With --split-input-file, each bad chunk gets its own diagnostic, with a line number
// of the whole file; the good chunk's output is still printed, and the exit status is 1.
// RUN: not pkc-opt --split-input-file %s 2>%t.err | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=ERR --input-file %t.err

// OUT: func.func @good()

func.func @good() {
  func.return
}

// -----

func.func @bad_verify() -> i32 {
  // ERR: split-errors.mlir:[[# @LINE + 1]]:3: error: 'func.return' op Expected arguments to have the same types as the function output types: expected [i32], got []
  func.return
}

// -----

func.func @bad_syntax(%a: i32) {
  // ERR: split-errors.mlir:[[# @LINE + 1]]:22: error: Expected ','
  %c = arith.addi %a : i32
  func.return
}
// ERR-NOT: error
