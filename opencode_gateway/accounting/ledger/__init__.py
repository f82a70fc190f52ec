"""The ledger: a row per run and a row per request, in a SQLite file on this machine (the default)
or a Postgres database a team shares: where it is (location.py), what the two backends spell
differently (dialect.py), one connection to either (database.py), its schema and migrations
(schema.py), which process owns a run (owners.py), the writer (writer.py), rows moved between
ledgers (transfer.py), a Postgres ledger's spool (spool.py) and the queries that read it
(queries.py)."""

from .connection import connect
from .location import LedgerLocation
from .owners import this_process
from .queries import finished_values
from .schema import SCHEMA_VERSION
from .writer import Ledger, RunLedger

__all__ = ["SCHEMA_VERSION", "Ledger", "LedgerLocation", "RunLedger", "connect", "finished_values", "this_process"]
