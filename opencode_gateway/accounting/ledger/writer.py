"""The ledger's write side.

The ledger: a row per run and a row per request, in a SQLite file or a team's Postgres database.

A request's row is committed as soon as the request ends, so killing the process mid-run loses
no finished request. Writes go through one worker thread that owns the write connection, so the
endpoint's event loop never waits on the disk; request rows that queue up while it writes go in
together, in one transaction (a commit per row was a sixth of the relay's CPU at 500 requests/s).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ...errors import LedgerError, LedgerUnavailable, one_line
from ..budget import HOLD_TTL_S, Claim, Refusal, Spent, Verdict, period_verdict
from ..records import ApprovalRecord, RequestRecord, RunRow
from .database import Database
from .failover import INSERT_RUN, Failover
from .location import LedgerLocation
from .owners import this_process
from .schema import REQUEST_COLUMNS, abandon
from .transfer import INSERT_APPROVAL

__all__ = ["REQUEST_COLUMNS", "Ledger", "RunLedger"]

T = TypeVar("T")

_INSERT_REQUEST = (
    f"INSERT INTO requests ({', '.join(REQUEST_COLUMNS)}) VALUES ({', '.join('?' * len(REQUEST_COLUMNS))}) "
    "ON CONFLICT (request_id) DO NOTHING"  # a row written twice (a retry, a spool shipped again) counts once
)
_UPDATE_RUN = (
    "UPDATE runs SET ended_at=?, session_id=COALESCE(?, session_id), stop_reason=?, "
    "error=?, requests=?, input_tokens=?, output_tokens=?, cache_read_tokens=?, cache_write_tokens=?,"
    " reasoning_tokens=?, cost=?, unpriced_requests=? WHERE run_id=?"
)


def _request_row(run_id: str, record: RequestRecord) -> tuple[Any, ...]:
    """A request's row, in _INSERT_REQUEST's column order."""
    usage = record.usage
    return (
        record.request_id,
        run_id,
        record.session_id,
        record.response_id,
        record.model,
        record.upstream_model,
        record.status_code,
        int(record.stream),
        usage.input_tokens if usage else 0,
        usage.output_tokens if usage else 0,
        usage.cache_read_tokens if usage else 0,
        usage.cache_write_tokens if usage else 0,
        usage.reasoning_tokens if usage else 0,
        int(record.usage_missing),
        int(record.estimated),
        record.cost.usd,
        record.cost.source,
        record.attempts,
        record.error,
        record.started_at,
        record.ttfb_s,
        record.duration_s,
        record.purpose,
        record.cost.cache_saved,
    )


class RunLedger(Protocol):
    """What a run's account writes to, and asks its period caps of: the Ledger, or a channel to
    one in another process (a Ray worker's, batch/ray_cluster.py)."""

    def start_run(self, row: RunRow) -> None: ...

    def record_request(self, run_id: str, record: RequestRecord) -> None: ...

    def record_approval(self, run_id: str, record: ApprovalRecord) -> None: ...

    def update_run(self, row: RunRow) -> None: ...

    def hold(self, claim: Claim) -> Future[Verdict]: ...

    def release(self, request_id: str) -> None: ...

    def flush(self) -> None: ...

    @property
    def failure(self) -> LedgerError | None: ...


def _warn(message: str) -> None:
    print(f"opencode-gateway: {message}", file=sys.stderr, flush=True)


class Ledger:
    """The write side. `record_request` never blocks; `close` waits for what is queued. Only the
    one worker thread uses the database after it is opened; failover.py says what happens when
    a Postgres ledger goes away."""

    def __init__(
        self, location: LedgerLocation | Path, *, timeout: float = 5.0, warn: Callable[[str], None] = _warn
    ) -> None:
        self.location = LedgerLocation(path=location) if isinstance(location, Path) else location
        self._db = Failover(self.location, timeout=timeout, warn=warn)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._rows: list[tuple[Any, ...]] = []  # request rows not yet handed to the writer
        self._rows_lock = threading.Lock()

    @property
    def shown(self) -> str:
        return self.location.shown

    def _submit(self, work: Callable[[Database], T]) -> Future[T | None]:
        return self._executor.submit(self._db.write, work)

    def start_run(self, row: RunRow) -> None:
        """A run's row as it opens (`owner` the process running it: this one's unless the run is
        another's, a batch task's on a Ray worker)."""
        values = (
            row.run_id,
            row.session_id,
            row.started_at,
            row.model,
            row.mode,
            row.workdir,
            json.dumps(dict(row.metadata)),
            json.dumps(list(row.tags)),
            row.owner or this_process(),
        )
        self._db.opened[row.run_id] = values
        self._submit(lambda db: db.execute(INSERT_RUN, values)).result()
        self.raise_failure()

    def record_request(self, run_id: str, record: RequestRecord) -> None:
        row = _request_row(run_id, record)
        with self._rows_lock:
            self._rows.append(row)
            first = len(self._rows) == 1
        if first:  # one write job takes every row queued until it runs
            self._executor.submit(self._write_rows)

    def record_approval(self, run_id: str, record: ApprovalRecord) -> None:
        """An ask and its answer (its fields in APPROVAL_COLUMNS' order, the run's id second); never blocks."""
        approval_id, *rest = dataclasses.astuple(record)
        self._submit(lambda db: db.execute(INSERT_APPROVAL, (approval_id, run_id, *rest)))

    def _write_rows(self) -> None:
        with self._rows_lock:
            rows, self._rows = self._rows, []
        self._db.write(lambda db: _insert_requests(db, rows))  # a retry on the spool writes the same rows

    def update_run(self, row: RunRow) -> None:
        """A run's totals and, once it has ended, when and how (`ended_at`, `stop_reason`); never blocks."""
        usage, run_id, stop_reason = row.usage, row.run_id, row.stop_reason
        values = (
            row.ended_at,
            row.session_id,
            stop_reason,
            row.error,
            usage.requests,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
            row.cost,
            row.unpriced,
            run_id,
        )

        def write(db: Database) -> None:
            db.execute(_UPDATE_RUN, values)
            if stop_reason is not None:  # here, after the rows queued before: a spool opened for them gets the run
                self._db.opened.pop(run_id, None)

        self._submit(write)

    def hold(self, claim: Claim) -> Future[Verdict]:
        """Whether a call may start under its period caps, decided in one transaction that locks
        each cap's key and value, counting every machine's recorded calls and held ones; a call
        that may start is held until its row (or `release`) replaces the hold. Asked on the
        writer's thread, so every row queued here before is counted. A ledger that cannot answer
        refuses the call (fail closed): a cap that cannot be counted is not a cap that allows."""
        decided: Future[Verdict] = Future()

        def done(asked: Future[tuple[Verdict] | None]) -> None:
            answered = asked.result()  # None: the query failed (the failure is kept), not a "go"
            if answered is not None:
                decided.set_result(answered[0])
                return
            failure = one_line(str(self._db.failure or "no answer"))
            decided.set_result(Refusal("budget", f"the period budgets could not be counted in the ledger: {failure}"))

        self._submit(lambda db: (_hold(db, claim),)).add_done_callback(done)
        return decided

    def release(self, request_id: str) -> None:
        """A held call ended without a row (it never reached the upstream)."""
        self._submit(lambda db: db.execute("DELETE FROM holds WHERE request_id = ?", (request_id,)))

    def abandon(self, run_id: str) -> None:
        """Close a run whose process died without closing it (a killed Ray worker's)."""

        def write(db: Database) -> None:
            abandon(db, run_id)
            self._db.opened.pop(run_id, None)

        self._submit(write)

    def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        self._executor.submit(lambda: None).result()

    @property
    def failure(self) -> LedgerError | None:
        """The first write that failed, if any (later rows may be missing)."""
        return self._db.failure

    def raise_failure(self) -> None:
        if self._db.failure is not None:
            raise self._db.failure

    def close(self) -> None:
        """Wait for what is queued, then close (failover.Failover.close)."""
        self._executor.shutdown(wait=True)
        self._db.close()


def _insert_requests(db: Database, rows: list[tuple[Any, ...]]) -> None:
    """Request rows in one transaction, each replacing its call's hold; should the batch fail, row
    by row, so one bad row loses no other. In key order: processes writing the same rows at once
    (a retry, a spool shipped twice) then lock them in one order, and never deadlock."""
    rows = sorted(rows, key=lambda row: str(row[0]))
    try:
        with db.transaction():
            db.executemany(_INSERT_REQUEST, rows)
            db.executemany("DELETE FROM holds WHERE request_id = ?", [(row[0],) for row in rows])
    except LedgerUnavailable:
        raise
    except LedgerError:
        failure: LedgerError | None = None
        for row in rows:
            try:
                db.execute(_INSERT_REQUEST, row)
            except LedgerUnavailable:
                raise
            except LedgerError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure from None


def _spent(db: Database, key: str, value: str, since: float) -> Spent:
    row = db.execute(
        "SELECT COUNT(*), SUM(q.input_tokens + q.output_tokens), SUM(q.cost) FROM requests q "
        f"JOIN runs r ON r.run_id = q.run_id WHERE {db.dialect.meta('r.metadata')} = ? AND q.started_at >= ? "
        "AND q.cost_source != 'refused'",
        (db.dialect.meta_param(key), value, since),
    ).fetchone()
    return Spent(row[0] or 0, row[1] or 0, row[2] or 0.0)


def _held(db: Database, budget: str, since: float, request_id: str) -> Spent:
    row = db.execute(
        "SELECT COUNT(*), SUM(tokens), SUM(cost) FROM holds WHERE budget = ? AND held_at >= ? AND request_id != ?",
        (budget, since, request_id),
    ).fetchone()
    return Spent(row[0] or 0, row[1] or 0, row[2] or 0.0)


def _hold(db: Database, claim: Claim) -> Verdict:
    budgets = [(cap, value, f"{cap.key}={value}") for cap, value in claim.caps]
    with db.transaction(locks=[f"opencode-gateway budget {budget}" for _, _, budget in budgets]):
        for cap, value, budget in budgets:
            since = cap.start(claim.at)
            held = _held(db, budget, max(since, claim.at - HOLD_TTL_S), claim.request_id)
            verdict = period_verdict(claim, cap, value, _spent(db, cap.key, value, since), held)
            if verdict is not None:
                return verdict
        spend, owner = claim.reservation, this_process()
        db.executemany(
            "INSERT INTO holds (request_id, budget, requests, tokens, cost, owner, held_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id, budget) DO NOTHING",
            [
                (claim.request_id, budget, spend.requests, spend.tokens, spend.cost, owner, claim.at)
                for *_, budget in budgets
            ],
        )
    return None
