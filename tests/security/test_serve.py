"""The agent of one launch attacks the long-lived server with the token its launch was given: it
tries to add its calls to another launch's session, to choose its own attribution, and to mint
itself a launch. Each attack reaches the server and changes nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

from tests.security.agent import attack, outcome
from tests.test_serve_e2e import env, gateway_home, launch, server, sessions  # noqa: F401 (fixtures)

pytestmark = pytest.mark.e2e
MESSAGES = [{"role": "user", "content": "hi"}]
READ_PYTHON = ("--sandbox-allow-read", sys.base_prefix)  # the attacker's script runs on the tests' Python


def test_a_launch_cannot_join_another_launchs_session_choose_attribution_or_mint(
    server: subprocess.Popen[str], upstream: ScriptedUpstream, env: dict[str, str], gateway_home: Path,  # noqa: F811
    workdir: Path
) -> None:
    upstream.script(Reply(text="Victim done.", usage=usage(1000, 10)))
    victim = launch(env, workdir, "--metadata", "ticket=ENG-1", "--", "run", "--format", "json", "--title", "v",
                    "victim")
    assert victim.returncode == 0, victim.stderr
    [victim_session] = sessions(victim.stdout)

    spoofed = {"x-session-id": victim_session, "x-litellm-spend-logs-metadata": '{"ticket": "ENG-1"}',
               "x-opencode-gateway-launch": json.dumps({"metadata": {"ticket": "ENG-1"}, "tags": ["x,y"]})}
    body = {"model": "openai/gpt-4o-mini", "stream": False, "messages": MESSAGES, "user": "mallory",
            "fallbacks": [{"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"}], "timeout": 0.001,
            "input_cost_per_token": -1, "metadata": {"ticket": "ENG-1"}, "api_base": "http://127.0.0.1:9/v1"}
    upstream.script(attack(workdir, "posts", [body, spoofed]), Reply(text="attack answer", usage=usage(1000, 10)),
                    Reply(text="Attacker done.", usage=usage(1000, 10)))
    attacker = launch(env, workdir, "--metadata", "ticket=ENG-2", *READ_PYTHON, "--", "run", "--format", "json", "--title", "a", "go")
    assert attacker.returncode == 0, attacker.stderr
    [[status, answer]] = outcome(workdir)
    assert status == 200 and "attack answer" in answer  # it reached the server and was served
    forwarded = upstream.requests[1]["body"]  # the server's allowlist is the run's
    assert not {"user", "fallbacks", "timeout", "input_cost_per_token", "metadata", "api_base"} & set(forwarded)

    upstream.script(attack(workdir, "mint", {"metadata": {"ticket": "FREE"}}), Reply(text="done"))
    minter = launch(env, workdir, *READ_PYTHON, "--", "run", "--format", "json", "--title", "a", "go")
    assert minter.returncode == 0, minter.stderr
    status, _ = outcome(workdir)
    assert status == 401  # a launch's token is not the server's admin token

    server.terminate()
    assert server.wait(30) == 0
    ledger = sqlite3.connect(gateway_home / "ledger.db")
    runs = ledger.execute("SELECT session_id, requests, json_extract(metadata, '$.ticket') FROM runs").fetchall()
    victims = [r for r in runs if r[2] == "ENG-1"]
    assert victims == [(victim_session, 1, "ENG-1")]  # the victim's run holds only its own request
    assert sum(r[1] for r in runs if r[2] == "ENG-2") == 3  # the attack is billed to the attacker's launch
    assert not any(r[2] == "FREE" for r in runs)


def test_a_sandboxed_launch_sees_its_own_token_only_and_not_the_servers(
    server: subprocess.Popen[str], upstream: ScriptedUpstream, env: dict[str, str], gateway_home: Path,  # noqa: F811
    workdir: Path
) -> None:
    upstream.script(Reply(text="first", usage=usage(10, 1)))
    assert launch(env, workdir, "--", "run", "--format", "json", "--title", "v", "first").returncode == 0
    launches = gateway_home / "tui" / "launches"
    look = (f"ls {launches} > seen.txt; cat {gateway_home}/serve/token >> seen.txt 2>/dev/null; "
            "echo end >> seen.txt")
    upstream.script(Reply(tool_calls=[ToolCall("bash", {"command": look, "description": "look around"})],
                          usage=usage(10, 1)), Reply(text="done", usage=usage(10, 1)))
    second = launch(env, workdir, "--sandbox", "bwrap", "--", "run", "--format", "json", "--title", "s", "look")
    assert second.returncode == 0, second.stderr
    seen = (workdir / "seen.txt").read_text().split()
    assert len(list(launches.iterdir())) == 2  # on the host: both launches' tokens
    assert len(seen) == 2 and seen[1] == "end"  # inside: one token file (its own), and no admin token
    assert (launches / seen[0]).exists()


def test_a_launchs_limits_and_model_hold_whatever_session_and_model_its_requests_name(
    server: subprocess.Popen[str], upstream: ScriptedUpstream, env: dict[str, str], workdir: Path  # noqa: F811
) -> None:
    """With its launch's token, the agent sends twelve requests, each under a fresh session id and
    naming another model (before: twelve fresh budgets, each forwarded on the model it named)."""
    posts = [[{"model": "gpt-4o", "stream": False, "messages": MESSAGES}, {"x-session-id": f"ses_fresh_{i}"}]
             for i in range(12)]
    upstream.script(attack(workdir, "posts", *posts), *[Reply(text="served", usage=usage(10, 1))] * 13)
    launch(env, workdir, "--max-requests", "3", "--max-turns", "1", *READ_PYTHON, "--", "run", "--format", "json",
           "--title", "a", "go")  # its second turn is refused too: OpenCode exits 1
    answers = outcome(workdir)
    assert len(answers) == 12 and all(status == 400 for status, _ in answers), answers  # the one turn was spent
    assert len(upstream.requests) == 1  # OpenCode's own first turn, on the launch's model
    assert {r["body"]["model"] for r in upstream.requests} == {"gpt-4o-mini"}
