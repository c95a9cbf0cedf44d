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
Before ``meta.json`` exists the package runs once on zero inputs in a fresh process that
imports what a loading process imports (:mod:`pkc.aot.verify`): a package that would crash
its loader (seen once on the H200 machine) becomes a failed build, not a crash of the
user's next process. Where that check dies of a signal, the wrapper is linked again with
each of :data:`pkc.aot.link.FIXES` until one passes it (the H200 machine's torch 2.11:
every package crashed its loader as torch links it); what worked, or that nothing did, is
kept per torch build (``loader.json`` in the cache root, :mod:`pkc.aot.link`): later
builds link that way at once, or are skipped where nothing loads. ``meta.json`` is written
last and atomically: a reader sees a whole, checked package or none.
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

from pkc.aot import link
from pkc.aot.cache import (FAILED, FORMAT, LOCK, META, PACKAGE, PENDING, ArgSource, Build, _build_running, _no_grad_check,
                           tensor_meta)

__all__ = ["compile_layer", "package", "check_package", "write_meta", "main"]


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
            sources.append([str(ArgSource.INPUT), spec.user_index])
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and isinstance(model, torch.nn.Module):
            prefix, _, leaf = spec.name.rpartition(".")
            try:
                x = getattr(model.get_submodule(prefix) if prefix else model, leaf)
            except AttributeError:
                return f"{spec.kind} '{spec.name}' is not an attribute of the module"
            sources.append([str(ArgSource.PARAMETER if spec.kind is InputKind.PARAMETER
                                else ArgSource.BUFFER), spec.name])
        else:
            return f"the layer reads tensor '{spec.name}' that is no input, parameter or buffer"
        if not isinstance(x, torch.Tensor):
            return f"graph input '{spec.name}' is not a tensor"
        tensors.append(x)
    return sources, tensors


def _program_job(model: Any, example_inputs: Sequence[Any], got: dict, versions: dict,
                 pipeline: str | None, target: str) -> dict | str:
    """What building the package of one graph's program needs (``got``: what the backend
    handed over), or why pkc's program cannot be one. ``meta`` lacks the output's
    structure until the first call returned (:func:`_with_outputs`)."""
    tp, program = got["torch_program"], got["program"]
    if got["direct_call"] is not None:
        return f"pkc's capture changed the calling convention ({got['direct_call']})"
    if program.world_size != 1:
        return f"{program.world_size} ranks (packages are single-rank)"
    if tp.counts.get("kernel", 0) or tp.counts.get("nccl", 0):
        return "the program calls pkc kernels or NCCL (a loading process has no kernel registry)"
    srcs = _arg_sources(model, got["captured"], example_inputs)
    if isinstance(srcs, str):
        return srcs
    sources, tensors = srcs
    from pkc.runtime.inductor import aten_program

    gm = aten_program(tp, got["example_inputs"])
    meta = {"format": FORMAT, "versions": versions, "target": target, "pipeline": pipeline,
            "args": sources, "arg_meta": [tensor_meta(t) for t in tensors],
            "devices": [str(t.device) for t in tensors],
            "inputs": [tensor_meta(x) if isinstance(x, torch.Tensor) else None for x in example_inputs]}
    return {"gm": gm, "tensors": tensors, "meta": meta}


def _with_outputs(job: dict, out: Any) -> str | None:
    """Record the first call's output structure in ``job``; why not, if it cannot be."""
    flat, spec = pytree.tree_flatten(out)
    if not flat or not all(isinstance(t, torch.Tensor) for t in flat):
        return "the layer returns something other than tensors"
    job["meta"].update(out_spec=pytree.treespec_dumps(spec), n_outputs=len(flat))
    return None


def package(gm: torch.fx.GraphModule, args: Sequence[torch.Tensor], folder: Path,
            options: dict | None = None, extra_link: Sequence[str] = ()) -> float:
    """AOTInductor's package of ``gm`` as ``folder/model.pt2`` (``options``: Inductor config
    for the build; ``extra_link``: flags appended to the wrapper's link command, which is
    kept for :func:`pkc.aot.link.relink`); the seconds it took."""
    import torch._guards
    from torch._inductor import aot_compile
    from torch._inductor.package import package_aoti

    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    # a tracing context of its own: the build may run inside dynamo's backend call
    with torch._guards.tracing(None), link.recording(folder, list(extra_link)):
        files = aot_compile(gm, tuple(args), options={**(options or {}), "aot_inductor.package": True})
    tmp = folder / f"model.tmp{os.getpid()}.pt2"
    package_aoti(str(tmp), files)
    tmp.replace(folder / PACKAGE)
    return round(time.perf_counter() - t0, 3)


def check_package(folder: Path, meta: dict) -> float:
    """Run the package once in a fresh process (:mod:`pkc.aot.verify`) before any process
    trusts it; raises RuntimeError with what happened if it does not run there (a crash
    there ends only that process). The seconds it took."""
    t0 = time.perf_counter()
    _write_json(folder / PENDING, meta)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
           "PYTHONFAULTHANDLER": "1"}
    try:
        res = subprocess.run([sys.executable, "-m", "pkc.aot.verify", str(folder)], capture_output=True,
                             text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError("the package did not finish one run in a fresh process within 600 s") from None
    if res.returncode != 0:
        what = f"signal {-res.returncode}" if res.returncode < 0 else f"exit {res.returncode}"
        tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-12:])
        raise (link.LoaderCrash if res.returncode < 0 else RuntimeError)(
            f"the package failed its run in a fresh process ({what}): {tail}")
    return round(time.perf_counter() - t0, 3)


def _fix_forced() -> str | None:
    name = os.environ.get("PKC_AOT_LINK_FIX") or None
    if name is not None and name not in link.FIXES:
        raise ValueError(f"PKC_AOT_LINK_FIX={name!r}: not one of {', '.join(link.FIXES)}")
    return name


def _machine_skip(folder: Path, versions: dict) -> str | None:
    """Why no package is built for any layer here (this torch build's loader crashed every
    package however linked: the build would cost its 45-65 s of CPU for nothing), or None."""
    record = link.read_machine(folder.parent, versions.get("device", "cpu"))
    if "broken" not in record or _fix_forced() is not None:
        return None
    return (f"pkc.aot: no package: AOTInductor packages crash torch {torch.__version__}'s loader on this "
            f"machine however linked ({folder.parent / link.MACHINE}; remove it to try again); every "
            "process compiles this layer")


def build_checked(gm: torch.fx.GraphModule, args: Sequence[torch.Tensor], folder: Path, meta: dict,
                  options: dict | None = None) -> tuple[float, float, str]:
    """:func:`package` then :func:`check_package`, relinking the wrapper with each of
    ``link.FIXES`` while the check dies of a signal (see the module docstring). The build's
    seconds (relinks included), the check's, and how it was linked ("" as torch links it).
    Raises where no package can be published (``link.LoaderCrash`` where none loads)."""
    root, device = folder.parent, ("cuda" if any(d.startswith("cuda") for d in meta["devices"]) else "cpu")
    record = link.read_machine(root, device)
    forced = _fix_forced()
    fix = forced or record.get("fix")
    if forced is None and "broken" in record:
        raise link.LoaderCrash(f"no AOTInductor package loads with this torch build here "
                               f"({root / link.MACHINE}: {record['broken']})")
    try:
        secs = package(gm, args, folder, options, link.FIXES[fix] if fix else ())
        how = f"linked with {fix}" if fix else ""
        so = link.linked_library(folder)
        if fix is None and so is not None and link.exports_libstdcxx(so):
            fix = link.FIX_EXPORTED_LIBSTDCXX       # the cause seen in the link: fixed before any check
            t0 = time.perf_counter()
            link.repackage(folder / PACKAGE, link.relink(folder, fix))
            secs = round(secs + time.perf_counter() - t0, 3)
            how = f"torch's link exported a copy of libstdc++ from the wrapper; linked with {fix}"
        try:
            check = check_package(folder, meta)
            if forced is None and record.get("fix") != fix:
                link.write_machine(root, device, {"fix": fix, "how": how})
            return secs, check, how
        except link.LoaderCrash as crash:
            if forced is not None or "fix" in record:   # linked as this machine's record says: this
                raise                                   # layer's failure, not the machine's
            tried = [f"{fix or 'as torch links it'}: {str(crash)[:200]}"]
        for name in [f for f in link.FIXES if f != fix]:
            t0 = time.perf_counter()
            try:
                link.repackage(folder / PACKAGE, link.relink(folder, name))
                secs += time.perf_counter() - t0
                check = check_package(folder, meta)
            except RuntimeError as err:     # LoaderCrash, a failed relink, no recorded link
                tried.append(f"{name}: {str(err)[:200]}")
                continue
            link.write_machine(root, device, {"fix": name, "crashed": tried})
            return round(secs, 3), check, f"the package crashed its loader as linked first; linked with {name}"
        link.write_machine(root, device, {"broken": tried[0], "tried": tried[1:]})
        raise link.LoaderCrash("the package crashed its loader in a fresh process however linked: "
                               + " || ".join(tried))
    finally:
        link.drop(folder)


def write_meta(folder: Path, meta: dict, build_s: float, check_s: float | None = None, how: str = "") -> None:
    """``meta.json``, last: from then on later processes load the package."""
    _write_json(folder / META, {**meta, "build_s": build_s, "check_s": check_s, "linked": how, "built": time.time()})
    (folder / PENDING).unlink(missing_ok=True)
    (folder / FAILED).unlink(missing_ok=True)


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
    torch.save({"gm": job["gm"], "meta": job["meta"], "options": job.get("options")}, path)
    root = str(Path(__file__).resolve().parents[2])   # where the builder imports pkc from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    with open(folder / "build.log", "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "pkc.aot.build", str(path)], stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return (f"pkc.aot: the package is being built by a background process (pid {proc.pid}, log "
            f"{folder / 'build.log'}); later processes load it")


def compile_layer(model: Any, example_inputs: Sequence[Any], *, folder: Path, target: str,
                  pipeline: str | None, build: Build, versions: dict, remarks: list[str],
                  options: dict | None = None) -> Callable[..., Any]:
    """Compile ``model`` through ``torch.compile`` with pkc's backend, run it once on
    ``example_inputs`` and package it as ``build`` says; the callable that runs it here.

    ``Build.NOW``: the backend's program is compiled by AOTInductor only (no JIT compile
    by Inductor as well) and this process runs the package too; ``Build.BACKGROUND``:
    Inductor compiles it as usual and a detached process builds the package."""
    from pkc.torch_backend import PkcBackend

    failed = folder / FAILED
    if build is not Build.NEVER and failed.is_file():
        try:
            if json.loads(failed.read_text()).get("versions") == versions:
                remarks.append(f"pkc.aot: no package: an earlier build failed ({folder / 'build.log'}); "
                               "remove the folder to try again")
                build = Build.NEVER
        except (OSError, ValueError):
            pass
    skip = _machine_skip(folder, versions)
    if build is not Build.NEVER and skip is not None:
        remarks.append(skip)
        build = Build.NEVER
    be = PkcBackend(target=target, pipeline=pipeline)
    module = model if isinstance(model, torch.nn.Module) else None
    be._capture_module, be._capture_inputs = module, list(example_inputs)
    seen: list[dict] = []
    jobs: list[dict | str] = []

    def hook(**got: Any) -> Callable[..., Any] | None:
        seen.append(got)
        if build is not Build.NOW or len(seen) > 1:
            return None
        job = _program_job(model, example_inputs, got, versions, pipeline, target)
        jobs.append(job)
        if isinstance(job, str):
            return None
        try:
            # checked in a fresh process before this process runs it
            job["build_s"], job["check_s"], how = build_checked(job["gm"], job["tensors"], folder, job["meta"],
                                                                options)
            job["how"] = how
            loader = torch._C._aoti.AOTIModelPackageLoader(str(folder / PACKAGE), "model", False, 1,
                                                          _device_index(job["tensors"]))
        except Exception as err:  # noqa: BLE001 - Inductor compiles it instead; say why
            jobs[-1] = f"the package build failed: {type(err).__name__}: {err}"
            _write_json(folder / FAILED, {"error": jobs[-1], "versions": versions})
            return None
        remarks.append(f"pkc.aot: package built in {job['build_s']:.2f} s{' (' + how + ')' if how else ''} "
                       f"and run in a fresh process in {job['check_s']:.2f} s ({folder / PACKAGE}); this "
                       "process runs it too")
        return lambda *args: loader.boxed_run(list(args))

    be._program_hook = hook
    cm = torch.compile(model, backend=be, fullgraph=True, dynamic=False)
    with torch.no_grad():
        out = cm(*example_inputs)
    remarks += [r for p in be.programs for r in p.remarks()
                if "first call" in r or "imported from source" in r]
    params = list(module.parameters()) if module is not None else []

    def run(*args: Any) -> Any:
        _no_grad_check([a for a in args if isinstance(a, torch.Tensor)] + params, "pkc.aot_compile")
        return cm(*args)

    if build is Build.NEVER:
        return run
    if len(seen) != 1:
        remarks.append(f"pkc.aot: no package ({len(seen)} graphs; a package holds one); every "
                       "process compiles this layer")
        return run
    job = jobs[0] if jobs else _program_job(model, example_inputs, seen[0], versions, pipeline, target)
    why = job if isinstance(job, str) else _with_outputs(job, out)
    if why is not None:
        remarks.append(f"pkc.aot: no package ({why}); every process compiles this layer")
        return run
    if build is Build.NOW:
        write_meta(folder, job["meta"], job["build_s"], job.get("check_s"), job.get("how", ""))
    else:
        job["options"] = options
        remarks.append(_spawn(job, folder))
    return run


def _device_index(tensors: Sequence[torch.Tensor]) -> int:
    dev = next((t.device for t in tensors if t.device.type == "cuda"), None)
    return -1 if dev is None else (dev.index or 0)


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
        secs, check, how = build_checked(job["gm"], args, folder, meta, job.get("options"))
        del args
        write_meta(folder, meta, secs, check, how)
        print(f"pkc.aot: package built in {secs:.2f} s{' (' + how + ')' if how else ''}, ran in a fresh "
              f"process in {check:.2f} s", flush=True)
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
