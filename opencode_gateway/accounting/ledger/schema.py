"""The ledger's schema, its migrations, and opening it: WAL, private files, runs whose process is
gone closed as `abandoned`."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ...errors import LedgerError
from .owners import gone

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "abandon", "connect", "ledger_error"]

# Each entry migrates a ledger from the version before it; PRAGMA user_version says where a file is.
MIGRATIONS: tuple[str, ...] = (
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
SCHEMA_VERSION = len(MIGRATIONS)


def ledger_error(path: Path, exc: sqlite3.Error) -> LedgerError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return LedgerError(f"ledger {path} is locked by another process; wait for it or pass --ledger PATH")
    if "not a database" in text or "malformed" in text:
        return LedgerError(
            f"ledger {path} is not a readable SQLite database (corrupt?): move it away or pass --ledger PATH"
        )
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
            for statement in filter(str.strip, MIGRATIONS[number].split(";")):
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version={max(version, SCHEMA_VERSION)}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _mark_abandoned(connection: sqlite3.Connection) -> None:
    """Close the rows of runs whose process is gone (killed, or its machine rebooted): they end
    as `abandoned`, with the totals of the requests they recorded."""
    open_runs = connection.execute("SELECT run_id, owner FROM runs WHERE ended_at IS NULL AND owner IS NOT NULL")
    for run_id in [row[0] for row in open_runs.fetchall() if gone(row[1])]:
        abandon(connection, run_id)


def abandon(connection: sqlite3.Connection, run_id: str) -> None:
    """Close an open run's row as `abandoned`, with the totals of the requests it recorded."""
    connection.execute(
        "UPDATE runs SET ended_at = COALESCE((SELECT MAX(started_at + duration_s) FROM requests "
        "WHERE run_id = runs.run_id), started_at), stop_reason = 'abandoned', "
        "error = 'the process running it ended without closing it (killed?)', "
        + ", ".join(
            f"{column} = (SELECT {total} FROM requests WHERE run_id = runs.run_id)"
            for column, total in _RUN_TOTALS.items()
        )
        + " WHERE run_id = ? AND ended_at IS NULL",
        (run_id,),
    )


_RUN_TOTALS = {
    "requests": "COUNT(*)",
    "input_tokens": "SUM(input_tokens)",
    "output_tokens": "SUM(output_tokens)",
    "cache_read_tokens": "SUM(cache_read_tokens)",
    "cache_write_tokens": "SUM(cache_write_tokens)",
    "reasoning_tokens": "SUM(reasoning_tokens)",
    "cost": "SUM(cost)",
    "unpriced_requests": "SUM(cost IS NULL)",
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
            raise LedgerError(
                f"ledger {path} has schema version {version}, newer than this opencode-gateway "
                f"knows ({SCHEMA_VERSION}): upgrade opencode-gateway"
            )
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
        raise ledger_error(path, exc) from exc
    except OSError as exc:
        raise LedgerError(f"ledger {path}: {exc.strerror}") from exc
