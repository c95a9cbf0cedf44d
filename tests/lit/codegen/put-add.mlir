// RUN: %python -m pkc.codegen %s --target=sm_90a | FileCheck %s --check-prefix=BULK
// RUN: %python -m pkc.codegen %s --target=sm_90a --no-bulk | FileCheck %s --check-prefix=RED
// RUN: %python -m pkc.codegen %s --target=sm_80 | FileCheck %s --check-prefix=CAS
// RUN: %if ptxas %{ %python -m pkc.codegen %s --target=sm_90a --check 2>&1 >/dev/null | FileCheck %s --check-prefix=PTXAS %}

// pk.put ... add into a peer's symmetric buffer, per element type and target:
// rows as cp.reduce.async.bulk .add on sm_90a (rows of 64 f32 / 64 bf16 are 16-byte
// multiples), red.relaxed.sys .add per element otherwise, a CAS loop for bf16 on sm_80.

// BULK: fence.proxy.async.shared::cta;
// BULK: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd{{[0-9]+}}], [%r{{[0-9]+}}], %r{{[0-9]+}};
// BULK: cp.async.bulk.commit_group;
// BULK-NEXT: cp.async.bulk.wait_group 0;
// BULK-NEXT: fence.proxy.async.global;
// BULK: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16
// BULK: red.release.sys.global.add.u32

// RED-NOT: cp.reduce.async.bulk
// RED: red.relaxed.sys.global.add.f32
// RED: red.relaxed.sys.global.add.noftz.bf16

// CAS: red.relaxed.sys.global.add.f32
// CAS: ld.relaxed.sys.global.u32
// CAS: atom.relaxed.sys.global.cas.b32

// PTXAS: ptxas: put_adds [sm_90a]: {{[0-9]+}} registers

func.func @main(%x: tensor<32x64xf32>, %h: tensor<32x64xbf16>) -> (tensor<32x64xf32>, tensor<32x64xbf16>) {
  %y, %z = pk.kernel "put_adds" (%x, %h) {world = 2 : i64} : (tensor<32x64xf32>, tensor<32x64xbf16>) -> (tensor<32x64xf32>, tensor<32x64xbf16>) {
  ^bb0(%X: !pk.buffer<32x64xf32>, %H: !pk.buffer<32x64xbf16>, %Y: !pk.buffer<32x64xf32, symmetric>, %Z: !pk.buffer<32x64xbf16, symmetric>):
    %sig = pk.alloc_signals : !pk.signals<1>
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rank = pk.rank
      %peer = arith.remui %rank, %c1 : index
      %t = pk.load %X[%c0, %c0] : !pk.buffer<32x64xf32> -> !pk.tile<32x64xf32>
      pk.put %t, %Y[%c0, %c0] to %peer add : !pk.tile<32x64xf32>, !pk.buffer<32x64xf32, symmetric>
      %u = pk.load %H[%c0, %c0] : !pk.buffer<32x64xbf16> -> !pk.tile<32x64xbf16>
      pk.put %u, %Z[%c0, %c0] to %peer add : !pk.tile<32x64xbf16>, !pk.buffer<32x64xbf16, symmetric>
      pk.signal %sig[%c0] to %peer : !pk.signals<1>
      pk.yield
    }
    pk.yield
  }
  func.return %y, %z : tensor<32x64xf32>, tensor<32x64xbf16>
}
