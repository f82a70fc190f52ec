"""Traces end to end: the real CLI running real OpenCode (and `serve`, and a batch), exporting
over OTLP to a real Arize Phoenix, the spans read back with Phoenix's own client: every run,
request and tool span with the right parent, each cost equal to the ledger's; nothing secret in
anything Phoenix received; a dead collector changes nothing about the run."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from tests.support.inspection import PRINT_RUN_TOKEN
from tests.support.phoenix import Phoenix
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage
from tests.support.serving import CLI, launch

pytestmark = pytest.mark.e2e
KEY = "sk-live-4f9a1c7e2b8d6035aa17c9e2"  # the provider key this run holds, key-shaped
GITHUB = "ghp_tracedaway0123456789abcdefABCDEF"  # a token passed to the agent on purpose


def _config(tmp_path: Path, endpoint: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(f"otel:\n  endpoint: {endpoint}\n")
    return config


def _run_argv(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, config: Path, prompt: str, *extra: str
) -> list[str]:
    argv = [*CLI, "run", "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", KEY, "--opencode-bin"]
    argv += [opencode_bin, "--workdir", str(workdir), "--config", str(config), "--ledger", str(tmp_path / "ledger.db")]
    return [*argv, "--json", *extra, prompt]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "h")}


def _run(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, config: Path, prompt: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    argv = _run_argv(upstream, opencode_bin, workdir, tmp_path, config, prompt, *extra)
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, env=_env(tmp_path))


def _batch(
    upstream: ScriptedUpstream,
    opencode_bin: str,
    tmp_path: Path,
    phoenix: Phoenix,
    tasks: Path,
    batch_id: str,
    *extra: str,
) -> subprocess.CompletedProcess[str]:
    env = _env(tmp_path)
    env.pop("RAY_ADDRESS", None)  # with --executor ray: a local Ray instance of the driver's own
    argv = [*CLI, "batch", str(tasks), "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", KEY]
    argv += ["--opencode-bin", opencode_bin, "--config", str(_config(tmp_path, phoenix.traces_endpoint))]
    argv += ["--ledger", str(tmp_path / "ledger.db"), "--batch-id", batch_id, *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)


def _ledger(tmp_path: Path, run_id: str) -> tuple[float, dict[str, float]]:
    db = sqlite3.connect(tmp_path / "ledger.db")
    [(run_cost,)] = db.execute("SELECT cost FROM runs WHERE run_id = ?", (run_id,)).fetchall()
    requests = dict(db.execute("SELECT request_id, cost FROM requests WHERE run_id = ?", (run_id,)).fetchall())
    return run_cost, requests


def _named(spans: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith(prefix)]


def test_a_run_is_a_trace_of_its_requests_and_tools_with_the_ledgers_cost(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, phoenix: Phoenix
) -> None:
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "say hi"})], usage=usage(1000, 20)),
        Reply(text="It printed hi.", usage=usage(1200, 30, cached=800)),
    )
    config = _config(tmp_path, phoenix.traces_endpoint)
    result = _run(upstream, opencode_bin, workdir, tmp_path, config, "say hi with bash", "--metadata", "ticket=ENG-412")
    assert result.returncode == 0, result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    spans = phoenix.trace_of("opencode_gateway.run_id", run_id, spans=4)
    [root] = [s for s in spans if s["parent_id"] is None]
    chats, tools = _named(spans, "chat "), _named(spans, "execute_tool ")
    assert len(chats) == 2 and len(tools) == 1 and len(spans) == 4
    root_id = root["context"]["span_id"]
    assert all(s["parent_id"] == root_id for s in (*chats, *tools))
    run_cost, costs = _ledger(tmp_path, run_id)
    for chat in chats:
        attributes = chat["attributes"]
        assert abs(attributes["gen_ai.usage.cost"] - costs[attributes["opencode_gateway.request_id"]]) < 1e-12
        assert (
            attributes["gen_ai.request.model"] == "openai/gpt-4o-mini" and attributes["gen_ai.operation.name"] == "chat"
        )
    assert sorted(c["attributes"]["gen_ai.usage.input_tokens"] for c in chats) == [1000, 1200]
    assert [c["attributes"].get("gen_ai.usage.cache_read.input_tokens") for c in chats].count(800) == 1
    assert abs(root["attributes"]["gen_ai.usage.cost"] - run_cost) < 1e-12
    assert root["attributes"]["opencode_gateway.metadata.ticket"] == "ENG-412"
    assert root["attributes"]["opencode_gateway.outcome"] == "done"
    assert root["attributes"]["opencode_gateway.workdir"] == str(workdir)
    [tool] = tools
    assert (
        tool["attributes"]["gen_ai.tool.name"] == "bash"
        and tool["attributes"]["opencode_gateway.tool.status"] == "completed"
    )
    assert "opencode_gateway.tool.output" not in tool["attributes"]  # content is off by default


def test_a_batch_is_a_trace_per_run_and_a_span_of_its_own_with_their_totals(
    upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, phoenix: Phoenix
) -> None:
    upstream.script(Reply(text="one", usage=usage(500, 5)), Reply(text="two", usage=usage(700, 7)))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": t, "prompt": f"task {t}"}) + "\n" for t in ("t1", "t2")))
    batch = _batch(upstream, opencode_bin, tmp_path, phoenix, tasks, "traced-batch", "--concurrency", "1")
    assert batch.returncode == 0, batch.stderr
    results = [json.loads(line) for line in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    [batch_span] = phoenix.trace_of("opencode_gateway.batch_id", "traced-batch", spans=1)
    for result in results:
        spans = phoenix.trace_of("opencode_gateway.run_id", result["run_id"], spans=2)
        [root] = [s for s in spans if s["parent_id"] is None]
        assert root["attributes"]["opencode_gateway.metadata.batch_id"] == "traced-batch"
        assert root["context"]["trace_id"] != batch_span["context"]["trace_id"]  # one trace per run
    total = sum(r["cost"] for r in results)
    assert abs(batch_span["attributes"]["gen_ai.usage.cost"] - total) < 1e-12
    assert batch_span["attributes"]["opencode_gateway.tasks"] == 2


def test_a_serve_session_is_a_trace_sent_as_its_requests_end(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, phoenix: Phoenix
) -> None:
    upstream.script(Reply(text="Served.", usage=usage(900, 9)))
    home = tmp_path / "home"
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(home), "OPENCODE_BIN": opencode_bin}
    server = subprocess.Popen(
        [
            *CLI,
            "serve",
            "--port",
            "0",
            "--api-base",
            upstream.url,
            "--api-key",
            KEY,
            "--config",
            str(_config(tmp_path, phoenix.traces_endpoint)),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (home / "serve" / "server.json").exists():
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1]
            time.sleep(0.1)
        session = launch(
            env, workdir, "--metadata", "ticket=ENG-7", "--", "run", "--format", "json", "--title", "t", "hello"
        )
        assert session.returncode == 0, session.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    assert server.returncode in (0, 143), stderr
    [(run_id, cost)] = sqlite3.connect(home / "ledger.db").execute("SELECT run_id, cost FROM runs").fetchall()
    spans = phoenix.trace_of("opencode_gateway.run_id", run_id, spans=2)
    [root] = [s for s in spans if s["parent_id"] is None]
    [chat] = _named(spans, "chat ")
    assert root["attributes"]["opencode_gateway.kind"] == "session" and chat["parent_id"] == root["context"]["span_id"]
    assert abs(root["attributes"]["gen_ai.usage.cost"] - cost) < 1e-12
    assert abs(chat["attributes"]["gen_ai.usage.cost"] - cost) < 1e-12
    assert root["attributes"]["opencode_gateway.metadata.ticket"] == "ENG-7"


def test_no_key_or_prompt_reaches_the_collector(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, phoenix: Phoenix
) -> None:
    """The prompt names the run's own provider key, the agent's command prints it and the model's
    answer repeats it: none of it is in any span Phoenix received."""
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": f"echo {KEY}", "description": "print it"})], usage=usage(10, 2)),
        Reply(text=f"The key is {KEY}.", usage=usage(20, 4)),
    )
    config = _config(tmp_path, phoenix.traces_endpoint)
    result = _run(upstream, opencode_bin, workdir, tmp_path, config, f"print my key {KEY} with bash")
    assert result.returncode == 0, result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    phoenix.trace_of("opencode_gateway.run_id", run_id, spans=4)
    received = json.dumps(phoenix.spans())
    assert KEY not in received and "print my key" not in received and "The key is" not in received
    assert KEY[:12] not in received


def test_a_dead_collector_changes_nothing_about_the_run(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1/traces"
    upstream.script(Reply(text="Fine.", usage=usage(1000, 5)))
    argv = _run_argv(upstream, opencode_bin, workdir, tmp_path, _config(tmp_path, dead), "hi")
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path)
    ) as process:
        assert process.stdout is not None
        deadline = threading.Timer(240, process.kill)  # bounded, as a subprocess.run with a timeout would be
        deadline.start()
        line = process.stdout.readline()  # the result, printed (and flushed) before the exit's flush
        printed = time.monotonic()
        _, stderr = process.communicate(timeout=120)
        exited = time.monotonic()
        deadline.cancel()
    assert process.returncode == 0, stderr
    data = json.loads(line)
    assert data["stop_reason"] == "done" and data["text"] == "Fine." and data["usage"]["input_tokens"] == 1000
    assert abs(data["cost"] - _ledger(tmp_path, data["run_id"])[0]) < 1e-12
    assert stderr.count("traces could not be sent to the OpenTelemetry collector") == 1, stderr
    assert exited - printed < 30  # after the result, the exit waits for the queue at most the send timeout (5 s)


def test_a_batch_task_on_a_ray_worker_sends_its_runs_trace(
    upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, phoenix: Phoenix
) -> None:
    upstream.script(Reply(text="on ray", usage=usage(600, 6)))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "r1", "prompt": "task r1"}) + "\n")
    batch = _batch(upstream, opencode_bin, tmp_path, phoenix, tasks, "ray-traced", "--executor", "ray")
    assert batch.returncode == 0, batch.stderr
    [result] = [json.loads(line) for line in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    spans = phoenix.trace_of("opencode_gateway.run_id", result["run_id"], spans=2)
    [chat] = _named(spans, "chat ")
    assert abs(chat["attributes"]["gen_ai.usage.cost"] - _ledger(tmp_path, result["run_id"])[0]) < 1e-12


def test_with_content_a_tools_input_and_output_and_the_answer_are_sent_redacted(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, phoenix: Phoenix
) -> None:
    upstream.script(
        Reply(  # the command (OpenCode's title of the call) is the model's to make as long as it likes
            tool_calls=[ToolCall("bash", {"command": f"echo shown {KEY} {'x' * 5000}", "description": "x"})],
            usage=usage(10, 2),
        ),
        Reply(text="Shown.", usage=usage(20, 4)),
    )
    config = tmp_path / "content.yaml"
    config.write_text(f"otel:\n  endpoint: {phoenix.traces_endpoint}\n  content: true\n")
    result = _run(upstream, opencode_bin, workdir, tmp_path, config, "show it")
    assert result.returncode == 0, result.stderr
    spans = phoenix.trace_of("opencode_gateway.run_id", json.loads(result.stdout)["run_id"], spans=4)
    [tool] = _named(spans, "execute_tool ")
    assert "echo shown [REDACTED]" in tool["attributes"]["opencode_gateway.tool.input"]
    assert tool["attributes"]["opencode_gateway.tool.output"].strip() == f"shown [REDACTED] {'x' * 5000}"
    title = tool["attributes"]["opencode_gateway.tool.title"]
    assert title.startswith("echo shown [REDACTED] x") and len(title) == 500  # cut: a span stays small
    assert "Shown." in [c["attributes"].get("opencode_gateway.answer") for c in _named(spans, "chat ")]
    assert KEY not in json.dumps(spans)


def test_each_run_of_a_process_is_traced_with_its_own_secrets_redacted(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, phoenix: Phoenix, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process, run 1 holds key K1 and run 2 K2; each agent echoes its key, a token passed
    with `env`, and the run's own endpoint token (read from the file OpenCode's config names).
    With content on, run 2's tool span (its title, input and output) holds none of them."""
    monkeypatch.setenv("GITHUB_TOKEN", GITHUB)
    traced = settings.replace(otel={"endpoint": phoenix.traces_endpoint, "content": True}, env=("GITHUB_TOKEN",))
    keys = ("sk-first-traced-key-0123456", "sk-second-traced-key-6543210")
    run_ids = []
    for key in keys:
        upstream.script(
            Reply(
                tool_calls=[ToolCall("bash", {"command": f"echo {key}; echo $GITHUB_TOKEN; {PRINT_RUN_TOKEN}"})],
                usage=usage(9, 2),
            ),
            Reply(text=f"Shown {key}.", usage=usage(20, 4)),
        )
        result = run(
            "show it", model="openai/gpt-4o-mini", api_base=upstream.url, api_key=key, workdir=workdir, settings=traced
        )
        assert result.stop_reason == "done", result.error
        run_ids.append(result.run_id)
    for run_id, key in zip(run_ids, keys, strict=True):
        spans = phoenix.trace_of("opencode_gateway.run_id", run_id, spans=4)
        [tool] = _named(spans, "execute_tool ")
        assert tool["attributes"]["opencode_gateway.tool.output"].split() == ["[REDACTED]"] * 3  # key, passed, token
        assert key not in json.dumps(spans) and GITHUB not in json.dumps(spans)
        assert "Shown [REDACTED]." in [c["attributes"].get("opencode_gateway.answer") for c in _named(spans, "chat ")]


def test_the_hosts_answer_to_a_tool_call_is_an_event_of_its_span(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path, phoenix: Phoenix
) -> None:
    policy = tmp_path / "approve.yaml"
    policy.write_text('rules:\n  bash: {"echo *": allow, "rm *": deny}\n')
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf x", "description": "x"})], usage=usage(100, 5)),
        Reply(text="denied", usage=usage(200, 5)),
    )
    config = _config(tmp_path, phoenix.traces_endpoint)
    result = _run(upstream, opencode_bin, workdir, tmp_path, config, "remove it", "--approve", str(policy))
    assert result.returncode == 0, result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    [tool] = _named(phoenix.trace_of("opencode_gateway.run_id", run_id, spans=4), "execute_tool ")
    [event] = [e for e in tool["events"] if e["name"] == "approval"]
    assert event["attributes"]["opencode_gateway.approval.decision"] == "deny"
    assert event["attributes"]["opencode_gateway.approval.by"] == "policy"
    assert event["attributes"]["opencode_gateway.approval.reason"] == "the rule bash 'rm *' says deny"
    assert tool["attributes"]["opencode_gateway.tool.status"] == "error"
