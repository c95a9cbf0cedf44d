// mlir-opt's spellings work in pkc-opt (issue 19).
// RUN: pkc-opt %s --pass-pipeline='builtin.module(lower-collectives{keep-single-rank=1},sm-partition)' | FileCheck %s --check-prefix=KEEP
// RUN: pkc-opt %s -p 'lower-collectives{keep-single-rank=1},sm-partition' | FileCheck %s --check-prefix=KEEP
// RUN: pkc-opt %s -p 'lower-collectives{keep-single-rank=true}' | FileCheck %s --check-prefix=KEEP
// RUN: pkc-opt %s -p 'lower-collectives{keep-single-rank=0}' | FileCheck %s --check-prefix=DROP
// RUN: pkc-opt %s -p 'lower-collectives{keep-single-rank=false}' | FileCheck %s --check-prefix=DROP
// RUN: not pkc-opt %s --pass-pipeline='builtin.module(func.func(cse))' 2>&1 | FileCheck %s --check-prefix=NESTED
// RUN: not pkc-opt %s -p cse --pass-pipeline='builtin.module(cse)' 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: pkc-opt %s -p dce --mlir-print-ir-after-all -o /dev/null 2>&1 | FileCheck %s --check-prefix=DUMP
// RUN: pkc-opt %s --print-op-generic | FileCheck %s --check-prefix=SORTED
// RUN: pkc-opt %s --timing -o /dev/null 2>&1 | FileCheck %s --check-prefix=TIMING
// RUN: pkc-opt %s --trace %t.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=TRACE
// RUN: not pkc-opt %s --load-pass-plugin %S/Inputs/clashing_pass.py -p overlap 2>&1 | FileCheck %s --check-prefix=CLASH

// KEEP: pk.kernel "all_reduce_one_shot"
// DROP-NOT: pk.kernel
// DROP: func.return %x
// NESTED: pkc-opt: error: --pass-pipeline 'builtin.module(func.func(cse))': nested pass managers
// BOTH: pkc-opt: error: give the passes with -p or with --pass-pipeline, not both
// DUMP: // -----// IR Dump After dce //----- //
// Attribute dictionaries in the generic form are sorted by name, as mlir-opt prints them.
// SORTED: "pk.all_reduce"(%x) {reduce = "sum", world = 1 : i64}
// TIMING: Start-up (Python, imports)
// TIMING: Parser
// TIMING: Total
// TRACE: pkc-opt: warning: --trace: the module has no fused kernel
// CLASH: pkc-opt: error: failed to load pass plugin '{{.*}}clashing_pass.py': ValueError: pass name 'overlap' registered twice

func.func @main(%x: tensor<16x64xbf16>) -> tensor<16x64xbf16> {
  %y = pk.all_reduce %x {world = 1 : i64, reduce = "sum"} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %y : tensor<16x64xbf16>
}
