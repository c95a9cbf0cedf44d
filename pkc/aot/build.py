"""The first process of :func:`pkc.aot_compile`: compile the layer and package pkc's program.

The layer is compiled as ``torch.compile(model, backend=pkc.backend(...))`` does, and runs
through that in this process. The backend hands over each graph's torch program (pk IR
translated to torch, :mod:`pkc.runtime.inductor`) before Inductor compiles it; where the
program can stand alone (one graph, one rank, no pkc kernel call, dynamo's inputs taken
as they come: no mutation or aliasing, every input a user input, parameter or buffer,
tensor outputs), its aten graph is compiled by AOTInductor
(``torch._inductor.aot_compile`` with ``aot_inductor.package``) into ``model.pt2`` next
to a ``meta.json`` that says where each argument comes from (user input i, parameter or
buffer name), the output's structure and what the package is valid for.

``Build.BACKGROUND``: the aten graph and the arguments' metadata go to ``job.pt`` and a
detached ``python -m pkc.aot.build <job.pt>`` builds the package (log: ``build.log``;
a ``building`` lock file keeps two processes from building the same layer; a failure
writes ``failed.json``, which the next process reports instead of building again).
``meta.json`` is written last and atomically: a reader sees a whole package or none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from pkc.aot.cache import FAILED, FORMAT, LOCK, META, PACKAGE, Build, _build_running, _no_grad_check, tensor_meta

__all__ = ["compile_layer", "build_package", "main"]


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)       # atomic: a reader sees the old file, the new one, or none


def _arg_sources(model: Any, captured: Any, example_inputs: Sequence[Any]
                 ) -> tuple[list[list], list[torch.Tensor]] | str:
    """Per graph input, where a later process finds it (["input", i] or ["parameter" /
    "buffer", state_dict name]) and its tensor here; or why the program cannot stand
    alone."""
    from pkc.frontend.capture import InputKind

    n = len(list(captured.gm.graph.find_nodes(op="placeholder")))
    if n != len(captured.inputs):
        return "the graph takes inputs that are not tensors"
    sources, tensors = [], []
    for spec in captured.inputs:
        if spec.kind is InputKind.INPUT and spec.user_index is not None:
            x = example_inputs[spec.user_index]
            sources.append(["input", spec.user_index])
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and isinstance(model, torch.nn.Module):
            prefix, _, leaf = spec.name.rpartition(".")
            try:
                x = getattr(model.get_submodule(prefix) if prefix else model, leaf)
            except AttributeError:
                return f"{spec.kind} '{spec.name}' is not an attribute of the module"
            sources.append([str(spec.kind), spec.name])
        else:
            return f"the layer reads tensor '{spec.name}' that is no input, parameter or buffer"
        if not isinstance(x, torch.Tensor):
            return f"graph input '{spec.name}' is not a tensor"
        tensors.append(x)
    return sources, tensors


def _job(model: Any, example_inputs: Sequence[Any], seen: list[dict], out: Any,
         versions: dict, pipeline: str | None, target: str) -> dict | str:
    """What building the package needs, or why pkc's program cannot be one."""
    if len(seen) != 1:
        return f"{len(seen)} graphs (a package holds one)"
    got = seen[0]
    tp, program = got["torch_program"], got["program"]
    if got["direct_call"] is not None:
        return f"pkc's capture changed the calling convention ({got['direct_call']})"
    if program.world_size != 1:
        return f"{program.world_size} ranks (packages are single-rank)"
    if tp.counts.get("kernel", 0) or tp.counts.get("nccl", 0):
        return "the program calls pkc kernels or NCCL (a loading process has no kernel registry)"
    flat, spec = pytree.tree_flatten(out)
    if not flat or not all(isinstance(t, torch.Tensor) for t in flat):
        return "the layer returns something other than tensors"
    srcs = _arg_sources(model, got["captured"], example_inputs)
    if isinstance(srcs, str):
        return srcs
    sources, tensors = srcs
    from pkc.runtime.inductor import aten_program

    gm = aten_program(tp, got["example_inputs"])
    meta = {"format": FORMAT, "versions": versions, "target": target, "pipeline": pipeline,
            "args": sources, "arg_meta": [tensor_meta(t) for t in tensors],
            "devices": [str(t.device) for t in tensors],
            "inputs": [tensor_meta(x) if isinstance(x, torch.Tensor) else None for x in example_inputs],
            "out_spec": pytree.treespec_dumps(spec), "n_outputs": len(flat)}
    return {"gm": gm, "tensors": tensors, "meta": meta}


def build_package(gm: torch.fx.GraphModule, args: Sequence[torch.Tensor], folder: Path,
                  meta: dict) -> float:
    """AOTInductor's package of ``gm`` in ``folder`` (``model.pt2``, then ``meta.json``);
    returns the seconds it took."""
    from torch._inductor import aot_compile
    from torch._inductor.package import package_aoti

    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    files = aot_compile(gm, tuple(args), options={"aot_inductor.package": True})
    tmp = folder / f"model.tmp{os.getpid()}.pt2"
    package_aoti(str(tmp), files)
    tmp.replace(folder / PACKAGE)
    meta = {**meta, "build_s": round(time.perf_counter() - t0, 3), "built": time.time()}
    _write_json(folder / META, meta)
    (folder / FAILED).unlink(missing_ok=True)
    return meta["build_s"]


def _spawn(job: dict, folder: Path) -> str:
    """Start the detached build of ``job``; the remark to make."""
    folder.mkdir(parents=True, exist_ok=True)
    if _build_running(folder):
        return f"pkc.aot: a package build of this layer is already running ({folder})"
    try:
        fd = os.open(folder / LOCK, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:      # a stale lock (a crashed build): take it over
        (folder / LOCK).unlink(missing_ok=True)
        fd = os.open(folder / LOCK, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    path = folder / f"job{os.getpid()}.pt"
    torch.save({"gm": job["gm"], "meta": job["meta"]}, path)
    root = str(Path(__file__).resolve().parents[2])   # where the builder imports pkc from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    with open(folder / "build.log", "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "pkc.aot.build", str(path)], stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return (f"pkc.aot: the package is being built by a background process (pid {proc.pid}, log "
            f"{folder / 'build.log'}); later processes load it")


def compile_layer(model: Any, example_inputs: Sequence[Any], *, folder: Path, target: str,
                  pipeline: str | None, build: Build, versions: dict, remarks: list[str]
                  ) -> Callable[..., Any]:
    """Compile ``model`` through ``torch.compile`` with pkc's backend, run it once on
    ``example_inputs`` and package it as ``build`` says; the callable that runs it here."""
    from pkc.torch_backend import PkcBackend

    be = PkcBackend(target=target, pipeline=pipeline)
    module = model if isinstance(model, torch.nn.Module) else None
    be._capture_module, be._capture_inputs = module, list(example_inputs)
    seen: list[dict] = []
    be._program_hook = lambda **kw: seen.append(kw)
    cm = torch.compile(model, backend=be, fullgraph=True, dynamic=False)
    with torch.no_grad():
        out = cm(*example_inputs)
    remarks += [r for p in be.programs for r in p.remarks() if "first call" in r]
    params = list(module.parameters()) if module is not None else []

    def run(*args: Any) -> Any:
        _no_grad_check([a for a in args if isinstance(a, torch.Tensor)] + params, "pkc.aot_compile")
        return cm(*args)

    if build is Build.NEVER:
        return run
    failed = folder / FAILED
    if failed.is_file():
        try:
            if json.loads(failed.read_text()).get("versions") == versions:
                remarks.append(f"pkc.aot: no package: an earlier build failed ({folder / 'build.log'}); "
                               "remove the folder to try again")
                return run
        except (OSError, ValueError):
            pass
    job = _job(model, example_inputs, seen, out, versions, pipeline, target)
    if isinstance(job, str):
        remarks.append(f"pkc.aot: no package ({job}); every process compiles this layer")
        return run
    if build is Build.NOW:
        try:
            secs = build_package(job["gm"], job["tensors"], folder, job["meta"])
            remarks.append(f"pkc.aot: package built in {secs:.2f} s ({folder / PACKAGE})")
        except Exception as err:  # noqa: BLE001 - the layer still runs; say why there is no package
            remarks.append(f"pkc.aot: the package build failed: {type(err).__name__}: {err}")
    else:
        remarks.append(_spawn(job, folder))
    return run


def main(argv: list[str] | None = None) -> int:
    """``python -m pkc.aot.build <job.pt>``: the background build (see the module docstring)."""
    path = Path((argv if argv is not None else sys.argv[1:])[0])
    folder = path.parent
    job = None
    try:
        # what a process that ran torch.compile has imported and AOTInductor's tracing
        # expects (torch._higher_order_ops' lazily imported triton_kernel_wrap)
        import torch._dynamo  # noqa: F401
        import torch._higher_order_ops.triton_kernel_wrap  # noqa: F401

        job = torch.load(path, weights_only=False)
        meta = job["meta"]
        args = [torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=dev).zero_()
                for (shape, stride, dtype, _), dev in zip(meta["arg_meta"], meta["devices"])]
        secs = build_package(job["gm"], args, folder, meta)
        print(f"pkc.aot: package built in {secs:.2f} s", flush=True)
        return 0
    except BaseException as err:  # noqa: BLE001 - recorded for the next process, which compiles
        traceback.print_exc()
        versions = job["meta"]["versions"] if isinstance(job, dict) else None
        _write_json(folder / FAILED, {"error": f"{type(err).__name__}: {err}", "versions": versions})
        return 1
    finally:
        path.unlink(missing_ok=True)
        (folder / LOCK).unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
