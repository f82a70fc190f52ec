"""The ledger's schema, one definition for both backends, its migrations, and opening it: a
SQLite file (WAL, private files) or a Postgres database (migrated under an advisory lock), a
Postgres ledger's spool shipped first, and runs whose process is gone closed as `abandoned`."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ...errors import LedgerError
from .database import Database, open_postgres, open_sqlite, sqlite_error
from .location import LedgerLocation
from .owners import gone

__all__ = [
    "APPROVAL_COLUMNS",
    "MIGRATIONS",
    "REQUEST_COLUMNS",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "abandon",
    "mark_abandoned",
    "opened",
    "schema_version",
]

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
    # A call admitted under a period budget and not yet recorded: every machine deciding on the same
    # budget counts it (budget.py), until its request's row replaces it in one transaction.
    """
    CREATE TABLE holds (
        request_id TEXT NOT NULL,
        budget TEXT NOT NULL,
        requests INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        cost REAL NOT NULL,
        owner TEXT NOT NULL,
        held_at REAL NOT NULL,
        PRIMARY KEY (request_id, budget)
    );
    CREATE INDEX holds_by_budget ON holds(budget, held_at)
    """,
    # Each tool call the host was asked about (approvals/), and how it was answered.
    """
    CREATE TABLE approvals (
        approval_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        session_id TEXT,
        call_id TEXT,
        tool TEXT NOT NULL,
        subject TEXT,
        decision TEXT NOT NULL,
        answered_by TEXT NOT NULL,
        reason TEXT,
        asked_at REAL NOT NULL,
        waited_s REAL NOT NULL
    );
    CREATE INDEX approvals_by_run ON approvals(run_id)
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


RUN_COLUMNS = (
    "run_id",
    "session_id",
    "started_at",
    "ended_at",
    "model",
    "mode",
    "workdir",
    "metadata",
    "tags",
    "stop_reason",
    "error",
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost",
    "unpriced_requests",
    "owner",
)
# An ask's row, column by column (the order record_approval writes them in).
APPROVAL_COLUMNS = (
    "approval_id",
    "run_id",
    "session_id",
    "call_id",
    "tool",
    "subject",
    "decision",
    "answered_by",
    "reason",
    "asked_at",
    "waited_s",
)
# A request's row, column by column (the order record_request writes them in).
REQUEST_COLUMNS = (
    "request_id",
    "run_id",
    "session_id",
    "response_id",
    "model",
    "upstream_model",
    "status_code",
    "stream",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "usage_missing",
    "estimated",
    "cost",
    "cost_source",
    "attempts",
    "error",
    "started_at",
    "ttfb_s",
    "duration_s",
    "purpose",
    "cache_saved",
)
_SCHEMA_LOCK = "opencode-gateway ledger schema"


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


def schema_version(database: Database) -> int:
    """The migrations applied: SQLite's user_version, a Postgres ledger's ledger_schema row."""
    if database.dialect.name == "sqlite":
        return int(database.execute("PRAGMA user_version").fetchone()[0])
    if database.execute("SELECT to_regclass('ledger_schema')").fetchone()[0] is None:
        return 0
    row = database.execute("SELECT MAX(version) FROM ledger_schema").fetchone()
    return int(row[0] or 0)


def _migrate(database: Database) -> None:
    """Bring the schema up to date in one transaction under a lock: of many processes opening a
    fresh ledger at once, one migrates and the others then find it done."""
    with database.transaction(locks=[_SCHEMA_LOCK]):
        if database.dialect.name != "sqlite":
            database.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER NOT NULL)")
        version = schema_version(database)
        for number in range(version, SCHEMA_VERSION):
            for statement in filter(str.strip, MIGRATIONS[number].split(";")):
                database.execute(database.dialect.types(statement))
        if version >= SCHEMA_VERSION:
            return
        if database.dialect.name == "sqlite":
            database.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        else:
            database.execute("DELETE FROM ledger_schema")
            database.execute("INSERT INTO ledger_schema (version) VALUES (?)", (SCHEMA_VERSION,))


def _check_version(database: Database) -> int:
    version = schema_version(database)
    if version > SCHEMA_VERSION:
        database.close()
        raise LedgerError(
            f"ledger {database.shown} has schema version {version}, newer than this opencode-gateway "
            f"knows ({SCHEMA_VERSION}): upgrade opencode-gateway"
        )
    return version


def mark_abandoned(database: Database) -> None:
    """Close the rows of runs whose process is gone (killed, or its machine rebooted): they end
    as `abandoned`, with the totals of the requests they recorded. Only this machine's processes
    can be told gone; their holds on budgets go with them."""
    open_runs = database.execute("SELECT run_id, owner FROM runs WHERE ended_at IS NULL AND owner IS NOT NULL")
    for run_id in [row[0] for row in open_runs.fetchall() if gone(row[1])]:
        abandon(database, run_id)
    holders = {row[0] for row in database.execute("SELECT DISTINCT owner FROM holds").fetchall()}
    for owner in filter(gone, holders):
        database.execute("DELETE FROM holds WHERE owner = ?", (owner,))


def abandon(database: Database, run_id: str) -> None:
    """Close an open run's row as `abandoned`, with the totals of the requests it recorded."""
    database.execute(
        "UPDATE runs SET ended_at = COALESCE((SELECT MAX(started_at + duration_s) FROM requests "
        "WHERE run_id = runs.run_id), started_at), stop_reason = 'abandoned', error = ?, "
        + ", ".join(
            f"{column} = (SELECT {total} FROM requests WHERE run_id = runs.run_id)"
            for column, total in _RUN_TOTALS.items()
        )
        + " WHERE run_id = ? AND ended_at IS NULL",
        ("the process running it ended without closing it (killed?)", run_id),
    )


_RUN_TOTALS = {
    "requests": "COALESCE(SUM(CASE WHEN cost_source <> 'refused' THEN 1 ELSE 0 END), 0)",  # made, not refused
    "input_tokens": "SUM(input_tokens)",
    "output_tokens": "SUM(output_tokens)",
    "cache_read_tokens": "SUM(cache_read_tokens)",
    "cache_write_tokens": "SUM(cache_write_tokens)",
    "reasoning_tokens": "SUM(reasoning_tokens)",
    "cost": "SUM(cost)",
    "unpriced_requests": "SUM(CASE WHEN cost IS NULL THEN 1 ELSE 0 END)",
}


def opened(location: LedgerLocation, *, create: bool = True, timeout: float = 5.0) -> Database:
    """An open connection to a ledger of the current schema (an older one is migrated);
    LedgerError says what is wrong otherwise (LedgerUnavailable: a Postgres ledger cannot be
    reached). Readers pass `create=False`: a ledger file that does not exist is an error."""
    if location.is_postgres:
        database = open_postgres(location, timeout=timeout)
        try:
            if _check_version(database) < SCHEMA_VERSION:
                _migrate(database)
            return database
        except BaseException:
            database.close()
            raise
    assert location.path is not None
    return _open_sqlite(location.path, create, timeout)


def _open_sqlite(path: Path, create: bool, timeout: float) -> Database:
    try:
        if create:
            _create_private(path)
        elif not path.exists():
            raise LedgerError(f"no ledger at {path}: runs write one there (or pass --ledger PATH)")
        database = open_sqlite(path, timeout=timeout)
        version = _check_version(database)
        if create or version < SCHEMA_VERSION:
            _use_wal(database.connection, timeout)
            database.execute("PRAGMA synchronous=NORMAL")
            if version < SCHEMA_VERSION:
                _migrate(database)
        return database
    except sqlite3.Error as exc:
        raise sqlite_error(str(path), exc) from exc
    except OSError as exc:
        raise LedgerError(f"ledger {path}: {exc.strerror}") from exc
