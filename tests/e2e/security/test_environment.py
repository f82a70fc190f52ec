"""What the agent can read of the gateway's secrets: its own environment holds none of them, and a
key an upstream echoes back is redacted in every place the run reports it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_gateway import run, stream
from opencode_gateway.config.settings import Settings
from opencode_gateway.events import Done
from tests.e2e.security.agent import attack, outcome
from tests.support.scripted_upstream import Reply, ScriptedUpstream, usage

pytestmark = pytest.mark.e2e

CALLERS = {
    "OPENAI_API_KEY": "sk-openai-from-env-0123456789",
    "DATABASE_URL": "postgres://app:hunter2hunter2@db/app",
    "REDIS_URL": "redis://:redis-password-0123@cache:6379",
    "SENTRY_DSN": "https://sentry-key-0123@sentry.test/1",
    "MY_PROVIDER_KEY": "mpk-0123456789abcdef",
    "GITHUB_TOKEN": "ghp_0123456789abcdef0123",
}


def test_the_agents_environment_holds_nothing_of_the_callers_but_what_was_passed_on_purpose(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CALLERS.items():
        monkeypatch.setenv(name, value)
    upstream.script(attack(workdir, "env"), Reply(text="done", usage=usage(1000, 50)))
    result = run(
        "Run the script",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        workdir=workdir,
        settings=settings.replace(env=("GITHUB_TOKEN",)),
    )
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
    events = list(stream("hi", model="openai/gpt-4o-mini", api_base=upstream.url, workdir=workdir, settings=settings))
    done = events[-1]
    assert isinstance(done, Done)
    result = done.result
    assert upstream.requests and key in upstream.requests[0]["headers"]["authorization"]  # it was echoed
    assert not result.ok
    shown = json.dumps(result.to_dict()) + str(result.error) + "".join(json.dumps(e.to_dict()) for e in events)
    assert "Incorrect API key provided" in shown and key not in shown and "[REDACTED]" in shown
    rows = (
        sqlite3.connect(settings.ledger_location.path)
        .execute("SELECT error FROM requests UNION ALL SELECT error FROM runs")
        .fetchall()
    )
    assert rows and not any(key in (row[0] or "") for row in rows)


# Root with every capability dropped is, to the kernel, an ordinary user: what the gateway and
# an unconfined agent's bash tool are when the gateway does not run as root.
ORDINARY = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if os.geteuid() == 0 else []

READ_ENVIRON = """
import sys
try:
    print(open(f"/proc/{sys.argv[1]}/environ").read().replace(chr(0), chr(10)))
except OSError as error:
    print(type(error).__name__)
"""


def _read_environ(pid: int) -> str:
    return subprocess.run(
        [*ORDINARY, sys.executable, "-c", READ_ENVIRON, str(pid)], capture_output=True, text=True, timeout=30
    ).stdout


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_same_user_process_cannot_read_the_gateways_environment(tmp_path: Path) -> None:
    key = CALLERS["OPENAI_API_KEY"]
    env = {**os.environ, "OPENAI_API_KEY": key, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}
    gateway = subprocess.Popen(
        [
            *ORDINARY,
            sys.executable,
            "-m",
            "opencode_gateway",
            "serve",
            "--port",
            "0",
            "--api-base",
            "http://127.0.0.1:9/v1",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    bystander = subprocess.Popen([*ORDINARY, sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        state = tmp_path / "home" / "serve" / "server.json"
        deadline = time.monotonic() + 30
        while not state.exists():
            assert gateway.poll() is None, gateway.communicate()[1]
            assert time.monotonic() < deadline, "serve did not start within 30 s"
            time.sleep(0.1)
        assert key in _read_environ(bystander.pid)  # an ordinary process of the same user: open
        assert _read_environ(gateway.pid).strip() == "PermissionError"  # the gateway: closed
    finally:
        for process in (gateway, bystander):
            process.kill()
            process.wait(10)
