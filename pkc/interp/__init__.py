"""The reference interpreter: runs pk IR, at both levels, for W simulated ranks on the CPU.

It is the oracle for the frontend (interp(imported IR) == eager torch), for every pass
(interp(before) == interp(after)) and for codegen (GPU output == interp output).
"""

from pkc.interp.api import interpret, random_inputs
from pkc.interp.equivalence import EquivalenceError, check_equivalent
from pkc.interp.values import InterpError

__all__ = [
    "interpret",
    "random_inputs",
    "check_equivalent",
    "EquivalenceError",
    "InterpError",
]
