"""One record, judged in a process of its own: the old check beside ``kernelgate.verify``.

Why a process per record: ``verify`` already keeps the candidate out of the judge, but the
judge side (the reference at KernelBench sizes, the fp64 oracle, derivation of the contract)
can itself blow up memory or wedge. Running each record's judge in a fresh process means
such a failure costs that record only: it becomes an ``error`` row and the audit goes on.

The parent (``judge_isolated``, run by an executor) writes ``request.json`` into the
record's work folder and starts ``python -m kernelgate.audit.judge REQUEST RESULT``; the
child writes ``result.json`` (the row) and ``verdict.json`` (the full evidence). The work
folder also keeps the record's reference and candidate files when the corpus held them as
text, so every replay command in the report works after the audit, and, while the record is
being judged, the old check's result and the journal of finished gates (``old_check.json``,
``gates.jsonl``) from which a judge killed mid-record is resumed (see ``kernelgate.journal``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelgate.audit import admission, oldcheck, zygote
from kernelgate.audit.device_checks import authored_kernel_count, res02_row, sanitizer_row
from kernelgate.audit.device_waits import block_on_device_waits
from kernelgate.audit.identity import inputs_digest, judging_environment, problem_folder
from kernelgate.audit.interrupt import Interruption
from kernelgate.audit.memory_guard import HostMemoryGuard
from kernelgate.audit.processes import (
    JudgeProcess,
    become_subreaper,
    child_env,
    die_with_audit_parent,
    kill_descendants,
    kill_tree,
    tail,
)
from kernelgate.audit.settled import worker_tree_settled
from kernelgate.evidence_io import sha256_file, write_atomic
from kernelgate.formats.corpus import CorpusRecord
from kernelgate.journal import DEVICE_MEMORY_SIGNS, GateJournal, journal_key
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT
from kernelgate.sandbox.sanitizer_outcomes import DEFAULT_BUDGET_S

if TYPE_CHECKING:  # for annotations: the judge child imports the sandbox with the pipeline
    from kernelgate.sandbox.session import WorkerSession

UNREADABLE, ERROR = "unreadable", "error"
ACCEPTING_VERDICTS = ("verified", "narrowed")
RECORD_LIMIT_BASE = 2 * oldcheck.LOAD_TIMEOUT + 120.0  # loading twice, plus start-up
RECORD_LIMIT_PER_TIMEOUT = 100  # candidate calls one record may make, at most, in all
RECORD_LIMIT_PER_COMPILE_TIMEOUT = 2  # the old check's builds, then the verification's
# in a record's work folder: the gates finished so far, and the old check's result, so that
# a judge killed mid-record (a device call's deadline) resumes where it was
JOURNAL_NAME, OLD_CHECK_NAME = "gates.jsonl", "old_check.json"
EVIDENCE_NAME = "verdict.json"  # a record's full evidence, in its work folder
PROFILE_JUDGES_ENV = "KERNELGATE_PROFILE_JUDGES"  # a folder: each judge's cProfile (``_profiled``)


@dataclass(frozen=True)
class AuditOptions:
    """What every record of one audit is judged with."""

    out_dir: str
    device: str = "cpu"
    timeout: float = 60.0
    seed: int = 0
    # seconds of building (torch extensions, Triton compiles, a first call beyond
    # ``timeout``) the record's verification may spend: sandbox/compile_budget.py
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT
    # ``--only``: the gates each record's verification runs (None: all twelve). A partial
    # audit: every row says which gates it ran (``only``), and so does the report.
    only: tuple[str, ...] | None = None
    # AUTH-01 (sandbox/authorship.py): the minimum authored share of every record (None:
    # its format's default), or off altogether
    min_authored_share: float | None = None
    authorship_rule: bool = True
    # RES-01's compute-sanitizer runs (sandbox/sanitizer.py): in a device audit, on by
    # default for each record whose candidate launched a kernel of its own, within this many
    # seconds for all tools together; ``--no-sanitize`` turns them off
    sanitize: bool = True
    sanitize_seconds: float = DEFAULT_BUDGET_S

    def __post_init__(self) -> None:
        if self.only is not None:  # from request.json, a list: kept as a tuple (hashable)
            object.__setattr__(self, "only", tuple(self.only) or None)

    @property
    def gates_selected(self) -> list[str] | None:
        """The ``--only`` selection as rows, keys and replays carry it (None: every gate)."""
        return list(self.only) if self.only else None

    def min_share_for(self, corpus_format: str) -> float | None:
        """AUTH-01's minimum for a record of ``corpus_format`` (None: the rule is off)."""
        from kernelgate.sandbox.authorship import default_min_share

        if not self.authorship_rule:
            return None
        if self.min_authored_share is not None:
            return self.min_authored_share
        return default_min_share(corpus_format)

    def sanitize_policy(self) -> Any:
        """The ``SanitizePolicy`` of every record's verification (None: no sanitizer runs;
        always None in CPU mode, where there is no compute-sanitizer to run)."""
        from kernelgate.sandbox.sanitizer import SanitizePolicy

        if not self.sanitize or self.device == "cpu":
            return None
        return SanitizePolicy("authored", self.sanitize_seconds)

    @property
    def record_limit(self) -> float:
        """Wall-clock ceiling of one record's judge: a backstop, far above honest runs."""
        sanitizer = 0.0
        if self.sanitize and self.device != "cpu":  # the budget, the exits' grace, the probe
            sanitizer = 2 * self.sanitize_seconds + 300.0
        return (
            sanitizer
            + RECORD_LIMIT_BASE
            + RECORD_LIMIT_PER_TIMEOUT * self.timeout
            + RECORD_LIMIT_PER_COMPILE_TIMEOUT * self.compile_timeout
        )


def behaviour_of(source: bytes) -> bytes:
    """A module's syntax tree without docstrings, comments or layout.

    Those change nothing a judge decides, so editing them keeps the gate journals (and the
    results) of an audit resumed across sessions; any change to the code itself does not.
    A docstring read at run time (typer's ``--help`` text) changes no verdict either.
    """
    tree = ast.parse(source)
    documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    for node in ast.walk(tree):
        if isinstance(node, documented) and node.body and is_docstring(node.body[0]):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def is_docstring(statement: ast.stmt) -> bool:
    """Whether ``statement`` is a bare string literal (a docstring, in first place)."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def code_digest() -> str:
    """SHA-256 (first 12 hex digits) of what this kernelgate's own source files do.

    Recorded on every row and in every gate journal's key: an audit resumed across sessions
    can be judged by code that changed in between, and the report says which rows which code
    judged (the device's copy of the tree has no git history to ask). Docstrings and
    comments are left out (``behaviour_of``): until stop 15 any docstring edit discarded
    device work already journaled. Computed once a process; a record's judge takes it from
    its request instead (``judge_isolated``), since parsing every module took 1-2 s a record.
    """
    return _given_code_digest or _computed_code_digest()


_given_code_digest: str | None = None  # the audit parent's, from the judge's request


def take_code_digest(given: object) -> None:
    """Use ``given``, the audit parent's digest of this same source tree, from now on (a
    malformed one is ignored: the digest is then computed here)."""
    global _given_code_digest
    if isinstance(given, str) and re.fullmatch(r"[0-9a-f]{12}", given):
        _given_code_digest = given


# Subpackages of kernelgate that no judge imports: the shipped kernels (kernelgate.kernels)
# and the model trained on them (kernelgate.training). Kernel work between two device
# sessions must not change the digest, or an audit could no longer reuse or resume the rows
# another session judged with the same judge (tests/test_code_digest.py checks that nothing
# outside these folders imports them).
NOT_THE_JUDGE = ("kernels", "training")


def tree_digest(root: Path) -> str:
    """The digest of the kernelgate package at ``root``: every module's behaviour
    (``behaviour_of``) under its path, except the subpackages in ``NOT_THE_JUDGE``."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in NOT_THE_JUDGE:
            continue
        digest.update(str(relative).encode() + b"\0" + behaviour_of(path.read_bytes()))
    return digest.hexdigest()[:12]


@functools.cache
def _computed_code_digest() -> str:
    import kernelgate

    return tree_digest(Path(kernelgate.__file__).resolve().parent)


def work_folder_name(record_id: str) -> str:
    """A file-system-safe, collision-free folder name for a record id."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", record_id).strip("._")[:80] or "record"
    return f"{readable}-{hashlib.sha1(record_id.encode()).hexdigest()[:8]}"


def base_row(record: CorpusRecord) -> dict[str, Any]:
    """The fields every row has, whatever happened to the record."""
    return {
        "id": record.id,
        "format": record.format,
        "source_ids": record.source_ids,
        "source_verdict": record.source_verdict,
        "reference": record.reference_path,
        "candidate": record.candidate_path,
        "old_check": oldcheck.NOT_RUN,
        "old_check_current": oldcheck.NOT_RUN,
        "old_check_detail": {},
        "verdict": ERROR,
        "stage": None,
        "reason": None,
        "failed_gates": [],
        # the static layer's rule ids (one per finding, sorted) and the rules that failed
        "static_findings": [],
        "failed_rules": [],
        "authored_share": None,  # AUTH-01's measure, when the gates ran and it was taken
        "failed_builds": [],  # [{what, error}] of the candidate's builds that failed
        "gates": [],
        "skipped": [],
        "contract": None,
        "backend": None,
        "verify_seconds": None,
        "seconds": 0.0,
        "replay": None,
        "evidence": None,
        "evidence_sha256": None,  # of verdict.json's bytes, checked by the audit (integrity.py)
        "judged_with": code_digest(),
    }


def unreadable_row(record: CorpusRecord) -> dict[str, Any]:
    return base_row(record) | {
        "verdict": UNREADABLE,
        "reason": record.unreadable,
        "old_check_detail": oldcheck.not_run(f"unreadable record: {record.unreadable}"),
    }


def error_row(
    record: CorpusRecord, reason: str, seconds: float, judge_exit: int | None = None
) -> dict[str, Any]:
    return base_row(record) | {
        "verdict": ERROR,
        "reason": reason,
        "seconds": round(seconds, 2),
        "judge_exit": judge_exit,  # the judge process's exit status, where it died
    }


def interrupted_row(record: CorpusRecord, reason: str) -> dict[str, Any]:
    """The row of a record whose judge a stopping audit refused or killed: never stored.

    Deliberately bare: ``base_row`` hashes kernelgate's source (``code_digest``), seconds of
    work the first time in the audit's process, which a stop must not wait for.
    """
    return {"id": record.id, "verdict": ERROR, "reason": reason, "interrupted": True}


def killed_by_the_system(row: dict[str, Any]) -> bool:
    """Whether the record's judge died of SIGKILL from outside (the OOM killer, mostly):
    the record was never judged, and may well be judged alone later."""
    return row.get("verdict") == ERROR and row.get("judge_exit") == -signal.SIGKILL


def ran_out_of_device_memory(row: dict[str, Any]) -> bool:
    """Whether the GPU ran out of memory anywhere in the record's judging: in a candidate
    call (RES-01's incidents), while the candidate loaded, in the old check, or in the judge
    itself. With other judges on the same GPU the memory may have been theirs, so such a
    record is judged again with fewer beside it, and at last alone, where the same failure
    is the record's own."""
    if row.get("device_memory_incident"):
        return True
    if row.get("verdict") == ERROR or row.get("stage") == "load":
        return bool(DEVICE_MEMORY_SIGNS.search(str(row.get("reason"))))
    failure = (row.get("old_check_detail") or {}).get("failure")
    return bool(failure and DEVICE_MEMORY_SIGNS.search(str(failure)))


def memory_failure(row: dict[str, Any]) -> bool:
    """Whether the record's judging failed for memory (killed from outside, or a full GPU)."""
    return killed_by_the_system(row) or ran_out_of_device_memory(row)


def _device_memory_incident(incidents: list[dict[str, Any]]) -> bool:
    return any(DEVICE_MEMORY_SIGNS.search(str(i.get("detail"))) for i in incidents)


# -- the parent's side -----------------------------------------------------------------------


def result_path(out_dir: Path, record_id: str) -> Path:
    """Where the judge of ``record_id`` leaves its row for the audit to store."""
    return out_dir / "records" / work_folder_name(record_id) / "result.json"


def evidence_path(out_dir: Path, record_id: str) -> Path:
    """Where the judge of ``record_id`` writes its full evidence (``verify``'s verdict)."""
    return out_dir / "records" / work_folder_name(record_id) / EVIDENCE_NAME


def evidence_tampering(row: dict[str, Any], work: Path) -> str | None:
    """Why the evidence a judge's row points to is not what the judge wrote, or None.

    The judge digests ``verdict.json``'s bytes as it writes them, after every process of
    the verification is gone (``worker_tree_settled``), and puts the digest in its row. The
    audit reads the row only after the judge and its tree have exited, and digests the file
    again: a difference means something else wrote into the record's folder in between (a
    process the candidate left running where nothing confines it, or a person).
    """
    if not row.get("evidence"):
        return None  # the candidate never reached the gates: no evidence file
    claimed = row.get("evidence_sha256")
    evidence = work / EVIDENCE_NAME
    try:
        found = sha256_file(evidence)
    except OSError as exc:
        found = f"unreadable ({exc.strerror or exc})"
    if claimed == found:
        return None
    now = found if found.startswith("unreadable") else found[:12]
    return (
        f"the evidence {work.name}/{EVIDENCE_NAME} changed after its judge wrote it "
        f"(sha256 written {str(claimed)[:12]}, now {now}): something outside the judge "
        "wrote into the record's folder, most likely a process the candidate left running; "
        "its verdict is not trusted (judge it again: --resume --rejudge-record)"
    )


def ingested(row: dict[str, Any], record: CorpusRecord, work: Path) -> dict[str, Any]:
    """``row`` as the audit stores it: an error row that names the tampering if its evidence
    is not what its judge wrote (``evidence_tampering``)."""
    tampered = evidence_tampering(row, work)
    if tampered is None:
        return row
    return error_row(record, tampered, float(row.get("seconds") or 0.0)) | {
        "stage": "evidence",
        "evidence_tampered": True,
    }


def finished_but_unstored(
    record: CorpusRecord, result: Path, options: AuditOptions | None = None
) -> dict[str, Any] | None:
    """The row a judge of this code wrote for ``record`` in an earlier run that was killed
    before it stored the row (a deadline's SIGKILL lands between the two now and then).

    A record without a row whose folder holds a result is exactly that, unless the result
    failed for memory (the audit judges such records again, with fewer beside them): a
    stored row's record is not judged again unless the audit forgets the row, and
    forgetting removes the result too (``runner.forget``). The store refuses a resume with
    other settings, so only the code can differ, and the row says which code judged it; a
    row judged with another gate selection (``--only``) is never taken, all the same.
    """
    try:
        row = json.loads(result.read_text())
    except (OSError, ValueError):
        return None
    if (
        isinstance(row, dict)
        and row.get("id") == record.id
        and row.get("judged_with") == code_digest()
        and (options is None or row.get("only") == options.gates_selected)
        and not memory_failure(row)
    ):
        return row
    return None


def judge_isolated(
    record: CorpusRecord,
    options: AuditOptions,
    gpu: str | None = None,
    threads: int | None = None,
    guard: HostMemoryGuard | None = None,
    interruption: Interruption | None = None,
) -> dict[str, Any]:
    """Judge ``record`` in a fresh process and return its row; never raises for a record.

    ``gpu`` pins the judge (and so its candidate worker) to one device in device mode;
    ``threads`` caps the CPU threads of each of its processes (its share of the cores);
    ``guard`` may stop the judge when the host's memory runs low beside other judges;
    ``interruption`` starts the judge unless the audit is stopping, and kills it when the
    audit stops: the row is then marked ``interrupted`` (the runner stores no such row).

    The judge runs in a process group of its own, so a terminal's Ctrl-C (SIGINT to the
    foreground group) reaches the audit alone, which stops its judges itself: a judge hit
    by the SIGINT would die in mid-gate, or worse, a gate might take the interrupt for the
    candidate's failure and the judge would write a wrong row.
    """
    if record.unreadable is not None:
        return unreadable_row(record)
    if interruption is not None and interruption.closed:  # checked again as it starts
        return interrupted_row(record, "the audit stopped before this record's judge started")
    started = time.monotonic()
    work = Path(options.out_dir) / "records" / work_folder_name(record.id)
    work.mkdir(parents=True, exist_ok=True)
    request, result, log_path = work / "request.json", work / "result.json", work / "judge.log"
    unstored = finished_but_unstored(record, result, options)
    if unstored is not None:
        request.unlink(missing_ok=True)
        return ingested(unstored, record, work) | {"recovered_result": True}
    result.unlink(missing_ok=True)
    (work / EVIDENCE_NAME).unlink(missing_ok=True)  # an earlier judging's must not pass for this
    env = child_env(options.device)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    # The record's scratch folder (``judge_record``) is made and removed here, in the
    # parent: a judge killed mid-record (a deadline, the memory guard) leaves nothing behind.
    with (
        log_path.open("wb") as log,
        tempfile.TemporaryDirectory(
            prefix="kernelgate-record-", ignore_cleanup_errors=True
        ) as scratch,
    ):
        order = {
            "record": record.to_dict(),
            "options": asdict(options),
            "scratch": scratch,
            "code_digest": code_digest(),  # the same tree: the judge need not parse it again
            "launched_at": time.time(),  # the row's judge_started_s: the judge's start-up
        }
        write_atomic(request, json.dumps(order))

        # Forked by the audit's zygote where it serves (imports paid once: ``zygote.py``),
        # else a fresh process; either way the same judge, with the same row.
        forker = zygote.zygote_for(env, Path(options.out_dir))

        def start() -> JudgeProcess:
            if forker is not None:
                try:
                    return forker.spawn(request, result, log, env)
                except zygote.ZygoteUnavailable as exc:
                    if forker.failure is not None:
                        zygote.say_fallback(f"the judge zygote failed: {exc}")
            return subprocess.Popen(
                [sys.executable, "-m", "kernelgate.audit.judge", str(request), str(result)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                process_group=0,
            )

        process = start() if interruption is None else interruption.launch(start)
        if process is None:  # the audit is stopping: this record keeps no row
            return interrupted_row(record, "the audit stopped before this record's judge started")
        if guard is not None:
            guard.register(process.pid)
        try:
            # time spent waiting for device memory (admission) is not judging time
            code = admission.wait_for_judge(
                process, options.record_limit, work / admission.WAITING_MARKER
            )
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            process.wait()
            return error_row(
                record,
                f"judge exceeded the record limit of {options.record_limit:g} s and was killed",
                time.monotonic() - started,
            )
        except BaseException:  # Ray's cancel raises KeyboardInterrupt here: no orphans
            kill_tree(process.pid)
            process.wait()
            raise
        finally:
            if guard is not None:
                guard.unregister(process.pid)
            if interruption is not None:
                interruption.finished(process.pid)
    stopped_by_guard = guard.stopped(process.pid) if guard is not None else None
    via = "zygote" if isinstance(process, zygote.ForkedJudge) else "process"
    if stopped_by_guard is None and isinstance(process, zygote.ForkedJudge):
        stopped_by_guard = process.note  # its zygote died, and it with it
    if interruption is not None and interruption.closed and code != 0:
        return interrupted_row(record, f"the audit stopped this record's judge (exit {code})")
    request.unlink(missing_ok=True)
    try:
        row = json.loads(result.read_text())
        if not isinstance(row, dict) or row.get("id") != record.id:
            raise ValueError("result belongs to another record")
        # the judge and its whole tree have exited: the evidence is checked against the
        # digest its judge wrote, and from here on the store's row holds that digest
        return ingested(row, record, work)
    except (OSError, ValueError) as exc:
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if stopped_by_guard:
            how += f" ({stopped_by_guard})"
        elif code == -9:
            how += " (out of memory?)"
        log_tail = tail(log_path, 4000)
        last = log_tail.strip().splitlines()
        row = error_row(
            record,
            f"judge process {how} without a result ({exc})" + (f": {last[-1]}" if last else ""),
            time.monotonic() - started,
            judge_exit=code,
        ) | {"judge_via": via}
        # the traceback's last line rarely names the cause: CUDA's advice follows it
        return row | {"device_memory_incident": bool(DEVICE_MEMORY_SIGNS.search(log_tail))}


# -- the child's side ------------------------------------------------------------------------


def source_text_bytes(source: str | None) -> bytes:
    """The bytes a record held as text is written as (``materialize``), and hashed as by
    ``reuse.record_inputs``: one function, so the two cannot drift apart."""
    return (source or "").encode()


def materialize(record: CorpusRecord, work: Path) -> tuple[Path, Path]:
    """Files for ``verify`` (which takes paths): the corpus's own, or written from text."""
    paths = []
    for role, path, source in (
        ("reference", record.reference_path, record.reference_source),
        ("candidate", record.candidate_path, record.candidate_source),
    ):
        if path is not None:
            paths.append(Path(path).resolve())
        else:
            target = work / f"{role}.py"
            target.write_bytes(source_text_bytes(source))
            paths.append(target.resolve())
    return paths[0], paths[1]


def contract_coverage(contract: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """What the contract that judged a record covers: shapes, dtypes, layouts, device."""
    tensors = [spec for spec in contract.get("inputs", []) if "dtypes" in spec]
    dims = contract.get("dims", [])
    return {
        "shapes": [spec.get("shape", []) for spec in tensors],
        "dtypes": sorted({d for spec in tensors for d in spec.get("dtypes", [])}),
        "layouts": sorted({lay for spec in tensors for lay in spec.get("layouts", [])}),
        "varying_dims": [d["name"] for d in dims if d.get("varies")],
        "fixed_dims": [d["name"] for d in dims if not d.get("varies")],
        "device": environment.get("device"),
        "triton_interpreter": environment.get("triton_interpreter"),
        "provenance": contract.get("provenance", {}).get("source"),
    }


def record_key(reference: Path, candidate: Path, options: AuditOptions, problem: Any = None) -> str:
    """What a record's resume files (the gate journal, the old check's result) were made
    with: both programs' bytes, the code and every setting a gate's result depends on
    (for a problem folder, its statement: tolerance, forbidden names, declared shapes)."""
    stated = {"problem": problem.summary()} if problem is not None else {}
    return journal_key(
        reference,
        candidate,
        code=code_digest(),
        device=options.device,
        timeout=options.timeout,
        compile_timeout=options.compile_timeout,
        seed=options.seed,
        only=options.gates_selected,  # a journal of other gates must not stand in for these
        **stated,
    )


def judge_record(
    record: CorpusRecord, options: AuditOptions, work: Path, scratch: Path
) -> dict[str, Any]:
    """Old check and contract verdict for one readable record (runs in the judge child)."""
    import shlex

    from kernelgate.errors import (
        CandidateBuildError,
        CandidateLoadError,
        KernelgateError,
        ReferenceError_,
    )
    from kernelgate.formats.kernelbench import candidate_backend
    from kernelgate.pipeline import verify

    started = time.monotonic()
    row = base_row(record)
    reference, candidate = materialize(record, work)
    problem = problem_of(record)
    stated = problem.folder if problem is not None else reference  # what the verdict judges by
    only = options.gates_selected
    row |= {"reference": str(reference), "candidate": str(candidate), "only": only}
    # what this judge reads, digested: a later audit of the same pair reuses the row (reuse.py)
    row["inputs_sha256"] = inputs_digest(
        reference.read_bytes(), candidate.read_bytes(), problem_folder(record)
    )
    replay = ["kernelgate", "verify", str(stated), str(candidate), "--device", options.device]
    for gate in only or ():  # a partial audit's verdict replays with the same selection
        replay += ["--only", gate]
    min_share = options.min_share_for(record.format)
    if min_share is not None:
        replay += ["--min-authored-share", f"{min_share:g}"]
    row["replay"] = shlex.join(replay)
    try:
        backend = candidate_backend(candidate.read_text())
    except (OSError, UnicodeDecodeError):
        backend = None
    row["backend"] = backend
    key = record_key(reference, candidate, options, problem)
    journal = GateJournal(work / JOURNAL_NAME, key)
    verdict = None
    # Both the old check and the gates run the candidate; whatever either left running is
    # killed before a byte of evidence is written (``worker_tree_settled``, one for both:
    # entered once the verification's worker runs, so that it and its forkserver are the
    # verification's to close, not leftovers of the check). Each phase runs once this
    # judge's device memory for it is reserved (``device_admission``: the check's share,
    # released when the check's child has exited, then the gates'). Leftovers, if any, are
    # killed just after the gates' share is released: a judge admitted in that moment also
    # waits for the device's free memory, which counts what they still hold.
    # ``scratch`` is one folder for the candidate's old check and its workers: a CUDA
    # extension or Triton kernel the check built is not built again (the same candidate's
    # own folder; the parent, ``judge_isolated``, makes and removes it).
    # The verification's worker is spawned first (``spawned_worker``: no device context, so
    # nothing to reserve yet): its torch import overlaps the admission's sizing of the
    # reference and the old check instead of following them (2-4 s of every record).
    with (
        worker_tree_settled() as spawned_settled,
        _spawned_ahead(candidate, backend, options, scratch) as early,
    ):
        sizing = device_sizing(reference, options)
        with worker_tree_settled() as settled:
            with device_admission(sizing, work, OLD_CHECK_PHASE) as reserved_for_check:
                _log_step("old check ...")
                check_started = time.monotonic()
                old = _old_check(
                    stated, candidate, backend, options, work / OLD_CHECK_NAME, key, scratch
                )
                _log_step(f"old check {old['status']}")
            row |= {
                # wall seconds of the KernelBench check inside this judge (None where a
                # resumed judge took an earlier attempt's result): judge_speed.py
                # --from-audit reads it
                "old_check_seconds": (
                    None
                    if old.get("taken_from_earlier_attempt")
                    else round(time.monotonic() - check_started, 3)
                ),
                "old_check": old["status"],
                "old_check_current": old.get("status_current", old["status"]),
                "old_check_detail": old,
            }
            with device_admission(sizing, work, GATES_PHASE) as reserved:
                if reserved:
                    row["admission"] = reserved | {
                        "old_check_estimate_bytes": reserved_for_check["estimate_bytes"],
                        "old_check_waited_s": reserved_for_check["waited_s"],
                    }
                try:
                    verdict = verify(
                        reference,
                        candidate,
                        device=options.device,
                        timeout=options.timeout,
                        compile_timeout=options.compile_timeout,
                        seed=options.seed,
                        only=only,
                        journal=journal,
                        on_gate=_log_gate,
                        trace=_log_step,
                        scratch=scratch,
                        session=early,
                        problem=problem,
                        min_authored_share=min_share,
                        sanitize=options.sanitize_policy() or False,
                    )
                except CandidateLoadError as exc:
                    row |= {"verdict": "rejected", "stage": "load", "reason": str(exc)}
                    if isinstance(exc, CandidateBuildError):
                        row["build_failed"] = True
                except ReferenceError_ as exc:
                    row |= {"verdict": ERROR, "stage": "reference", "reason": str(exc)}
                except KernelgateError as exc:
                    row |= {"verdict": ERROR, "stage": "setup", "reason": str(exc)}
    settled.killed += spawned_settled.killed
    settled.surviving += spawned_settled.surviving
    if settled.killed:
        _log_step(f"killed {len(settled.killed)} leftover process(es): {'; '.join(settled.killed)}")
        row["leftover_processes"] = settled.killed
    if settled.surviving:
        row |= {
            "verdict": ERROR,
            "stage": "evidence",
            "reason": f"process(es) {settled.surviving} of the verification would not die; "
            "no evidence written",
        }
    elif verdict is not None:
        evidence = work / EVIDENCE_NAME
        row |= {
            "evidence_sha256": write_atomic(evidence, verdict.to_json()),
            "verdict": verdict.verdict.value,
            "stage": "gates",
            "failed_gates": verdict.failed_gates,
            "static_findings": sorted(f.rule for f in verdict.static),
            "failed_rules": verdict.failed_rules,
            # AUTH-01's measure (None: not measured), for the report's histogram
            "authored_share": (verdict.authorship or {}).get("authored_share"),
            # the candidate's builds that failed, with each one's first compiler error: a
            # candidate that falls back to PyTorch when its extension does not compile here
            # reads as having no kernel of its own, and the report says why
            "failed_builds": failed_builds(verdict.compile),
            "gates": [
                {
                    "id": gate.id,
                    "kind": gate.kind.value,
                    "status": gate.status.value,
                    "seconds": gate.seconds,
                    "reason": gate.reason[:400],
                    "replay": gate.counterexample.replay if gate.counterexample else None,
                }
                for gate in verdict.gates
            ],
            "skipped": verdict.skipped,
            "contract": contract_coverage(verdict.contract, verdict.environment),
            "verify_seconds": verdict.seconds,
            "evidence": str(evidence),
            "device_memory_incident": _device_memory_incident(
                verdict.gate("RES-01").evidence.get("incidents", [])
            ),
            "resumed_gates": journal.resumed,
            # the device checks of the candidate's own kernels (audit/device_checks.py)
            "authored_kernels": authored_kernel_count(verdict.authorship),
            "sanitizer": sanitizer_row(verdict.gate("RES-01").evidence),
            "compile_seconds": verdict.compile_seconds,
            # faults excused outside the reference's layouts (domain.py), one line per gate
            "unguarded_precondition": [
                f"{entry['gate']}: {entry['summary']}" for entry in verdict.unguarded_precondition
            ],
        }
    if row.get("gates"):
        row["res02"] = res02_row(row["gates"])
    # the row is what resumes from now on: a retried or re-judged record starts afresh
    journal.discard()
    (work / OLD_CHECK_NAME).unlink(missing_ok=True)
    row["seconds"] = round(time.monotonic() - started, 2)
    row["peak_memory"] = peak_memory()
    # the versions and device that decided this verdict, as this judge saw them (reuse.py)
    row["environment"] = judging_environment(options.device)
    return row


def problem_of(record: CorpusRecord) -> Any:
    """The problem folder a record of format ``problem`` names (formats/problem.py), loaded
    in the judge (it is trusted, as a reference is); None for every other format."""
    if record.format != "problem":
        return None
    from kernelgate.formats.problem import load_problem

    return load_problem(record.source_ids["problem"])


@contextlib.contextmanager
def _spawned_ahead(
    candidate: Path, backend: str | None, options: AuditOptions, scratch: Path
) -> Iterator[WorkerSession | None]:
    """The verification's worker, spawned now (``spawned_worker``); closed on the way out,
    unless verify, which takes it, closed it already. None where verify will refuse the
    candidate before it needs one (a CUDA C++ candidate on the CPU)."""
    from kernelgate.pipeline import spawned_worker

    if backend == "cuda" and options.device == "cpu":
        yield None
        return
    early = spawned_worker(
        candidate,
        device=options.device,
        timeout=options.timeout,
        scratch=scratch,
        compile_timeout=options.compile_timeout,
    )
    _log_step("worker spawned")
    try:
        yield early
    finally:
        early.__exit__(None, None, None)


OLD_CHECK_PHASE, GATES_PHASE = "old check", "gates"  # a record's two reservations


@dataclass
class DeviceSizing:
    """What this judge reserves on its GPU, phase by phase (``audit/admission.py``): the
    reference's sizes on the meta device, the budget and ledger of the GPU, and when the
    judge first asked (its place in line, kept from the old check to the gates)."""

    elements: int | None
    work_elements: int
    budget: int
    ledger: admission.Ledger
    first_asked: float | None = None

    def estimate(self, phase: str) -> int:
        if phase == OLD_CHECK_PHASE:
            return admission.estimate_old_check_bytes(self.elements, self.work_elements)
        return admission.estimate_device_bytes(self.elements, self.work_elements)


def device_sizing(reference: Path, options: AuditOptions) -> DeviceSizing | None:
    """The reference sized for admission (None in CPU mode or without a CUDA device: there
    is nothing to share)."""
    budget = admission.device_budget() if options.device == "cuda" else None
    if budget is None:
        return None
    elements, work_elements = admission.reference_elements(reference)
    ledger = admission.Ledger(
        admission.ledger_path(Path(options.out_dir) / "admission"),
        budget,
        free=admission.device_free_bytes,
    )
    return DeviceSizing(elements, work_elements, budget, ledger)


@contextlib.contextmanager
def device_admission(
    sizing: DeviceSizing | None, work: Path, phase: str = GATES_PHASE
) -> Iterator[dict[str, Any]]:
    """Hold a reservation of this judge's estimated device memory for ``phase`` in the ledger
    of its GPU for as long as the block runs; yields what was reserved and the seconds
    waited for it ({} without ``sizing``: nothing to share). A later phase keeps the place
    in line of the first."""
    if sizing is None:
        yield {}
        return
    estimate = sizing.estimate(phase)
    if sizing.first_asked is None:
        sizing.first_asked = time.time()
    marker = work / admission.WAITING_MARKER
    with sizing.ledger.admitted(
        estimate, marker=marker, on_wait=_log_step, asked_at=sizing.first_asked
    ) as waited:
        _log_step(
            f"admitted for the {phase}: {estimate / admission.GIB:.1f} GiB reserved "
            f"after {waited:.1f} s"
        )
        yield {
            "elements": sizing.elements,
            "work_elements": sizing.work_elements,
            "estimate_bytes": estimate,
            # part of the gates' estimate
            "held_bytes": admission.held_device_bytes(sizing.elements),
            "budget_bytes": sizing.budget,
            "waited_s": round(waited, 2),
        }


def _old_check(
    reference: Path,
    candidate: Path,
    backend: str | None,
    options: AuditOptions,
    saved: Path,
    key: str,
    scratch: Path | None = None,
) -> dict[str, Any]:
    """The harness's own check, or its result from an earlier attempt at the same record
    (same programs, settings and code: ``key``), which the journal's gates then follow.
    A check that ran out of device memory is run again: that is why the record is retried."""
    try:
        earlier = json.loads(saved.read_text())
        failure = str(earlier["result"].get("failure"))
        if earlier["key"] == key and not DEVICE_MEMORY_SIGNS.search(failure):
            return earlier["result"] | {"taken_from_earlier_attempt": True}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    if backend == "cuda" and options.device == "cpu":
        old = oldcheck.not_run("CUDA C++ candidate: the old check needs a GPU (--device cuda)")
    else:
        old = oldcheck.run_old_check(
            reference,
            candidate,
            device=options.device,
            timeout=options.timeout,
            scratch=scratch,
            compile_timeout=options.compile_timeout,
        )
    write_atomic(saved, json.dumps({"key": key, "result": old}))
    return old


def _log_step(line: str) -> None:
    """A timestamped line in the record's judge.log (the judge's stderr): where a slow or
    killed judge was, down to the oracle evaluation or candidate call (``verify``'s trace)."""
    now = time.time()
    stamp = f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}"
    print(f"{stamp} {line}", file=sys.stderr, flush=True)


def _log_gate(gate_id: str, result: Any) -> None:
    """One line as each gate starts and ends; at each end the judge's allocator gives its
    cached blocks back (``release_cached_device_memory``)."""
    if result is None:
        _log_step(f"{gate_id} started")
    else:
        _log_step(f"{gate_id} {result.status.value} ({result.seconds:.1f} s)")
        release_cached_device_memory()


def release_cached_device_memory() -> None:
    """Return the blocks the judge's caching allocator keeps after their tensors were freed.

    Judges share one GPU, and admission reads what the device has free: blocks a judge no
    longer uses but keeps count there as held. On an idle H100 the judges of three 4096 x
    4096 matrix products (CUDA-L1 h100 L1/T12, T14, T15) reserved 51-65 GiB, and a network
    reserved 26.9 GiB in one audit and 4.8 in another (L2/T43): newcomers waited for memory
    no tensor used. Between gates the judge keeps only its cached cases' tensors, which this
    leaves alone; the next gate's allocations cost a few driver calls.
    """
    import torch

    if _cuda_in_use():
        torch.cuda.empty_cache()


def _cuda_in_use() -> bool:
    """Whether this judge has touched the GPU (CPU mode, or a judge that never did, has no
    allocator to read or empty)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def peak_memory() -> dict[str, int | None]:
    """What this judge held at most: host RSS of itself and of its finished children (the old
    check, the candidate's worker) and the GPU memory its own allocator reserved and its
    tensors took. For
    planning how many judges a machine holds; the worker's GPU memory is not seen here."""
    import resource

    import torch

    kib = 1024  # ru_maxrss is in KiB on Linux
    used = _cuda_in_use()
    return {
        "judge_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib,
        "children_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kib,
        "judge_gpu_reserved_bytes": int(torch.cuda.max_memory_reserved()) if used else None,
        # what the judge's tensors needed at once: the reserved peak also counts blocks the
        # caching allocator kept after their tensors were freed, and grows on an idle device
        # (CUDA-L1 h100 L2/T43 reserved 4.8 GiB in one H100 audit, 26.9 in the next)
        "judge_gpu_allocated_bytes": int(torch.cuda.max_memory_allocated()) if used else None,
    }


FAILED_BUILDS_KEPT = 3  # per row: the builds that failed, each named once


def failed_builds(compile_record: dict[str, Any]) -> list[dict[str, str]]:
    """The distinct builds that failed in a verdict's compile record (``Verdict.compile``),
    each with its first compiler error where the worker said it, at most
    ``FAILED_BUILDS_KEPT``."""
    seen: dict[str, dict[str, str]] = {}
    for paid in compile_record.get("paid") or []:
        for build in paid.get("builds") or []:
            what = str(build.get("what", "?"))
            if build.get("ok") is False and what not in seen:
                seen[what] = {"what": what, "error": str(build.get("error") or "")}
    return list(seen.values())[:FAILED_BUILDS_KEPT]


@contextlib.contextmanager
def _profiled(name: str) -> Iterator[None]:
    """A developer's switch: with ``KERNELGATE_PROFILE_JUDGES`` set to a folder, each judge
    writes a cProfile of its record there (``<record>.prof``), timed in CPU seconds of the
    judge process, which is what limits an audit's throughput on a shared host; off, this
    costs nothing. Aggregate with ``benchmarks/judge_profile.py``."""
    folder = os.environ.get(PROFILE_JUDGES_ENV)
    if not folder:
        yield
        return
    import cProfile

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        with contextlib.suppress(OSError):
            Path(folder).mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(str(Path(folder) / f"{name}.prof"))


def _main(request_path: str, result_path: str, via: str = "process") -> None:
    """Judge the record of ``request_path`` into ``result_path``; ``via`` says how this
    judge started (a fresh ``process`` or forked by the ``zygote``), kept in its row so a
    row recovered from its result file (``finished_but_unstored``) says it too."""
    die_with_audit_parent()
    become_subreaper()  # a candidate's double-forked process stays in this judge's tree
    request = json.loads(Path(request_path).read_text())
    take_code_digest(request.get("code_digest"))
    record = CorpusRecord.from_dict(request["record"])
    options = AuditOptions(**request["options"])
    launched_at = request.get("launched_at")
    started = time.time() - launched_at if isinstance(launched_at, int | float) else None
    _log_step(f"judge up {'?' if started is None else f'{started:.2f}'} s after its launch ({via})")
    cuda_wait = None  # how this judge waits for its GPU, said in its row
    if options.device != "cpu":
        why_not = block_on_device_waits()  # before this judge's first CUDA call
        cuda_wait = "block" if why_not is None else f"spin ({why_not})"
    with _profiled(work_folder_name(record.id)):
        row = judge_record(record, options, Path(result_path).parent, Path(request["scratch"]))
    if cuda_wait is not None:
        row["judge_cuda_wait"] = cuda_wait
    # seconds from the audit's launch of this judge to its first step (the imports, or the
    # zygote's fork): what a judge costs before it judges anything
    row["judge_started_s"] = None if started is None else round(started, 3)
    row["judge_via"] = via
    write_atomic(Path(result_path), json.dumps(row))  # a half-written result is never read


if __name__ == "__main__":
    try:
        _main(sys.argv[1], sys.argv[2])
    finally:
        kill_descendants()  # nothing of the record outlives its judge
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # leftover threads of a reference or candidate must not hold the judge
