"""The gate registry. Adding a gate: write its module, add one line here.

Order is pipeline order: dynamic differential gates first, safety gates after, RES-01 last
because it reports the incidents of every run before it.
"""

from kernelgate.gates.base import Gate, GateKind, GateResult, Status
from kernelgate.gates.cmp01_values import ValuesGate
from kernelgate.gates.cmp02_layouts import LayoutsGate
from kernelgate.gates.cmp03_shapes import ShapesGate
from kernelgate.gates.exc01_nonfinite import NonFiniteGate
from kernelgate.gates.exc02_subnormal import SubnormalGate
from kernelgate.gates.mem01_side_effects import SideEffectsGate
from kernelgate.gates.ord01_order import OrderGate
from kernelgate.gates.ord02_determinism import DeterminismGate
from kernelgate.gates.prc01_precision import PrecisionGate
from kernelgate.gates.prc02_accumulator import AccumulatorGate
from kernelgate.gates.res01_execution import ExecutionSafetyGate
from kernelgate.gates.res02_resources import ResourcesGate

GATES: tuple[type[Gate], ...] = (
    ValuesGate,
    LayoutsGate,
    ShapesGate,
    PrecisionGate,
    AccumulatorGate,
    OrderGate,
    NonFiniteGate,
    SubnormalGate,
    DeterminismGate,
    SideEffectsGate,
    ResourcesGate,
    ExecutionSafetyGate,
)

GATE_IDS = tuple(g.id for g in GATES)

__all__ = ["GATES", "GATE_IDS", "Gate", "GateKind", "GateResult", "Status"]
