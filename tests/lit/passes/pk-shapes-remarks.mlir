// PK's shapes on the H200 target at W = 8: every pattern gets a decision with predicted
// times, and the chosen split / overlap style is explained against the alternatives.
// RUN: pkc-opt %S/../../../examples/ir/pk_shapes_w8.mlir -p default --remarks -o /dev/null 2>&1 | FileCheck %s

// CHECK: pk_shapes_w8.mlir:6:3: remark: [pk.kernel] fused all_gather+mm: predicted {{[0-9.]+}} ms vs {{[0-9.]+}} ms unfused; inter-SM, {{[0-9]+}} comm SMs (vs intra-SM {{[0-9.]+}} ms
// CHECK: pk_shapes_w8.mlir:6:3: remark: [pk.kernel] sm-partition: {{[0-9]+}} communicate + {{[0-9]+}} compute SMs of 132 (h200)
// CHECK: pk_shapes_w8.mlir:12:3: remark: [pk.kernel] {{(fused mm\+reduce_scatter|left unfused)}}
// CHECK: pk_shapes_w8.mlir:17:3: remark: [pk.kernel] {{(fused mm\+all_reduce|left unfused)}}
// N = 8192 and up: overlap pays for every pattern.
// CHECK: pk_shapes_w8.mlir:36:3: remark: [pk.kernel] fused all_gather+mm: predicted
// CHECK: pk_shapes_w8.mlir:42:3: remark: [pk.kernel] fused mm+reduce_scatter: predicted
// CHECK: pk_shapes_w8.mlir:47:3: remark: [pk.kernel] fused mm+all_reduce: predicted
// CHECK: pk_shapes_w8.mlir:51:3: remark: [pk.kernel] fused all_gather+mm: predicted
// CHECK: pk_shapes_w8.mlir:57:3: remark: [pk.kernel] fused mm+reduce_scatter: predicted
// CHECK: pk_shapes_w8.mlir:62:3: remark: [pk.kernel] fused mm+all_reduce: predicted
// CHECK: pk_shapes_w8.mlir:66:3: remark: [pk.kernel] fused all_gather+mm: predicted
// CHECK: pk_shapes_w8.mlir:72:3: remark: [pk.kernel] fused mm+reduce_scatter: predicted
// CHECK: pk_shapes_w8.mlir:77:3: remark: [pk.kernel] fused mm+all_reduce: predicted
// The tiny shape stays unfused and its collective is lowered on its own.
// CHECK: pk_shapes_w8.mlir:83:3: remark: [pk.kernel] left unfused: {{.*}}too small for overlap to pay
// CHECK-NEXT: pk_shapes_w8.mlir:83:3: remark: [pk.kernel] reduce_scatter 128 KiB over 8 ranks: direct
