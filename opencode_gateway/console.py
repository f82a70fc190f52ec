"""What a person sees in a terminal while a run goes: the model's text as it streams, each tool
call as the model asks for it and as it ends, and a status line (elapsed time, requests, tokens,
cost so far) kept at the bottom.

A run in a terminal used to print nothing until it ended (a 90-second run was 90 silent seconds).
The view is drawn with rich on stderr, and only there: the answer still goes to stdout, whole, at
the end. It is fed the run's events (events.py) from the thread that iterates them; rich redraws
the status line from its own thread, so the clock moves while nothing else does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Protocol, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text as RichText

from .accounting.records import calls_said
from .events import (
    ApprovalAsked,
    Error,
    Event,
    ReasoningDelta,
    RequestFinished,
    StepStart,
    Text,
    TextDelta,
    ToolRequested,
    ToolResult,
    UpstreamRetry,
)
from .terminal import shown  # rich passes ESC through: every piece of text is shown with it made visible

__all__ = ["BatchView", "RunView", "elapsed"]

_TITLE_WIDTH = 100  # a tool line's title is cut here: a command can be a page long


def elapsed(seconds: float) -> str:
    """0:07, 1:32, 1:02:03."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _one_line(text: str, width: int = _TITLE_WIDTH) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


class RunView:
    """The live view of one run; use as a context manager around iterating its events, and pass
    each event to `show`."""

    def __init__(self, stream: TextIO, *, model: str) -> None:
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.model = model
        self.started = time.monotonic()
        self.requests = 0
        self.refused = 0
        self.tokens = 0
        self.cost: float | None = 0.0
        self.activity = "starting OpenCode"
        self._line = ""  # streamed text not yet ended by a newline
        self._streamed = False  # text streamed since OpenCode's last whole Text: that Text was shown
        self._spinner = Spinner("dots")
        self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
        self._asking = threading.Lock()

    def __enter__(self) -> RunView:
        self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._flush()
        self._live.stop()

    def __rich__(self) -> RenderableType:
        """What rich redraws: the line being streamed, then the status line."""
        cost = "cost unknown" if self.cost is None else f"${self.cost:.6f}"
        status = (
            f"{elapsed(time.monotonic() - self.started)} · {self.model} · {calls_said(self.requests, self.refused)} · "
            f"{self.tokens:,} tokens · {cost} · {self.activity}"
        )
        self._spinner.text = RichText(status, style="dim")
        return Group(RichText(shown(self._line)), self._spinner) if self._line else self._spinner

    def show(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._streamed = True
            self.activity = "writing"
            self._line += event.text
            *lines, self._line = self._line.split("\n")
            for line in lines:
                self._print(RichText(line))
        elif isinstance(event, Text):
            self._flush()
            if not self._streamed:  # not seen streaming through the endpoint
                self._print(RichText(event.text))
            self._streamed = False
        elif isinstance(event, ReasoningDelta):
            self.activity = "thinking"
        elif isinstance(event, ToolRequested):
            self._flush()
            self.activity = f"calling {event.tool}"
            self._print(RichText(f"→ {event.tool}", style="cyan"))
        elif isinstance(event, ToolResult):
            self._tool_ended(event)
        elif isinstance(event, ApprovalAsked):  # its answer shows as the tool's ✓ or ✗ line
            self.activity = f"asking about {event.tool}"
        elif isinstance(event, StepStart):  # may come after the step's first streamed words: no flush
            self.activity = "waiting for the model"
        elif isinstance(event, RequestFinished):
            if event.cost_source == "refused":
                self.refused += 1
            else:
                self.requests += 1
            self.tokens, self.cost = event.run_tokens, event.run_cost
        elif isinstance(event, UpstreamRetry):
            self._print(
                RichText(
                    f"! the upstream answered {event.status_code}: retry {event.attempt} in {event.delay_s:g} s",
                    style="yellow",
                )
            )
        elif isinstance(event, Error):
            self._flush()
            self._print(RichText(f"✗ {event.name}: {_one_line(event.message)}", style="red"))

    @contextlib.contextmanager
    def paused(self) -> Iterator[Callable[[str], None]]:
        """The live view stopped while a person is asked something (approvals/person.py); what
        the asker writes is shown with its control characters made visible."""
        with self._asking:
            self._flush()
            self._live.stop()
            try:
                yield lambda text: self.console.print(RichText(shown(text), style="bold"))
            finally:
                self._live.start()

    def _tool_ended(self, event: ToolResult) -> None:
        self._flush()
        call = f"{event.tool} {_one_line(event.title)}".rstrip()  # the tool, and its title if it has one
        if event.is_error:
            problem = _one_line(event.output.strip().splitlines()[0]) if event.output.strip() else "failed"
            self._print(RichText(f"✗ {call} — {problem}", style="red"))
        else:
            self._print(RichText(f"✓ {call}", style="green"))
        self.activity = "waiting for the model"

    def _flush(self) -> None:
        """End the streamed line, if one is open."""
        if self._line:
            self._print(RichText(self._line))
            self._line = ""

    def _print(self, text: RichText) -> None:
        self.console.print(RichText(shown(text.plain), style=text.style))


class BatchFigures(Protocol):
    """What a batch's view draws (batch.Progress keeps it)."""

    @property
    def running(self) -> Mapping[str, RequestFinished | None]: ...  # running task -> its latest request's totals

    @property
    def requests(self) -> Mapping[str, int]: ...  # task -> its requests so far

    @property
    def since(self) -> Mapping[str, float]: ...  # task -> when it started (monotonic)

    def line(self) -> str: ...


class BatchView:
    """The live view of a batch: a row per running task (its time, requests, tokens and cost so
    far) and the batch's line, under the lines of the tasks that ended."""

    def __init__(self, stream: TextIO, progress: BatchFigures) -> None:
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.progress = progress
        self._live = Live(self, console=self.console, refresh_per_second=2, transient=True)

    def __rich__(self) -> RenderableType:
        progress, now = self.progress, time.monotonic()
        table = Table(box=None, show_header=bool(progress.running), pad_edge=False)
        for column, justify in (
            ("task", "left"),
            ("time", "right"),
            ("requests", "right"),
            ("tokens", "right"),
            ("cost so far", "right"),
        ):
            table.add_column(column, justify=justify, style="dim" if column != "task" else None)  # type: ignore[arg-type]
        for task_id, last in list(progress.running.items()):
            cost = "-" if last is None else "unknown" if last.run_cost is None else f"${last.run_cost:.6f}"
            table.add_row(
                task_id,
                elapsed(now - progress.since.get(task_id, now)),
                str(progress.requests.get(task_id, 0)),
                f"{last.run_tokens if last else 0:,}",
                cost,
            )
        return Group(table, RichText(progress.line(), style="bold"))

    def print(self, text: str) -> None:
        self.console.print(RichText(shown(text), style="red" if "FAILED" in text else ""))

    def start(self) -> None:
        self._live.start()

    def stop(self) -> None:
        self._live.stop()
        self.console.print(RichText(self.progress.line()))
