// RUN: pkc-opt %s -p default --emit=ptx | FileCheck %s
// An fp8 all_gather moves bytes: lower-collectives makes a kernel-level gather of fp8
// tiles. schedule-collectives schedules it on bytes when every chunk is whole 16-byte
// vectors (@main: the LL all-gather moves b32 words, never reads an element); otherwise
// (@odd: 15-byte shards) the portable lowering moves the tiles as u8 (an fp8 byte is
// widened to f32 only where an MMA or a map reads it).

// CHECK: .visible .entry all_gather_llag(
// CHECK: ld.global.nc.v4.b32
// CHECK: .visible .entry all_gather_direct{{(_1)?}}(
// CHECK: ld.global.u8
// CHECK: st.shared.u8
// CHECK: st.global.u8
// CHECK-NOT: cvt.f32.f16
func.func @main(%x: tensor<16x64xf8E4M3FN>) -> tensor<64x64xf8E4M3FN> {
  %y = pk.all_gather %x {dim = 0 : i64, world = 4 : i64} : tensor<16x64xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
  func.return %y : tensor<64x64xf8E4M3FN>
}

func.func @odd(%x: tensor<3x5xf8E4M3FN>) -> tensor<12x5xf8E4M3FN> {
  %y = pk.all_gather %x {dim = 0 : i64, world = 4 : i64} : tensor<3x5xf8E4M3FN> -> tensor<12x5xf8E4M3FN>
  func.return %y : tensor<12x5xf8E4M3FN>
}
