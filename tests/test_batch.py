"""Batches without a model: the tasks file is checked whole before anything runs, the progress line
and the summary say what happened, and a resumed batch keeps the results of finished tasks."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from opencode_gateway.accounting.ledger import Ledger, LedgerLocation
from opencode_gateway.accounting.records import RunUsage
from opencode_gateway.accounting.run import RunTotals
from opencode_gateway.batch.local import (
    Batch,
    Outcome,
    Progress,
    Task,
    fresh_workdir,
    load_tasks,
    run_batch,
    summary,
)
from opencode_gateway.config.file import load_settings
from opencode_gateway.config.settings import Settings
from opencode_gateway.errors import SettingsError, UpstreamError
from opencode_gateway.events import RequestFinished
from opencode_gateway.runs.result import RunResult


def tasks_file(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def result(stop_reason: str = "done", cost: float | None = 0.25, requests: int = 2) -> RunResult:
    return RunResult(
        run_id="run_x",
        text="",
        session_id=None,
        stop_reason=stop_reason,
        model="m",
        mode="sdk",
        totals=RunTotals(RunUsage(1000, 100, requests=requests), cost),
        duration_s=12.0,
    )


def test_tasks_are_read_with_their_options_and_paths_beside_the_file(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    path = tasks_file(
        tmp_path,
        {
            "id": "t1",
            "prompt": "Fix it",
            "model": "openai/gpt-4o",
            "workdir": "repo",
            "metadata": {"ticket": "ENG-1"},
            "skills": ["skills/notes"],
            "max_cost": 1,
        },
        "",
        {"id": "t2", "prompt": "Test it"},
    )
    first, second = load_tasks(path)
    assert (first.id, first.prompt, first.template) == ("t1", "Fix it", tmp_path / "repo")
    assert first.options == {
        "model": "openai/gpt-4o",
        "metadata": {"ticket": "ENG-1"},
        "skills": [str(tmp_path / "skills" / "notes")],
        "max_cost": 1,
    }
    assert (second.id, second.options, second.template) == ("t2", {}, None)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 1: not JSON"),
        ('["a list"]', "line 1: a task is a JSON object"),
        ({"id": "t1"}, "task t1 has no prompt"),
        ({"id": "../escape", "prompt": "x"}, "id '../escape' is invalid"),
        ({"id": "..", "prompt": "x"}, "line 1: id '..' is invalid"),
        ({"id": ".", "prompt": "x"}, "line 1: id '.' is invalid"),
        ({"id": "t1", "prompt": "x", "modle": "m"}, "unknown key 'modle'"),
        ({"id": "t1", "prompt": "x", "timeout": "soon"}, "timeout must be int or float"),
        ({"id": "t1", "prompt": "x", "workdir": "absent"}, "is not a folder"),
        ({"id": "t1", "prompt": "x", "metadata": {"task_id": "mine"}}, "metadata task_id is set by the batch itself"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: object, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_tasks(tasks_file(tmp_path, line))


def test_a_tasks_file_that_is_not_utf8_is_one_line_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"id": "t1", "prompt": "a"}\n{"id": "t2", "prompt": "caf\xe9"}\n')
    with pytest.raises(SettingsError, match=r"tasks.jsonl line 2: not UTF-8 text \(byte 55\)"):
        load_tasks(path)
    path.write_text('{"id": "t1", "prompt": "a", "metadata": {"note": "caf\\udce9"}}\n')
    with pytest.raises(SettingsError, match="line 1: holds a .uXXXX escape that is not UTF-8 text"):
        load_tasks(path)


def test_duplicate_ids_and_empty_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="line 2: task id t1 is used twice"):
        load_tasks(tasks_file(tmp_path, {"id": "t1", "prompt": "a"}, {"id": "t1", "prompt": "b"}))
    with pytest.raises(SettingsError, match="holds no tasks"):
        load_tasks(tasks_file(tmp_path, ""))


def test_a_batch_lives_beside_its_file_under_a_stable_id(tmp_path: Path) -> None:
    path = tasks_file(tmp_path, {"id": "t1", "prompt": "a"})
    batch = Batch.of(path)
    assert batch == Batch.of(path) and batch.batch_id.startswith("tasks-")
    assert batch.workdir_root == tmp_path / "tasks.work"
    assert batch.results_file == tmp_path / "tasks.results.jsonl"
    with pytest.raises(SettingsError, match="batch id 'a b' is invalid"):
        Batch.of(path, batch_id="a b")


def test_progress_counts_done_failed_running_tokens_and_cost(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = Progress(
        Batch.of(tasks_file(tmp_path, {"id": "t", "prompt": "p"}), batch_id="b"), total=4, concurrency=2, out=out
    )
    assert not progress.live  # not a terminal: plain lines
    progress.started("t1")
    progress.started("t2")
    progress.event("t2", RequestFinished(None, run_tokens=500, run_cost=0.01))
    progress.finished(Outcome("t1", result()), 10.0)
    assert progress.line() == ("batch b: 1/4 done · 0 failed · 1 running · 1,600 tokens · $0.260000 · ETA 0:15")
    progress.finished(Outcome("t3", None, UpstreamError("refused", status_code=401)), 1.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "t1: started" and "t1: done · 2 requests · $0.250000 · 10.0 s" in lines
    assert "t3: FAILED (error) · refused · 1.0 s" in lines
    progress.finished(Outcome("t4", result(requests=1)), 2.0)
    assert "t4: done · 1 request · $0.250000 · 2.0 s" in out.getvalue()  # not "1 requests"
    assert lines[-1].startswith("batch b: 1/4 done · 1 failed · 1 running")


def test_the_summary_has_a_row_per_task_and_a_total() -> None:
    table = summary(
        [
            Outcome("t1", result()),
            Outcome("t2", result("timeout", cost=None, requests=1)),
            Outcome("t3", None, UpstreamError("refused", status_code=401)),
        ],
        wall_s=13.5,
    ).splitlines()
    assert table[0].split() == ["task", "status", "requests", "refused", "input", "output", "cost_usd", "seconds"]
    assert table[1].split() == ["t1", "done", "2", "0", "1,000", "100", "0.250000", "12.0"]
    assert table[2].split() == ["t2", "timeout", "1", "0", "1,000", "100", "unknown", "12.0"]
    assert table[3].split() == ["t3", "error", "0", "0", "0", "0", "-", "0.0"]
    assert table[-1].split() == [
        "TOTAL",
        "(1",
        "ok,",
        "2",
        "failed)",
        "3",
        "0",
        "2,000",
        "200",
        "0.250000",
        "+",
        "unpriced",
        "13.5",
    ]  # the batch's wall time, not the tasks' 24 s summed


def test_on_a_terminal_the_running_tasks_are_a_live_table_under_the_finished_ones(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = Progress(
        Batch.of(tasks_file(tmp_path, {"id": "t", "prompt": "p"}), batch_id="b"),
        total=2,
        concurrency=1,
        out=out,
        live=True,
    )
    progress.open()
    progress.started("t1")
    progress.started("t2")
    progress.event("t2", RequestFinished(None, run_tokens=500, run_cost=0.01))
    drawn = progress._view.__rich__()  # type: ignore[union-attr]
    table = drawn.renderables[0]  # type: ignore[attr-defined]
    assert [list(column.cells) for column in table.columns][0] == ["t1", "t2"]
    assert list(table.columns[2].cells) == ["0", "1"] and list(table.columns[4].cells) == ["-", "$0.010000"]
    progress.finished(Outcome("t1", result()), 3.0)
    progress.close()
    text = out.getvalue()
    assert "t1: done · 2 requests · $0.250000 · 3.0 s" in text
    assert text.rstrip().endswith("batch b: 1/2 done · 0 failed · 1 running · 1,600 tokens · $0.260000 · ETA 0:03")


@pytest.mark.parametrize("batch_id", [".", ".."])
def test_a_batch_id_of_dots_is_refused(tmp_path: Path, batch_id: str) -> None:
    with pytest.raises(SettingsError, match="batch id .* is invalid"):
        Batch.of(tasks_file(tmp_path, {"id": "t1", "prompt": "a"}), batch_id=batch_id)


def test_a_rerun_replaces_the_workdir_a_batch_made(tmp_path: Path) -> None:
    batch = Batch.of(tasks_file(tmp_path, {"id": "t1", "prompt": "a"}))
    task = Task("t1", "a", {}, None)
    first = fresh_workdir(task, batch)
    (first / "left-by-the-agent.txt").write_text("x")
    again = fresh_workdir(task, batch)
    assert again == first and list(again.iterdir()) == []


def test_a_folder_no_batch_made_is_never_removed(tmp_path: Path) -> None:
    batch = Batch.of(tasks_file(tmp_path, {"id": "t1", "prompt": "a"}))
    task = Task("t1", "a", {}, None)
    mine = batch.workdir_root / "t1"
    mine.mkdir(parents=True)
    (mine / "precious.txt").write_text("keep")
    with pytest.raises(SettingsError, match="exists and was not made by a batch"):
        fresh_workdir(task, batch)
    assert (mine / "precious.txt").read_text() == "keep"


def test_a_workdir_the_agent_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    batch = Batch.of(tasks_file(tmp_path, {"id": "t1", "prompt": "a"}))
    task = Task("t1", "a", {}, None)
    workdir = fresh_workdir(task, batch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep")
    workdir.rmdir()
    workdir.symlink_to(elsewhere)  # what an agent in task t1 could do before a rerun
    with pytest.raises(SettingsError, match="was not made by a batch"):
        fresh_workdir(task, batch)
    assert (elsewhere / "precious.txt").read_text() == "keep"


@pytest.mark.parametrize(
    "held", ["settings file", "key file", "key file via ..", "key file via a link", "ledger", "ledger-wal", "data dir"]
)
def test_a_template_holding_the_gateways_own_files_is_refused_before_any_task_runs(
    held: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository used as every task's workdir template that also holds the gateway's settings,
    its key file or the ledger: each task's agent would get a copy (the provider key, the settings,
    other tasks' tickets). The batch stops before any workdir is made, naming the file."""
    monkeypatch.delenv("LITELLM_PROXY_API_BASE", raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "provider.key").write_text("sk-provider-key-0123")
    config = (repo if held == "settings file" else tmp_path / "conf") / "gateway.yaml"
    config.parent.mkdir(exist_ok=True)
    (tmp_path / "key-link").symlink_to(repo / "provider.key")  # a name for the key outside the template
    config.write_text(
        {
            "key file": "api_key: file:../repo/provider.key\n",
            "key file via ..": "api_key: file:../conf/../repo/./provider.key\n",
            "key file via a link": "api_key: file:../key-link\n",
        }.get(held, "timeout: 60\n")
    )
    ledger = (repo if held.startswith("ledger") else tmp_path) / "ledger.db"
    if held == "ledger-wal":
        (repo / "ledger.db-wal").write_text("pages of other runs")
    data_dir = repo / ".gateway" if held == "data dir" else tmp_path / "data"
    data_dir.mkdir()
    settings = load_settings(config if held.startswith(("settings file", "key file")) else None)
    settings = settings.replace(model="openai/gpt-4o-mini", api_key="sk-x", ledger=ledger, data_dir=data_dir)
    if held == "ledger":
        Ledger(LedgerLocation(path=ledger)).close()
    batch = Batch.of(tasks_file(tmp_path, {"id": "t1", "prompt": "a", "workdir": "repo"}))
    expected = {
        "settings file": config, "key file": repo / "provider.key", "key file via ..": repo / "provider.key",
        "key file via a link": repo / "provider.key", "ledger": ledger,
        "ledger-wal": repo / "ledger.db-wal", "data dir": data_dir,
    }[held]  # fmt: skip
    with pytest.raises(SettingsError, match=f"task t1: its workdir {repo} holds the gateway's own {expected}: "):
        asyncio.run(run_batch(load_tasks(batch.tasks_file), batch, settings))
    assert not batch.workdir_root.exists() and not batch.results_file.exists()


def test_a_ledger_inside_a_tasks_future_workdir_is_refused_before_any_task_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workdir a task will get (root/<task id>) is where its agent works, and a rerun
    empties it: a ledger there is refused before anything runs, and is left as it was."""
    monkeypatch.delenv("LITELLM_PROXY_API_BASE", raising=False)
    batch = Batch.of(tasks_file(tmp_path, {"id": "t1", "prompt": "a"}))
    ledger = batch.workdir_root / "t1" / "ledger.db"
    ledger.parent.mkdir(parents=True)
    Ledger(LedgerLocation(path=ledger)).close()
    settings = Settings().replace(model="openai/gpt-4o-mini", api_key="sk-x", ledger=ledger, data_dir=tmp_path / "d")
    with pytest.raises(
        SettingsError,
        match=f"task t1: its workdir {batch.workdir_root / 't1'} holds the gateway's own {ledger}: the agent sees it",
    ):
        asyncio.run(run_batch(load_tasks(batch.tasks_file), batch, settings))
    assert ledger.exists() and not batch.results_file.exists()
