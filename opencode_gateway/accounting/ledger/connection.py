"""Opening a ledger for use: migrated, a Postgres ledger's spool shipped first (a spooled run's
end is in the spool), then the runs of this machine's dead processes closed as `abandoned`."""

from __future__ import annotations

from pathlib import Path

from ...errors import LedgerError
from .database import Database
from .location import LedgerLocation
from .schema import mark_abandoned, opened
from .spool import ship

__all__ = ["connect"]


def connect(location: LedgerLocation | Path, *, create: bool = True, timeout: float = 5.0) -> Database:
    """An open ledger (schema.opened), its spool shipped and its abandoned runs closed. A reader
    without write access (a dashboard's read-only role) reads it as it is."""
    if isinstance(location, Path):
        location = LedgerLocation(path=location)
    database = opened(location, create=create, timeout=timeout)
    try:
        if location.spool is not None and location.spool.exists():
            try:
                ship(location.spool, database)
            except LedgerError:
                if create:
                    raise
        try:
            mark_abandoned(database)
        except LedgerError:
            if create:
                raise
        return database
    except BaseException:
        database.close()
        raise
