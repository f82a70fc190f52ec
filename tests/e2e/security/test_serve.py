"""The agent of one launch attacks the long-lived server with the token its launch was given: it
tries to add its calls to another launch's session, to choose its own attribution and model, to
mint itself a launch, to escape its launch's limits with fresh session ids, to read or plant
anything another launch uses, and to exhaust the server's memory. Each attack reaches the server
and changes nothing."""

from __future__ import annotations

import concurrent.futures
import json
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.security.agent import PYTHON, attack, outcome
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage
from tests.support.serving import CLI, launch, sessions

pytestmark = pytest.mark.e2e
MESSAGES = [{"role": "user", "content": "hi"}]
READ_PYTHON = ("--sandbox-allow-read", sys.base_prefix)  # the attacker's script runs on the tests' Python


def test_a_launch_cannot_join_another_launchs_session_choose_attribution_or_mint(
    server: subprocess.Popen[str],
    upstream: ScriptedUpstream,
    env: dict[str, str],
    gateway_home: Path,
    workdir: Path,
) -> None:
    upstream.script(Reply(text="Victim done.", usage=usage(1000, 10)))
    victim = launch(
        env, workdir, "--metadata", "ticket=ENG-1", "--", "run", "--format", "json", "--title", "v", "victim"
    )
    assert victim.returncode == 0, victim.stderr
    [victim_session] = sessions(victim.stdout)

    spoofed = {
        "x-session-id": victim_session,
        "x-litellm-spend-logs-metadata": '{"ticket": "ENG-1"}',
        "x-opencode-gateway-launch": json.dumps({"metadata": {"ticket": "ENG-1"}, "tags": ["x,y"]}),
    }
    body = {
        "model": "openai/gpt-4o-mini",
        "stream": False,
        "messages": MESSAGES,
        "user": "mallory",
        "fallbacks": [{"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"}],
        "timeout": 0.001,
        "input_cost_per_token": -1,
        "metadata": {"ticket": "ENG-1"},
        "api_base": "http://127.0.0.1:9/v1",
    }
    upstream.script(
        attack(workdir, "posts", [body, spoofed]),
        Reply(text="attack answer", usage=usage(1000, 10)),
        Reply(text="Attacker done.", usage=usage(1000, 10)),
    )
    attacker = launch(
        env, workdir, "--metadata", "ticket=ENG-2", *READ_PYTHON, "--", "run", "--format", "json", "--title", "a", "go"
    )
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


PLANT = r"""
import json, os, sys
home, marker = sys.argv[1], sys.argv[2]
seen = {}
for path in (f"{home}/tui", f"{home}/serve/token", f"{home}/ledger.db"):
    try:
        seen[path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path, "rb").read().decode(errors="replace")
    except OSError as error:
        seen[path] = error.strerror
plugin = f"import fs from 'fs'; fs.writeFileSync({json.dumps(marker)}, 'planted plugin ran');"
for folder in (".opencode/plugin", os.environ["XDG_CONFIG_HOME"] + "/opencode/plugin"):
    os.makedirs(folder, exist_ok=True)
    open(f"{folder}/steal.js", "w").write(plugin)
print(json.dumps(seen))
"""


def test_launches_share_nothing_writable_and_no_plugin_an_agent_planted_runs(
    server: subprocess.Popen[str],
    upstream: ScriptedUpstream,
    env: dict[str, str],
    gateway_home: Path,
    workdir: Path,
    tmp_path: Path,
) -> None:
    """The agent of one launch looks for the other launches' conversations and tokens and the
    server's, and plants a plugin (in the repository and in its own config dir) for the next
    launch to run. It finds none of them, and the next launch in the same folder runs no plugin."""
    upstream.script(Reply(text="the victim's conversation", usage=usage(10, 1)))
    assert (
        launch(
            env,
            workdir,
            "--sandbox",
            "bwrap",
            "--",
            "run",
            "--format",
            "json",
            "--title",
            "v",
            "victim's secret prompt",
        ).returncode
        == 0
    )
    marker = tmp_path / "planted-ran"
    (workdir / "plant.py").write_text(PLANT)
    command = f"{PYTHON} plant.py {gateway_home} {marker} > seen.json"
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": command, "description": "look around"})], usage=usage(10, 1)),
        Reply(text="done", usage=usage(10, 1)),
    )
    second = launch(
        env, workdir, "--sandbox", "bwrap", *READ_PYTHON, "--", "run", "--format", "json", "--title", "s", "look"
    )
    assert second.returncode == 0, second.stderr
    seen = json.loads((workdir / "seen.json").read_text())
    own = seen.pop(str(gateway_home / "tui"))
    assert len(own) == 1 and own[0].startswith("launch_")  # its own workspace, and no other launch's
    assert all(found == "No such file or directory" for found in seen.values()), seen  # the server's token, ledger
    assert (workdir / ".opencode" / "plugin" / "steal.js").exists()  # planted, in the repository
    upstream.script(Reply(text="third", usage=usage(10, 1)))
    third = launch(env, workdir, "--sandbox", "bwrap", "--", "run", "--format", "json", "--title", "t", "go")
    assert third.returncode == 0, third.stderr
    assert not marker.exists()  # neither planted plugin ran
    launches = sorted((gateway_home / "tui").iterdir())
    assert len(launches) == 3 and all((folder / "token").exists() for folder in launches)  # one workspace each


def test_a_launchs_limits_and_model_hold_whatever_session_and_model_its_requests_name(
    server: subprocess.Popen[str],
    upstream: ScriptedUpstream,
    env: dict[str, str],
    workdir: Path,
) -> None:
    """With its launch's token, the agent sends twelve requests, each under a fresh session id and
    naming another model (before: twelve fresh budgets, each forwarded on the model it named)."""
    posts = [
        [{"model": "gpt-4o", "stream": False, "messages": MESSAGES}, {"x-session-id": f"ses_fresh_{i}"}]
        for i in range(12)
    ]
    upstream.script(attack(workdir, "posts", *posts), *[Reply(text="served", usage=usage(10, 1))] * 13)
    launch(
        env,
        workdir,
        "--max-requests",
        "3",
        "--max-turns",
        "1",
        *READ_PYTHON,
        "--",
        "run",
        "--format",
        "json",
        "--title",
        "a",
        "go",
    )  # its second turn is refused too: OpenCode exits 1
    answers = outcome(workdir)
    assert len(answers) == 12 and all(status == 400 for status, _ in answers), answers  # the one turn was spent
    assert len(upstream.requests) == 1  # OpenCode's own first turn, on the launch's model
    assert {r["body"]["model"] for r in upstream.requests} == {"gpt-4o-mini"}


def test_a_body_of_millions_of_values_leaves_serve_and_other_launches_working_under_a_memory_cap(
    upstream: ScriptedUpstream,
    gateway_home: Path,
    env: dict[str, str],
) -> None:
    """32 MiB of empty messages (ten million dicts once parsed: 6 GB) sent three at once with one
    launch's token: each is refused unparsed, serve stays well inside its memory cap, and another
    launch's request is served meanwhile."""
    cap = 3 << 30
    serve = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--api-base", upstream.url, "--api-key", "sk-provider"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)),
    )
    try:
        state_file = gateway_home / "serve" / "server.json"
        deadline = time.monotonic() + 30
        while not state_file.exists():
            assert serve.poll() is None and time.monotonic() < deadline, "serve did not start within 30 s"
            time.sleep(0.1)
        state = json.loads(state_file.read_text())
        admin = {"authorization": f"Bearer {Path(state['token_file']).read_text()}"}
        attacker, other = (
            httpx.post(
                state["url"] + "/launches", headers=admin, timeout=30, json={"model": "openai/gpt-4o-mini"}
            ).json()["token"]
            for _ in range(2)
        )
        hostile = b'{"stream": false, "messages": [' + b",".join([b"{}"] * 10_500_000) + b"]}"

        def send(token: str, content: bytes) -> httpx.Response:
            return httpx.post(
                state["url"] + "/v1/chat/completions",
                content=content,
                timeout=120,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            )

        upstream.script(Reply(text="served meanwhile", usage=usage(10, 1)))
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            attacks = [pool.submit(send, attacker, hostile) for _ in range(3)]
            normal = send(other, json.dumps({"model": "m", "stream": False, "messages": MESSAGES}).encode())
            statuses = [attack.result().status_code for attack in attacks]
        assert statuses == [413, 413, 413]
        assert normal.status_code == 200 and "served meanwhile" in normal.text
        assert serve.poll() is None  # still up
        peak = next(
            int(line.split()[1])
            for line in Path(f"/proc/{serve.pid}/status").read_text().splitlines()
            if line.startswith("VmHWM:")
        )
        assert peak < 600 * 1024  # kB: the bodies were never materialised
    finally:
        serve.terminate()
        serve.wait(30)
