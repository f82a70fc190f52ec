"""The `opencode-gateway ledger` commands: what a ledger is and what waits in its spool (status),
shipping the spool now (sync), bringing an existing SQLite ledger in (import), and finding and
removing a run (runs, forget): a run recorded wrongly, e.g. with text an older version stored that
breaks the queries over it, can be taken out without editing the database by hand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import LedgerError, SettingsError
from .connection import connect
from .location import LedgerLocation
from .queries import MADE, REFUSED, SOURCE, selection
from .schema import opened, schema_version
from .spool import pending
from .transfer import Moved, merge

__all__ = ["Status", "find_runs", "forget_run", "import_ledger", "status", "sync"]


@dataclass(frozen=True)
class Status:
    """A ledger as this machine sees it. `problem` is why it could not be opened (None: it was)."""

    backend: str  # sqlite or postgresql
    ledger: str  # its path, or its URL with the password masked
    schema_version: int | None
    spool: str | None  # a Postgres ledger's spool on this machine
    spooled_runs: int
    spooled_requests: int
    problem: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def lines(self) -> list[str]:
        state = self.problem or f"schema version {self.schema_version}"
        lines = [f"ledger {self.ledger} ({self.backend}): {state}"]
        if self.spool is not None:
            waiting = f"{self.spooled_runs} runs and {self.spooled_requests} requests"
            lines.append(
                f"spool {self.spool}: {waiting} waiting" if self.spooled_runs else f"spool {self.spool}: empty"
            )
        return lines


def status(location: LedgerLocation) -> Status:
    """Opening the ledger (which ships the spool, when the database is back), then the spool."""
    version, problem = None, None
    if not location.exists():
        problem = "no runs recorded yet (the first run creates it)"
    else:
        try:
            database = connect(location, create=False)
        except LedgerError as exc:
            problem = str(exc)
        else:
            version = schema_version(database)
            database.close()
    runs, requests = pending(location.spool)
    spool = str(location.spool) if location.spool else None
    backend = "postgresql" if location.is_postgres else "sqlite"
    return Status(backend, location.shown, version, spool, runs, requests, problem)


def sync(location: LedgerLocation) -> tuple[int, int]:
    """Ship the spool to the database now; what was shipped (runs, requests). LedgerUnavailable
    while the database is still away (the spool kept as it is)."""
    before = pending(location.spool)
    connect(location).close()  # which ships the spool first
    after = pending(location.spool)
    return before[0] - after[0], before[1] - after[1]


def import_ledger(source: Path, target: LedgerLocation) -> Moved:
    """Every run and request of the SQLite ledger `source` into `target`, in one transaction;
    what is there already is left as it is, so importing twice adds nothing."""
    if not source.is_file():
        raise SettingsError(f"ledger import {source}: no such file: give the path of a ledger.db")
    if target.path is not None and target.path.exists() and target.path.resolve() == source.resolve():
        raise SettingsError(f"ledger import {source}: that is the configured ledger itself: pass --ledger TARGET")
    reading = opened(LedgerLocation(path=source), create=False)  # an older file's schema brought up to date
    try:
        writing = connect(target)
        try:
            return merge(reading, writing)
        finally:
            writing.close()
    finally:
        reading.close()


def find_runs(
    location: LedgerLocation, where: Sequence[tuple[str, str]] = (), since: str | None = None, until: str | None = None
) -> list[dict[str, Any]]:
    """The runs `where`, `since` and `until` select (as `report` does), oldest first, each with its
    requests and cost. Its metadata is shown as stored text: a value no JSON query can read still
    lists without `--where`, so it can be found and forgotten."""
    database = connect(location, create=False)
    try:
        where_sql, filters = selection(database.dialect, since, until, where)
        rows = database.execute(
            "SELECT r.run_id, MIN(r.started_at), MAX(r.model), MAX(COALESCE(r.stop_reason, 'running')), "
            f"MAX(r.metadata), {MADE}, {REFUSED}, SUM(q.cost) FROM {SOURCE} {where_sql} "
            "GROUP BY r.run_id ORDER BY MIN(r.started_at), r.run_id",
            filters,
        ).fetchall()
    finally:
        database.close()
    names = ("run_id", "started_at", "model", "outcome", "metadata", "requests", "refused", "cost")
    return [dict(zip(names, row, strict=True)) for row in rows]


def forget_run(location: LedgerLocation, run_id: str) -> tuple[int, int]:
    """Remove a run, its requests and its asks, in one transaction; how many requests and asks
    went. SettingsError when the ledger has no such run."""
    database = connect(location, create=False)
    try:
        with database.transaction():
            if database.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise SettingsError(f"ledger forget: no run {run_id!r} in {location}: `ledger runs` lists them")
            requests = database.execute("SELECT COUNT(*) FROM requests WHERE run_id = ?", (run_id,)).fetchone()[0]
            asks = database.execute("SELECT COUNT(*) FROM approvals WHERE run_id = ?", (run_id,)).fetchone()[0]
            for table in ("requests", "approvals", "runs"):
                database.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
    finally:
        database.close()
    return int(requests), int(asks)
