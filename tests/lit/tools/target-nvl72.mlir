// pkc-opt plans for a 72-GPU NVLink domain with -p 'default{target=nvl72}': the remarks
// and --trace give the nvl72 cost model's predictions at W = 72 (148 SMs per GPU, NVLink 5
// at 702 GB/s reachable, barriers that grow with W: tests/unit/test_cost_world.py works the
// numbers out by hand). --target=sm_100a does not override a target the pipeline names; without one it picks b200 (8 GPUs).
// RUN: pkc-opt %s -p 'default{target=nvl72}' --target=sm_100a --remarks --trace %t.json -o /dev/null 2>&1 | FileCheck %s
// RUN: FileCheck %s --check-prefix=TRACE < %t.json
// RUN: not pkc-opt %s -p default --target=sm_100a -o /dev/null 2>&1 | FileCheck %s --check-prefix=B200

// CHECK: target-nvl72.mlir:12:3: remark: [pk.kernel] fused mm+reduce_scatter: predicted 0.135 ms vs 0.174 ms unfused; intra-SM, communication warp in every SM
func.func @mm_rs(%a: tensor<9216x1024xbf16>, %b: tensor<1024x4096xbf16>) -> tensor<128x4096xbf16> {
  %p = pk.matmul %a, %b : (tensor<9216x1024xbf16>, tensor<1024x4096xbf16>) -> tensor<9216x4096xbf16>
  %y = pk.reduce_scatter %p {dim = 0 : i64, reduce = "sum", world = 72 : i64} : tensor<9216x4096xbf16> -> tensor<128x4096xbf16>
  func.return %y : tensor<128x4096xbf16>
}
// CHECK: remark: [pk.kernel] sm-partition: 148 compute SMs of 148 (nvl72)

// 1 MiB: the two-shot's three barriers of 72 ranks (8.25 us each) dominate; the one-shot
// pushes 71 MiB through one 702 GB/s port.
// CHECK: target-nvl72.mlir:21:3: remark: [pk.kernel] all_reduce 1 MiB over 72 ranks: two-shot 31 us (one-shot 136 us)
func.func @ar(%x: tensor<512x1024xbf16>) -> tensor<512x1024xbf16> {
  %y = pk.all_reduce %x {reduce = "sum", world = 72 : i64} : tensor<512x1024xbf16> -> tensor<512x1024xbf16>
  func.return %y : tensor<512x1024xbf16>
}
// CHECK: remark: [pk.kernel] sm-partition: 16 communicate SMs of 148 (nvl72); 15 TMA SMs saturate the link (702 GB/s)

// The fused kernel's predicted schedule: Blackwell's 148 SMs, barriers of 72 ranks (8.25 us).
// TRACE: "name": "consumer warpgroups (148 SMs)"
// TRACE: "name": "entry barrier"
// TRACE: "dur": 8.25,
// TRACE: "name": "exit barrier"
// TRACE: "dur": 8.25,

// B200: target-nvl72.mlir:12:3: error: 'pk.reduce_scatter' op lower-collectives: world 72 is outside the NVLink domain of b200 (1..8 GPUs)
