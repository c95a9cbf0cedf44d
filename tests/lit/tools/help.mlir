// --help lists the flags and every registered pass with its one-line description and
// its options; passes from --load-pass-plugin files are listed and runnable with options.
// RUN: pkc-opt --help | FileCheck %s
// RUN: pkc-opt --load-pass-plugin %S/Inputs/test_passes.py --help | FileCheck %s --check-prefix=PLUGIN
// RUN: pkc-opt --load-pass-plugin %S/Inputs/test_passes.py %s -p 'test-tag-funcs{tag=stage count=3},cse' | FileCheck %s --check-prefix=OPTS
// RUN: pkc-opt --load-pass-plugin %S/Inputs/test_passes.py %s -p 'test-tag-funcs' | FileCheck %s --check-prefix=DEFAULT
// RUN: not pkc-opt --load-pass-plugin %S/Inputs/test_passes.py %s -p 'test-tag-funcs{count=x}' 2>&1 | FileCheck %s --check-prefix=BADVAL
// RUN: not pkc-opt --load-pass-plugin %S/Inputs/no_such_plugin.py %s 2>&1 | FileCheck %s --check-prefix=NOPLUGIN

// CHECK:      usage: pkc-opt [options] [input.mlir | -]
// CHECK:      -p PIPELINE, --passes PIPELINE
// CHECK:      --print-ir-after-all
// CHECK:      --print-ir-after NAME
// CHECK:      --timing
// CHECK:      --print-op-generic
// CHECK:      --split-input-file
// CHECK:      --verify-diagnostics
// CHECK:      Passes (run them with -p 'a,b{option=value other=value}'):
// CHECK-NEXT:   canonicalize{{ +}}Apply all canonicalization patterns and fold constants (xDSL).
// CHECK-NEXT:   cse{{ +}}Eliminate common subexpressions (xDSL).
// CHECK-NEXT:   dce{{ +}}Remove operations whose results are unused and that have no side effects (xDSL).

// PLUGIN:      test-tag-funcs{{ +}}Set attribute `tag` = "<count>" on every func.func (test pass with options).
// PLUGIN-NEXT: {{ +}}option tag: str = seen
// PLUGIN-NEXT: {{ +}}option count: int = 1

// OPTS:    func.func @f() attributes {stage = "3"} {
// DEFAULT: func.func @f() attributes {seen = "1"} {
// BADVAL:  pkc-opt: error: bad options for pass 'test-tag-funcs': {{.*}}; its options: tag: str = seen, count: int = 1
// NOPLUGIN: pkc-opt: error: could not open pass plugin '{{.*}}no_such_plugin.py': no such file

func.func @f() {
  func.return
}
