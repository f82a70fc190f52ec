"""A team ledger that goes away: the run goes on, its rows wait in a private spool on this machine,
and the next command that reaches the database ships them, once. Each test has a PostgreSQL
server of its own, stopped and started again as a restarted or unreachable database is."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_gateway.accounting.ledger import SCHEMA_VERSION, Ledger, LedgerLocation, connect
from opencode_gateway.accounting.ledger.spool import pending
from opencode_gateway.accounting.records import ApprovalRecord, RunUsage
from tests.accounting.test_ledger import record, start
from tests.support.builders import run_row
from tests.support.cli import Result, cli
from tests.support.ledger import select
from tests.support.postgres import Postgres


@pytest.fixture
def server() -> Iterator[Postgres]:
    """A PostgreSQL server of this test's own (it is stopped and started in the middle)."""
    started = Postgres().start()
    yield started
    started.remove()


@pytest.fixture
def team(server: Postgres, tmp_path: Path) -> LedgerLocation:
    return LedgerLocation.of(server.create_database("spend"), tmp_path / "data")


def requests_in(location: LedgerLocation) -> list[str]:
    return sorted(row[0] for row in select(location, "SELECT request_id FROM requests"))


def ledger_cli(team: LedgerLocation, *args: str) -> Result:
    """`opencode-gateway ARGS --ledger URL` on the machine whose data dir holds the team's spool."""
    assert team.url is not None and team.spool is not None
    return cli(*args, "--ledger", team.url, env={"OPENCODE_GATEWAY_HOME": str(team.spool.parents[1])})


def end(ledger: Ledger, run_id: str) -> None:
    ledger.update_run(run_row(run_id, ended_at=1_790_000_100.0, session_id="ses_1", stop_reason="done", usage=RunUsage(1000, 50, 600, 0, 10, requests=2), cost=0.002))  # fmt: skip


def test_a_database_restarted_mid_run_loses_nothing_and_sync_ships_the_spool_once(
    server: Postgres, team: LedgerLocation
) -> None:
    warnings: list[str] = []
    ledger = Ledger(team, warn=warnings.append)
    start(ledger, "run_1", {"ticket": "ENG-1"})
    ledger.record_request("run_1", record("a"))
    ledger.flush()
    server.stop()  # every connection cut
    ledger.record_request("run_1", record("b"))
    ask = ApprovalRecord("ask_1", "ses_1", "call_1", "bash", "rm -rf build", "deny", "policy", "no", 1_790_000_050.0, 0)
    ledger.record_approval("run_1", ask)
    end(ledger, "run_1")
    ledger.close()  # its last try at the database fails: the spool stays
    assert ledger.failure is None  # nothing was lost: it was spooled
    [warning] = warnings
    assert "cannot be reached" in warning and str(team.spool) in warning and "ledger sync" in warning
    assert "dbpassword" not in warning and "***" in warning
    assert team.spool is not None and stat.S_IMODE(team.spool.stat().st_mode) == 0o600
    assert stat.S_IMODE(team.spool.parent.stat().st_mode) == 0o700
    assert pending(team.spool) == (1, 1)  # the run (with its row, so the spool holds it whole) and b
    away = ledger_cli(team, "ledger", "sync")
    assert away.returncode == 1 and "cannot be reached" in away.stderr and "dbpassword" not in away.stderr
    server.start()
    shipped = ledger_cli(team, "ledger", "sync")
    assert shipped.returncode == 0, shipped.stderr
    assert "shipped 1 runs and 1 requests" in shipped.stdout
    assert requests_in(team) == ["a", "b"] and pending(team.spool) == (0, 0)
    again = ledger_cli(team, "ledger", "sync", "--json")
    assert again.returncode == 0 and '"requests": 0' in again.stdout  # shipping twice adds nothing
    [run] = select(team, "SELECT stop_reason, requests, cost FROM runs")
    assert tuple(run) == ("done", 2, 0.002)  # its end, written while the database was away, arrived
    asks = select(team, "SELECT approval_id, run_id, decision, answered_by FROM approvals")
    assert [tuple(a) for a in asks] == [("ask_1", "run_1", "deny", "policy")]  # and so did its ask, once


def test_a_database_away_from_the_start_spools_the_whole_run_and_the_next_command_ships_it(
    server: Postgres, team: LedgerLocation
) -> None:
    connect(team).close()  # the schema exists; then the database goes away
    server.stop()
    warnings: list[str] = []
    ledger = Ledger(team, warn=warnings.append, timeout=2)
    start(ledger, "run_1")
    ledger.record_request("run_1", record("a"))
    end(ledger, "run_1")
    ledger.close()
    assert len(warnings) == 1 and pending(team.spool) == (1, 1)
    status = ledger_cli(team, "ledger", "status")
    assert status.returncode == 1 and "1 runs and 1 requests waiting" in status.stdout
    assert "dbpassword" not in status.stdout + status.stderr
    server.start()
    report = ledger_cli(team, "report", "--by", "run", "--format", "json")
    assert report.returncode == 0 and '"key": "run_1"' in report.stdout  # the report shipped it first
    assert requests_in(team) == ["a"] and pending(team.spool) == (0, 0)
    status = ledger_cli(team, "ledger", "status", "--json")
    assert (
        status.returncode == 0
        and '"spooled_runs": 0' in status.stdout
        and f'"schema_version": {SCHEMA_VERSION}' in status.stdout
    )


def test_a_spool_shipped_by_two_processes_at_once_counts_each_row_once(server: Postgres, team: LedgerLocation) -> None:
    server.stop()
    ledger = Ledger(team, warn=lambda _: None, timeout=2)
    start(ledger, "run_1")
    for n in range(50):
        ledger.record_request("run_1", record(f"r{n:02}"))
    end(ledger, "run_1")
    ledger.close()
    server.start()
    command = [sys.executable, "-m", "opencode_gateway", "ledger", "sync", "--ledger", team.url or ""]
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(team.spool.parents[1])}  # type: ignore[union-attr]
    syncs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    assert [sync.wait(timeout=120) for sync in syncs] == [0, 0]
    assert requests_in(team) == [f"r{n:02}" for n in range(50)]
