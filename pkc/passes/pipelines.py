"""Named pipelines. ``default`` takes imported graph-level IR to fused kernel-level IR:

    collective-views   move reshapes across collectives, so that the matmul of a 3-d linear
                       layer meets its collective
    dce                drop the views left without users
    overlap            fuse matmul -> reduce_scatter / all_reduce, all_gather -> matmul and
                       all_to_all -> grouped matmul -> all_to_all into one kernel each, where
                       the cost model predicts the fused kernel beats the unfused sequence
    buffer-elision     producers write straight into their destinations (peers' outputs,
                       with add where results are summed); outputs live in symmetric memory
    lower-collectives  every collective left unfused becomes a kernel of puts and signals
                       (one-shot / two-shot all-reduce, direct / ring gather and scatter)
    sm-partition       every worker gets its SM count from the cost model and the target

``schedule`` takes the kernels of ``default`` to the schedule level for a Hopper- or
Blackwell-class target (the kernels that run on the GPU; :func:`schedule_for_target` runs it
on a copy):

    schedule-moe          MoE dispatch + grouped GEMM + combine kernels -> one persistent
                          kernel whose tile loop reads the tokens per expert at run time
    schedule-fused        fused GEMM + collective kernels -> persistent warp-specialized
                          kernels whose epilogue moves tiles to their owners
    schedule-collectives  lowered collectives -> LL / one-shot / two-shot / direct kernels

A kernel none of these passes can schedule keeps its kernel-level body (the portable path runs
it) and a remark says why. On sm_100a (b200, nvl72) schedule-moe and schedule-fused build the
tensor-memory (tcgen05) GEMM with the same communication parts (``FUSED_ARCHS``).

A pipeline name can stand in a pipeline string like a pass: ``-p default``, or with options
``-p 'default{target=b200 force=true}'``; each option goes to the passes that have it.
"""

DEFAULT = (
    "collective-views", "dce", "overlap", "buffer-elision", "lower-collectives", "sm-partition",
)

SCHEDULE = ("schedule-moe", "schedule-fused", "schedule-collectives")

PIPELINES: dict[str, tuple[str, ...]] = {"default": DEFAULT, "schedule": SCHEDULE}

# the GPU architectures the schedule level lowers to (pkc/codegen/lower_schedule*.py)
SCHEDULED_ARCHS = ("sm_90a", "sm_100a")
# the architectures schedule-fused and schedule-moe build kernels for (their GEMM: wgmma
# on sm_90a, tcgen05 + tensor memory on sm_100a); for another, those passes leave the
# kernels unscheduled with :func:`unlowered_arch`'s remark, while schedule-collectives,
# whose kernels use no MMA, lowers to every SCHEDULED_ARCHS entry
FUSED_ARCHS = ("sm_90a", "sm_100a")


# the architectures that have a scheduled (tensor-core) fp8 kernel for every fused GEMM +
# collective kind; and those that have one for some kinds (schedule-fused: the fp8 GEMM of
# gemm_schedule with the scales in its epilogue, pkc/passes/fused_fp8.py). A kind not
# listed would run on the portable path (scalar FMAs, orders of magnitude slower than
# cuBLASLt), so overlap fuses it only under force (:func:`unscheduled_fp8`).
SCALED_FUSED_ARCHS: tuple[str, ...] = ()
SCALED_FUSED_PATTERNS: dict[str, tuple[str, ...]] = {
    "sm_90a": ("mm_reduce_scatter", "all_gather_mm", "mm_all_reduce", "all_gather_k_mm"),
    "sm_100a": ("mm_reduce_scatter", "all_gather_mm", "mm_all_reduce", "all_gather_k_mm")}


def unscheduled_fp8(target: str, pattern=None, problem: str | None = None) -> str | None:
    """Why overlap must not fuse an fp8 scaled matmul of ``pattern`` (a
    :class:`~pkc.target.cost.Pattern`; None: any) with its collective for cost target
    ``target`` (its architecture has no scheduled fp8 fused kernel of that kind, or
    ``problem``: why this instance has none; the cost model's prediction assumes one), or
    None when it has one."""
    from pkc.target.targets import get_target

    arch = get_target(target).sm_arch
    if arch in SCALED_FUSED_ARCHS:
        return None
    kind = getattr(pattern, "value", pattern)
    if kind is not None and kind in SCALED_FUSED_PATTERNS.get(arch, ()):
        if problem is None:
            return None
        return (f"no scheduled fp8 kernel for this {kind} on {arch}: {problem}; "
                "torch._scaled_mm + the collective run instead")
    return (f"no scheduled fp8 kernel for {arch} yet; torch._scaled_mm + the collective "
            "run instead (force=true fuses it on the portable path)")


def unlowered_arch(target: str, archs: tuple[str, ...] = FUSED_ARCHS) -> str | None:
    """Why a schedule pass builds nothing for cost target ``target`` (its architecture has
    no lowering of that pass's kernels yet), or None."""
    from pkc.target.targets import get_target

    arch = get_target(target).sm_arch
    if arch in archs:
        return None
    return f"no {arch} lowering yet (target {target}; lowered for {', '.join(archs)})"


def schedule_for_target(module, target: str, *, deterministic: bool = False):
    """A copy of ``module`` (kernel-level IR, e.g. after ``default``) with its kernels taken
    to the schedule level for ``target`` (a GPU name: ``h200``): the program the GPU
    runtime loads. ``module`` itself is left as it is (the interpreter's reference).
    Returns ``(scheduled module, the pass names that ran)``; for a target whose architecture
    has no schedule-level lowering, the copy is unchanged and no pass runs.
    ``deterministic``: the passes that have the option build kernels with bitwise
    repeatable results (pkc.compile sets it under torch.use_deterministic_algorithms)."""
    import dataclasses

    from pkc.ir import make_context, verify_module
    from pkc.passes.registry import parse_pipeline
    from pkc.target.targets import get_target

    copy = module.clone()
    if get_target(target).sm_arch not in SCHEDULED_ARCHS or \
            not any(op.name == "pk.kernel" for op in copy.walk()):
        return copy, []
    ctx = make_context()
    names = []
    for p in parse_pipeline(f"schedule{{target={target}}}"):
        if deterministic and hasattr(p, "deterministic"):
            p = dataclasses.replace(p, deterministic=True)
        p.apply(ctx, copy)
        verify_module(copy)
        names.append(p.name)
    return copy, names


def unscheduled_reason(kop, default: str = "") -> str:
    """Why kernel ``kop`` has no schedule-level body: the schedule passes' remark on it."""
    remarks = kop.attributes.get("pk.remarks")
    for r in reversed(list(remarks.data) if remarks is not None else []):
        if "left unscheduled" in r.data:
            return r.data
    return default or "not scheduled (the schedule pipeline did not run, or no pass matched it)"


def kernel_lines(module, filename: str = "<unknown>", default: str = "") -> list[str]:
    """Per ``pk.kernel`` of ``module`` (a program after the schedule stage), one remark line:
    the scheduled kernel it is (the deciding pass's remark) or the portable path and why."""
    from pkc.dialects.kernel import KernelOp
    from pkc.dialects.rank_groups import rank_groups
    from pkc.passes.remarks import remark_line

    lines = []
    for kop in module.walk():
        if not isinstance(kop, KernelOp):
            continue
        name = kop.kernel_name.data
        if kop.schedule() is None:
            text = f"@{name}: portable path ({unscheduled_reason(kop, default)})"
        else:
            remarks = kop.attributes.get("pk.remarks")
            said = [r.data for r in (remarks.data if remarks is not None else [])
                    if r.data.startswith("scheduled")]
            text = f"@{name}: " + (said[-1] if said else "scheduled kernel")
        groups = rank_groups(kop)
        if groups is not None:      # one group's kernel, launched per group (runtime/groups.py)
            text += f"; runs in {len(groups)} groups of {len(groups[0])} ranks {groups}"
        lines.append(remark_line(kop, text, filename, tag="kernels"))
    return lines
