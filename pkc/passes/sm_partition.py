"""sm-partition: the number of SMs of every worker of every ``pk.kernel``.

Matches every ``pk.kernel`` and sets ``sms`` on each of its ``pk.worker`` ops (replacing a
value already there, so the pass is idempotent), then records the split in a remark
("sm-partition: 16 communicate + 116 compute SMs of 132 (h200)") and in ``pk.plan``
(``sms_communicate``, ``sms_compute``).

* Communicate workers get the ``comm_sms`` of the kernel's ``pk.plan`` when overlap put one
  there (the count its cost model chose). Otherwise the cost model says what the worker
  needs: the fewest SMs whose TMA copies saturate the NVLink port
  (``link_rate(target, k) == link_rate(target, all SMs)``), but no more than the tile
  transfers the kernel has to keep in flight (``link_bytes / tile_bytes`` from the plan of
  a lowered collective): a kernel that moves three tiles cannot use more than three SMs.
* Compute workers share what is left of the target's SMs.
* An all-gather + GEMM (pattern ``all_gather_mm``, one matmul) also gets ``put_ctas``: the
  CTAs of its one-grid form (``schedule-fused``) that put this rank's shard to the peers,
  enough to deliver the remote rows at 1.25x the rate the GEMM's predicted time consumes
  them (:func:`pkc.target.fused_tuning.ag_put_ctas`).
* Green contexts (pkc's virtual world and split-kernel fallback run each worker in one) come
  in multiples of ``sm_partition_align`` SMs with a minimum of ``sm_partition_min``
  (8 / 8 on H200, measured): communicate counts are rounded up to that grid (the smallest
  of ``comm_sms_candidates`` that is large enough); compute workers take the rest, the last
  one the unaligned remainder, as cuDevSmResourceSplitByCount hands it out.
* Intra-SM overlap (plan ``overlap = "intra"``) has no SM split: the communication warps
  live in the compute SMs. overlap writes it as one compute worker that also puts its tiles
  (it gets every SM); a kernel that has both roles anyway gets all SMs on every worker.

A kernel whose workers cannot fit (a plan asking for more communicate SMs than the target
has, or leaving a compute worker less than the minimum partition) is an error naming the
kernel, the request and the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from pkc.dialects import kernel as k
from pkc.ir import diagnostic_at
from pkc.passes.registry import register_pass
from pkc.passes.remarks import add_remark, plan_of, set_plan
from pkc.target import cost
from pkc.target.cost import OverlapStyle, Pattern
from pkc.target.targets import Target, get_target


@register_pass
@dataclass(frozen=True)
class SmPartition(ModulePass):
    """Set the SM count of every worker of every pk.kernel from the cost model."""

    name = "sm-partition"
    target: str = "h200"

    def __post_init__(self):
        get_target(self.target)  # ValueError naming the known targets

    def apply(self, ctx, op: ModuleOp) -> None:
        t = get_target(self.target)
        for kernel in [o for o in op.walk() if isinstance(o, k.KernelOp)]:
            _partition(kernel, t)


def _partition(kernel: k.KernelOp, t: Target) -> None:
    workers = kernel.workers()
    comm = [w for w in workers if w.role_kind is k.WorkerRole.COMMUNICATE]
    compute = [w for w in workers if w.role_kind is k.WorkerRole.COMPUTE]
    plan = plan_of(kernel)
    where = f"kernel @{kernel.kernel_name.data}: pk.plan.overlap"
    intra = "overlap" in plan and OverlapStyle.parse(plan["overlap"], where) is OverlapStyle.INTRA
    if comm and compute and intra:
        _assign(workers, [t.num_sms] * len(workers))
        add_remark(kernel, f"sm-partition: intra-SM overlap, communicate and compute workers "
                           f"share all {t.num_sms} SMs ({t.name})")
        set_plan(kernel, sms_communicate=t.num_sms, sms_compute=t.num_sms)
        return
    per_comm, why = _communicate_sms(kernel, t, plan) if comm else (0, "")
    if not comm and intra:
        why = "intra-SM overlap: the compute workers also put their tiles"
    shares = _compute_shares(kernel, t, len(compute), per_comm * len(comm), len(comm), per_comm)
    _assign(comm, [per_comm] * len(comm))
    _assign(compute, shares)
    add_remark(kernel, _remark(t, per_comm * len(comm), sum(shares), why))
    set_plan(kernel, sms_communicate=per_comm * len(comm), sms_compute=sum(shares))
    if plan.get("pattern") in (Pattern.ALL_GATHER_MM, Pattern.ALL_GATHER_K_MM) and \
            len(kernel.inputs) == 2:
        _plan_put_ctas(kernel, t, plan.get("pattern") == Pattern.ALL_GATHER_K_MM)


def _plan_put_ctas(kernel: k.KernelOp, t: Target, along_k: bool = False) -> None:
    """An all-gather + GEMM scheduled as one grid (schedule-fused): its put CTAs, sized
    from the GEMM's predicted time (``pk.plan.put_ctas``, with the reason as a remark).
    ``along_k``: the shard is ``[M, K/W]`` (the gather along K) instead of ``[M/W, K]``."""
    from pkc.target.fused_tuning import ag_put_ctas

    W = kernel.world_size
    (rows, cols), n = kernel.inputs[0].type.get_shape(), kernel.inputs[1].type.get_shape()[-1]
    M, K = (rows, W * cols) if along_k else (W * rows, cols)
    ctas, why = ag_put_ctas(M, n, K, W, t.name)
    set_plan(kernel, put_ctas=ctas)
    add_remark(kernel, f"sm-partition: all-gather + GEMM in one grid: {why}")


def _assign(workers: list[k.WorkerOp], counts: list[int]) -> None:
    for w, n in zip(workers, counts):
        w.attributes["sms"] = IntegerAttr(n, i64)


def _communicate_sms(kernel: k.KernelOp, t: Target, plan: dict) -> tuple[int, str]:
    """SMs of each communicate worker, and the reason in words."""
    planned = plan.get("comm_sms")
    if isinstance(planned, int) and not isinstance(planned, bool) and planned > 0:
        n = _on_grid(t, planned)
        if n > t.num_sms:
            raise diagnostic_at(kernel, f"sm-partition: kernel @{kernel.kernel_name.data} plans "
                                        f"{planned} communicate SMs but {t.name} has {t.num_sms}")
        why = "communicate SMs from the overlap plan"
        if n != planned:
            why += f", rounded up from {planned} to the green-context grid ({_grid_text(t)})"
        return n, why
    need, why = _model_need(t, plan)
    return _on_grid(t, need), why


def _model_need(t: Target, plan: dict) -> tuple[int, str]:
    """Fewest SMs that keep the link busy for this kernel's traffic."""
    full = cost.link_rate(t, t.num_sms, "tma")
    saturate = next(n for n in range(1, t.num_sms + 1) if cost.link_rate(t, n, "tma") >= full)
    why = f"{saturate} TMA SMs saturate the link ({full / 1e9:.0f} GB/s)"
    link, tile = plan.get("link_bytes"), plan.get("tile_bytes")
    if isinstance(link, int) and isinstance(tile, int) and tile > 0:
        transfers = math.ceil(link / tile)
        if transfers == 0:
            return 1, "no peer traffic (one rank)"
        if transfers < saturate:
            plural = "s" if transfers > 1 else ""
            return transfers, (f"at most {transfers} tile transfer{plural} in flight, fewer "
                               f"than the {saturate} TMA SMs that saturate the link")
    return saturate, why


def _on_grid(t: Target, n: int) -> int:
    """The smallest communicate count >= n that green contexts can give."""
    for c in cost.comm_sms_candidates(t):
        if c >= n:
            return c
    align, low = max(1, t.sm_partition_align), max(1, t.sm_partition_min)
    return max(low, math.ceil(n / align) * align)


def _grid_text(t: Target) -> str:
    return f"multiples of {t.sm_partition_align}, at least {t.sm_partition_min}"


def _compute_shares(kernel: k.KernelOp, t: Target, n_compute: int, comm_total: int,
                    n_comm: int, per_comm: int) -> list[int]:
    """Split the SMs the communicate workers leave among the compute workers."""
    rest = t.num_sms - comm_total
    low = max(1, t.sm_partition_min)
    if rest < 0 or (n_compute and rest < n_compute * low):
        parts = [f"{n_comm} communicate x {per_comm}"] if n_comm else []
        if n_compute:
            parts.append(f"{n_compute} compute x >= {low}")
        raise diagnostic_at(
            kernel,
            f"sm-partition: kernel @{kernel.kernel_name.data} needs "
            f"{comm_total + n_compute * low} SMs ({' + '.join(parts)}) but {t.name} has "
            f"{t.num_sms}")
    if not n_compute:
        return []
    align = max(1, t.sm_partition_align)
    each = max(low, rest // n_compute // align * align)
    return [each] * (n_compute - 1) + [rest - each * (n_compute - 1)]


def _remark(t: Target, comm: int, compute: int, why: str) -> str:
    if comm and compute:
        text = f"{comm} communicate + {compute} compute SMs of {t.num_sms} ({t.name})"
    elif comm:
        text = f"{comm} communicate SMs of {t.num_sms} ({t.name})"
    else:
        text = f"{compute} compute SMs of {t.num_sms} ({t.name})"
    return f"sm-partition: {text}" + (f"; {why}" if why else "")
