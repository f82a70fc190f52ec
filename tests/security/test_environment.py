"""What the agent can read of the gateway's secrets: its own environment holds none of them, and a
key an upstream echoes back is redacted in every place the run reports it."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from opencode_gateway import run, stream
from opencode_gateway.events import Done
from opencode_gateway.settings import Settings
from scripted_upstream import Reply, ScriptedUpstream, usage
from tests.security.agent import attack, outcome

pytestmark = pytest.mark.e2e

CALLERS = {
    "OPENAI_API_KEY": "sk-openai-from-env-0123456789", "DATABASE_URL": "postgres://app:hunter2hunter2@db/app",
    "REDIS_URL": "redis://:redis-password-0123@cache:6379", "SENTRY_DSN": "https://sentry-key-0123@sentry.test/1",
    "MY_PROVIDER_KEY": "mpk-0123456789abcdef", "GITHUB_TOKEN": "ghp_0123456789abcdef0123",
}


@pytest.fixture
def settings(opencode_bin: str, data_dir: Path, tmp_path: Path) -> Settings:
    # The attacker's script runs on the tests' Python, which lives in a HOME the sandbox hides.
    return Settings(opencode_bin=opencode_bin, data_dir=data_dir, timeout=180, ledger=tmp_path / "ledger.db",
                    sandbox_allow_read=(sys.base_prefix,))


def test_the_agents_environment_holds_nothing_of_the_callers_but_what_was_passed_on_purpose(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CALLERS.items():
        monkeypatch.setenv(name, value)
    upstream.script(attack(workdir, "env"), Reply(text="done", usage=usage(1000, 50)))
    result = run("Run the script", model="openai/gpt-4o-mini", api_base=upstream.url, workdir=workdir,
                 settings=settings.replace(env=("GITHUB_TOKEN",)))
    seen = outcome(workdir)
    assert result.ok and "PATH" in seen  # the attack ran and printed its environment
    assert seen["GITHUB_TOKEN"] == CALLERS["GITHUB_TOKEN"]  # passed with --env, on purpose
    dumped = json.dumps(seen)
    for name, value in CALLERS.items():
        if name != "GITHUB_TOKEN":
            assert name not in seen and value not in dumped, name


def test_a_key_read_from_the_environment_and_echoed_by_the_upstream_is_redacted_everywhere(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = CALLERS["OPENAI_API_KEY"]
    monkeypatch.setenv("OPENAI_API_KEY", key)  # litellm reads it there: no --api-key
    upstream.script(Reply(status=401, error="Incorrect API key provided", echo_key=True))
    events = list(stream("hi", model="openai/gpt-4o-mini", api_base=upstream.url, workdir=workdir,
                         settings=settings))
    done = events[-1]
    assert isinstance(done, Done)
    result = done.result
    assert upstream.requests and key in upstream.requests[0]["headers"]["authorization"]  # it was echoed
    assert not result.ok
    shown = json.dumps(result.to_dict()) + str(result.error) + "".join(json.dumps(e.to_dict()) for e in events)
    assert "Incorrect API key provided" in shown and key not in shown and "[REDACTED]" in shown
    rows = sqlite3.connect(settings.ledger_path).execute(
        "SELECT error FROM requests UNION ALL SELECT error FROM runs").fetchall()
    assert rows and not any(key in (row[0] or "") for row in rows)
