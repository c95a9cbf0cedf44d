"""Throw-away passes for the pkc-opt tests, loaded with --load-pass-plugin."""

from dataclasses import dataclass

from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.passes import ModulePass

from pkc.ir import diagnostic_at
from pkc.passes.registry import register_pass


@register_pass
@dataclass(frozen=True)
class TestTagFuncs(ModulePass):
    """Set attribute `tag` = "<count>" on every func.func (test pass with options)."""

    name = "test-tag-funcs"
    tag: str = "seen"
    count: int = 1

    def apply(self, ctx, op):
        for func in op.walk():
            if isinstance(func, FuncOp):
                func.attributes[self.tag] = StringAttr(str(self.count))


@register_pass
@dataclass(frozen=True)
class TestRejectFunc(ModulePass):
    """Report a user-facing error at the func.func named `name_to_reject`."""

    name = "test-reject-func"
    name_to_reject: str = "bad"

    def apply(self, ctx, op):
        for func in op.walk():
            if isinstance(func, FuncOp) and func.sym_name.data == self.name_to_reject:
                raise diagnostic_at(func, f"rejected function @{self.name_to_reject}")


@register_pass
@dataclass(frozen=True)
class TestCrash(ModulePass):
    """Crash with a Python exception (a bug in a pass)."""

    name = "test-crash"

    def apply(self, ctx, op):
        raise KeyError("boom")
