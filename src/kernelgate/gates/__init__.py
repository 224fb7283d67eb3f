"""The gate registry. Adding a gate: write its module, add one line here.

Order is pipeline order: dynamic differential gates first, safety gates after, RES-01 last
because it reports the incidents of every run before it.
"""

from kernelgate.gates.base import Gate, GateKind, GateResult, Status
from kernelgate.gates.cmp01_values import ValuesGate
from kernelgate.gates.exc01_nonfinite import NonFiniteGate
from kernelgate.gates.exc02_subnormal import SubnormalGate
from kernelgate.gates.mem01_side_effects import SideEffectsGate
from kernelgate.gates.ord02_determinism import DeterminismGate
from kernelgate.gates.res01_execution import ExecutionSafetyGate

GATES: tuple[type[Gate], ...] = (
    ValuesGate,
    NonFiniteGate,
    SubnormalGate,
    DeterminismGate,
    SideEffectsGate,
    ExecutionSafetyGate,
)

GATE_IDS = tuple(g.id for g in GATES)

__all__ = ["GATES", "GATE_IDS", "Gate", "GateKind", "GateResult", "Status"]
