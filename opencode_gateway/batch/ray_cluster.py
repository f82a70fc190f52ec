"""Batch tasks on a Ray cluster (`batch --executor ray`), one ledger, exact totals.

Each task is one Ray task running the same run as the local executor (`batch.run_task`), on
whichever node Ray picks, sandboxed as a local run is. The driver holds the one ledger: a run on a
worker writes its rows to a Ray queue instead of a file (each request's row as the request ends,
not at the end of the task), and the driver commits them. A run with period caps (`budgets:` with
`per`) asks the driver what its metadata value spent so far, on the same queue, and gets the answer
on a queue of its own: the caps hold across the cluster as they do on one machine. A worker that dies is retried by Ray
(`max_retries`); the run it left open is closed as `abandoned`, with what it recorded (it was real
spend), and the retry is a new run of the same task. A task whose every attempt died is a failed
result. What a task needs is in the Ray task's arguments: the task, the batch, the settings (keys
included, so they are in the cluster's object store, never in a task's name or a log line).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .._litellm import owning_loop
from ..accounting.budget import Claim, Verdict, period_caps
from ..accounting.ledger import Ledger, LedgerLocation, this_process
from ..accounting.records import ApprovalRecord, RequestRecord, RunRow
from ..config.settings import Settings
from ..credentials import refuse_inspection
from ..domain import ModelRoute
from ..errors import GatewayError, SettingsError
from ..events import Event, RequestFinished
from ..observability.traces import flush as flush_traces
from .local import Batch, Outcome, Task, run_task

__all__ = ["INSTALL", "RayExecutor", "load_ray", "worker_settings"]

INSTALL = "pip install 'opencode-gateway[ray]'"
_ANSWER_TIMEOUT = 120.0  # seconds a worker waits for the driver to say what was spent


def load_ray() -> Any:
    """Ray, or a SettingsError saying how to install it (it is an optional extra)."""
    try:
        import ray
    except ImportError:
        raise SettingsError(f"--executor ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


class _QueuedLedger:
    """A run's ledger on a worker: each write goes to the driver through a Ray queue. A put
    returns once the queue holds it, so when the task returns, all its rows are with the driver.
    A period cap's question (`hold`) is asked on that queue, answered on `answers`, one at a time: the
    driver answers after committing every row sent before it."""

    def __init__(self, queue: Any, task_id: str, answers: Any = None) -> None:
        self.queue = queue
        self.task_id = task_id
        self.answers = answers
        self.failure = None
        self._asking = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-read")

    def start_run(self, row: RunRow) -> None:
        self.queue.put(("start", self.task_id, dataclasses.replace(row, owner=this_process())))

    def record_request(self, run_id: str, record: RequestRecord) -> None:
        self.queue.put(("record", run_id, record))

    def record_approval(self, run_id: str, record: ApprovalRecord) -> None:
        self.queue.put(("approval", run_id, record))

    def update_run(self, row: RunRow) -> None:
        self.queue.put(("update", row.run_id, row))

    def hold(self, claim: Claim) -> Future[Verdict]:
        return self._asking.submit(self._ask, claim)

    def _ask(self, claim: Claim) -> Verdict:
        self.queue.put(("hold", self.task_id, claim))
        answer: Verdict = self.answers.get(timeout=_ANSWER_TIMEOUT)
        return answer

    def release(self, request_id: str) -> None:
        self.queue.put(("release", self.task_id, request_id))

    def flush(self) -> None:
        """Nothing to wait for: every put is already with the driver."""


def _on_worker(
    task: Task, batch: Batch, settings: Settings, options: Mapping[str, Any], queue: Any, answers: Any
) -> Outcome:
    """A batch task in a Ray worker process: the run, its rows and its progress sent to the driver."""
    refuse_inspection()  # the worker holds the keys too

    def on_event(event: Event) -> None:
        if isinstance(event, RequestFinished):  # what the driver's progress line shows
            queue.put(("event", task.id, event))

    ledger = _QueuedLedger(queue, task.id, answers)
    try:
        return asyncio.run(owning_loop(run_task(task, batch, settings, options, on_event, ledger=ledger)))
    finally:
        flush_traces()  # its run's trace sent before Ray may end this worker


# The driver writes the ledger; a worker's rows reach it through a queue, so a worker is never
# given where the ledger is or its password (Ray keeps a task's arguments, and shows them).
_LEDGER_VARIABLES = ("OPENCODE_GATEWAY_LEDGER", "PGPASSWORD", "PGPASSFILE")


def worker_settings(settings: Settings, options: Mapping[str, Any]) -> Settings:
    """The settings a worker gets: no ledger, and a gateway's URL and key resolved here, where
    they were given (perhaps in this environment), not read again from the worker's environment."""
    environ = None if settings.environ is None else {
        name: value for name, value in settings.environ.items() if name not in _LEDGER_VARIABLES
    }  # fmt: skip
    settings = settings.replace(ledger=None, environ=environ)
    if ModelRoute.of(options.get("model") or settings.model or "").mode != "gateway":
        return settings
    return settings.replace(api_base=settings.gateway_api_base, api_key=settings.gateway_api_key)


class RayExecutor:
    """Runs batch tasks as Ray tasks; this process (the driver) writes their ledger rows."""

    def __init__(
        self, ledger: LedgerLocation, *, address: str | None = None, num_cpus: float = 1.0, max_retries: int = 1
    ) -> None:
        ray = load_ray()
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:  # without an address: a local Ray instance, as on a laptop
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        from ray.util.queue import Queue

        self._queue = Queue()
        self._remote = ray.remote(_on_worker).options(
            num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False
        )
        self.ledger = Ledger(ledger)
        self._queues = Queue
        self._listeners: dict[str, Callable[[Event], None]] = {}
        self._answers: dict[str, Any] = {}  # task id -> its queue of answers to reads, if it has caps
        self._open: dict[str, str] = {}  # task id -> the run of its current attempt, until it closes
        self._draining: asyncio.Task[None] | None = None

    async def run(
        self,
        task: Task,
        batch: Batch,
        settings: Settings,
        options: Mapping[str, Any],
        on_event: Callable[[Event], None],
    ) -> Outcome:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain_every(0.25))
        self._listeners[task.id] = on_event
        if period_caps(
            settings.budgets, {**settings.metadata, **options.get("metadata", {})}
        ):  # it will ask what was spent
            self._answers[task.id] = self._queues()
        ref = self._remote.remote(
            task, batch, worker_settings(settings, options), dict(options), self._queue, self._answers.get(task.id)
        )
        try:
            outcome: Outcome = await ref
        except asyncio.CancelledError:  # Ctrl-C: the task is cancelled on the cluster too
            self._ray.cancel(ref, force=True)
            raise
        except self._ray.exceptions.RayError as exc:  # every attempt's worker died
            outcome = Outcome(
                task.id,
                None,
                GatewayError(f"task {task.id} failed on Ray on every attempt: {type(exc).__name__}: {str(exc)[:300]}"),
            )
        self._drain()
        abandoned = self._open.pop(task.id, None)
        if abandoned is not None:  # its worker died mid-run and no attempt closed it
            self.ledger.abandon(abandoned)
        self._listeners.pop(task.id, None)
        answers = self._answers.pop(task.id, None)
        if answers is not None:
            answers.shutdown()
        return outcome

    async def _drain_every(self, seconds: float) -> None:
        while True:
            self._drain()
            await asyncio.sleep(seconds)

    def _drain(self) -> None:
        """Commit what the workers sent so far, in the order they sent it."""
        size = self._queue.qsize()
        if size:
            for message in self._queue.get_nowait_batch(size):
                self._apply(message)

    def _apply(self, message: Sequence[Any]) -> None:
        kind, key, payload = message
        if kind == "start":
            earlier = self._open.pop(key, None)
            if earlier is not None:  # a retry: the earlier attempt's worker died with its run open
                self.ledger.abandon(earlier)
            self._open[key] = payload.run_id
            self.ledger.start_run(payload)
        elif kind == "record":
            self.ledger.record_request(key, payload)
        elif kind == "approval":
            self.ledger.record_approval(key, payload)
        elif kind == "update":
            self.ledger.update_run(payload)
            if payload.stop_reason is not None:
                self._open = {task: run for task, run in self._open.items() if run != key}
        elif kind == "hold" and key in self._answers:  # asked after the rows sent before it: answered after them
            self._answers[key].put(self.ledger.hold(payload).result())
        elif kind == "release":
            self.ledger.release(payload)
        elif kind == "event" and key in self._listeners:
            self._listeners[key](payload)

    def close(self) -> None:
        if self._draining is not None:
            self._draining.cancel()
        with contextlib.suppress(Exception):
            self._drain()
        for run_id in self._open.values():
            self.ledger.abandon(run_id)
        self.ledger.close()
        with contextlib.suppress(Exception):
            self._queue.shutdown()
        if self._started_ray:
            self._ray.shutdown()
