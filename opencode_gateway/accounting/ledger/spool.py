"""A Postgres ledger's spool: the rows this machine could not send while the database was away,
kept in a private SQLite ledger in the data dir, and shipped when it is back."""

from __future__ import annotations

from pathlib import Path

from .database import Database
from .location import LedgerLocation
from .schema import mark_abandoned, opened
from .transfer import Moved, merge

__all__ = ["pending", "ship"]


def ship(spool: Path, target: Database) -> Moved:
    """Every spooled row into `target`, then out of the spool, under the spool's write lock (a
    process spooling now waits): shipping twice adds nothing, and a crash between the two leaves
    the rows to ship again. A run still open in the spool stays there for its later rows."""
    source = opened(LedgerLocation(path=spool))
    try:
        mark_abandoned(source)  # a spooled run whose process is gone ships as abandoned
        with source.transaction():
            moved = merge(source, target)
            source.execute("DELETE FROM requests")
            source.execute("DELETE FROM runs WHERE ended_at IS NOT NULL")
        return moved
    finally:
        source.close()


def pending(spool: Path | None) -> tuple[int, int]:
    """The runs and requests waiting in a spool (none when there is no spool)."""
    if spool is None or not spool.exists():
        return 0, 0
    source = opened(LedgerLocation(path=spool), create=False)
    try:
        row = source.execute("SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM requests)").fetchone()
        return int(row[0]), int(row[1])
    finally:
        source.close()
