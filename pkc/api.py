"""pkc's public entry point :func:`compile` (the ``torch.compile`` backend is :mod:`pkc.backend`).

``pkc.compile(fn_or_module, example_inputs)`` captures the program (dynamo + aot_autograd,
see :mod:`pkc.frontend.capture`), imports it into graph-level pk IR and runs the pass
pipeline. The :class:`CompiledProgram` it returns holds the IR and can run it on W
simulated ranks on the CPU (:meth:`CompiledProgram.run_simulated`). Running on GPUs comes
with the code generator and runtime (a later issue).

``torch.compile(model, backend=pkc.backend(...))`` uses the same capture, import and
pipeline for every graph dynamo hands over; the result runs as one torch program per
rank compiled by Inductor, with pkc's kernels as calls inside it
(:mod:`pkc.runtime.inductor`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp, TensorType

from pkc.frontend.capture import (CapturedGraph, GraphInput, GraphOutput, InputKind, OutputKind,
                                  capture)
from pkc.frontend.errors import PkcFrontendError
from pkc.frontend.importer import import_graph

__all__ = ["compile", "CompiledProgram", "PkcFrontendError"]

Params = Mapping[str, torch.Tensor] | torch.nn.Module | Sequence[Mapping[str, torch.Tensor] | torch.nn.Module]


class CompiledProgram:
    """A captured and compiled program.

    Attributes:
        module: the pk IR (``builtin.module`` with ``func.func @main``).
        world_size: the number of ranks its collectives span.
        target: the GPU it is compiled for (``"h200"``, ...).
        inputs: one :class:`~pkc.frontend.capture.GraphInput` per argument of ``@main``,
            in order: user inputs, parameters, buffers and constants, each named.
        outputs: one :class:`~pkc.frontend.capture.GraphOutput` per result of ``@main``.
        not_compiled: ops kept as ``pk.opaque`` (they run through torch), with counts.
        graph: the captured aten-level fx GraphModule.
        stages: ``[(stage name, IR text)]``, the IR after each stage.

    Parameters are arguments of ``@main`` like inputs, so each rank runs with its own
    shard. :meth:`run_simulated` says how to supply them.
    """

    def __init__(self, module: ModuleOp, captured: CapturedGraph, *, target: str,
                 not_compiled: dict[str, int], extra_args: list[tuple[str, torch.Tensor]],
                 stages: list[tuple[str, str]], inputs: Sequence[GraphInput] | None = None) -> None:
        self.module = module
        self.world_size = captured.world_size
        self.target = target
        self.graph = captured.gm
        self.inputs: list[GraphInput] = list(inputs if inputs is not None else captured.inputs) + [
            GraphInput(name, InputKind.CONSTANT, tuple(v.shape), v.dtype, value=v) for name, v in extra_args
        ]
        self.outputs: list[GraphOutput] = captured.outputs
        self.not_compiled = not_compiled
        self.stages = stages
        self.num_user_inputs: int | None = getattr(captured, "num_user_inputs", None)
        self.cache_hit = False                  # the IR came from the disk cache
        self.runtime_remarks: list[str] = []    # how the backend runs it (Inductor, kernels)
        self._cached_remarks: list[str] | None = None
        self._kernel_module: ModuleOp | None = None
        # torch.use_deterministic_algorithms(True) when compiled: the schedule pipeline
        # builds kernels whose results are bitwise repeatable (schedule-fused's
        # deterministic option: reduce-scatter adds in a fixed rank order at W > 2)
        self.deterministic = torch.are_deterministic_algorithms_enabled()

    # ------------------------------------------------------------------ IR

    def ir(self, generic: bool = False) -> str:
        """The pk IR as MLIR text (``generic=True``: the generic form mlir-opt reads)."""
        from pkc.ir import print_module

        return print_module(self.module, generic=generic)

    @property
    def kernel_module(self) -> ModuleOp:
        """The program the GPU runs: :attr:`module` with its kernels taken to the schedule
        level for :attr:`target` (the ``schedule`` pipeline, run once on a copy, on first
        use; :attr:`module` stays the interpreter's reference). Its stage is appended to
        :attr:`stages`."""
        if self._kernel_module is None:
            from pkc.ir import print_module
            from pkc.passes.pipelines import schedule_for_target

            self._kernel_module, ran = schedule_for_target(self.module, self.target,
                                                           deterministic=self.deterministic)
            if ran:
                self.stages.append((f"{len(self.stages):02d}-schedule", print_module(self._kernel_module)))
        return self._kernel_module

    def remarks(self) -> list[str]:
        """The decisions the passes recorded, one line each: ``file:line: [op] text``."""
        from pkc.passes.remarks import format_remarks

        passes = self._cached_remarks if self._cached_remarks is not None else format_remarks(self.module)
        seen = set(passes)
        # the schedule stage's decisions (tiles, kernel kinds), once the GPU program exists
        if self._kernel_module is not None:
            passes = list(passes) + [r for r in format_remarks(self._kernel_module) if r not in seen]
        return list(passes) + self.runtime_remarks

    def kernels(self) -> list[str]:
        """Per pk.kernel of what the GPU runs (:attr:`kernel_module`), the scheduled kernel it
        is (the deciding pass's remark), or the portable path and why (what ``pkc-opt
        --kernels`` prints)."""
        from pkc.passes.pipelines import SCHEDULED_ARCHS, kernel_lines
        from pkc.target.targets import get_target

        arch = get_target(self.target).sm_arch
        default = "" if arch in SCHEDULED_ARCHS else f"no schedule-level lowering of this kernel for {arch}"
        return kernel_lines(self.kernel_module, default=default)

    def __repr__(self) -> str:
        names = ", ".join(f"{i.name}:{i.kind}" for i in self.inputs)
        return f"<pkc.CompiledProgram world={self.world_size} target={self.target} args=[{names}]>"

    # ------------------------------------------------------------------ running

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a CompiledProgram runs all ranks at once: use .run(per_rank_inputs) (on the GPU "
            "when there is one, else on the interpreter) or .run_simulated(per_rank_inputs)"
        )

    def run(self, per_rank_inputs: Sequence[Any], params: Params | None = None,
            device: int | None = None) -> list[list[torch.Tensor]]:
        """Run all W ranks: on the GPU (a virtual world of W ranks on one device, each
        rank's kernels in its own green context) when CUDA is available, otherwise on the
        reference interpreter, saying so once. Arguments as for :meth:`run_simulated`."""
        from pkc.runtime import gpu_available

        if not gpu_available():
            _note_once("pkc: no GPU available; running on the reference interpreter (CPU)")
            return self.run_simulated(per_rank_inputs, params)
        from pkc.runtime import run_kernel_module

        args = self.arguments(per_rank_inputs, params)
        results = run_kernel_module(self.kernel_module, args, self.world_size, device,
                                    target=self.target)
        return self._user_outputs(results)

    def arguments(self, per_rank_inputs: Sequence[Any], params: Params | None = None
                  ) -> list[list[torch.Tensor]]:
        """The argument lists of ``@main`` for every rank (see :meth:`run_simulated`)."""
        w = self.world_size
        if len(per_rank_inputs) != w:
            raise PkcFrontendError(
                f"run_simulated needs inputs for {w} ranks (one entry per rank), got "
                f"{len(per_rank_inputs)}"
            )
        per_rank_params = _per_rank_params(params, w)
        arg_types = _arg_types(self.module)
        out: list[list[torch.Tensor]] = []
        for r in range(w):
            user = per_rank_inputs[r]
            if isinstance(user, torch.Tensor):
                user = (user,)
            n = self.num_user_inputs
            if n is not None and len(user) > n:
                # Extra inputs would be ignored silently: say so (a wrong argument order
                # or a per-rank list passed where one rank's inputs were expected).
                raise PkcFrontendError(
                    f"rank {r}: got {len(user)} inputs, but the program was compiled with "
                    f"{n} example input(s)",
                    hint="per_rank_inputs[r] holds rank r's positional inputs, like example_inputs",
                )
            args = []
            for i, spec in enumerate(self.inputs):
                if spec.kind is InputKind.INPUT:
                    assert spec.user_index is not None
                    if spec.user_index >= len(user):
                        raise PkcFrontendError(
                            f"rank {r}: input '{spec.name}' (positional input {spec.user_index}) "
                            f"is missing; got {len(user)} input(s)"
                        )
                    x = user[spec.user_index]
                elif spec.kind is InputKind.CONSTANT:
                    x = spec.value
                else:
                    x = _param_for_rank(spec, per_rank_params, r, w)
                x = _local(x)
                _check_arg(spec, arg_types[i], x, r)
                args.append(x)
            out.append(args)
        return out

    def run_simulated(self, per_rank_inputs: Sequence[Any], params: Params | None = None,
                      *, inductor: bool = False) -> list[list[torch.Tensor]]:
        """Run the IR for W simulated ranks on the CPU (pkc's reference interpreter).

        ``per_rank_inputs[r]``: rank r's positional inputs (a tuple, or one tensor), like
        ``example_inputs``. ``params`` supplies parameters and buffers:

        - ``None``: the values the program was compiled with (the module's own tensors),
          the same on every rank. Not allowed for sharded DTensor parameters.
        - a list of W state_dicts (or modules): rank r's own local values (Megatron-style
          models whose parameters are already per-rank shards; DTensor values are turned
          into their local tensors).
        - one state_dict (or module) of full, unsharded values: plain parameters are used as
          they are on every rank; DTensor parameters are sharded the way the compiled
          program's parameters were (``Shard(d)``: chunk d of W, ``Replicate``: whole).

        Returns ``outputs[r]``: rank r's outputs, flattened in the order the program
        returns them. (Updates of inputs the program mutates in place are not returned.)

        ``inductor=True`` runs what the backend runs instead: one rank's torch program
        compiled by Inductor (:mod:`pkc.runtime.inductor`), W ranks as W threads, each
        pkc kernel run by the interpreter for all ranks when every rank has reached it.
        """
        args = self.arguments(per_rank_inputs, params)
        if inductor:
            from pkc.runtime.kernel_call import SimulatedWorld

            fn = self._simulated_compiled(args[0])
            return self._user_outputs(SimulatedWorld(self.world_size).run(fn, args))
        from pkc.interp import interpret

        return self._user_outputs(interpret(self.module, args, self.world_size))

    def _simulated_compiled(self, example: list[torch.Tensor]) -> Callable[..., Any]:
        """The per-rank program compiled by Inductor for simulated ranks (made once)."""
        fn = getattr(self, "_inductor_simulated", None)
        if fn is None:
            from pkc.runtime.inductor import compile_with_inductor, torch_program
            from pkc.runtime.kernel_call import RunKind

            kind = RunKind.SIMULATED if self.world_size > 1 else RunKind.INTERP
            n = len(example)
            tp = torch_program(self.module, world=self.world_size, kind=kind,
                               arg_map=list(range(n)), n_inputs=n)
            if tp.remark() not in self.runtime_remarks:
                self.runtime_remarks.append(tp.remark())
            fn = self._inductor_simulated = compile_with_inductor(tp, example)
        return lambda args: fn(*args)

    def _user_outputs(self, results: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        keep = [i for i, o in enumerate(self.outputs) if o.kind is OutputKind.OUTPUT]
        if len(self.outputs) != len(results[0]):
            keep = list(range(len(results[0])))
        return [[res[i] for i in keep] for res in results]


_NOTED: set[str] = set()


def _note_once(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        warnings.warn(text, RuntimeWarning, stacklevel=3)


def _arg_types(module: ModuleOp) -> list[TensorType]:
    from xdsl.dialects import func

    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == "main":
            return list(op.function_type.inputs.data)  # type: ignore[arg-type]
    raise PkcFrontendError("the module has no @main")


def _state(p: Any) -> Mapping[str, Any]:
    if isinstance(p, torch.nn.Module):
        return {**dict(p.named_parameters(remove_duplicate=False)),
                **dict(p.named_buffers(remove_duplicate=False))}
    return p


def _per_rank_params(params: Params | None, w: int) -> Any:
    if params is None:
        return None
    if isinstance(params, (list, tuple)):
        if len(params) != w:
            raise PkcFrontendError(f"params: expected {w} per-rank state dicts, got {len(params)}")
        return [_state(p) for p in params]
    return _state(params)


def _local(x: Any) -> Any:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return x
    if isinstance(x, DTensor):
        return x.to_local()
    if isinstance(x, torch.Tensor):
        return x.detach()
    return x


def _is_dtensor(x: Any) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, DTensor)


def _shard(full: torch.Tensor, spec: GraphInput, rank: int, w: int) -> torch.Tensor:
    from torch.distributed.tensor import Replicate, Shard

    if spec.mesh_size != w or spec.placements is None or len(spec.placements) != 1:
        raise PkcFrontendError(
            f"parameter '{spec.name}' lives on a device mesh of {spec.mesh_size} ranks with "
            f"placements {spec.placements}; pkc shards full values over a 1-D mesh of all "
            f"{w} ranks only"
        )
    (p,) = spec.placements
    if type(p) is Shard:
        return torch.chunk(full, w, dim=p.dim)[rank]
    if isinstance(p, Replicate):
        return full
    raise PkcFrontendError(f"parameter '{spec.name}' has placement {p}; pass per-rank values instead")


def _param_for_rank(spec: GraphInput, params: Any, rank: int, w: int) -> torch.Tensor:
    if params is None:
        value = spec.value
        if value is None:
            raise PkcFrontendError(f"no value for {spec.kind} '{spec.name}'; pass params=")
        if _is_dtensor(value) and any(type(p).__name__ != "Replicate" for p in spec.placements or ()):
            raise PkcFrontendError(
                f"parameter '{spec.name}' is a sharded DTensor ({spec.placements}); its other "
                "ranks' shards are unknown here",
                hint="pass params=<the full, unsharded state_dict> (pkc shards it) or a list of "
                "per-rank state dicts",
            )
        return value
    if isinstance(params, list):
        state = params[rank]
        if spec.name not in state:
            raise PkcFrontendError(f"params for rank {rank} have no '{spec.name}'")
        return state[spec.name]
    if spec.name not in params:
        raise PkcFrontendError(f"params have no '{spec.name}'")
    full = params[spec.name]
    if _is_dtensor(full):
        raise PkcFrontendError(
            f"params['{spec.name}'] is a DTensor; pass full (unsharded) tensors, or a list of "
            "per-rank state dicts"
        )
    if spec.placements is not None:
        return _shard(full.detach(), spec, rank, w)
    return full


def _check_arg(spec: GraphInput, t: TensorType, x: Any, rank: int) -> None:
    from pkc.frontend.importer import torch_dtype_of

    shape, dtype = tuple(t.get_shape()), torch_dtype_of(t.element_type)
    if not isinstance(x, torch.Tensor):
        raise PkcFrontendError(f"rank {rank}: {spec.kind} '{spec.name}' must be a tensor, got {type(x).__name__}")
    if tuple(x.shape) != shape or x.dtype != dtype:
        hint = None
        if spec.kind in _MODULE_STATE:
            hint = ("the compiled program takes each rank's local shard; pass a list of per-rank "
                    "state dicts for a Megatron-style model")
        raise PkcFrontendError(
            f"rank {rank}: {spec.kind} '{spec.name}' should be a {list(shape)} {dtype} tensor "
            f"(as compiled), got {list(x.shape)} {x.dtype}",
            hint=hint,
        )


# ---------------------------------------------------------------------- compile pipeline


def _target_name(target: str) -> str:
    try:
        from pkc.target.targets import get_target
    except ImportError:
        return target
    try:
        return get_target(target).name
    except ValueError as err:
        raise PkcFrontendError(str(err)) from None


def _finish(captured: CapturedGraph, *, target: str, pipeline: str | None,
            dump_dir: str | os.PathLike | None, cache: bool = False) -> CompiledProgram:
    """Import + pipeline; with ``cache``, the result comes from (and goes to) the disk
    cache of compiled graphs (:mod:`pkc.runtime.compile_cache`)."""
    from pkc.runtime import compile_cache

    if not (cache and compile_cache.cache_enabled()):
        return _finish_uncached(captured, target=target, pipeline=pipeline, dump_dir=dump_dir)
    from pkc.ir import parse_module
    from pkc.passes.remarks import format_remarks

    order = _argument_order(captured.inputs)
    key = compile_cache.graph_key(captured.gm, world=captured.world_size, target=target,
                                  pipeline=pipeline, groups=captured.groups,
                                  names=[f"{i.name}:{i.kind}" for i in captured.inputs])
    hit = compile_cache.load(key)
    if hit is not None:
        module = parse_module(hit.ir, f"<pkc cache {key}>")
        program = CompiledProgram(module, captured, target=target, not_compiled=hit.not_compiled,
                                  extra_args=hit.extra_args, stages=[("cached", hit.ir)],
                                  inputs=[captured.inputs[i] for i in order])
        program.cache_hit = True
        program._cached_remarks = hit.remarks
        return program
    program = _finish_uncached(captured, target=target, pipeline=pipeline, dump_dir=dump_dir)
    extra = [(i.name, i.value) for i in program.inputs[len(order):]]
    compile_cache.store(key, compile_cache.CacheEntry(
        program.stages[-1][1], format_remarks(program.module), program.not_compiled, extra))
    return program


def _finish_uncached(captured: CapturedGraph, *, target: str, pipeline: str | None,
                     dump_dir: str | os.PathLike | None) -> CompiledProgram:
    from pkc.ir import print_module, verify_module

    order = _argument_order(captured.inputs)
    imported = import_graph(
        captured.gm, world_size=captured.world_size, arg_names=[i.name for i in captured.inputs],
        groups=captured.groups, arg_order=order,
    )
    module = imported.module
    verify_module(module)
    stages = [("00-imported", print_module(module))]
    if pipeline:
        stages += _run_pipeline(module, pipeline, target)
    program = CompiledProgram(module, captured, target=target, not_compiled=imported.not_compiled,
                              extra_args=imported.extra_args, stages=stages,
                              inputs=[captured.inputs[i] for i in order])
    if dump_dir is not None:
        _dump(dump_dir, program)
    return program


_KIND_ORDER = {InputKind.INPUT: 0, InputKind.PARAMETER: 1, InputKind.BUFFER: 2,
               InputKind.CONSTANT: 3}
_MODULE_STATE = (InputKind.PARAMETER, InputKind.BUFFER)   # a module's state_dict entries


def _argument_order(inputs: Sequence[GraphInput]) -> list[int]:
    """``@main`` takes the user's inputs first (in call order), then parameters, buffers and
    constants (in the order the program first uses them)."""
    return sorted(
        range(len(inputs)),
        key=lambda i: (_KIND_ORDER[inputs[i].kind],
                       inputs[i].user_index if inputs[i].user_index is not None else 0, i),
    )


def _run_pipeline(module: ModuleOp, pipeline: str, target: str) -> list[tuple[str, str]]:
    """Runs ``pipeline``; passes with a ``target`` option compile for ``target`` unless the
    pipeline string names one itself."""
    import dataclasses

    from pkc.ir import make_context, print_module, verify_module
    from pkc.passes.registry import parse_pipeline

    ctx = make_context()
    stages = []
    for i, p in enumerate(parse_pipeline(pipeline), start=1):
        if hasattr(p, "target") and "target=" not in pipeline:
            p = dataclasses.replace(p, target=target)
        p.apply(ctx, module)
        verify_module(module)
        stages.append((f"{i:02d}-{p.name}", print_module(module)))
    return stages


def _dump(dump_dir, program: CompiledProgram) -> None:
    """The IR after every stage (the ``schedule`` stage included: the program the GPU
    runs) and, for every kernel of that program, its PTX and ptxas report."""
    from pkc.codegen import dump_kernels
    from pkc.target import get_target

    module, target = program.kernel_module, program.target
    os.makedirs(dump_dir, exist_ok=True)
    for name, text in program.stages:
        with open(os.path.join(dump_dir, f"{name}.mlir"), "w") as f:
            f.write(text)
    if any(op.name == "pk.kernel" for op in module.walk()):
        dump_kernels(module, os.path.join(dump_dir, "kernels"), targets=(get_target(target).sm_arch,))


def compile(
    fn_or_module: Callable[..., Any] | torch.nn.Module,
    example_inputs: Sequence[Any] | torch.Tensor,
    *,
    world_size: int | None = None,
    target: str = "h200",
    pipeline: str | None = None,
    dump_dir: str | os.PathLike | None = None,
    explain: bool = False,
    cache: bool = False,
) -> CompiledProgram:
    """Capture ``fn_or_module`` on ``example_inputs`` and compile it to pk IR.

    - ``example_inputs``: positional inputs of one rank (shapes and dtypes are what count;
      nothing is executed).
    - ``world_size``: ranks the collectives span. Default: the initialized process group's
      size (1 without one). With no process group initialized, a fake one of this size is
      opened for the capture (so funcol code compiles on a CPU-only machine; models that
      build DTensors or call ``dist`` at construction need
      :func:`pkc.frontend.fake_process_group` around their construction too).
    - ``target``: GPU to compile for (``h100``, ``h200``, ``b200``, ``nvl72``).
    - ``pipeline``: a pass pipeline string (``"a,b{opt=1}"``), run after import.
    - ``pipeline``: ``"default"`` is the full pipeline to fused kernels
      (pkc/passes/pipelines.py); None keeps the imported graph-level IR.
    - ``dump_dir``: writes ``00-imported.mlir``, the IR after every pass
      (``01-<pass>.mlir``, ...) and, under ``kernels/``, every kernel's PTX and ptxas report.
    - ``cache``: take the pipeline's result from the disk cache of compiled graphs when
      this graph was compiled before for the same world, target and pipeline (by any
      process), else store it there (:mod:`pkc.runtime.compile_cache`); ``program.cache_hit``
      says which. Off by default here (the backend's default is on).
    - ``explain``: print the passes' decisions (what was fused, predicted times, SM split,
      what was left alone and why) and what each kernel runs as on the GPU; also available
      later as ``program.remarks()`` and ``program.kernels()``.

    Raises :class:`PkcFrontendError` for programs pkc cannot capture (dynamic shapes,
    collectives over sub-groups, example inputs that do not fit the program).
    """
    target = _target_name(target)
    captured = capture(fn_or_module, example_inputs, world_size=world_size)
    program = _finish(captured, target=target, pipeline=pipeline, dump_dir=dump_dir,
                      cache=cache and dump_dir is None)
    if explain:
        kernels = program.kernels()      # runs the schedule stage: its remarks print too
        print("\n".join(program.remarks()) or "pkc: no decisions recorded (no pipeline ran?)")
        if kernels:
            print("\n".join(kernels))
    return program
