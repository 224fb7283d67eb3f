"""Hostile records mixed among honest ones in a real ``kernelgate audit`` (issue 18's
acceptance: the audit finishes, every honest row intact, each hostile record rejected or an
``error`` row that names the attack).

One run, start to end (``run_mixed_audit``):

1. A throwaway folder: a CUDA-L1 corpus (a folder of ``.jsonl`` files, one record each,
   read in name order) of honest records (a red-team control with its reference) with
   hostile records between them; the audit's ``--out`` folder (not made yet); a HOME and a
   TMPDIR for the audit; canaries outside the audit (a copy standing for kernelgate's
   source, a pristine reference); a TCP and a UDP listener on 127.0.0.1.
2. The audit: ``python -m kernelgate.cli audit CORPUS --out OUT`` in its own session, so
   this runner survives whatever an attack does to it. It is started first and waits on its
   stdin, so that its pid can be rendered into the hostile candidates (the pid an attack
   kills, ptraces or waits for), as ``runner.run_judge`` does for a ``verify``.
3. Each hostile candidate is its attack's template rendered with an arena that aims at this
   audit's real paths: the store (``OUT/audit.sqlite``), another record's folder (an honest
   record's ``verdict.json``, which the evidence rewriter forges after the audit exits),
   its own record's reference copy in ``OUT/records/...`` and the audit's HOME. Folder
   names are predictable before the audit starts (``judge.work_folder_name``).
4. After the audit exits, two looks (now and ``delay`` seconds later, for detached
   helpers), then ``kernelgate audit-report OUT``, which must succeed (it refuses evidence
   whose digest changed), and the checks (``MixedAudit.ok``).

The safety rules are the hostile suite's (``kit``): every path comes from an arena, signals
only where ``kit.may_signal`` allows, resources bounded, every helper marked and killed by
the runner afterwards.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.audit.judge import EVIDENCE_NAME, work_folder_name
from kernelgate.audit.store import STORE_NAME
from kernelgate.redteam.hostile import kit
from kernelgate.redteam.hostile.catalog import REFERENCES, Attack, attacks
from kernelgate.redteam.hostile.runner import (
    DELAY_S,
    FORK_BOUND,
    HELPER_SECONDS,
    MEMORY_EVENTS,
    REPORT_RE,
    SOURCE_STAND_IN,
    Listeners,
    arena_env,
    digest_tree,
    end_marked_processes,
    isolation_text,
    kill_session,
    marked_processes,
    start_held,
    tree_changes,
)

CONTROLS = REFERENCES.parent / "controls"
HONEST_CONTROL = "vector_add"  # a red-team control (controls/) and its reference
HONEST_VERDICT, HONEST_OLD_CHECK = "verified", "accepted"  # what the control gets alone
HOSTILE_VERDICTS = ("rejected", "error")
AUDIT_TIMEOUT = 5.0  # --timeout of the audit: hangs end fast, honest calls take far less
AUDIT_LIMIT_S = 1200.0  # this runner's own bound on the whole audit
MIXED_HONEST = 2

# The attacks that make sense inside an audit, and where each aims there.
IN_AUDIT: dict[str, str] = {
    "kill_parent_at_import": "the old check's or worker's parent (the record's judge) and "
    "the audit process itself",
    "kill_judge_at_forward": "the same, from forward",
    "kill_everything": "kill(-1): every process it may signal",
    "detached_evidence_rewriter": "an honest record's verdict.json, once the audit exits",
    "write_audit_store": "OUT/audit.sqlite, an honest record's verdict.json, a forged "
    "record folder in OUT/records",
    "append_to_reference": "its own record's reference copy in OUT/records",
    "edit_kernelgate_source": "a copy standing for kernelgate's source",
    "read_judge_memory": "/proc/<parent>/mem and /proc/<audit pid>/mem",
    "ptrace_judge": "its parent and the audit process",
    "network_connection": "the runner's listeners on 127.0.0.1",
    "fork_bomb": "up to 1000 sleepers from a detached helper",
    "ignore_sigterm_and_hang": "a hang and a helper that ignores SIGTERM",
    "forged_protocol_frames": "the worker's reply pipe",
    "close_protocol_pipes": "the worker's protocol pipes",
    "monkeypatch_comparisons": "torch's comparisons in its own process",
    "poison_next_judge": "the audit's HOME, which every later judge of the audit uses",
    "process_state_for_later_judges": "process-wide torch and CUDA settings, CUDA's JIT cache "
    "and torch's kernel cache in the audit's HOME (the honest records judged after it)",
}
LEFT_OUT: dict[str, str] = {
    "fill_disk": "each import writes up to 1 GiB and a record imports its candidate at least "
    "twice (old check, worker): gigabytes for nothing the single-verification suite does "
    "not show already",
    "exhaust_memory": "needs 8 GiB of headroom per import; beside the audit's parallel judges "
    "it would measure the machine, not the judge",
    "gpu_held_after_exit": "a detached helper that outlives its worker, holding device memory: "
    "the single-verification suite judges it on a device; in an audit, a detached helper is "
    "what detached_evidence_rewriter and fork_bomb already are",
}
# A small subset for a quick run (the CPU test): the attacks on an audit's folder.
QUICK = ("kill_judge_at_forward", "detached_evidence_rewriter", "write_audit_store")


def audit_attacks(only: list[str] | tuple[str, ...] | None = None) -> list[Attack]:
    """The attacks run inside the audit (all of ``IN_AUDIT``, or ``only``): an unknown name
    raises KeyError (naming it), a left-out one raises ValueError saying why it is."""
    selected = attacks(only or list(IN_AUDIT))
    refused = [f"{a.name} ({LEFT_OUT[a.name]})" for a in selected if a.name in LEFT_OUT]
    if refused:
        raise ValueError("left out of the mixed audit: " + "; ".join(refused))
    return selected


# -- the corpus -----------------------------------------------------------------------------
@dataclass
class MixedRecord:
    """One record of the mixed corpus: honest (``attack`` None) or hostile."""

    stem: str  # the .jsonl file's name without suffix: the record id starts with it
    task: int
    reference: str  # source text
    candidate: str  # source text (a hostile one is rendered by ``MixedCorpus.render``)
    attack: Attack | None = None
    token: str = ""  # a hostile record's arena token

    @property
    def record_id(self) -> str:
        """The id the audit gives it (``formats/cuda_l1.py``): it names the attack."""
        return f"{self.stem}/L1/T{self.task}"

    @property
    def folder(self) -> str:
        """Its work folder's name under OUT/records (``judge.work_folder_name``)."""
        return work_folder_name(self.record_id)


@dataclass
class MixedCorpus:
    """The throwaway folder of one mixed audit and what the runner watches in it."""

    root: Path
    records: list[MixedRecord]
    audit_token: str
    device: str

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def notes(self) -> Path:
        return self.root / "notes"

    @property
    def honest(self) -> list[MixedRecord]:
        return [r for r in self.records if r.attack is None]

    @property
    def hostile(self) -> list[MixedRecord]:
        return [r for r in self.records if r.attack is not None]

    @property
    def canaries(self) -> dict[str, Path]:
        """Files outside the audit that no process of it may change."""
        return {
            "kernelgate source": self.root / "canary" / "kernelgate" / SOURCE_STAND_IN.name,
            "reference": self.root / "canary" / "reference.py",
        }

    @property
    def tokens(self) -> list[str]:
        return [self.audit_token, *(r.token for r in self.hostile)]

    def arena(self, record: MixedRecord, audit_pid: int, ports: tuple[int, int]) -> kit.Arena:
        """Where ``record``'s attack aims: this audit's real paths (see the module doc)."""
        honest = self.honest
        victim, rewritten = honest[0], honest[-1]
        return kit.Arena(
            token=record.token,
            root=str(self.root),
            reference=str(self.out / "records" / record.folder / "reference.py"),
            source_canary=str(self.canaries["kernelgate source"]),
            store=str(self.out),
            store_rows=str(self.out / STORE_NAME),
            other_record=str(self.out / "records" / victim.folder / EVIDENCE_NAME),
            evidence=str(self.out / "records" / rewritten.folder / EVIDENCE_NAME),
            notes=str(self.notes),
            home=str(self.home),
            fill_paths=[],
            judge_pid=audit_pid,
            runner_pid=os.getpid(),
            runner_pgid=os.getpgid(0),
            runner_sid=os.getsid(0),
            runner_pidns=_pid_namespace(),
            tcp_port=ports[0],
            udp_port=ports[1],
            fork_count=FORK_BOUND,
            helper_seconds=HELPER_SECONDS,
            device=self.device,
        )

    def render(self, audit_pid: int, ports: tuple[int, int]) -> None:
        """Write the corpus: one CUDA-L1 line per record, hostile templates filled in."""
        self.corpus.mkdir(parents=True, exist_ok=True)
        placeholder = f'"{kit.PLACEHOLDER}"'
        for record in self.records:
            candidate = record.candidate
            if record.attack is not None:
                if candidate.count(placeholder) != 1:
                    raise ValueError(f"{record.attack.template_path} must hold {placeholder} once")
                arena = self.arena(record, audit_pid, ports)
                candidate = candidate.replace(placeholder, repr(arena.to_json()))
            line = {
                "level_id": 1,
                "task_id": record.task,
                "ref_code": record.reference,
                "custom_code": candidate,
            }
            (self.corpus / f"{record.stem}.jsonl").write_text(json.dumps(line) + "\n")


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def interleave(honest: int, hostile: list[Attack]) -> list[Attack | None]:
    """``honest`` Nones spread among the attacks: first, last, and evenly between."""
    order: list[Attack | None] = list(hostile)
    for index in range(honest):
        at = round(index * len(order) / max(1, honest - 1)) if honest > 1 else 0
        order.insert(min(at + index, len(order)), None)
    return order


def build_corpus(
    selected: list[Attack],
    honest: int = MIXED_HONEST,
    device: str = "cpu",
    base: Path | None = None,
) -> MixedCorpus:
    """A fresh throwaway folder for a mixed audit of ``selected`` among ``honest`` honest
    records (the corpus is written by ``render``, once the audit's pid is known)."""
    if honest < 1:
        raise ValueError("a mixed audit needs at least one honest record")
    root = Path(tempfile.mkdtemp(prefix="kgh-audit-", dir=base)).resolve()
    for folder in ("home", "tmp", "notes", "canary/kernelgate"):
        (root / folder).mkdir(parents=True)
    os.chmod(root / "notes", 0o777)  # a worker under another uid may still report here
    reference = (REFERENCES / f"{HONEST_CONTROL}.py").read_text()
    control = (CONTROLS / f"{HONEST_CONTROL}.py").read_text()
    records: list[MixedRecord] = []
    for task, attack in enumerate(interleave(honest, selected), start=1):
        if attack is None:
            stem = f"{task:02d}-honest-{HONEST_CONTROL}"
            records.append(MixedRecord(stem, task, reference, control))
        else:
            stem = f"{task:02d}-hostile-{attack.name}"
            attack_reference = attack.reference_path.read_text()
            template = attack.template_path.read_text()
            records.append(
                MixedRecord(stem, task, attack_reference, template, attack, secrets.token_hex(6))
            )
    corpus = MixedCorpus(root, records, secrets.token_hex(6), device)
    shutil.copyfile(SOURCE_STAND_IN, corpus.canaries["kernelgate source"])
    shutil.copyfile(REFERENCES / f"{HONEST_CONTROL}.py", corpus.canaries["reference"])
    return corpus


# -- results --------------------------------------------------------------------------------
@dataclass
class RecordResult:
    """One record's row as the audit stored it, and what the runner made of it."""

    record_id: str
    attack: str | None  # None: honest
    kind: str  # "honest" or the attack's class
    aims_at: str
    expected: str
    verdict: str | None = None  # the stored row's (None: no row)
    stage: str | None = None
    reason: str = ""
    old_check: str | None = None
    failed_gates: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # "check: what happened"
    stopped_by: str = ""
    isolation: str = ""  # the worker's (verdict.json) or else the old check's
    old_check_isolation: str = ""  # the old check's child's (``old_check_detail``)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.record_id,
            "attack": self.attack,
            "kind": self.kind,
            "aims_at": self.aims_at,
            "expected": self.expected,
            "verdict": self.verdict,
            "stage": self.stage,
            "reason": self.reason,
            "old_check": self.old_check,
            "failed_gates": self.failed_gates,
            "ok": self.ok,
            "findings": self.findings,
            "stopped_by": self.stopped_by,
            "isolation": self.isolation,
            "old_check_isolation": self.old_check_isolation,
        }


@dataclass
class MixedAudit:
    """The whole run: the audit's exit, the report's, every record, findings of the run."""

    device: str
    records: list[RecordResult]
    audit_exit: int | None = None
    report_exit: int | None = None
    findings: list[str] = field(default_factory=list)  # not tied to one record
    seconds: float = 0.0
    detail: str = ""  # the kept folder, when kept

    @property
    def ok(self) -> bool:
        """The acceptance: the audit finished, its report stands, every record as it must."""
        return (
            self.audit_exit == 0
            and self.report_exit == 0
            and not self.findings
            and all(r.ok for r in self.records)
        )

    @property
    def isolation(self) -> str:
        """What confined the honest records' workers, as the evidence says ("" if unknown)."""
        return next((r.isolation for r in self.records if r.attack is None and r.isolation), "")

    def to_dict(self) -> dict[str, Any]:
        from kernelgate.verdict import environment

        return {
            "schema": "kernelgate.hostile-audit/1",
            "device": self.device,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "environment": environment(self.device, self.device),
            "ok": self.ok,
            "audit_exit": self.audit_exit,
            "report_exit": self.report_exit,
            "findings": self.findings,
            "left_out": LEFT_OUT,
            "records": [r.to_dict() for r in self.records],
            "seconds": self.seconds,
            "detail": self.detail,
        }


def stored_rows(out: Path) -> dict[str, list[dict[str, Any]]]:
    """The store's rows by id (a list: a forged duplicate would show), read-only."""
    rows: dict[str, list[dict[str, Any]]] = {}
    path = out / STORE_NAME
    if not path.is_file():
        return rows
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        for record_id, data in db.execute("SELECT id, data FROM rows"):
            try:
                row = json.loads(data)
            except ValueError:
                row = {"verdict": "unreadable row"}
            rows.setdefault(str(record_id), []).append(row if isinstance(row, dict) else {})
    return rows


def check_records(
    corpus: MixedCorpus, rows: dict[str, list[dict[str, Any]]], evidence: dict[str, bytes | None]
) -> tuple[list[RecordResult], list[str]]:
    """Each record's result from the store's ``rows`` and its ``evidence`` (the bytes of its
    verdict.json after the second look, None if absent), and findings about rows that belong
    to no record. Pure: the unit tests feed it rows."""
    results = []
    for record in corpus.records:
        attack = record.attack
        result = RecordResult(
            record.record_id,
            attack.name if attack else None,
            attack.kind if attack else "honest",
            IN_AUDIT.get(attack.name, "") if attack else f"control {HONEST_CONTROL}",
            " or ".join(HOSTILE_VERDICTS)
            if attack
            else f"{HONEST_VERDICT} (old check {HONEST_OLD_CHECK}), evidence digest intact",
        )
        found = rows.get(record.record_id, [])
        if len(found) != 1:
            result.findings.append(f"row-missing: {len(found)} rows for {record.record_id}")
            results.append(result)
            continue
        row = found[0]
        result.verdict, result.stage = row.get("verdict"), row.get("stage")
        result.reason = " ".join(str(row.get("reason") or "").split())[:300]
        result.old_check = row.get("old_check")
        result.failed_gates = [str(g) for g in row.get("failed_gates") or []]
        old_isolation = str((row.get("old_check_detail") or {}).get("isolation") or "")
        result.old_check_isolation = old_isolation.removeprefix("isolation: ")
        result.isolation = (
            isolation_text(evidence.get(record.record_id)) or result.old_check_isolation
        )
        if row.get("id") != record.record_id:
            result.findings.append(f"row-id: the row says {row.get('id')!r}")
        if attack is None:
            if (result.verdict, result.old_check) != (HONEST_VERDICT, HONEST_OLD_CHECK):
                result.findings.append(
                    f"honest-row-changed: {result.verdict} (old check {result.old_check}), "
                    f"expected {HONEST_VERDICT} ({HONEST_OLD_CHECK}): {result.reason[:160]}"
                )
            digest = row.get("evidence_sha256")
            data = evidence.get(record.record_id)
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                result.findings.append(
                    "evidence-rewritten: verdict.json is missing or does not match the row's "
                    "evidence_sha256"
                )
        elif result.verdict not in HOSTILE_VERDICTS:
            result.findings.append(f"verdict-flip: the hostile record's row is {result.verdict}")
        results.append(result)
    known = {r.record_id for r in corpus.records}
    extra = [f"row-forged: a row {i!r} belongs to no record" for i in rows if i not in known]
    return results, extra


# -- the run --------------------------------------------------------------------------------
@dataclass
class _Look:
    processes: dict[int, str]
    evidence: dict[str, bytes | None]


def _look(corpus: MixedCorpus) -> _Look:
    processes: dict[int, str] = {}
    for token in corpus.tokens:
        processes |= marked_processes(_token_arena(token))
    evidence = {}
    for record in corpus.records:
        path = corpus.out / "records" / record.folder / EVIDENCE_NAME
        evidence[record.record_id] = path.read_bytes() if path.is_file() else None
    return _Look(processes, evidence)


def _token_arena(token: str) -> kit.Arena:
    """An arena that carries only ``token`` (what the marker scan and clean-up read)."""
    return kit.Arena(token, "", "", "", "", "", "", "", "", "")


def _reports(texts: list[str], token: str) -> list[tuple[str, bool, str]]:
    """The report lines (``kit.report``) of ``token`` in ``texts``: (event, ok, detail).

    A detail never holds a double quote or a backslash (``kit.report`` replaces them), so a
    match that does is a line cut short in a row's truncated reason, run on into the JSON
    around it: dropped."""
    seen: dict[tuple[str, bool, str], None] = {}
    for text in texts:
        for found, event, ok, detail in REPORT_RE.findall(text):
            if found == token and '"' not in detail and "\\" not in detail:
                seen.setdefault((event, ok == "1", detail.strip()), None)
    return list(seen)


def _record_texts(corpus: MixedCorpus, record: MixedRecord, rows: dict[str, Any]) -> list[str]:
    """Where a record's report lines may be: its row, evidence, judge log, the notes."""
    texts = [json.dumps(rows.get(record.record_id, []))]
    folder = corpus.out / "records" / record.folder
    for name in (EVIDENCE_NAME, "judge.log"):
        with contextlib.suppress(OSError):
            texts.append((folder / name).read_text(errors="replace"))
    for note in sorted(corpus.notes.glob("*.log")):
        with contextlib.suppress(OSError):
            texts.append(note.read_text(errors="replace"))
    return texts


def _stopped_by(attack: Attack, result: RecordResult, reports: list[tuple[str, bool, str]]) -> str:
    """What held the attack off, from the evidence: its own reports of what failed (an
    errno, "no such process"), what it did that stayed inside its sandbox, the row it got;
    with no report (a helper killed before it could act), the catalog's defence."""
    if result.findings:
        return "not stopped"
    parts = [f"{event}: {detail}" for event, ok, detail in reports if not ok][:2]
    parts += [f"contained: {event}: {detail}" for event, ok, detail in reports if ok][:1]
    if not parts:
        parts.append(f"{attack.defence} (no attempt of it got through)")
    row = f"row {result.verdict}" + (f" at {result.stage}" if result.stage else "")
    if result.failed_gates:
        row += f" (failed {', '.join(result.failed_gates)})"
    elif result.reason:
        row += f" ({result.reason[:140]})"
    parts.append(row + f", old check {result.old_check}")
    return "; ".join(parts)


def audit_env(corpus: MixedCorpus, token: str) -> dict[str, str]:
    """The audit's environment: the suite's (``arena_env``: HOME and TMPDIR in the throwaway
    folder, the marker ``token``) and matplotlib's cache out of HOME, so that whatever
    appears in HOME (what every later judge of the audit inherits) is an attack's."""
    env = arena_env(corpus.home, corpus.root / "tmp", token)
    env["MPLCONFIGDIR"] = str(corpus.root / "tmp" / "matplotlib")
    return env


def _wait_audit(
    process: subprocess.Popen[bytes],
    corpus: MixedCorpus,
    limit: float,
    on_progress: Callable[[int], None] | None,
) -> tuple[int | None, bool]:
    deadline = time.monotonic() + limit
    while True:
        try:
            return process.wait(timeout=1.0), False
        except subprocess.TimeoutExpired:
            if on_progress is not None:
                on_progress(len(list((corpus.out / "records").glob("*/result.json"))))
            if time.monotonic() > deadline:
                return kill_session(process), True


def run_mixed_audit(
    device: str = "cpu",
    only: list[str] | None = None,
    *,
    honest: int = MIXED_HONEST,
    workers: int = 2,
    timeout: float = AUDIT_TIMEOUT,
    delay: float = DELAY_S,
    limit: float = AUDIT_LIMIT_S,
    keep: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> MixedAudit:
    """Audit a corpus of ``honest`` honest records and the selected attacks, then check the
    acceptance (``MixedAudit.ok``). ``on_progress`` gets the count of records judged so far;
    ``keep`` leaves the folder on disk (its path in ``detail``)."""
    started = time.monotonic()
    corpus = build_corpus(audit_attacks(only), honest, device)
    listeners = Listeners()
    result = MixedAudit(device, [])
    before_home = digest_tree(corpus.home)
    before_canaries = {name: digest_tree(path) for name, path in corpus.canaries.items()}
    try:
        arguments = ["audit", str(corpus.corpus), "--out", str(corpus.out)]
        arguments += ["--format", "cuda-l1", "--device", device, "--timeout", f"{timeout:g}"]
        arguments += ["--compile-timeout", f"{timeout:g}"]  # hangs end fast; nothing builds
        arguments += ["--workers", str(workers)]
        log = corpus.root / "audit.log"
        with open(log, "wb") as sink:
            audit = start_held(
                arguments,
                lambda pid: corpus.render(pid, listeners.ports),
                stdout=sink,
                stderr=sink,
                cwd=corpus.root / "tmp",
                env=audit_env(corpus, corpus.audit_token),
            )
        code, hung = _wait_audit(audit, corpus, limit, on_progress)
        ended = time.monotonic()
        first = _look(corpus)
        time.sleep(max(0.0, delay - (time.monotonic() - ended)))
        second = _look(corpus)
        result.audit_exit = code
        if hung:
            result.findings.append(f"audit-crash: the audit ran past {limit:g} s and was killed")
        elif code != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            result.findings.append(f"audit-crash: the audit exited {code}: {' | '.join(tail)}")
        if not (corpus.out / "summary.json").is_file():
            result.findings.append("audit-crash: the audit wrote no summary.json")
        report = subprocess.run(
            [sys.executable, "-m", "kernelgate.cli", "audit-report", str(corpus.out)],
            capture_output=True,
            text=True,
            env=audit_env(corpus, secrets.token_hex(6)),
            timeout=600,
            check=False,
        )
        result.report_exit = report.returncode
        if report.returncode != 0:
            lines = (report.stderr or report.stdout).strip().splitlines()
            result.findings.append(
                f"report-refused: audit-report exited {report.returncode}: "
                + (lines[-1][:300] if lines else "no message")
            )
        rows = stored_rows(corpus.out)
        result.records, forged = check_records(corpus, rows, second.evidence)
        result.findings += forged
        _machine_findings(corpus, result, first, second, listeners, before_home, before_canaries)
        for record, record_result in zip(corpus.records, result.records, strict=True):
            reports = _reports(_record_texts(corpus, record, rows), record.token or "-")
            for event, ok, detail in reports:
                if ok and event in MEMORY_EVENTS:
                    record_result.findings.append(f"judge-memory-read: {detail}")
                if event == "skipped-unconfined":
                    record_result.findings.append(f"not-confined: skipped ({detail})")
                if ok and str(corpus.root) in detail:  # its sandbox is elsewhere
                    record_result.findings.append(f"wrote-outside: {event}: {detail}")
            if record.attack is not None:
                record_result.stopped_by = _stopped_by(record.attack, record_result, reports)
    finally:
        for token in corpus.tokens:
            end_marked_processes(_token_arena(token))
        listeners.close()
        if keep:
            result.detail = f"kept {corpus.root}"
        else:
            shutil.rmtree(corpus.root, ignore_errors=True)
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _machine_findings(
    corpus: MixedCorpus,
    result: MixedAudit,
    first: _Look,
    second: _Look,
    listeners: Listeners,
    before_home: dict[str, str],
    before_canaries: dict[str, dict[str, str]],
) -> None:
    """Findings outside the rows: processes left, canaries, references, HOME, network,
    forged record folders; each on the record whose token it carries where one does."""
    by_token = {r.token: res for r, res in zip(corpus.records, result.records, strict=True)}
    alive = first.processes | second.processes
    for pid, comm in alive.items():
        token = _token_of(pid, corpus.tokens)
        line = f"outlived: process {pid} ({comm}) alive after the audit returned"
        (by_token[token].findings if token in by_token else result.findings).append(line)
    for name, path in corpus.canaries.items():
        changes = tree_changes(before_canaries[name], digest_tree(path))
        if changes:
            result.findings.append(f"canary-changed: {name}: {'; '.join(changes[:3])}")
    planted = tree_changes(before_home, digest_tree(corpus.home))
    if planted:
        result.findings.append(f"cache-poisoned: the audit's HOME: {'; '.join(planted[:4])}")
    for record, record_result in zip(corpus.records, result.records, strict=True):
        copy = corpus.out / "records" / record.folder / "reference.py"
        if copy.is_file() and copy.read_text(errors="replace") != record.reference:
            record_result.findings.append(
                f"canary-changed: the reference copy {record.folder}/reference.py changed"
            )
    heard = listeners.poll()
    for line in heard:
        token = next((t for t in corpus.tokens if t in line), "")
        target = by_token[token].findings if token in by_token else result.findings
        target.append(f"network: {line}")
    known = {r.folder for r in corpus.records}
    records = corpus.out / "records"
    extra = (
        sorted(p.name for p in records.iterdir() if p.name not in known) if records.is_dir() else []
    )
    if extra:
        result.findings.append(f"row-forged: folders in OUT/records of no record: {extra[:4]}")


def _token_of(pid: int, tokens: list[str]) -> str:
    for token in tokens:
        if pid in marked_processes(_token_arena(token)):
            return token
    return ""
