"""Evidence integrity (issue 18): atomic writes, digests, writes only after the worker tree
is gone, and an audit report that refuses evidence changed since it was judged.

One ``verify`` of a tiny pure-PyTorch pair (whose candidate leaves a detached process
behind to forge the evidence) and one two-record audit carry the slow part; the rest is
unit-sized.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kernelgate.audit.store import STORE_NAME
from kernelgate.evidence_io import sha256_file, write_atomic

from .audit_corpus import REFERENCE, _candidate
from .conftest import copy_audit, kernelgate

FORGED = '{"verdict": "verified"}\n'


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def marked_processes(mark: str) -> list[int]:
    """Live processes whose command line holds ``mark`` (seen from here, whatever PID
    namespace they are in)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


# -- atomic writes -----------------------------------------------------------------------------


def test_write_atomic_returns_the_digest_sha256sum_gives(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "evidence.json"
    digest = write_atomic(target, '{"verdict": "rejected"}\n')
    assert target.read_text() == '{"verdict": "rejected"}\n'
    assert digest == file_sha256(target) == sha256_file(target)
    assert [p.name for p in target.parent.iterdir()] == ["evidence.json"]  # no temporary left
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's owner-only mode


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("interruption", [OSError("disk full"), KeyboardInterrupt()])
def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_partial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interruption: BaseException
) -> None:
    """Raised in the middle (the bytes written, not yet synced or renamed): the target keeps
    its old bytes, a new target is not created, and no temporary file is left behind."""
    old = tmp_path / "verdict.json"
    old.write_text("old evidence")
    fresh = tmp_path / "summary.json"

    def fail(_descriptor: int) -> None:
        raise interruption

    monkeypatch.setattr(os, "fsync", fail)
    for target in (old, fresh):
        with pytest.raises(type(interruption)):
            write_atomic(target, "x" * 100_000)
    monkeypatch.undo()
    assert old.read_text() == "old evidence"
    assert not fresh.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verdict.json"]


# -- the worker tree is gone before anything is written -----------------------------------------


def test_worker_tree_settled_kills_and_reaps_an_adopted_orphan_and_gives_the_role_back() -> None:
    """A double-forked process (its parent exits at once) is adopted by the verifying process
    while the block runs, and killed when it ends; the subreaper role is as it was before."""
    from kernelgate.audit.processes import is_subreaper
    from kernelgate.audit.settled import worker_tree_settled

    was_subreaper = is_subreaper()
    with worker_tree_settled() as settled:
        escaped = int(
            subprocess.run(
                ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        stat = Path(f"/proc/{escaped}/stat").read_text()
        assert int(stat[stat.rfind(")") + 2 :].split()[1]) == os.getpid()  # adopted here
    assert settled.adopting
    assert len(settled.killed) == 1 and settled.killed[0].startswith(f"{escaped} (sleep 60")
    assert settled.surviving == []
    assert not alive(escaped) and not Path(f"/proc/{escaped}").exists()  # killed and reaped
    assert is_subreaper() == was_subreaper


# Hostile: at import, a helper that double-forks and leaves its session (a daemon's escape),
# waits until the judge (the worker's parent) has exited, then overwrites the evidence.
FORGING_HELPER = """
import os, sys, time
judge = int(sys.argv[1])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.environ["KG_FORGE_PIDS"], "a") as pids:
            pids.write(f"{os.getpid()}\\n")
        deadline = time.monotonic() + 60
        while judge > 1 and time.monotonic() < deadline:
            try:
                os.kill(judge, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        time.sleep(0.3 if judge > 1 else 3)
        with open(os.environ["KG_FORGE_TARGET"], "w") as target:
            target.write(os.environ["KG_FORGED"])
    os._exit(0)
"""
FORGING_CANDIDATE = _candidate("return torch.clamp(x, min=0) * 2.0").replace(
    "import torch\n",
    "import os\nimport subprocess\nimport sys\nimport torch\n\n"
    f"subprocess.run([sys.executable, '-c', {FORGING_HELPER!r}, str(os.getppid()),"
    " os.environ['KG_FORGE_TARGET']])\n",
    1,
)


def test_verify_prints_the_evidence_digest_and_a_detached_helper_cannot_forge_it(
    tmp_path: Path,
) -> None:
    """The digest in the verdict line and in the evidence line is ``sha256sum``'s; the
    candidate's detached helpers are gone before the evidence is written, so the file still
    has that digest after they would have overwritten it."""
    reference, candidate = tmp_path / "reference.py", tmp_path / "candidate.py"
    reference.write_text(REFERENCE)
    candidate.write_text(FORGING_CANDIDATE)
    out, pids = tmp_path / "out" / "evidence.json", tmp_path / "helpers.txt"
    forge = {"KG_FORGE_TARGET": str(out), "KG_FORGE_PIDS": str(pids), "KG_FORGED": FORGED}
    args = ("verify", str(reference), str(candidate), "--only", "CMP-01", "--json", str(out))
    result = kernelgate(*args, "--timeout", "20", env=forge)
    assert result.returncode == 0, result.stderr + result.stdout
    full = re.search(r"evidence written to (\S+), sha256 ([0-9a-f]{64})$", result.stdout, re.M)
    assert full is not None, result.stdout
    assert Path(full.group(1)) == out and full.group(2) == file_sha256(out)
    short = re.search(
        r"^verdict: verified .*evidence sha256 ([0-9a-f]{12})\.\.\.$", result.stdout, re.M
    )
    assert short is not None and full.group(2).startswith(short.group(1))
    # The helpers' pids, where they could write them (a confined worker may not): whether
    # confinement or the judge stopped them, none may be left, and the file must not change.
    started = pids.read_text().split() if pids.exists() else []
    assert started or "killed" in result.stderr or "isolation" in out.read_text()
    time.sleep(1.5)  # past the helpers' moment to strike (0.3 s after the judge exits)
    assert marked_processes(str(out)) == [], "a candidate's helper outlived verify"
    assert file_sha256(out) == full.group(2)
    assert json.loads(out.read_text())["verdict"] == "verified"  # the judge's, not the forgery


# -- the audit: digests at ingestion, refused reports -------------------------------------------


def test_the_audit_turns_evidence_changed_before_ingestion_into_an_error_row(
    tmp_path: Path,
) -> None:
    """The judge's row claims a digest; evidence that differs when the audit reads the row
    (after the judge and its tree exited) makes an error row naming the tampering."""
    from kernelgate.audit.judge import ingested
    from kernelgate.formats.corpus import CorpusRecord

    work = tmp_path / "records" / "r-00000000"
    text = '{"verdict": "rejected"}'
    digest = write_atomic(work / "verdict.json", text)
    record = CorpusRecord(id="r", format="pairs", reference_path="a.py", candidate_path="b.py")
    row = {"id": "r", "verdict": "rejected", "evidence": str(work / "verdict.json")}
    row["evidence_sha256"] = digest
    assert ingested(row, record, work) is row
    (work / "verdict.json").write_text(FORGED)
    bad = ingested(row, record, work)
    assert bad["verdict"] == "error" and bad["stage"] == "evidence" and bad["evidence_tampered"]
    assert "changed after its judge wrote it" in bad["reason"]
    assert f"sha256 written {digest[:12]}" in bad["reason"]
    no_evidence = {"id": "r", "verdict": "rejected", "evidence": None}
    assert ingested(no_evidence, record, work) is no_evidence  # a load failure has none


def _evidence_files(out: Path) -> dict[str, Path]:
    return {p.parent.name.rsplit("-", 1)[0]: p for p in (out / "records").glob("*/verdict.json")}


def _report_files(out: Path) -> dict[str, bytes]:
    names = ("summary.json", "report.md", "report.html")
    return {name: (out / name).read_bytes() for name in names}


@pytest.fixture(scope="module")
def audited(two_record_audit: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small audit (an honest record, a NaN swallower) whose folder the tests below
    tamper with and restore: a copy of the session's ``conftest.two_record_audit``."""
    return copy_audit(two_record_audit, tmp_path_factory.mktemp("integrity") / "audit")[1]


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(out / STORE_NAME) as db:
        return {i: json.loads(d) for i, d in db.execute("SELECT id, data FROM rows")}


def test_each_stored_row_records_its_evidence_digest(audited: Path) -> None:
    rows, files = _rows(audited), _evidence_files(audited)
    assert set(files) == set(rows) == {"honest", "nan_swallow"}
    for record_id, row in rows.items():
        assert row["evidence_sha256"] == file_sha256(files[record_id]), record_id
    summary = json.loads((audited / "summary.json").read_text())
    assert summary["evidence_integrity"]["verified"] == 2
    assert {r["evidence_integrity"] for r in summary["rows"]} == {"verified"}
    assert "2 evidence file(s) match the SHA-256" in (audited / "report.md").read_text()


def test_audit_report_refuses_evidence_changed_since_it_was_judged(audited: Path) -> None:
    """A forged verdict.json (the NaN swallower's, rewritten to "verified"): audit-report
    exits 2, names the record and the command that judges it again, and writes nothing."""
    evidence = _evidence_files(audited)["nan_swallow"]
    original, before = evidence.read_bytes(), _report_files(audited)
    forged = json.loads(original) | {"verdict": "verified", "failed_gates": []}
    evidence.write_text(json.dumps(forged))
    try:
        result = kernelgate("audit-report", str(audited))
        assert result.returncode == 2, result.stdout + result.stderr
        assert "'nan_swallow'" in result.stderr and "'honest'" not in result.stderr
        assert "changed since they were judged" in result.stderr
        assert "--resume --rejudge-record nan_swallow" in result.stderr
        assert "Traceback" not in result.stderr
        assert _report_files(audited) == before  # no report written with forged evidence
    finally:
        evidence.write_bytes(original)
    assert kernelgate("audit-report", str(audited)).returncode == 0  # the original passes


def test_an_older_store_without_digests_is_reported_unverifiable(audited: Path) -> None:
    """Rows written before digests were kept: the report is written, but says at its top
    that their evidence is unverifiable, and counts none of it as verified."""
    from kernelgate.audit.runner import write_report_from_store

    with sqlite3.connect(audited / STORE_NAME) as db:
        saved = db.execute("SELECT id, data FROM rows").fetchall()
        db.execute("UPDATE rows SET data = json_remove(data, '$.evidence_sha256')")
    try:
        summary = write_report_from_store(audited)
        integrity = summary["evidence_integrity"]
        assert integrity["verified"] == 0 and integrity["unverifiable"] == 2
        assert sorted(integrity["unverifiable_ids"]) == ["honest", "nan_swallow"]
        report = (audited / "report.md").read_text()
        assert "UNVERIFIABLE: 2 record(s)" in report and "0 evidence file(s) match" in report
        assert "UNVERIFIABLE" in (audited / "report.html").read_text()
    finally:
        with sqlite3.connect(audited / STORE_NAME) as db:
            db.executemany("UPDATE rows SET data = ? WHERE id = ?", [(d, i) for i, d in saved])
    assert write_report_from_store(audited)["evidence_integrity"]["verified"] == 2


def test_missing_evidence_is_named_not_taken_for_verified(audited: Path) -> None:
    from kernelgate.audit.runner import write_report_from_store

    evidence = _evidence_files(audited)["honest"]
    original = evidence.read_bytes()
    evidence.unlink()
    try:
        integrity = write_report_from_store(audited)["evidence_integrity"]
        assert integrity["missing_ids"] == ["honest"] and integrity["verified"] == 1
        assert "MISSING: 1 record(s)" in (audited / "report.md").read_text()
    finally:
        evidence.write_bytes(original)


def test_helpers_module_has_no_leftover_processes() -> None:
    """Belt and braces for the tests above: nothing they started is still a child here."""
    from kernelgate.audit.processes import children_map
    from kernelgate.audit.zygote import running_zygotes
    from kernelgate.sandbox.forkserver import running_servers

    # the judge zygote and the worker fork server, where a test here judged in this process
    # or started a worker, live as long as it does
    kept = set(running_zygotes()) | set(running_servers())
    leftovers = [p for p in children_map().get(os.getpid(), []) if alive(p) and p not in kept]
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert leftovers == []
