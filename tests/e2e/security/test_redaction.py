"""The agent (or the model) echoes the run's secrets: the provider key given with `--api-key`, a
`GITHUB_TOKEN` passed on purpose with `--env`, and the run's own endpoint token, read from the
file OpenCode's config names. None of them reaches the caller: not the events of `--json` or
`--show-events`, not the answer, not RunResult's text or events; each run is redacted with its own
keys, whichever runs came before it in the process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from opencode_gateway.opencode.lines import ToolResult
from tests.support.inspection import PRINT_RUN_TOKEN
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage
from tests.support.serving import CLI

pytestmark = pytest.mark.e2e

KEY = "sk-live-redact-me-7c1e9a2b4d"
GITHUB = "ghp_redactme0123456789abcdefABCDEF"


def _echoing(*secrets: str) -> tuple[Reply, Reply]:
    command = f"echo {' '.join(secrets)}; echo $GITHUB_TOKEN; {PRINT_RUN_TOKEN}"
    return (
        Reply(tool_calls=[ToolCall("bash", {"command": command, "description": "show"})], usage=usage(100, 5)),
        Reply(text=f"Here: {' '.join(secrets)} {GITHUB}", usage=usage(200, 5)),
    )


def test_json_and_show_events_hold_no_key_no_passed_token_and_no_run_token(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, tmp_path: Path
) -> None:
    upstream.script(*_echoing(KEY))
    result = subprocess.run(
        [*CLI, "run", "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", KEY]
        + ["--opencode-bin", opencode_bin, "--workdir", str(workdir), "--ledger", str(tmp_path / "ledger.db")]
        + ["--env", "GITHUB_TOKEN", "--json", "--show-events", "show me"],
        env={**os.environ, "GITHUB_TOKEN": GITHUB, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    [output] = [e["output"] for e in data["events"] if e["type"] == "tool_result"]
    assert output.split() == ["[REDACTED]", "[REDACTED]", "[REDACTED]"]  # the key, $GITHUB_TOKEN, the token file
    assert data["text"] == "Here: [REDACTED] [REDACTED]"
    for shown in (result.stdout, result.stderr):
        assert KEY not in shown and GITHUB not in shown and KEY[:14] not in shown
    assert '"type": "tool_result"' in result.stderr and "[REDACTED]" in result.stderr  # the events were shown


def test_each_run_of_a_process_is_redacted_with_its_own_keys(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 holds key K1, run 2 K2: run 2's events and answer lose K2 (and its token), not K1."""
    monkeypatch.setenv("GITHUB_TOKEN", GITHUB)
    results = []
    for key in ("sk-first-run-key-0123456", "sk-second-run-key-6543210"):
        upstream.script(*_echoing(key))
        results.append(
            run(
                "show me",
                model="openai/gpt-4o-mini",
                api_base=upstream.url,
                api_key=key,
                workdir=workdir,
                settings=settings.replace(env=("GITHUB_TOKEN",)),
            )  # fmt: skip
        )
    for result, key in zip(results, ("sk-first-run-key-0123456", "sk-second-run-key-6543210"), strict=True):
        assert result.stop_reason == "done", result.error
        [tool] = [e for e in result.events if isinstance(e, ToolResult)]
        assert tool.output.split() == ["[REDACTED]"] * 3 and key not in tool.title
        assert result.text == "Here: [REDACTED] [REDACTED]"
        assert key not in json.dumps(result.to_dict())
