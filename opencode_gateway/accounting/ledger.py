"""The ledger: one SQLite file with a row per run and a row per request.

A request's row is committed as soon as the request ends, so killing the process mid-run loses
no finished request. Writes go through one worker thread that owns the write connection, so the
endpoint's event loop never waits on the disk; request rows that queue up while it writes go in
together, in one transaction (a commit per row was a sixth of the relay's CPU at 500 requests/s).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..errors import LedgerError
from .budget import Spent
from .records import RequestRecord, RunUsage

__all__ = ["SCHEMA_VERSION", "Ledger", "RunLedger", "connect", "finished_values", "this_process"]

T = TypeVar("T")

# Each entry migrates a ledger from the version before it; PRAGMA user_version says where a file is.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        session_id TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        model TEXT NOT NULL,
        mode TEXT NOT NULL,
        workdir TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        tags TEXT NOT NULL DEFAULT '[]',
        stop_reason TEXT,
        error TEXT,
        requests INTEGER,
        input_tokens INTEGER,
        output_tokens INTEGER,
        cache_read_tokens INTEGER,
        cache_write_tokens INTEGER,
        reasoning_tokens INTEGER,
        cost REAL,
        unpriced_requests INTEGER
    );
    CREATE TABLE requests (
        request_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        session_id TEXT,
        response_id TEXT,
        model TEXT NOT NULL,
        upstream_model TEXT,
        status_code INTEGER NOT NULL,
        stream INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        reasoning_tokens INTEGER NOT NULL DEFAULT 0,
        usage_missing INTEGER NOT NULL DEFAULT 0,
        estimated INTEGER NOT NULL DEFAULT 0,
        cost REAL,
        cost_source TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 1,
        error TEXT,
        started_at REAL NOT NULL,
        ttfb_s REAL,
        duration_s REAL NOT NULL
    );
    CREATE INDEX requests_by_run ON requests(run_id);
    CREATE INDEX requests_by_time ON requests(started_at);
    """,
    # The process that runs the run (host:pid:start time): a run whose process is gone is abandoned.
    "ALTER TABLE runs ADD COLUMN owner TEXT",
    # What a request was for: main, title, summary, compaction (NULL in older rows: main).
    "ALTER TABLE requests ADD COLUMN purpose TEXT",
    # What prompt caching saved (pricing.Cost.cache_saved; NULL: no price known, or an older row).
    "ALTER TABLE requests ADD COLUMN cache_saved REAL",
)
SCHEMA_VERSION = len(_MIGRATIONS)


def _ledger_error(path: Path, exc: sqlite3.Error) -> LedgerError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return LedgerError(f"ledger {path} is locked by another process; wait for it or pass --ledger PATH")
    if "not a database" in text or "malformed" in text:
        return LedgerError(f"ledger {path} is not a readable SQLite database (corrupt?): move it away or "
                           "pass --ledger PATH")
    return LedgerError(f"ledger {path}: {text}")


def _create_private(path: Path) -> None:
    """The ledger's folder (0700) and file (0600), if they do not exist yet: it names every ticket,
    workdir and error. SQLite gives its -wal and -shm files the database file's mode."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))


def _use_wal(connection: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL once. The switch takes an exclusive lock without waiting for it (SQLite
    calls no busy handler there), so when many processes open a fresh file at once, retry."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _migrate(connection: sqlite3.Connection) -> None:
    """Bring the schema up to date under an exclusive lock: of many processes opening a fresh
    ledger at once, one migrates and the others then find it done."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        for number in range(version, SCHEMA_VERSION):
            for statement in filter(str.strip, _MIGRATIONS[number].split(";")):
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version={max(version, SCHEMA_VERSION)}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def this_process() -> str:
    """host:pid:start time, which names one process even after its pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # field 22, counted after the command name


def _gone(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not started:
        return False  # another machine's run, or no way to tell: leave it as it is
    return _start_time(int(pid)) != started


def _mark_abandoned(connection: sqlite3.Connection) -> None:
    """Close the rows of runs whose process is gone (killed, or its machine rebooted): they end
    as `abandoned`, with the totals of the requests they recorded."""
    open_runs = connection.execute("SELECT run_id, owner FROM runs WHERE ended_at IS NULL AND owner IS NOT NULL")
    for run_id in [row[0] for row in open_runs.fetchall() if _gone(row[1])]:
        _abandon(connection, run_id)


def _abandon(connection: sqlite3.Connection, run_id: str) -> None:
    """Close an open run's row as `abandoned`, with the totals of the requests it recorded."""
    connection.execute(
        "UPDATE runs SET ended_at = COALESCE((SELECT MAX(started_at + duration_s) FROM requests "
        "WHERE run_id = runs.run_id), started_at), stop_reason = 'abandoned', "
        "error = 'the process running it ended without closing it (killed?)', "
        + ", ".join(f"{column} = (SELECT {total} FROM requests WHERE run_id = runs.run_id)"
                    for column, total in _RUN_TOTALS.items())
        + " WHERE run_id = ? AND ended_at IS NULL", (run_id,))


_RUN_TOTALS = {
    "requests": "COUNT(*)", "input_tokens": "SUM(input_tokens)", "output_tokens": "SUM(output_tokens)",
    "cache_read_tokens": "SUM(cache_read_tokens)", "cache_write_tokens": "SUM(cache_write_tokens)",
    "reasoning_tokens": "SUM(reasoning_tokens)", "cost": "SUM(cost)", "unpriced_requests": "SUM(cost IS NULL)",
}


def connect(path: Path, *, create: bool = True, timeout: float = 5.0) -> sqlite3.Connection:
    """An open connection to a ledger of the current schema (an older one is migrated), with
    abandoned runs closed; LedgerError says what is wrong with the file otherwise. Readers (report,
    doctor) pass `create=False`: a ledger that does not exist is an error, not a new file."""
    try:
        if create:
            _create_private(path)
        elif not path.exists():
            raise LedgerError(f"no ledger at {path}: runs write one there (or pass --ledger PATH)")
        connection = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        connection.row_factory = sqlite3.Row
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            connection.close()
            raise LedgerError(f"ledger {path} has schema version {version}, newer than this opencode-gateway "
                              f"knows ({SCHEMA_VERSION}): upgrade opencode-gateway")
        if create or version < SCHEMA_VERSION:
            _use_wal(connection, timeout)
            connection.execute("PRAGMA synchronous=NORMAL")
            if version < SCHEMA_VERSION:
                _migrate(connection)
        try:
            _mark_abandoned(connection)
        except sqlite3.OperationalError:
            if create:  # a reader (report) may lack write access; the next run closes them
                raise
        return connection
    except sqlite3.Error as exc:
        raise _ledger_error(path, exc) from exc
    except OSError as exc:
        raise LedgerError(f"ledger {path}: {exc.strerror}") from exc


def finished_values(path: Path, key: str, where: Mapping[str, str]) -> set[str]:
    """The values of metadata `key` among the runs that finished (stop_reason "done") and whose
    metadata holds every `where` pair. An absent ledger has none."""
    if not path.exists():
        return set()
    conditions = "".join(" AND json_extract(metadata, ?) = ?" for _ in where)
    parameters = [f'$."{key}"', *(p for name, value in where.items() for p in (f'$."{name}"', value))]
    connection = connect(path, create=False)
    try:
        rows = connection.execute(f"SELECT DISTINCT json_extract(metadata, ?) FROM runs WHERE stop_reason = 'done'"
                                  f"{conditions}", parameters).fetchall()
    except sqlite3.Error as exc:
        raise _ledger_error(path, exc) from exc
    finally:
        connection.close()
    return {str(row[0]) for row in rows if row[0] is not None}


# A request's row, column by column (the order record_request writes them in).
_REQUEST_COLUMNS = ("request_id", "run_id", "session_id", "response_id", "model", "upstream_model", "status_code",
                    "stream", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                    "reasoning_tokens", "usage_missing", "estimated", "cost", "cost_source", "attempts", "error",
                    "started_at", "ttfb_s", "duration_s", "purpose", "cache_saved")
_INSERT_REQUEST = (f"INSERT INTO requests ({', '.join(_REQUEST_COLUMNS)}) "
                   f"VALUES ({', '.join('?' * len(_REQUEST_COLUMNS))})")


class RunLedger(Protocol):
    """What a run's account writes to: the Ledger, or a channel to one in another process."""

    def start_run(self, *, run_id: str, started_at: float, model: str, mode: str, workdir: str,
                  metadata: Mapping[str, Any], tags: Sequence[str], session_id: str | None) -> None: ...

    def record_request(self, run_id: str, record: RequestRecord) -> None: ...

    def update_run(self, *, run_id: str, ended_at: float | None, session_id: str | None, stop_reason: str | None,
                   error: str | None, usage: RunUsage, cost: float | None, unpriced: int) -> None: ...

    def flush(self) -> None: ...

    @property
    def failure(self) -> LedgerError | None: ...


class Ledger:
    """The write side. `record_request` never blocks; `close` waits for what is queued. Only the
    one worker thread uses the connection after it is opened."""

    def __init__(self, path: Path, *, timeout: float = 5.0) -> None:
        self.path = path
        self._connection = connect(path, timeout=timeout)  # here, so a bad file fails before the run starts
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._failure: LedgerError | None = None
        self._rows: list[tuple[Any, ...]] = []  # request rows not yet handed to the writer
        self._rows_lock = threading.Lock()

    def _write(self, sql: str, parameters: Sequence[Any]) -> None:
        try:
            self._connection.execute(sql, parameters)
        except sqlite3.Error as exc:
            self._failure = self._failure or _ledger_error(self.path, exc)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self._executor.submit(fn, *args)

    def start_run(self, *, run_id: str, started_at: float, model: str, mode: str, workdir: str,
                  metadata: Mapping[str, Any], tags: Sequence[str], session_id: str | None,
                  owner: str | None = None) -> None:
        """A run's row. `owner` is the process running it (host:pid:start time), this one's unless
        the run is another's (a batch task's on a Ray worker)."""
        self._submit(self._write, "INSERT INTO runs (run_id, session_id, started_at, model, mode, workdir, metadata, "
                     "tags, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (run_id, session_id, started_at, model, mode, workdir, json.dumps(dict(metadata)),
                      json.dumps(list(tags)), owner or this_process())).result()
        self.raise_failure()

    def record_request(self, run_id: str, record: RequestRecord) -> None:
        usage = record.usage
        row = (record.request_id, run_id, record.session_id, record.response_id, record.model, record.upstream_model,
               record.status_code, int(record.stream), usage.input_tokens if usage else 0,
               usage.output_tokens if usage else 0, usage.cache_read_tokens if usage else 0,
               usage.cache_write_tokens if usage else 0, usage.reasoning_tokens if usage else 0,
               int(record.usage_missing), int(record.estimated), record.cost.usd, record.cost.source, record.attempts,
               record.error, record.started_at, record.ttfb_s, record.duration_s, record.purpose,
               record.cost.cache_saved)
        with self._rows_lock:
            self._rows.append(row)
            first = len(self._rows) == 1
        if first:  # one write job takes every row queued until it runs
            self._submit(self._write_rows)

    def _write_rows(self) -> None:
        with self._rows_lock:
            rows, self._rows = self._rows, []
        try:
            with self._connection:  # one transaction
                self._connection.execute("BEGIN")
                self._connection.executemany(_INSERT_REQUEST, rows)
        except sqlite3.Error:  # rolled back: row by row, so one bad row loses no other
            for row in rows:
                self._write(_INSERT_REQUEST, row)

    def update_run(self, *, run_id: str, ended_at: float | None, session_id: str | None, stop_reason: str | None,
                   error: str | None, usage: RunUsage, cost: float | None, unpriced: int) -> None:
        """A run's totals and, once it has ended, when and how (`ended_at`, `stop_reason`); never blocks."""
        self._submit(self._write, "UPDATE runs SET ended_at=?, session_id=COALESCE(?, session_id), stop_reason=?, "
                     "error=?, requests=?, input_tokens=?, output_tokens=?, cache_read_tokens=?, cache_write_tokens=?,"
                     " reasoning_tokens=?, cost=?, unpriced_requests=? WHERE run_id=?",
                     (ended_at, session_id, stop_reason, error, usage.requests, usage.input_tokens,
                      usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens,
                      cost, unpriced, run_id))

    def spent_since(self, key: str, value: str, since: float) -> Future[Spent]:
        """What the runs whose metadata `key` is `value` spent since `since`, as committed so far
        (asked on the writer's thread, so every row queued before is counted)."""
        return self._submit(self._spent_since, key, value, since)

    def _spent_since(self, key: str, value: str, since: float) -> Spent:
        row = self._connection.execute(
            "SELECT COUNT(*), SUM(q.input_tokens + q.output_tokens), SUM(q.cost) FROM requests q "
            "JOIN runs r ON r.run_id = q.run_id WHERE json_extract(r.metadata, ?) = ? AND q.started_at >= ? "
            "AND q.cost_source != 'refused'", (f'$."{key}"', value, since)).fetchone()
        return Spent(row[0] or 0, row[1] or 0, row[2] or 0.0)

    def abandon(self, run_id: str) -> None:
        """Close a run whose process died without closing it (a killed Ray worker's)."""
        self._submit(self._write_with, _abandon, run_id)

    def _write_with(self, write: Callable[[sqlite3.Connection, str], None], run_id: str) -> None:
        try:
            write(self._connection, run_id)
        except sqlite3.Error as exc:
            self._failure = self._failure or _ledger_error(self.path, exc)

    def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        self._executor.submit(lambda: None).result()

    @property
    def failure(self) -> LedgerError | None:
        """The first write that failed, if any (later rows may be missing)."""
        return self._failure

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._connection.close()
