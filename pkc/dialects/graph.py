"""Graph-level pk ops: a per-rank tensor program (SPMD over ``world`` ranks).

Every value is a builtin ``tensor<...>`` holding one rank's tensor; every rank runs the same
function on its own data. Collectives combine the W per-rank tensors. Shapes are static.
Functions are builtin ``func.func`` with ``func.return``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

from pkc.dialects.common import (
    COLLECTIVE_REDUCE_FNS,
    int_array,
    int_list,
    reduced_shape,
    scalar_attr,
    verify_map,
    verify_reduce,
    verify_scalar,
    verify_world,
)
from pkc.dialects.rank_groups import ATTR as GROUPS_ATTR
from pkc.dialects.rank_groups import groups_attr, verify_groups
from pkc.dialects.types import (
    SUPPORTED_ELEMENT_TYPES,
    is_float,
    is_fp8,
    is_supported_element,
    shape_str,
)

Value = SSAValue | Operation


def _tensor(v: Attribute, op: str, what: str) -> TensorType:
    if not isinstance(v, TensorType):
        raise VerifyException(f"'{op}' {what} must be a tensor, got {v}")
    return v


def _sig(t: TensorType) -> tuple[tuple[int, ...], Attribute]:
    return tuple(t.get_shape()), t.element_type


def _with_shape(t: Attribute, shape: Sequence[int]) -> TensorType:
    assert isinstance(t, TensorType)
    return TensorType(t.element_type, shape)


def _type_of(v: Value) -> Attribute:
    return SSAValue.get(v).type


# Graph ops that take 8-bit float tensors (types.FP8_TYPES): the ones that only move data,
# "cast" (to and from fp8) and the scaled matmul. Any other op (an add, a reduction, a
# reducing collective) refuses them, naming the element type, as torch does not compute
# in fp8 either.
FP8_OPS = frozenset({"pk.reshape", "pk.transpose", "pk.broadcast", "pk.slice", "pk.concat",
                     "pk.all_gather", "pk.all_to_all", "pk.scaled_matmul"})


def carries_fp8(op: Operation) -> bool:
    if op.name == "pk.map":
        return op.fn.data == "cast"  # type: ignore[attr-defined]
    return op.name in FP8_OPS


class PkTensors(OpTrait):
    """Every tensor operand and result holds a pk element type and is not empty.

    The builtin tensor type admits any element (none, index, complex, f8) and size-0
    dimensions; the passes and codegen handle neither (they divide by extents and map
    element types to PTX), so the graph ops refuse them here, naming the value.
    """

    def verify(self, op: Operation) -> None:
        values = [("operand", i, v) for i, v in enumerate(op.operands)]
        values += [("result", i, v) for i, v in enumerate(op.results)]
        for what, i, v in values:
            t = v.type
            if not isinstance(t, TensorType):
                continue  # the op's own constraints name non-tensors
            if is_fp8(t.element_type):
                if not carries_fp8(op):
                    raise VerifyException(
                        f"'{op.name}' {what} #{i} has element type {t.element_type}, an 8-bit "
                        "float, which only ops that move data, \"cast\" and pk.scaled_matmul "
                        "take (cast it to a wider float first)"
                    )
            elif not is_supported_element(t.element_type):
                raise VerifyException(
                    f"'{op.name}' {what} #{i} has element type {t.element_type}, which pk does not "
                    f"support (expected one of {SUPPORTED_ELEMENT_TYPES})"
                )
            if any(d == 0 for d in t.get_shape()):
                raise VerifyException(
                    f"'{op.name}' {what} #{i} of type {t} is empty (a dimension of size 0); "
                    "pk needs tensors with at least one element"
                )


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """``result = lhs @ rhs`` over the last two dims; leading (batch) dims must be equal.

    Products are accumulated in f32 (f64 for f64 inputs); the result is rounded to the
    result's element type, which may differ from the operands' (bf16 x bf16 -> f32).
    """

    name = "pk.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)"

    def __init__(self, lhs: Value, rhs: Value, result_type: Attribute | None = None):
        if result_type is None:
            a, b = _type_of(lhs), _type_of(rhs)
            assert isinstance(a, TensorType) and isinstance(b, TensorType)
            result_type = TensorType(a.element_type, (*a.get_shape()[:-1], b.get_shape()[-1]))
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    def verify_(self) -> None:
        a, b, r = self.lhs.type, self.rhs.type, self.result.type
        assert isinstance(a, TensorType) and isinstance(b, TensorType) and isinstance(r, TensorType)
        sa, sb, sr = a.get_shape(), b.get_shape(), r.get_shape()
        if len(sa) < 2 or len(sa) != len(sb):
            raise VerifyException(
                f"'pk.matmul' needs operands of equal rank >= 2, got {a} and {b}"
            )
        if sa[-1] != sb[-2]:
            raise VerifyException(
                f"'pk.matmul' contraction dims differ: lhs {a} has K={sa[-1]}, rhs {b} has K={sb[-2]}"
            )
        if sa[:-2] != sb[:-2]:
            raise VerifyException(f"'pk.matmul' batch dims differ: {a} vs {b}")
        expected = (*sa[:-1], sb[-1])
        if tuple(sr) != expected:
            raise VerifyException(
                f"'pk.matmul' result shape {shape_str(sr)} should be {shape_str(expected)}"
            )
        if a.element_type != b.element_type or not is_float(a.element_type):
            raise VerifyException(
                f"'pk.matmul' operands need one float element type, got {a.element_type} and {b.element_type}"
            )
        if not is_float(r.element_type):
            raise VerifyException(f"'pk.matmul' result must be float, got {r.element_type}")


@irdl_op_definition
class MapOp(IRDLOperation):
    """Elementwise ``fn`` over operands broadcast numpy-style to the result shape.

    Floats compute in f32 (f64 for f64) and round to the result type; ``cast`` converts
    element types; comparisons produce i1; ``where(cond, a, b)`` selects.
    """

    name = "pk.map"
    fn = attr_def(StringAttr)
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = "$fn $inputs attr-dict `:` functional-type($inputs, $result)"

    def __init__(self, fn: str, inputs: Sequence[Value], result_type: Attribute):
        super().__init__(
            operands=[list(inputs)], result_types=[result_type], attributes={"fn": StringAttr(fn)}
        )

    def verify_(self) -> None:
        ops = [_sig(_tensor(v.type, self.name, "operand")) for v in self.inputs]
        verify_map(self.name, self.fn.data, ops, _sig(_tensor(self.result.type, self.name, "result")))


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A tensor whose every element is ``value`` (a splat)."""

    name = "pk.constant"
    value = attr_def(FloatAttr | IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, value: float | int, result_type: TensorType):
        super().__init__(
            result_types=[result_type],
            attributes={"value": scalar_attr(value, result_type.element_type)},
        )

    def verify_(self) -> None:
        t = _tensor(self.result.type, self.name, "result")
        verify_scalar(self.name, self.value, t.element_type)


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """Reduces ``input`` with ``fn`` (sum, max, min, mean) over ``dims``."""

    name = "pk.reduce"
    fn = attr_def(StringAttr)
    dims = attr_def(ArrayAttr)
    keepdim = opt_attr_def(UnitAttr)
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = "$fn $input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, fn: str, input: Value, dims: Sequence[int], keepdim: bool,
                 result_type: Attribute | None = None):
        t = _type_of(input)
        if result_type is None:
            result_type = _with_shape(t, reduced_shape(t.get_shape(), dims, keepdim))
        attrs: dict[str, Attribute] = {"fn": StringAttr(fn), "dims": int_array(dims)}
        if keepdim:
            attrs["keepdim"] = UnitAttr()
        super().__init__(operands=[input], result_types=[result_type], attributes=attrs)

    def verify_(self) -> None:
        verify_reduce(
            self.name, self.fn.data, int_list(self.dims), self.keepdim is not None,
            _sig(_tensor(self.input.type, self.name, "operand")),
            _sig(_tensor(self.result.type, self.name, "result")),
        )


class _OneTensorOp(IRDLOperation):
    """Ops of one tensor operand and one tensor result, written ``op %x {attrs} : a -> b``."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"


@irdl_op_definition
class ReshapeOp(_OneTensorOp):
    """Same elements in row-major order, new shape (numel must be equal)."""

    name = "pk.reshape"

    def __init__(self, input: Value, result_type: Attribute):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        assert isinstance(a, TensorType) and isinstance(r, TensorType)
        if a.element_type != r.element_type:
            raise VerifyException(f"'pk.reshape' cannot change the element type ({a} -> {r})")
        if _numel(a) != _numel(r):
            raise VerifyException(
                f"'pk.reshape' element count differs: {a} has {_numel(a)}, {r} has {_numel(r)}"
            )


def _numel(t: TensorType) -> int:
    n = 1
    for d in t.get_shape():
        n *= d
    return n


@irdl_op_definition
class TransposeOp(_OneTensorOp):
    """Permutes dimensions: ``result.shape[i] == input.shape[perm[i]]``."""

    name = "pk.transpose"
    perm = attr_def(ArrayAttr)

    def __init__(self, input: Value, perm: Sequence[int], result_type: Attribute | None = None):
        if result_type is None:
            s = _type_of(input).get_shape()
            result_type = _with_shape(_type_of(input), [s[p] for p in perm])
        super().__init__(operands=[input], result_types=[result_type],
                         attributes={"perm": int_array(perm)})

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        assert isinstance(a, TensorType) and isinstance(r, TensorType)
        if not all(isinstance(p, IntegerAttr) for p in self.perm.data):
            raise VerifyException(f"'pk.transpose' perm must hold integers, got {self.perm}")
        perm = int_list(self.perm)
        if sorted(perm) != list(range(len(a.get_shape()))):
            raise VerifyException(f"'pk.transpose' perm {perm} is not a permutation of rank {len(a.get_shape())}")
        expected = tuple(a.get_shape()[p] for p in perm)
        if tuple(r.get_shape()) != expected or r.element_type != a.element_type:
            raise VerifyException(
                f"'pk.transpose' result {r} should have shape {shape_str(expected)} and element {a.element_type}"
            )


@irdl_op_definition
class BroadcastOp(_OneTensorOp):
    """Numpy-style broadcast of ``input`` to the result shape (torch's expand)."""

    name = "pk.broadcast"

    def __init__(self, input: Value, result_type: Attribute):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        assert isinstance(a, TensorType) and isinstance(r, TensorType)
        sa, sr = a.get_shape(), r.get_shape()
        ok = len(sa) <= len(sr) and all(
            d in (1, e) for d, e in zip(reversed(sa), reversed(sr))
        )
        if not ok or a.element_type != r.element_type:
            raise VerifyException(f"'pk.broadcast' cannot broadcast {a} to {r}")


@irdl_op_definition
class SliceOp(_OneTensorOp):
    """Elements ``start, start+step, ... < end`` of dimension ``dim``."""

    name = "pk.slice"
    dim = attr_def(IntegerAttr)
    start = attr_def(IntegerAttr)
    end = attr_def(IntegerAttr)
    step = attr_def(IntegerAttr)

    def __init__(self, input: Value, dim: int, start: int, end: int, step: int = 1,
                 result_type: Attribute | None = None):
        if result_type is None:
            s = list(_type_of(input).get_shape())
            s[dim] = max(0, -(-(end - start) // step))
            result_type = _with_shape(_type_of(input), s)
        attrs = {k: IntegerAttr(v, i64) for k, v in
                 dict(dim=dim, start=start, end=end, step=step).items()}
        super().__init__(operands=[input], result_types=[result_type], attributes=attrs)

    def verify_(self) -> None:
        a, r = self.input.type, self.result.type
        assert isinstance(a, TensorType) and isinstance(r, TensorType)
        sa = list(a.get_shape())
        dim, start, end, step = (x.value.data for x in (self.dim, self.start, self.end, self.step))
        if not 0 <= dim < len(sa):
            raise VerifyException(f"'pk.slice' dim {dim} out of range for {a}")
        if step <= 0 or not 0 <= start <= end <= sa[dim]:
            raise VerifyException(
                f"'pk.slice' range [{start}:{end}:{step}] invalid for dimension {dim} of size {sa[dim]}"
            )
        sa[dim] = -(-(end - start) // step)
        if list(r.get_shape()) != sa or r.element_type != a.element_type:
            raise VerifyException(f"'pk.slice' result {r} should be {_with_shape(a, sa)}")


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenates operands along ``dim``."""

    name = "pk.concat"
    dim = attr_def(IntegerAttr)
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), PkTensors())
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $result)"

    def __init__(self, inputs: Sequence[Value], dim: int, result_type: Attribute | None = None):
        if result_type is None:
            t0 = _type_of(inputs[0])
            s = list(t0.get_shape())
            s[dim] = sum(_type_of(v).get_shape()[dim] for v in inputs)
            result_type = _with_shape(t0, s)
        super().__init__(operands=[list(inputs)], result_types=[result_type],
                         attributes={"dim": IntegerAttr(dim, i64)})

    def verify_(self) -> None:
        types = [_tensor(v.type, self.name, "operand") for v in self.inputs]
        r = _tensor(self.result.type, self.name, "result")
        dim = self.dim.value.data
        if not types:
            raise VerifyException("'pk.concat' needs at least one operand")
        s0 = list(types[0].get_shape())
        if not 0 <= dim < len(s0):
            raise VerifyException(f"'pk.concat' dim {dim} out of range for rank {len(s0)}")
        for t in types:
            s = list(t.get_shape())
            if len(s) != len(s0) or any(a != b for i, (a, b) in enumerate(zip(s, s0)) if i != dim) \
                    or t.element_type != types[0].element_type:
                raise VerifyException(f"'pk.concat' operands {types[0]} and {t} differ outside dim {dim}")
        s0[dim] = sum(t.get_shape()[dim] for t in types)
        if list(r.get_shape()) != s0 or r.element_type != types[0].element_type:
            raise VerifyException(f"'pk.concat' result {r} should be {_with_shape(types[0], s0)}")


# ----------------------------------------------------------------------------------------
# Collectives. Each names its world size: shapes depend on it, and a verifier can only
# check them if it is known locally.


class _CollectiveOp(_OneTensorOp):
    # Pure (from the base) at graph level too: a collective is a function of the W ranks'
    # values (every rank runs the same program), so an unused one can go.
    world = attr_def(IntegerAttr)
    # Sub-groups (a device-mesh dimension): the collective runs inside each listed group,
    # ``world`` being one group's size; absent: over all ranks (pkc/dialects/rank_groups.py).
    group_ranks = opt_attr_def(ArrayAttr)

    @property
    def world_size(self) -> int:
        return self.world.value.data

    def _check_world(self) -> int:
        w = self.world_size
        verify_world(self.name, w)
        verify_groups(self, w)
        return w

    def _check_reduce(self, reduce: StringAttr) -> None:
        if reduce.data not in COLLECTIVE_REDUCE_FNS:
            raise VerifyException(
                f"'{self.name}' unknown reduction \"{reduce.data}\" (known: {', '.join(COLLECTIVE_REDUCE_FNS)})"
            )

    def _check_dim(self, attr: IntegerAttr, what: str) -> int:
        d = attr.value.data
        rank = len(self.input.type.get_shape())
        if not 0 <= d < rank:
            raise VerifyException(f"'{self.name}' {what} {d} is out of range for rank {rank}")
        return d

    def _expect(self, shape: Sequence[int]) -> None:
        a, r = self.input.type, self.result.type
        if tuple(r.get_shape()) != tuple(shape) or r.element_type != a.element_type:
            raise VerifyException(
                f"'{self.name}' with world {self.world_size}: result {r} should be "
                f"{_with_shape(a, shape)} for input {a}"
            )


def _world_attrs(world: int, groups: Sequence[Sequence[int]] | None = None,
                 **extra: Attribute) -> dict[str, Attribute]:
    attrs = {"world": IntegerAttr(world, i64), **extra}
    if groups is not None:
        attrs[GROUPS_ATTR] = groups_attr(groups)
    return attrs


@irdl_op_definition
class AllReduceOp(_CollectiveOp):
    """Every rank receives the elementwise reduction (``sum`` by default) over all ranks."""

    name = "pk.all_reduce"
    reduce = attr_def(StringAttr)

    def __init__(self, input: Value, world: int, reduce: str = "sum",
                 groups: Sequence[Sequence[int]] | None = None):
        super().__init__(operands=[input], result_types=[_type_of(input)],
                         attributes=_world_attrs(world, groups, reduce=StringAttr(reduce)))

    def verify_(self) -> None:
        self._check_world()
        self._check_reduce(self.reduce)
        self._expect(self.input.type.get_shape())


@irdl_op_definition
class AllGatherOp(_CollectiveOp):
    """Concatenation of all ranks' inputs along ``dim``, in rank order, on every rank."""

    name = "pk.all_gather"
    dim = attr_def(IntegerAttr)

    def __init__(self, input: Value, dim: int, world: int,
                 groups: Sequence[Sequence[int]] | None = None):
        s = list(_type_of(input).get_shape())
        s[dim] *= world
        super().__init__(operands=[input], result_types=[_with_shape(_type_of(input), s)],
                         attributes=_world_attrs(world, groups, dim=IntegerAttr(dim, i64)))

    def verify_(self) -> None:
        w = self._check_world()
        d = self._check_dim(self.dim, "dim")
        s = list(self.input.type.get_shape())
        s[d] *= w
        self._expect(s)


@irdl_op_definition
class ReduceScatterOp(_CollectiveOp):
    """Reduction over ranks, split along ``dim`` into W chunks; rank r keeps chunk r."""

    name = "pk.reduce_scatter"
    dim = attr_def(IntegerAttr)
    reduce = attr_def(StringAttr)

    def __init__(self, input: Value, dim: int, world: int, reduce: str = "sum",
                 groups: Sequence[Sequence[int]] | None = None):
        s = list(_type_of(input).get_shape())
        s[dim] //= world
        super().__init__(operands=[input], result_types=[_with_shape(_type_of(input), s)],
                         attributes=_world_attrs(world, groups, dim=IntegerAttr(dim, i64),
                                                 reduce=StringAttr(reduce)))

    def verify_(self) -> None:
        w = self._check_world()
        self._check_reduce(self.reduce)
        d = self._check_dim(self.dim, "dim")
        s = list(self.input.type.get_shape())
        if s[d] % w:
            raise VerifyException(
                f"'pk.reduce_scatter' dim {d} of size {s[d]} is not divisible by world {w}"
            )
        s[d] //= w
        self._expect(s)


@irdl_op_definition
class AllToAllOp(_CollectiveOp):
    """Splits the input into W equal chunks along ``split_dim``; chunk p goes to rank p;
    the W chunks a rank receives are concatenated in rank order along ``concat_dim``."""

    name = "pk.all_to_all"
    split_dim = attr_def(IntegerAttr)
    concat_dim = attr_def(IntegerAttr)

    def __init__(self, input: Value, split_dim: int, concat_dim: int, world: int,
                 groups: Sequence[Sequence[int]] | None = None):
        s = list(_type_of(input).get_shape())
        s[split_dim] //= world
        s[concat_dim] *= world
        super().__init__(
            operands=[input], result_types=[_with_shape(_type_of(input), s)],
            attributes=_world_attrs(world, groups, split_dim=IntegerAttr(split_dim, i64),
                                    concat_dim=IntegerAttr(concat_dim, i64)),
        )

    def verify_(self) -> None:
        w = self._check_world()
        sd = self._check_dim(self.split_dim, "split_dim")
        cd = self._check_dim(self.concat_dim, "concat_dim")
        s = list(self.input.type.get_shape())
        if s[sd] % w:
            raise VerifyException(
                f"'pk.all_to_all' split_dim {sd} of size {s[sd]} is not divisible by world {w}"
            )
        s[sd] //= w
        s[cd] *= w
        self._expect(s)


COLLECTIVE_OPS = (AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp)


@irdl_op_definition
class OpaqueOp(IRDLOperation):
    """A torch operation that pkc does not compile: it runs through torch as is.

    ``target`` is the op's qualified name (``aten::cumsum.default``); ``spec`` is the JSON
    encoding of its positional and keyword arguments, where tensor operands appear as
    ``{"operand": i}`` (see pkc.dialects.opaque).
    """

    name = "pk.opaque"
    target = attr_def(StringAttr)
    spec = attr_def(StringAttr)
    inputs = var_operand_def()
    outputs = var_result_def()
    assembly_format = "$target `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(self, target: str, inputs: Sequence[Value], spec: str,
                 result_types: Sequence[Attribute]):
        super().__init__(operands=[list(inputs)], result_types=[list(result_types)],
                         attributes={"target": StringAttr(target), "spec": StringAttr(spec)})

    def verify_(self) -> None:
        try:
            json.loads(self.spec.data)
        except json.JSONDecodeError as e:
            raise VerifyException(f"'pk.opaque' spec of {self.target.data} is not valid JSON: {e}")


GRAPH_OPS = [
    MatmulOp, MapOp, ConstantOp, ReduceOp, ReshapeOp, TransposeOp, BroadcastOp, SliceOp,
    ConcatOp, AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, OpaqueOp,
]
