"""Hand-written kernel-level IR used by several tests: a one-shot all-reduce made of puts
and signals, and deliberately broken variants of it."""

ALL_REDUCE = """
func.func @main(%x: tensor<{R}x{C}x{T}>) -> tensor<{R}x{C}x{T}> {{
  %y = pk.kernel "all_reduce_one_shot" (%x) {{world = {W} : i64}} : (tensor<{R}x{C}x{T}>) -> tensor<{R}x{C}x{T}> {{
  ^bb0(%in: !pk.buffer<{R}x{C}x{T}>, %out: !pk.buffer<{R}x{C}x{T}>):
    %stage = pk.alloc : !pk.buffer<{WR}x{C}x{T}, symmetric>
    %arrived = pk.alloc_signals : !pk.signals<1>
    pk.worker "communicate" attributes {{sms = 8 : i64}} {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = arith.constant {R} : index
      %world = arith.constant {W} : index
      %expected = arith.constant {EXPECTED} : index
      %rank = pk.rank
      %mine = pk.load %in[%c0, %c0] : !pk.buffer<{R}x{C}x{T}> -> !pk.tile<{TR}x{TC}x{T}>
      %row = arith.muli %rank, %rows : index
      %first_peer = arith.constant {FIRST_PEER} : index
      scf.for %i = %c0 to %world step %c1 {{
        %shifted = arith.addi %i, %rank : index
        %peer0 = arith.remui %shifted, %world : index
        %peer = arith.addi %peer0, %first_peer : index
        pk.put %mine, %stage[%row, %c0] to %peer : !pk.tile<{TR}x{TC}x{T}>, !pk.buffer<{WR}x{C}x{T}, symmetric>
        {SIGNAL}
      }}
      {WAIT}
      %zero = pk.tile_fill {{value = 0.0 : {T}}} : !pk.tile<{TR}x{TC}x{T}>
      %sum = scf.for %src = %c0 to %world step %c1 iter_args(%acc = %zero) -> (!pk.tile<{TR}x{TC}x{T}>) {{
        %off = arith.muli %src, %rows : index
        %part = pk.load %stage[%off, %c0] : !pk.buffer<{WR}x{C}x{T}, symmetric> -> !pk.tile<{TR}x{TC}x{T}>
        %next = pk.tile_map "add" %acc, %part : (!pk.tile<{TR}x{TC}x{T}>, !pk.tile<{TR}x{TC}x{T}>) -> !pk.tile<{TR}x{TC}x{T}>
        scf.yield %next : !pk.tile<{TR}x{TC}x{T}>
      }}
      pk.store %sum, %out[%c0, %c0] : !pk.tile<{TR}x{TC}x{T}>, !pk.buffer<{R}x{C}x{T}>
      pk.yield
    }}
    pk.yield
  }}
  func.return %y : tensor<{R}x{C}x{T}>
}}
"""

SIGNAL = "pk.signal %arrived[%c0] to %peer : !pk.signals<1>"
WAIT = "pk.wait %arrived[%c0] until %expected : !pk.signals<1>"


def all_reduce_ir(world: int, rows: int = 8, cols: int = 16, dtype: str = "f32", *,
                  expected: int | None = None, signal: bool = True, wait: bool = True,
                  first_peer: int = 0, tile: tuple[int, int] | None = None) -> str:
    """A one-shot all-reduce over ``world`` ranks. The keyword arguments break it on
    purpose: a wrong threshold, no signal, no wait, peers shifted out of the world, a tile
    that does not cover the buffer."""
    tr, tc = tile or (rows, cols)
    return ALL_REDUCE.format(
        W=world, R=rows, C=cols, T=dtype, WR=world * rows, TR=tr, TC=tc,
        EXPECTED=world if expected is None else expected,
        SIGNAL=SIGNAL if signal else "", WAIT=WAIT if wait else "", FIRST_PEER=first_peer,
    )
