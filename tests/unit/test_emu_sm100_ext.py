"""The emulator's model of the sm_100a instructions beyond the plain GEMM's, on small
hand-built kernels: M = 64 MMAs (data path layout F), CTA-pair MMAs (cta_group::2, M =
256, operands from both CTAs' shared memory, accumulators in both tensor memories, the
commit multicast to both CTAs' mbarriers), tcgen05.st / cp / shift and cluster launch
control, each against its definition; and a deliberately broken kernel for each misuse
(wrong cta_group pairing, an ld before wait::st, a store never waited for, a CLC response
read before its mbarrier completed, a request after a failed one) stops with the named
error. The kernels also assemble with ptxas -arch=sm_100a (where ptxas exists)."""

from __future__ import annotations

import numpy as np
import pytest

from pkc.codegen import ptx, ptx_sm90
from pkc.codegen import ptx_sm100 as t5
from pkc.codegen import ptx_sm100_ext as x5
from pkc.codegen.builder import Builder
from pkc.codegen.printer import print_module
from pkc.codegen.ptxas import assemble, find_ptxas
from pkc.emu import GlobalMemory, run_entry
from pkc.emu.errors import EmuAsyncProxyError, EmuError, EmuTensorMemoryError

SMEM = 16384
A_OFF, B_OFF, BAR0, BAR1, SLOT, RESP = 0, 4096, 8192, 8200, 8208, 8224
N = 32                       # accumulator columns in every MMA here


def _kmajor_bytes(X: np.ndarray) -> np.ndarray:
    """A bf16 matrix [rows, 16] in the no-swizzle K-major canonical layout (PTX ISA
    9.7.16.3: 8 x 16-byte core matrices; K chunks 128 bytes apart (LBO), 8-row groups 256
    bytes apart (SBO))."""
    rows = X.shape[0]
    bits = (X.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)   # exact bf16 data
    out = np.zeros(rows * 32, dtype=np.uint8)
    for i in range(rows):
        for k in range(16):
            a = (i // 8) * 256 + (k // 8) * 128 + (i % 8) * 16 + 2 * (k % 8)
            out[a:a + 2] = np.frombuffer(bits[i, k].tobytes(), dtype=np.uint8)
    return out


def _bf16_matrix(rng, rows) -> np.ndarray:
    x = rng.standard_normal((rows, 16)).astype(np.float32)
    return ((x.view(np.uint32) >> 16) << 16).view(np.float32)        # bf16-exact values


DESC = t5.smem_desc_hi(128, 256, 0)       # no swizzle, LBO 128, SBO 256


class K:
    """A kernel under construction: parameters (in, out), the shared-memory map above."""

    def __init__(self, name, cluster=None, threads=128):
        self.e = ptx.EntryOp(name, [("inp", "u64"), ("out", "u64")], threads, SMEM,
                             cluster=cluster)
        self.b = b = Builder(self.e.block)
        self.inp, self.out = list(self.e.block.args)
        self.tid = b.sreg("%tid.x")
        self.base = b.r(ptx.SmemBaseOp())
        self.warp = b.bin("shr", "u32", self.tid, 5)
        self.cluster = cluster

    def at(self, off):
        return self.b.add32(self.base, off) if off else self.base

    def thread0(self):
        return self.b.if_(self.b.setp("eq", "u32", self.tid, 0))

    def warp0(self):
        return self.b.if_(self.b.setp("eq", "u32", self.warp, 0))

    def sync(self):
        b = self.b
        b.add(t5.Tcgen05FenceOp("before"))
        b.add(ptx_sm90.ClusterBarrierOp() if self.cluster else ptx.BarSyncOp(0))
        b.add(t5.Tcgen05FenceOp("after"))

    def setup(self, group=1, cols=N):
        b = self.b
        with self.thread0():
            for off in (BAR0, BAR1):
                b.add(ptx.MbarrierOp("init", self.at(off), b.u32(1)))
            b.fence("mbarrier_init.release.cluster")
        self.sync()
        with self.warp0():
            b.add(t5.Tcgen05AllocOp(self.at(SLOT), cols, group))
            b.add(t5.Tcgen05RelinquishOp(group))
        self.sync()

    def taddr(self):
        return self.b.ld("shared", "b32", self.at(SLOT))

    def load_operands(self, nbytes, src_off=0):
        """Thread 0 copies ``nbytes`` of ``inp`` (+ src_off) to shared 0 and waits."""
        b = self.b
        with self.thread0():
            b.add(ptx.MbarrierOp("arrive_expect_tx", self.at(BAR0), b.u32(nbytes)))
            b.add(ptx.CpAsyncBulkLoadOp(self.at(A_OFF), b.add64(self.inp, src_off), b.u32(nbytes),
                                        self.at(BAR0)))
            b.add(ptx_sm90.MbarrierWaitParityOp(self.at(BAR0), b.u32(0)))

    def wait_commit(self, parity=0):
        self.b.add(ptx_sm90.MbarrierWaitParityOp(self.at(BAR1), self.b.u32(parity)))
        self.b.add(t5.Tcgen05FenceOp("after"))

    def store_rows(self, cols=N, wait=True):
        """Every warp loads its 32 lanes x ``cols`` and thread t writes out[t, :]."""
        b = self.b
        lane_addr = b.add32(self.taddr(), b.bin("shl", "b32", self.warp, 21))
        vals = list(b.add(t5.Tcgen05LdOp(lane_addr, cols)).res)
        if wait:
            b.add(t5.Tcgen05WaitOp("ld"))
        row = b.add64(self.out, b.mul64(b.cvt("u64", "u32", self.tid), 4 * cols))
        cta = b.sreg("%ctaid.x")
        row = b.add64(row, b.mul64(b.cvt("u64", "u32", cta), 4 * cols * 128))
        for j, v in enumerate(vals):
            b.st("global", "b32", b.add64(row, 4 * j), v)

    def finish(self, group=1, cols=N):
        self.sync()
        with self.warp0():
            self.b.add(t5.Tcgen05DeallocOp(self.taddr(), cols, group))
        self.b.add(ptx.YieldOp())
        return self.e


def _run(e, inp: np.ndarray, out_words: int, ctas=1, **kw):
    gm = GlobalMemory()
    a = gm.alloc(max(16, inp.size), "inp", 0)
    o = gm.alloc(4 * out_words, "out", 0)
    gm.finalize()
    gm.write_words(a, inp.view(np.uint8), dtype=np.uint8)
    run_entry(e, gm, [[a, o]], ctas=ctas, target="sm_100a", **kw)
    return gm.read_words(o, out_words).view(np.float32)


def _mma_kernel(M):
    k = K(f"mma_m{M}")
    k.setup()
    b = k.b
    k.load_operands(M * 32 + N * 32)
    with k.thread0():
        off = b.setp("ne", "u32", b.u32(0), 0)
        b.add(t5.Tcgen05MmaOp(k.taddr(), b.imm(DESC | (A_OFF >> 4), "b64"),
                              b.imm(DESC | (M * 32 >> 4), "b64"),
                              b.u32(t5.instr_desc_f16("bf16", M, N)), off))
        b.add(t5.Tcgen05CommitOp(k.at(BAR1)))
    k.wait_commit()
    k.store_rows()
    return k.finish()


@pytest.mark.parametrize("M", [64, 128])
def test_mma_m64_and_m128_put_rows_in_their_data_path_lanes(M):
    rng = np.random.default_rng(1)
    A, B = _bf16_matrix(rng, M), _bf16_matrix(rng, N)
    out = _run(_mma_kernel(M), np.concatenate([_kmajor_bytes(A), _kmajor_bytes(B)]), 128 * N)
    out = out.reshape(128, N)
    ref = (A.astype(np.float64) @ B.T.astype(np.float64)).astype(np.float32)
    # layout F (M = 64): row r in lane 32 (r // 16) + r % 16; M = 128: row r in lane r
    lanes = np.arange(128) if M == 128 else 32 * (np.arange(64) // 16) + np.arange(64) % 16
    np.testing.assert_array_equal(out[lanes], ref)
    if M == 64:      # the other half of the lanes was never written (still the poison)
        others = np.setdiff1d(np.arange(128), lanes)
        assert np.isnan(out[others]).all()


def _pair_kernel(peer_group=2, cluster=2, rows=128):
    """Each CTA of the pair loads its 128 rows of A and N / 2 rows of B; the even CTA issues
    one M = 256 MMA and commits to both CTAs' BAR1."""
    k = K("pair_mma", cluster=cluster)
    b = k.b
    rank = b.sreg("%cluster_ctarank")
    with k.thread0():
        for off in (BAR0, BAR1):
            b.add(ptx.MbarrierOp("init", k.at(off), b.u32(1)))
        b.fence("mbarrier_init.release.cluster")
    k.sync()
    even = b.setp("eq", "u32", b.bin("and", "b32", rank, 1), 0)
    with k.warp0():
        if peer_group == 2:
            b.add(t5.Tcgen05AllocOp(k.at(SLOT), N, 2))
        else:      # the odd CTA allocates with the other .cta_group (a broken kernel)
            then, other = b.if_else(even)
            with b.at(then):
                b.add(t5.Tcgen05AllocOp(k.at(SLOT), N, 2))
                b.add(ptx.YieldOp())
            with b.at(other):
                b.add(t5.Tcgen05AllocOp(k.at(SLOT), N, 1))
                b.add(ptx.YieldOp())
    k.sync()
    per = rows * 32 + N // 2 * 32
    k.load_operands(per, b.mul64(b.cvt("u64", "u32", b.sreg("%ctaid.x")), per))
    k.sync()             # the peer's operands are in its shared memory
    with b.if_(b.pand(b.setp("eq", "u32", k.tid, 0), even)):
        off = b.setp("ne", "u32", b.u32(0), 0)
        b.add(t5.Tcgen05MmaOp(k.taddr(), b.imm(DESC | (A_OFF >> 4), "b64"),
                              b.imm(DESC | (rows * 32 >> 4), "b64"),
                              b.u32(t5.instr_desc_f16("bf16", 256, N, cta_group=2)), off, 2))
        b.add(t5.Tcgen05CommitOp(k.at(BAR1), b.imm(3, "b16"), 2))
    k.wait_commit()
    k.store_rows()
    return k.finish(group=2)


def test_cta_pair_mma_reads_both_ctas_and_writes_both_tensor_memories():
    rng = np.random.default_rng(2)
    A, B = _bf16_matrix(rng, 256), _bf16_matrix(rng, N)
    inp = np.concatenate([_kmajor_bytes(A[:128]), _kmajor_bytes(B[:N // 2]),
                          _kmajor_bytes(A[128:]), _kmajor_bytes(B[N // 2:])])
    out = _run(_pair_kernel(), inp, 2 * 128 * N, ctas=2).reshape(256, N)
    ref = (A.astype(np.float64) @ B.T.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(out, ref)     # CTA 0: rows 0-127, CTA 1: rows 128-255


def test_wrong_cta_group_pairing_is_an_error():
    rng = np.random.default_rng(2)
    inp = np.zeros(2 * (128 * 32 + N // 2 * 32), dtype=np.uint8)
    del rng
    with pytest.raises(EmuTensorMemoryError, match="wrong cta_group pairing: this is "
                       r"\.cta_group::1, but .*cta_group::2"):
        _run(_pair_kernel(peer_group=1), inp, 2 * 128 * N, ctas=2)


def test_cta_group_2_without_a_cta_pair_is_an_error():
    k = K("no_pair")
    k.setup(group=2)
    e = k.finish(group=2)
    with pytest.raises(EmuTensorMemoryError, match="needs CTA pairs, but the cluster has 1"):
        _run(e, np.zeros(16, np.uint8), 16)


def _st_kernel(wait=True, read=True, shift=False):
    """Thread t stores t * 1000 + j into its lane's columns j, waits (or not), optionally
    shifts the first 8 columns down a row, then every warp reads its lanes back."""
    k = K("st_ld")
    k.setup()
    b = k.b
    lane_addr = b.add32(k.taddr(), b.bin("shl", "b32", k.warp, 21))
    vals = [b.cvt("f32", "u32", b.add32(b.mul32(k.tid, 1000), j), "rn") for j in range(N)]
    b.add(x5.Tcgen05StOp(lane_addr, vals))
    if wait:
        b.add(t5.Tcgen05WaitOp("st"))
    if shift:
        k.sync()
        with k.thread0():
            b.add(x5.Tcgen05ShiftOp(k.taddr()))
            b.add(t5.Tcgen05CommitOp(k.at(BAR1)))
        k.wait_commit()
    if read:
        k.store_rows()
    return k.finish()


def test_st_lands_at_wait_st_and_reads_back():
    out = _run(_st_kernel(), np.zeros(16, np.uint8), 128 * N).reshape(128, N)
    np.testing.assert_array_equal(out, np.arange(128)[:, None] * 1000 + np.arange(N)[None, :])


def test_shift_moves_32_byte_elements_down_one_row():
    out = _run(_st_kernel(shift=True), np.zeros(16, np.uint8), 128 * N).reshape(128, N)
    ref = np.arange(128)[:, None] * 1000.0 + np.arange(N)[None, :]
    want = ref.copy()
    want[1:, :8] = ref[:-1, :8]         # columns 0-7 down one row; row 0 keeps its own
    np.testing.assert_array_equal(out, want)


def test_ld_before_wait_st_is_an_error():
    with pytest.raises(EmuTensorMemoryError, match="tcgen05.ld reads tensor memory that "
                       ".*tcgen05.st.*not waited for \\(tcgen05.wait::st\\)"):
        _run(_st_kernel(wait=False), np.zeros(16, np.uint8), 128 * N)


def test_st_never_waited_is_an_error():
    with pytest.raises(EmuTensorMemoryError, match="tcgen05.st was never waited for"):
        _run(_st_kernel(wait=False, read=False), np.zeros(16, np.uint8), 128 * N)


def test_cp_128x256b_copies_shared_rows_into_lanes():
    rng = np.random.default_rng(3)
    X = _bf16_matrix(rng, 128)                      # 128 rows x 32 bytes = 8 columns
    k = K("cp")
    k.setup()
    b = k.b
    k.load_operands(128 * 32)
    with k.thread0():
        b.add(x5.Tcgen05CpOp(k.taddr(), b.imm(DESC | (A_OFF >> 4), "b64"), "128x256b"))
        b.add(t5.Tcgen05CommitOp(k.at(BAR1)))
    k.wait_commit()
    k.store_rows(cols=8)
    out = _run(k.finish(), _kmajor_bytes(X), 128 * 8).view(np.uint32).reshape(128, 8)
    bits = (X.view(np.uint32) >> 16).astype(np.uint32)        # 16 bf16 per row
    np.testing.assert_array_equal(out, bits[:, 0::2] | (bits[:, 1::2] << 16))


def _clc_kernel(wait=True, again=False):
    """Each running CTA works its tile (out[tile] = 1 + the CTA that did it), then asks
    cluster launch control for another until a request fails (``again``: a broken kernel
    that keeps asking after that). A loop of 8 trips; once done, a trip only waits on the
    phase of its last request again."""
    k = K("clc", threads=32)
    b = k.b
    with k.thread0():
        b.add(ptx.MbarrierOp("init", k.at(BAR0), b.u32(1)))
        b.fence("mbarrier_init.release.cluster")
    b.bar()
    cta = b.sreg("%ctaid.x")
    loop, body = b.for_carried(0, 8, 1, [cta, b.u32(1), b.u32(0)], "u32")
    it, tile, live, nreq = body.args
    with b.at(body):
        on = b.setp("ne", "u32", live, 0)
        ask = b.setp("eq", "u32", b.u32(1), 1) if again else on
        with b.if_(b.pand(on, b.setp("eq", "u32", k.tid, 0))):
            addr = b.add64(k.out, b.mul64(b.cvt("u64", "u32", tile), 4))
            b.st("global", "b32", addr, b.add32(cta, 1))
        with b.if_(b.pand(ask, b.setp("eq", "u32", k.tid, 0))):
            b.add(ptx.MbarrierOp("arrive_expect_tx", k.at(BAR0), b.u32(16)))
            b.add(x5.ClcTryCancelOp(k.at(RESP), k.at(BAR0)))
        nreq = b.selp("b32", b.add32(nreq, 1), nreq, ask)
        if wait:
            parity = b.bin("and", "b32", b.bin("sub", "u32", nreq, 1), 1)
            b.add(ptx_sm90.MbarrierWaitParityOp(k.at(BAR0), parity))
        q = b.add(x5.ClcQueryOp(k.at(RESP)))
        ok = b.pand(q.canceled, on)
        nxt_tile = b.selp("b32", q.ctaid_x, tile, ok)
        nxt_live = b.selp("b32", b.u32(1), b.u32(0), ok)
        b.bar()          # every thread read the response before the next request
        b.add(ptx.YieldOp([nxt_tile, nxt_live, nreq]))
    b.add(ptx.YieldOp())
    return k.e


def test_cluster_launch_control_hands_each_tile_out_once():
    # 4 tiles, one CTA resident: CTA 0 runs, cancels the other three and works them
    out = _run(_clc_kernel(), np.zeros(16, np.uint8), 4, ctas=4, resident=1).view(np.uint32)
    assert out.tolist() == [1, 1, 1, 1]
    # two resident: the tiles are split, each once, between CTAs 0 and 1 (the cancelled
    # ones never ran)
    out = _run(_clc_kernel(), np.zeros(16, np.uint8), 4, ctas=4, resident=2).view(np.uint32)
    assert sorted(set(out.tolist())) <= [1, 2] and out[0] == 1 and out[1] == 2


def test_clc_response_read_before_its_mbarrier_is_an_error():
    with pytest.raises(EmuAsyncProxyError, match="a CLC response read before its mbarrier "
                       "completed"):
        _run(_clc_kernel(wait=False), np.zeros(16, np.uint8), 4, ctas=4, resident=1)


def test_a_request_after_a_failed_response_is_an_error():
    with pytest.raises(EmuError, match="try_cancel after this CTA read a response that said "
                       "'not canceled'"):
        _run(_clc_kernel(again=True), np.zeros(16, np.uint8), 4, ctas=2, resident=2)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_the_new_instructions_assemble_for_sm_100a():
    entries = [_pair_kernel(), _st_kernel(shift=True), _clc_kernel(), _mma_kernel(64)]
    for e in entries:
        text = print_module([e], "sm_100a")
        assert "tcgen05" in text or "clusterlaunchcontrol" in text
        assemble(text, "sm_100a")
    pair = print_module([entries[0]], "sm_100a")
    assert "tcgen05.mma.cta_group::2.kind::f16" in pair
    assert "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster" in pair


def test_ptx_verifiers_refuse_forms_pkc_does_not_print():
    from xdsl.utils.exceptions import VerifyException

    e = ptx.EntryOp("v", [], 128, 0)
    b = Builder(e.block)
    r32, r64 = b.u32(0), b.imm(0, "b64")
    p16 = b.imm(3, "b16")
    bad = [
        (t5.Tcgen05AllocOp(r32, 32, cta_group=3), "cta_group 3: 1 or 2"),
        (t5.Tcgen05AllocOp(r32, 48), "a power of two"),
        (t5.Tcgen05CommitOp(r32, r32), "ctaMask is a b16 register"),
        (x5.Tcgen05StOp(r32, [r32] * 3), r"\.32x32b\.x3 with 3 registers"),
        (x5.Tcgen05StOp(r32, [r64]), "32-bit registers"),
        (x5.Tcgen05CpOp(r32, r64, "64x128b"), "shape .64x128b"),
        (x5.Tcgen05CpOp(r32, r32), "b32 taddr, b64 sdesc"),
        (x5.Tcgen05ShiftOp(r64), "b32 taddr"),
        (x5.ClcTryCancelOp(r32, r64), "b32 shared addr, b32 shared mbar"),
    ]
    for op, msg in bad:
        with pytest.raises(VerifyException, match=msg):
            op.verify()
    ok = [t5.Tcgen05CommitOp(r32, p16, 2), x5.Tcgen05StOp(r32, [r32] * 4),
          x5.Tcgen05CpOp(r32, r64, "128x128b", 2), x5.ClcTryCancelOp(r32, r32, multicast=True)]
    for op in ok:
        op.verify()
    with pytest.raises(ValueError, match="cta_group::2: no shape m64n32k16"):
        t5.instr_desc_f16("bf16", 64, 32, cta_group=2)
