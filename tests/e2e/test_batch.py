"""`batch` end to end: the real CLI runs six tasks, three at a time, each a real OpenCode run in a
fresh workdir against the scripted model; one fails; `--resume` reruns only that one."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
CLI = [sys.executable, "-m", "opencode_gateway"]


def test_six_tasks_three_at_a_time_one_fails_and_resume_reruns_only_it(
    upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "work"
    broken = {"t4"}

    def answer(body: dict[str, Any]) -> Reply:
        """Each task writes result.txt in its own workdir, then reports; t4's key is refused while broken."""
        task = re.search(r"task (t\d)", json.dumps(body["messages"])).group(1)  # type: ignore[union-attr]
        if task in broken:
            return Reply(status=401, error="key revoked")
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(
                tool_calls=[ToolCall("write", {"filePath": str(root / task / "result.txt"), "content": task})],
                usage=usage(1000, 20),
            )
        return Reply(text=f"{task} done", usage=usage(1200, 10))

    monkeypatch.setattr(upstream, "fallback", answer)
    tasks = tmp_path / "nightly.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "prompt": f"Do task t{i}", "metadata": {"ticket": f"ENG-{i}"}}) + "\n"
            for i in range(1, 7)
        )
    )
    command = [
        *CLI,
        "batch",
        str(tasks),
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        upstream.url,
        "--api-key",
        "sk",
        "--concurrency",
        "3",
        "--workdir-root",
        str(root),
        "--opencode-bin",
        opencode_bin,
        "--ledger",
        str(tmp_path / "ledger.db"),
    ]
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}

    first = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 1, first.stderr
    results = [json.loads(line) for line in (tmp_path / "nightly.results.jsonl").read_text().splitlines()]
    by_task = {r["task_id"]: r for r in results}
    assert sorted(by_task) == [f"t{i}" for i in range(1, 7)]
    assert [t for t, r in sorted(by_task.items()) if r["stop_reason"] == "done"] == ["t1", "t2", "t3", "t5", "t6"]
    assert by_task["t4"]["stop_reason"] == "error" and by_task["t4"]["error"]["status_code"] == 401
    for task in ("t1", "t2", "t3", "t5", "t6"):
        assert (root / task / "result.txt").read_text() == task  # each in its own workdir
        assert by_task[task]["usage"]["input_tokens"] == 2200 and by_task[task]["requests"]
        assert [f["path"] for f in by_task[task]["files"]] == ["result.txt"]
    # The summary, and the progress on stderr (plain lines: not a terminal).
    rows = {line.split()[0]: line.split() for line in first.stdout.splitlines() if line.startswith("t")}
    assert rows["t4"][1] == "error" and rows["t1"][1:6] == ["done", "2", "0", "2,200", "30"]
    # 5 tasks x 2 requests, and t4's one refused request (no tokens, no cost)
    assert re.search(r"^TOTAL \(5 ok, 1 failed\)\s+11\s+0\s+11,000\s+150\s", first.stdout, re.M), first.stdout
    progress = first.stderr.splitlines()
    assert "t4: FAILED (error)" in "\n".join(progress)
    running = [int(m.group(1)) for m in (re.search(r" (\d) running", line) for line in progress) if m]
    assert max(running) == 3  # three at a time, never more
    assert progress[-1].startswith("batch nightly-") and " 5/6 done · 1 failed · 0 running" in progress[-1]

    broken.clear()
    requests_before = len(upstream.requests)
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr
    rerun = upstream.requests[requests_before:]
    assert len(rerun) == 2 and all("task t4" in json.dumps(r["body"]["messages"]) for r in rerun)
    assert "5 task(s) finished in an earlier invocation were skipped" in resumed.stdout
    results = [json.loads(line) for line in (tmp_path / "nightly.results.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in results) == [f"t{i}" for i in range(1, 7)]
    assert all(r["stop_reason"] == "done" for r in results)

    ledger = sqlite3.connect(tmp_path / "ledger.db")
    runs = ledger.execute(
        "SELECT json_extract(metadata, '$.task_id'), stop_reason FROM runs ORDER BY started_at"
    ).fetchall()
    assert sorted(runs) == sorted([(f"t{i}", "done") for i in (1, 2, 3, 5, 6)] + [("t4", "error"), ("t4", "done")])
    batch_id = re.search(r"--where batch_id=(\S+)", resumed.stdout).group(1)  # type: ignore[union-attr]
    report = subprocess.run(
        [
            *CLI,
            "report",
            "--by",
            "task_id",
            "--where",
            f"batch_id={batch_id}",
            "--ledger",
            str(tmp_path / "ledger.db"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    groups = {g["key"]: g for g in json.loads(report.stdout)["groups"]}
    assert groups["t4"]["runs"] == 2 and groups["t1"]["runs"] == 1
    assert json.loads(report.stdout)["total"]["requests"] == 13  # the 11 above, and t4's two on resume
