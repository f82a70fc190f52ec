"""A team's ledger on PostgreSQL with the real OpenCode: runs from two machines (two data dirs,
two processes) land in one database, a period budget holds across them, and the database's
password reaches neither OpenCode nor anything printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import run
from opencode_gateway.accounting.ledger import LedgerLocation
from opencode_gateway.config.settings import Settings
from opencode_gateway.events import ToolResult
from tests.support.cli import cli
from tests.support.inspection import opencode_as_seen
from tests.support.ledger import select
from tests.support.postgres import PASSWORD, Postgres
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]


def test_a_run_on_a_team_ledger_records_there_and_never_shows_the_password(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, postgres: Postgres, tmp_path: Path
) -> None:
    url = postgres.create_database()
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{postgres.port}:*:llmproxy:{PASSWORD}\n")
    passfile.chmod(0o600)
    seen: dict[str, Any] = {}

    def inspect_opencode(body: dict) -> Reply:
        """Runs inside the model server while OpenCode waits for this answer: what it can see."""
        seen.update(opencode_as_seen())
        return Reply(text="looked", usage=usage(1200, 30, cost=0.00042))

    upstream.script(inspect_opencode)
    environ = {**os.environ, "OPENCODE_GATEWAY_LEDGER": url, "PGPASSWORD": PASSWORD, "PGPASSFILE": str(passfile)}
    result = run(
        "Look", model="openai/gpt-4o-mini", api_base=upstream.url, api_key="sk-provider", workdir=workdir,
        metadata={"ticket": "ENG-412"}, settings=settings.replace(ledger=None, environ=environ),
    )  # fmt: skip
    assert result.ok, result.error
    assert "environ" in seen and seen["files"]
    assert PASSWORD.encode() not in seen["cmdline"] + seen["environ"]
    assert b"PGPASSFILE" not in seen["environ"] and b"OPENCODE_GATEWAY_LEDGER" not in seen["environ"]
    for name, content in seen["files"].items():
        assert PASSWORD.encode() not in content, name
    assert PASSWORD not in json.dumps(result.to_dict(), default=str)
    [row] = select(LedgerLocation.of(url, tmp_path), "SELECT run_id, stop_reason, cost, metadata FROM runs")
    assert (row[0], row[1], json.loads(row[3])) == (result.run_id, "done", {"ticket": "ENG-412"})
    assert result.cost and row[2] == pytest.approx(result.cost, abs=1e-12)


def _batch(tasks: Path, home: Path, config: Path, ledger: str, opencode_bin: str, api_base: str) -> subprocess.Popen:
    """`opencode-gateway batch` as a second machine would run it: a data dir of its own."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "opencode_gateway", "batch", str(tasks), "-m", "openai/gpt-4o-mini",
            "--api-base", api_base, "--api-key", "sk-provider", "--config", str(config), "--concurrency", "3",
            "--metadata", "ticket=ENG-7", "--opencode-bin", opencode_bin, "--json",
        ],
        env={**os.environ, "OPENCODE_GATEWAY_HOME": str(home), "OPENCODE_GATEWAY_LEDGER": ledger},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_five_runs_from_two_machines_under_a_ticket_s_day_cap_make_at_most_its_calls(
    backend: str, upstream: ScriptedUpstream, opencode_bin: str, postgres: Postgres, tmp_path: Path
) -> None:
    """Measured on the landed product: 5 upstream calls under max_requests 3 (each process
    decided alone)."""
    ledger = postgres.create_database() if backend == "postgresql" else str(tmp_path / "ledger.db")
    upstream.fallback = lambda body: Reply(text="slow answer " * 8, chunk_delay=0.25, usage=usage(100, 10))
    config = tmp_path / "settings.yaml"
    config.write_text("budgets:\n  ticket: {per: day, max_requests: 3}\n")
    processes = []
    for machine, count in (("laptop", 3), ("runner", 2)):
        tasks = tmp_path / machine / "tasks.jsonl"
        tasks.parent.mkdir()
        tasks.write_text("".join(json.dumps({"id": f"{machine}-{n}", "prompt": "go"}) + "\n" for n in range(count)))
        processes.append(_batch(tasks, tmp_path / machine / "home", config, ledger, opencode_bin, upstream.url))
    outputs = [process.communicate(timeout=600) for process in processes]
    assert len(upstream.requests) <= 3, [len(upstream.requests), outputs]
    report = subprocess.run(
        [sys.executable, "-m", "opencode_gateway", "report", "--by", "outcome", "--format", "json", "--ledger", ledger],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    groups = {group["key"]: group for group in json.loads(report.stdout)["groups"]}
    assert sum(group["runs"] for group in groups.values()) == 5
    # What the cap let out is what the report calls requests; the runs past it were refused
    total = json.loads(report.stdout)["total"]
    assert total["requests"] == len(upstream.requests) and total["refused"] >= 5 - 3, total
    assert groups["done"]["requests"] <= 3 and groups["budget_exceeded"]["input_tokens"] == 0, (
        groups
    )  # refused at the endpoint
    assert PASSWORD not in "".join(out + err for out, err in outputs) + report.stdout + report.stderr


@pytest.mark.parametrize("database", ["no_such_db", "postgres"])
def test_a_run_on_a_ledger_that_refuses_the_connection_is_exit_2_before_opencode_starts(
    database: str, postgres: Postgres, opencode_bin: str, workdir: Path
) -> None:
    password = PASSWORD if database == "no_such_db" else f"wrong-{PASSWORD}"
    url = f"postgresql://llmproxy:{password}@127.0.0.1:{postgres.port}/{database}"
    result = cli(
        *["run", "hi", "-m", "openai/gpt-4o-mini", "--api-base", "http://127.0.0.1:9/v1", "--ledger", url],
        *["--opencode-bin", opencode_bin, "--workdir", str(workdir)],
    )
    assert result.returncode == 2 and "refused the connection" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and PASSWORD not in result.stderr and "***" in result.stderr


def test_every_file_libpq_reads_for_the_ledger_is_hidden_from_the_agent_even_in_its_workdir(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, postgres: Postgres, tmp_path: Path
) -> None:
    """The URL names a password file in the workdir (`?passfile=`), and libpq's variables a service
    file and a TLS key there: the run connects with them, and the agent that cats them sees none."""
    database = postgres.create_database().rsplit("/", 1)[1]
    passfile, service, key = workdir / ".pgpass-url", workdir / ".pg_service.conf", workdir / "client.key"
    passfile.write_text(f"127.0.0.1:{postgres.port}:*:llmproxy:{PASSWORD}\n")
    passfile.chmod(0o600)
    service.write_text(f"[team]\npassword={PASSWORD}\n")
    key.write_text(f"key {PASSWORD}\n")
    url = f"postgresql://llmproxy@127.0.0.1:{postgres.port}/{database}?passfile={passfile}"
    command = "cat .pgpass-url .pg_service.conf client.key; echo end"
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": command, "description": "look"})], usage=usage(100, 5)),
        Reply(text="looked", usage=usage(200, 5)),
    )
    environ = {**os.environ, "PGSERVICEFILE": str(service), "PGSSLKEY": str(key)}
    environ.pop("PGPASSWORD", None)
    result = run(
        "Look", model="openai/gpt-4o-mini", api_base=upstream.url, api_key="sk-provider", workdir=workdir,
        settings=settings.replace(ledger=url, environ=environ, sandbox="bwrap"),
    )  # fmt: skip
    assert result.ok, result.error
    [output] = [e.output for e in result.events if isinstance(e, ToolResult)]
    assert "end" in output.splitlines() and PASSWORD not in output, output  # the command ran, and saw no password
    assert PASSWORD in passfile.read_text() and PASSWORD in service.read_text()  # hidden, not touched
    [row] = select(LedgerLocation.of(url, tmp_path), "SELECT run_id FROM runs")
    assert row[0] == result.run_id
