"""Many runs, unattended: a JSONL file of tasks, each run in a fresh workdir, N at a time.

Every task is checked before the first one starts (a bad line is named, nothing runs). A task
that fails never stops the batch. Each result is appended to the results file as soon as its run
ends, and the ledger knows each run's batch and task (metadata `batch_id`, `task_id`), so
`--resume` reruns only what did not finish and `report --where batch_id=...` totals the batch.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..accounting.ledger import RunLedger, finished_values
from ..accounting.run import Totals
from ..api import check
from ..config.settings import Settings
from ..errors import GatewayError, SettingsError
from ..events import Event
from ..observability.traces import RunSpan, root_attributes, tracing_for
from ..runs.plan import prepare
from ..runs.result import OutputInvalid
from ..runs.runner import execute
from .progress import Progress, summary
from .tasks import Batch, Outcome, Task, load_tasks

__all__ = [
    "Batch",
    "Executor",
    "LocalExecutor",
    "Outcome",
    "Progress",
    "Task",
    "fresh_workdir",
    "load_tasks",
    "run_batch",
    "run_task",
    "summary",
]

# Beside each task's workdir (not in it, where the agent and git would see it), a marker that a
# batch made it: a folder is removed for a rerun only then.
_MARKER = ".{}.made-by-opencode-gateway"


def _options(task: Task, batch: Batch, settings: Settings) -> dict[str, Any]:
    """The task's run() arguments: its metadata and tags add to the batch's."""
    options = dict(task.options)
    options["metadata"] = {
        **settings.metadata,
        **options.get("metadata", {}),
        "batch_id": batch.batch_id,
        "task_id": task.id,
    }
    options["tags"] = [*settings.tags, *options.get("tags", [])]
    return options


def fresh_workdir(task: Task, batch: Batch) -> Path:
    """An empty (or template) workdir for the task. One left by an earlier run goes, but only if a
    batch made it: a real folder (no symlink), directly inside the root, with our marker beside it."""
    workdir = batch.workdir_root / task.id
    marker = batch.workdir_root / _MARKER.format(task.id)
    if workdir.is_symlink() or workdir.exists():
        ours = (
            not workdir.is_symlink()
            and workdir.is_dir()
            and workdir.resolve().parent == batch.workdir_root
            and marker.is_file()
        )
        if not ours:
            raise SettingsError(
                f"task {task.id}: {workdir} exists and was not made by a batch; move it away "
                "(or pass --workdir-root DIR)"
            )
        shutil.rmtree(workdir)
    if task.template is not None:
        shutil.copytree(task.template, workdir, symlinks=True)
    else:
        workdir.mkdir(parents=True)
    marker.write_text(f"{batch.batch_id}\n")
    return workdir


async def run_task(
    task: Task,
    batch: Batch,
    settings: Settings,
    options: Mapping[str, Any],
    on_event: Callable[[Event], None],
    ledger: RunLedger | None = None,
) -> Outcome:
    """One task, start to end, wherever it runs: its fresh workdir, then its run (rows to the
    settings' ledger, or to `ledger`)."""
    try:
        workdir = fresh_workdir(task, batch)
        plan = prepare(task.prompt, settings=settings, workdir=workdir, **options)
        return Outcome(task.id, await execute(plan, on_event, ledger=ledger))
    except OutputInvalid as exc:
        return Outcome(task.id, exc.result)
    except GatewayError as exc:
        return Outcome(task.id, None, exc)
    except OSError as exc:  # its workdir could not be made
        return Outcome(task.id, None, GatewayError(f"cannot prepare the workdir of task {task.id}: {exc}"))


class Executor(Protocol):
    """Where a batch's tasks run: in this process (LocalExecutor) or on Ray (ray_cluster.py)."""

    async def run(
        self,
        task: Task,
        batch: Batch,
        settings: Settings,
        options: Mapping[str, Any],
        on_event: Callable[[Event], None],
    ) -> Outcome: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Each task as a run of this process."""

    async def run(
        self,
        task: Task,
        batch: Batch,
        settings: Settings,
        options: Mapping[str, Any],
        on_event: Callable[[Event], None],
    ) -> Outcome:
        return await run_task(task, batch, settings, options, on_event)

    def close(self) -> None:
        """Nothing to release."""


async def _run_task(task: Task, batch: Batch, settings: Settings, progress: Progress, executor: Executor) -> Outcome:
    progress.started(task.id)
    started = time.monotonic()
    outcome = await executor.run(
        task, batch, settings, _options(task, batch, settings), lambda event: progress.event(task.id, event)
    )
    progress.finished(outcome, time.monotonic() - started)
    return outcome


async def run_batch(
    tasks: Sequence[Task],
    batch: Batch,
    settings: Settings,
    *,
    concurrency: int = 4,
    resume: bool = False,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> list[Outcome]:
    """Run the tasks (those not finished before, with `resume`), `concurrency` at a time, on
    `executor` (default: in this process); the outcomes of this invocation, in the tasks' order."""
    if concurrency < 1:
        raise SettingsError(f"--concurrency {concurrency} is invalid: run at least 1 task at a time")
    with tempfile.TemporaryDirectory() as blank:  # the workdirs are made later: a blank one stands in
        for task in tasks:  # everything that can be checked, before anything runs
            try:
                _check_workdir(task, batch, settings)
                check(task.prompt, settings=settings, workdir=task.template or blank, **_options(task, batch, settings))
            except SettingsError as exc:
                raise SettingsError(f"task {task.id}: {exc}") from None
    finished = finished_values(settings.ledger_location, "task_id", {"batch_id": batch.batch_id}) if resume else set()
    todo = [task for task in tasks if task.id not in finished]
    kept = _kept_results(batch.results_file, finished) if resume else []
    batch.results_file.parent.mkdir(parents=True, exist_ok=True)
    batch.results_file.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    progress = progress or Progress(batch, len(todo), concurrency)
    gate = asyncio.Semaphore(concurrency)
    runs_on = executor or LocalExecutor()

    async def one(task: Task) -> Outcome:
        async with gate:
            outcome = await _run_task(task, batch, settings, progress, runs_on)
        with batch.results_file.open("a", encoding="utf-8") as out:
            out.write(json.dumps(outcome.to_dict(), ensure_ascii=False) + "\n")
        return outcome

    progress.open()
    started = time.time()
    running = [asyncio.ensure_future(one(task)) for task in todo]
    try:
        outcomes = list(await asyncio.gather(*running))
        _trace_batch(batch, settings, outcomes, started)
        return outcomes
    except BaseException:  # interrupted: every task cancelled and awaited, no exception left unretrieved
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    finally:
        progress.close()


def _check_workdir(task: Task, batch: Batch, settings: Settings) -> None:
    """Refuse a task whose workdir, or the template it is copied from, holds one of the
    gateway's files (settings, a key, the data dir, the ledger or its live files): its agent
    would get it (with the keys in it or other tasks' tickets), and a rerun empties the workdir."""
    folders = [((batch.workdir_root / task.id).resolve(), "the agent sees it and a rerun empties it")]
    if task.template is not None:
        folders.append((task.template.resolve(), "each task's workdir starts as a copy, so its agent would get it"))
    for folder, why in folders:
        for path in settings.gateway_files:
            if path.exists() and (path == folder or folder in path.parents):
                raise SettingsError(f"its workdir {folder} holds the gateway's own {path}: {why}; move it out")


def _trace_batch(batch: Batch, settings: Settings, outcomes: Sequence[Outcome], started: float) -> None:
    """The batch's own span, which each of its runs' traces links to (observability/traces.py), with its totals."""
    tracing = tracing_for(settings.otel)
    if tracing is None:
        return
    sums = Totals()  # the batch's runs' records, summed as each run's account summed its own
    for outcome in outcomes:
        for record in outcome.result.requests if outcome.result is not None else ():
            sums.add(record)
    attributes = root_attributes(settings.model or "", "", sums.taken(), settings.metadata, settings.tags)
    attributes.update(
        {
            "opencode_gateway.batch_id": batch.batch_id,
            "opencode_gateway.tasks": len(outcomes),
            "opencode_gateway.failed": sum(not o.ok for o in outcomes),
        }
    )
    tracing.root(
        RunSpan(batch.batch_id, "batch", settings.model or "", started, time.time(), attributes), settings.secrets
    )


def _kept_results(results_file: Path, finished: set[str]) -> list[str]:
    """The lines of an earlier results file for tasks that finished: the last one of each."""
    kept: dict[str, str] = {}
    try:
        lines = results_file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            task_id = json.loads(line).get("task_id")
        except (ValueError, AttributeError):
            continue
        if task_id in finished:
            kept[task_id] = line
    return list(kept.values())
