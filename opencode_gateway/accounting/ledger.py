"""The ledger: one SQLite file with a row per run and a row per request.

A request's row is committed as soon as the request ends, so killing the process mid-run loses
no finished request. Writes go through one worker thread that owns the write connection, so the
endpoint's event loop never waits on the disk.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..errors import LedgerError
from .records import RequestRecord, RunUsage

__all__ = ["SCHEMA_VERSION", "Ledger", "connect", "finished_values"]

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
)
SCHEMA_VERSION = len(_MIGRATIONS)


def _describe(path: Path, exc: sqlite3.Error) -> LedgerError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return LedgerError(f"ledger {path} is locked by another process; wait for it or pass --ledger PATH")
    if "not a database" in text or "malformed" in text:
        return LedgerError(f"ledger {path} is not a readable SQLite database (corrupt?): move it away or "
                           "pass --ledger PATH")
    return LedgerError(f"ledger {path}: {text}")


def connect(path: Path, *, migrate: bool = True, timeout: float = 5.0) -> sqlite3.Connection:
    """An open, migrated connection; LedgerError says what is wrong with the file otherwise."""
    try:
        if migrate:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            raise LedgerError(f"no ledger at {path}: runs write one there (or pass --ledger PATH)")
        connection = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        connection.row_factory = sqlite3.Row
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            connection.close()
            raise LedgerError(f"ledger {path} has schema version {version}, newer than this opencode-gateway "
                              f"knows ({SCHEMA_VERSION}): upgrade opencode-gateway")
        if migrate:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            for number in range(version, SCHEMA_VERSION):
                connection.executescript(f"BEGIN; {_MIGRATIONS[number]}; PRAGMA user_version={number + 1}; COMMIT;")
        elif version < SCHEMA_VERSION:
            raise LedgerError(f"ledger {path} has schema version {version}: open it once with a run to migrate it")
        return connection
    except sqlite3.Error as exc:
        raise _describe(path, exc) from exc
    except OSError as exc:
        raise LedgerError(f"ledger {path}: {exc.strerror}") from exc


def finished_values(path: Path, key: str, where: Mapping[str, str]) -> set[str]:
    """The values of metadata `key` among the runs that finished (stop_reason "done") and whose
    metadata holds every `where` pair. An absent ledger has none."""
    if not path.exists():
        return set()
    conditions = "".join(" AND json_extract(metadata, ?) = ?" for _ in where)
    parameters = [f'$."{key}"', *(p for name, value in where.items() for p in (f'$."{name}"', value))]
    connection = connect(path, migrate=False)
    try:
        rows = connection.execute(f"SELECT DISTINCT json_extract(metadata, ?) FROM runs WHERE stop_reason = 'done'"
                                  f"{conditions}", parameters).fetchall()
    except sqlite3.Error as exc:
        raise _describe(path, exc) from exc
    finally:
        connection.close()
    return {str(row[0]) for row in rows if row[0] is not None}


class Ledger:
    """The write side. `record_request` never blocks; `close` waits for what is queued. Only the
    one worker thread uses the connection after it is opened."""

    def __init__(self, path: Path, *, timeout: float = 5.0) -> None:
        self.path = path
        self._connection = connect(path, timeout=timeout)  # here, so a bad file fails before the run starts
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._failure: LedgerError | None = None

    def _write(self, sql: str, parameters: Sequence[Any]) -> None:
        try:
            self._connection.execute(sql, parameters)
        except sqlite3.Error as exc:
            self._failure = self._failure or _describe(self.path, exc)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self._executor.submit(fn, *args)

    def start_run(self, *, run_id: str, started_at: float, model: str, mode: str, workdir: str,
                  metadata: Mapping[str, Any], tags: Sequence[str], session_id: str | None) -> None:
        self._submit(self._write, "INSERT INTO runs (run_id, session_id, started_at, model, mode, workdir, metadata, "
                     "tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (run_id, session_id, started_at, model, mode, workdir, json.dumps(dict(metadata)),
                      json.dumps(list(tags)))).result()
        self.raise_failure()

    def record_request(self, run_id: str, record: RequestRecord) -> None:
        usage = record.usage
        self._submit(self._write, "INSERT INTO requests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                     "?, ?, ?, ?)", (
                         record.request_id, run_id, record.session_id, record.response_id, record.model,
                         record.upstream_model, record.status_code, int(record.stream),
                         usage.input_tokens if usage else 0, usage.output_tokens if usage else 0,
                         usage.cache_read_tokens if usage else 0, usage.cache_write_tokens if usage else 0,
                         usage.reasoning_tokens if usage else 0, int(record.usage_missing), int(record.estimated),
                         record.cost.usd, record.cost.source, record.attempts, record.error, record.started_at,
                         record.ttfb_s, record.duration_s))

    def update_run(self, *, run_id: str, ended_at: float, session_id: str | None, stop_reason: str | None,
                   error: str | None, usage: RunUsage, cost: float | None, unpriced: int) -> None:
        """A run's totals and, once it has ended, how (`stop_reason`); never blocks."""
        self._submit(self._write, "UPDATE runs SET ended_at=?, session_id=COALESCE(?, session_id), stop_reason=?, "
                     "error=?, requests=?, input_tokens=?, output_tokens=?, cache_read_tokens=?, cache_write_tokens=?,"
                     " reasoning_tokens=?, cost=?, unpriced_requests=? WHERE run_id=?",
                     (ended_at, session_id, stop_reason, error, usage.requests, usage.input_tokens,
                      usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens,
                      cost, unpriced, run_id))

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
