// A one-shot all-reduce over 4 ranks, written by hand at kernel level: every rank puts
// its tile into slot `rank` of every peer's staging buffer, signals the peer, waits for
// all 4 arrivals and sums the 4 slots into its output.
func.func @main(%x: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %y = pk.kernel "all_reduce_one_shot" (%x) {world = 4 : i64} : (tensor<64x32xf32>) -> tensor<64x32xf32> {
  ^bb0(%in: !pk.buffer<64x32xf32>, %out: !pk.buffer<64x32xf32>):
    %stage = pk.alloc : !pk.buffer<256x32xf32, symmetric>
    %arrived = pk.alloc_signals : !pk.signals<1>
    pk.worker "communicate" attributes {sms = 8 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %world = arith.constant 4 : index
      %rank = pk.rank
      %mine = pk.load %in[%c0, %c0] : !pk.buffer<64x32xf32> -> !pk.tile<64x32xf32>
      %row = arith.muli %rank, %c64 : index
      scf.for %peer = %c0 to %world step %c1 {
        pk.put %mine, %stage[%row, %c0] to %peer : !pk.tile<64x32xf32>, !pk.buffer<256x32xf32, symmetric>
        pk.signal %arrived[%c0] to %peer : !pk.signals<1>
      }
      pk.wait %arrived[%c0] until %world : !pk.signals<1>
      %zero = pk.tile_fill {value = 0.0 : f32} : !pk.tile<64x32xf32>
      %sum = scf.for %src = %c0 to %world step %c1 iter_args(%acc = %zero) -> (!pk.tile<64x32xf32>) {
        %off = arith.muli %src, %c64 : index
        %part = pk.load %stage[%off, %c0] : !pk.buffer<256x32xf32, symmetric> -> !pk.tile<64x32xf32>
        %next = pk.tile_map "add" %acc, %part : (!pk.tile<64x32xf32>, !pk.tile<64x32xf32>) -> !pk.tile<64x32xf32>
        scf.yield %next : !pk.tile<64x32xf32>
      }
      pk.store %sum, %out[%c0, %c0] : !pk.tile<64x32xf32>, !pk.buffer<64x32xf32>
      pk.yield
    }
    pk.yield
  }
  func.return %y : tensor<64x32xf32>
}
