// RUN: %python -m pkc.codegen %s --target=sm_90a | FileCheck %s
// RUN: %python -m pkc.codegen %s --target=sm_80 | FileCheck %s --check-prefix=PORTABLE
// RUN: %if ptxas %{ %python -m pkc.codegen %s --target=sm_100a --check 2>&1 >/dev/null | FileCheck %s --check-prefix=PTXAS %}

// A one-shot all-reduce (puts, signals, a wait): the module header, the kernel ABI, the
// release signal, and the bounded acquire spin that records a timeout and exits.

// CHECK: .version 8.7
// CHECK-NEXT: .target sm_90a
// CHECK-NEXT: .address_size 64
// CHECK: .extern .shared .align 128 .b8 pk_smem[];
// CHECK: .visible .entry all_reduce_one_shot(
// CHECK-NEXT: .param .u64 buf0_in,
// CHECK-NEXT: .param .u64 buf1_out,
// CHECK-NEXT: .param .u64 buf2_stage,
// CHECK-NEXT: .param .u64 sig0_arrived,
// CHECK-NEXT: .param .u32 rank,
// CHECK-NEXT: .param .u32 world,
// CHECK-NEXT: .param .u64 error,
// CHECK-NEXT: .param .u64 workspace,
// CHECK-NEXT: .param .u64 timeout_ns,
// CHECK-NEXT: .param .u32 ctas_w0
// CHECK-NEXT: )
// CHECK-NEXT: .maxntid 128, 1, 1

// The signal: after a CTA barrier, thread 0 adds to the peer's counter with release.
// CHECK: pk.signal arrived: red.release.sys on the peer's counter
// CHECK: bar.sync 0;
// CHECK: red.release.sys.global.add.u32 [%rd{{[0-9]+}}], %r{{[0-9]+}};

// The wait: a spin on ld.acquire.sys bounded by %globaltimer and timeout_ns.
// CHECK: pk.wait arrived: bounded ld.acquire.sys spin
// CHECK: mov.u64 [[START:%rd[0-9]+]], %globaltimer;
// CHECK-NEXT: [[LOOP:\$L_spin_[0-9]+]]:
// CHECK-NEXT: ld.acquire.sys.global.u32 [[SEEN:%r[0-9]+]], [%rd{{[0-9]+}}];
// CHECK-NEXT: setp.ge.u32 [[OK:%p[0-9]+]], [[SEEN]], %r{{[0-9]+}};
// CHECK-NEXT: mov.u64 [[NOW:%rd[0-9]+]], %globaltimer;
// CHECK-NEXT: sub.u64 [[NOW]], [[NOW]], [[START]];
// CHECK-NEXT: setp.gt.u64 [[TO:%p[0-9]+]], [[NOW]], %rd{{[0-9]+}};
// CHECK: @[[OK]] bra [[DONE:\$L_spin_done_[0-9]+]];
// CHECK-NEXT: @[[TO]] bra [[DONE]];
// CHECK-NEXT: nanosleep.u32 32;
// CHECK-NEXT: bra [[LOOP]];
// CHECK-NEXT: [[DONE]]:
// On timeout: claim the error record, fill it, flag the CTA, and every thread exits.
// CHECK: @![[TO]] bra
// CHECK: atom.global.cas.b32
// CHECK: st.shared.u32
// CHECK: bar.sync 0;
// CHECK: ld.shared.u32
// CHECK: exit;

// PORTABLE: .target sm_80
// PORTABLE-NOT: cp.async.bulk
// PORTABLE: red.release.sys.global.add.u32
// PORTABLE: ld.acquire.sys.global.u32

// PTXAS: ptxas: all_reduce_one_shot [sm_100a]: {{[0-9]+}} registers, {{[0-9]+}} bytes smem, {{[0-9]+}} bytes stack, 0 bytes spill stores

func.func @main(%x: tensor<8x16xbf16>) -> tensor<8x16xbf16> {
  %y = pk.kernel "all_reduce_one_shot" (%x) {world = 2 : i64} : (tensor<8x16xbf16>) -> tensor<8x16xbf16> {
  ^bb0(%in: !pk.buffer<8x16xbf16>, %out: !pk.buffer<8x16xbf16>):
    %stage = pk.alloc : !pk.buffer<16x16xbf16, symmetric>
    %arrived = pk.alloc_signals : !pk.signals<1>
    pk.worker "communicate" attributes {sms = 8 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = arith.constant 8 : index
      %world = arith.constant 2 : index
      %rank = pk.rank
      %mine = pk.load %in[%c0, %c0] : !pk.buffer<8x16xbf16> -> !pk.tile<8x16xbf16>
      %row = arith.muli %rank, %rows : index
      scf.for %peer = %c0 to %world step %c1 {
        pk.put %mine, %stage[%row, %c0] to %peer : !pk.tile<8x16xbf16>, !pk.buffer<16x16xbf16, symmetric>
        pk.signal %arrived[%c0] to %peer : !pk.signals<1>
      }
      pk.wait %arrived[%c0] until %world : !pk.signals<1>
      %zero = pk.tile_fill {value = 0.0 : f32} : !pk.tile<8x16xf32>
      %sum = scf.for %src = %c0 to %world step %c1 iter_args(%acc = %zero) -> (!pk.tile<8x16xf32>) {
        %off = arith.muli %src, %rows : index
        %part = pk.load %stage[%off, %c0] : !pk.buffer<16x16xbf16, symmetric> -> !pk.tile<8x16xbf16>
        %wide = pk.tile_map "cast" %part : (!pk.tile<8x16xbf16>) -> !pk.tile<8x16xf32>
        %next = pk.tile_map "add" %acc, %wide : (!pk.tile<8x16xf32>, !pk.tile<8x16xf32>) -> !pk.tile<8x16xf32>
        scf.yield %next : !pk.tile<8x16xf32>
      }
      %res = pk.tile_map "cast" %sum : (!pk.tile<8x16xf32>) -> !pk.tile<8x16xbf16>
      pk.store %res, %out[%c0, %c0] : !pk.tile<8x16xbf16>, !pk.buffer<8x16xbf16>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x16xbf16>
}
