"""The contract-gated autotuner: knobs read from source, the GRPO search, and a tuning run
that never chooses a config the contract rejects (issue 23, part 4)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from kernelgate.errors import KernelgateError
from kernelgate.tune.knobs import AUTOTUNE_PREFIX, knob_space
from kernelgate.tune.run import CPU_TRITON_PICK_WHY, ConfigResult, TuneOptions, Tuner
from kernelgate.tune.search import Evaluation, Policy, advantages, grpo_search

from .conftest import DATA, ROOT, SOFTMAX, kernelgate

EXAMPLES = ROOT / "examples" / "tune"
TUNE_DATA = DATA / "tune"


# -- knobs, read from source --------------------------------------------------------------
def test_declared_knobs_and_autotune_configs_are_read_without_running_the_candidate() -> None:
    declared = knob_space(EXAMPLES / "softmax_knobs.py")
    assert [k.name for k in declared.knobs] == ["BLOCK", "ROWS", "SPLIT", "num_warps"]
    assert declared.knobs[0].values == (128, 256, 512)
    assert declared.size == 3 * 2 * 2 * 2
    config = (2, 0, 1, 1)
    assert declared.declared_values(config) == {
        "BLOCK": 512,
        "ROWS": 1,
        "SPLIT": 2,
        "num_warps": 4,
    }
    assert declared.autotune_pins(config) == {}

    tuned = knob_space(EXAMPLES / "softmax_autotune.py")
    (knob,) = tuned.knobs
    assert knob.name == AUTOTUNE_PREFIX + "_softmax_kernel"
    assert knob.values == (0, 1, 2, 3, 4)
    assert knob.labels[3] == "ROWS=4, num_warps=4"
    assert tuned.autotune_pins((3,)) == {"_softmax_kernel": 3}
    assert tuned.declared_values((3,)) == {}
    assert tuned.described((3,)) == {knob.name: {"index": 3, "config": "ROWS=4, num_warps=4"}}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "has no knobs to tune"),
        ("KERNELGATE_KNOBS = make()\n", "must be a literal dict"),
        ("KERNELGATE_KNOBS = {'BLOCK': []}\n", "non-empty list"),
        ("KERNELGATE_KNOBS = {'BLOCK': [64, 64]}\n", "repeats a value"),
        ("KERNELGATE_KNOBS = {'BLOCK': [[64]]}\n", "only int, float, bool, str"),
        (
            "import triton\n@triton.autotune(configs=[triton.Config({'B': b}) for b in (1, 2)],"
            " key=[])\ndef k(): pass\n",
            "configs are not a literal list",
        ),
    ],
    ids=["none", "computed", "empty", "repeated", "nested", "comprehension"],
)
def test_bad_or_missing_knobs_are_clear_errors(tmp_path: Path, source: str, message: str) -> None:
    path = tmp_path / "candidate.py"
    path.write_text(source)
    with pytest.raises(KernelgateError, match=message):
        knob_space(path)


# -- the search ---------------------------------------------------------------------------
def test_advantages_are_group_relative() -> None:
    values = advantages([1.0, 2.0, 3.0, 0.0])
    assert sum(values) == pytest.approx(0.0)
    assert sum(v * v for v in values) / len(values) == pytest.approx(1.0)
    assert values[2] > values[1] > values[0] > values[3]
    assert advantages([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]


def test_policy_gradient_moves_mass_toward_the_advantaged_value() -> None:
    policy = Policy.uniform([3])
    policy.update([(0,), (1,), (2,)], [1.0, 0.0, -1.0], rate=1.0)
    p = policy.probabilities()[0]
    assert p[0] > 1 / 3 > p[2] and p[0] + p[1] + p[2] == pytest.approx(1.0)


def _fake_times(config: tuple[int, ...]) -> Evaluation:
    """Knob 0 value 2 breaks the contract and is by far the fastest; otherwise time falls
    with knob 0 and knob 1 adds a little."""
    if config[0] == 2:
        return Evaluation(passed=False, time_ms=0.01)
    return Evaluation(passed=True, time_ms=10.0 - 4.0 * config[0] + 0.5 * config[1])


def test_search_learns_the_fast_passing_values_and_never_ranks_a_failing_config() -> None:
    result = grpo_search([3, 2], _fake_times, rounds=12, group=6, seed=3, rate=1.5)
    assert all(c[0] != 2 for c in result.ranked())  # the fastest config of all never ranks
    assert result.ranked()[0] == (1, 0)  # the fastest config that holds
    final = result.rounds[-1].probabilities
    assert final[0][1] > 0.5 and final[0][2] < 0.2  # mass left the failing value
    assert min(r for rnd in result.rounds for r in rnd.rewards) == 0.0  # failures: lowest


def test_search_is_seeded_and_each_config_is_judged_once() -> None:
    calls: list[tuple[int, ...]] = []

    def evaluate(config: tuple[int, ...]) -> Evaluation:
        calls.append(config)
        return _fake_times(config)

    first = grpo_search([3, 2], evaluate, rounds=5, group=4, seed=7)
    assert len(calls) == len(set(calls)) == len(first.order)
    again = grpo_search([3, 2], _fake_times, rounds=5, group=4, seed=7)
    assert again.order == first.order
    assert [r.rewards for r in again.rounds] == [r.rewards for r in first.rounds]
    capped = grpo_search([3, 2], _fake_times, rounds=5, group=4, seed=7, max_evaluations=2)
    assert len(capped.order) == 2


class _ScriptedTuner(Tuner):
    """A tuner whose judge is scripted: screening passes both configs; every gate passes
    only the slower one. Records what ran."""

    def __init__(self, options: TuneOptions) -> None:
        super().__init__(SOFTMAX / "reference.py", TUNE_DATA / "autotune_tail.py", options)
        self.judged: list[tuple[tuple[int, ...], tuple[str, ...]]] = []

    def _judge(self, config: tuple[int, ...], only: Sequence[str], timed: bool) -> ConfigResult:
        self.judged.append((config, tuple(only)))
        full = not only
        wrong = config == (1,) and full  # config 1 fails a gate outside the screen
        return ConfigResult(
            knobs=self.space.described(config),
            verdict="rejected" if wrong else "verified",
            gates=list(only) or ["all"],
            failed=["MEM-01"] if wrong else [],
            time_ms=None if not timed else (1.0 if config == (1,) else 2.0),
            outputs_ok=True,
            passed=not wrong,
        )


def test_screened_choice_is_re_verified_with_every_gate_and_falls_back() -> None:
    tuner = _ScriptedTuner(TuneOptions(rounds=2, group=4, seed=0, screen=("CMP-01",)))
    report = tuner.run()
    assert [r.verdict for r in report.configs] and len(report.configs) == 2
    # the faster config passed screening, failed every-gate verification, and was dropped
    by_index = {r.knobs[f"{AUTOTUNE_PREFIX}_rows_softmax"]["index"]: r for r in report.configs}
    assert by_index[1].verdict == "verified" and by_index[1].full_verdict == "rejected"
    assert by_index[0].full_verdict == "verified"
    assert report.chosen == {
        f"{AUTOTUNE_PREFIX}_rows_softmax": {"index": 0, "config": "ROWS=1, num_warps=1"}
    }
    assert report.chosen_time_ms == 2.0
    assert ((1,), ()) in tuner.judged and ((0,), ()) in tuner.judged
    assert report.triton_pick is None and report.triton_pick_why == CPU_TRITON_PICK_WHY


# -- a real tuning run, in confined workers under the interpreter -------------------------
def test_tune_never_chooses_the_config_that_drops_a_row(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    result = kernelgate(
        "tune",
        str(TUNE_DATA / "reference.py"),
        str(TUNE_DATA / "autotune_tail.py"),
        "--rounds", "1", "--group", "4", "--screen", "MEM-01", "--trials", "1",
        "--contract", str(TUNE_DATA / "contract.toml"), "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(out.read_text())
    knob = f"{AUTOTUNE_PREFIX}_rows_softmax"
    verdicts = {c["knobs"][knob]["index"]: c for c in report["configs"]}
    assert set(verdicts) == {0, 1}
    assert verdicts[1]["verdict"] == "rejected" and not verdicts[1]["passed"]
    assert verdicts[1]["failed"] == ["MEM-01"]
    assert set(verdicts[1]["gates"]) == {"MEM-01", "RES-01"}  # screened: RES-01 always runs
    assert verdicts[0]["verdict"] == "verified" and verdicts[0]["time_ms"] > 0
    assert report["chosen"] == {knob: {"index": 0, "config": "ROWS=1, num_warps=1"}}
    assert report["chosen_verdict"] == "verified"  # re-verified with every gate
    assert report["triton_pick"] is None and "interpreter" in report["triton_pick_why"]
    assert "chosen:" in result.stdout
    assert report["search"]["contract"] == str(TUNE_DATA / "contract.toml")


def test_a_candidate_without_knobs_exits_two() -> None:
    from typer.testing import CliRunner

    from kernelgate.cli import app

    result = CliRunner().invoke(
        app, ["tune", str(SOFTMAX / "reference.py"), str(SOFTMAX / "honest.py")]
    )
    assert result.exit_code == 2
    assert "has no knobs to tune" in result.stderr and "Traceback" not in result.stderr
    result = CliRunner().invoke(
        app, ["tune", str(SOFTMAX / "reference.py"), str(EXAMPLES / "softmax_knobs.py"),
              "--screen", "XYZ-99"],
    )  # fmt: skip
    assert result.exit_code == 2 and "unknown gate(s) XYZ-99 in --screen" in result.stderr
    result = CliRunner().invoke(
        app, ["tune", str(SOFTMAX / "reference.py"), str(EXAMPLES / "softmax_knobs.py"),
              "--contract", "no/such/contract.toml"],
    )  # fmt: skip
    assert result.exit_code == 2 and "is not a file" in result.stderr


KNOB_PROBE = """
import json, os
import torch
import triton
import triton.language as tl

@triton.autotune(
    configs=[triton.Config({"TAG": 10}), triton.Config({"TAG": 11}), triton.Config({"TAG": 12})],
    key=["n"],
)
@triton.jit
def _tagged(out_ptr, n, TAG: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, 2), tl.full((2,), TAG, tl.int32))

out = torch.zeros(2, dtype=torch.int32)
_tagged[(1,)](out, 2)
seen = {"values": os.environ.get("KERNELGATE_KNOB_VALUES"), "tag": int(out[0])}
open("knob_probe.json", "w").write(json.dumps(seen))

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
"""


def test_the_worker_runs_the_candidate_with_the_config(tmp_path: Path) -> None:
    """Declared values arrive as KERNELGATE_KNOB_VALUES, and an autotuned kernel runs the
    pinned config (index 2), not the first one the interpreter otherwise takes (clocks.py:
    a real clock under the interpreter gives the autotuner its first config)."""
    from kernelgate.sandbox.session import WorkerSession

    candidate = tmp_path / "probe.py"
    candidate.write_text(KNOB_PROBE)
    scratch = tmp_path / "scratch"
    session = WorkerSession(
        candidate,
        [],
        timeout=120,
        scratch=scratch,
        knob_values={"BLOCK": 64, "fast": True},
        autotune_pins={"_tagged": 2},
    )
    with session:
        pass
    seen = json.loads((scratch / "knob_probe.json").read_text())
    assert json.loads(seen["values"]) == {"BLOCK": 64, "fast": True}
    assert seen["tag"] == 12


@pytest.mark.gpu
def test_tune_on_a_gpu_measures_tritons_own_pick_beside(tmp_path: Path) -> None:
    """On a device Triton's autotuner can time: its pick (the candidate unpinned) is judged
    with every gate and timed beside the chosen config; every config of the example holds."""
    out = tmp_path / "tune.json"
    result = kernelgate(
        "tune", str(SOFTMAX / "reference.py"), str(EXAMPLES / "softmax_autotune.py"),
        "--device", "cuda", "--rounds", "2", "--group", "3", "--screen", "CMP-01",
        "--trials", "10", "--json", str(out),
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(out.read_text())
    assert report["chosen_verdict"] == "verified"
    assert all(c["passed"] for c in report["configs"])
    pick = report["triton_pick"]
    assert pick is not None, report["triton_pick_why"]
    assert pick["verdict"] == "verified" and pick["time_ms"] > 0
    (picked,) = pick["knobs"].values()
    assert 0 <= picked["index"] < 5
