"""A workdir the agent (or a hostile repository) fills with what a naive snapshot would block on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.settings import Settings
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e


def test_fifos_before_and_during_the_run_never_stall_it(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, data_dir: Path, tmp_path: Path
) -> None:
    os.mkfifo(workdir / "shipped-by-the-repo.fifo")  # no writer will ever come
    upstream.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash", {"command": "mkfifo made-by-the-agent.fifo && echo made", "description": "make a FIFO"}
                )
            ],
            usage=usage(1000, 50),
        ),
        Reply(text="done", usage=usage(1000, 50)),
    )
    settings = Settings(opencode_bin=opencode_bin, data_dir=data_dir, timeout=120, ledger=tmp_path / "ledger.db")
    result = run(
        "Make a FIFO",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    assert [(f.path, f.change, f.diff) for f in result.files] == [("made-by-the-agent.fifo", "created", None)]


def test_files_that_take_difflib_minutes_do_not_keep_the_run_past_its_timeout(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, data_dir: Path, tmp_path: Path
) -> None:
    """25 files of 240 KiB of repeated lines, each rewritten throughout by the agent: diffing
    them took ~100 s past a 20 s timeout. The run ends by its deadline; the files are listed, and
    the warnings say which diffs the deadline left out."""
    for index in range(25):
        (workdir / f"data{index}.txt").write_text("".join(f"{i % 150}\n" for i in range(60_000)))
    rewrite = "for f in data*.txt; do awk '{print ($1 * 7) % 150}' $f > $f.new && mv $f.new $f; done"
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": rewrite, "description": "rewrite"})], usage=usage(1000, 50)),
        Reply(text="done", usage=usage(1000, 50)),
    )
    timeout = 20.0
    settings = Settings(
        opencode_bin=opencode_bin,
        data_dir=data_dir,
        timeout=timeout,
        ledger=tmp_path / "ledger.db",
        diff_max_bytes=256 * 1024,
    )
    result = run(
        "Rewrite the data",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    assert result.duration_s <= timeout + 5  # the diffs' worker was stopped at the deadline
    assert sorted(f.path for f in result.files) == sorted(f"data{index}.txt" for index in range(25))
    assert any("diffs were not computed by the run's deadline" in warning for warning in result.warnings)
