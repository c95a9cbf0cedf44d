"""What capture does around dynamo: the user-facing names of a traced function's
arguments and source lines, the translation of dynamo's errors into pkc's (a
sub-group pkc cannot place, a rank read while tracing), and the guards that tracing runs
under (quiet fake-tensor logs, rank-independent DTensor all-to-all, refused rank reads)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.fx

from pkc.frontend.errors import PkcFrontendError, SourceLine, _is_library




def _signature_names(fn: Callable[..., Any], example_inputs: Sequence[Any]) -> list[str]:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    what = f"{type(fn).__name__}.forward" if isinstance(fn, torch.nn.Module) else getattr(
        fn, "__qualname__", repr(fn))
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return [f"input{i}" for i in range(len(example_inputs))]
    try:
        bound = sig.bind(*example_inputs)
    except TypeError as err:
        raise PkcFrontendError(
            f"example_inputs do not match the signature of {what}{sig}: {err} "
            f"(got {len(example_inputs)} example input(s))",
            source=_def_line(target),
        ) from None
    names: list[str] = []
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}{i}" for i in range(len(value))]
        else:
            names.append(name)
    return names


def _def_line(fn: Callable[..., Any]) -> SourceLine | None:
    try:
        code = fn.__code__  # type: ignore[attr-defined]
        lines, _ = inspect.getsourcelines(fn)
        return SourceLine(code.co_filename, code.co_firstlineno, code.co_name, lines[0].strip())
    except (AttributeError, OSError, TypeError):
        return None


def _innermost_user_frame(frames: Any) -> SourceLine | None:
    if not frames:
        return None
    summary = [SourceLine(f.filename, f.lineno or 0, f.name, (f.line or "").strip()) for f in frames]
    for f in reversed(summary):
        if not _is_library(f.file):
            return f
    return summary[-1]


_GOT = re.compile(r"got (\w+(?:Error|Exception)\(.*\))\s*$", re.M)
_FX_CALL = re.compile(r"call_(?:function|method|module) (<[^>]+>|\S+?)\(")


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)$', re.M)


def _user_frame_in_text(text: str) -> SourceLine | None:
    """The user's frame in dynamo's "from user code:" listing (some of its errors carry
    no stack object), the innermost one outside torch and pkc."""
    frames = [SourceLine(f, int(n), name, line.strip()) for f, n, name, line in _FRAME.findall(text)]
    user = [f for f in frames if not _is_library(f.file)]
    return user[-1] if user else None


_RAISED = re.compile(r"raised exception (\w+\(.*\))\s*$", re.M)
_HOW_TO_GROUP = ("pkc compiles collectives over the whole world or over a dimension of a "
                 "device mesh: pass dist.group.WORLD, a DeviceMesh (or one of its dimensions), "
                 "or a group made with dist.new_group")


def _translate_group_error(text: str, source: SourceLine | None) -> PkcFrontendError | None:
    """A collective whose group torch could not resolve (checked before the generic
    translations, whose messages would be dynamo's or empty)."""
    if not dist.is_initialized() and ("Unsupported group type" in text or "_resolve_group" in text
                                      or "process group has not been initialized" in text):
        return PkcFrontendError(
            "the program runs a collective but no process group is initialized",
            source=source,
            hint="pass world_size=W to pkc.compile (it opens torch's fake process group for "
            "the capture), or trace inside `with pkc.frontend.fake_process_group(W):` "
            "(or under torchrun after dist.init_process_group)",
        )
    if "_resolve_group_name_by_ranks_and_tag" in text or "Unsupported group type" in text:
        return PkcFrontendError(
            "a collective's group is not a process group torch knows (a list of ranks is "
            "looked up among the groups made with dist.new_group; a list that is not one "
            f"of them, or of ranks outside the world of {dist.get_world_size()}, fails)",
            source=source,
            hint=_HOW_TO_GROUP,
        )
    return None


def _translate_dynamo_error(err: BaseException) -> PkcFrontendError | None:
    """A user-facing error for a dynamo failure, or None if it is not the user's."""
    from torch._dynamo import exc as dexc

    source = _innermost_user_frame(getattr(err, "real_stack", None))
    text = str(err)
    if source is None:
        source = _user_frame_in_text(text)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(err).__name__)
    known = _rank_read_error(text, source) or _translate_group_error(text, source)
    if known is not None:
        return known
    raised = _RAISED.search(text)
    if raised and isinstance(err, dexc.Unsupported):
        # The user's code raised while tracing: that exception is the message, not
        # dynamo's "no exception handler" boilerplate.
        return PkcFrontendError(f"the program raised {raised.group(1)} while tracing", source=source)
    if isinstance(err, dexc.TorchRuntimeError):
        got = _GOT.search(text)
        op = _FX_CALL.search(text)
        reason = got.group(1) if got else first
        op_text = op.group(1) if op else None
        if op_text and op_text.startswith("<built-in function "):
            op_text = op_text.removeprefix("<built-in function ").rstrip(">")
        return PkcFrontendError(
            f"the example inputs do not fit the program: {reason}",
            op=op_text,
            source=source,
            hint="check the shapes and dtypes of example_inputs against the model "
            "(for a tensor-parallel model: each rank's local shard)",
        )
    if isinstance(err, dexc.Unsupported):
        expl = re.search(r"Explanation: (.*)", text)
        return PkcFrontendError(
            "the program cannot be captured as one graph (dynamo: "
            f"{(expl.group(1) if expl else first).strip()})",
            source=source,
        )
    if isinstance(err, dexc.UserError) or "data-dependent" in text:
        return PkcFrontendError(
            f"the program cannot be captured as one graph (data-dependent control flow or "
            f"shapes): {first}",
            source=source,
            hint="pkc compiles programs whose control flow and shapes do not depend on tensor values",
        )
    if isinstance(err, dexc.TorchDynamoException):
        return PkcFrontendError(f"capture failed: {first}", source=source)
    return None


@contextlib.contextmanager
def _quiet_fake_tensor_logs() -> Iterator[None]:
    """FakeTensor logs every failed op at ERROR with a traceback; pkc reports it instead."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(old)


def _has_hooks(fn: Any) -> bool:
    if not isinstance(fn, torch.nn.Module):
        return False
    return bool(fn._forward_pre_hooks or fn._forward_hooks)


@contextlib.contextmanager
def _rank_independent_dtensor_alltoall() -> Iterator[None]:
    """DTensor's Shard(a) -> Shard(b) redistribution on a CPU mesh falls back to
    all_gather + "take the chunk of my rank", which would bake the tracing rank (0) into
    the graph and give other ranks rank 0's data. While tracing, use the all-to-all op
    that GPU meshes use: it is rank-independent and imports as ``pk.all_to_all``."""
    from torch.distributed import _functional_collectives as funcol
    from torch.distributed.tensor import placement_types

    original = placement_types.shard_dim_alltoall

    def alltoall(input, gather_dim, shard_dim, mesh, mesh_dim):
        group = funcol._resolve_group_name((mesh, mesh_dim))  # in torch 2.11 and 2.13
        return torch.ops._dtensor.shard_dim_alltoall(input, gather_dim, shard_dim, group)

    placement_types.shard_dim_alltoall = alltoall
    try:
        yield
    finally:
        placement_types.shard_dim_alltoall = original


_RANK_READ = "_pkc_rank_read_while_tracing"


@contextlib.contextmanager
def _refuse_rank_reads() -> Iterator[None]:
    """pkc traces rank 0 once and runs that program on every rank, so a rank read by
    Python while tracing (``dist.get_rank()``, ``mesh.get_local_rank()``) would be baked
    in as rank 0's constant: every rank would compute rank 0's arithmetic, silently. While
    capturing, these functions are replaced by ``torch._dynamo.disable``d wrappers: a call
    that dynamo traces (the user's program) stops the one-graph capture, and the error is
    reported at the user's line (:func:`_translate_dynamo_error`); a call that runs
    eagerly (torch's own DTensor code, model construction) returns the rank as before."""
    from torch.distributed.device_mesh import DeviceMesh

    patched = [(dist, "get_rank"), (DeviceMesh, "get_local_rank")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in patched]

    def guard(original: Callable[..., Any]) -> Callable[..., Any]:
        def _pkc_rank_read_while_tracing(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **kwargs)

        return torch._dynamo.disable(_pkc_rank_read_while_tracing)

    for owner, name, original in saved:
        setattr(owner, name, guard(original))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _rank_read_error(text: str, source: SourceLine | None) -> PkcFrontendError | None:
    if _RANK_READ not in text:
        return None
    return PkcFrontendError(
        "the program reads its rank while tracing (dist.get_rank() or mesh.get_local_rank()): "
        "pkc traces one rank and runs that program on every rank, so the value would be "
        "rank 0's on all of them",
        source=source,
        hint="pass what depends on the rank as a per-rank input tensor (for example the "
        "vocabulary offset of a vocab-parallel embedding, or a tensor holding the rank), "
        "or express it with collectives / DTensor placements",
    )


