"""Confinement of the worker and everything it starts, set up before candidate code runs.

Run by the judge as ``python -P .../confine.py POLICY_JSON -- WORKER_ARGV...`` (by file, not
``-m``: importing the ``kernelgate`` package would import torch, start threads and take
seconds; this module uses the standard library only). The launcher is trusted code: it
applies every mechanism it can, each detected and applied on its own, writes a report of
what holds to a descriptor only the judge reads (before the worker exists, so the candidate
cannot forge it), then runs the worker and waits for it.

Mechanisms (names as reported):

- ``user-namespace``: the others need no privilege, and a root judge's worker keeps no
  capability outside its namespaces (a uid-0 worker could otherwise load kernel modules).
- ``pid-namespace``: the worker is PID 1 of a namespace of its own; when it exits the
  kernel kills everything left in it, so no detached helper outlives the verification,
  and no process outside can be addressed by a signal or ``ptrace``.
- ``private-proc``: a fresh ``/proc`` in a private mount namespace shows only the
  namespace's processes (no ``/proc/<judge>/mem`` to open); writable, as CUDA needs, but
  for its host-wide parts (``writable_private_proc``).
- ``readonly-root``: in that mount namespace every mount is read-only but the scratch
  folder: no write, and no metadata change either (chmod, utime, xattrs, which Landlock
  does not cover); device nodes stay usable, and ``/dev/shm`` is a private tmpfs.
- ``no-network``: a network namespace with only a loopback that is down.
- ``landlock-fs``: writes only under the private scratch folder, the private ``/dev/shm``
  and ``/proc`` (where the worker has them) and to the few character devices CUDA needs;
  read and execute everywhere. Also denies ``ptrace`` of processes outside the sandbox and
  any change of the mount table.
- ``landlock-net`` (ABI >= 4): TCP bind and connect denied. A judge that starts the worker
  under compute-sanitizer lets it connect to the sanitizer's own ports (``connect_ports``):
  then ``landlock-net`` is reported missing, with those ports as the reason.
- ``landlock-signals`` (ABI >= 6): no signal to, and no abstract unix socket of, a process
  outside the sandbox.
- ``no-capabilities``: the capability bounding set is emptied, so ``execve`` grants none.
- ``rlimits``: open files, file size, no core dumps (address space is left alone: CUDA
  maps huge virtual ranges).
- ``nproc-limit``: a bound on processes against fork bombs: a pids cgroup (v1) where the
  judge may create one, else ``RLIMIT_NPROC`` where it is enforced (not for uid 0).
- ``subreaper``: the fallback without a PID namespace: the launcher adopts every orphan
  of the worker's tree and kills the whole tree when the worker ends.

Every mechanism that does not hold is reported in ``missing`` with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import resource
import signal
import site
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

# -- constants from the Linux UAPI headers (sched.h, mount.h, prctl.h, landlock.h) --------
# Where this Python finds packages installed with ``pip --user``: fixed before a worker's
# ``HOME`` moves into its scratch (``scratch_env``), so those packages stay importable there.
USER_BASE = os.environ.get("PYTHONUSERBASE") or site.getuserbase()

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SYS_MOUNT_SETATTR = 442
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MS_BIND = 4096
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
# FS_IOCTL_DEV (1 << 15, ABI 5) is deliberately never handled: CUDA drives /dev/nvidia*
# with ioctls, and reads of those devices are allowed anyway.
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

# Writes a worker makes: everything Landlock knows how to deny, read and execute excepted.
WRITE_RIGHTS_V1 = (
    FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_CHAR
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_BLOCK
    | FS_MAKE_SYM
)
# Devices a worker may open for writing: the harmless standard ones and CUDA's.
STANDARD_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_PREFIXES = ("nvidia",)  # nvidia0.., nvidiactl, nvidia-uvm, nvidia-modeset, ...
DEVICE_FOLDERS = ("nvidia-caps", "nvidia-caps-imex-channels")  # MIG and IMEX channels

MECHANISMS = (
    "user-namespace",
    "pid-namespace",
    "private-proc",
    "readonly-root",
    "no-network",
    "landlock-fs",
    "landlock-net",
    "landlock-signals",
    "no-capabilities",
    "rlimits",
    "nproc-limit",
    "private-scratch",
)
ENV_SWITCH = "KERNELGATE_ISOLATION"  # "auto" (default) or "off"
GIB = 1 << 30
SHARED_MEMORY = "/dev/shm"
PROC = "/proc"
PROC_HOST_WIDE = ("sys", "sysrq-trigger", "irq", "bus", "fs")  # stay read-only in a worker


@dataclass
class Policy:
    """What the judge asks of the launcher (passed as JSON on its command line)."""

    scratch: str  # the only writable folder; the worker's cwd
    report_fd: int = -1  # where the report goes, then closed
    skip: list[str] = field(default_factory=list)  # mechanisms not to try, e.g. after a probe
    open_files: int = 4096
    file_bytes: int = 8 * GIB  # big enough for Triton's and torch's caches
    processes: int = 4096  # threads count too (RLIMIT_NPROC and pids.max both count tasks)
    shared_memory_bytes: int = 2 * GIB  # the private /dev/shm (tmpfs: host memory)
    # TCP ports the worker may connect to (compute-sanitizer's frontend); none: no TCP
    connect_ports: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("scratch"), str):
            raise ValueError("policy must be a JSON object with a 'scratch' folder")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Report:
    """What is in force for one worker, as the launcher saw it before the worker started."""

    in_force: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    landlock_abi: int | None = None
    fallback: str | None = None  # e.g. "subreaper" when there is no PID namespace

    def hold(self, name: str) -> None:
        if name not in self.in_force:
            self.in_force.append(name)
        self.missing.pop(name, None)

    def lack(self, name: str, reason: str) -> None:
        if name in self.in_force:
            self.in_force.remove(name)
        self.missing[name] = reason

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"in_force": list(self.in_force), "missing": dict(self.missing)}
        if self.landlock_abi is not None:
            data["landlock_abi"] = self.landlock_abi
        if self.fallback:
            data["fallback"] = self.fallback
        if not any(m in self.in_force for m in MECHANISMS if m != "private-scratch"):
            data["level"] = "process-only: " + (
                "; ".join(f"{k}: {v}" for k, v in self.missing.items()) or "nothing applied"
            )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        report = cls(
            in_force=[str(m) for m in data.get("in_force", [])],
            missing={str(k): str(v) for k, v in dict(data.get("missing", {})).items()},
            landlock_abi=data.get("landlock_abi"),
            fallback=data.get("fallback"),
        )
        return report


def scratch_env(scratch: str) -> dict[str, str]:
    """Environment pointing every cache and temporary file of the worker into ``scratch``:
    no cache is shared between candidates (a poisoned Triton cache or torch extension build
    would otherwise contaminate a later candidate's judging).

    ``HOME`` too: libraries write under ``~`` without asking (CuPy compiles its kernels into
    ``~/.cupy/kernel_cache`` at load), and under the read-only root ``~`` is not writable,
    so honest CuPy candidates failed to load (CUDA-L1 h100 L2/T37, L2/T87, L3/T34 in the
    H200 audit of 2026-12-04: "Read-only file system: '/root/.cupy'"). ``PYTHONUSERBASE``
    keeps the packages a user installed under the old ``~`` importable.
    """
    return {
        "HOME": scratch,
        "PYTHONUSERBASE": USER_BASE,
        "CUPY_CACHE_DIR": os.path.join(scratch, "cupy"),
        "TMPDIR": scratch,
        "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
        "TRITON_HOME": scratch,
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
        "TORCH_EXTENSIONS_DIR": os.path.join(scratch, "torch_extensions"),
        "CUDA_CACHE_PATH": os.path.join(scratch, "cuda"),
        "XDG_CACHE_HOME": os.path.join(scratch, "cache"),
    }


def turned_off(reason: str = "turned off") -> dict[str, Any]:
    """The report of a worker started without the launcher."""
    report = Report(in_force=["private-scratch"])
    for name in MECHANISMS:
        if name != "private-scratch":
            report.lack(name, reason)
    return report.to_dict()


def summary_line(isolation: dict[str, Any] | None) -> str:
    """One console line: what held, what did not and why."""
    if not isolation:
        return "isolation: not reported"
    held = ", ".join(isolation.get("in_force", [])) or "none"
    missing = isolation.get("missing", {})
    line = f"isolation: {held}"
    if isolation.get("landlock_abi"):
        line += f" (Landlock ABI {isolation['landlock_abi']})"
    if missing:
        line += "; missing: " + "; ".join(f"{k} ({v})" for k, v in missing.items())
    return line


def weakest(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One report for several workers of a verification: in force only what held in all."""
    reports = [r for r in reports if r]
    if not reports:
        return None
    merged = Report.from_dict(reports[0])
    for other in reports[1:]:
        theirs = Report.from_dict(other)
        for name in list(merged.in_force):
            if name not in theirs.in_force:
                merged.lack(name, theirs.missing.get(name, "not in force for every worker"))
        for name, reason in theirs.missing.items():
            merged.missing.setdefault(name, reason)
        merged.fallback = merged.fallback or theirs.fallback
    return merged.to_dict()


# -- system calls ---------------------------------------------------------------------------
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _prctl(option: int, arg: int = 0) -> None:
    args = (ctypes.c_ulong(option), ctypes.c_ulong(arg), ctypes.c_ulong(0))
    _check(_libc.prctl(*args, ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl")


def _mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    result = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(result, f"mount {target}")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the UAPI struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> tuple[int, str]:
    """The kernel's Landlock ABI version (0 when unusable) and why not."""
    version = _libc.syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    if version < 0:
        code = ctypes.get_errno()
        reason = {
            errno.ENOSYS: "the kernel has no Landlock (older than 5.13)",
            errno.EOPNOTSUPP: "Landlock is disabled at boot (lsm= list)",
        }.get(code, f"Landlock unavailable: {os.strerror(code)}")
        return 0, reason
    return int(version), ""


def writable_devices(root: str = "/dev") -> list[str]:
    """Character devices the worker may open for writing (CUDA's and the standard ones)."""
    found: list[str] = []

    def add(path: str) -> None:
        with contextlib.suppress(OSError):
            if stat.S_ISCHR(os.stat(path).st_mode):
                found.append(path)

    for name in STANDARD_DEVICES:
        add(os.path.join(root, name))
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(root)):
            if name.startswith(DEVICE_PREFIXES):
                add(os.path.join(root, name))
    for folder in DEVICE_FOLDERS:
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(os.path.join(root, folder))):
                add(os.path.join(root, folder, name))
    return found


def apply_landlock(
    abi: int,
    scratch: str,
    report: Report,
    private_folders: tuple[str, ...] = (),
    connect_ports: tuple[int, ...] = (),
) -> None:
    """Restrict this thread and its future children: writes only in ``scratch``, in the
    worker's own ``private_folders`` (a fresh /dev/shm) and to the allowed devices; by ABI,
    no TCP (but connections to ``connect_ports``) and no signals or abstract sockets beyond
    the domain."""
    fs_rights = WRITE_RIGHTS_V1
    if abi >= 2:
        fs_rights |= FS_REFER
    if abi >= 3:
        fs_rights |= FS_TRUNCATE
    attr = _RulesetAttr(handled_access_fs=fs_rights)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # no rule: all denied
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET
        size = 24
    ruleset = _check(
        _libc.syscall(
            ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:
        file_rights = FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)
        folders = [(folder, fs_rights) for folder in (scratch, *private_folders)]
        for path, rights in folders + [(device, file_rights) for device in writable_devices()]:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
                _check(
                    _libc.syscall(
                        ctypes.c_long(SYS_LANDLOCK_ADD_RULE),
                        ctypes.c_int(ruleset),
                        ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    ),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(fd)
        for port in connect_ports if abi >= 4 else ():
            rule = _NetPortAttr(allowed_access=NET_CONNECT_TCP, port=port)
            _check(
                _libc.syscall(
                    ctypes.c_long(SYS_LANDLOCK_ADD_RULE),
                    ctypes.c_int(ruleset),
                    ctypes.c_int(LANDLOCK_RULE_NET_PORT),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ),
                f"landlock_add_rule tcp port {port}",
            )
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(
            _libc.syscall(
                ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF),
                ctypes.c_int(ruleset),
                ctypes.c_uint32(0),
            ),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
    report.hold("landlock-fs")
    if abi >= 4 and connect_ports:
        ports = ", ".join(str(p) for p in connect_ports)
        report.lack("landlock-net", f"TCP connect allowed to ports {ports} (bind denied)")
    elif abi >= 4:
        report.hold("landlock-net")
    else:
        report.lack("landlock-net", f"Landlock ABI {abi} < 4 has no network rules")
    if abi >= 6:
        report.hold("landlock-signals")
    else:
        report.lack("landlock-signals", f"Landlock ABI {abi} < 6 has no signal scoping")


# -- namespaces -----------------------------------------------------------------------------
def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def enter_user_namespace() -> None:
    """A user namespace mapping only our own uid and gid onto themselves: files keep their
    owners, and capabilities held inside count for nothing outside."""
    uid, gid = os.geteuid(), os.getegid()
    _unshare(CLONE_NEWUSER)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def unshare_namespaces(policy: Policy, report: Report) -> None:
    """Each namespace on its own, so one refused leaves the others in force."""
    wanted = [name for name in MECHANISMS if name not in policy.skip]
    if "user-namespace" in wanted:
        try:
            enter_user_namespace()
            report.hold("user-namespace")
        except OSError as exc:
            report.lack("user-namespace", _reason(exc))
    else:
        report.lack("user-namespace", "skipped by the judge")
    for name, flags in (("pid-namespace", CLONE_NEWPID), ("no-network", CLONE_NEWNET)):
        if name not in wanted:
            report.lack(name, "skipped by the judge")
            continue
        try:
            _unshare(flags)
            report.hold(name)
        except OSError as exc:
            report.lack(name, _reason(exc))


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _mount_setattr(path: str, attr_set: int, attr_clr: int) -> None:
    attr = _MountAttr(attr_set=attr_set, attr_clr=attr_clr)
    result = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr {path}")


def readonly_root(scratch: str) -> None:
    """Every mount of this (private) namespace read-only, then the scratch folder, made a
    mount of its own first, writable again. Device nodes stay writable on a read-only mount."""
    _mount(scratch, scratch, None, MS_BIND | MS_REC)
    _mount_setattr("/", MOUNT_ATTR_RDONLY, 0)
    _mount_setattr(scratch, 0, MOUNT_ATTR_RDONLY)
    os.chdir(scratch)  # the old working directory is the folder below the new mount


def private_shared_memory(size: int) -> str | None:
    """A fresh tmpfs over /dev/shm, seen only in the worker's mount namespace: torch's
    shared-memory tensors, its data loaders and NCCL keep files there, so a confined worker
    needs it writable (CUDA's own start, measured on the H200, needs only /proc, below),
    and a private one carries nothing between candidates and holds at most ``size`` bytes.
    None when there is no /dev/shm or it cannot be mounted (it then stays read-only)."""
    if not os.path.isdir(SHARED_MEMORY):
        return None
    try:
        _mount("tmpfs", SHARED_MEMORY, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    except OSError:
        return None
    return SHARED_MEMORY


def writable_private_proc() -> str | None:
    """The worker's own /proc made writable, but for the host-wide knobs it shows.

    Why: the CUDA driver writes files under ``/proc/self`` when it initialises (cudaGetDeviceCount
    fails with error 304, "OS call failed", when it cannot; measured on the H200), and a
    worker's pid changes with every process, so no narrower folder can be granted. Only a
    fresh /proc of the worker's PID namespace is opened up, and first the parts that reach
    the whole machine are bound read-only over themselves, as container runtimes do:
    ``/proc/sys`` (a uid-0 worker in a user namespace mapped onto itself still passes the
    sysctl permission check), ``sysrq-trigger``, ``irq``, ``bus``, ``fs``. None when any of
    that fails: /proc then stays read-only and a CUDA worker falls back to the probe."""
    try:
        _mount_setattr(PROC, 0, MOUNT_ATTR_RDONLY)
        for name in PROC_HOST_WIDE:
            path = os.path.join(PROC, name)
            if os.path.lexists(path):
                _mount(path, path, None, MS_BIND | MS_REC)
                _mount_setattr(path, MOUNT_ATTR_RDONLY, 0)
    except OSError:
        with contextlib.suppress(OSError):
            _mount_setattr(PROC, MOUNT_ATTR_RDONLY, 0)
        return None
    return PROC


def private_mounts(policy: Policy, report: Report) -> tuple[str, ...]:
    """In the worker's own mount namespace (the launcher keeps the machine's view, to clean
    up after it): a fresh /proc for its PID namespace, everything read-only but the scratch
    folder, and a private /dev/shm. Returns the private folders the worker may write."""
    mounts = []
    for name in ("private-proc", "readonly-root"):
        if name in policy.skip:
            report.lack(name, "skipped by the judge")
        elif name == "private-proc" and "pid-namespace" not in report.in_force:
            report.lack(name, "no PID namespace to show")
        else:
            mounts.append(name)
    if not mounts:
        return ()
    try:
        _unshare(CLONE_NEWNS)
        _mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing propagates to the host
    except OSError as exc:
        for name in mounts:
            report.lack(name, f"no private mount namespace: {_reason(exc)}")
        return ()
    if "private-proc" in mounts:
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            report.hold("private-proc")
        except OSError as exc:
            report.lack("private-proc", _reason(exc))
    if "readonly-root" in mounts:
        try:
            readonly_root(policy.scratch)
            report.hold("readonly-root")
        except OSError as exc:
            report.lack("readonly-root", _reason(exc))
    private = [private_shared_memory(policy.shared_memory_bytes)]
    if "private-proc" in report.in_force:
        private.append(writable_private_proc())
    return tuple(folder for folder in private if folder)


# -- resource limits ------------------------------------------------------------------------
def _lower(limit: int, value: int) -> None:
    _, hard = resource.getrlimit(limit)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(limit, (value, value))


def apply_rlimits(policy: Policy, report: Report) -> None:
    try:
        _lower(resource.RLIMIT_NOFILE, policy.open_files)
        _lower(resource.RLIMIT_FSIZE, policy.file_bytes)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        report.hold("rlimits")
    except (OSError, ValueError) as exc:
        report.lack("rlimits", _reason(exc))


PIDS_BASE = "/sys/fs/cgroup/pids"
CGROUP_PREFIX = "kernelgate-"


def pids_cgroup(policy: Policy, base: str = PIDS_BASE) -> tuple[str | None, str]:
    """A v1 pids cgroup below ours bounding the worker's tasks; (folder, why not)."""
    if not os.path.isdir(base):
        return None, "no cgroup v1 pids hierarchy (cgroup v2 delegation is not used)"
    try:
        with open("/proc/self/cgroup") as handle:
            ours = next(
                (
                    line.rstrip("\n").split(":", 2)[2]
                    for line in handle
                    if "pids" in line.split(":", 2)[1].split(",")
                ),
                "/",
            )
        parent = base + ours
        sweep_stale_cgroups(parent)
        # the pid, then a token: a launcher killed before ``remove_cgroup`` leaves its
        # folder behind, and a later launcher given the same pid must not collide with it
        # (that collision cost the worker its process bound, intermittently, in the tests)
        folder = os.path.join(parent, f"{CGROUP_PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
        os.mkdir(folder)
        _write(os.path.join(folder, "pids.max"), str(policy.processes))
        return folder, ""
    except OSError as exc:
        return None, f"cannot create a pids cgroup: {_reason(exc)}"


def sweep_stale_cgroups(parent: str) -> None:
    """Remove the empty cgroup folders that launchers killed before ``remove_cgroup`` left
    in ``parent`` (best effort). Only the folders of launchers no longer alive are touched:
    a live launcher's folder is empty between its creation and its child joining it. A
    cgroup folder with tasks in it cannot be removed (``rmdir`` refuses)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(CGROUP_PREFIX):
            continue
        owner = name[len(CGROUP_PREFIX) :].split("-", 1)[0]
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(parent, name))


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_cgroup(folder: str | None) -> None:
    if folder is None:
        return
    for _ in range(50):  # the last task leaves the cgroup a moment after it is reaped
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


# -- the process tree -----------------------------------------------------------------------
def descendants(root: int) -> list[int]:
    """Every live process below ``root``, found through the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                text = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            found.append(pid)
            stack.append(pid)
    return found


def kill_tree(root: int) -> None:
    """Kill every descendant of ``root`` (this process, a subreaper) until none is left."""
    for _ in range(200):
        pids = descendants(root)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        time.sleep(0.01)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


# -- the launcher ---------------------------------------------------------------------------
def _drop_capabilities(report: Report) -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            last = int(handle.read())
        for cap in range(last + 1):
            _prctl(PR_CAPBSET_DROP, cap)
        report.hold("no-capabilities")
    except (OSError, ValueError) as exc:
        report.lack("no-capabilities", f"bounding set not emptied: {_reason(exc)}")


# What runs once the confinement holds, in place of ``execv`` of the command: a worker
# forked from the fork server (sandbox/forkserver.py) has imported everything already.
Start = Callable[[], NoReturn]


def _in_child(
    policy: Policy,
    report: Report,
    cgroup: str | None,
    argv: list[str],
    status_fd: int,
    start: Start | None = None,
) -> None:
    """The launcher's child, PID 1 of the new namespace if there is one: finish the
    confinement, report, then run the worker (under ``_init`` in a PID namespace)."""
    os.setsid()  # off the launcher's group: a kill(0, ...) reaches only the worker's tree
    with contextlib.suppress(OSError):
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed: the namespace dies
    if cgroup is not None:
        try:
            _write(os.path.join(cgroup, "cgroup.procs"), "0")
            report.hold("nproc-limit")
        except OSError as exc:
            report.lack("nproc-limit", f"cannot join the pids cgroup: {_reason(exc)}")
    private_folders = private_mounts(policy, report)
    if "nproc-limit" in policy.skip:
        report.lack("nproc-limit", "skipped by the judge")
    elif "nproc-limit" not in report.in_force:
        reason = report.missing.get("nproc-limit", "")
        if os.getuid() != 0 and "user-namespace" in report.in_force:
            try:  # counted per (namespace, uid): only the worker's own tasks
                _lower(resource.RLIMIT_NPROC, policy.processes)
                report.hold("nproc-limit")
            except (OSError, ValueError) as exc:
                report.lack("nproc-limit", f"{reason}; RLIMIT_NPROC: {_reason(exc)}")
        else:
            report.lack(
                "nproc-limit",
                f"{reason}; RLIMIT_NPROC is not enforced for uid 0 (or without a user "
                "namespace it would count every process of the user)",
            )
    if "no-capabilities" in policy.skip:
        report.lack("no-capabilities", "skipped by the judge")
    elif os.getuid() != 0:
        report.hold("no-capabilities")  # not root: execve of the worker grants none
    else:
        _drop_capabilities(report)
    if "landlock-fs" in policy.skip:
        for name in ("landlock-fs", "landlock-net", "landlock-signals"):
            report.lack(name, "skipped by the judge")
    else:
        abi, why = landlock_abi()
        report.landlock_abi = abi or None
        if abi <= 0:
            for name in ("landlock-fs", "landlock-net", "landlock-signals"):
                report.lack(name, why)
        else:
            try:
                apply_landlock(
                    abi, policy.scratch, report, private_folders, tuple(policy.connect_ports)
                )
            except OSError as exc:
                for name in ("landlock-fs", "landlock-net", "landlock-signals"):
                    report.lack(name, _reason(exc))
    if os.path.realpath(os.getcwd()) == os.path.realpath(policy.scratch):
        report.hold("private-scratch")
    else:
        report.lack("private-scratch", f"the worker's folder is not {policy.scratch}")
    if policy.report_fd >= 0:
        with contextlib.suppress(OSError):
            os.write(policy.report_fd, (json.dumps(report.to_dict()) + "\n").encode())
        with contextlib.suppress(OSError):
            os.close(policy.report_fd)
    if "pid-namespace" in report.in_force:
        _init(argv, status_fd, start)
    _exec(argv, start)


def _exec(argv: list[str], start: Start | None = None) -> None:
    """Become the command: ``execv`` of ``argv``, or ``start()`` where one is given."""
    if start is not None:
        start()
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        os.write(2, f"kernelgate confine: cannot run {argv[0]}: {exc}\n".encode())
        os._exit(127)


def _init(argv: list[str], status_fd: int, start: Start | None = None) -> None:
    """PID 1 of the namespace: run the worker as its child, reap orphans, and pass the
    worker's wait status to the launcher. The worker is not PID 1 itself: the kernel ignores
    signals a namespace's init sends itself (``os.abort``, ``os.kill(os.getpid(), ...)``),
    which would turn a candidate's suicide into a hang."""
    worker = os.fork()
    if worker == 0:
        _exec(argv, start)
    while True:
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(127)
        if pid == worker:
            with contextlib.suppress(OSError):
                os.write(status_fd, f"{status}\n".encode())
            os._exit(0)  # the kernel now kills whatever the worker left in the namespace


def launch(policy: Policy, argv: list[str], start: Start | None = None) -> int:
    """Apply the policy, run ``argv`` confined, wait for it; returns the exit status to use
    (negative: the signal that ended the worker). ``start``: run in the confined child
    instead of ``execv`` of ``argv`` (it must never return, and must first do what
    ``execv`` would: close the descriptors marked close-on-exec)."""
    report = Report()
    apply_rlimits(policy, report)
    cgroup, cgroup_why = (None, "skipped by the judge")
    if "nproc-limit" not in policy.skip:
        cgroup, cgroup_why = pids_cgroup(policy)
    if cgroup is None:
        report.lack("nproc-limit", cgroup_why)
    unshare_namespaces(policy, report)
    if "pid-namespace" not in report.in_force:
        try:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
            report.fallback = "subreaper"
            report.hold("subreaper")
        except OSError as exc:
            report.lack("subreaper", _reason(exc))
    status_read, status_write = os.pipe()  # the worker's wait status, from ``_init``
    child = os.fork()
    if child == 0:
        try:
            os.close(status_read)
            _in_child(policy, report, cgroup, argv, status_write, start)
        finally:
            os._exit(127)
    os.close(status_write)
    if policy.report_fd >= 0:
        os.close(policy.report_fd)
    # The worker's descriptors are its own: holding them here would hide its death.
    os.closerange(3, status_read)
    os.closerange(status_read + 1, 1 << 16)

    def stop(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if report.fallback == "subreaper":
        kill_tree(os.getpid())
    remove_cgroup(cgroup)
    passed = os.read(status_read, 64).strip()
    os.close(status_read)
    if passed.isdigit():
        status = int(passed)  # the worker's own, passed on by the namespace's init
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: confine.py POLICY_JSON -- COMMAND [ARG...]\n")
        return 2
    try:
        policy = Policy.from_json(args[0])
    except (ValueError, TypeError) as exc:
        sys.stderr.write(f"kernelgate confine: bad policy: {exc}\n")
        return 2
    return end_as(launch(policy, args[2:]))


def end_as(code: int) -> int:
    """The launcher's end for ``launch``'s ``code``: a signal kills it the way it ended the
    worker, so the judge sees the same signal; an exit code is returned to exit with."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
