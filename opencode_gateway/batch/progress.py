"""A batch as a person follows it without a terminal's live view (console.py draws that): a line
per task as it starts and ends, a progress line with the batch's totals and an ETA, and the
summary table when it is over."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from ..accounting.records import calls_said
from ..accounting.report import render_table
from ..console import BatchView
from ..events import Event, RequestFinished
from .tasks import Batch, Outcome

__all__ = ["Progress", "summary"]


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
        self._view = BatchView(out, self) if self.live else None  # drawn only on a terminal

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
            detail = f"{calls_said(result.usage.requests, result.usage.refused)} · {cost}"
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


def summary(outcomes: Sequence[Outcome], wall_s: float) -> str:
    """One row per task and a total (its seconds: the batch's wall time, `wall_s`, not the sum of
    its tasks'): what a person reads when the batch is over."""
    rows = []
    for outcome in outcomes:
        result = outcome.result
        if result is None:
            rows.append([outcome.task_id, "error", "0", "0", "0", "0", "-", "0.0"])
            continue
        rows.append(
            [
                outcome.task_id,
                result.stop_reason,
                str(result.usage.requests),
                str(result.usage.refused),
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
            str(sum(r.usage.refused for r in results)),
            f"{sum(r.usage.input_tokens for r in results):,}",
            f"{sum(r.usage.output_tokens for r in results):,}",
            _cost_total(costs),
            f"{wall_s:.1f}",
        ]
    )
    return render_table(["task", "status", "requests", "refused", "input", "output", "cost_usd", "seconds"], rows)
