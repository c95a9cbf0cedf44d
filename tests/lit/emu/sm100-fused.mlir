// RUN: %python -m pkc.emu %s -p 'default{force=true},schedule-fused{target=b200},dce' --target sm_100a --func mm_rs | FileCheck %s

// python -m pkc.emu: the fused GEMM + reduce-scatter that schedule-fused builds for b200
// (the tensor-memory GEMM with the reduce-scatter epilogue), lowered to tcgen05 (sm_100a),
// runs on 3 emulated ranks and matches the reference interpreter (no Blackwell GPU has run
// it).

func.func @mm_rs(%x: tensor<90x24xbf16>, %w: tensor<40x24xbf16>) -> tensor<30x40xbf16> {
  %wt = pk.transpose %w {perm = [1, 0]} : tensor<40x24xbf16> -> tensor<24x40xbf16>
  %c = pk.matmul %x, %wt : (tensor<90x24xbf16>, tensor<24x40xbf16>) -> tensor<90x40xbf16>
  %o = pk.reduce_scatter %c {dim = 0 : i64, reduce = "sum", world = 3 : i64} : tensor<90x40xbf16> -> tensor<30x40xbf16>
  func.return %o : tensor<30x40xbf16>
}

// CHECK: ok   @matmul_reduce_scatter: 3 rank(s), sm_100a, {{.*}} {{(bitwise|within tolerance)}}
// CHECK: 1 kernel(s) match the interpreter
