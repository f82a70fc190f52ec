"""Many runs, unattended: a JSONL file of tasks, each run in a fresh workdir, N at a time.

Every task is checked before the first one starts (a bad line is named, nothing runs). A task
that fails never stops the batch. Each result is appended to the results file as soon as its run
ends, and the ledger knows each run's batch and task (metadata `batch_id`, `task_id`), so
`--resume` reruns only what did not finish and `report --where batch_id=...` totals the batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from .accounting.ledger import RunLedger, finished_values
from .accounting.report import render_table
from .api import check
from .errors import GatewayError, SettingsError
from .events import Event, RequestFinished
from .plan import prepare
from .result import OutputInvalid, RunResult
from .settings import Settings
from .tasks import FOLDER_NAME, Task, load_tasks

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


@dataclass(frozen=True)
class Outcome:
    """One task's end: its RunResult, or the error that kept it from running."""

    task_id: str
    result: RunResult | None
    error: GatewayError | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok

    def to_dict(self) -> dict[str, Any]:
        if self.result is not None:
            return {"task_id": self.task_id, **self.result.to_dict(events=False)}
        error = self.error.to_dict() if self.error else None
        return {"task_id": self.task_id, "stop_reason": "error", "error": error}


@dataclass(frozen=True)
class Batch:
    """A tasks file and where its work goes."""

    tasks_file: Path
    batch_id: str
    workdir_root: Path
    results_file: Path

    @classmethod
    def of(
        cls,
        tasks_file: Path,
        *,
        batch_id: str | None = None,
        workdir_root: Path | None = None,
        results_file: Path | None = None,
    ) -> Batch:
        """Defaults beside the tasks file; the batch id is stable for a file, so --resume finds it."""
        path = tasks_file.resolve()
        stem = path.stem
        default_id = f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
        if batch_id is not None and not FOLDER_NAME.match(batch_id):
            raise SettingsError(f"batch id {batch_id!r} is invalid: use letters, digits, . _ - (not . or ..)")
        return cls(
            path,
            batch_id or default_id,
            (workdir_root or path.parent / f"{stem}.work").resolve(),
            (results_file or path.parent / f"{stem}.results.jsonl").resolve(),
        )


class Progress:
    """The batch's state on stderr: on a terminal, a live table of the running tasks under the
    finished ones (console.py); plain lines otherwise."""

    def __init__(
        self, batch: Batch, total: int, concurrency: int, out: TextIO = sys.stderr, live: bool | None = None
    ) -> None:
        self.batch, self.total, self.concurrency, self.out = batch, total, concurrency, out
        self.live = out.isatty() if live is None else live
        self.running: dict[str, RequestFinished | None] = {}  # task -> its latest request's totals
        self.requests: dict[str, int] = {}  # task -> its requests so far
        self.since: dict[str, float] = {}  # task -> when it started (monotonic)
        self.outcomes: list[Outcome] = []
        self.durations: list[float] = []
        self._view: Any = None  # console.BatchView, imported (rich) only for a terminal
        if self.live:
            from .console import BatchView

            self._view = BatchView(out, self)

    def started(self, task_id: str) -> None:
        self.running[task_id] = None
        self.requests[task_id] = 0
        self.since[task_id] = time.monotonic()
        if not self.live:
            self._print(f"{task_id}: started")

    def event(self, task_id: str, event: Event) -> None:
        if isinstance(event, RequestFinished):
            self.running[task_id] = event
            self.requests[task_id] = self.requests.get(task_id, 0) + 1

    def finished(self, outcome: Outcome, duration: float) -> None:
        self.running.pop(outcome.task_id, None)
        self.outcomes.append(outcome)
        self.durations.append(duration)
        result = outcome.result
        if result is not None:
            cost = "cost unknown" if result.cost is None else f"${result.cost:.6f}"
            requests = result.usage.requests
            detail = f"{requests} request{'s' if requests != 1 else ''} · {cost}"
        else:
            detail = str(outcome.error)
        status = "done" if outcome.ok else f"FAILED ({result.stop_reason if result else 'error'})"
        self._print(f"{outcome.task_id}: {status} · {detail} · {duration:.1f} s")

    def line(self) -> str:
        done = sum(o.ok for o in self.outcomes)
        failed = len(self.outcomes) - done
        tokens = sum(o.result.usage.input_tokens + o.result.usage.output_tokens for o in self.outcomes if o.result)
        tokens += sum(e.run_tokens for e in self.running.values() if e)
        costs = [o.result.cost for o in self.outcomes if o.result] + [e.run_cost for e in self.running.values() if e]
        cost = "$" + _cost_total(costs)
        left = self.total - len(self.outcomes)
        eta = ""
        if self.durations and left:
            seconds = sum(self.durations) / len(self.durations) * left / self.concurrency
            eta = f" · ETA {int(seconds // 60)}:{int(seconds % 60):02d}"
        return (
            f"batch {self.batch.batch_id}: {done}/{self.total} done · {failed} failed · {len(self.running)} "
            f"running · {tokens:,} tokens · {cost}{eta}"
        )

    def _print(self, text: str) -> None:
        if self._view is not None:
            self._view.print(text)
        else:
            self.out.write(text + "\n" + self.line() + "\n")

    def open(self) -> None:
        if self._view is not None:
            self._view.start()

    def close(self) -> None:
        if self._view is not None:
            self._view.stop()


def _cost_total(costs: Sequence[float | None]) -> str:
    """The sum of the priced costs, and a note when some could not be priced (never a silent 0)."""
    return f"{sum(c or 0.0 for c in costs):.6f}" + (" + unpriced" if None in costs else "")


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


def summary(outcomes: Sequence[Outcome], wall_s: float) -> str:
    """One row per task and a total (its seconds: the batch's wall time, `wall_s`, not the sum of
    its tasks'): what a person reads when the batch is over."""
    rows = []
    for outcome in outcomes:
        result = outcome.result
        if result is None:
            rows.append([outcome.task_id, "error", "0", "0", "0", "-", "0.0"])
            continue
        rows.append(
            [
                outcome.task_id,
                result.stop_reason,
                str(result.usage.requests),
                f"{result.usage.input_tokens:,}",
                f"{result.usage.output_tokens:,}",
                "unknown" if result.cost is None else f"{result.cost:.6f}",
                f"{result.duration_s:.1f}",
            ]
        )
    results = [o.result for o in outcomes if o.result is not None]
    costs = [r.cost for r in results]
    ok = sum(o.ok for o in outcomes)
    rows.append(
        [
            f"TOTAL ({ok} ok, {len(outcomes) - ok} failed)",
            "",
            str(sum(r.usage.requests for r in results)),
            f"{sum(r.usage.input_tokens for r in results):,}",
            f"{sum(r.usage.output_tokens for r in results):,}",
            _cost_total(costs),
            f"{wall_s:.1f}",
        ]
    )
    return render_table(["task", "status", "requests", "input", "output", "cost_usd", "seconds"], rows)


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
        return Outcome(task.id, await plan.execute(on_event, ledger=ledger))
    except OutputInvalid as exc:
        return Outcome(task.id, exc.result)
    except GatewayError as exc:
        return Outcome(task.id, None, exc)
    except OSError as exc:  # its workdir could not be made
        return Outcome(task.id, None, GatewayError(f"cannot prepare the workdir of task {task.id}: {exc}"))


class Executor(Protocol):
    """Where a batch's tasks run: in this process (LocalExecutor) or on Ray (ray_executor.py)."""

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
    for task in tasks:  # everything that can be checked, before anything runs
        try:
            check(
                task.prompt,
                settings=settings,
                workdir=task.template or batch.tasks_file.parent,
                **_options(task, batch, settings),
            )
        except SettingsError as exc:
            raise SettingsError(f"task {task.id}: {exc}") from None
    finished = finished_values(settings.ledger_path, "task_id", {"batch_id": batch.batch_id}) if resume else set()
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
    running = [asyncio.ensure_future(one(task)) for task in todo]
    try:
        return list(await asyncio.gather(*running))
    except BaseException:  # interrupted: every task cancelled and awaited, no exception left unretrieved
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    finally:
        progress.close()


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
