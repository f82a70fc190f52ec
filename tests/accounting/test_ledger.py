"""The ledger, a SQLite file or a team's PostgreSQL database (each test that can runs on both):
every request a row, committed at once, never twice; schema versioned; bad files refused."""

from __future__ import annotations

import multiprocessing
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from opencode_gateway.accounting.budget import WAIT, Claim, PeriodBudget, Refusal, Spent
from opencode_gateway.accounting.ledger import SCHEMA_VERSION, Ledger, LedgerLocation, connect
from opencode_gateway.accounting.ledger.schema import MIGRATIONS, schema_version
from opencode_gateway.accounting.records import RequestRecord, RunUsage
from opencode_gateway.accounting.usage import Usage
from opencode_gateway.errors import LedgerError
from tests.support import builders
from tests.support.cli import cli
from tests.support.ledger import closed, select


def record(
    request_id: str,
    *,
    usage: Usage | None = Usage(1000, 50, 600, 0, 10),
    cost: float | None = 0.001,
    source: str = "litellm",
    started_at: float = 1_790_000_000.0,
    status: int = 200,
) -> RequestRecord:
    return builders.record(
        request_id,
        usage=usage,
        cost=cost,
        source=source,
        status=status,
        started_at=started_at,
        model="litellm_proxy/coder",
        upstream_model="gpt-4o-mini",
        duration_s=0.5,
        ttfb_s=0.1,
        attempts=2,
        usage_missing=usage is None,
        response_id=f"chatcmpl-{request_id}",
        session_id="ses_1",
    )


def start(ledger: Ledger, run_id: str, metadata: dict | None = None, tags: tuple[str, ...] = ("harness",)) -> None:
    ledger.start_run(builders.run_row(run_id, model="litellm_proxy/coder", metadata=metadata or {}, tags=tags))


def test_runs_and_requests_are_written(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    start(ledger, "run_1", {"ticket": "ENG-412"})
    ledger.record_request("run_1", record("a"))
    ledger.record_request("run_1", record("b", usage=None, cost=None, source="unpriced"))
    ledger.update_run(
        builders.run_row(
            "run_1",
            ended_at=1_790_000_100.0,
            session_id="ses_1",
            stop_reason="done",
            usage=RunUsage(1000, 50, 600, 0, 10, requests=2, usage_missing_requests=1),
            cost=0.001,
            unpriced=1,
        )
    )
    ledger.close()
    [run] = [dict(r) for r in select(ledger_at, "SELECT * FROM runs")]
    assert run["metadata"] == '{"ticket": "ENG-412"}' and run["stop_reason"] == "done"
    assert (run["requests"], run["input_tokens"], run["cost"], run["unpriced_requests"]) == (2, 1000, 0.001, 1)
    rows = [dict(r) for r in select(ledger_at, "SELECT * FROM requests ORDER BY request_id")]
    assert rows[0]["cache_read_tokens"] == 600 and rows[0]["reasoning_tokens"] == 10 and rows[0]["attempts"] == 2
    assert rows[0]["response_id"] == "chatcmpl-a" and rows[0]["session_id"] == "ses_1"
    assert rows[1]["usage_missing"] == 1 and rows[1]["cost"] is None and rows[1]["cost_source"] == "unpriced"


def test_each_request_is_committed_before_the_run_ends(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    start(ledger, "run_1")
    ledger.record_request("run_1", record("a"))
    ledger.flush()
    assert select(ledger_at, "SELECT count(*) FROM requests")[0][0] == 1  # another process's view
    assert select(ledger_at, "SELECT ended_at FROM runs")[0][0] is None
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
        connect(tmp_path / "absent.db", create=False)


def test_a_request_written_twice_counts_once(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    start(ledger, "run_1")
    ledger.record_request("run_1", record("a"))
    ledger.record_request("run_1", record("a"))  # a retried or re-shipped write
    ledger.flush()
    assert select(ledger_at, "SELECT COUNT(*) FROM requests")[0][0] == 1
    assert closed(ledger) == "ok"


def test_a_new_ledger_and_its_folder_are_private(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "ledger.db"
    ledger = Ledger(path)
    start(ledger, "run_1")
    ledger.record_request("run_1", record("r1"))
    ledger.flush()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for file in (path, path.with_name("ledger.db-wal"), path.with_name("ledger.db-shm")):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    ledger.close()


def test_a_ledger_at_version_1_gains_the_owner_column(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.executescript(f"{MIGRATIONS[0]}; PRAGMA user_version=1;")
    db.execute("INSERT INTO runs (run_id, started_at, model, mode) VALUES ('run_old', 1, 'm', 'sdk')")
    db.commit()
    connect(path, create=False).close()  # a reader (report, doctor) after an upgrade migrates it too
    row = sqlite3.connect(path).execute("SELECT run_id, owner, stop_reason FROM runs").fetchone()
    assert row == ("run_old", None, None)  # a run of no known process is left as it was
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def _opened(where: str) -> Ledger:
    """The ledger `where` names, opened as another process opens it: a Postgres ledger's spool in a
    data dir of the process's own (never beside a URL, which would make a folder named for it)."""
    return Ledger(LedgerLocation.of(where, Path(tempfile.mkdtemp(prefix="ocg-data-"))))


def _open_at(where: str, moment: float) -> str:
    time.sleep(max(0.0, moment - time.time()))
    try:
        _opened(where).close()
    except LedgerError as exc:
        return str(exc)
    return "ok"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_fresh_ledger_opened_by_many_processes_at_once_never_fails(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    def fresh(trial: int) -> str:
        return (
            request.getfixturevalue("postgres").create_database()
            if backend == "postgresql"
            else str(tmp_path / f"ledger{trial}.db")
        )

    context = multiprocessing.get_context("spawn")
    with context.Pool(8) as pool:
        for trial in range(5):
            where = fresh(trial)
            moment = time.time() + 1.5  # all eight open at the same instant, once the pool is up
            assert pool.starmap(_open_at, [(where, moment)] * 8) == ["ok"] * 8
            database = connect(LedgerLocation.of(where, tmp_path), create=False)
            assert schema_version(database) == SCHEMA_VERSION
            database.close()


_STARTS_A_RUN_AND_WAITS = """
import sys, time
from pathlib import Path
from opencode_gateway.accounting.ledger import Ledger, LedgerLocation
from tests.accounting.test_ledger import record, start
ledger = Ledger(LedgerLocation.of(sys.argv[1], Path(sys.argv[2])))
start(ledger, "run_killed")
ledger.record_request("run_killed", record("r1", cost=0.25))
ledger.flush()
print("started", flush=True)
time.sleep(600)
"""


def test_the_run_of_a_killed_process_is_abandoned_with_its_recorded_totals(
    ledger_at: LedgerLocation, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _STARTS_A_RUN_AND_WAITS, ledger_at.url or str(ledger_at.path), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "started\n"
        alive = connect(ledger_at)  # its process still runs: the run stays open
        assert alive.execute("SELECT stop_reason FROM runs").fetchone()[0] is None
        alive.close()
    finally:
        process.kill()
        process.wait()
    connect(ledger_at).close()  # opening the ledger marks the run whose process is gone
    [row] = select(ledger_at, "SELECT stop_reason, ended_at, requests, cost, error FROM runs")
    assert row["stop_reason"] == "abandoned"
    assert row["ended_at"] == 1_790_000_000.5 and row["requests"] == 1 and row["cost"] == 0.25
    assert "ended without closing it" in row["error"]


def test_a_period_cap_counts_the_day_s_recorded_and_held_calls_of_its_value(ledger_at: LedgerLocation) -> None:
    cap = PeriodBudget.from_setting("ticket", {"per": "day", "max_requests": 3})
    day = 1_790_035_200.0  # a UTC midnight
    ledger = Ledger(ledger_at)
    for run_id, ticket in (("a", "ENG-1"), ("b", "ENG-1"), ("c", "ENG-2")):
        start(ledger, run_id, {"ticket": ticket})
    ledger.record_request("a", record("a1", started_at=day - 100))  # yesterday
    ledger.record_request("a", record("a2", started_at=day + 200))
    ledger.record_request("b", record("b1", started_at=day + 300))
    ledger.record_request("b", record("b2", started_at=day + 300, cost=0.0, source="refused", usage=None))
    ledger.record_request("c", record("c1", started_at=day + 300))  # another ticket

    def claim(request_id: str) -> Claim:
        return Claim(request_id, ((cap, "ENG-1"),), Spent(1, 100, 0.0), day + 400)

    assert ledger.hold(claim("x1")).result() is None  # 2 spent today (refused calls spend nothing): x1 goes
    assert ledger.hold(claim("x2")).result() == WAIT  # 2 spent + x1 held + x2 would pass 3: wait for x1
    ledger.record_request("b", record("x1", started_at=day + 400))  # x1's row replaces its hold
    verdict = ledger.hold(claim("x2")).result()
    ledger.close()
    assert isinstance(verdict, Refusal) and "day budget of ticket=ENG-1 exceeded" in verdict.message


def test_rows_that_queue_while_the_writer_is_busy_go_in_together_and_all_of_them(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    start(ledger, "run_1")
    writing, disk = threading.Event(), threading.Event()
    busy = ledger._executor.submit(lambda: writing.set() or disk.wait(60))  # the writer busy (a slow disk)
    assert writing.wait(30)
    for i in range(500):
        ledger.record_request("run_1", record(f"r{i:03}"))
    assert not busy.done() and ledger._executor._work_queue.qsize() == 1  # one write job for all 500
    disk.set()
    ledger.flush()
    assert select(ledger_at, "SELECT COUNT(*) FROM requests")[0][0] == 500
    assert closed(ledger) == "ok"


def test_a_bad_row_in_a_batch_loses_no_other_row(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    start(ledger, "run_1")
    ledger.record_request("run_1", record("dup"))
    ledger.flush()
    disk = threading.Event()
    ledger._executor.submit(disk.wait, 60)
    for request_id in ("a", "dup", "b"):  # "dup" is there already: its insert fails, the batch's is retried
        ledger.record_request("run_1", record(request_id))
    disk.set()
    ledger.flush()
    ids = {r[0] for r in select(ledger_at, "SELECT request_id FROM requests")}
    assert ids == {"dup", "a", "b"}  # the duplicate is kept once, and its batch lost nothing
    assert closed(ledger) == "ok"


def test_a_request_row_names_every_column_it_writes(tmp_path: Path) -> None:
    from opencode_gateway.accounting.ledger.writer import REQUEST_COLUMNS

    ledger = Ledger(tmp_path / "ledger.db")
    ledger.close()
    columns = [row[1] for row in sqlite3.connect(tmp_path / "ledger.db").execute("PRAGMA table_info(requests)")]
    assert sorted(REQUEST_COLUMNS) == sorted(columns)  # every column named, none twice, none missing


def _claims_at(where: str, moment: float, worker: int) -> list[str]:
    """Five calls of one ticket asking to start at `moment`, from this process; none ends."""
    cap = PeriodBudget.from_setting("ticket", {"per": "day", "max_requests": 3})
    ledger = _opened(where)
    time.sleep(max(0.0, moment - time.time()))
    claims = [Claim(f"w{worker}-{n}", ((cap, "ENG-7"),), Spent(1, 100, 0.0), time.time()) for n in range(5)]
    verdicts = [ledger.hold(claim) for claim in claims]
    answers = ["go" if v.result() is None else str(v.result()) for v in verdicts]
    return [*answers, closed(ledger)]


def _writes(where: str, moment: float, worker: int) -> str:
    """100 request rows of a run of this process's own, and 20 of another process's again."""
    ledger = _opened(where)
    start(ledger, f"run_{worker}")
    time.sleep(max(0.0, moment - time.time()))
    for n in range(100):
        ledger.record_request(f"run_{worker}", record(f"w{worker}-{n:03}"))
    for n in range(20):  # a retry, or a spool shipped twice: the same ids again
        ledger.record_request(f"run_{worker}", record(f"w{(worker + 1) % 4}-{n:03}"))
    return closed(ledger)


@pytest.fixture
def shared(ledger_at: LedgerLocation) -> str:
    """The ledger as another process names it (--ledger's value), its schema made."""
    Ledger(ledger_at).close()
    return ledger_at.url or str(ledger_at.path)


def test_calls_from_two_processes_at_once_pass_a_period_cap_no_more_often_than_it_allows(shared: str) -> None:
    """It held per process only: five runs from two processes under max_requests 3 made 5 calls."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        moment = time.time() + 1.5
        answers = [a for some in pool.starmap(_claims_at, [(shared, moment, 0), (shared, moment, 1)]) for a in some]
    assert answers.count("ok") == 2, answers  # each process's rows reached the ledger, none spooled
    assert answers.count("go") == 3 and answers.count("wait") == 7, answers  # the rest wait for the held ones


def test_four_processes_writing_at_once_lose_and_double_no_row(shared: str, ledger_at: LedgerLocation) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        moment = time.time() + 1.5
        assert pool.starmap(_writes, [(shared, moment, worker) for worker in range(4)]) == ["ok"] * 4
    ids = [row[0] for row in select(ledger_at, "SELECT request_id FROM requests")]
    assert len(ids) == 400 and set(ids) == {f"w{w}-{n:03}" for w in range(4) for n in range(100)}


def test_a_period_cap_whose_query_fails_refuses_the_call(tmp_path: Path) -> None:
    """Fail closed: a cap the ledger cannot count is not one that allows."""
    cap = PeriodBudget.from_setting("ticket", {"per": "day", "max_requests": 1})
    ledger = Ledger(tmp_path / "ledger.db")
    start(ledger, "a", {"ticket": "ENG-1"})
    ledger.flush()
    db = sqlite3.connect(tmp_path / "ledger.db")
    db.execute("DROP TABLE holds")  # the query that counts the cap now fails
    db.commit()
    db.close()
    verdict = ledger.hold(Claim("x1", ((cap, "ENG-1"),), Spent(1, 100, 0.0), time.time())).result()
    ledger.close()
    assert isinstance(verdict, Refusal) and verdict.limit == "budget"
    assert verdict.message.startswith("the period budgets could not be counted in the ledger: ")


def test_text_that_is_not_utf8_is_stored_so_that_every_query_still_works(ledger_at: LedgerLocation) -> None:
    """A lone surrogate (a byte that was not UTF-8, or a `\\udce9` the agent wrote in JSON) in a
    run's metadata, tags or an ask's subject: stored with U+FFFD in its place, so reports and
    budgets over that run keep working on both backends."""
    cap = PeriodBudget.from_setting("note", {"per": "day", "max_requests": 5})
    ledger = Ledger(ledger_at)
    start(ledger, "a", {"note": "caf\udce9", "ticket": "ENG-1"}, tags=("harness", "t\udce9"))
    ledger.record_request("a", record("a1", started_at=time.time()))
    verdict = ledger.hold(Claim("x1", ((cap, "caf\ufffd"),), Spent(1, 100, 0.0), time.time())).result()
    ledger.close()
    assert verdict is None
    [(metadata, tags)] = select(ledger_at, "SELECT metadata, tags FROM runs")
    assert "caf\\ufffd" in metadata or "caf\ufffd" in metadata, metadata
    assert "\\udce9" not in metadata + tags
    report = cli("report", "--ledger", ledger_at.url or str(ledger_at.path), "--by", "note", "--format", "json")
    assert report.returncode == 0, report.stderr
