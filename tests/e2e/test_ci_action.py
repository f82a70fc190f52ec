"""The GitHub Action's run step (scripts/ci-action run, as action.yml calls it) on the real
OpenCode, with GitHub's files pointing at files: the figures in $GITHUB_OUTPUT, the summary in
$GITHUB_STEP_SUMMARY with the ticket's total so far, one pull request comment per ticket, and a
budget refusal that fails the step unless asked not to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
ACTION = Path(__file__).resolve().parents[2] / "scripts" / "ci-action"


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def step(
    tmp_path: Path, upstream: ScriptedUpstream, opencode_bin: str, workdir: Path, **inputs: str
) -> subprocess.CompletedProcess[str]:
    """The action's run step, in a job whose GitHub files are this test's, on a fresh output file."""
    (tmp_path / "output").unlink(missing_ok=True)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # opencode-gateway, as installed
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(tmp_path / "runner"),
        "OPENCODE_GATEWAY_HOME": str(tmp_path / "home"),
        "OPENCODE_BIN": opencode_bin,
        "INPUT_MODEL": "litellm_proxy/coder",  # the scripted server plays the gateway
        "INPUT_API_BASE": upstream.url,
        "INPUT_API_KEY": "sk-virtual",
        "INPUT_WORKDIR": str(workdir),
        **{f"INPUT_{name.upper()}": value for name, value in inputs.items()},
    }
    return subprocess.run([str(ACTION), "run"], env=env, capture_output=True, text=True, timeout=300)


def test_a_run_reports_its_figures_summary_and_one_comment_per_ticket(
    tmp_path: Path, upstream: ScriptedUpstream, opencode_bin: str, workdir: Path
) -> None:
    upstream.script(Reply(text="Fixed.", usage=usage(1000, 40, cost=0.0025)))
    first = step(tmp_path, upstream, opencode_bin, workdir, prompt="Fix the bug", ticket="ENG-412")
    assert first.returncode == 0, first.stderr[-3000:]
    figures = outputs(tmp_path / "output")
    assert figures["stop_reason"] == "done" and figures["run_id"].startswith("run_")
    assert (figures["requests"], figures["refused"], figures["input_tokens"], figures["output_tokens"]) == (
        "1", "0", "1000", "40",
    )  # fmt: skip
    assert figures["cost_usd"] == "0.0025"
    comment = Path(figures["comment_file"])
    assert comment.parent == tmp_path / "runner" / "opencode-gateway"
    summary = (tmp_path / "summary.md").read_text()
    assert (
        "### OpenCode on litellm_proxy/coder: done" in summary
        and f"| `{figures['run_id']}` | done | 1 | 0 |" in summary
    )
    assert "**ENG-412 so far** (every run in the ledger): 1 runs, 1 requests (0 refused), $0.002500" in summary

    upstream.script(Reply(text="Fixed again.", usage=usage(500, 10, cost=0.001)))
    second = step(tmp_path, upstream, opencode_bin, workdir, prompt="And the other one", ticket="ENG-412")
    assert second.returncode == 0, second.stderr[-3000:]
    assert outputs(tmp_path / "output")["comment_file"] == str(comment)  # the ticket's comment, updated
    assert [path.name for path in comment.parent.iterdir()] == [comment.name]
    text = comment.read_text()
    assert text.startswith("<!-- opencode-gateway ticket ") and "ENG-412" not in text.splitlines()[0]
    assert "2 runs, 2 requests (0 refused), $0.003500" in text and "Fix the bug" not in text
    assert (tmp_path / "summary.md").read_text().count("### OpenCode on") == 2  # the job's summary grows


@pytest.mark.parametrize("fail_on_budget", ["true", "false"])
def test_a_budget_refusal_fails_the_step_unless_asked_not_to(
    fail_on_budget: str, tmp_path: Path, upstream: ScriptedUpstream, opencode_bin: str, workdir: Path
) -> None:
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "say hi"})], usage=usage(1000, 20)),
        Reply(text="never sent", usage=usage(100, 5)),
    )
    result = step(
        tmp_path, upstream, opencode_bin, workdir,
        prompt="Say hi", ticket="ENG-9", max_requests="1", fail_on_budget=fail_on_budget,
    )  # fmt: skip
    figures = outputs(tmp_path / "output")
    assert figures["stop_reason"] == "budget_exceeded", result.stderr[-3000:]
    assert (figures["requests"], figures["refused"]) == ("1", "1")  # the refused call never went out
    assert len([r for r in upstream.requests if r["body"].get("tools")]) == 1
    if fail_on_budget == "true":
        assert result.returncode == 1
    else:
        assert result.returncode == 0 and "::warning::opencode-gateway: the budget stopped the run" in result.stdout


def test_a_batch_in_a_github_job_reports_its_totals(
    tmp_path: Path, upstream: ScriptedUpstream, opencode_bin: str
) -> None:
    upstream.fallback = lambda body: Reply(text="done", usage=usage(100, 10, cost=0.001))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"id": "t{n}", "prompt": "task {n}"}}\n' for n in range(2)))
    env = {
        **os.environ,
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "OPENCODE_GATEWAY_HOME": str(tmp_path / "home"),
        "OPENCODE_BIN": opencode_bin,
    }
    done = subprocess.run(
        [sys.executable, "-m", "opencode_gateway", "batch", str(tasks), "-m", "litellm_proxy/coder",
         "--api-base", upstream.url, "--api-key", "sk-virtual", "--workdir-root", str(tmp_path / "work")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = outputs(tmp_path / "output")
    assert figures["batch_id"] and (figures["tasks"], figures["failed"], figures["stop_reason"]) == ("2", "0", "done")
    assert (figures["requests"], figures["refused"], figures["input_tokens"]) == ("2", "0", "200")
    assert figures["cost_usd"] == "0.002"
    assert "(2 tasks, 0 failed)" in (tmp_path / "summary.md").read_text()
