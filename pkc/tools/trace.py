"""The predicted schedule of every fused kernel as one Chrome trace (Perfetto, chrome://
tracing): one process per kernel, one thread per worker / SM group, spans for loads, MMAs,
puts and waits, from the cost model's timeline of the plan recorded in the kernel."""

from __future__ import annotations

import dataclasses

from xdsl.dialects.builtin import ModuleOp

from pkc.dialects.kernel import KernelOp, WorkerRole
from pkc.passes.remarks import plan_of
from pkc.target import plan_fusion
from pkc.target.cost import schedule_timeline, to_chrome_trace


def kernel_timeline(kernel: KernelOp) -> dict | None:
    """The trace of one kernel fused by ``overlap``, or None for other kernels."""
    plan = plan_of(kernel)
    if "pattern" not in plan or "M" not in plan:
        return None
    shapes = (plan["M"], tuple(int(n) for n in str(plan["N"]).split(",")), plan["K"], plan["groups"],
              plan.get("blocks", 1))
    fusion = plan_fusion(plan["target"], plan["pattern"], shapes, plan["W"], plan["dtype_bytes"])
    comm_sms = _communicate_sms(kernel, plan)
    fusion = dataclasses.replace(fusion, overlap=plan["overlap"], comm_sms=comm_sms)
    return to_chrome_trace(schedule_timeline(fusion), process=f"pk.kernel @{kernel.kernel_name.data}")


def _communicate_sms(kernel: KernelOp, plan: dict) -> int:
    """The SMs sm-partition gave the communicate worker, else the plan's."""
    for w in kernel.workers():
        if w.role_kind is WorkerRole.COMMUNICATE and w.sm_count is not None:
            return w.sm_count
    return int(plan.get("comm_sms", 0))


def module_trace(module: ModuleOp) -> dict:
    """All fused kernels of ``module`` in one trace, one process (pid) each."""
    events: list[dict] = []
    for pid, kernel in enumerate((op for op in module.walk() if isinstance(op, KernelOp)), 1):
        trace = kernel_timeline(kernel)
        if trace is None:
            continue
        for e in trace["traceEvents"]:
            events.append({**e, "pid": pid})
    return {"traceEvents": events, "displayTimeUnit": "ns"}
