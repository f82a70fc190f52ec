"""Every event a run reports, in the order things happen: OpenCode's own (opencode/lines.py), the
endpoint's (text as the model streams it, a request finished, an upstream call being retried), and
`Done`, the last one, which carries the RunResult.

OpenCode 1.18 prints a text part only once it is complete, so live text comes from the endpoint,
which sees the model's stream as it passes: `TextDelta` and `ReasoningDelta` pieces, followed later
by OpenCode's whole `Text` (or `Reasoning`) for the same step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .opencode.lines import (
    Error,
    Event,
    Reasoning,
    StepFinish,
    StepStart,
    Text,
    ToolCall,
    ToolResult,
)

if TYPE_CHECKING:
    from .runs.result import RunResult

__all__ = [
    "ApprovalAnswered",
    "ApprovalAsked",
    "Done",
    "Error",
    "Event",
    "Reasoning",
    "ReasoningDelta",
    "RequestFinished",
    "StepFinish",
    "StepStart",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolRequested",
    "ToolResult",
    "UpstreamRetry",
]


@dataclass(frozen=True)
class TextDelta(Event):
    """A piece of the answer, as the model streamed it (only while streaming the run's events)."""

    type: ClassVar[str] = "text_delta"
    text: str = ""


@dataclass(frozen=True)
class ReasoningDelta(Event):
    """A piece of the model's reasoning, as it streamed it (only while streaming the run's events)."""

    type: ClassVar[str] = "reasoning_delta"
    text: str = ""


@dataclass(frozen=True)
class ToolRequested(Event):
    """The model asked for a tool, as it streamed its answer (only while streaming the run's
    events). OpenCode runs it once the answer ends, and reports it whole (ToolCall, ToolResult)."""

    type: ClassVar[str] = "tool_requested"
    tool: str = ""  # the tool, named as ToolCall names it (bash, read, edit, ...; 2.x's shell is bash)


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


@dataclass(frozen=True)
class ApprovalAsked(Event):
    """OpenCode asks the host whether a tool call may run (approvals/); its arguments redacted."""

    type: ClassVar[str] = "approval_asked"
    call_id: str | None = None
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    subject: str | None = None  # what the policy's patterns matched: the command, the path, the URL


@dataclass(frozen=True)
class ApprovalAnswered(Event):
    """The host's answer to an ask: by the permission mode, the policy, the callback or the host
    (no one to ask); the reason is what the model is told of a deny."""

    type: ClassVar[str] = "approval_answered"
    call_id: str | None = None
    tool: str = ""
    decision: str = ""
    by: str = ""
    reason: str = ""
    waited_s: float = 0.0


@dataclass(frozen=True)
class Done(Event):
    """The run is over; the last event of a stream."""

    type: ClassVar[str] = "done"
    result: RunResult

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "session_id": self.session_id, "result": self.result.to_dict(events=False)}
