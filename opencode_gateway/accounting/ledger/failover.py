"""The database a writer writes to, and the spool that takes its place while it is away.

A Postgres ledger that cannot be reached (at the start, or in the middle of a run) is replaced by
its spool, a private SQLite ledger in the data dir, with one warning line that says where: the run
goes on, and its rows are shipped by the next command that reaches the database (`close` tries
first). The spool is given the rows of the runs still open, so it always holds whole runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import LedgerError, LedgerUnavailable
from .connection import connect
from .database import Database
from .location import LedgerLocation

__all__ = ["INSERT_RUN", "Failover"]

T = TypeVar("T")

INSERT_RUN = (
    "INSERT INTO runs (run_id, session_id, started_at, model, mode, workdir, metadata, tags, owner) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"
)


class Failover:
    """The ledger's database, or its spool from the moment the database went away. Used by one
    thread at a time (the writer's)."""

    def __init__(self, location: LedgerLocation, *, timeout: float, warn: Callable[[str], None]) -> None:
        self.location = location
        self._timeout = timeout
        self._warn = warn
        self.spooling = False
        self.failure: LedgerError | None = None  # the first write that failed, if any
        self.opened: dict[str, tuple[Any, ...]] = {}  # the run rows of open runs, by run id
        try:  # here, so a bad ledger fails before the run starts
            self._db = connect(location, timeout=timeout)
        except LedgerUnavailable as exc:
            self._db = self._spool(exc)

    def _spool(self, why: LedgerUnavailable) -> Database:
        assert self.location.spool is not None
        spool = connect(self.location.spool, timeout=self._timeout)
        self.spooling = True
        self._warn(
            f"{why}; this run's rows go to {self.location.spool} until it is back "
            "(`opencode-gateway ledger sync` ships them)"
        )
        return spool

    def write(self, work: Callable[[Database], T]) -> T | None:
        """`work` on the database, or on the spool should the database go away; a failure is kept
        (in `failure`) for the run to report, and gives None."""
        try:
            try:
                return work(self._db)
            except LedgerUnavailable as exc:
                if self.spooling or not self.location.is_postgres:
                    raise
                self._db.close()
                self._db = self._spool(exc)
                for row in self.opened.values():
                    self._db.execute(INSERT_RUN, row)
                return work(self._db)
        except LedgerError as exc:
            self.failure = self.failure or exc
            return None

    def close(self) -> None:
        """Close; a spooling ledger tries the database once more, which ships the spool."""
        self._db.close()
        if self.spooling:
            try:
                connect(self.location, timeout=self._timeout).close()
            except LedgerError:
                return
            self._warn(f"ledger {self.location.shown} is back: the spooled rows were shipped to it")
