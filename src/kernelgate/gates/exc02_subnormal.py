"""EXC-02: subnormal inputs and signed zeros keep the oracle's class and sign.

Kernels that flush subnormals to zero (an ``ftz`` math mode, a hand-written
``where(|x| < tiny, 0, x)``) or lose the sign of zero (``x + 0.0`` turns ``-0`` into
``+0``, a ``max(x, 0)`` written the wrong way round) are invisible to any tolerance-based
check: the absolute error is below 1e-38. They matter all the same: ``1 / -0`` is ``-inf``,
``atan2`` and ``copysign`` read the sign, and a flushed gradient never recovers.

The gate feeds every floating input with signed zeros, subnormals of the input dtype and
values within a few ulps of the smallest normal, mixed with ordinary normal values, and
compares, position by position, the IEEE class (zero / subnormal / normal / inf / nan) and
the sign bit of each output with the fp64 oracle rounded to the output dtype. Tolerance-free.
Under the contract's flush policy ``flush-allowed`` an expected subnormal may come back as
a zero of the same sign; ``preserve`` demands the exact class.

Where the reference itself leaves a zero's sign open (a selection among +0 and -0:
relu(-0.0) is -0.0 on the CPU and +0.0 on CUDA; ``oracle/zero_sign.py``), either sign is
accepted at every position that sign reaches, and the class is still judged; a position
whose very class follows from such a sign is not judged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from kernelgate.contract.spec import FlushPolicy
from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult
from kernelgate.gates.outputs import ClassJudgement, PositionCounts, structure_findings
from kernelgate.oracle.compare import (
    MAX_POSITIONS,
    FloatClass,
    first_positions,
    float_classes,
    rounds_like_cpu,
    scalar,
    sign_bits,
)
from kernelgate.oracle.zero_sign import OpenSigns

# (case name, probabilities of subnormal, near-smallest-normal, signed zero, normal)
CASES: list[tuple[str, tuple[float, float, float, float]]] = [
    ("subnormal-mix", (0.3, 0.2, 0.2, 0.3)),
    ("signed-zeros", (0.0, 0.0, 0.7, 0.3)),
    ("subnormal-only", (0.6, 0.25, 0.15, 0.0)),
    ("near-smallest-normal", (0.1, 0.6, 0.1, 0.2)),
]
NEAR_TINY_ULPS = 4  # "near the smallest normal": within this many ulps on either side


@dataclass(frozen=True)
class ExpectedClasses:
    """What ``accepted`` reads of the exact result ``want``, computed once per output.

    The candidate and every honest run of one output are judged against the same ``want``:
    rounding it to ``dtype`` and classifying it (the dearest part of ``accepted``) once per
    output instead of once per judged tensor gives the same masks.
    """

    dtype: torch.dtype
    classes: torch.Tensor  # float_classes(want, dtype)
    signs: torch.Tensor  # sign_bits(want, dtype)
    nan: torch.Tensor  # classes == NAN: no sign to keep
    underflow: torch.Tensor  # a non-zero exact result that rounds to zero
    subnormal: torch.Tensor  # classes == SUBNORMAL
    sign_open: torch.Tensor | None = None  # the reference leaves the sign open (zero_sign)

    @classmethod
    def of(cls, want: torch.Tensor, dtype: torch.dtype) -> ExpectedClasses:
        classes = float_classes(want, dtype)
        return cls(
            dtype=dtype,
            classes=classes,
            signs=sign_bits(want, dtype),
            nan=classes == FloatClass.NAN,
            underflow=(want.detach() != 0) & (classes == FloatClass.ZERO),
            subnormal=classes == FloatClass.SUBNORMAL,
        )

    def with_open_signs(self, open_signs: OpenSigns) -> ExpectedClasses:
        """The same expectation, accepting either sign where ``open_signs`` says the reference
        leaves it open (the class is still judged there)."""
        return replace(self, sign_open=open_signs.sign_open.to(self.classes.device))

    def accepted(self, got: torch.Tensor, flush: FlushPolicy) -> torch.Tensor:
        """Where ``got`` keeps the expected class and sign under ``flush`` (see ``accepted``),
        judged on the device of the expectation (``got`` is moved there)."""
        got = got.to(self.classes.device)
        got_cls = float_classes(got, self.dtype)
        same_sign = (self.signs == sign_bits(got, self.dtype)) | self.nan
        if self.sign_open is not None:
            same_sign |= self.sign_open
        ok = (self.classes == got_cls) & same_sign
        # A non-zero exact result that underflows to zero: the zero's sign depends on whether
        # the hardware fuses multiply and add (an unfused dot rounds each tiny product to +-0
        # before summing), so IEEE leaves it to the implementation. Either zero is accepted.
        got_zero = got_cls == FloatClass.ZERO
        ok |= self.underflow & got_zero
        if flush is FlushPolicy.FLUSH_ALLOWED:
            ok |= self.subnormal & got_zero & same_sign
        return ok


def accepted(
    want: torch.Tensor,
    got: torch.Tensor,
    dtype: torch.dtype,
    flush: FlushPolicy,
) -> torch.Tensor:
    """Where ``got`` keeps ``want``'s class and sign under ``flush`` (both rounded to dtype).

    To judge several outputs against one ``want``, build ``ExpectedClasses.of(want, dtype)``
    once and call its ``accepted`` per output (what the gate does).
    """
    return ExpectedClasses.of(want, dtype).accepted(got, flush)


def class_determined(
    want: torch.Tensor, admissible: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Where every value within ``admissible`` of the exact result ``want`` has its class
    and sign: exact zeros stay exact (an admissible error of 0), a subnormal stays between
    0 and the smallest normal, a normal stays above it, on the same side of zero.

    Non-finite results are always judged (1 / -0.0 is -inf). Where the interval crosses a
    boundary, the class is a rounding question, for the thresholded gates to judge. On
    ``want``'s device.
    """
    ref = want.detach().to(torch.float64)
    width = admissible.to(ref.device, torch.float64)
    magnitude, tiny = ref.abs(), float(torch.finfo(dtype).tiny)
    lowest = magnitude - width  # one float64 pass fewer than writing it out twice
    inside = torch.where(
        magnitude < tiny,
        (lowest > 0) & (magnitude + width < tiny),
        lowest >= tiny,
    )
    return torch.where(ref == 0, width == 0, inside) | ~torch.isfinite(ref)


def subnormal_values(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    mix: tuple[float, float, float, float],
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Seeded values of ``dtype``: subnormals, near-smallest-normals, signed zeros, normals.

    Every value is built exactly in float64 (subnormals of fp32/fp16/bf16 are integer
    multiples of the smallest subnormal, all representable in float64) and then cast, so
    the candidate and the oracle see the same bits. The float64 values are drawn on
    ``device`` (GPUs never flush float64) and cast there only where that device rounds to
    ``dtype`` bit for bit as the CPU does (``rounds_like_cpu``: no flush-to-zero mode, no
    double rounding), else on the CPU; either way what comes back lies on the CPU.
    """
    with torch.device(device):
        magnitude = _signed_magnitudes(shape, dtype, seed, mix, device)
    if rounds_like_cpu(str(torch.device(device)), dtype):
        return magnitude.to(dtype).cpu().reshape(shape)  # -0.0 survives the cast
    return magnitude.cpu().to(dtype).reshape(shape)


def _signed_magnitudes(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    mix: tuple[float, float, float, float],
    device: torch.device | str,
) -> torch.Tensor:
    g = torch.Generator(device).manual_seed(seed)
    finfo = torch.finfo(dtype)
    tiny, eps = float(finfo.tiny), float(finfo.eps)
    smallest = tiny * eps  # smallest positive subnormal
    steps = round(1 / eps)  # subnormals are k * smallest, 1 <= k < steps
    numel = 1
    for size in shape:
        numel *= size
    sign = torch.where(torch.rand(numel, generator=g) < 0.5, -1.0, 1.0).double()
    subnormal = torch.randint(1, steps, (numel,), generator=g).double() * smallest
    ulps = torch.randint(-NEAR_TINY_ULPS, NEAR_TINY_ULPS + 1, (numel,), generator=g).double()
    near_tiny = tiny + ulps * smallest  # below tiny: the largest subnormals; above: normals
    normal = torch.randn(numel, generator=g, dtype=torch.float64).abs() + 0.01
    choice = torch.multinomial(torch.tensor(mix, dtype=torch.float64), numel, True, generator=g)
    # Element i takes candidate choice[i] of (subnormal, near_tiny, 0.0, normal): selected
    # by selection, rather than by stacking the four and indexing the stack (4 x numel
    # float64 besides: 2 GiB at KernelBench's 67M elements).
    magnitude = torch.where(choice == 1, near_tiny, subnormal)
    magnitude = torch.where(choice == 3, normal, magnitude).masked_fill_(choice == 2, 0.0)
    return sign * magnitude  # sign * 0.0 keeps the sign: -0.0 is drawn too


def has_tiny_classes(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` has a zero or subnormals, the classes this gate feeds.

    float8_e8m0fnu (a power-of-two scale: no sign, no zero, no subnormal; zero converts to
    its smallest value) has neither, so its inputs keep their drawn values here.
    """
    info = torch.finfo(dtype)
    probes = torch.tensor([0.0, float(info.tiny) * float(info.eps)], dtype=torch.float64)
    zero, smallest = probes.to(dtype).to(torch.float64).tolist()
    return zero == 0.0 or 0.0 < smallest < float(info.tiny)


class SubnormalGate(Gate):
    id: ClassVar[str] = "EXC-02"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "subnormals and signed zeros"

    def run(self, ctx: GateContext) -> GateResult:
        targets = [
            i
            for i, v in enumerate(ctx.template)
            if isinstance(v, torch.Tensor) and v.is_floating_point() and has_tiny_classes(v.dtype)
        ]
        if not targets:
            return self.skipped("no floating-point input to feed subnormals or signed zeros")
        flush = ctx.contract.postcondition.flush
        total = _Counts()
        per_case: dict[str, dict[str, int]] = {}
        for index, (name, mix) in enumerate(CASES):
            if ctx.focused_out(self.id, name):  # a replay of another case
                continue
            seed = ctx.case_seed(self.id, index)
            case = ctx.drawn_case(name, seed, replaced=set(targets))
            case.values = [
                subnormal_values(tuple(v.shape), v.dtype, seed + 7919 * i, mix, ctx.oracle.device)
                if i in targets
                else v
                for i, v in enumerate(case.values)
            ]
            run = ctx.run(self.id, case)
            expected = ctx.expected(case)
            structure = structure_findings(run.outputs, expected, ctx.output_dtypes(case))
            if structure:
                return self.failed(
                    ctx, "output structure differs from the reference", run, structure
                )
            counts = _Counts()
            for k, (want, got) in enumerate(zip(expected, run.outputs)):
                if not isinstance(want, torch.Tensor) or not got.is_floating_point():
                    continue
                judgement = ctx.on_class_judging_device(
                    got.dtype,
                    functools.partial(_judge_output, ctx, case, k, want, got, flush),
                )
                counts.add(judgement.counts)
                if judgement.mismatched:
                    so_far = _Counts()
                    so_far.add(total)
                    so_far.add(counts)
                    return self.failed(
                        ctx,
                        f"{judgement.mismatched} output position(s) of output {k} lose the "
                        f"oracle's class or sign on {name} (flush policy {flush.value})",
                        run,
                        judgement.findings,
                        {
                            "flush_policy": flush.value,
                            "mismatched_positions": judgement.mismatched,
                            **so_far.position_evidence(),
                        },
                    )
            total.add(counts)
            per_case[name] = counts.per_case()
        return self.passed(
            f"class and sign equal the oracle's at {total.judged} positions over {len(CASES)} "
            f"subnormal / signed-zero cases (flush policy {flush.value})",
            {
                "flush_policy": flush.value,
                **total.position_evidence(),
                # outputs of cases for which the open zero signs were computed
                "open_zero_signs_consulted": total.open_consulted,
                "second_implementation_consulted": total.consulted,
                "cases": per_case,
            },
        )


@dataclass
class _Counts(PositionCounts):
    """Positions one case's outputs judged, for the gate's evidence."""

    judged: int = 0
    excluded: int = 0
    undetermined: int = 0
    sign_open: int = 0
    class_open: int = 0
    open_consulted: int = 0
    consulted: int = 0

    def position_evidence(self) -> dict[str, int]:
        return {
            "judged_positions": self.judged,
            "excluded_honest_disagreement": self.excluded,
            # class or sign within the contract's admissible error of a boundary
            "undetermined_positions": self.undetermined,
            # judged positions whose sign the reference leaves open (either accepted)
            "sign_open_positions": self.sign_open,
            # positions whose class follows from an open sign (not judged)
            "class_open_positions": self.class_open,
        }

    def per_case(self) -> dict[str, int]:
        return {
            "judged": self.judged,
            "excluded": self.excluded,
            "undetermined": self.undetermined,
            "sign_open": self.sign_open,
            "class_open": self.class_open,
        }


def _judge_output(
    ctx: GateContext,
    case: Any,
    k: int,
    want: torch.Tensor,
    got: torch.Tensor,
    flush: FlushPolicy,
    device: torch.device,
) -> ClassJudgement[_Counts]:
    """Output ``k`` of one case judged on ``device``: the oracle's result, the candidate's
    and every honest run are moved there, and only counts and a few positions come back."""
    want, got = want.to(device), got.to(device)
    dtype = got.dtype
    counts = _Counts()
    wanted = ExpectedClasses.of(want, dtype)  # once for the candidate and runs
    got_accepted = wanted.accepted(got, flush)
    determined = class_determined(want, ctx.admissible(case, k, dtype), dtype)
    counts.undetermined = determined.numel() - int(determined.count_nonzero())
    # Where the candidate or the native run differs from the oracle, ask whether the
    # reference fixes those signs at all (three float64 runs at most, once per case): either
    # sign is accepted where it does not, and a class that follows from an open sign is not
    # judged.
    first_look = _judged(
        determined, wanted, got_accepted, {"native": ctx.native(case)}, k=k, flush=flush
    )
    if first_look[1].any() or not torch.equal(first_look[0], determined):
        open_signs = ctx.open_zero_signs(case)[k]
        counts.open_consulted = 1
        if open_signs is not None:
            class_open = open_signs.class_open.to(device)
            counts.class_open = int((determined & class_open).sum())
            determined = determined & ~class_open
            wanted = wanted.with_open_signs(open_signs)
            got_accepted = wanted.accepted(got, flush)
    n_determined = int(determined.count_nonzero())
    judge = functools.partial(_judged, determined, wanted, got_accepted, k=k, flush=flush)
    agree, bad, asked = ctx.judge_classes(case, judge)
    counts.consulted = int(asked)
    counts.judged = int(agree.count_nonzero())
    if wanted.sign_open is not None:
        counts.sign_open = int((agree & wanted.sign_open).count_nonzero())
    # _judged's agree is determined & (...), so determined & ~agree counts this
    counts.excluded = n_determined - counts.judged
    if not bad.any():
        return ClassJudgement(counts)
    return ClassJudgement(
        counts,
        mismatched=int(bad.count_nonzero()),
        findings=[
            _finding(k, pos, want, got, wanted) for pos in first_positions(bad)[:MAX_POSITIONS]
        ],
    )


def _finding(
    k: int, pos: tuple[int, ...], want: torch.Tensor, got: torch.Tensor, wanted: ExpectedClasses
) -> dict[str, Any]:
    dtype = wanted.dtype
    want_at, got_at = want[pos].to(dtype), got[pos]
    either_sign = wanted.sign_open is not None and bool(wanted.sign_open[pos])
    return {
        "output": k,
        "output_position": list(pos),
        "expected_class": FloatClass(int(float_classes(want_at, dtype))).name,
        "actual_class": FloatClass(int(float_classes(got_at, dtype))).name,
        "expected_sign": "either" if either_sign else _sign(want_at),
        "actual_sign": _sign(got_at),
        "expected": scalar(want_at),
        "actual": scalar(got_at),
    }


def _sign(value: torch.Tensor) -> str:
    return "-" if bool(torch.signbit(value)) else "+"


def _judged(
    determined: torch.Tensor,
    wanted: ExpectedClasses,
    got_accepted: torch.Tensor,
    runs: dict[str, list[Any]],
    *,
    k: int,
    flush: FlushPolicy,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions whose class and sign the reference determines and every honest run keeps
    (both rounded to the output dtype), and the candidate's failures among them.

    ``agree`` is always within ``determined`` (it starts as a copy and is only narrowed):
    the gate counts the excluded positions by subtraction on that."""
    agree = determined.clone()
    for honest_run in runs.values():
        agree &= wanted.accepted(honest_run[k], flush)
    return agree, agree & ~got_accepted
