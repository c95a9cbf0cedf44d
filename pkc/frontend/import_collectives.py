"""Importer handlers of the c10d functional collectives (registered with
:func:`pkc.frontend.import_registry.handles`): pk collectives over the whole world or a
sub-group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from pkc.dialects import graph as g
from pkc.frontend.import_registry import Group, Value, handles, norm_dim, op_or_none

if TYPE_CHECKING:
    from pkc.frontend.importer import _Importer


# ---- collectives ---------------------------------------------------------------------

_REDUCE_OPS = {"sum": "sum", "max": "max", "min": "min", "avg": "avg"}


def _reduce_op(im: _Importer, op: Any) -> str:
    name = str(op).lower()
    if name not in _REDUCE_OPS:
        raise im.error(f"collective reduction '{op}' is not supported (pkc: sum, avg, max, min)")
    return name


def _scale_avg(im: _Importer, v: Value, red: str, size: int) -> Value:
    if red != "avg":
        return v
    return im.map("div", [v, im.const(size, im.elem(v), len(im.shape(v)))])


def _c10d(name: str) -> list[Any]:
    return [op_or_none("_c10d_functional", name), op_or_none("_c10d_functional_autograd", name)]


def _emit_all_reduce(im: _Importer, x: Value, grp: Group, red: str) -> Value:
    op = g.AllReduceOp(x, grp.size, "sum" if red == "avg" else red, grp.groups)
    return _scale_avg(im, im.emit(op).results[0], red, grp.size)


def _emit_all_gather(im: _Importer, x: Value, grp: Group) -> Value:
    if not im.shape(x):
        raise im.error("all_gather of a rank-0 tensor is not supported")
    return im.emit(g.AllGatherOp(x, 0, grp.size, grp.groups)).results[0]


def _emit_reduce_scatter(im: _Importer, x: Value, grp: Group, red: str) -> Value:
    if not im.shape(x) or im.shape(x)[0] % grp.size:
        raise im.error(f"reduce_scatter input {im.shape(x)} does not split into {grp.size} equal parts")
    op = g.ReduceScatterOp(x, 0, grp.size, "sum" if red == "avg" else red, grp.groups)
    return _scale_avg(im, im.emit(op).results[0], red, grp.size)


@handles(*_c10d("all_reduce"))
def _all_reduce(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    return _emit_all_reduce(im, im.value(a["input"]), grp, _reduce_op(im, a["reduce_op"]))


@handles(*_c10d("all_gather_into_tensor"))
def _all_gather(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    return _emit_all_gather(im, im.value(a["input"]), grp)


@handles(*_c10d("reduce_scatter_tensor"))
def _reduce_scatter(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    return _emit_reduce_scatter(im, im.value(a["input"]), grp, _reduce_op(im, a["reduce_op"]))


@handles(*_c10d("all_to_all_single"))
def _all_to_all(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    w = grp.size
    x = im.value(a["input"])
    rows = im.shape(x)[0] if im.shape(x) else 0
    outs, ins = a["output_split_sizes"], a["input_split_sizes"]
    equal = [rows // w] * w
    for sizes in (outs, ins):
        if sizes is not None and list(sizes) and [int(s) if isinstance(s, int) else s for s in sizes] != equal:
            raise im.error(
                f"all_to_all_single with splits {list(sizes)} on a tensor of {rows} rows: pkc "
                f"supports equal splits only ({equal})",
                hint="pad each rank's tokens to a fixed capacity so that splits are equal",
            )
    if rows % w:
        raise im.error(f"all_to_all_single of {rows} rows does not split into {w} equal parts")
    return im.emit(g.AllToAllOp(x, 0, 0, w, grp.groups)).results[0]


@handles(*_c10d("all_reduce_coalesced"))
def _all_reduce_coalesced(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    red = _reduce_op(im, a["reduce_op"])
    return tuple(_emit_all_reduce(im, im.value(x), grp, red) for x in a["inputs"])


@handles(*_c10d("all_gather_into_tensor_coalesced"))
def _all_gather_coalesced(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    return tuple(_emit_all_gather(im, im.value(x), grp) for x in a["inputs"])


@handles(*_c10d("reduce_scatter_tensor_coalesced"))
def _reduce_scatter_coalesced(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"], a["group_size"])
    red = _reduce_op(im, a["reduce_op"])
    return tuple(_emit_reduce_scatter(im, im.value(x), grp, red) for x in a["inputs"])


@handles(op_or_none("_dtensor", "shard_dim_alltoall"))
def _shard_dim_alltoall(im: _Importer, n: torch.fx.Node, a: dict) -> Any:
    grp = im.check_group(a["group_name"])
    x = im.value(a["input"])
    rank = len(im.shape(x))
    gather, shard = norm_dim(a["gather_dim"], rank), norm_dim(a["shard_dim"], rank)
    if im.shape(x)[shard] % grp.size:
        raise im.error(f"all_to_all: dim {shard} of {im.shape(x)} does not split into {grp.size} parts")
    return im.emit(g.AllToAllOp(x, shard, gather, grp.size, grp.groups)).results[0]


