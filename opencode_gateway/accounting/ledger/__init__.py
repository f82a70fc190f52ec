"""The ledger: one SQLite file with a row per run and a row per request: its schema and migrations
(schema.py), which process owns a run (owners.py), the writer (writer.py) and the queries that
read it (queries.py)."""

from .owners import this_process
from .queries import finished_values
from .schema import SCHEMA_VERSION, connect
from .writer import Ledger, RunLedger

__all__ = ["SCHEMA_VERSION", "Ledger", "RunLedger", "connect", "finished_values", "this_process"]
