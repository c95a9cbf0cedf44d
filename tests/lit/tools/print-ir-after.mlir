// --print-ir-after-all prints the IR to stderr after every pass, under MLIR's header;
// --print-ir-after=NAME only after the passes named NAME. stdout has only the result.
// RUN: pkc-opt %s -p canonicalize,cse --print-ir-after-all 2>%t.all | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=ALL --input-file %t.all
// RUN: pkc-opt %s -p canonicalize,cse --print-ir-after=cse 2>%t.one >/dev/null
// RUN: FileCheck %s --check-prefix=ONE --input-file %t.one
// RUN: pkc-opt %s -p canonicalize,cse --print-ir-after-all --print-op-generic 2>%t.gen >/dev/null
// RUN: FileCheck %s --check-prefix=GEN --input-file %t.gen
// RUN: not pkc-opt %s -p cse --print-ir-after=nosuch 2>&1 | FileCheck %s --check-prefix=BAD

// OUT-NOT: IR Dump
// OUT:     func.func @f

// canonicalize folds 1 + 2; cse then merges the two identical addi.
// ALL:      // -----// IR Dump After canonicalize //----- //
// ALL-NEXT: builtin.module {
// ALL-NEXT:   func.func @f(%a: i32) -> i32 {
// ALL-NEXT:     %s = arith.constant 3 : i32
// ALL-NEXT:     %r = arith.addi %a, %s : i32
// ALL-NEXT:     %r2 = arith.addi %a, %s : i32
// ALL-NEXT:     %m = arith.muli %r, %r2 : i32
// ALL-NEXT:     func.return %m : i32
// ALL-NEXT:   }
// ALL-NEXT: }
// ALL-NEXT: // -----// IR Dump After cse //----- //
// ALL-NEXT: builtin.module {
// ALL-NEXT:   func.func @f(%a: i32) -> i32 {
// ALL-NEXT:     %s = arith.constant 3 : i32
// ALL-NEXT:     %r = arith.addi %a, %s : i32
// ALL-NEXT:     %m = arith.muli %r, %r : i32
// ALL-NEXT:     func.return %m : i32
// ALL-NEXT:   }
// ALL-NEXT: }

// ONE-NOT:  IR Dump After canonicalize
// ONE:      // -----// IR Dump After cse //----- //
// ONE-NEXT: builtin.module {
// ONE-NOT:  IR Dump After canonicalize

// GEN:      // -----// IR Dump After canonicalize //----- //
// GEN-NEXT: "builtin.module"() ({

// BAD: pkc-opt: error: --print-ir-after: unknown pass 'nosuch'; available passes: canonicalize, cse, dce{{(, .*)?}}

func.func @f(%a: i32) -> i32 {
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %s = arith.addi %c1, %c2 : i32
  %r = arith.addi %a, %s : i32
  %r2 = arith.addi %a, %s : i32
  %m = arith.muli %r, %r2 : i32
  func.return %m : i32
}
