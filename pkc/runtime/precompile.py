"""pkc's compiled graphs in dynamo's precompile cache: a second process skips tracing.

With ``torch._dynamo.config.caching_precompile = True`` (``TORCH_CACHING_PRECOMPILE=1``)
dynamo stores, per compiled function, its bytecode, guards and each graph's backend
artifact on disk (``<inductor cache dir>/dynamo``); the next process that wraps the same
function with ``torch.compile`` loads them and runs the first call without dynamo's
tracing or any backend (measured: benchmarks/compile_time.py, docs/PERF_NOTES.md). A
backend takes part by recording a serializable artifact under the graph's id
(``gm._backend_id``); a graph without one is marked bypassed and compiles as before.

pkc's compiled graph is Inductor's program of one rank (:mod:`pkc.runtime.inductor`), so
its artifact is Inductor's own (the bundled AOTAutograd cache entry, which Inductor
records when the program's graph module carries the backend id), wrapped here so that:

- it is used only where the program can take dynamo's arguments as they come: pkc's
  capture (aot_autograd) changed nothing about the calling convention (no input
  mutation, no aliased or grad-requiring output, no intermediate bases, effect tokens or
  RNG state; one graph input per dynamo input, and no tensor subclass); otherwise
  nothing is recorded and dynamo bypasses the entry;
- it is used only where the program has no pkc kernel call: a loading process does not
  run pkc's compiler, so ``torch.ops.pkc.kernel``'s registry would be empty (at W = 1
  every collective is the identity and the program is Inductor's alone);
- not with CUDA graphs (``mode="reduce-overhead"``): a loaded artifact takes them from
  Inductor's global config, not from the options pkc compiled it with;
- it names pkc's sources (the digest of the IR cache's key, :mod:`compile_cache`): an
  entry with an artifact of other sources fails to load (dynamo counts a
  ``dynamo_cache_error``) and dynamo compiles the function again.

After the first call of a graph, the process's recorded entries are written to dynamo's
cache (what ``torch.compiler.save_cache_artifacts()`` does), so no call is needed.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["enabled", "direct_call_reason", "adopt", "save"]

log = logging.getLogger("pkc.compile")


def enabled() -> bool:
    """Whether dynamo's precompile cache is on in this process."""
    return bool(getattr(torch._dynamo.config, "caching_precompile", False))


def direct_call_reason(fw_gm: torch.fx.GraphModule, n_dynamo_inputs: int) -> str | None:
    """None where the captured forward graph takes dynamo's flattened inputs in order and
    returns its outputs as they are (so Inductor's program of it can be installed as the
    graph's compiled function); else why not."""
    from torch._functorch._aot_autograd.schemas import OutputType
    from torch._guards import TracingContext
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return "no aot_autograd metadata"
    phs = list(fw_gm.graph.find_nodes(op="placeholder"))
    if not (len(phs) == len(meta.input_info) == n_dynamo_inputs):
        return f"{len(phs)} graph inputs for {n_dynamo_inputs} dynamo inputs"
    if any(i.mutates_data or i.mutates_metadata or i.mutates_storage_metadata for i in meta.input_info):
        return "an input is mutated"
    if any(o.output_type != OutputType.non_alias or o.requires_grad for o in meta.output_info):
        return "an output aliases an input or requires grad"
    if meta.num_intermediate_bases or meta.tokens or getattr(meta, "num_graphsafe_rng_states", 0):
        return "intermediate bases, effect tokens or RNG state"
    if any(is_traceable_wrapper_subclass(n.meta.get("val")) for n in phs):
        return "a tensor subclass input"
    outs = fw_gm.graph.find_nodes(op="output")[0].args[0]
    if len(outs) != len(meta.output_info):
        return "extra graph outputs"
    return None


def adopt(backend_id: str, *, cpu: bool) -> bool:
    """After Inductor compiled the program carrying ``backend_id``: wrap the artifact it
    recorded with pkc's sources digest (``cpu``: the program has CPU kernels). False where
    none was recorded."""
    try:
        from torch._dynamo.precompile_context import PrecompileContext

        from pkc.sources import sources_digest

        art = PrecompileContext.serialize_artifact_by_key(backend_id)
        if art is None or isinstance(art, PkcArtifact):
            return art is not None
        PrecompileContext.record_artifact(PkcArtifact(backend_id, {"pkc": sources_digest(),
                                                                   "inductor": art, "cpu": cpu}))
        return True
    except Exception as err:  # noqa: BLE001 - without it dynamo bypasses the entry
        log.info("pkc: no precompile artifact for %s: %s", backend_id, err)
        return False


def save() -> None:
    """Write the process's recorded precompile entries to dynamo's cache (best effort)."""
    try:
        from torch._dynamo.precompile_context import PrecompileContext

        PrecompileContext.save_to_dynamo_cache()
    except Exception as err:  # noqa: BLE001 - the next process compiles as usual
        log.info("pkc: dynamo's precompile cache not written: %s", err)


def _artifact_base() -> type:
    from torch._dynamo.precompile_context import BackendCacheArtifact

    return BackendCacheArtifact


class PkcArtifact(_artifact_base()):  # type: ignore[misc]
    """Inductor's artifact of pkc's program, valid for one version of pkc's sources: it
    is checked while dynamo reads its cache entry (unpickling), where a failure makes
    dynamo count a cache error and compile the function afresh (a failure later, while
    dynamo installs the entry, would end the process in torch 2.13)."""

    def __reduce__(self) -> tuple:
        return (_checked_artifact, (self.key, self.content))

    def after_deserialization(self) -> Any:
        from pkc.runtime import warm_start

        # loading a CPU program's kernels asks for the CPU's vector ISAs (a probe that
        # compiles and runs a test program) unless an earlier process stored the answer
        warm_start.prime(cpu=bool(self.content.get("cpu")))
        return self.content["inductor"].after_deserialization()

    def edit_contents(self, edit_fn: Any) -> None:
        self.content["inductor"].edit_contents(edit_fn)


def _checked_artifact(key: str, content: dict) -> PkcArtifact:
    from pkc.sources import sources_digest

    if content.get("pkc") != sources_digest():
        raise RuntimeError("pkc: a precompiled graph of other pkc sources; compiling it again")
    return PkcArtifact(key, content)
