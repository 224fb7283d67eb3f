"""Run hostile candidates against a real judge, each in a throwaway arena, and check what
they achieved.

One attack, start to end (``run_attack``):

1. An arena: a temporary folder with a copy of the reference, a copy standing for
   kernelgate's source, a fake audit store (its results file and another record's folder),
   a HOME for the judge (caches of later judges live there), a notes folder and the path of
   the ``--json`` evidence; a TCP and a UDP listener on 127.0.0.1.
2. The judge: ``python -m kernelgate.cli verify ... --json arena/evidence.json`` in its own
   session, so the runner survives whatever the attack does to the judge, and "judge
   crashed" is an observable exit status. It is started first and waits on its stdin, so
   its pid can be rendered into the candidate before it reads it.
3. The candidate: the attack's template rendered with the arena (``kit.Arena``).
4. After the judge returns: its exit status, printed verdict and evidence, a scan of /proc
   for the arena's marker; after ``delay`` seconds the same again, plus the canaries'
   digests, the listeners and the disk-fill targets.
5. Clean-up: every process still carrying the marker is killed (by pid, after checking the
   marker again), fill files removed, listeners closed, the arena deleted.

The attack is *held off* when no check of ``catalog.CHECKS`` failed; the findings say which
did. Nothing here assumes confinement: without it, many attacks get through, and the report
says so.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import kernelgate
from kernelgate import bytecode
from kernelgate.redteam.hostile import kit
from kernelgate.redteam.hostile.catalog import ROOT, Attack, attacks

HELD = "held off"
BREACHED = "not held off"
SKIPPED = "not run"

DELAY_S = 4.0  # after the judge returns, before the second look (detached helpers)
JUDGE_LIMIT_S = 240.0  # the runner's own bound on one judge, whatever its --timeout
GATES = ("CMP-01",)  # zeros fail it at once; RES-01 always runs and lists the incidents
HELPER_SECONDS = 20
FORK_BOUND = 1000
FILL_BOUND = 1 << 30
MEMORY_BOUND = 3 << 30
MEMORY_NEEDED = 8 << 30  # the memory attack runs only with this much available
SOURCE_STAND_IN = Path(kernelgate.__file__).resolve().parent / "verdict.py"
FLIPPED = ("verified", "narrowed")
REPORT_RE = re.compile(r"KGH-REPORT\|([0-9a-f]+)\|([a-z-]+)\|([01])\|([^|\n]*)\|")
DIGEST_RE = re.compile(r"sha256[^0-9a-f]{0,12}([0-9a-f]{64})")
MEMORY_EVENTS = ("read-judge-memory", "ptrace-judge")
LATER_JUDGE = ROOT / "later_judge.py"  # the honest candidate judged after a later_judge attack
LATER_EVENT = "later-state-changed"


@dataclass
class Report:
    """A line a hostile candidate reported (see ``kit.report``)."""

    event: str
    ok: bool
    detail: str

    def text(self) -> str:
        return f"{self.event}: {self.detail}" if self.detail else self.event


@dataclass
class AttackResult:
    """What one attack achieved, as the runner saw it."""

    name: str
    kind: str
    tries: str
    targets: list[str]
    outcome: str  # HELD / BREACHED / SKIPPED
    findings: list[str] = field(default_factory=list)  # "check: what happened"
    stopped_by: str = ""
    verdict: str | None = None  # the verdict the judge printed, if any
    judge_exit: int | None = None
    isolation: str = ""  # the evidence's environment.isolation, as text ("" if absent)
    reports: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    detail: str = ""  # why skipped, or the CPU analogue that ran

    @property
    def failed_checks(self) -> list[str]:
        return sorted({f.split(":", 1)[0] for f in self.findings})

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "tries": self.tries,
            "targets": self.targets,
            "outcome": self.outcome,
            "failed_checks": self.failed_checks,
            "findings": self.findings,
            "stopped_by": self.stopped_by,
            "verdict": self.verdict,
            "judge_exit": self.judge_exit,
            "isolation": self.isolation,
            "reports": self.reports,
            "seconds": self.seconds,
            "detail": self.detail,
        }


# -- the arena ------------------------------------------------------------------------------
@dataclass
class ArenaFiles:
    """The throwaway folder of one attack and what the runner watches in it."""

    root: Path
    arena: kit.Arena
    cwd: Path
    candidate: Path

    @property
    def canaries(self) -> dict[str, Path]:
        return {
            "reference": Path(self.arena.reference),
            "kernelgate source": Path(self.arena.source_canary),
            "audit store": Path(self.arena.store),
        }


def _free_bytes(path: Path) -> int:
    usage = shutil.disk_usage(path)
    return usage.free


def available_memory() -> int:
    """MemAvailable from /proc/meminfo (0 when unknown)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _pid_namespace() -> str:
    """The runner's PID namespace ("" when unknown: then no attack counts as confined)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def skip_reason(attack: Attack, device: str) -> str | None:
    """Why ``attack`` does not run here (None: it runs)."""
    if attack.device_only and device == "cpu" and not attack.cpu_analogue:
        return f"device-only: {attack.device_only}"
    if attack.resource == "memory" and available_memory() < MEMORY_NEEDED:
        return (
            f"only {available_memory() / 2**30:.1f} GiB of memory available; the bounded "
            f"memory attack needs {MEMORY_NEEDED >> 30} GiB to run safely"
        )
    return None


def build_arena(attack: Attack, device: str, base: Path | None = None) -> ArenaFiles:
    """A fresh arena for ``attack`` (the judge's pid is filled in by ``render``)."""
    root = Path(tempfile.mkdtemp(prefix="kgh-arena-", dir=base)).resolve()
    token = secrets.token_hex(6)
    for folder in ("cwd", "notes", "home", "tmp", "source/kernelgate", "store/records/other"):
        (root / folder).mkdir(parents=True)
    os.chmod(root / "notes", 0o777)  # a worker under another uid may still report here
    reference = root / "reference.py"
    shutil.copyfile(attack.reference_path, reference)
    source = root / "source" / "kernelgate" / SOURCE_STAND_IN.name
    shutil.copyfile(SOURCE_STAND_IN, source)
    store = root / "store"
    (store / "results.jsonl").write_text(
        json.dumps({"record": "other", "verdict": "rejected", "failed_gates": ["CMP-01"]}) + "\n"
    )
    other = store / "records" / "other" / "evidence.json"
    other.write_text(json.dumps({"verdict": "rejected", "failed_gates": ["CMP-01"]}))
    fill_bytes = 0
    if attack.resource == "disk":
        fill_bytes = min(FILL_BOUND, _free_bytes(root) // 20)
    fill_paths = [
        str(root / "cwd" / f"kgh-{token}-fill.bin"),
        str(Path(tempfile.gettempdir()) / f"kgh-{token}-fill.bin"),
    ]
    arena = kit.Arena(
        token=token,
        root=str(root),
        reference=str(reference),
        source_canary=str(source),
        store=str(store),
        store_rows=str(store / "results.jsonl"),
        other_record=str(other),
        evidence=str(root / "evidence.json"),
        notes=str(root / "notes"),
        home=str(root / "home"),
        fill_paths=fill_paths if attack.resource == "disk" else [],
        runner_pid=os.getpid(),
        runner_pgid=os.getpgid(0),
        runner_sid=os.getsid(0),
        runner_pidns=_pid_namespace(),
        fill_bytes=fill_bytes,
        memory_bytes=MEMORY_BOUND if attack.resource == "memory" else 0,
        fork_count=FORK_BOUND if attack.resource == "processes" else 0,
        helper_seconds=HELPER_SECONDS,
        device=device,
    )
    return ArenaFiles(root, arena, root / "cwd", root / "candidate.py")


def render(
    attack: Attack,
    files: ArenaFiles,
    judge_pid: int,
    ports: tuple[int, int],
    template_path: Path | None = None,
) -> None:
    """Write the candidate: the template (the attack's unless given) with the arena, now
    knowing the judge, filled in."""
    arena = kit.Arena(
        **{
            **files.arena.__dict__,
            "judge_pid": judge_pid,
            "tcp_port": ports[0],
            "udp_port": ports[1],
        }
    )
    files.arena = arena
    template_path = template_path or attack.template_path
    template = template_path.read_text()
    placeholder = f'"{kit.PLACEHOLDER}"'
    if template.count(placeholder) != 1:
        raise ValueError(f"{template_path} must hold {placeholder} exactly once")
    files.candidate.write_text(template.replace(placeholder, repr(arena.to_json())))


def digest_tree(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path`` itself), by relative name."""
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    found: dict[str, str] = {}
    if not path.exists():
        return found
    for item in sorted(path.rglob("*")):
        if item.is_file() and not item.is_symlink():
            with contextlib.suppress(OSError):
                found[str(item.relative_to(path))] = hashlib.sha256(item.read_bytes()).hexdigest()
        elif item.is_symlink():
            found[str(item.relative_to(path))] = "symlink -> " + os.readlink(item)
    return found


def tree_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What differs between two ``digest_tree`` snapshots, one phrase per file."""
    changes = [
        f"{name} changed" for name in before if name in after and before[name] != after[name]
    ]
    changes += [f"{name} removed" for name in before if name not in after]
    changes += [f"{name} created" for name in after if name not in before]
    return changes


# -- listeners ------------------------------------------------------------------------------
class Listeners:
    """A TCP and a UDP socket on 127.0.0.1 that no honest candidate talks to."""

    def __init__(self) -> None:
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.tcp.setblocking(False)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.heard: list[str] = []

    @property
    def ports(self) -> tuple[int, int]:
        return self.tcp.getsockname()[1], self.udp.getsockname()[1]

    def poll(self) -> list[str]:
        """Connections accepted and datagrams received since the last poll (kept)."""
        while True:
            try:
                connection, peer = self.tcp.accept()
            except (BlockingIOError, OSError):
                break
            with connection:
                connection.settimeout(0.5)
                data = b""
                with contextlib.suppress(OSError):
                    data = connection.recv(200)
            self.heard.append(f"TCP connection from {peer[0]}:{peer[1]} ({data[:60]!r})")
        while True:
            try:
                data, peer = self.udp.recvfrom(2048)
            except (BlockingIOError, OSError):
                break
            self.heard.append(f"UDP datagram from {peer[0]}:{peer[1]} ({data[:60]!r})")
        return self.heard

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


# -- processes ------------------------------------------------------------------------------
def _marked(pid: int, token: str, marker: str) -> str | None:
    """``pid``'s name when it carries the arena's marker (comm or environment), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
        return None  # dead, waiting to be reaped
    if comm == marker:
        return comm
    with contextlib.suppress(OSError):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"{kit.MARKER_ENV}={token}".encode() in environ:
            return comm
    return None


def marked_processes(arena: kit.Arena) -> dict[int, str]:
    """Live processes carrying the arena's marker: pid -> comm (never this process)."""
    me = os.getpid()
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            comm = _marked(int(name), arena.token, arena.marker)
            if comm is not None:
                found[int(name)] = comm
    return found


def end_marked_processes(arena: kit.Arena, rounds: int = 60) -> int:
    """SIGKILL every live process carrying the marker, until none is left; how many died."""
    killed: set[int] = set()
    quiet = 0
    for _ in range(rounds):
        found = marked_processes(arena)
        if not found:
            quiet += 1
            if quiet >= 2:
                break
            time.sleep(0.05)
            continue
        quiet = 0
        for pid in found:
            if _marked(pid, arena.token, arena.marker) is None:
                continue  # gone, or a reused pid: not ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.1)
    return len(killed)


def _describe(processes: dict[int, str]) -> str:
    names: dict[str, int] = {}
    for comm in processes.values():
        names[comm] = names.get(comm, 0) + 1
    listed = ", ".join(f"{n} x {c}" if n > 1 else c for c, n in sorted(names.items()))
    return f"{len(processes)} process(es) of the attack alive after the judge returned ({listed})"


# -- the judge ------------------------------------------------------------------------------
# The judge's process waits for one byte on stdin, so that its pid can be rendered into the
# candidate before it reads the candidate; then it becomes the real CLI (same pid).
LAUNCHER = (
    "import os, sys; sys.stdin.buffer.read(1); "
    "os.execv(sys.executable, [sys.executable, '-m', 'kernelgate.cli', *sys.argv[1:]])"
)


def start_held(
    arguments: list[str],
    render_with_pid: Callable[[int], None],
    *,
    stdout: IO[bytes],
    stderr: IO[bytes],
    cwd: Path,
    env: dict[str, str],
) -> subprocess.Popen[bytes]:
    """Start ``kernelgate ARGUMENTS`` held at its stdin (``LAUNCHER``), in a session of its
    own (a killpg from an attack stays there), let ``render_with_pid`` write the candidates
    that aim at its pid, then let it go. A render that fails kills it."""
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *arguments],
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    try:
        render_with_pid(process.pid)
    except BaseException:
        process.kill()
        process.wait()
        raise
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(b"g")
        process.stdin.close()
    return process


def kill_session(process: subprocess.Popen[bytes]) -> int:
    """SIGKILL to the session ``start_held`` gave ``process`` (whatever is left of it), and
    its exit status."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


def judge_env(files: ArenaFiles) -> dict[str, str]:
    """The runner's environment, this checkout's kernelgate first, HOME and Triton's cache in
    the arena (what a later judge in the same HOME would inherit is what the poisoning
    check watches). Python's bytecode cache stays the runner's: a shared folder outside the
    arena, which only confinement keeps a worker from writing (docs/security.md)."""
    return arena_env(Path(files.arena.home), files.root / "tmp", files.arena.token)


def arena_env(home: Path, temporary: Path, token: str) -> dict[str, str]:
    """``judge_env`` for any process the suite starts (a ``verify``, an audit): HOME,
    TMPDIR and Triton's cache in the arena, the marker ``token`` in its environment."""
    env = bytecode.child_env(dict(os.environ))  # the runner's bytecode cache, not HOME's
    src = str(Path(kernelgate.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env |= {
        "HOME": str(home),
        "TMPDIR": str(temporary),
        "TRITON_CACHE_DIR": os.path.join(home, ".triton", "cache"),
        kit.MARKER_ENV: token,
    }
    env.pop("KERNELGATE_DEBUG", None)
    return env


@dataclass
class JudgeRun:
    exit_code: int | None
    hung: bool
    stdout: str
    stderr: str
    seconds: float


def run_judge(
    attack: Attack,
    files: ArenaFiles,
    device: str,
    ports: tuple[int, int],
    limit: float,
    template_path: Path | None = None,
    evidence: str | None = None,
) -> JudgeRun:
    """Start the judge, render the candidate (the attack's, or ``template_path``) with its
    pid, let it go, wait (bounded). ``evidence``: the --json path, else the arena's."""
    arguments = ["verify", files.arena.reference, str(files.candidate), "--device", device]
    arguments += [
        "--timeout",
        f"{attack.judge_timeout:g}",
        # a hang on the first call would otherwise overflow into the default compile
        # budget (15 min): the attacks build nothing
        "--compile-timeout",
        f"{attack.judge_timeout:g}",
        "--json",
        evidence or files.arena.evidence,
    ]
    for gate in GATES:
        arguments += ["--only", gate]
    stem = files.candidate.stem
    out_path, err_path = files.root / f"{stem}.stdout", files.root / f"{stem}.stderr"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        judge = start_held(
            arguments,
            lambda pid: render(attack, files, pid, ports, template_path),
            stdout=out,
            stderr=err,
            cwd=files.cwd,
            env=judge_env(files),
        )
    hung = False
    try:
        judge.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        hung = True
        kill_session(judge)
    return JudgeRun(
        judge.returncode,
        hung,
        out_path.read_text(errors="replace"),
        err_path.read_text(errors="replace"),
        round(time.monotonic() - started, 2),
    )


# -- looking at what happened ---------------------------------------------------------------
@dataclass
class Look:
    """One look at the arena after the judge returned."""

    evidence: bytes | None
    processes: dict[int, str]
    canaries: dict[str, dict[str, str]]
    home: dict[str, str]
    fill_sizes: dict[str, int]

    @property
    def evidence_digest(self) -> str | None:
        return None if self.evidence is None else hashlib.sha256(self.evidence).hexdigest()

    @property
    def evidence_verdict(self) -> str | None:
        if self.evidence is None:
            return None
        try:
            data = json.loads(self.evidence)
        except ValueError:
            return "unreadable"
        return str(data.get("verdict")) if isinstance(data, dict) else "unreadable"


def look(files: ArenaFiles) -> Look:
    evidence_path = Path(files.arena.evidence)
    evidence = evidence_path.read_bytes() if evidence_path.is_file() else None
    sizes = {}
    for path in files.arena.fill_paths:
        with contextlib.suppress(OSError):
            sizes[path] = os.path.getsize(path)
    return Look(
        evidence,
        marked_processes(files.arena),
        {name: digest_tree(path) for name, path in files.canaries.items()},
        digest_tree(Path(files.arena.home)),
        sizes,
    )


def collect_reports(files: ArenaFiles, texts: list[str]) -> list[Report]:
    """Every report line of this arena's token: notes, the judge's output, the evidence."""
    sources = list(texts)
    for note in sorted(Path(files.arena.notes).glob("*.log")):
        with contextlib.suppress(OSError):
            sources.append(note.read_text(errors="replace"))
    seen: dict[tuple[str, bool, str], Report] = {}
    for text in sources:
        for token, event, ok, detail in REPORT_RE.findall(text):
            if token == files.arena.token:
                key = (event, ok == "1", detail.strip())
                seen.setdefault(key, Report(event, ok == "1", detail.strip()))
    return list(seen.values())


def isolation_text(evidence: bytes | None) -> str:
    """The evidence's ``environment.isolation`` as one line ("" when absent)."""
    if evidence is None:
        return ""
    try:
        environment = json.loads(evidence).get("environment", {})
    except (ValueError, AttributeError):
        return ""
    value = environment.get("isolation") if isinstance(environment, dict) else None
    if value is None:
        return ""
    if isinstance(value, dict) and isinstance(value.get("in_force"), list):
        text = ", ".join(str(v) for v in value["in_force"]) or "none"
        missing = value.get("missing")
        if isinstance(missing, dict) and missing:
            text += "; missing: " + ", ".join(str(k) for k in missing)
        return text
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            if item is True:
                parts.append(str(key))
            elif item not in (False, None, "", [], {}):
                parts.append(f"{key}: {item}")
        return ", ".join(parts)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _incidents(evidence: bytes | None) -> list[str]:
    """RES-01's incidents (kind: detail), first lines only."""
    if evidence is None:
        return []
    try:
        gates = json.loads(evidence).get("gates", [])
    except (ValueError, AttributeError):
        return []
    for gate in gates if isinstance(gates, list) else []:
        if isinstance(gate, dict) and gate.get("id") == "RES-01":
            incidents = (gate.get("evidence") or {}).get("incidents") or []
            return [
                f"{i.get('kind')}: {str(i.get('detail', '')).splitlines()[0][:160]}"
                for i in incidents
                if isinstance(i, dict) and str(i.get("detail", "")).strip()
            ]
    return []


def _printed_verdict(stdout: str) -> str | None:
    found = re.findall(r"verdict: (\w+)", stdout)
    return found[-1] if found else None


def _error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error:" in line:
            return " ".join(line.split())[:300]
    return ""


def judge_findings(
    judge: JudgeRun, first: Look, second: Look, limit: float, delay: float
) -> list[str]:
    """Failed checks about the judge itself: crash, flip, evidence (``check: detail``)."""
    findings = []
    code = judge.exit_code
    printed = _printed_verdict(judge.stdout)
    error = _error_line(judge.stderr)
    load_error = code == 2 and error.startswith("error:")
    if judge.hung:
        findings.append(f"judge-crash: the judge hung past {limit:g} s and was killed")
    elif code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
        findings.append(f"judge-crash: the judge was killed by {name}")
    elif code == 2 and not load_error:
        findings.append(f"judge-crash: the judge failed: {error or 'exit 2 without a message'}")
    elif code not in (0, 1, 2, 3):
        findings.append(f"judge-crash: the judge exited {code}")
    elif code in (0, 1, 3) and first.evidence is None:
        findings.append(f"judge-crash: the judge exited {code} without writing its evidence")
    flipped = sorted(
        {v for v in (printed, first.evidence_verdict, second.evidence_verdict) if v in FLIPPED}
    )
    if code in (0, 3) or flipped:
        findings.append(
            "verdict-flip: a wrong candidate came out "
            + (", ".join(flipped) if flipped else f"with exit code {code}")
        )
    if first.evidence_digest != second.evidence_digest:
        findings.append(
            f"evidence-rewritten: the evidence changed within {delay:g} s after the judge "
            f"returned (now: verdict {second.evidence_verdict})"
        )
    if code in (0, 1, 3) and printed and first.evidence_verdict not in (None, printed):
        findings.append(
            f"evidence-rewritten: the evidence says {first.evidence_verdict}, the judge "
            f"printed {printed}"
        )
    if (code not in (0, 1, 3) or judge.hung) and second.evidence is not None:
        findings.append(
            f"evidence-rewritten: evidence exists (verdict {second.evidence_verdict}) though "
            "the judge wrote none"
        )
    digests = DIGEST_RE.findall(judge.stdout)
    if digests and first.evidence_digest not in digests:
        findings.append("evidence-rewritten: the evidence's sha256 differs from the judge's")
    return findings


def arena_findings(
    before: Look, first: Look, second: Look, heard: list[str], reports: list[Report]
) -> list[str]:
    """Failed checks about the arena and the machine (``check: detail``)."""
    findings = []
    alive = first.processes or second.processes
    if alive:
        findings.append(f"outlived: {_describe(alive)}")
    for name, digests in before.canaries.items():
        changes = tree_changes(digests, second.canaries.get(name, {}))
        if changes:
            findings.append(f"canary-changed: {name}: {'; '.join(changes[:4])}")
    if heard:
        findings.append(f"network: {'; '.join(heard[:3])}")
    for report in reports:
        if report.ok and report.event in MEMORY_EVENTS:
            findings.append(f"judge-memory-read: {report.detail}")
    sizes = {
        p: max(first.fill_sizes.get(p, 0), second.fill_sizes.get(p, 0)) for p in first.fill_sizes
    }
    sizes |= {p: s for p, s in second.fill_sizes.items() if p not in sizes}
    filled = [f"{s >> 20} MiB in {p}" for p, s in sizes.items() if s > 0]
    if filled:
        findings.append(f"disk-filled: {'; '.join(filled)}")
    planted = tree_changes(before.home, second.home)
    if planted:
        findings.append(f"cache-poisoned: HOME of the next judge: {'; '.join(planted[:4])}")
    for report in reports:
        if report.event == "skipped-unconfined":
            findings.append(f"not-confined: skipped to protect the machine ({report.detail})")
    return findings


def stopped_by(
    attack: Attack, judge: JudgeRun, look_: Look, reports: list[Report], isolation: str
) -> str:
    """What held the attack off, from the evidence: failed attempts, incidents, isolation."""
    parts: list[str] = []
    blocked = [r.text() for r in reports if not r.ok and r.event != "skipped-unconfined"]
    parts += list(dict.fromkeys(blocked))[:3]
    # what the attack did and reported done, yet no check saw outside the worker's tree
    contained = [f"contained: {r.text()}" for r in reports if r.ok]
    parts += list(dict.fromkeys(contained))[:2]
    if judge.exit_code == 2:
        parts.append(f"load refused: {_error_line(judge.stderr)[:160]}")
    kinds = [i for i in _incidents(look_.evidence) if not i.startswith("exception:")]
    parts += list(dict.fromkeys(kinds))[:2]
    if isolation:
        parts.append(f"isolation: {isolation}")
    if not parts:
        return f"{attack.defence} (nothing got through)"
    return "; ".join(parts)


def later_judge_findings(
    attack: Attack, files: ArenaFiles, device: str, ports: tuple[int, int], limit: float
) -> tuple[list[str], list[Report]]:
    """Judge the honest ``later_judge.py`` in the attack's arena, after the attack: what a
    later judge of the same HOME and device inherits. Failed ``later-judge`` checks and the
    later candidate's reports (what it found changed)."""
    later = ArenaFiles(files.root, files.arena, files.cwd, files.root / "later_candidate.py")
    evidence = files.root / "later_evidence.json"
    judge = run_judge(attack, later, device, ports, limit, LATER_JUDGE, str(evidence))
    texts = [judge.stderr]
    with contextlib.suppress(OSError):
        texts.append(evidence.read_text(errors="replace"))
    reports = [r for r in collect_reports(later, texts) if r.event == LATER_EVENT]
    printed = _printed_verdict(judge.stdout)
    findings = []
    if printed != "verified":
        why = "; ".join(r.detail for r in reports) or _error_line(judge.stderr)
        findings.append(
            f"later-judge: an honest candidate judged next came out "
            f"{printed or f'with exit code {judge.exit_code}'}" + (f" ({why})" if why else "")
        )
    return findings, reports


# -- one attack, the suite ------------------------------------------------------------------
def run_attack(
    attack: Attack,
    device: str = "cpu",
    *,
    delay: float = DELAY_S,
    limit: float = JUDGE_LIMIT_S,
    keep: bool = False,
    after_judge: Callable[[ArenaFiles], None] | None = None,
) -> AttackResult:
    """Judge one hostile candidate in a fresh arena and check what it achieved.

    ``after_judge`` runs right after the judge returns, before the second look: a test uses
    it to play a successful attack and see the checks fail. ``keep`` leaves the arena on
    disk (its path is in ``detail``).
    """
    result = AttackResult(attack.name, attack.kind, attack.tries, list(attack.targets), SKIPPED)
    reason = skip_reason(attack, device)
    if reason:
        result.detail = reason
        return result
    if attack.device_only and device == "cpu":
        result.detail = f"CPU analogue: {attack.cpu_analogue}"
    started = time.monotonic()
    files = build_arena(attack, device)
    listeners = Listeners()
    try:
        files.candidate.write_text("")  # rendered once the judge's pid is known
        before = Look(
            None,
            {},
            {name: digest_tree(path) for name, path in files.canaries.items()},
            digest_tree(Path(files.arena.home)),
            {},
        )
        judge = run_judge(attack, files, device, listeners.ports, limit)
        ended = time.monotonic()
        first = look(files)
        if after_judge is not None:
            after_judge(files)
        time.sleep(max(0.0, delay - (time.monotonic() - ended)))
        second = look(files)
        heard = listeners.poll()
        evidence_texts = [
            e.decode(errors="replace") for e in (first.evidence, second.evidence) if e
        ]
        # not stdout: its tables wrap report lines (the evidence holds them whole)
        reports = collect_reports(files, [judge.stderr, *evidence_texts])
        result.isolation = isolation_text(first.evidence or second.evidence)
        result.findings = judge_findings(judge, first, second, limit, delay)
        result.findings += arena_findings(before, first, second, heard, reports)
        if attack.later_judge:
            later, later_reports = later_judge_findings(
                attack, files, device, listeners.ports, limit
            )
            result.findings += later
            reports += later_reports
        result.verdict = _printed_verdict(judge.stdout)
        result.judge_exit = judge.exit_code
        result.reports = [r.__dict__ for r in reports]
        result.outcome = BREACHED if result.findings else HELD
        result.stopped_by = (
            "not stopped"
            if result.findings
            else stopped_by(attack, judge, first, reports, result.isolation)
        )
    finally:
        end_marked_processes(files.arena)
        for path in files.arena.fill_paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        listeners.close()
        if keep:
            result.detail = (result.detail + "; " if result.detail else "") + f"arena {files.root}"
        else:
            shutil.rmtree(files.root, ignore_errors=True)
    result.seconds = round(time.monotonic() - started, 2)
    return result


@dataclass
class HostileSuite:
    """Every attack's result and the one question: was every attack held off?"""

    device: str
    results: list[AttackResult]
    seconds: float = 0.0

    @property
    def breached(self) -> list[AttackResult]:
        return [r for r in self.results if r.outcome == BREACHED]

    @property
    def ok(self) -> bool:
        """No verdict flip, no judge crash, nothing outlived, canaries intact: every attack
        that ran was held off (a skipped one is listed, not counted either way)."""
        return not self.breached and any(r.outcome == HELD for r in self.results)

    def counts(self) -> dict[str, int]:
        return {
            outcome: sum(r.outcome == outcome for r in self.results)
            for outcome in (HELD, BREACHED, SKIPPED)
        }

    def to_dict(self) -> dict[str, Any]:
        from kernelgate.verdict import environment

        flips = sum("verdict-flip" in r.failed_checks for r in self.results)
        crashes = sum("judge-crash" in r.failed_checks for r in self.results)
        return {
            "schema": "kernelgate.hostile/1",
            "device": self.device,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "environment": environment(self.device, self.device),
            "ok": self.ok,
            "counts": self.counts(),
            "verdict_flips": flips,
            "judge_crashes": crashes,
            "attacks": [r.to_dict() for r in self.results],
            "seconds": self.seconds,
        }


def run_suite(
    device: str = "cpu",
    only: list[str] | None = None,
    *,
    jobs: int = 2,
    delay: float = DELAY_S,
    on_result: Callable[[AttackResult], None] | None = None,
) -> HostileSuite:
    """Run the selected attacks, ``jobs`` at a time (each judge is a subprocess; threads
    only wait), and keep the catalog's order in the result."""
    started = time.monotonic()
    selected = attacks(only)
    done: dict[str, AttackResult] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_attack, a, device, delay=delay): a for a in selected}
        for future in as_completed(futures):
            attack = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # the runner's own failure: say so, go on
                result = AttackResult(
                    attack.name,
                    attack.kind,
                    attack.tries,
                    list(attack.targets),
                    BREACHED,
                    findings=[f"runner-error: the runner could not judge it: {exc}"],
                    stopped_by="not stopped",
                )
            done[attack.name] = result
            if on_result is not None:
                on_result(result)
    return HostileSuite(
        device, [done[a.name] for a in selected], round(time.monotonic() - started, 2)
    )
