"""The ``torch.compile`` backend: ``torch.compile(model, backend=pkc.backend(...))``.

Every graph dynamo hands over is captured, imported and compiled as :func:`pkc.compile`
does (:mod:`pkc.api`); where it runs (:class:`ExecutionMode`): pkc's kernels on the GPU,
the reference interpreter on a CPU-only machine, or torch itself for several ranks without
GPUs. The result runs as one torch program per rank compiled by Inductor, with pkc's
kernels as calls inside it (:mod:`pkc.runtime.inductor`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp

from pkc.frontend.capture import (CapturedGraph, InputKind, capture_backend)
from pkc.kinds import Kind

from pkc.api import (CompiledProgram, _MODULE_STATE, _argument_order, _finish, _note_once, _target_name)

__all__ = ["backend", "PkcBackend", "ExecutionMode", "execution_mode"]

log = logging.getLogger("pkc.compile")


class PkcBackend:
    """A ``torch.compile`` backend: ``torch.compile(model, backend=pkc.backend())``.

    Each graph dynamo hands over is captured (aot_autograd, core-aten decompositions) and
    imported into pk IR; the :class:`CompiledProgram` is appended to :attr:`programs`.
    The graph then runs as pkc's program, translated into one torch program per rank that
    Inductor compiles (``inductor=True``, the default; everything outside pkc's kernels is
    Inductor's, and at W = 1 collectives are the identity): pkc's kernels on the GPU (one
    rank, or one rank per process under torchrun with a NCCL group and symmetric memory)
    or on the reference interpreter for one rank without a GPU; through torch (saying so
    once) for several ranks without GPUs. ``inductor=False`` runs the graph op by op
    (pkc.runtime.executable) instead. :attr:`compile_times` records, per graph, the seconds
    of pkc's capture (aot_autograd), of pkc's passes (or its disk cache: ``cache_hit``) and
    of Inductor, Inductor's FX-graph and AOTAutograd cache hits and misses, and, once the
    graph ran, ``first_call_s``: from dynamo's start on the frame to the first call's
    result. That line is also a remark, logged (logger ``pkc.compile``, INFO) and, with
    ``explain=True``, printed with the passes' remarks. With dynamo's precompile cache
    on (``TORCH_CACHING_PRECOMPILE=1``), a graph whose program has no pkc kernel call is
    recorded for it (:mod:`pkc.runtime.precompile`; ``compile_times``' ``precompile`` says
    whether, or why not) and a second process runs it without compiling. Backward
    graphs (training) run through torch and are not imported.

    Notes: pkc compiles static shapes; pass ``dynamic=False`` to ``torch.compile`` so that a
    new input shape recompiles instead of producing a symbolic graph (which pkc rejects).
    Without the user's module at hand, a recorded program numbers the user inputs
    (``GraphInput.user_index``) in the order the graph takes them.
    """

    def __init__(self, *, world_size: int | None = None, target: str = "h200",
                 pipeline: str | None = None, dump_dir: str | os.PathLike | None = None,
                 inductor: bool = True, mode: str | None = None, options: dict | None = None,
                 cache: bool = True, explain: bool = False) -> None:
        self.world_size = world_size
        self.explain = explain
        self.target = _target_name(target)
        self.pipeline = pipeline
        self.dump_dir = dump_dir
        self.inductor, self.mode, self.options, self.cache = inductor, mode, options, cache
        self.programs: list[CompiledProgram] = []
        self.compile_times: list[dict[str, Any]] = []
        # pkc.aot's build (pkc/aot_build.py): the module and example inputs the capture
        # names the graph's inputs by (state_dict keys, positions), and a callback that
        # receives each graph's torch program before Inductor compiles it
        self._capture_module: torch.nn.Module | None = None
        self._capture_inputs: list | None = None
        self._program_hook: Callable[..., None] | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list, mode: str | None = None,
                 options: dict | None = None) -> Callable[..., Any]:
        # torch.compile(backend=..., mode=...) hands its mode and options to the backend
        mode = mode or self.mode
        options = {**(self.options or {}), **(options or {})}
        t_start = time.perf_counter()
        from pkc.runtime import precompile

        # dynamo's id of this graph where its precompile cache is on (pkc.runtime.precompile)
        backend_id = getattr(gm, "_backend_id", None) if precompile.enabled() else None

        def on_graph(captured: CapturedGraph) -> Callable[..., Any]:
            t0 = time.perf_counter()
            dump = None
            if self.dump_dir is not None:
                dump = os.path.join(self.dump_dir, f"graph{len(self.programs)}")
            program = _finish(captured, target=self.target, pipeline=self.pipeline, dump_dir=dump,
                              cache=self.cache and dump is None)
            self.programs.append(program)
            t1 = time.perf_counter()
            before = _cache_counters()
            pre = {}
            if self.inductor and execution_mode(program.world_size) is not ExecutionMode.EAGER:
                why = None
                if backend_id is not None:
                    why = precompile.direct_call_reason(captured.gm, len(example_inputs))
                    pre["precompile"] = why or "recorded"
                on_program = None
                if self._program_hook is not None:
                    hook, direct = self._program_hook, precompile.direct_call_reason(
                        captured.gm, len(example_inputs))

                    def on_program(tp: Any, vals: list) -> Callable[..., Any] | None:
                        return hook(program=program, captured=captured, torch_program=tp,
                                    example_inputs=vals, direct_call=direct)
                runner = _inductor_runner(program, captured, mode, options,
                                          None if why else backend_id, pre, on_program)
            else:
                runner = _graph_runner(program, captured)
            after = _cache_counters()
            record = {"capture_s": t0 - t_start, "pkc_s": t1 - t0,
                      "inductor_s": time.perf_counter() - t1, "cache_hit": program.cache_hit,
                      **{k: after[k] - before[k] for k in after}, **pre}
            self.compile_times.append(record)
            return _first_call_timer(runner, record, program, len(self.programs) - 1, self.explain)

        return capture_backend(on_graph, world_size=self.world_size, module=self._capture_module,
                               example_inputs=self._capture_inputs)(gm, example_inputs)

    @property
    def module(self) -> ModuleOp | None:
        """The pk IR of the latest graph (None before the first compilation)."""
        return self.programs[-1].module if self.programs else None


class ExecutionMode(Kind):
    """Where a backend graph runs (see :func:`execution_mode`)."""

    GPU = "gpu"          # pkc's kernels
    INTERP = "interp"    # the reference interpreter on the CPU
    EAGER = "eager"      # torch runs the captured graph


def execution_mode(world: int) -> ExecutionMode:
    """Where a backend graph runs: GPU (pkc's kernels; one rank, or one rank per process
    under a real torch.distributed group), INTERP (one rank on a CPU-only machine), or
    EAGER (several ranks without GPUs: each process holds one rank's data, which the
    interpreter cannot run alone, so torch runs the graph)."""
    import torch.distributed as dist

    from pkc.runtime import gpu_available

    if gpu_available():
        real_group = dist.is_initialized() and dist.get_backend() in ("nccl", "cuda")
        if world == 1 or real_group:
            return ExecutionMode.GPU
    return ExecutionMode.INTERP if world == 1 else ExecutionMode.EAGER


def _graph_runner(program: CompiledProgram, captured: CapturedGraph) -> Callable[..., Any]:
    """The callable torch.compile runs in place of the graph: pkc's program with this
    process's arguments, or the aten graph through torch where pkc cannot run it."""
    order = _argument_order(captured.inputs)
    constants = [i.value for i in program.inputs if i.kind is InputKind.CONSTANT]
    mode = execution_mode(program.world_size)
    runner: list = []

    def run(*args: Any) -> Any:
        if mode is ExecutionMode.EAGER or len(args) != len(captured.inputs):
            _note_once(f"pkc: {program.world_size} ranks without GPUs: torch runs the graph "
                       "(pkc's program is recorded, see backend.programs)")
            return captured.gm.forward(*args)
        main_args = [args[i] for i in order] + constants
        if mode is ExecutionMode.INTERP:
            from pkc.interp import interpret

            _note_once("pkc: no GPU available; running on the reference interpreter (CPU)")
            return tuple(interpret(program.module, [main_args], 1)[0])
        from pkc.runtime.execute import run_kernel_module, run_kernel_module_distributed

        if program.world_size == 1:
            return tuple(run_kernel_module(program.kernel_module, [main_args], 1,
                                           target=program.target)[0])
        if not runner:  # one runner per compiled graph: buffers and rendezvous are reused
            from pkc.runtime.symm import DistributedRunner

            runner.append(DistributedRunner())
        return tuple(run_kernel_module_distributed(program.kernel_module, main_args,
                                                   runner=runner[0], target=program.target))

    return run


_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
             ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))


def _cache_counters() -> dict[str, int]:
    """Inductor's FX-graph and AOTAutograd's cache hits and misses so far in this process."""
    from torch._dynamo.utils import counters

    return {name: counters[group][name] for group, name in _COUNTERS}


def _first_call_timer(runner: Callable[..., Any], record: dict, program: CompiledProgram,
                      index: int, explain: bool) -> Callable[..., Any]:
    """``runner``, which on its first call (the first call of the compiled frame: dynamo
    installs the frame's code right after the backend returns) records the first-call time
    in ``record``, adds it to the program's remarks and logs it (prints it with
    ``explain``). After that one check, a call is the runner's."""
    done: list[bool] = []

    def run(*args: Any) -> Any:
        if done:
            return runner(*args)
        done.append(True)
        t0 = time.perf_counter()
        out = runner(*args)
        record["first_run_s"] = time.perf_counter() - t0
        record["first_call_s"] = _since_frame_start(record, time.time())
        if record.get("precompile") == "recorded":
            from pkc.runtime import precompile

            precompile.save()   # dynamo recorded the frame's package before running it
        line = _first_call_line(index, record)
        program.runtime_remarks.append(line)
        log.info("%s", line)
        hint = bytecode_hint()
        if hint:
            program.runtime_remarks.append(hint)
            log.info("%s", hint)
        if explain:
            print("\n".join(program.remarks()), flush=True)
        return out

    return run


def bytecode_hint() -> str | None:
    """A remark where this process imported torch's compiler from source: no ``.pyc`` of
    torch._dynamo next to it or under ``PYTHONPYCACHEPREFIX``, and bytecode writing off
    (``PYTHONDONTWRITEBYTECODE``). Then every process compiles torch's Python anew: on the
    H200 machine, importing torch, torch._dynamo and Inductor's compile_fx took 12.3 s that
    way and 3.1 s with a bytecode cache (docs/PERF_NOTES.md, 2026-12-02 (k))."""
    import sys

    mod = sys.modules.get("torch._dynamo")
    cached = getattr(getattr(mod, "__spec__", None), "cached", None)
    if not sys.dont_write_bytecode or not cached or os.path.exists(cached):
        return None
    return ("pkc: torch's compiler was imported from source (no bytecode cache, and "
            "PYTHONDONTWRITEBYTECODE is set): every process pays for compiling it; set "
            "PYTHONPYCACHEPREFIX to a writable folder and unset PYTHONDONTWRITEBYTECODE")


def _since_frame_start(record: dict, now: float) -> float:
    """Seconds from dynamo's start on the frame being compiled (its compilation metrics)
    to ``now``; where torch records none, from pkc's capture on (a lower bound)."""
    try:
        from torch._dynamo.utils import get_compilation_metrics

        start = get_compilation_metrics()[-1].start_time
        if start is not None and 0 <= now - start < 86400:
            record["dynamo_s"] = max(0.0, (now - start) - record["first_run_s"] - record["capture_s"]
                                     - record["pkc_s"] - record["inductor_s"])
            return now - start
    except Exception:  # noqa: BLE001 - torch's metrics are best effort here
        pass
    return record["capture_s"] + record["pkc_s"] + record["inductor_s"] + record["first_run_s"]


def _first_call_line(index: int, r: dict) -> str:
    hits = []
    for name, hit, miss in (("FX-graph", "fxgraph_cache_hit", "fxgraph_cache_miss"),
                            ("AOTAutograd", "autograd_cache_hit", "autograd_cache_miss")):
        if r.get(hit) or r.get(miss):
            hits.append(f"{name} cache {'hit' if r.get(hit) and not r.get(miss) else 'miss'}")
    dynamo = f"dynamo and guards {r['dynamo_s']:.2f} s, " if "dynamo_s" in r else ""
    return (f"pkc: graph {index}: first call {r['first_call_s']:.2f} s ({dynamo}capture "
            f"{r['capture_s']:.2f} s, pkc {r['pkc_s']:.2f} s"
            f"{' (IR from the disk cache)' if r['cache_hit'] else ''}, Inductor {r['inductor_s']:.2f} s"
            f"{' (' + ', '.join(hits) + ')' if hits else ''}, first run {r['first_run_s']:.2f} s)")


def _inductor_runner(program: CompiledProgram, captured: CapturedGraph, mode: str | None,
                     options: dict | None, backend_id: str | None = None,
                     record: dict | None = None,
                     on_program: Callable[..., None] | None = None) -> Callable[..., Any]:
    """pkc's program as one torch program per rank compiled by Inductor
    (:mod:`pkc.runtime.inductor`): pkc's kernels are calls inside it, everything else is
    Inductor's. It takes the aot graph's arguments as they come: no per-call reordering,
    copies or synchronization on pkc's side. ``backend_id``: dynamo's id of the graph,
    where the program may stand in for it in dynamo's precompile cache; ``record`` gets
    ``precompile``: whether it was recorded, or why not. ``on_program``: called with the
    torch program and its example inputs before Inductor compiles it (pkc.aot's build); a
    callable it returns runs the program instead of Inductor's compile of it."""
    from pkc.runtime.inductor import compile_with_inductor, torch_program
    from pkc.runtime.kernel_call import RunKind

    phs = list(captured.gm.graph.find_nodes(op="placeholder"))
    vals = [n.meta.get("val") for n in phs]
    tensor_idx = [k for k, v in enumerate(vals) if isinstance(v, torch.Tensor)]
    order = _argument_order(captured.inputs)
    arg_map: list = [tensor_idx[i] for i in order]
    arg_map += [spec.value for spec in program.inputs[len(order):]]
    device = vals[tensor_idx[0]].device if tensor_idx else torch.device("cpu")
    gpu = execution_mode(program.world_size) is ExecutionMode.GPU
    target = "sm_90a"
    if gpu:
        from pkc.runtime.execute import target_for

        target = target_for(torch.cuda.get_device_capability(device), program.target)
    tp = torch_program(program.kernel_module if gpu else program.module, world=program.world_size,
                       kind=RunKind.GPU if gpu else RunKind.INTERP, arg_map=arg_map,
                       n_inputs=len(phs), device=device, target=target,
                       distributed=program.world_size > 1)
    static = [tensor_idx[i] for i, spec in enumerate(captured.inputs)
              if spec.kind in _MODULE_STATE]
    program.runtime_remarks.append(tp.remark())
    if on_program is not None:
        replaced = on_program(tp, vals)
        if replaced is not None:     # the program compiled otherwise (pkc.aot: AOTInductor)
            return replaced
    why = None
    if backend_id is not None and tp.counts.get("kernel", 0):
        why = "pkc kernel calls"     # a loading process would have no registry of them
    elif backend_id is not None and (mode in ("reduce-overhead", "max-autotune")
                                     or (options or {}).get("triton.cudagraphs")):
        why = "CUDA graphs"          # a loaded artifact takes them from the global config
    if why is not None:
        backend_id = None
        if record is not None:
            record["precompile"] = why
    compiled = compile_with_inductor(tp, vals, mode=mode, options=options, static_inputs=static,
                                     backend_id=backend_id)
    if backend_id is not None:
        from pkc.runtime import precompile

        if not precompile.adopt(backend_id, cpu=device.type == "cpu") and record is not None:
            record["precompile"] = "Inductor recorded no artifact"
    return compiled


def backend(*, world_size: int | None = None, target: str = "h200", pipeline: str | None = None,
            dump_dir: str | os.PathLike | None = None, inductor: bool = True,
            mode: str | None = None, options: dict | None = None, cache: bool = True,
            explain: bool = False) -> PkcBackend:
    """A ``torch.compile`` backend that compiles every graph with pkc (see
    :class:`PkcBackend` for where it runs).

    ``inductor`` (default): everything outside pkc's kernels is compiled by Inductor, with
    pkc's kernels as calls inside that program (False: the graph's other ops run one by one
    through torch). ``mode`` / ``options``: as for ``torch.compile`` with Inductor
    (``"reduce-overhead"``: CUDA graphs); ``torch.compile(..., mode=...)`` passes them too.
    ``cache``: reuse the pass pipeline's result from the disk cache
    (:mod:`pkc.runtime.compile_cache`), keyed by graph, world, target and pipeline.
    ``explain``: print each graph's remarks (the passes' decisions, what Inductor compiles)
    and its first-call time once it has run."""
    return PkcBackend(world_size=world_size, target=target, pipeline=pipeline, dump_dir=dump_dir,
                      inductor=inductor, mode=mode, options=options, cache=cache, explain=explain)
