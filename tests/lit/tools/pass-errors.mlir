// A pass that reports an error at an op: one diagnostic at the op's file:line:col, exit 1.
// A pass that crashes (a bug): `pkc-opt: internal error:` naming the pass, exit 2, and no
// traceback unless PKC_DEBUG is set.
// RUN: not pkc-opt --load-pass-plugin %S/Inputs/test_passes.py %s -p test-reject-func 2>&1 | FileCheck %s --check-prefix=REJECT
// RUN: not pkc-opt --load-pass-plugin %S/Inputs/test_passes.py %s -p test-crash 2>&1 | FileCheck %s --check-prefix=CRASH
// RUN: pkc-opt --load-pass-plugin %S/Inputs/test_passes.py --verify-diagnostics %s -p test-reject-func

func.func @good() {
  func.return
}

// REJECT: pass-errors.mlir:[[# @LINE + 2]]:1: error: 'func.func' op rejected function @bad
// expected-error @+1 {{'func.func' op rejected function @bad}}
func.func @bad() {
  func.return
}
// REJECT-NOT: error

// CRASH:      pkc-opt: internal error: pass 'test-crash' crashed: KeyError: 'boom'
// CRASH-NEXT: pkc-opt: this is a bug in pkc; rerun with PKC_DEBUG=1 for the traceback
// CRASH-NOT:  Traceback
