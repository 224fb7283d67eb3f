"""The audit's results store: SQLite in the output folder, one row per record.

Why SQLite: each row is committed in its own transaction the moment its record finishes,
so an audit killed at any instant (SIGKILL included) leaves only whole rows behind; the
record id is the primary key, so a resumed audit can neither lose nor duplicate a record.
Only the audit's main process writes; executors hand rows back to it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelgate.errors import KernelgateError
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT

STORE_NAME = "audit.sqlite"
STORE_SCHEMA = "kernelgate.audit-store/1"
# Settings that describe a store without deciding its rows: a store carried to another
# machine (where the corpus has another absolute path) still resumes.
INFORMATIONAL_SETTINGS = frozenset({"source"})
# Settings that arrived after stores were first written, as a store that lacks them reads:
# their default. An audit begun before ``--compile-timeout`` existed resumes with the
# default budget (and is refused with any other), instead of being refused outright.
SETTINGS_ADDED_LATER: dict[str, object] = {"compile_timeout": DEFAULT_COMPILE_TIMEOUT}
# How often a running audit stamps its run as alive: a run killed at a deadline (SIGKILL) has
# no end of its own, and one whose judges were all still busy has no last row either.
HEARTBEAT_SECONDS = 30.0


class ResultStore:
    """Rows keyed by record id, plus the audit's settings (to check a resume against)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None)  # explicit transactions only
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._transaction():
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS rows (id TEXT PRIMARY KEY, position INTEGER NOT NULL,"
                " finished REAL NOT NULL, data TEXT NOT NULL)"
            )
            # One line per audit process that judged into this store: when it started and
            # with what, so throughput holds across resumes (a killed run has no end time;
            # its last row's time stands in for it).
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS runs (run INTEGER PRIMARY KEY AUTOINCREMENT,"
                " started REAL NOT NULL, info TEXT NOT NULL)"
            )
            # Records deferred for memory (judged again a few at a time, then alone: after the
            # pool in the run that deferred them, before it on a resume), remembered until
            # they have a row: a resume must not send them back into the pool, where the same
            # memory pile-up would defer them again, every session.
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS alone (id TEXT PRIMARY KEY, reason TEXT NOT NULL)"
            )
            if "run" not in {c[1] for c in self._db.execute("PRAGMA table_info(rows)")}:
                self._db.execute("ALTER TABLE rows ADD COLUMN run INTEGER")  # older stores
            if "last_seen" not in {c[1] for c in self._db.execute("PRAGMA table_info(runs)")}:
                self._db.execute("ALTER TABLE runs ADD COLUMN last_seen REAL")  # older stores
        self.run: int | None = None

    @classmethod
    def open(cls, out_dir: Path, *, resume: bool, settings: dict[str, Any]) -> ResultStore:
        """Open the store of ``out_dir``: a new one, or (with ``resume``) the existing one.

        Refuses to reuse a store without ``resume`` (it would mix two audits) and to resume
        one whose settings differ (rows judged under other settings would be mixed in).
        """
        path = out_dir / STORE_NAME
        exists = path.exists()
        if exists and not resume:
            raise KernelgateError(
                f"{out_dir} already holds an audit store ({STORE_NAME}); pass --resume to "
                "continue that audit, or choose another --out folder"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        store = cls(path)
        recorded = store.settings()
        if recorded:
            recorded = SETTINGS_ADDED_LATER | recorded
        changed = sorted(
            k
            for k in (settings.keys() | recorded.keys()) - INFORMATIONAL_SETTINGS
            if settings.get(k) != recorded.get(k)
        )
        if exists and recorded and changed:
            store.close()
            raise KernelgateError(
                f"cannot resume {out_dir}: it was started with other settings "
                f"({', '.join(changed)} differ); use the same options or another --out folder"
            )
        if not recorded:
            with store._transaction():
                store._db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('settings', ?)", (json.dumps(settings),)
                )
                store._db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (json.dumps(STORE_SCHEMA),)
                )
        return store

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def settings(self) -> dict[str, Any]:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()
        return json.loads(row[0]) if row else {}

    def set_corpus(self, record_ids: list[str]) -> None:
        """The ids of every record of the corpus, in order: what a complete audit has rows for."""
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('corpus', ?)", (json.dumps(record_ids),)
            )

    def corpus_ids(self) -> list[str] | None:
        """The corpus's record ids, or None for a store written before they were kept."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'corpus'").fetchone()
        return json.loads(row[0]) if row else None

    def done_ids(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT id FROM rows")}

    def error_ids(self) -> set[str]:
        """Records whose row says the judge itself failed (``error``), not the candidate."""
        return {
            r[0]
            for r in self._db.execute(
                "SELECT id FROM rows WHERE json_extract(data, '$.verdict') = 'error'"
            )
        }

    def ids_where(self, predicate: Callable[[dict[str, Any]], bool]) -> set[str]:
        """Records whose row satisfies ``predicate``."""
        return {
            i
            for i, data in self._db.execute("SELECT id, data FROM rows")
            if predicate(json.loads(data))
        }

    def failed_ids(self, gate: str) -> set[str]:
        """Records whose row lists ``gate`` among its failed gates."""
        return {
            r[0]
            for r in self._db.execute(
                "SELECT rows.id FROM rows, json_each(rows.data, '$.failed_gates') AS failed"
                " WHERE failed.value = ?",
                (gate,),
            )
        }

    def forget(self, ids: set[str]) -> None:
        """Drop the rows of ``ids`` in one transaction, so they are judged again."""
        with self._transaction():
            self._db.executemany("DELETE FROM rows WHERE id = ?", [(i,) for i in sorted(ids)])

    def defer_alone(self, record_id: str, reason: str) -> None:
        """Remember that ``record_id`` is deferred for memory (see the ``alone`` table)."""
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO alone VALUES (?, ?)", (record_id, reason))

    def alone_ids(self) -> set[str]:
        """Records deferred for memory that have no row yet."""
        return {
            r[0]
            for r in self._db.execute("SELECT id FROM alone WHERE id NOT IN (SELECT id FROM rows)")
        }

    def begin_run(self, info: dict[str, Any]) -> None:
        """Record that an audit process starts judging into this store (see ``runs``)."""
        with self._transaction():
            cursor = self._db.execute(
                "INSERT INTO runs (started, info) VALUES (?, ?)", (time.time(), json.dumps(info))
            )
            self.run = cursor.lastrowid

    def heartbeat(self, interval: float = HEARTBEAT_SECONDS) -> RunHeartbeat:
        """A context that stamps this run's ``last_seen`` every ``interval`` seconds."""
        if self.run is None:
            raise RuntimeError("heartbeat before begin_run")
        return RunHeartbeat(self.path, self.run, interval)

    def put(self, position: int, row: dict[str, Any]) -> None:
        """Commit one finished record. A second row for the same id is refused by the key."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO rows (id, position, finished, data, run) VALUES (?, ?, ?, ?, ?)",
                (row["id"], position, time.time(), json.dumps(row), self.run),
            )
            self._db.execute("DELETE FROM alone WHERE id = ?", (row["id"],))

    def runs(self) -> list[dict[str, Any]]:
        """Each audit run: start, its settings of the moment, rows it judged, last row time.

        ``judged`` counts the rows its judges made; rows it copied from another judging of
        the same pair (``reused_from``: reuse.py) are ``reused``, never ``judged``.
        """
        out = []
        for run, started, info, last_seen in self._db.execute(
            "SELECT run, started, info, last_seen FROM runs"
        ):
            count, judged, reused, last = self._db.execute(
                "SELECT COUNT(*), SUM(json_extract(data, '$.verdict') != 'unreadable'"
                " AND json_extract(data, '$.reused_from') IS NULL),"
                " SUM(json_extract(data, '$.reused_from') IS NOT NULL),"
                " MAX(finished) FROM rows WHERE run = ?",
                (run,),
            ).fetchone()
            out.append(
                {
                    "run": run,
                    "started": started,
                    **json.loads(info),
                    "rows": count,
                    "judged": judged or 0,
                    "reused": reused or 0,
                    "last_row": last,
                    "last_seen": last_seen,
                }
            )
        return out

    def rows(self) -> list[dict[str, Any]]:
        """Every row, in corpus order."""
        return [
            json.loads(r[0]) for r in self._db.execute("SELECT data FROM rows ORDER BY position")
        ]

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM rows").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on error (sqlite3's own context manager
    does not begin a transaction in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


class RunHeartbeat:
    """Stamps ``runs.last_seen`` from a thread with its own connection (SQLite connections
    belong to one thread), at the start, every ``interval`` seconds and on exit."""

    def __init__(self, path: Path, run: int, interval: float) -> None:
        self.path, self.run, self.interval = path, run, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="kernelgate-heartbeat", daemon=True)

    def _beat(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            while True:
                db.execute("UPDATE runs SET last_seen = ? WHERE run = ?", (time.time(), self.run))
                if self._stop.is_set():  # the last stamp, made after the stop was asked
                    return
                self._stop.wait(self.interval)
        finally:
            db.close()

    def __enter__(self) -> RunHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
