"""The emulator against the H200: the same kernels on the same inputs, outputs compared
bitwise.

    python tests/gpu/emu_vs_gpu.py prepare DIR [SEED]   # here (CPU): compile, inputs, emulate
    python tests/gpu/emu_vs_gpu.py run DIR OUT    # on the GPU machine: compile, launch,
                                                  # compare with DIR's emulator outputs

``prepare`` writes, per case, the inputs, the emulator's outputs and the PTX's hash;
``run`` compiles the same IR again (the hash must match: the same kernel), launches it
(an IR-built scheduled kernel through :class:`pkc.runtime.scheduled.ScheduledKernel`, a
general-path kernel in the virtual world of W ranks) and writes ``OUT/emu_vs_gpu.json``:
per case and output, bitwise equal or not, the count of differing elements and the
largest difference.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GEMMS = [("gemm_128x128x64", (128, 128, 64), "", "nk"),
         ("gemm_200x136x72_tails", (200, 136, 72), "128x128_s6_tma", "nk"),
         ("gemm_256x256x128_kn", (256, 256, 128), "128x256_s4_kn", "kn"),
         ("gemm_256x256x128_cl2", (256, 256, 128), "128x128_s6_cl2", "nk"),
         ("gemm_256x512x192_128x256", (256, 512, 192), "128x256_s4_tma", "nk")]
GENERAL = ["ar_f32", "mm_rs", "ag_mm", "a2a_mm"]
WORLD = 2


def _gemm_kernel(shape, variant, layout):
    from gemm_ir import module_text

    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes.schedule_matmul import ScheduleMatmul

    m = parse_module(module_text(*shape, layout), "gemm.mlir")
    ScheduleMatmul(variant=variant).apply(make_context(), m)
    (kop,) = kernels_of(m)
    return kop, compile_kernel(kop, "sm_90a")


def _general_kernel(name):
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from test_emu_kernels import GRAPHS

    from pkc.codegen import compile_kernel
    from pkc.codegen.emit import kernels_of
    from pkc.ir import make_context, parse_module
    from pkc.passes import parse_pipeline

    ctx = make_context()
    m = parse_module(GRAPHS[name].format(W=WORLD, M=16 * WORLD, M8=8 * WORLD), name, ctx=ctx)
    for p in parse_pipeline("default{force=true}"):
        p.apply(ctx, m)
    kop = kernels_of(m)[0]
    return kop, compile_kernel(kop, "sm_90a")


def _cases():
    for name, shape, variant, layout in GEMMS:
        yield name, lambda s=shape, v=variant, lay=layout: _gemm_kernel(s, v, lay), 1
    for name in GENERAL:
        yield f"general_{name}_w{WORLD}", lambda n=name: _general_kernel(n), WORLD


def _inputs(kop, world: int, seed: int):
    from pkc.interp.values import torch_dtype

    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(tuple(v.type.get_shape()), generator=gen).to(torch_dtype(v.type.element_type))
             for v in kop.inputs] for _ in range(world)]


def prepare(folder: Path, seed: int = 0) -> None:
    from pkc.emu import emulate

    folder.mkdir(parents=True, exist_ok=True)
    index = {}
    for i, (name, make, world) in enumerate(_cases()):
        kop, ck = make()
        x = _inputs(kop, world, 1000 * seed + i)
        out = emulate(ck, x, kop=kop)
        torch.save({"inputs": x, "emulated": out}, folder / f"{name}.pt")
        index[name] = hashlib.sha256(ck.ptx.encode()).hexdigest()
        print(f"prepared {name}", flush=True)
    (folder / "index.json").write_text(json.dumps(index, indent=1))


def _launch(kop, ck, x, world):
    from pkc.codegen.abi import ScheduledKernelMeta

    if isinstance(ck.meta, ScheduledKernelMeta):
        from pkc.runtime.scheduled import ScheduledKernel

        k = ScheduledKernel(ck.ptx, ck.meta)
        outs = []
        for r in range(world):
            bufs = [t.cuda() for t in x[r]]
            res = [torch.full(tuple(v.type.get_shape()), float("nan"), dtype=bufs[0].dtype,
                              device="cuda") for v in kop.results]
            k(bufs + res)
            torch.cuda.synchronize()
            outs.append([t.cpu() for t in res])
        return outs
    from pkc.runtime.world import VirtualWorld

    outs = VirtualWorld(world).run(ck, x)
    return [[t.cpu() for t in per] for per in outs]


def run(folder: Path, out: Path) -> None:
    index = json.loads((folder / "index.json").read_text())
    report = {}
    for name, make, world in _cases():
        try:
            kop, ck = make()
            if hashlib.sha256(ck.ptx.encode()).hexdigest() != index.get(name):
                report[name] = {"error": "the kernel compiled here differs from the emulated one"}
                continue
            saved = torch.load(folder / f"{name}.pt")
            gpu = _launch(kop, ck, saved["inputs"], world)
            out.mkdir(parents=True, exist_ok=True)
            torch.save(gpu, out / f"gpu_{name}.pt")   # for fitting models offline
            rows = []
            for r in range(world):
                for j, (g, e) in enumerate(zip(gpu[r], saved["emulated"][r])):
                    gi = g.contiguous().view(torch.int16 if g.element_size() == 2 else torch.int32)
                    ei = e.contiguous().view(gi.dtype)
                    diff = gi != ei
                    both_nan = torch.isnan(g.float()) & torch.isnan(e.float())
                    diff &= ~both_nan
                    mx = float((g.double() - e.double()).abs().nan_to_num(0).max())
                    rows.append({"rank": r, "output": j, "bitwise": not bool(diff.any()),
                                 "differing": int(diff.sum()), "elements": g.numel(),
                                 "max_abs": mx, "nan_gpu": int(torch.isnan(g.float()).sum())})
            report[name] = {"outputs": rows, "bitwise": all(x["bitwise"] for x in rows)}
        except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
            report[name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, json.dumps(report[name])[:300], flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "emu_vs_gpu.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        run(Path(sys.argv[2]), Path(sys.argv[3]))
