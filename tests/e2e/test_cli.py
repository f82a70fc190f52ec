"""The command line running real OpenCode runs, as a user runs it: a subprocess of the package's
console entry point against the scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
CLI = [sys.executable, "-m", "opencode_gateway"]


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def test_run_json_reads_the_prompt_from_stdin(upstream: ScriptedUpstream, opencode_bin: str, workdir: Path) -> None:
    upstream.script(Reply(text="Forty-two.", usage=usage(800, 5)))
    result = cli(
        "run",
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key",
        "sk-provider",
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "--json",
        "--metadata",
        "ticket=ENG-9",
        "-",
        stdin="What is the answer?",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["text"] == "Forty-two." and data["stop_reason"] == "done"
    assert data["usage"]["input_tokens"] == 800 and data["usage"]["requests"] == 1
    assert isinstance(data["cost"], float) and data["requests"][0]["cost_source"] == "litellm"
    user = [m for m in upstream.requests[0]["body"]["messages"] if m["role"] == "user"]
    assert "What is the answer?" in json.dumps(user)


def test_run_prints_the_answer_and_a_summary_and_shows_events_live(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path
) -> None:
    stderr_file = tmp_path / "stderr.txt"
    seen_before_end: list[bool] = []

    def answer(body: dict) -> Reply:
        # Runs while the CLI is still waiting for this answer: the tool call must be on stderr already.
        seen_before_end.append('"type": "tool_call"' in stderr_file.read_text())
        return Reply(text="Wrote it.", usage=usage(1000, 50, cached=800))

    upstream.script(Reply(tool_calls=[ToolCall("write", {"filePath": str(workdir / "a.txt"), "content": "a"})]), answer)
    with stderr_file.open("w") as stderr:
        result = subprocess.run(
            [
                *CLI,
                "run",
                "-m",
                "openai/gpt-4o-mini",
                "--api-base",
                upstream.url,
                "--api-key",
                "sk-provider",
                "--opencode-bin",
                opencode_bin,
                "--workdir",
                str(workdir),
                "--show-events",
                "write",
                "a.txt",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0
    assert result.stdout.strip() == "Wrote it."
    assert seen_before_end == [True]
    summary = stderr_file.read_text().strip().splitlines()[-1]
    assert summary.startswith("opencode-gateway: done · 2 requests · 2,000 in / 100 out tokens · $")
    # gpt-4o-mini reads cached tokens at 7.5e-8 instead of 1.5e-7 (LiteLLM's map): 800 saved 6e-5.
    assert " · 40% of input from cache, saved $0.000060 · session ses_" in summary


def test_a_failed_run_exits_1_with_the_error(upstream: ScriptedUpstream, opencode_bin: str, workdir: Path) -> None:
    upstream.script(Reply(status=401, error="Invalid API key"))
    argv = [
        "run",
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key",
        "sk-bad",
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "hi",
    ]
    result = cli(*argv)
    assert result.returncode == 1
    assert "opencode-gateway: error: " in result.stderr and "Invalid API key" in result.stderr
    # OpenCode was stopped mid-run; nothing of it outlives the event loop. The console script
    # exits without collecting garbage, so collect it here: an unclosed transport would warn.
    upstream.script(Reply(status=401, error="Invalid API key"))
    collected = subprocess.run(
        [
            sys.executable,
            "-W",
            "always::ResourceWarning",
            "-c",
            "import gc, sys; from opencode_gateway.cli import main; code = main(sys.argv[1:]); gc.collect(); sys.exit(code)",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 1 and "Invalid API key" in collected.stderr
    assert "unclosed" not in collected.stderr and "Event loop is closed" not in collected.stderr


def test_output_schema_prints_the_answers_object_alone(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps({"type": "object", "required": ["fixed"], "properties": {"fixed": {"type": "boolean"}}})
    )
    upstream.script(Reply(text='Fixed it.\n{"fixed": true}'))
    result = cli(
        "run",
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key",
        "sk-provider",
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "--output-schema",
        str(schema),
        "Fix it",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"fixed": True}

    upstream.script(Reply(text="Could not fix it."))
    result = cli(
        "run",
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key",
        "sk-provider",
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "--output-schema",
        str(schema),
        "--json",
        "Fix it",
    )
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["stop_reason"] == "error" and data["output"] is None
    assert data["error"]["type"] == "OutputInvalid" and data["error"]["raw_text"] == "Could not fix it."


def test_the_key_can_come_from_a_file_and_never_be_in_argv(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-a-file\n")
    upstream.script(Reply(text="ok"))
    result = cli(
        "run",
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key-file",
        str(key_file),
        "--opencode-bin",
        opencode_bin,
        "--workdir",
        str(workdir),
        "--ledger",
        str(tmp_path / "l.db"),
        "hi",
    )
    assert result.returncode == 0, result.stderr
    assert upstream.requests[0]["headers"]["authorization"] == "Bearer sk-from-a-file"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    refused = cli("run", "-m", "m", "--api-key-file", str(empty), "hi")
    assert refused.returncode == 2 and "the API key file" in refused.stderr and "is empty" in refused.stderr
