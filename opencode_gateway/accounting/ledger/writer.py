"""The ledger's write side.

The ledger: one SQLite file with a row per run and a row per request.

A request's row is committed as soon as the request ends, so killing the process mid-run loses
no finished request. Writes go through one worker thread that owns the write connection, so the
endpoint's event loop never waits on the disk; request rows that queue up while it writes go in
together, in one transaction (a commit per row was a sixth of the relay's CPU at 500 requests/s).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ...errors import LedgerError
from ..budget import Spent
from ..records import RequestRecord, RunUsage
from .owners import this_process
from .schema import abandon, connect, ledger_error

__all__ = ["REQUEST_COLUMNS", "Ledger", "RunLedger"]

T = TypeVar("T")

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
_INSERT_REQUEST = (
    f"INSERT INTO requests ({', '.join(REQUEST_COLUMNS)}) VALUES ({', '.join('?' * len(REQUEST_COLUMNS))})"
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
    """What a run's account writes to, and reads its period caps' spend from: the Ledger, or a
    channel to one in another process (a Ray worker's, ray_executor.py)."""

    def start_run(
        self,
        *,
        run_id: str,
        started_at: float,
        model: str,
        mode: str,
        workdir: str,
        metadata: Mapping[str, Any],
        tags: Sequence[str],
        session_id: str | None,
    ) -> None: ...

    def record_request(self, run_id: str, record: RequestRecord) -> None: ...

    def update_run(
        self,
        *,
        run_id: str,
        ended_at: float | None,
        session_id: str | None,
        stop_reason: str | None,
        error: str | None,
        usage: RunUsage,
        cost: float | None,
        unpriced: int,
    ) -> None: ...

    def spent_since(self, key: str, value: str, since: float) -> Future[Spent]: ...

    def flush(self) -> None: ...

    @property
    def failure(self) -> LedgerError | None: ...


class Ledger:
    """The write side. `record_request` never blocks; `close` waits for what is queued. Only the
    one worker thread uses the connection after it is opened."""

    def __init__(self, path: Path, *, timeout: float = 5.0) -> None:
        self.path = path
        self._connection = connect(path, timeout=timeout)  # here, so a bad file fails before the run starts
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._failure: LedgerError | None = None
        self._rows: list[tuple[Any, ...]] = []  # request rows not yet handed to the writer
        self._rows_lock = threading.Lock()

    def _write(self, sql: str, parameters: Sequence[Any]) -> None:
        try:
            self._connection.execute(sql, parameters)
        except sqlite3.Error as exc:
            self._failure = self._failure or ledger_error(self.path, exc)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self._executor.submit(fn, *args)

    def start_run(
        self,
        *,
        run_id: str,
        started_at: float,
        model: str,
        mode: str,
        workdir: str,
        metadata: Mapping[str, Any],
        tags: Sequence[str],
        session_id: str | None,
        owner: str | None = None,
    ) -> None:
        """A run's row. `owner` is the process running it (host:pid:start time), this one's unless
        the run is another's (a batch task's on a Ray worker)."""
        self._submit(
            self._write,
            "INSERT INTO runs (run_id, session_id, started_at, model, mode, workdir, metadata, "
            "tags, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                session_id,
                started_at,
                model,
                mode,
                workdir,
                json.dumps(dict(metadata)),
                json.dumps(list(tags)),
                owner or this_process(),
            ),
        ).result()
        self.raise_failure()

    def record_request(self, run_id: str, record: RequestRecord) -> None:
        row = _request_row(run_id, record)
        with self._rows_lock:
            self._rows.append(row)
            first = len(self._rows) == 1
        if first:  # one write job takes every row queued until it runs
            self._submit(self._write_rows)

    def _write_rows(self) -> None:
        with self._rows_lock:
            rows, self._rows = self._rows, []
        try:
            with self._connection:  # one transaction
                self._connection.execute("BEGIN")
                self._connection.executemany(_INSERT_REQUEST, rows)
        except sqlite3.Error:  # rolled back: row by row, so one bad row loses no other
            for row in rows:
                self._write(_INSERT_REQUEST, row)

    def update_run(
        self,
        *,
        run_id: str,
        ended_at: float | None,
        session_id: str | None,
        stop_reason: str | None,
        error: str | None,
        usage: RunUsage,
        cost: float | None,
        unpriced: int,
    ) -> None:
        """A run's totals and, once it has ended, when and how (`ended_at`, `stop_reason`); never blocks."""
        self._submit(
            self._write,
            "UPDATE runs SET ended_at=?, session_id=COALESCE(?, session_id), stop_reason=?, "
            "error=?, requests=?, input_tokens=?, output_tokens=?, cache_read_tokens=?, cache_write_tokens=?,"
            " reasoning_tokens=?, cost=?, unpriced_requests=? WHERE run_id=?",
            (
                ended_at,
                session_id,
                stop_reason,
                error,
                usage.requests,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                usage.reasoning_tokens,
                cost,
                unpriced,
                run_id,
            ),
        )

    def spent_since(self, key: str, value: str, since: float) -> Future[Spent]:
        """What the runs whose metadata `key` is `value` spent since `since`, as committed so far
        (asked on the writer's thread, so every row queued before is counted)."""
        return self._submit(self._spent_since, key, value, since)

    def _spent_since(self, key: str, value: str, since: float) -> Spent:
        row = self._connection.execute(
            "SELECT COUNT(*), SUM(q.input_tokens + q.output_tokens), SUM(q.cost) FROM requests q "
            "JOIN runs r ON r.run_id = q.run_id WHERE json_extract(r.metadata, ?) = ? AND q.started_at >= ? "
            "AND q.cost_source != 'refused'",
            (f'$."{key}"', value, since),
        ).fetchone()
        return Spent(row[0] or 0, row[1] or 0, row[2] or 0.0)

    def abandon(self, run_id: str) -> None:
        """Close a run whose process died without closing it (a killed Ray worker's)."""
        self._submit(self._write_with, abandon, run_id)

    def _write_with(self, write: Callable[[sqlite3.Connection, str], None], run_id: str) -> None:
        try:
            write(self._connection, run_id)
        except sqlite3.Error as exc:
            self._failure = self._failure or ledger_error(self.path, exc)

    def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        self._executor.submit(lambda: None).result()

    @property
    def failure(self) -> LedgerError | None:
        """The first write that failed, if any (later rows may be missing)."""
        return self._failure

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._connection.close()
