"""Reading a ledger as another process would, and closing a test's ledger with proof that every
row reached the database itself (none failed, none waits in a spool)."""

from __future__ import annotations

from typing import Any

from opencode_gateway.accounting.ledger import Ledger, LedgerLocation, connect
from opencode_gateway.accounting.ledger.spool import pending

__all__ = ["closed", "select"]


def select(location: LedgerLocation, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
    """The rows `sql` reads, on a connection of its own that is closed before returning."""
    database = connect(location, create=False)
    try:
        return list(database.execute(sql, parameters).fetchall())
    finally:
        database.close()


def closed(ledger: Ledger) -> str:
    """Closes `ledger`: "ok" when every row it took is in the database, else what went wrong."""
    ledger.close()
    spooled = pending(ledger.location.spool)
    if ledger.failure is not None or spooled != (0, 0):
        return f"failure={ledger.failure} spooled={spooled}"
    return "ok"
