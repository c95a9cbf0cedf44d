"""GPU targets and the cost model that passes consult (DESIGN.md, "Cost model and targets")."""

from pkc.target.targets import TARGETS, Target, get_target
from pkc.target.cost import (
    PATTERNS, Choice, Event, FusionPlan, Shapes, Tiling,
    all_gather_time, barrier_time, fan_out_time, all_reduce_time, all_to_all_time, choose_all_gather, choose_all_reduce,
    choose_all_to_all, choose_reduce_scatter, comm_bytes, comm_sms_candidates, copy_time,
    gemm_tiling, gemm_time, launch_time, link_rate, link_time, plan_fusion, predict_fused,
    predict_unfused, reduce_scatter_time, schedule_timeline, signal_time, to_chrome_trace,
)

__all__ = [
    "TARGETS", "Target", "get_target", "PATTERNS", "Choice", "Event", "FusionPlan", "Shapes",
    "Tiling", "all_gather_time", "barrier_time", "fan_out_time", "all_reduce_time", "all_to_all_time", "choose_all_gather",
    "choose_all_reduce", "choose_all_to_all", "choose_reduce_scatter", "comm_bytes",
    "comm_sms_candidates", "copy_time", "gemm_tiling", "gemm_time", "launch_time", "link_rate",
    "link_time", "plan_fusion", "predict_fused", "predict_unfused", "reduce_scatter_time",
    "schedule_timeline", "signal_time", "to_chrome_trace",
]
