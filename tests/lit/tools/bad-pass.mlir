// Unknown pass names, bad options and bad pipeline syntax: one error line naming the
// pass (and listing the available ones), exit status 1, no traceback.
// RUN: not pkc-opt %s -p cse,nosuch 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not pkc-opt %s -p canonicalise 2>&1 | FileCheck %s --check-prefix=TYPO
// RUN: not pkc-opt %s -p 'cse{bogus=1}' 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not pkc-opt %s -p 'cse dce' 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not pkc-opt %s --no-such-flag 2>&1 | FileCheck %s --check-prefix=FLAG

// UNKNOWN:      pkc-opt: error: unknown pass 'nosuch'; available passes: canonicalize, cse, dce{{(, .*)?}}
// UNKNOWN-NOT:  {{.}}
// TYPO:         pkc-opt: error: unknown pass 'canonicalise' (did you mean 'canonicalize'?); available passes: canonicalize, cse, dce{{(, .*)?}}
// OPTION:       pkc-opt: error: bad options for pass 'cse': {{.*}}"bogus"{{.*}}; its options: none
// OPTION-NOT:   Traceback
// SYNTAX:       pkc-opt: error: invalid pass pipeline 'cse dce' at column 4: Expected a comma or pass arguments here
// FLAG:         pkc-opt: error: unrecognized arguments: --no-such-flag (see pkc-opt --help)

func.func @f() {
  func.return
}
