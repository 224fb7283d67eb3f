"""Memory-aware admission of an audit's judges (``kernelgate.audit.admission``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelgate.audit import admission
from kernelgate.audit.admission import Ledger

from .conftest import SOFTMAX


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    """A live process other than this one, standing for another judge."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_a_reservation_waits_until_it_fits_beside_live_ones(tmp_path: Path, sleeper) -> None:
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    assert ledger.try_reserve(sleeper.pid, 6)
    assert not ledger.try_reserve(12345678, 6), "6 + 6 > 10 while the other judge lives"
    assert ledger.reserved() == {sleeper.pid: 6}, "a refused reservation leaves no entry"
    assert ledger.try_reserve(sleeper.pid, 4), "a judge's own entry is replaced, not added"
    assert ledger.try_reserve(12345678, 6) and ledger.reserved() == {sleeper.pid: 4}
    ledger.release(sleeper.pid)
    assert ledger.reserved() == {}


def test_a_dead_judges_reservation_counts_for_nothing(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    (tmp_path / "gpu.json").write_text(f'{{"{gone.pid}": 9}}')  # its judge was killed
    with ledger.admitted(8) as waited:
        assert waited < 1.0
        assert ledger.reserved() == {os.getpid(): 8}


def test_a_judge_alone_is_admitted_above_the_budget(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    with ledger.admitted(50) as waited:
        assert waited < 1.0
    assert ledger.reserved() == {}, "released on exit"


def test_admitted_waits_marks_the_wait_and_proceeds_once_memory_frees(
    tmp_path: Path, sleeper
) -> None:
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    assert ledger.try_reserve(sleeper.pid, 8)
    marker, lines = tmp_path / "waiting", []
    seen_marker = []

    def free_later() -> None:
        time.sleep(0.6)
        seen_marker.append(marker.exists())
        ledger.release(sleeper.pid)

    threading.Thread(target=free_later).start()
    with ledger.admitted(5, marker=marker, on_wait=lines.append, poll=0.05) as waited:
        assert waited >= 0.5
        assert not marker.exists(), "the marker is gone once admitted"
    assert seen_marker == [True]
    assert len(lines) == 1 and "reserved by other judges" in lines[0], lines


def test_waiting_for_admission_does_not_count_against_the_record_limit(tmp_path: Path) -> None:
    marker = tmp_path / "waiting"
    script = (
        "import pathlib, sys, time\n"
        "m = pathlib.Path(sys.argv[1]); m.touch(); time.sleep(1.5); m.unlink(); time.sleep(0.5)"
    )
    judge = subprocess.Popen([sys.executable, "-c", script, str(marker)])
    assert admission.wait_for_judge(judge, 1.2, marker) == 0  # 2 s in all, 0.5 s judging
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            admission.wait_for_judge(stuck, 0.5, marker)
        assert time.monotonic() - started < 3
    finally:
        stuck.kill()
        stuck.wait()


def test_the_estimate_grows_with_the_reference_and_covers_the_unknown() -> None:
    elements, work = admission.reference_elements(SOFTMAX / "reference.py")
    assert elements is not None and elements > 0 and work > 0
    small, large = (admission.estimate_device_bytes(n) for n in (elements, 10 * elements))
    assert admission.CONTEXT_BYTES < small < large
    with_work = admission.estimate_device_bytes(elements, work)
    assert with_work == small + admission.BYTES_PER_WORK_ELEMENT * work

    def per_run(n: int) -> int:  # the estimate less the fixed part and what is held
        return admission.estimate_device_bytes(n) - admission.CONTEXT_BYTES - held(n)

    held = admission.held_device_bytes
    assert per_run(10 * elements) == 10 * per_run(elements)
    unknown = admission.estimate_device_bytes(None)
    assert unknown == admission.CONTEXT_BYTES + admission.UNKNOWN_ELEMENTS_BYTES + held(None)


def test_the_estimate_includes_what_a_judge_holds_on_the_device_within_its_budgets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Results and input copies kept on the device (gates/base.py): bounded by their
    budgets and by what cases of the reference's sizes hold, and the estimate grows with
    the results' budget where the sizes reach it."""
    from kernelgate.gates import base

    budgets = base.RESULTS_DEVICE_KEPT_BYTES + base.INPUTS_DEVICE_KEPT_BYTES
    held = admission.held_device_bytes
    assert held(None) == budgets and held(1 << 40) == budgets  # unknown, huge: the budgets
    assert held(1) == base.RESULTS_KEPT_BYTES  # tiny: what older small cases may add up to
    per_element = (base.RECENT_CASES + 1) * admission.HELD_BYTES_PER_ELEMENT
    middle = (1 << 30) // per_element  # 1 GiB by its sizes: under the budgets
    assert base.RESULTS_KEPT_BYTES < held(middle) < budgets
    assert held(middle) == per_element * middle
    big = 1 << 28
    before = admission.estimate_device_bytes(big), admission.estimate_device_bytes(None)
    monkeypatch.setattr(base, "RESULTS_DEVICE_KEPT_BYTES", 2 * base.RESULTS_DEVICE_KEPT_BYTES)
    after = admission.estimate_device_bytes(big), admission.estimate_device_bytes(None)
    grown = base.RESULTS_DEVICE_KEPT_BYTES // 2
    assert after == (before[0] + grown, before[1] + grown)
    monkeypatch.setattr(base, "INPUTS_DEVICE_KEPT_BYTES", 0)
    monkeypatch.setattr(base, "RESULTS_DEVICE_KEPT_BYTES", 0)
    assert held(big) == held(None) == 0  # nothing kept there: nothing estimated


def test_an_unsizable_reference_is_an_unknown_not_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "reference.py"
    broken.write_text("raise RuntimeError('no')\n")
    assert admission.reference_elements(broken) == (None, 0)


def test_no_admission_in_cpu_mode(tmp_path: Path) -> None:
    from kernelgate.audit.judge import AuditOptions, device_admission, device_sizing

    options = AuditOptions(out_dir=str(tmp_path), device="cpu")
    sizing = device_sizing(SOFTMAX / "reference.py", options)
    assert sizing is None
    with device_admission(sizing, tmp_path) as reserved:
        assert reserved == {}
    assert not (tmp_path / "admission").exists()


def test_the_old_check_reserves_a_share_of_the_gates_estimate() -> None:
    """The KernelBench check runs the reference and the candidate at fp32 or less, with no
    float64 oracle: it reserves less than the gates, never more, and an unsizable reference
    gets the whole estimate in both phases."""
    elements, work = admission.reference_elements(SOFTMAX / "reference.py")
    assert elements is not None
    for n, w in ((elements, work), (1 << 28, 1 << 29), (0, 0)):
        check, gates = (
            admission.estimate_old_check_bytes(n, w),
            admission.estimate_device_bytes(n, w),
        )
        assert admission.CONTEXT_BYTES <= check <= gates
    big = 1 << 28
    check = admission.estimate_old_check_bytes(big, big)
    assert (
        check
        == admission.CONTEXT_BYTES
        + (admission.OLD_CHECK_BYTES_PER_ELEMENT + admission.OLD_CHECK_BYTES_PER_WORK_ELEMENT) * big
    )
    assert check < admission.estimate_device_bytes(big, big) / 3
    assert admission.estimate_old_check_bytes(None) == admission.estimate_device_bytes(None)


def test_a_judge_keeps_its_place_in_line_from_the_check_to_the_gates(
    tmp_path: Path, sleeper
) -> None:
    """A record between its two phases asks again with the time it first asked: judges
    that arrived while it was checked do not overtake it."""
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    newcomer = _live_process()
    try:
        first_asked = time.time() - 30  # the record asked for its old check 30 s ago
        assert ledger.try_reserve(sleeper.pid, 6)  # a judge running
        assert not ledger.try_reserve(newcomer.pid, 5)  # arrived during the check: waits
        me = os.getpid()
        assert not ledger.try_reserve(me, 8, asked_at=first_asked)  # the gates: no room
        assert ledger.waiting() == [me, newcomer.pid], "the earlier record is first in line"
        ledger.release(sleeper.pid)
        assert not ledger.try_reserve(newcomer.pid, 5), "still behind the earlier record"
        assert ledger.try_reserve(me, 8, asked_at=first_asked)
        ledger.release(me)
    finally:
        newcomer.kill()
        newcomer.wait()


def test_a_judge_reserves_for_its_old_check_then_for_its_gates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two phases of a record, as the judge runs them: each reservation is released
    when its block ends, the second waits in the first's place, and each yields its own
    estimate."""
    from kernelgate.audit import judge

    monkeypatch.setattr(admission, "device_budget", lambda: 1 << 40)
    monkeypatch.setattr(admission, "device_free_bytes", lambda: 1 << 40)
    options = judge.AuditOptions(out_dir=str(tmp_path), device="cuda")
    sizing = judge.device_sizing(SOFTMAX / "reference.py", options)
    assert sizing is not None and sizing.elements
    ledger = sizing.ledger
    with judge.device_admission(sizing, tmp_path, judge.OLD_CHECK_PHASE) as check:
        assert ledger.reserved() == {os.getpid(): check["estimate_bytes"]}
        asked = sizing.first_asked
    assert ledger.reserved() == {}
    with judge.device_admission(sizing, tmp_path, judge.GATES_PHASE) as gates:
        assert ledger.reserved() == {os.getpid(): gates["estimate_bytes"]}
    assert sizing.first_asked == asked and ledger.reserved() == {}
    assert check["estimate_bytes"] == admission.estimate_old_check_bytes(
        sizing.elements, sizing.work_elements
    )
    assert gates["estimate_bytes"] == admission.estimate_device_bytes(
        sizing.elements, sizing.work_elements
    )
    assert check["estimate_bytes"] <= gates["estimate_bytes"]


DEEP = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        wide = x.repeat(1, 64)  # 64x the input
        wider = torch.cat([wide, wide], dim=1)
        wider.relu_()  # in place and views: no new memory
        flat = wider.view(-1).view(N, -1)
        del wide
        return flat.sum(dim=1, keepdim=True)

N, D = 128, 256

def get_inputs():
    return [torch.randn(N, D)]

def get_init_inputs():
    return []
"""


def test_the_footprint_counts_what_forward_keeps_alive_at_once(tmp_path: Path) -> None:
    """The intermediates of a deep or wide forward are what ran judges out of device memory
    beside each other (CUDA-L1 h100 L2/T96): counted at their peak, views and in-place
    results not counted again, freed tensors no longer counted."""
    from kernelgate.formats.kernelbench import load_reference

    reference = tmp_path / "reference.py"
    reference.write_text(DEEP)
    footprint = load_reference(reference).footprint()
    assert footprint is not None
    n, d = 128, 256
    assert footprint.elements == n * d + n  # input and output: what sizes are admitted by
    # the peak: the repeat (64 n d) and the cat (128 n d) alive together; the sum (n) comes
    # once the repeat is freed, and the relu_ and the views add nothing
    assert footprint.work_elements == (64 + 128) * n * d
    elements, work = admission.reference_elements(reference)
    assert (elements, work) == (footprint.elements, footprint.work_elements)
    assert (
        admission.estimate_device_bytes(elements, work)
        > admission.estimate_device_bytes(elements) + admission.BYTES_PER_WORK_ELEMENT * 64 * n * d
    )


def test_a_judge_waits_while_the_device_holds_more_than_was_reserved(
    tmp_path: Path, sleeper
) -> None:
    """Reservations are estimates: what the device has free decides too, so a judge beside
    one that outgrew its estimate waits instead of running the GPU out of memory; alone,
    it is admitted whatever the device says (a record is never refused for good)."""
    free = [100]
    ledger = Ledger(tmp_path / "gpu.json", budget=1000, free=lambda: free[0])
    assert ledger.try_reserve(sleeper.pid, 500)  # alone: admitted, free or not
    me = os.getpid()
    assert not ledger.try_reserve(me, 200), "fits the ledger, not the device"
    assert ledger.reserved() == {sleeper.pid: 500}
    free[0] = 300  # the first judge let memory go
    assert ledger.try_reserve(me, 200)
    ledger.release(me)
    unknown = Ledger(tmp_path / "gpu.json", budget=1000, free=lambda: None)
    assert unknown.try_reserve(me, 300), "no reading: the ledger alone decides"


def _live_process() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_judges_are_admitted_first_come_first_served(tmp_path: Path, sleeper) -> None:
    """A large record waiting for memory is not overtaken by small ones that would fit:
    on an H100 two large records waited a whole audit while small ones kept arriving."""
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    large, small = _live_process(), _live_process()
    try:
        assert ledger.try_reserve(sleeper.pid, 6)  # a judge running
        assert not ledger.try_reserve(large.pid, 8)  # does not fit: first in line
        assert not ledger.try_reserve(small.pid, 2), "fits, but the large one asked first"
        assert ledger.waiting() == [large.pid, small.pid]
        ledger.release(sleeper.pid)  # the running judge finishes
        assert not ledger.try_reserve(small.pid, 2), "still behind the large one"
        assert ledger.try_reserve(large.pid, 8)  # alone now: admitted
        assert ledger.try_reserve(small.pid, 2) and ledger.waiting() == []
        assert ledger.reserved() == {large.pid: 8, small.pid: 2}
        large.kill()
        large.wait()
        # a judge killed while waiting or holding counts for nothing, in line or not
        assert not ledger.try_reserve(sleeper.pid, 9)  # beside small's 2: waits
        small.kill()
        small.wait()
        assert ledger.try_reserve(sleeper.pid, 9)
    finally:
        for process in (large, small):
            process.kill()
            process.wait()


def test_a_judge_stopped_while_waiting_leaves_the_line(tmp_path: Path, sleeper) -> None:
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    assert ledger.try_reserve(sleeper.pid, 8)

    def stop(line: str) -> None:
        raise KeyboardInterrupt  # what a signal does to the waiting judge

    with pytest.raises(KeyboardInterrupt), ledger.admitted(5, on_wait=stop):
        pass
    assert ledger.waiting() == [] and ledger.reserved() == {sleeper.pid: 8}


def test_a_ledger_of_the_first_format_reads_as_reservations(tmp_path: Path, sleeper) -> None:
    (tmp_path / "gpu.json").write_text(f'{{"{sleeper.pid}": 7}}')  # before the queue
    ledger = Ledger(tmp_path / "gpu.json", budget=10)
    assert ledger.reserved() == {sleeper.pid: 7} and ledger.waiting() == []


def test_a_judge_gives_cached_device_memory_back_after_each_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Admission reads the device's free memory: a judge's allocator keeping freed blocks
    would read as held (L1/T12's judge reserved 65 GiB on an idle H100)."""
    import torch

    from kernelgate.audit import judge

    emptied: list[bool] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    judge._log_gate("CMP-01", None)  # a gate starting: nothing to give back yet
    assert emptied == []
    done = SimpleNamespace(status=SimpleNamespace(value="pass"), seconds=1.0)
    judge._log_gate("CMP-01", done)
    assert emptied == [True]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # CPU mode, or no CUDA yet
    judge._log_gate("CMP-02", done)
    assert emptied == [True]
