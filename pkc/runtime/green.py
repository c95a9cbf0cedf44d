"""Lanes of the virtual world: one stream per rank, each in its own green context.

A green context owns a partition of the GPU's SMs (``cuDevSmResourceSplitByCount``;
the H200 allows partitions of 8 SMs, aligned to 8). Launching rank r's kernel on lane r's
stream makes all W ranks' kernels resident at once, each on its own SMs, so that signals
between them resolve; the kernel's CTA counts are fitted to the lane's SMs.

Fallback (green contexts unavailable, or W too large for 8-SM partitions): plain streams
and an equal share of the SMs per rank. The risk: nothing then guarantees that the W
kernels run concurrently (the hardware usually co-schedules them when their CTAs fit,
which the CTA counts ensure); a rank that does not start would make its peers time out,
and the timeout error says so rather than hanging.
"""

from __future__ import annotations

from dataclasses import dataclass

from pkc.runtime.driver import attribute, call, cu, device, new_event


@dataclass
class Lane:
    rank: int
    stream: object       # CUstream
    sm_count: int
    ctx: object | None   # CUcontext of the green context (None: primary)
    done: object         # CUevent recorded after this rank's kernel
    green: object | None = None


_LANES: dict[tuple[int, int, bool], tuple[list[Lane], str]] = {}


def lanes(world: int, ordinal: int, green: bool = True) -> tuple[list[Lane], str]:
    """(lanes, mode) for ``world`` ranks on GPU ``ordinal``; mode says how they were made."""
    key = (world, ordinal, green)
    if key not in _LANES:
        made = None
        note = ""
        if green:
            try:
                made = _green_lanes(world, ordinal)
            except Exception as e:  # driver without green contexts, too many ranks, ...
                note = f" (green contexts failed: {e})"
        if made is None:
            made = _plain_lanes(world, ordinal)
            _LANES[key] = (made, "plain streams" + note)
        else:
            _LANES[key] = (made, "green contexts")
    return _LANES[key]


def _green_lanes(world: int, ordinal: int) -> list[Lane]:
    d = cu()
    dev = device(ordinal)
    sm = call("cuDeviceGetDevResource", dev, d.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
    total = sm.sm.smCount
    min_part = max(1, sm.sm.minSmPartitionSize or 8)
    align = max(1, sm.sm.smCoscheduledAlignment or 8)
    per = (total // world) // align * align
    if per < min_part:
        raise RuntimeError(f"{world} ranks need {world * min_part} SMs in partitions of "
                           f">= {min_part}, the GPU has {total}")
    groups, n, _rest = call("cuDevSmResourceSplitByCount", world, sm, 0, per)
    if n < world:
        raise RuntimeError(f"cuDevSmResourceSplitByCount made {n} groups of {per} SMs, need {world}")
    out = []
    for r in range(world):
        desc = call("cuDevResourceGenerateDesc", [groups[r]], 1)
        g = call("cuGreenCtxCreate", desc, dev, int(d.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        stream = call("cuGreenCtxStreamCreate", g, int(d.CUstream_flags.CU_STREAM_NON_BLOCKING), 0)
        ctx = call("cuCtxFromGreenCtx", g)
        out.append(Lane(r, stream, groups[r].sm.smCount, ctx, new_event(ctx), g))
    return out


def _plain_lanes(world: int, ordinal: int) -> list[Lane]:
    d = cu()
    total = attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", device(ordinal))
    per = max(1, total // world)
    return [Lane(r, call("cuStreamCreate", int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)), per, None,
                 new_event()) for r in range(world)]
