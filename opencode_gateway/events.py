"""Every event a run reports, in the order things happen: OpenCode's own (opencode/events.py) and
the endpoint's (a request finished, an upstream call is being retried)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .opencode.events import Error, Event, Reasoning, StepFinish, StepStart, Text, ToolCall, ToolResult

__all__ = [
    "Error",
    "Event",
    "Reasoning",
    "RequestFinished",
    "StepFinish",
    "StepStart",
    "Text",
    "ToolCall",
    "ToolResult",
    "UpstreamRetry",
]


@dataclass(frozen=True)
class RequestFinished(Event):
    """One request ended at the endpoint: its usage and cost, and the run's totals so far."""

    type: ClassVar[str] = "request_finished"
    request_id: str = ""
    status_code: int = 0
    usage: dict[str, int] | None = None
    cost: float | None = None
    cost_source: str = ""
    run_tokens: int = 0
    run_cost: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class UpstreamRetry(Event):
    """The endpoint is about to retry an upstream call that failed before its first byte."""

    type: ClassVar[str] = "upstream_retry"
    status_code: int = 0
    attempt: int = 0
    delay_s: float = 0.0
