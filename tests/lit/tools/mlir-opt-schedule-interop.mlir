// Schedule-level IR (pks) round-trips through upstream mlir-opt: a scheduled GEMM, a
// scheduled fused GEMM + reduce-scatter, a scheduled (LL) all-reduce and a scheduled MoE
// kernel. pkc's plain integer attributes (IntAttr, `#builtin.int<N>` in pkc's own form)
// print as MLIR's `N : i64` in the generic form (pkc/mlir_ints.py) and read back as IntAttr.
// REQUIRES: mlir-opt
// RUN: pkc-opt %s -p 'default{force=true},schedule,schedule-matmul,dce' --print-op-generic > %t.generic.mlir
// (1) mlir-opt accepts pkc's generic form; %t.ref is what it prints, with its SSA names.
// RUN: mlir-opt --allow-unregistered-dialect %t.generic.mlir > %t.custom.mlir
// RUN: mlir-opt --allow-unregistered-dialect --mlir-print-op-generic %t.generic.mlir > %t.ref.mlir
// RUN: FileCheck %s --check-prefix=MLIR < %t.custom.mlir
// (2) pkc-opt reads both of mlir-opt's forms and verifies; (3) printing again changes
// nothing: the same text after one more trip, through pkc's generic and custom forms.
// RUN: pkc-opt %t.custom.mlir --print-op-generic | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic > %t.rt1.mlir
// RUN: diff %t.ref.mlir %t.rt1.mlir
// RUN: pkc-opt %t.ref.mlir > %t.back.mlir
// RUN: pkc-opt %t.back.mlir --print-op-generic | mlir-opt --allow-unregistered-dialect --mlir-print-op-generic > %t.rt2.mlir
// RUN: diff %t.ref.mlir %t.rt2.mlir
// (4) pkc's own form is unchanged: integers read back as IntAttr.
// RUN: FileCheck %s --check-prefix=BACK < %t.back.mlir

// MLIR-LABEL: func.func @gemm(
// MLIR:         "pks.mbarrier_arrive"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 0>}> {tx_bytes = 32768 : i64}
// MLIR:         }) {bm = 128 : i64, bn = 128 : i64, group_m = 8 : i64} : (i32, i32, i32, i32) -> (i32, i32)
// MLIR-NEXT:    "pks.yield"() : () -> ()
// MLIR-NEXT:  }) {first = 0 : i64, kind = "producer", regs = 40 : i64, single_thread = 1 : i64, warpgroups = 1 : i64}
// MLIR:       }) {first = 1 : i64, kind = "consumer", regs = 232 : i64, warpgroups = 2 : i64}
// MLIR-NEXT:  }) {cluster = 1 : i64, threads = 384 : i64, timeout_ns = 20000000000 : i64}
// MLIR-LABEL: func.func @gemm_rs(
// MLIR:         }) {bm = 128 : i64, bn = 128 : i64, chunks = 3 : i64, group_m = 8 : i64}
// MLIR:         "pks.signal_wait"({{.*}}) {scope = "sys", site = 1 : i64, sleep_ns = 64 : i64}
// MLIR-LABEL: func.func @all_reduce(
// MLIR:         "pks.ll_wait"
// MLIR:       }) {stride = 512 : i64, unroll = 1 : i64}
// MLIR-NEXT:  }) {cluster = 1 : i64, threads = 512 : i64, timeout_ns = 0 : i64}
// MLIR-LABEL: func.func @moe(
// MLIR:         "pks.tmap_view"({{.*}}) {dims = [4, 64, 64]} : (!pk.buffer<256x64xbf16>) -> !pks.tmap<bf16, 64x128x1, swizzle 128>
// MLIR:         }) {bm = 128 : i64, bn = 128 : i64, capacity = 64 : i64, experts = 2 : i64, sources = 2 : i64}

// BACK-LABEL: func.func @gemm(
// BACK:         "pks.mbarrier_arrive"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 0>}> {tx_bytes = #builtin.int<32768>}
// BACK:         }) {bm = #builtin.int<128>, bn = #builtin.int<128>, group_m = #builtin.int<8>}
// BACK:       }) {first = #builtin.int<1>, kind = "consumer", regs = #builtin.int<232>, warpgroups = #builtin.int<2>}
// BACK-NEXT:  }) {cluster = #builtin.int<1>, threads = #builtin.int<384>, timeout_ns = #builtin.int<20000000000>}
// BACK-LABEL: func.func @gemm_rs(
// BACK:         }) {bm = #builtin.int<128>, bn = #builtin.int<128>, chunks = #builtin.int<3>, group_m = #builtin.int<8>}
// BACK-LABEL: func.func @all_reduce(
// BACK:       }) {stride = #builtin.int<512>, unroll = #builtin.int<1>}
// BACK-LABEL: func.func @moe(
// BACK:         "pks.tmap_view"({{.*}}) {dims = [#builtin.int<4>, #builtin.int<64>, #builtin.int<64>]}
// BACK:         }) {bm = #builtin.int<128>, bn = #builtin.int<128>, capacity = #builtin.int<64>, experts = #builtin.int<2>, sources = #builtin.int<2>}

func.func @gemm(%x: tensor<256x128xbf16>, %w: tensor<128x256xbf16>) -> tensor<256x256xbf16> {
  %y = pk.matmul %x, %w : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xbf16>
  func.return %y : tensor<256x256xbf16>
}

func.func @gemm_rs(%x: tensor<597x72xbf16>, %w: tensor<136x72xbf16>) -> tensor<199x136xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<136x72xbf16> -> tensor<72x136xbf16>
  %c = pk.matmul %x, %wt : (tensor<597x72xbf16>, tensor<72x136xbf16>) -> tensor<597x136xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 3 : i64} : tensor<597x136xbf16> -> tensor<199x136xbf16>
  func.return %o : tensor<199x136xbf16>
}

func.func @all_reduce(%x: tensor<6x64xbf16>) -> tensor<6x64xbf16> {
  %y = pk.all_reduce %x {world = 4 : i64, reduce = "sum"} : tensor<6x64xbf16> -> tensor<6x64xbf16>
  func.return %y : tensor<6x64xbf16>
}

func.func @moe(%x: tensor<4x64x64xbf16>, %w: tensor<2x128x64xbf16>) -> tensor<4x64x128xbf16> {
  %wt = pk.transpose %w {perm = [0 : i64, 2 : i64, 1 : i64]} : tensor<2x128x64xbf16> -> tensor<2x64x128xbf16>
  %d = pk.all_to_all %x {split_dim = 0 : i64, concat_dim = 1 : i64, world = 2 : i64} : tensor<4x64x64xbf16> -> tensor<2x128x64xbf16>
  %y = pk.matmul %d, %wt : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xbf16>
  %o = pk.all_to_all %y {split_dim = 1 : i64, concat_dim = 0 : i64, world = 2 : i64} : tensor<2x128x128xbf16> -> tensor<4x64x128xbf16>
  func.return %o : tensor<4x64x128xbf16>
}
