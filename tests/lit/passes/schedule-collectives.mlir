// schedule-collectives: lowered collective kernels become scheduled (pks) kernels of
// communication ops; the algorithm comes from the plan and the tuning table
// (pkc/target/comm_tuning.py), written into pk.plan and a remark.
// RUN: pkc-opt -p 'lower-collectives{all_reduce=one_shot all_gather=direct reduce_scatter=direct},schedule-collectives' %s | FileCheck %s
// RUN: pkc-opt -p 'lower-collectives{all_reduce=two_shot},schedule-collectives' %s | FileCheck %s --check-prefix=TWO
// RUN: pkc-opt -p 'lower-collectives{all_reduce=one_shot all_gather=direct reduce_scatter=direct},schedule-collectives' --emit=ptx %s | FileCheck %s --check-prefix=PTX

// 768 B at W = 4: the LL all-reduce (flags in the data), into a fresh output.
func.func @small(%x: tensor<6x64xbf16>) -> tensor<6x64xbf16> {
  %y = pk.all_reduce %x {world = 4 : i64, reduce = "sum"} : tensor<6x64xbf16> -> tensor<6x64xbf16>
  func.return %y : tensor<6x64xbf16>
}
// CHECK-LABEL: func.func @small
// CHECK:       pk.kernel "all_reduce_ll"(%view) {{.*}}schedule = "collective", comm_kind = "ll"{{.*}}chunk_vecs = 48 : i64, cta_vecs = 64 : i64, slice_align = 32 : i64, shrink_threads = true, ctas_per_sm = 1 : i64, min_ctas_per_sm = 1 : i64, max_ctas = 132 : i64, fresh_output = true
// CHECK-SAME:  "scheduled collective ll W=4 bf16 (768 B <= the LL limit 131072 B at W = 4): 48 vectors (48 per chunk)
// CHECK:       ^bb0(%{{.*}}: !pk.buffer<1x1x384xbf16>, %{{.*}}: !pk.buffer<1x1x384xbf16>):
// 2 epochs x 4 slots of 48 LL lines (32 bytes each), whole groups of 32 lines
// CHECK-NEXT:    %[[SYM:.*]] = pk.alloc : !pk.buffer<6144xbf16, symmetric>
// CHECK-NEXT:    %[[PADS:.*]] = pk.alloc {zero} : !pk.buffer<1188xi32, symmetric>
// CHECK-NEXT:    %[[CTL:.*]] = pk.alloc {zero} : !pk.buffer<2xi32>
// CHECK-NEXT:    "pks.schedule"()
// The first vector is loaded before the epoch is read (the two latencies overlap).
// CHECK:         "pks.vec_load"
// CHECK:         %[[EP:.*]] = "pks.epoch"(%[[CTL]])
// CHECK-NEXT:    "pks.cluster_sync"
// CHECK:         "pks.ptr"(%[[SYM]], %{{.*}}) : (!pk.buffer<6144xbf16, symmetric>, i32) -> !pks.ptr
// CHECK:         "pks.vec_loop"
// CHECK:           "pks.vec_load"{{.*}}cache = "nc"
// Every peer but the own rank gets the vector as an LL line.
// CHECK:           arith.cmpi ne
// CHECK-NEXT:      "pks.ll_addr"
// CHECK-NEXT:      "pks.ll_store"
// CHECK:           "pks.epoch_publish"(%[[CTL]], %[[EP]]
// CHECK:           "pks.ll_wait"
// CHECK-NEXT:      "pks.ptr"
// CHECK-NEXT:      "pks.vec_sum"{{.*}}dtype = "bf16"
// CHECK-NEXT:      "pks.vec_store"
// CHECK:         unroll = #builtin.int<1>, stride = #builtin.int<512>

// 2 MiB at W = 4: the one-shot push all-reduce: push, arrive (signal every rank, wait
// for every rank), sum the W slots in rank order.
func.func @large(%x: tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16> {
  %y = pk.all_reduce %x {world = 4 : i64, reduce = "sum"} : tensor<1024x1024xbf16> -> tensor<1024x1024xbf16>
  func.return %y : tensor<1024x1024xbf16>
}
// CHECK-LABEL: func.func @large
// CHECK:       pk.kernel "all_reduce_ar1"{{.*}}comm_kind = "ar1", unroll = 4 : i64{{.*}}min_ctas_per_sm = 2
// CHECK-SAME:  (2097152 B > the LL limit 131072 B at W = 4)
// CHECK:         "pks.epoch"
// CHECK-NEXT:    "pks.cluster_sync"
// CHECK-NEXT:    "pks.epoch_publish"
// CHECK:         "pks.vec_loop"
// CHECK-COUNT-4:   "pks.vec_load"
// CHECK-COUNT-16:  "pks.vec_store"
// CHECK:         "pks.cluster_sync"
// CHECK-NEXT:    "pks.when"
// CHECK-NEXT:      "pks.fence_sys"
// CHECK-COUNT-4:   "pks.signal"
// CHECK:         "pks.when"
// CHECK:           "pks.signal_wait"{{.*}}site = #builtin.int<1>
// CHECK:         "pks.cluster_sync"
// CHECK:         "pks.vec_loop"
// CHECK-COUNT-8:   "pks.vec_load"{{.*}}cache = "cg"
// CHECK:           "pks.vec_sum"
// CHECK:         unroll = #builtin.int<2>

// The direct all-gather's result stays in symmetric memory: arrive, push, leave.
func.func @gather(%x: tensor<1024x1024xf32>) -> tensor<2048x1024xf32> {
  %y = pk.all_gather %x {world = 2 : i64, dim = 0 : i64} : tensor<1024x1024xf32> -> tensor<2048x1024xf32>
  func.return %y : tensor<2048x1024xf32>
}
// CHECK-LABEL: func.func @gather
// CHECK:       pk.kernel "all_gather_ag"{{.*}}ctas_per_sm = 2{{.*}}fresh_output = false
// CHECK:       ^bb0(%{{.*}}: !pk.buffer<1x1x1048576xf32>, %{{.*}}: !pk.buffer<1x2x1048576xf32, symmetric>):
// CHECK-NOT:     pk.alloc : !pk.buffer<{{.*}}xf32, symmetric>
// CHECK:         "pks.signal_wait"{{.*}}site = #builtin.int<1>
// CHECK:         "pks.vec_loop"
// CHECK:         "pks.signal_wait"{{.*}}site = #builtin.int<2>

func.func @scatter(%x: tensor<2048x1024xf16>) -> tensor<1024x1024xf16> {
  %y = pk.reduce_scatter %x {world = 2 : i64, dim = 0 : i64, reduce = "sum"} : tensor<2048x1024xf16> -> tensor<1024x1024xf16>
  func.return %y : tensor<1024x1024xf16>
}
// CHECK-LABEL: func.func @scatter
// CHECK:       pk.kernel "reduce_scatter_rs"{{.*}}chunk_vecs = 131072
// Chunk d goes to rank d: the peer's copy chosen from the rank at run time.
// CHECK:         arith.select
// CHECK:         "pks.ptr"(%{{.*}}, %{{.*}}) : (!pk.buffer<{{.*}}xf16, symmetric>, i32) -> !pks.ptr
// CHECK:         "pks.vec_sum"{{.*}}dtype = "f16"

// A gather along columns has no contiguous chunks: left as lowered, with the reason.
func.func @cols(%x: tensor<8x64xbf16>) -> tensor<8x128xbf16> {
  %y = pk.all_gather %x {world = 2 : i64, dim = 1 : i64} : tensor<8x64xbf16> -> tensor<8x128xbf16>
  func.return %y : tensor<8x128xbf16>
}
// CHECK-LABEL: func.func @cols
// CHECK:       pk.kernel "all_gather_direct{{.*}}collective left unscheduled: all_gather along a non-leading dim (view [8, 1, 64]): chunks are not contiguous
// CHECK:       pk.worker

// The two-shot into a fresh output: chunk d to rank d's S; arrive; sum the own chunk into
// the output and every peer's R (the push gather; the own rank's store predicated off);
// leave; copy the other chunks out of the own R.
// TWO-LABEL: func.func @small
// TWO:       pk.kernel "all_reduce_ar2"{{.*}}comm_kind = "ar2", unroll = 2 : i64{{.*}}gather = "push", groups = 1
// TWO-SAME:  "scheduled collective ar2 W=4 bf16 push gather (768 B; the pull gather from 536870912 B at W > 2, 2 CTA groups from 67108864 B): 48 vectors (12 per chunk)
// TWO:       ^bb0(%{{.*}}: !pk.buffer<1x1x384xbf16>, %{{.*}}: !pk.buffer<1x1x384xbf16>):
// R (48 vectors) + S (4 x 12), 8 bf16 each
// TWO-NEXT:    pk.alloc : !pk.buffer<768xbf16, symmetric>
// TWO-COUNT-4: "pks.vec_loop"
// TWO:         "pks.signal_wait"{{.*}}site = #builtin.int<1>
// TWO:         "pks.vec_loop"
// TWO:           "pks.vec_sum"
// TWO-COUNT-5:   "pks.vec_store"
// TWO:         "pks.signal_wait"{{.*}}site = #builtin.int<2>
// TWO:         "pks.vec_loop"
// TWO-COUNT-3:   "pks.vec_load"{{.*}}cache = "cg"

// PTX-LABEL: .visible .entry all_reduce_ll(
// PTX:       .param .u64 alloc0_p3,
// PTX:       .param .u32 trap
// PTX:       .maxntid 512, 1, 1
// PTX:       .minnctapersm 1
// PTX:       ld.global.nc.v4.b32
// PTX:       bar.sync 0;
// PTX:       st.volatile.global.v4.b32 [{{.*}}], {{{.*}}};
// PTX:       st.volatile.global.v4.b32 [{{.*}}+512], {{{.*}}};
// PTX:       atom.global.add.u32
// PTX:       ld.volatile.global.v4.b32
// PTX:       atom.global.cas.b32
// PTX:       cvt.rn.bf16x2.f32
// PTX-LABEL: .visible .entry all_reduce_ar1(
// PTX:       .minnctapersm 2
// PTX:       fence.acq_rel.sys;
// PTX:       red.relaxed.sys.global.add.u32
// PTX:       ld.acquire.sys.global.u32
// PTX:       nanosleep.u32 32;
// PTX:       ld.global.cg.v4.b32
