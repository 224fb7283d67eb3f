"""A host-memory guard for judges that share one machine.

Several large records judged at once can fill the host's memory. Linux's OOM killer acts
only at the very end, after the kernel may have spent minutes evicting the pages of every
process's code and reading them back (on the H200 host, with 125 of 128 GiB in use, judges
sat in one gate for many minutes with the GPU idle, which is what that looks like). The
guard acts earlier. While more than one judge runs, it watches the memory the kernel says
is available and, when that falls below a reserve, stops the judge whose processes hold the
most (SIGKILL to its whole tree). That judge's record is judged again with fewer beside it,
as for any memory failure, and its finished gates are kept in its journal; alone, a judge
is never stopped by the guard.

Some virtual machines (the device's Firecracker VMs) show only part of their memory in
``MemTotal`` and add more as it is used, so ``MemAvailable`` there is no measure of what is
left. Given the host's real memory (``--host-memory``), the guard counts what is left as that
less what is in use (``MemTotal - MemAvailable``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from kernelgate.audit.processes import children_map, kill_tree

GIB = 1 << 30
RESERVE_FLOOR = 4 * GIB  # the guard stops a judge when less than this is available ...
RESERVE_SHARE = 0.08  # ... or less than this share of the host's memory, whichever is more
POLL_SECONDS = 1.0
SETTLE_SECONDS = 10.0  # after a stop, time for the memory to come back before another


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes ({} where there is none: the guard then does nothing)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    values: dict[str, int] = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values


def tree_rss(pid: int, children: dict[int, list[int]]) -> int:
    """Resident bytes of ``pid`` and its descendants (the judge, its worker, its old check)."""
    total, queue = 0, [pid]
    while queue:
        current = queue.pop()
        try:
            pages = int(Path(f"/proc/{current}/statm").read_text().split()[1])
            total += pages * 4096
        except (OSError, ValueError, IndexError):
            pass
        queue.extend(children.get(current, []))
    return total


class HostMemoryGuard:
    """Stops the largest of several running judges when the host's memory runs low.

    ``host_memory`` is the host's memory in bytes where ``MemTotal`` does not show all of it
    (None: ``MemTotal``); ``meminfo`` reads the host (tests give their own). Judges are
    registered by pid for as long as they run; ``stopped(pid)`` tells the caller that a
    dead judge was the guard's doing, and why.
    """

    def __init__(
        self,
        host_memory: int | None = None,
        meminfo: Callable[[], dict[str, int]] = meminfo,
    ) -> None:
        self.host_memory = host_memory
        self._meminfo = meminfo
        self._judges: set[int] = set()  # pids of the judges running now
        self._stopped: dict[int, str] = {}
        self.history: list[str] = []  # every stop's reason, in order
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_stop = 0.0

    def memory(self) -> tuple[int, int] | None:
        """(available, total) bytes of the host now; None where it cannot be read."""
        info = self._meminfo()
        shown, available = info.get("MemTotal"), info.get("MemAvailable")
        if not shown or available is None:
            return None
        if self.host_memory is None:
            return available, shown
        total = max(self.host_memory, shown)
        return total - (shown - available), total

    @staticmethod
    def reserve(total: int) -> int:
        return max(RESERVE_FLOOR, int(RESERVE_SHARE * total))

    def register(self, pid: int) -> None:
        with self._lock:
            self._judges.add(pid)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="kernelgate-memory-guard", daemon=True
                )
                self._thread.start()

    def unregister(self, pid: int) -> None:
        with self._lock:
            self._judges.discard(pid)

    def stopped(self, pid: int) -> str | None:
        """Why the guard stopped judge ``pid``, or None if it did not."""
        with self._lock:
            return self._stopped.pop(pid, None)

    def check(self) -> int | None:
        """One look: stop the largest judge if memory is low and others run; its pid."""
        with self._lock:
            judges = list(self._judges)
            settled = time.monotonic() - self._last_stop >= SETTLE_SECONDS
        if len(judges) < 2 or not settled:
            return None
        memory = self.memory()
        if memory is None:
            return None
        available, total = memory
        if available >= self.reserve(total):
            return None
        children = children_map()
        held_by = {pid: tree_rss(pid, children) for pid in judges}
        largest = max(held_by, key=held_by.__getitem__)
        held = held_by[largest]
        with self._lock:
            if largest not in self._judges:
                return None  # it finished meanwhile
            reason = self._stopped[largest] = (
                f"stopped by the audit's host-memory guard: {available / GIB:.1f} GiB of "
                f"{total / GIB:.0f} GiB available (reserve {self.reserve(total) / GIB:.1f} GiB) "
                f"with {len(judges)} judges running; this one held {held / GIB:.1f} GiB"
            )
            self.history.append(reason)
            self._last_stop = time.monotonic()
        kill_tree(largest)
        return largest

    def _watch(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            self.check()


_shared: HostMemoryGuard | None = None
_shared_lock = threading.Lock()


def shared_guard() -> HostMemoryGuard:
    """The one guard of this audit process: pools that run side by side share it, so it
    sees every judge on the machine."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = HostMemoryGuard()
        return _shared


def set_host_memory(host_memory: int | None) -> None:
    """Tell the shared guard the host's real memory (``--host-memory``; None: MemTotal)."""
    shared_guard().host_memory = host_memory
