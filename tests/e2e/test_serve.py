"""`serve` end to end: a real `opencode-gateway serve` process, real OpenCode sessions launched
through `opencode-gateway opencode`, the scripted model behind. Every session is one ledger run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from opencode_gateway import _litellm
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage
from tests.support.serving import CLI, launch, sessions

pytestmark = pytest.mark.e2e


def test_two_opencode_sessions_through_one_server_are_two_ledger_runs(
    server: subprocess.Popen[str],
    upstream: ScriptedUpstream,
    env: dict[str, str],
    gateway_home: Path,
    workdir: Path,
) -> None:
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "run it"})], usage=usage(1000, 40)),
        Reply(text="First done.", usage=usage(1300, 12)),
        Reply(text="Second done.", usage=usage(800, 5)),
    )
    first = launch(env, workdir, "--metadata", "ticket=ENG-1", "--", "run", "--format", "json", "--title", "a", "first")
    second = launch(
        env,
        workdir,
        "--metadata",
        "ticket=ENG-2",
        "--tag",
        "pairing",
        "--",
        "run",
        "--format",
        "json",
        "--title",
        "b",
        "second",
    )
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    [session_a], [session_b] = sessions(first.stdout), sessions(second.stdout)
    assert session_a != session_b
    # Three calls reached the model, with the server's provider key (which OpenCode never had).
    assert [r["headers"]["authorization"] for r in upstream.requests] == ["Bearer sk-provider"] * 3
    assert not any(name.startswith("x-opencode-gateway") for r in upstream.requests for name in r["headers"])

    state = json.loads((gateway_home / "serve" / "server.json").read_text())
    token = Path(state["token_file"]).read_text()
    stats = httpx.get(state["url"] + "/stats", headers={"authorization": f"Bearer {token}"}).json()
    by_session = {s["session_id"]: s for s in stats["sessions"]}
    assert (by_session[session_a]["requests"], by_session[session_a]["input_tokens"]) == (2, 2300)
    assert (by_session[session_b]["requests"], by_session[session_b]["input_tokens"]) == (1, 800)

    server.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0
    assert not (gateway_home / "serve" / "server.json").exists()
    prices = _litellm.load().model_cost["gpt-4o-mini"]
    ledger = sqlite3.connect(gateway_home / "ledger.db")
    runs = {
        row[0]: row[1:]
        for row in ledger.execute(
            "SELECT session_id, requests, input_tokens, output_tokens, cost, stop_reason, metadata, tags, workdir "
            "FROM runs"
        )
    }
    assert set(runs) == {session_a, session_b}
    assert runs[session_a][:3] == (2, 2300, 52) and runs[session_b][:3] == (1, 800, 5)
    for session, (input_tokens, output_tokens) in ((session_a, (2300, 52)), (session_b, (800, 5))):
        expected = input_tokens * prices["input_cost_per_token"] + output_tokens * prices["output_cost_per_token"]
        assert runs[session][3] == pytest.approx(expected, rel=1e-12)
        assert runs[session][4] == "done" and runs[session][7] == str(workdir)
    assert json.loads(runs[session_a][5]) == {"ticket": "ENG-1"}
    assert "pairing" in json.loads(runs[session_b][6])

    report = subprocess.run(
        [*CLI, "report", "--by", "session", "--format", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    groups = {g["key"]: g for g in json.loads(report.stdout)["groups"]}
    assert groups[session_a]["requests"] == 2 and groups[session_b]["requests"] == 1


def test_env_prints_exports_without_secrets(
    server: subprocess.Popen[str], env: dict[str, str], gateway_home: Path, workdir: Path
) -> None:
    shared = workdir.parent / "shared.yaml"  # the settings file `serve` might use too, key included
    shared.write_text("model: openai/gpt-4o-mini\napi_key: sk-provider\nmetadata: {ticket: ENG-7}\n")
    result = subprocess.run(
        [*CLI, "env", "--config", str(shared)],
        cwd=workdir,
        env={**env, "OPENAI_API_KEY": "sk-env-secret"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    url = json.loads((gateway_home / "serve" / "server.json").read_text())["url"]
    assert "unset OPENAI_API_KEY" in result.stdout.splitlines()
    assert f"{url}/v1" in result.stdout and "export OPENCODE_DISABLE_PROJECT_CONFIG=1" in result.stdout
    assert "sk-env-secret" not in result.stdout and "sk-provider" not in result.stdout
    admin = Path(json.loads((gateway_home / "serve" / "server.json").read_text())["token_file"]).read_text()
    assert admin not in result.stdout  # the launch has a token of its own, minted for its attribution
    [launch_token] = (gateway_home / "tui").glob("launch_*/token")
    assert f"{{file:{launch_token}}}" in result.stdout and launch_token.stat().st_mode & 0o777 == 0o600
    assert "ENG-7" not in result.stdout  # attribution is the server's record, not a header OpenCode sends


def test_launching_without_a_server_says_how_to_start_one(env: dict[str, str], workdir: Path) -> None:
    result = launch(env, workdir)
    assert result.returncode == 2
    assert "no opencode-gateway server is running: start one with `opencode-gateway serve`" in result.stderr


def test_the_docs_tui_recipe_finds_the_server_and_its_gateway_without_the_shell_repeating_them(
    upstream: ScriptedUpstream,
    gateway_home: Path,
    env: dict[str, str],
    workdir: Path,
    opencode_bin: str,
    generation: int,
) -> None:
    """docs/cli.md's `( eval "$(opencode-gateway env -m litellm_proxy/team-a)"; opencode )`, in a
    shell that knows neither the gateway's URL nor its key: serve knows both (here the scripted
    model stands in for the gateway), and says where the gateway is in its state file."""
    shell = {k: v for k, v in env.items() if not k.startswith(("LITELLM_PROXY_", "OPENCODE_BIN"))}
    shell["PATH"] = f"{Path(sys.executable).parent}:{Path(opencode_bin).parent}:{os.environ['PATH']}"
    served = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--api-base", upstream.url, "--api-key", "sk-team"],
        env={**env, "LITELLM_PROXY_API_BASE": "", "LITELLM_PROXY_API_KEY": ""},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (gateway_home / "serve" / "server.json").exists():
            assert served.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        upstream.script(Reply(text="Hello from the group.", usage=usage(100, 5)))
        # The TUI is `opencode`; headless, the same launch runs one prompt (2.x: with no service left)
        opencode = "opencode run --format json --title t" + (" --standalone" if generation == 2 else "")
        recipe = (
            f'( eval "$(opencode-gateway env -m litellm_proxy/team-a --opencode-bin {opencode_bin})"; {opencode} hi )'
        )
        result = subprocess.run(
            ["bash", "-c", recipe], cwd=workdir, env=shell, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0 and "Hello from the group." in result.stdout, result.stderr[-3000:]
        [request] = [r for r in upstream.requests if r["body"].get("tools")]
        assert request["body"]["model"] == "team-a" and request["headers"]["authorization"] == "Bearer sk-team"
        assert "sk-team" not in result.stdout + result.stderr
    finally:
        served.send_signal(signal.SIGTERM)
        served.wait(30)


def _cpu_s(pid: int) -> float:
    """CPU time (user + system) a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_serve_exits_at_once_on_sigterm_after_litellm_served(
    server: subprocess.Popen[str], upstream: ScriptedUpstream, gateway_home: Path
) -> None:
    """SDK mode loads litellm; freeing its objects at interpreter exit took about a second of CPU
    (several seconds under load), which a supervisor stopping the server waits through. It closes
    everything, then exits without that teardown. The CPU it spends from the signal to its exit
    is what load stretches, so that is what is bounded; the wall time is checked generously."""
    state = json.loads((gateway_home / "serve" / "server.json").read_text())
    admin = Path(state["token_file"]).read_text().strip()
    token = httpx.post(
        state["url"] + "/launches",
        json={"metadata": {"ticket": "ENG-9"}, "model": "openai/gpt-4o-mini"},
        headers={"authorization": f"Bearer {admin}"},
        timeout=30,
    ).json()["token"]
    upstream.script(Reply(text="hi", usage=usage(10, 2)))
    reply = httpx.post(
        state["url"] + "/v1/chat/completions",
        timeout=120,
        headers={"authorization": f"Bearer {token}"},
        json={"model": "openai/gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    )
    assert reply.status_code == 200 and "hi" in reply.text
    cpu_before = _cpu_s(server.pid)
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    _, status, usage_at_exit = os.wait4(server.pid, 0)
    exited = time.monotonic()
    assert os.waitstatus_to_exitcode(status) == 0
    assert usage_at_exit.ru_utime + usage_at_exit.ru_stime - cpu_before < 0.25  # ~0.03 s; ~0.8 s with the teardown
    assert exited - signalled < 5
    [(requests, stop_reason)] = (
        sqlite3.connect(gateway_home / "ledger.db").execute("SELECT requests, stop_reason FROM runs").fetchall()
    )
    assert (requests, stop_reason) == (1, "done")  # closed before the exit, not lost by it


def test_a_title_call_goes_to_the_small_model_and_is_recorded_with_its_purpose_and_price(
    server: subprocess.Popen[str],
    upstream: ScriptedUpstream,
    env: dict[str, str],
    gateway_home: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    titled = threading.Event()

    def answer(body: dict[str, Any]) -> Reply:
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        if "You are a title generator" in json.dumps(system):
            titled.set()
            return Reply(text="Greeting the user", usage=usage(300, 4))
        # The run's answer waits for the title call, which OpenCode skips once the run is over.
        return Reply(text="Hello " * 10, usage=usage(1000, 20), hang=60, until=titled.is_set)

    monkeypatch.setattr(upstream, "fallback", answer)
    launched = subprocess.run(
        [
            *CLI,
            "opencode",
            "-m",
            "openai/gpt-4o-mini",
            "--small-model",
            "openai/gpt-4.1-nano",
            "--",
            "run",
            "--format",
            "json",
            "say hello",
        ],
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert launched.returncode == 0, launched.stderr
    by_model = {r["body"]["model"]: r for r in upstream.requests}
    assert set(by_model) == {"gpt-4o-mini", "gpt-4.1-nano"}  # the title went to the small model
    server.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0
    rows = (
        sqlite3.connect(gateway_home / "ledger.db")
        .execute("SELECT model, purpose, input_tokens, cost FROM requests ORDER BY purpose")
        .fetchall()
    )
    prices = _litellm.load().model_cost
    assert [(m, p, t) for m, p, t, _ in rows] == [
        ("openai/gpt-4o-mini", "main", 1000),
        ("openai/gpt-4.1-nano", "title", 300),
    ]
    nano = prices["gpt-4.1-nano"]
    assert rows[1][3] == pytest.approx(300 * nano["input_cost_per_token"] + 4 * nano["output_cost_per_token"], rel=1e-9)
    report = subprocess.run(
        [*CLI, "report", "--by", "purpose", "--format", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert {g["key"]: g["requests"] for g in json.loads(report.stdout)["groups"]} == {"main": 1, "title": 1}
