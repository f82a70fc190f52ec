"""Exact accounting, end to end: real OpenCode -> our endpoint -> real litellm or a gateway -> the
scripted model; the ledger and the report read back what happened."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.accounting.pricing import Price
from opencode_gateway.config.settings import Settings
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, anthropic_usage, usage

pytestmark = pytest.mark.e2e

SONNET = {"input": 3e-06, "output": 1.5e-05, "cache_read": 3e-07, "cache_write": 3.75e-06}  # USD per token


def test_anthropic_through_litellms_adapter_is_priced_with_cache_reads_and_writes(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    turns = [
        anthropic_usage(200, 80, cache_read=9000, cache_write=500),
        anthropic_usage(150, 20, cache_read=9500, cache_write=300),
    ]
    upstream.script(
        Reply(
            text="Writing.",
            tool_calls=[ToolCall("write", {"filePath": str(workdir / "a.py"), "content": "x = 1\n"})],
            usage=turns[0],
        ),
        Reply(text="Done.", usage=turns[1]),
    )
    result = run(
        "Write a.py",
        model="anthropic/claude-sonnet-4-5",
        api_base=f"http://127.0.0.1:{upstream.port}",
        api_key="sk-ant-test",
        workdir=workdir,
        settings=settings,
    )
    assert result.ok, result.error
    assert [r["path"] for r in upstream.requests] == ["/v1/messages", "/v1/messages"]
    assert (workdir / "a.py").read_text() == "x = 1\n"  # the tool call survived the Anthropic adapter
    by_hand = sum(
        t["input_tokens"] * SONNET["input"]
        + t["cache_read_input_tokens"] * SONNET["cache_read"]
        + t["cache_creation_input_tokens"] * SONNET["cache_write"]
        + t["output_tokens"] * SONNET["output"]
        for t in turns
    )
    assert result.cost == pytest.approx(by_hand, rel=1e-9)
    assert result.usage.cache_read_tokens == 18_500 and result.usage.cache_write_tokens == 800
    assert result.usage.input_tokens == 350 + 18_500 + 800 and result.usage.output_tokens == 100
    assert result.cost_sources == {"litellm": 2}


def test_a_configured_price_prices_a_gateway_group(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="ok", usage=usage(10_000, 500, cached=8_000)))
    priced = settings.replace(
        pricing={
            "team-coder": {
                "input_cost_per_million": 0.5,
                "output_cost_per_million": 2.0,
                "cache_read_cost_per_million": 0.05,
            }
        }
    )
    assert isinstance(priced.pricing["team-coder"], Price)
    result = run(
        "Hi", model="litellm_proxy/team-coder", api_base=upstream.url, api_key="sk-v", workdir=workdir, settings=priced
    )
    assert result.cost == pytest.approx((2_000 * 0.5 + 8_000 * 0.05 + 500 * 2.0) / 1e6, rel=1e-12)
    assert result.cost_sources == {"config": 1} and result.warnings == ()


def test_a_cost_the_gateway_reports_in_the_stream_wins(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="ok", usage=usage(1000, 10, cost=0.0123)))
    result = run(
        "Hi",
        model="litellm_proxy/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-v",
        workdir=workdir,
        settings=settings,
    )
    assert result.cost == 0.0123 and result.cost_sources == {"reported": 1}


def test_a_stream_without_usage_is_flagged_never_zero(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    # Gateway mode: the stream arrives as the server sent it. (In SDK mode litellm fills in its own
    # token-counter estimate, unmarked; docs/costs.md.)
    upstream.script(Reply(text="no usage from me", omit_usage=True))
    result = run(
        "Hi",
        model="litellm_proxy/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-v",
        workdir=workdir,
        settings=settings,
    )
    assert result.ok and result.usage.usage_missing_requests == 1
    assert result.cost is None and result.requests[0].usage_missing and not result.requests[0].estimated
    assert any("reported no usage" in w and "estimate_usage" in w for w in result.warnings)


def test_missing_usage_can_be_estimated(upstream: ScriptedUpstream, workdir: Path, settings: Settings) -> None:
    upstream.script(Reply(text="an answer of some words " * 10, omit_usage=True))
    result = run(
        "Hi",
        model="litellm_proxy/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-v",
        workdir=workdir,
        settings=settings.replace(estimate_usage=True),
    )
    [request] = result.requests
    assert request.usage_missing and request.estimated and request.usage is not None
    assert request.usage.input_tokens > 1000  # OpenCode's system prompt alone is ~2,500 tokens
    assert 40 < request.usage.output_tokens < 80
    assert result.cost is not None and result.cost > 0
    assert any("estimated" in w for w in result.warnings)


def test_the_ledger_holds_the_run_and_report_sums_it(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    for ticket, prompt_tokens in (("ENG-1", 1000), ("ENG-2", 3000), ("ENG-1", 500)):
        upstream.script(Reply(text="ok", usage=usage(prompt_tokens, 10)))
        result = run(
            "Hi",
            model="openai/gpt-4o-mini",
            api_base=upstream.url,
            api_key="sk-p",
            workdir=workdir,
            metadata={"ticket": ticket},
            settings=settings.replace(ledger=ledger),
        )
        assert result.ok
    db = sqlite3.connect(ledger)
    assert db.execute("SELECT count(*), sum(input_tokens) FROM requests").fetchone() == (3, 4500)
    run_row = db.execute(
        "SELECT stop_reason, requests, input_tokens, metadata, ended_at IS NOT NULL FROM runs WHERE run_id = ?",
        (result.run_id,),
    ).fetchone()
    assert run_row == ("done", 1, 500, '{"ticket": "ENG-1"}', 1)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "opencode_gateway",
            "report",
            "--by",
            "ticket",
            "--ledger",
            str(ledger),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    groups = {g["key"]: g for g in json.loads(out.stdout)["groups"]}
    assert (groups["ENG-1"]["runs"], groups["ENG-1"]["input_tokens"]) == (2, 1500)
    assert (groups["ENG-2"]["runs"], groups["ENG-2"]["input_tokens"]) == (1, 3000)
    assert groups["ENG-2"]["cost"] > groups["ENG-1"]["cost"] > 0
    csv_out = subprocess.run(
        [sys.executable, "-m", "opencode_gateway", "report", "--ledger", str(ledger), "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert csv_out.splitlines()[0].startswith("ticket,runs,requests,refused,input,output")
    assert csv_out.splitlines()[-1].startswith("TOTAL,3,3,0,4500,30")


def _kill_processes_in(directory: Path) -> None:
    """OpenCode runs in its own session: after a kill -9 of the CLI it is an orphan to clean up."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cwd").resolve() == directory:
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


def test_kill_9_mid_run_keeps_every_finished_request(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    upstream.script(
        Reply(
            tool_calls=[ToolCall("write", {"filePath": str(workdir / "a.txt"), "content": "a"})], usage=usage(1000, 5)
        ),
        Reply(
            tool_calls=[ToolCall("write", {"filePath": str(workdir / "b.txt"), "content": "b"})], usage=usage(1100, 6)
        ),
        Reply(text="slow " * 200, chunk_delay=0.5),  # the third request is still streaming at the kill
    )
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "opencode_gateway",
            "run",
            "-m",
            "openai/gpt-4o-mini",
            "--api-base",
            upstream.url,
            "--api-key",
            "sk-p",
            "--opencode-bin",
            opencode_bin,
            "--workdir",
            str(workdir),
            "--ledger",
            str(ledger),
            "--metadata",
            "ticket=ENG-7",
            "write two files",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while len(upstream.requests) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(upstream.requests) == 3, "the run never reached its third request"
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=10)
    finally:
        cli.kill()
        _kill_processes_in(workdir.resolve())
    db = sqlite3.connect(ledger)
    rows = db.execute("SELECT input_tokens, output_tokens, cost_source FROM requests ORDER BY started_at").fetchall()
    assert rows == [(1000, 5, "litellm"), (1100, 6, "litellm")]
    assert db.execute("SELECT metadata, ended_at FROM runs").fetchone() == ('{"ticket": "ENG-7"}', None)
