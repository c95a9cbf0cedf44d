"""A pass plugin whose pass name is taken by one of pkc's own passes (for mlir-habits.mlir)."""

from dataclasses import dataclass

from xdsl.passes import ModulePass

from pkc.passes.registry import register_pass


@register_pass
@dataclass(frozen=True)
class NotOverlap(ModulePass):
    """Claims the name of pkc's overlap pass."""

    name = "overlap"

    def apply(self, ctx, op) -> None:
        pass
