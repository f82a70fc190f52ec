"""Team runs through a real LiteLLM proxy (litellm[proxy], real PostgreSQL): virtual keys, tags,
spend logs. The chain is real OpenCode -> our endpoint -> the real proxy -> the scripted model.

If Postgres or the proxy cannot start, these tests fail with the reason: no silent skip."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from opencode_gateway import arun, run, stream
from opencode_gateway.accounting.run import RunAccount
from opencode_gateway.config.settings import Settings
from opencode_gateway.endpoint.app import Endpoint, Target, create_app
from opencode_gateway.endpoint.routing import RunRouter
from opencode_gateway.endpoint.server import EndpointServer
from opencode_gateway.endpoint.tagging import Tagging
from opencode_gateway.endpoint.upstream import ProxyUpstream
from opencode_gateway.errors import BudgetExceeded
from opencode_gateway.events import Done
from tests.support.gateway_proxy import new_key, spend_rows
from tests.support.litellm_proxy import LiteLLMProxy
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def gateway_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opencode_gateway", *args], capture_output=True, text=True, timeout=180
    )


def test_a_scoped_key_run_is_tagged_and_its_spend_matches_the_ledger(
    proxy: LiteLLMProxy,
    upstream: ScriptedUpstream,
    workdir: Path,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    generation: int,
) -> None:
    key = new_key(proxy, models=["team-a"], key_alias=f"alias-a-{generation}")  # aliases are the proxy's, unique
    upstream.script(
        Reply(
            tool_calls=[ToolCall("write", {"filePath": str(workdir / "a.py"), "content": "x = 1\n"})],
            usage=usage(12_000, 80, cached=9_000),
        ),
        Reply(text="Done.", usage=usage(12_400, 12, cached=11_500)),
    )
    caplog.set_level(logging.DEBUG)
    events = list(
        stream(
            "Write a.py",
            model="litellm_proxy/team-a",
            api_base=proxy.url,
            api_key=key,
            metadata={"ticket": "ENG-412"},
            workdir=workdir,
            settings=settings,
        )
    )
    shown = [json.dumps(e.to_dict()) for e in events]
    done = events[-1]
    assert isinstance(done, Done) and done.result.ok, done.result.error
    result = done.result
    assert (workdir / "a.py").exists()
    assert result.cost_sources == {"reported": 2}  # the proxy's usage.cost in the stream
    rows = spend_rows(proxy, result.run_id, expected=2)
    assert len(rows) == 2
    ledger = sqlite3.connect(settings.ledger_location.path)
    ours = dict(ledger.execute("SELECT response_id, cost FROM requests WHERE run_id = ?", (result.run_id,)).fetchall())
    for row in rows:
        assert {"harness", "opencode", "ticket:ENG-412"} <= set(row["request_tags"])
        assert row["metadata"]["spend_logs_metadata"] == {"ticket": "ENG-412"}
        assert row["session_id"] == result.run_id
        assert row["spend"] == pytest.approx(ours[row["request_id"]], abs=1e-9)
    # The virtual key is in no log line and no event.
    assert key not in "\n".join(r.getMessage() for r in caplog.records) + "\n".join(shown)

    reconciled = gateway_cli(
        "report",
        "--reconcile",
        "--api-base",
        proxy.url,
        "--api-key",
        proxy.master_key,
        "--run",
        result.run_id,
        "--ledger",
        str(settings.ledger_location),
    )
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert reconciled.stdout.count(" ok") == 2 and "2 request(s), 0 not matching" in reconciled.stdout
    ledger.execute("UPDATE requests SET cost = cost + 1e-6 WHERE run_id = ?", (result.run_id,))
    ledger.commit()
    tampered = gateway_cli(
        "report",
        "--reconcile",
        "--api-base",
        proxy.url,
        "--api-key",
        proxy.master_key,
        "--run",
        result.run_id,
        "--ledger",
        str(settings.ledger_location),
        "--format",
        "json",
    )
    assert tampered.returncode == 1
    assert {line["status"] for line in json.loads(tampered.stdout)} == {"differs"}
    # A key that may not read spend logs is a usage problem (exit 2), not a difference (it was exit 1).
    refused = gateway_cli(
        "report",
        "--reconcile",
        "--api-base",
        proxy.url,
        "--api-key",
        key,
        "--run",
        result.run_id,
        "--ledger",
        str(settings.ledger_location),
    )
    assert refused.returncode == 2 and "needs an admin key" in refused.stderr and key not in refused.stderr


def test_a_key_that_may_not_use_the_group_fails_before_any_model_call(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, generation: int
) -> None:
    key = new_key(proxy, models=["team-a"], key_alias=f"alias-scoped-{generation}")
    started = time.monotonic()
    result = gateway_cli(
        "run",
        "-m",
        "litellm_proxy/team-b",
        "--api-base",
        proxy.url,
        "--api-key",
        key,
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "hi",
    )
    assert result.returncode == 2
    message = result.stderr.strip()
    assert (
        "model group 'team-b'" in message and f"'alias-scoped-{generation}'" in message and "may use: team-a" in message
    )
    assert key not in message
    assert upstream.requests == []  # checked while OpenCode started; OpenCode stopped before any call
    assert time.monotonic() - started < 30


def test_an_invalid_key_is_a_clear_error_with_exit_2(proxy: LiteLLMProxy, workdir: Path, opencode_bin: str) -> None:
    result = gateway_cli(
        "run",
        "-m",
        "litellm_proxy/team-a",
        "--api-base",
        proxy.url,
        "--api-key",
        "sk-not-a-key",
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "hi",
    )
    assert result.returncode == 2
    assert "refused the key (HTTP 401" in result.stderr and "--api-key" in result.stderr


def test_an_unreachable_gateway_is_named_within_seconds(workdir: Path, opencode_bin: str) -> None:
    started = time.monotonic()
    ledger = workdir.parent / "ledger.db"
    result = gateway_cli(
        "run",
        "-m",
        "litellm_proxy/team-a",
        "--api-base",
        "http://127.0.0.1:9",
        "--api-key",
        "sk-x",
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "--ledger",
        str(ledger),
        "hi",
    )
    assert result.returncode == 2 and "cannot reach the LiteLLM gateway at http://127.0.0.1:9" in result.stderr
    assert time.monotonic() - started < 30  # a refused connection is not retried for minutes
    # The check ran while OpenCode started; the run's row says how it ended, with no request.
    [row] = sqlite3.connect(ledger).execute("SELECT stop_reason, error, requests FROM runs").fetchall()
    assert row[0] == "error" and "cannot reach the LiteLLM gateway" in row[1] and not row[2]


def test_a_spent_budget_ends_the_run_promptly(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    key = new_key(proxy, models=["team-a"], max_budget=0.001)
    upstream.script(Reply(text="expensive", usage=usage(2_000_000, 10)))  # 2 USD at team-a's price
    spent = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "team-a", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert spent.status_code == 200
    deadline = time.monotonic() + 40
    while proxy.call("GET", "/key/info", key=key)[1]["info"]["spend"] < 0.001 and time.monotonic() < deadline:
        time.sleep(0.5)
    upstream.script(Reply(text="never"))
    started = time.monotonic()
    # Refused at preflight (/v1/models) or at the first call, the run ends the same way.
    result = run(
        "Hi", model="litellm_proxy/team-a", api_base=proxy.url, api_key=key, workdir=workdir, settings=settings
    )
    assert result.stop_reason == "budget_exceeded" and isinstance(result.error, BudgetExceeded)
    assert "budget" in str(result.error).lower() and result.cost == 0
    assert time.monotonic() - started < 60  # not OpenCode's minutes of retries
    assert upstream.requests == []


async def test_spoofed_tags_and_metadata_never_reach_the_spend_log(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream
) -> None:
    key = new_key(proxy, models=["team-a"])
    session = "run_spoof_test"
    upstream_ = ProxyUpstream(proxy.url, "team-a", key)
    tagging = Tagging(("ours",), {"ticket": "ENG-1"}, session_id=session)
    endpoint = Endpoint(
        router=RunRouter("run-token", Target("litellm_proxy/team-a", upstream_, tagging, RunAccount())), secrets=(key,)
    )
    upstream.script(Reply(text="a"), Reply(text="b"))
    async with EndpointServer(create_app(endpoint)) as server, httpx.AsyncClient(timeout=60) as client:
        headers = {
            "authorization": "Bearer run-token",
            "x-litellm-tags": "free-lunch",
            "x-litellm-spend-logs-metadata": '{"ticket": "SOMEONE-ELSE"}',
            "x-litellm-session-id": "other",
        }
        for body in (
            {"metadata": {"tags": ["free-lunch"], "spend_logs_metadata": {"ticket": "SOMEONE-ELSE"}}},
            {"tags": ["free-lunch"], "user": "mallory", "litellm_metadata": {"tags": ["free-lunch"]}},
        ):
            response = await client.post(
                f"{server.url}/v1/chat/completions",
                headers=headers,
                json={"model": "x", "stream": True, "messages": [{"role": "user", "content": "hi"}], **body},
            )
            assert response.status_code == 200
    await upstream_.aclose()
    rows = spend_rows(proxy, session, expected=2)
    assert len(rows) == 2
    for row in rows:
        assert "free-lunch" not in row["request_tags"] and "ours" in row["request_tags"]
        assert row["metadata"]["spend_logs_metadata"] == {"ticket": "ENG-1"}
        assert row["user"] in ("", None)
    assert spend_rows(proxy, "other", expected=0, timeout=0) == []


async def test_arun_works_in_gateway_mode_too(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    key = new_key(proxy, models=["team-b"])
    upstream.script(Reply(text="async ok", usage=usage(1000, 10)))
    result = await arun(
        "Hi", model="litellm_proxy/team-b", api_base=proxy.url, api_key=key, workdir=workdir, settings=settings
    )
    assert result.ok and result.text == "async ok"
    assert result.cost == pytest.approx(1000 * 3e-06 + 10 * 1.5e-05, rel=1e-9)  # team-b's prices, reported


def test_doctor_checks_the_gateway_the_key_and_the_group(
    proxy: LiteLLMProxy, opencode_bin: str, tmp_path: Path
) -> None:
    key = new_key(proxy, models=["team-a"])
    common = (
        "--api-base",
        proxy.url,
        "--api-key",
        key,
        "--opencode-bin",
        opencode_bin,
        "--ledger",
        str(tmp_path / "ledger.db"),
        "--json",
    )
    allowed = gateway_cli("doctor", "-m", "litellm_proxy/team-a", *common)
    assert allowed.returncode == 0, allowed.stdout
    assert [(c["name"], c["ok"]) for c in json.loads(allowed.stdout)][4:] == [
        ("reachable", True),
        ("key", True),
        ("group", True),
    ]
    refused = gateway_cli("doctor", "-m", "litellm_proxy/team-b", *common)
    assert refused.returncode == 1
    checks = json.loads(refused.stdout)[4:]
    assert [(c["name"], c["ok"]) for c in checks] == [("reachable", True), ("key", True), ("group", False)]
    assert "may not use model group 'team-b'" in checks[2]["detail"] and key not in refused.stdout
    bad_key = gateway_cli("doctor", "-m", "litellm_proxy/team-a", *common[:2], "--api-key", "sk-not-a-key", *common[4:])
    assert [(c["name"], c["ok"]) for c in json.loads(bad_key.stdout)][4:] == [
        ("reachable", True),
        ("key", False),
        ("group", None),
    ]


def test_non_ascii_tags_and_metadata_reach_the_gateways_spend_log_as_given(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="Bonjour.", usage=usage(1000, 10)))
    result = run(
        "Dis bonjour",
        model="litellm_proxy/team-a",
        api_base=proxy.url,
        api_key=new_key(proxy),
        tags=["équipe"],
        metadata={"ticket": "ENG-1", "owner": "Zoë 山田"},
        workdir=workdir,
        settings=settings,
    )
    assert result.ok, result.error
    [row] = spend_rows(proxy, result.run_id, expected=1)
    assert {"harness", "opencode", "équipe", "ticket:ENG-1"} <= set(row["request_tags"])
    assert row["metadata"]["spend_logs_metadata"] == {"ticket": "ENG-1", "owner": "Zoë 山田"}
