"""A workdir the agent (or a hostile repository) fills with what a naive snapshot would block on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

from opencode_gateway import run
from opencode_gateway.settings import Settings

pytestmark = pytest.mark.e2e


def test_fifos_before_and_during_the_run_never_stall_it(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, data_dir: Path, tmp_path: Path
) -> None:
    os.mkfifo(workdir / "shipped-by-the-repo.fifo")  # no writer will ever come
    upstream.script(Reply(tool_calls=[ToolCall("bash", {"command": "mkfifo made-by-the-agent.fifo && echo made",
                                                       "description": "make a FIFO"})], usage=usage(1000, 50)),
                    Reply(text="done", usage=usage(1000, 50)))
    settings = Settings(opencode_bin=opencode_bin, data_dir=data_dir, timeout=120, ledger=tmp_path / "ledger.db")
    result = run("Make a FIFO", model="openai/gpt-4o-mini", api_base=upstream.url, api_key="sk-x", workdir=workdir,
                 settings=settings)
    assert result.stop_reason == "done", result.error
    assert [(f.path, f.change, f.diff) for f in result.files] == [("made-by-the-agent.fifo", "created", None)]
