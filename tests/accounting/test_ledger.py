"""The ledger file: every request a row, committed at once; schema versioned; bad files refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from opencode_gateway.accounting.ledger import SCHEMA_VERSION, Ledger, connect
from opencode_gateway.accounting.pricing import Cost
from opencode_gateway.accounting.records import RequestRecord, RunUsage
from opencode_gateway.accounting.usage import Usage
from opencode_gateway.errors import LedgerError


def record(request_id: str, *, usage: Usage | None = Usage(1000, 50, 600, 0, 10), cost: float | None = 0.001,
           source: str = "litellm", started_at: float = 1_790_000_000.0, status: int = 200) -> RequestRecord:
    return RequestRecord(request_id=request_id, model="litellm_proxy/coder", upstream_model="gpt-4o-mini",
                         status_code=status, stream=True, usage=usage, cost=Cost(cost, source),
                         started_at=started_at, duration_s=0.5, ttfb_s=0.1, attempts=2, usage_missing=usage is None,
                         response_id=f"chatcmpl-{request_id}", session_id="ses_1")


def start(ledger: Ledger, run_id: str, metadata: dict | None = None, tags: tuple[str, ...] = ("harness",)) -> None:
    ledger.start_run(run_id=run_id, started_at=1_790_000_000.0, model="litellm_proxy/coder", mode="gateway",
                     workdir="/w", metadata=metadata or {}, tags=tags, session_id=None)


def test_runs_and_requests_are_written(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    start(ledger, "run_1", {"ticket": "ENG-412"})
    ledger.record_request("run_1", record("a"))
    ledger.record_request("run_1", record("b", usage=None, cost=None, source="unpriced"))
    ledger.update_run(run_id="run_1", ended_at=1_790_000_100.0, session_id="ses_1", stop_reason="done", error=None,
                      usage=RunUsage(1000, 50, 600, 0, 10, requests=2, usage_missing_requests=1), cost=0.001,
                      unpriced=1)
    ledger.close()
    db = connect(path, migrate=False)
    run = dict(db.execute("SELECT * FROM runs").fetchone())
    assert run["metadata"] == '{"ticket": "ENG-412"}' and run["stop_reason"] == "done"
    assert (run["requests"], run["input_tokens"], run["cost"], run["unpriced_requests"]) == (2, 1000, 0.001, 1)
    rows = [dict(r) for r in db.execute("SELECT * FROM requests ORDER BY request_id")]
    assert rows[0]["cache_read_tokens"] == 600 and rows[0]["reasoning_tokens"] == 10 and rows[0]["attempts"] == 2
    assert rows[0]["response_id"] == "chatcmpl-a" and rows[0]["session_id"] == "ses_1"
    assert rows[1]["usage_missing"] == 1 and rows[1]["cost"] is None and rows[1]["cost_source"] == "unpriced"


def test_each_request_is_committed_before_the_run_ends(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    start(ledger, "run_1")
    ledger.record_request("run_1", record("a"))
    ledger.flush()
    other = sqlite3.connect(path)  # another process's view
    assert other.execute("SELECT count(*) FROM requests").fetchone()[0] == 1
    assert other.execute("SELECT ended_at FROM runs").fetchone()[0] is None
    ledger.close()


def test_the_file_is_in_wal_mode_with_the_current_schema(tmp_path: Path) -> None:
    Ledger(tmp_path / "ledger.db").close()
    db = sqlite3.connect(tmp_path / "ledger.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_an_older_ledger_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).execute("CREATE TABLE unrelated (x)").connection.commit()  # version 0
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert {"runs", "requests", "unrelated"} <= {r[0] for r in db.execute("SELECT name FROM sqlite_master")}


def test_a_newer_ledger_asks_for_an_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    sqlite3.connect(path).execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerError, match="newer than this opencode-gateway knows.*upgrade"):
        Ledger(path)


def test_a_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="is not a readable SQLite database.*--ledger"):
        Ledger(path)


def test_a_locked_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LedgerError, match="is locked by another process"):
            Ledger(path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")


def test_reading_a_missing_ledger_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="no ledger at"):
        connect(tmp_path / "absent.db", migrate=False)


def test_a_failed_write_is_kept_for_the_run_to_report(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    start(ledger, "run_1")
    ledger.record_request("run_1", record("a"))
    ledger.record_request("run_1", record("a"))  # the same request id twice: the second insert fails
    ledger.flush()
    assert ledger.failure is not None and "UNIQUE constraint failed" in str(ledger.failure)
    ledger.close()
