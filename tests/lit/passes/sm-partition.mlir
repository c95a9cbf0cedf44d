// sm-partition sets `sms` on every worker: communicate workers get the overlap plan's
// comm_sms (on the green-context grid: multiples of 8, at least 8 on h200), or what the
// cost model says saturates the link; compute workers get the rest of the SMs.
// RUN: pkc-opt -p 'sm-partition' %s | FileCheck %s
// RUN: pkc-opt -p 'sm-partition{target=b200}' %s | FileCheck %s --check-prefix=B200
// RUN: pkc-opt -p 'lower-collectives,sm-partition' %s | FileCheck %s --check-prefix=LOWERED

// CHECK-LABEL: func.func @planned
// CHECK:       pk.kernel "mm_rs"
// CHECK-SAME:    pk.plan = {comm_sms = 16 : i64, overlap = "inter", sms_communicate = 16 : i64, sms_compute = 116 : i64}
// CHECK-SAME:    pk.remarks = ["sm-partition: 16 communicate + 116 compute SMs of 132 (h200); communicate SMs from the overlap plan"]
// CHECK:       pk.worker "compute" attributes {sms = 116 : i64} {
// CHECK:       pk.worker "communicate" attributes {sms = 16 : i64} {
// B200-LABEL:  func.func @planned
// B200:        pk.worker "compute" attributes {sms = 132 : i64} {
// B200:        pk.worker "communicate" attributes {sms = 16 : i64} {
func.func @planned(%x: tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  %y = pk.kernel "mm_rs" (%x) {world = 8 : i64, pk.plan = {comm_sms = 16 : i64, overlap = "inter"}} : (tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  ^bb0(%in: !pk.buffer<64x64xbf16>, %out: !pk.buffer<64x64xbf16>):
    pk.worker "compute" {
      pk.yield
    }
    pk.worker "communicate" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<64x64xbf16>
}

// Without a plan: the link saturates with 8 TMA SMs on h200 (370 GB/s), 15 -> 16 on b200.
// CHECK-LABEL: func.func @unplanned
// CHECK:       "sm-partition: 8 communicate + 124 compute SMs of 132 (h200); 8 TMA SMs saturate the link (370 GB/s)"
// CHECK:       pk.worker "compute" attributes {sms = 124 : i64} {
// CHECK:       pk.worker "communicate" attributes {sms = 8 : i64} {
// B200-LABEL:  func.func @unplanned
// B200:        "sm-partition: 16 communicate + 132 compute SMs of 148 (b200); 15 TMA SMs saturate the link (702 GB/s)"
func.func @unplanned(%x: tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  %y = pk.kernel "unplanned" (%x) {world = 8 : i64} : (tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  ^bb0(%in: !pk.buffer<64x64xbf16>, %out: !pk.buffer<64x64xbf16>):
    pk.worker "compute" {
      pk.yield
    }
    pk.worker "communicate" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<64x64xbf16>
}

// A lowered collective has only a communicate worker: it gets what the model says it needs.
// LOWERED-LABEL: func.func @collective
// LOWERED:       pk.kernel "all_reduce_two_shot"
// LOWERED-SAME:    sms_communicate = 8 : i64, sms_compute = 0 : i64
// LOWERED-SAME:    "sm-partition: 8 communicate SMs of 132 (h200); 8 TMA SMs saturate the link (370 GB/s)"
// LOWERED:       pk.worker "communicate" attributes {sms = 8 : i64} {
func.func @collective(%x: tensor<2048x1024xbf16>) -> tensor<2048x1024xbf16> {
  %y = pk.all_reduce %x {world = 8 : i64, reduce = "sum"} : tensor<2048x1024xbf16> -> tensor<2048x1024xbf16>
  func.return %y : tensor<2048x1024xbf16>
}
