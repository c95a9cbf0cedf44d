// pkc-opt --target=sm_100a plans with the b200 cost target: every pass that takes a
// target (overlap, lower-collectives, sm-partition; the schedule passes) gets it unless the
// pipeline names one for that pass. The remarks give B200 predictions (148 SMs, NVLink 5 at
// 702 GB/s reachable, barriers of 8 ranks: tests/unit/test_cost_world.py by hand).
// RUN: pkc-opt %s -p default --target=sm_100a --remarks -o /dev/null 2>&1 | FileCheck %s
// RUN: pkc-opt %s -p default --remarks -o /dev/null 2>&1 | FileCheck %s --check-prefix=H200
// RUN: pkc-opt %s -p 'overlap,buffer-elision,lower-collectives{target=h200},sm-partition' --target=sm_100a | FileCheck %s --check-prefix=MIXED

// CHECK: target-b200.mlir:12:3: remark: [pk.kernel] fused mm+reduce_scatter: predicted 0.023 ms vs 0.0275 ms unfused; inter-SM, 24 comm SMs
func.func @mm_rs(%a: tensor<1024x1024xbf16>, %b: tensor<1024x4096xbf16>) -> tensor<128x4096xbf16> {
  %p = pk.matmul %a, %b : (tensor<1024x1024xbf16>, tensor<1024x4096xbf16>) -> tensor<1024x4096xbf16>
  %y = pk.reduce_scatter %p {dim = 0 : i64, reduce = "sum", world = 8 : i64} : tensor<1024x4096xbf16> -> tensor<128x4096xbf16>
  func.return %y : tensor<128x4096xbf16>
}
// CHECK: remark: [pk.kernel] sm-partition: 24 communicate + 124 compute SMs of 148 (b200)

// 1 MiB over 8 B200s: two-shot 3 us launch + 3 barriers of 2.45 us + 2 x 1.46 us of data.
// CHECK: target-b200.mlir:21:3: remark: [pk.kernel] all_reduce 1 MiB over 8 ranks: two-shot 13.3 us (one-shot 19.7 us)
// CHECK: remark: [pk.kernel] sm-partition: 16 communicate SMs of 148 (b200); 15 TMA SMs saturate the link (702 GB/s)
func.func @ar(%x: tensor<512x1024xbf16>) -> tensor<512x1024xbf16> {
  %y = pk.all_reduce %x {reduce = "sum", world = 8 : i64} : tensor<512x1024xbf16> -> tensor<512x1024xbf16>
  func.return %y : tensor<512x1024xbf16>
}

// Without --target (sm_90a): the h200 figures (132 SMs).
// H200: remark: [pk.kernel] sm-partition: {{.*}} of 132 (h200)
// H200: remark: [pk.kernel] all_reduce 1 MiB over 8 ranks: two-shot {{[0-9.]+}} us
// H200: remark: [pk.kernel] sm-partition: {{.*}} of 132 (h200)

// A target named for one pass stays; the others get b200: the all-reduce is lowered with
// the h200 figures (15.8 us, not 13.3), and sm-partition (b200) still gives it 16 SMs (15 saturate NVLink 5;
// 8 on h200).
// MIXED: pk.plan = {{.*}}pattern = "mm_reduce_scatter"{{.*}}target = "b200"
// MIXED: pk.kernel "all_reduce_two_shot"{{.*}}target = "h200"{{.*}}sms_communicate = 16 : i64{{.*}}"all_reduce 1 MiB over 8 ranks: two-shot 15.8 us (one-shot 30 us)"
