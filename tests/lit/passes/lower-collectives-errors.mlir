// lower-collectives errors: a world larger than the target's NVLink domain is reported at
// the collective; bad options are reported before anything runs.
// RUN: pkc-opt --verify-diagnostics %s -p lower-collectives
// RUN: not pkc-opt %s -p 'lower-collectives{all_reduce=ring}' 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not pkc-opt %s -p 'lower-collectives{target=tpu}' 2>&1 | FileCheck %s --check-prefix=TARGET

// OPT: error: bad options for pass 'lower-collectives': all_reduce='ring' is not one of auto, one_shot, two_shot
// TARGET: error: bad options for pass 'lower-collectives': unknown target 'tpu'; known targets: b200, h100, h200, nvl72

func.func @main(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'pk.all_reduce' op lower-collectives: world 16 is outside the NVLink domain of h200 (1..8 GPUs)}}
  %y = pk.all_reduce %x {world = 16 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  func.return %y : tensor<4x4xf32>
}
