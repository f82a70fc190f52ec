"""Rows moved from one ledger into another: `ledger import FILE.db`, and a spool shipped to its
Postgres ledger. Keyed by run and request id, so moving the same rows twice adds nothing: a
request that is there already is left as it is, a run takes the newer state of an open row."""

from __future__ import annotations

from dataclasses import dataclass

from .database import Database
from .schema import APPROVAL_COLUMNS, REQUEST_COLUMNS, RUN_COLUMNS

__all__ = ["Moved", "merge"]

_END_COLUMNS = [c for c in RUN_COLUMNS if c not in ("run_id", "started_at", "model", "mode", "workdir", "owner")]
INSERT_RUN = (
    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))}) "
    f"ON CONFLICT (run_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _END_COLUMNS)} "
    # an open row takes what is moved; an ended one only a real end over `abandoned` (a run whose
    # process was gone before its spooled end was shipped)
    "WHERE runs.ended_at IS NULL OR (runs.stop_reason = 'abandoned' AND excluded.ended_at IS NOT NULL "
    "AND excluded.stop_reason != 'abandoned')"
)
INSERT_REQUEST = (
    f"INSERT INTO requests ({', '.join(REQUEST_COLUMNS)}) VALUES ({', '.join('?' * len(REQUEST_COLUMNS))}) "
    "ON CONFLICT (request_id) DO NOTHING"
)
INSERT_APPROVAL = (
    f"INSERT INTO approvals ({', '.join(APPROVAL_COLUMNS)}) VALUES ({', '.join('?' * len(APPROVAL_COLUMNS))}) "
    "ON CONFLICT (approval_id) DO NOTHING"
)


@dataclass(frozen=True)
class Moved:
    """What a merge found in the source, and of it what the target did not hold yet."""

    runs: int
    requests: int
    new_runs: int
    new_requests: int


def merge(source: Database, target: Database) -> Moved:
    """Every run, request and approval of `source` into `target`, every column, in one transaction of the
    target's: all of them or none."""
    runs = source.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs").fetchall()
    requests = source.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests").fetchall()
    approvals = source.execute(f"SELECT {', '.join(APPROVAL_COLUMNS)} FROM approvals").fetchall()
    with target.transaction():
        before = _counts(target)
        target.executemany(INSERT_RUN, [tuple(row) for row in runs])
        target.executemany(INSERT_REQUEST, [tuple(row) for row in requests])
        target.executemany(INSERT_APPROVAL, [tuple(row) for row in approvals])
        after = _counts(target)
    return Moved(len(runs), len(requests), after[0] - before[0], after[1] - before[1])


def _counts(database: Database) -> tuple[int, int]:
    row = database.execute("SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM requests)").fetchone()
    return int(row[0]), int(row[1])
