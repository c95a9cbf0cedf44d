// RUN: pkc-opt %s --split-input-file --verify-diagnostics

// Types: static shapes and supported element types only.
// expected-error @+1 {{pk types need static shapes}}
func.func @dynamic_tile(%t: !pk.tile<?x4xf32>) {
  func.return
}

// -----

// expected-error @+1 {{!pk.buffer element type i16 is not supported}}
func.func @bad_element(%t: !pk.buffer<4x4xi16>) {
  func.return
}

// -----

// expected-error @+1 {{buffer memory space must be 'local' or 'symmetric', got 'shared'}}
func.func @bad_space(%t: !pk.buffer<4x4xf32, shared>) {
  func.return
}

// -----

func.func @kernel_arg_mismatch(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'pk.kernel' input 0: buffer !pk.buffer<8x4xf32> does not match tensor tensor<8x8xf32>}}
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x4xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "compute" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @kernel_without_worker(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'pk.kernel' @k has no pk.worker}}
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @worker_bad_role(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    // expected-error @+1 {{'pk.worker' role "dma" is not one of compute, communicate}}
    pk.worker "dma" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @worker_without_terminator(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "compute" {
      // expected-error @+1 {{arith.constant terminates block in single-block region but is not a terminator}}
      %c0 = arith.constant 0 : index
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @load_wrong_dtype(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      // expected-error @+1 {{'pk.load' tile element type bf16 differs from buffer !pk.buffer<8x8xf32>}}
      %t = pk.load %in[%c0, %c0] : !pk.buffer<8x8xf32> -> !pk.tile<8x8xbf16>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @load_wrong_rank(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      // expected-error @+1 {{'pk.load' tile !pk.tile<64xf32> and buffer !pk.buffer<8x8xf32> differ in rank}}
      %t = pk.load %in[%c0, %c0] : !pk.buffer<8x8xf32> -> !pk.tile<64xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @mma_wrong_tile_shape(%x: tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  ^bb0(%in: !pk.buffer<8x8xbf16>, %out: !pk.buffer<8x8xbf16>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      %a = pk.load %in[%c0, %c0] : !pk.buffer<8x8xbf16> -> !pk.tile<8x8xbf16>
      %b = pk.load %in[%c0, %c0] : !pk.buffer<8x8xbf16> -> !pk.tile<4x8xbf16>
      %z = pk.tile_fill {value = 0.0 : f32} : !pk.tile<8x8xf32>
      // expected-error @+1 {{'pk.mma' contraction dims differ: a !pk.tile<8x8xbf16> has K=8, b !pk.tile<4x8xbf16> has K=4}}
      %c = pk.mma %a, %b, %z : !pk.tile<8x8xbf16>, !pk.tile<4x8xbf16>, !pk.tile<8x8xf32> -> !pk.tile<8x8xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xbf16>
}

// -----

func.func @mma_bf16_accumulator(%x: tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  ^bb0(%in: !pk.buffer<8x8xbf16>, %out: !pk.buffer<8x8xbf16>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      %a = pk.load %in[%c0, %c0] : !pk.buffer<8x8xbf16> -> !pk.tile<8x8xbf16>
      %z = pk.tile_fill {value = 0.0 : bf16} : !pk.tile<8x8xbf16>
      // expected-error @+1 {{'pk.mma' accumulates in f32, got bf16}}
      %c = pk.mma %a, %a, %z : !pk.tile<8x8xbf16>, !pk.tile<8x8xbf16>, !pk.tile<8x8xbf16> -> !pk.tile<8x8xbf16>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xbf16>
}

// -----

func.func @put_peer_out_of_range(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 4 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32, symmetric>):
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %c4 = arith.constant 4 : index
      %t = pk.load %in[%c0, %c0] : !pk.buffer<8x8xf32> -> !pk.tile<8x8xf32>
      // expected-error @+1 {{'pk.put' peer 4 is outside the world of 4 ranks (0..3)}}
      pk.put %t, %out[%c0, %c0] to %c4 : !pk.tile<8x8xf32>, !pk.buffer<8x8xf32, symmetric>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @put_to_local_buffer(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 4 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %t = pk.load %in[%c0, %c0] : !pk.buffer<8x8xf32> -> !pk.tile<8x8xf32>
      // expected-error @+1 {{'pk.put' needs a symmetric destination buffer, got !pk.buffer<8x8xf32>}}
      pk.put %t, %out[%c0, %c0] to %c0 : !pk.tile<8x8xf32>, !pk.buffer<8x8xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @signal_slot_out_of_range(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    %s = pk.alloc_signals : !pk.signals<2>
    pk.worker "communicate" {
      %c0 = arith.constant 0 : index
      %c2 = arith.constant 2 : index
      // expected-error @+1 {{'pk.signal' slot 2 is outside !pk.signals<2>}}
      pk.signal %s[%c2] to %c0 : !pk.signals<2>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @load_offset_outside(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    pk.worker "compute" {
      %c0 = arith.constant 0 : index
      %c8 = arith.constant 8 : index
      // expected-error @+1 {{'pk.load' offset 8 in dimension 1 is outside !pk.buffer<8x8xf32> (size 8)}}
      %t = pk.load %in[%c0, %c8] : !pk.buffer<8x8xf32> -> !pk.tile<8x8xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @op_in_kernel_body(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{found 'pk.rank' (put it inside a pk.worker)}}
  %y = pk.kernel "k" (%x) {world = 2 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%in: !pk.buffer<8x8xf32>, %out: !pk.buffer<8x8xf32>):
    %r = pk.rank
    pk.worker "compute" {
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<8x8xf32>
}

// -----

func.func @load_outside_worker(%b: !pk.buffer<8x8xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'pk.load' expects ancestor op 'pk.worker'}}
  %t = pk.load %b[%c0, %c0] : !pk.buffer<8x8xf32> -> !pk.tile<8x8xf32>
  func.return
}
