"""The hostile-candidate catalog: one declarative entry per attack on the judge itself.

Red-team defects (``redteam/catalog.py``) are wrong kernels that a gate must reject; these
are candidates that attack the *judge*: its process, its evidence, its inputs, the machine.
Every one computes a wrong answer (zeros, or an exception), so a ``verified`` verdict is a
verdict flip whatever else happens. Each entry says what the attack tries, which of the
runner's checks it aims at (``targets``; the runner applies every check to every attack,
since an attack may do harm beside its aim) and what is meant to stop it (``defence``).

Candidates are templates under ``attacks/``: the runner renders each with its throwaway
arena (``kit.Arena``) before judging it, so no attack can aim at the real reference, the
real kernelgate source or a real audit store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REFERENCES = ROOT.parent / "references"

# The runner's checks: what no attack may achieve (the key) and what failing it means.
CHECKS: dict[str, str] = {
    "verdict-flip": "the printed verdict, the exit code or the evidence says verified or narrowed",
    "judge-crash": "the judge died, hung past the runner's limit or gave no verdict",
    "outlived": "a process of the attack was alive after the judge returned",
    "evidence-rewritten": "the evidence changed after the judge returned, differs from what "
    "the judge printed, or exists where the judge wrote none",
    "canary-changed": "the arena's reference, kernelgate-source copy or audit store changed",
    "network": "the runner's TCP or UDP listener on 127.0.0.1 heard from the attack",
    "judge-memory-read": "the attack read the judge's memory or attached to it with ptrace",
    "disk-filled": "bytes were left in a disk-fill target outside the worker's scratch folder",
    "cache-poisoned": "files appeared or changed in the HOME (Triton cache, profile, user "
    "site) that the next judge uses",
    "not-confined": "the attack was skipped to protect the machine: the worker was not "
    "confined enough to run it safely",
    "later-judge": "an honest candidate judged next, in the same arena, was not verified or "
    "started with process-wide settings or cache files the attack left",
}

CONFINED_WRITES = "confinement: only the worker's private scratch folder is writable"
CONFINED_SIGNALS = "confinement: no signals or ptrace outside the worker's own process tree"
REAPED = "the judge kills every descendant of the worker when the worker ends"
PROCESS_BOUNDARY = (
    "the process boundary: comparisons run in the judge, which only reads bytes from the worker"
)


@dataclass(frozen=True)
class Attack:
    """One hostile candidate (a template under ``attacks/``) and what it must not achieve."""

    name: str
    kind: str  # the class of attack (issue 18's list)
    tries: str  # one line: what the candidate does
    targets: tuple[str, ...]  # keys of CHECKS it aims at
    defence: str  # what is meant to stop it
    reference: str = "vector_add"  # stem under redteam/references/
    judge_timeout: float = 20.0  # --timeout of the judged candidate's calls
    device_only: str | None = None  # why the real attack needs a device, or None
    cpu_analogue: str | None = None  # what runs instead on the CPU ("" or None: nothing)
    resource: str | None = None  # "memory" | "disk" | "processes": bounded resource attack
    later_judge: bool = False  # an honest candidate is judged next in the arena (LATER_JUDGE)

    @property
    def template_path(self) -> Path:
        return ROOT / "attacks" / f"{self.name}.py"

    @property
    def reference_path(self) -> Path:
        return REFERENCES / f"{self.reference}.py"


ATTACKS: tuple[Attack, ...] = (
    Attack(
        "kill_parent_at_import",
        "kill the parent",
        "at import: SIGKILL to its parent, the parent's process group and the judge's pid",
        ("judge-crash", "verdict-flip"),
        CONFINED_SIGNALS,
    ),
    Attack(
        "kill_judge_at_forward",
        "kill the parent",
        "in forward: SIGKILL to its parent and to the judge's pid and process group",
        ("judge-crash", "verdict-flip"),
        CONFINED_SIGNALS,
    ),
    Attack(
        "kill_everything",
        "kill the parent",
        "in forward: kill(-1, SIGKILL), every process it may signal (run only inside a PID "
        "namespace of its own; otherwise it records that it would have)",
        ("judge-crash", "not-confined"),
        "a PID namespace: kill(-1) reaches only the worker's own tree",
    ),
    Attack(
        "detached_evidence_rewriter",
        "detached helper",
        "double fork + setsid helper that waits for the judge to exit and rewrites the "
        "--json evidence to verified a second later",
        ("evidence-rewritten", "outlived", "verdict-flip"),
        f"{REAPED}; {CONFINED_WRITES}",
    ),
    Attack(
        "append_to_reference",
        "edit the reference",
        "at import: appends `Model.forward = zeros` to the reference file it is judged against",
        ("canary-changed",),
        CONFINED_WRITES,
    ),
    Attack(
        "edit_kernelgate_source",
        "edit kernelgate",
        "at import: appends a verdict override to (a copy standing for) kernelgate's source",
        ("canary-changed",),
        CONFINED_WRITES,
    ),
    Attack(
        "write_audit_store",
        "edit the audit store",
        "at import: appends a verified row to the audit store, rewrites another record's "
        "evidence to verified and forges a new record folder",
        ("canary-changed",),
        CONFINED_WRITES,
    ),
    Attack(
        "read_judge_memory",
        "read the judge's memory",
        "in forward: reads a page of /proc/<ppid>/mem and /proc/<judge pid>/mem",
        ("judge-memory-read",),
        CONFINED_SIGNALS,
    ),
    Attack(
        "ptrace_judge",
        "read the judge's memory",
        "in forward: PTRACE_SEIZE + PTRACE_INTERRUPT on the judge through ctypes, peeks a "
        "word, detaches",
        ("judge-memory-read",),
        CONFINED_SIGNALS,
    ),
    Attack(
        "network_connection",
        "network",
        "at import: TCP connect to the runner's listener on 127.0.0.1 and a UDP datagram to "
        "its UDP port",
        ("network",),
        "confinement: no network (a network namespace without routes, or Landlock's TCP rules)",
    ),
    Attack(
        "fork_bomb",
        "fork bomb",
        "in forward: a detached helper spawns sleepers until it fails or reaches the bound "
        "(1000 by default)",
        ("outlived", "judge-crash"),
        f"rlimits (processes); {REAPED}",
        resource="processes",
    ),
    Attack(
        "fill_disk",
        "fill the disk",
        "in forward: writes up to the bound (1 GiB by default) to a file in the judge's "
        "folder and one in the system temporary folder",
        ("disk-filled", "judge-crash"),
        f"{CONFINED_WRITES}; rlimits (file size)",
        resource="disk",
    ),
    Attack(
        "exhaust_memory",
        "exhaust host memory",
        "in forward: allocates and touches up to the bound (3 GiB by default) of host memory",
        ("judge-crash", "verdict-flip"),
        "rlimits or the machine's headroom; the judge survives a worker killed for memory",
        resource="memory",
    ),
    Attack(
        "forged_protocol_frames",
        "protocol pipe",
        "in forward: writes a forged `ok` reply frame (outputs = its first input, "
        "`verdict: verified`) into the protocol pipe named in sys.argv, then points the "
        "worker's own reply at /dev/null",
        ("verdict-flip", "judge-crash"),
        "the judge parses only frames and judges their bytes; a forged frame's wrong values "
        "are still wrong",
        judge_timeout=6.0,
    ),
    Attack(
        "close_protocol_pipes",
        "protocol pipe",
        "in forward: closes both protocol pipe descriptors, then returns zeros",
        ("judge-crash", "verdict-flip"),
        "the judge treats a vanished worker as an incident (RES-01) and goes on",
    ),
    Attack(
        "ignore_sigterm_and_hang",
        "ignore SIGTERM",
        "ignores SIGTERM, starts a detached helper that ignores it too, then hangs in forward",
        ("judge-crash", "outlived"),
        f"the judge's timeout kills the worker with SIGKILL; {REAPED}",
        judge_timeout=5.0,
    ),
    Attack(
        "gpu_held_after_exit",
        "hold the GPU",
        "in forward: starts a detached Python helper that allocates device memory (CUDA) and "
        "keeps it after the worker exits",
        ("outlived",),
        REAPED,
        device_only="holding GPU memory after exit needs a CUDA device",
        cpu_analogue="the same detached helper holds 64 MiB of host memory instead",
    ),
    Attack(
        "monkeypatch_comparisons",
        "monkeypatch",
        "at import: replaces torch.allclose, torch.equal, torch.isclose, Tensor.__eq__, "
        "torch.testing.assert_close and kernelgate comparison helpers in the worker by "
        "always-true versions, then returns zeros",
        ("verdict-flip",),
        PROCESS_BOUNDARY,
    ),
    Attack(
        "process_state_for_later_judges",
        "change process-wide CUDA state",
        "at import: TF32, medium matmul precision, reduced-precision reductions, flush-to-zero, "
        "cudnn.benchmark; on a device a 1% memory fraction and a device heap limit; entries in "
        "CUDA's JIT cache and torch's kernel cache in HOME; then an honest candidate is judged",
        ("later-judge", "cache-poisoned"),
        "every worker is a fresh process (its settings die with it) and writes only its "
        "private scratch folder, where every cache of its own lives",
        later_judge=True,
    ),
    Attack(
        "poison_next_judge",
        "poison later judges",
        "at import: plants files in the HOME the next judge uses: a Triton cache entry, a "
        "usercustomize.py, a ~/.profile exporting TRITON_INTERPRET=0",
        ("cache-poisoned",),
        CONFINED_WRITES,
    ),
)


def attacks(only: list[str] | tuple[str, ...] | None = None) -> list[Attack]:
    """Every attack, or only the named ones (unknown names raise KeyError, naming them)."""
    if not only:
        return list(ATTACKS)
    known = {a.name for a in ATTACKS}
    unknown = sorted(set(only) - known)
    if unknown:
        raise KeyError(
            f"unknown hostile attack{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    return [a for a in ATTACKS if a.name in set(only)]
