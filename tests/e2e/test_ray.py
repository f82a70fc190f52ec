"""`batch --executor ray` end to end: the real CLI as the driver of a real local Ray instance, each
task a real OpenCode run in a Ray worker process, the scripted model behind; one ledger, on the
driver, holding every run once, and a worker killed mid-task retried."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway.accounting.ledger import LedgerLocation
from tests.support.ledger import select
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
CLI = [sys.executable, "-m", "opencode_gateway"]


def _task_of(body: dict[str, Any]) -> str:
    return re.search(r"task (t[\w-]+)", json.dumps(body["messages"])).group(1)  # type: ignore[union-attr]


def _batch(tmp_path: Path, upstream: ScriptedUpstream, opencode_bin: str, ids: list[str], *extra: str) -> list[str]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": i, "prompt": f"Do task {i}", "metadata": {"ticket": f"ENG-{i}"}}) + "\n" for i in ids)
    )
    return [
        *CLI,
        "batch",
        str(tasks),
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key",
        "sk",
        "--executor",
        "ray",
        "--concurrency",
        "2",
        "--workdir-root",
        str(tmp_path / "work"),
        "--opencode-bin",
        opencode_bin,
        "--ledger",
        str(tmp_path / "ledger.db"),
        *extra,
    ]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)  # a local Ray instance of the driver's own
    return env


def test_four_tasks_on_ray_one_fails_every_run_once_in_the_drivers_ledger(
    upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        task = _task_of(body)
        if task == "t3":
            return Reply(status=401, error="key revoked")
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(
                tool_calls=[
                    ToolCall("write", {"filePath": str(tmp_path / "work" / task / "out.txt"), "content": task})
                ],
                usage=usage(1000, 20),
            )
        return Reply(text=f"{task} done", usage=usage(1200, 10))

    monkeypatch.setattr(upstream, "fallback", answer)
    driver = subprocess.Popen(
        _batch(tmp_path, upstream, opencode_bin, ["t1", "t2", "t3", "t4"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    stdout, stderr = driver.communicate(timeout=600)
    assert driver.returncode == 1, stderr
    results = {r["task_id"]: r for r in map(json.loads, (tmp_path / "tasks.results.jsonl").read_text().splitlines())}
    assert sorted(results) == ["t1", "t2", "t3", "t4"]
    assert [t for t, r in sorted(results.items()) if r["stop_reason"] == "done"] == ["t1", "t2", "t4"]
    assert results["t3"]["error"]["status_code"] == 401
    assert all((tmp_path / "work" / t / "out.txt").read_text() == t for t in ("t1", "t2", "t4"))
    assert re.search(r"^TOTAL \(3 ok, 1 failed\)\s+7\s+0\s+6,600\s+90\s", stdout, re.M), stdout

    ledger = sqlite3.connect(tmp_path / "ledger.db")
    runs = ledger.execute(
        "SELECT json_extract(metadata, '$.task_id'), stop_reason, requests, input_tokens, owner FROM runs"
    ).fetchall()
    assert sorted((r[0], r[1], r[2], r[3]) for r in runs) == [
        ("t1", "done", 2, 2200),
        ("t2", "done", 2, 2200),
        ("t3", "error", 1, 0),
        ("t4", "done", 2, 2200),
    ]
    worker_pids = {int(owner.split(":")[1]) for *_, owner in runs}
    assert driver.pid not in worker_pids  # the runs ran in Ray's worker processes, not in the driver
    assert ledger.execute("SELECT count(*) FROM requests").fetchone() == (7,)  # each committed once
    report = subprocess.run(
        [*CLI, "report", "--by", "task_id", "--ledger", str(tmp_path / "ledger.db"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    totals = json.loads(report.stdout)["total"]
    assert totals["input_tokens"] == sum(r["usage"]["input_tokens"] for r in results.values() if "usage" in r)
    assert abs(totals["cost"] - sum(r["cost"] or 0 for r in results.values() if "cost" in r)) < 1e-12


@pytest.mark.parametrize("retries", [1, 0])
def test_a_worker_killed_mid_task_is_retried_and_its_spend_stays_as_an_abandoned_run(
    retries: int, upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a retry left, the task runs again and finishes; without, it is a failed result. The
    killed attempt's spend is in the ledger either way. The worker's pid is the one its run's row
    names (Ray's state API needs its dashboard, which this Ray is started without)."""
    attempts: list[int] = []

    def answer(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            attempts.append(1)
            return Reply(
                tool_calls=[
                    ToolCall("write", {"filePath": str(tmp_path / "work" / "t-kill" / "a.txt"), "content": "a"})
                ],
                usage=usage(1000, 20),
            )
        if len(attempts) == 1:
            return Reply(text="slow " * 200, chunk_delay=0.5)  # the first attempt is killed during this
        return Reply(text="done", usage=usage(1200, 10))

    monkeypatch.setattr(upstream, "fallback", answer)
    driver = subprocess.Popen(
        _batch(tmp_path, upstream, opencode_bin, ["t-kill"], "--ray-max-retries", str(retries)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    try:
        deadline = time.monotonic() + 240
        owner = None
        while owner is None and time.monotonic() < deadline:  # the worker's run, with its first request
            time.sleep(0.5)
            assert driver.poll() is None, driver.communicate()
            if (tmp_path / "ledger.db").exists() and len(upstream.requests) >= 2:
                ledger = sqlite3.connect(tmp_path / "ledger.db")
                row = ledger.execute("SELECT owner FROM runs").fetchone()
                recorded = ledger.execute("SELECT count(*) FROM requests").fetchone()[0]
                ledger.close()
                owner = row[0] if row and recorded == 1 else None
        assert owner is not None, "the task's first request was not recorded on the driver within 240 s"
        os.kill(int(owner.split(":")[1]), signal.SIGKILL)  # the Ray worker running the task
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    [result] = map(json.loads, (tmp_path / "tasks.results.jsonl").read_text().splitlines())
    runs = (
        sqlite3.connect(tmp_path / "ledger.db")
        .execute("SELECT stop_reason, requests, input_tokens FROM runs ORDER BY started_at")
        .fetchall()
    )
    report = subprocess.run(
        [*CLI, "report", "--by", "outcome", "--ledger", str(tmp_path / "ledger.db"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    total = json.loads(report.stdout)["total"]["input_tokens"]
    if retries:
        assert driver.returncode == 0, stderr
        assert result["task_id"] == "t-kill" and result["stop_reason"] == "done"
        assert runs == [("abandoned", 1, 1000), ("done", 2, 2200)] and total == 3200  # the killed attempt counts
    else:
        assert driver.returncode == 1, stderr
        assert result["stop_reason"] == "error" and "failed on Ray on every attempt" in result["error"]["message"]
        assert runs == [("abandoned", 1, 1000)] and total == 1000


def test_a_period_cap_holds_on_ray_the_drivers_ledger_answers_what_a_ticket_spent(
    upstream: ScriptedUpstream,
    opencode_bin: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ledger_at: LedgerLocation,
) -> None:
    """A day's cap per ticket, two tasks of one ticket one after the other: the first spends the
    cap on its worker, so the second (on another worker) is refused before its call leaves the
    endpoint; a task of another ticket is not. The workers' runs ask the driver's ledger, a SQLite
    file or a team's PostgreSQL."""
    monkeypatch.setattr(upstream, "fallback", lambda body: Reply(text="done", usage=usage(1000, 50)))  # $0.00018
    config = tmp_path / "config.yaml"
    config.write_text("budgets:\n  ticket: {per: day, max_cost: 0.0001}\n")
    ledger = ledger_at.url or str(ledger_at.path)
    argv = _batch(
        tmp_path, upstream, opencode_bin, [], "--concurrency", "1", "--config", str(config), "--ledger", ledger
    )
    (tmp_path / "tasks.jsonl").write_text(
        "".join(  # one ticket for two tasks
            json.dumps({"id": i, "prompt": f"Do task {i}", "metadata": {"ticket": ticket}}) + "\n"
            for i, ticket in [("t1", "ENG-7"), ("t2", "ENG-7"), ("t3", "ENG-8")]
        )
    )
    driver = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp_path), timeout=600)
    assert driver.returncode == 1, driver.stderr
    results = {r["task_id"]: r for r in map(json.loads, (tmp_path / "tasks.results.jsonl").read_text().splitlines())}
    assert sorted((t, r["stop_reason"]) for t, r in results.items()) == [
        ("t1", "done"),
        ("t2", "budget_exceeded"),
        ("t3", "done"),
    ]
    assert "day budget of ticket=ENG-7 exceeded since" in results["t2"]["error"]["message"]
    assert not [r for r in upstream.requests if "task t2" in json.dumps(r["body"])]  # refused at the endpoint
    rows = select(ledger_at, "SELECT metadata, stop_reason FROM runs")
    assert sorted((json.loads(r[0])["task_id"], r[1]) for r in rows) == [
        ("t1", "done"),
        ("t2", "budget_exceeded"),
        ("t3", "done"),
    ]
    for password in ledger_at.passwords:
        assert password not in driver.stdout + driver.stderr


def test_without_ray_the_executor_is_exit_2_naming_the_extra(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "hi"}) + "\n")
    no_ray = (
        "import sys; sys.modules['ray'] = None; from opencode_gateway.cli import entry; "
        "sys.argv[0] = 'opencode-gateway'; entry()"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            no_ray,
            "batch",
            str(tasks),
            "-m",
            "openai/gpt-4o-mini",
            "--executor",
            "ray",
            "--ledger",
            str(tmp_path / "ledger.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "pip install 'opencode-gateway[ray]'" in result.stderr and result.stderr.count("\n") == 1
