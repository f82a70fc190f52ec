"""A workdir the agent (or a hostile repository) fills with what a naive snapshot would block on."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.accounting.ledger import Ledger, LedgerLocation
from opencode_gateway.config.settings import Settings
from tests.support.builders import run_row
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


def test_a_ledger_in_a_data_dir_inside_the_checkout_survives_an_agent_that_tampers_with_it(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """A CI job that keeps the gateway's home in its checkout (`OPENCODE_GATEWAY_HOME=.gateway`):
    the sandbox hides the data dir whole, so the agent finds neither the ledger nor the live files
    SQLite keeps beside it (-wal, -shm) to read another run's ticket in or truncate under the gateway."""
    data_dir = workdir / ".gateway"
    earlier = Ledger(LedgerLocation(path=data_dir / "ledger.db"))
    earlier.start_run(run_row("earlier", started_at=1.0, mode="sdk", metadata={"ticket": "SECRET-TICKET-41"}))  # fmt: skip
    earlier.close()
    tamper = (
        "ls -a .gateway > seen.txt 2>&1; cat .gateway/ledger.db* >> seen.txt 2>&1;"
        " for f in .gateway/ledger.db .gateway/ledger.db-wal .gateway/ledger.db-shm .gateway/ledger.db-journal;"
        " do truncate -s 0 $f >> seen.txt 2>&1; done; rm -rf .gateway/* >> seen.txt 2>&1; echo ran"
    )
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": tamper, "description": "tidy up"})], usage=usage(1000, 50)),
        Reply(text="done", usage=usage(1000, 50)),
    )
    settings = settings.replace(data_dir=data_dir, ledger=data_dir / "ledger.db", sandbox="bwrap")
    result = run("Tidy up", model="openai/gpt-4o-mini", api_base=upstream.url, api_key="sk-x", workdir=workdir,
                 settings=settings)  # fmt: skip
    assert result.stop_reason == "done", result.error
    seen = (workdir / "seen.txt").read_text(errors="replace")
    assert seen.startswith(".\n..\ncat: ") and "SECRET-TICKET-41" not in seen  # an empty folder, read-only
    rows = sqlite3.connect(data_dir / "ledger.db").execute("SELECT run_id, requests FROM runs ORDER BY started_at")
    assert rows.fetchall() == [("earlier", None), (result.run_id, 2)]  # both runs kept, this one's requests too
