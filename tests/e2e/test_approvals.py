"""The host answers every tool call the agent wants to make: a policy, a Python callback, or no
one (a deny). The scripted model asks for allowed and denied commands; a denied command never
ran (its effect is absent), the model was told why, and the run went on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import arun, run
from opencode_gateway.approvals.host import Approval
from opencode_gateway.approvals.policy import ApprovalRequest
from opencode_gateway.config.settings import Settings
from opencode_gateway.events import ApprovalAnswered, ApprovalAsked
from opencode_gateway.opencode.lines import ToolResult
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage
from tests.support.serving import CLI
from tests.support.tmux import Terminal

pytestmark = pytest.mark.e2e

POLICY = {"rules": {"bash": {"touch *": "allow", "rm *": "deny"}}, "default": "deny"}


def _bash(*commands: str) -> Reply:
    calls = [ToolCall("bash", {"command": c, "description": f"step {n}"}) for n, c in enumerate(commands)]
    return Reply(tool_calls=calls, usage=usage(100, 5))


def _told(upstream: ScriptedUpstream, reason: str) -> bool:
    """Whether the model was told of a denial for `reason` (1.18: the plugin's message; 2.x:
    OpenCode's "no tool named" naming it)."""
    return any(f"denied by the host: {reason}" in message for message in _tool_messages(upstream))


def _tool_messages(upstream: ScriptedUpstream) -> list[str]:
    """What the model was told of its tool calls, in the last request."""
    return [m["content"] for m in upstream.requests[-1]["body"]["messages"] if m.get("role") == "tool"]


def _asks_reported(ledger: Path) -> tuple[int, int, int]:
    """What `report` counts of the ledger's asks: asked, allowed, denied."""
    report = subprocess.run(
        [*CLI, "report", "--by", "run", "--ledger", str(ledger), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    total = json.loads(report.stdout)["total"]
    return total["asked"], total["allowed"], total["denied"]


def _run(upstream: ScriptedUpstream, workdir: Path, settings: Settings, **options: Any) -> Any:
    return run(
        "Do it",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings,
        **options,
    )


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_policy_lets_the_allowed_command_run_and_the_denied_one_never_runs(
    sandbox: str, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    (workdir / "keep.txt").write_text("kept")
    upstream.script(_bash("touch made.txt", "rm -f keep.txt"), Reply(text="done", usage=usage(200, 5)))
    result = _run(upstream, workdir, settings.replace(sandbox=sandbox), approvals=POLICY)
    assert result.ok, result.error
    assert (workdir / "made.txt").exists()
    assert (workdir / "keep.txt").read_text() == "kept", "the denied rm ran"
    assert _told(upstream, "the rule bash 'rm *' says deny")
    answers = {e.subject: e for e in result.events if isinstance(e, ApprovalAsked)}
    assert set(answers) == {"touch made.txt", "rm -f keep.txt"}
    decided = {(e.decision, e.by) for e in result.events if isinstance(e, ApprovalAnswered)}
    assert decided == {("allow", "policy"), ("deny", "policy")}
    denied = [e for e in result.events if isinstance(e, ToolResult) and e.is_error]
    assert [e.output for e in denied] == ["denied by the host: the rule bash 'rm *' says deny"]


def test_a_callback_decides_what_the_policy_asks_about_and_one_that_raises_denies(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Any:
        asked.append(request)
        if "first" in (request.subject or ""):
            return "allow"
        if "second" in (request.subject or ""):
            return Approval("deny", "not today")
        raise RuntimeError("the reviewer is out")

    upstream.script(
        _bash("touch first.txt", "touch second.txt", "touch third.txt"),
        Reply(text="done", usage=usage(200, 5)),
    )
    result = _run(upstream, workdir, settings, approvals={"default": "ask"}, approve=approve)
    assert result.ok, result.error
    assert (workdir / "first.txt").exists()
    assert not (workdir / "second.txt").exists() and not (workdir / "third.txt").exists()
    assert sorted(r.subject or "" for r in asked) == [
        "touch first.txt",
        "touch second.txt",
        "touch third.txt",
    ]
    assert _told(upstream, "not today")
    assert _told(upstream, "the approval callback failed: RuntimeError: the reviewer is out")


def test_with_no_one_to_ask_a_headless_run_denies_and_goes_on(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(_bash("echo hi > hi.txt"), Reply(text="could not", usage=usage(200, 5)))
    result = _run(upstream, workdir, settings, approvals={"default": "ask"})
    assert result.ok and result.text == "could not"
    assert not (workdir / "hi.txt").exists()
    [answer] = [e for e in result.events if isinstance(e, ApprovalAnswered)]
    assert (answer.decision, answer.by) == ("deny", "host")


def test_the_cli_takes_a_policy_file_and_reports_the_asks_in_json(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, tmp_path: Path
) -> None:
    policy = tmp_path / "approve.yaml"
    policy.write_text('approvals:\n  rules:\n    bash: {"touch *": allow}\n  default: deny\n')
    upstream.script(_bash("touch yes.txt", "mkdir no"), Reply(text="done", usage=usage(200, 5)))
    result = subprocess.run(
        [*CLI, "run", "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", "sk-x"]
        + ["--opencode-bin", opencode_bin, "--workdir", str(workdir), "--ledger", str(tmp_path / "ledger.db")]
        + ["--approve", str(policy), "--json", "Do it"],
        env={**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert (workdir / "yes.txt").exists() and not (workdir / "no").exists()
    events = json.loads(result.stdout)["events"]
    answered = sorted((e["decision"], e["reason"]) for e in events if e["type"] == "approval_answered")
    assert answered == [("allow", "the rule bash 'touch *' says allow"), ("deny", "the policy's default says deny")]
    assert {e["subject"] for e in events if e["type"] == "approval_asked"} == {"touch yes.txt", "mkdir no"}
    assert _asks_reported(tmp_path / "ledger.db") == (2, 1, 1)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_batch_with_a_policy_file_asks_in_every_task_and_its_ledger_holds_every_ask(
    executor: str, upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No terminal is asked in a batch: what the policy does not allow is denied, in each task, and on
    Ray each worker's asks reach the driver's one ledger."""

    def answer(body: dict[str, Any]) -> Reply:
        task = re.search(r"task (t\d)", json.dumps(body["messages"])).group(1)  # type: ignore[union-attr]
        if not any(m["role"] == "tool" for m in body["messages"]):
            return _bash(f"touch made-{task}.txt", "mkdir denied")
        return Reply(text=f"{task} done", usage=usage(200, 5))

    monkeypatch.setattr(upstream, "fallback", answer)
    policy = tmp_path / "approve.yaml"
    policy.write_text('rules:\n  bash: {"touch made-*": allow, "mkdir *": ask}\ndefault: deny\n')
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": t, "prompt": f"Do task {t}"}) + "\n" for t in ("t1", "t2", "t3")))
    root, ledger = tmp_path / "work", tmp_path / "ledger.db"
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    batch = subprocess.run(
        [*CLI, "batch", str(tasks), "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", "sk-x"]
        + ["--executor", executor, "--concurrency", "2", "--workdir-root", str(root), "--opencode-bin", opencode_bin]
        + ["--ledger", str(ledger), "--approve", str(policy)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert batch.returncode == 0, batch.stderr
    for task in ("t1", "t2", "t3"):
        assert (root / task / f"made-{task}.txt").exists()
        assert not (root / task / "denied").exists(), f"{task}'s denied mkdir ran"
    assert _asks_reported(ledger) == (6, 3, 3)
    reasons = {
        row[0] for row in sqlite3.connect(ledger).execute("SELECT reason FROM approvals WHERE decision = 'deny'")
    }
    assert reasons == {"no one to ask: a headless run denies what its policy asks about"}, reasons


def test_a_bad_policy_file_is_exit_2_in_one_line_naming_the_rule(tmp_path: Path) -> None:
    policy = tmp_path / "approve.yaml"
    policy.write_text('rules:\n  bash: {"git *": perhaps}\n')
    result = subprocess.run(
        [*CLI, "run", "-m", "openai/gpt-4o-mini", "--approve", str(policy), "Do it"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"opencode-gateway: error: {policy}: approvals.rules.bash['git *']: 'perhaps' is not one of allow, deny, ask\n"
    )


# A command whose own lines draw a fake ask for a harmless call, so that `y` would run the rest.
FAKE_ASK = (
    "id > payload.txt"
    + "\n" * 40
    + (
        "? the agent asks to run bash (10 characters, 1 line):\n  │ git status\n"
        "  [y] allow once  [a] always allow bash 'git *'  [n] deny  (120 s): type y, a or n, then Enter "
    )
)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="scripts/setup installs tmux")
def test_a_person_at_the_terminal_allows_once_always_and_denies(
    upstream: ScriptedUpstream, workdir: Path, tmp_path: Path, env: dict[str, str], generation: int
) -> None:
    tool = "bash" if generation == 1 else "shell"  # the person sees OpenCode's own name of the tool
    policy = tmp_path / "approve.yaml"
    policy.write_text("default: ask\n")
    upstream.script(
        _bash("echo once > once.txt"),
        _bash("git init -q ."),
        _bash("git init -q again"),  # "always allow git *" answered it
        _bash(FAKE_ASK),
        _bash("touch denied.txt"),
        Reply(text="all asked", usage=usage(200, 5)),
    )
    terminal = Terminal(f"ocg-{tmp_path.name}", {**env, "PS1": "$ ", "TERM": "xterm-256color"})
    try:
        command = [*CLI, "run", "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", "sk-x"]
        command += ["--workdir", str(workdir), "--ledger", str(tmp_path / "ledger.db"), "--approve", str(policy)]
        terminal.type(shlex.join([*command, "Do it"]) + "; echo RUN-ENDED-$?")
        asks = [
            ("(20 characters, 1 line):", "│ echo once > once.txt", "y"),
            ("(13 characters, 1 line):", "│ git init -q .", "a"),
            (f"({len(FAKE_ASK)} characters, 43 lines):", "│ id > payload.txt\\x0a\\x0a", "n"),
            ("(16 characters, 1 line):", "│ touch denied.txt", "n"),
        ]
        for header, shown, key in asks:
            terminal.wait_for(
                lambda screen, h=header, c=shown: (
                    f"run {tool} {h}" in screen and c in screen.split(h)[-1] and "then Enter" in screen.split(h)[-1]
                ),
                f"the ask {shown}",
            )
            terminal.type(key)
            terminal.wait_for(lambda screen, c=shown, k=key: f"→ {k}" in screen.split(c)[-1], "the answer shown")
        screen = terminal.wait_for(lambda screen: "RUN-ENDED-0" in screen, "the run's end")
    finally:
        terminal.close()
    assert "all asked" in screen
    assert "│ git init -q again" not in screen  # never asked: "always" allowed git *
    assert (workdir / "once.txt").exists() and (workdir / "again" / ".git").is_dir()
    assert not (workdir / "denied.txt").exists() and not (workdir / "payload.txt").exists()
    assert _asks_reported(tmp_path / "ledger.db") == (5, 3, 2)


def test_arun_takes_an_async_callback_and_the_mode_denies_before_it_is_asked(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """In read-only, OpenCode is not offered bash: the callback is never asked about it."""
    asked: list[str] = []

    async def approve(request: ApprovalRequest) -> str:
        await asyncio.sleep(0)
        asked.append(request.tool)
        return "allow"

    upstream.script(
        Reply(tool_calls=[ToolCall("read", {"filePath": str(workdir / "a.txt")})], usage=usage(100, 5)),
        _bash("touch made.txt"),
        Reply(text="done", usage=usage(200, 5)),
    )
    (workdir / "a.txt").write_text("a")
    result = asyncio.run(
        arun(
            "Read, then write",
            model="openai/gpt-4o-mini",
            api_base=upstream.url,
            api_key="sk-x",
            workdir=workdir,
            settings=settings,
            permissions="read-only",
            approve=approve,
        )
    )
    assert result.ok, result.error
    assert asked == ["read"] and not (workdir / "made.txt").exists()
