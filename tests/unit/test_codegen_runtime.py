"""The parts of the runtime that need no GPU: CTA fitting, error records, the kernel
image cache, and the graceful absence of a GPU."""

from __future__ import annotations

import pytest

from pkc.codegen import compile_kernel
from pkc.codegen.abi import ERR_EXPECTED, ERR_FLAG, ERR_KERNEL, ERR_RANK, ERR_SEEN, ERR_SITE, ERR_SLOT, ERROR_WORDS
from pkc.codegen.emit import kernels_of
from pkc.codegen.ptxas import find_ptxas
from pkc.ir import parse_module
from pkc.runtime.cache import cubin_arch, kernel_image
from pkc.runtime.errors import decode_error
from pkc.runtime.launch import fit_ctas, params
from tests.gpu import kernels as K


def _ck(case, target="sm_90a"):
    return compile_kernel(kernels_of(parse_module(case.ir, case.name))[0], target)


def test_fit_ctas_keeps_every_cta_resident():
    meta = _ck(K.gemm_rs(2, 72, 80, 96, "bf16")).meta  # compute 24 + communicate 8
    assert fit_ctas(meta, 132) == [24, 8]
    assert fit_ctas(meta, 16) == [12, 4]
    assert sum(fit_ctas(meta, 9)) <= 9 and min(fit_ctas(meta, 9)) >= 1
    with pytest.raises(RuntimeError, match="2 workers but only 1 SMs"):
        fit_ctas(meta, 1)


def test_params_follow_the_abi():
    meta = _ck(K.unit_all_reduce(2, "bf16")).meta
    ps = params(meta, [1, 2, 3], [4], 1, 2, 5, 6, 0.5, [8])
    assert [t for t, _ in ps] == [t for _, t in meta.params()]
    assert ps[-2] == ("u64", 500_000_000) and ps[-1] == ("u32", 8)


def test_timeout_record_becomes_a_message_naming_kernel_rank_and_signal():
    ck = _ck(K.unit_all_reduce(4, "bf16", expected=5))
    site = next(s for s in ck.meta.sites if s.kind == "wait")
    rec = [0] * ERROR_WORDS
    rec[ERR_FLAG], rec[ERR_SITE], rec[ERR_RANK], rec[ERR_SLOT] = 1, site.id, 3, 0
    rec[ERR_EXPECTED], rec[ERR_SEEN], rec[ERR_KERNEL] = 5, 4, ck.meta.kernel_id
    err = decode_error(ck.meta, 3, rec, 0.5)
    msg = str(err)
    assert err.rank == 3 and err.kernel == "all_reduce_one_shot"
    assert "kernel @all_reduce_one_shot: rank 3 timed out after 0.5 s" in msg
    assert "signal %arrived[0] is 4, it waits until >= 5" in msg and "'pk.wait' at" in msg
    assert decode_error(ck.meta, 0, [0] * ERROR_WORDS, 0.5) is None


def test_cubin_arch():
    assert cubin_arch("sm_90a", (9, 0)) == "sm_90a"
    assert cubin_arch("sm_80", (9, 0)) == "sm_90"
    with pytest.raises(RuntimeError, match="cannot run on a GPU of compute capability 8.0"):
        cubin_arch("sm_90a", (8, 0))


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")
def test_image_cache_keeps_cubins(tmp_path, monkeypatch):
    monkeypatch.setenv("PKC_CACHE_DIR", str(tmp_path))
    ck = _ck(K.unit_all_reduce(2, "f16"), "sm_80")
    image, kind, path = kernel_image(ck.ptx, ck.target, (9, 0))
    assert kind == "cubin" and path.exists() and image[:4] == b"\x7fELF"
    again, _, path2 = kernel_image(ck.ptx, ck.target, (9, 0))
    assert again == image and path2 == path
    ptx, kind, _ = kernel_image(ck.ptx, ck.target, (9, 0), use_ptxas=False)
    assert kind == "ptx" and ptx.endswith(b"\0")


def test_runtime_imports_without_a_gpu():
    import pkc.runtime as rt

    assert rt.gpu_available() in (True, False)
