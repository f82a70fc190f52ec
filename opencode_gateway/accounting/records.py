"""The record of one request, as the endpoint saw it: the unit every total is summed from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..domain import Purpose
from .pricing import Cost, usd
from .usage import Usage

__all__ = [
    "ApprovalRecord",
    "RequestRecord",
    "RunRow",
    "RunUsage",
    "calls_said",
]


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    model: str  # the run's model (or model group) the request was pinned to
    upstream_model: str | None  # the model that answered, as the response named it
    status_code: int
    stream: bool
    usage: Usage | None  # None: no usage reported (and none estimated)
    cost: Cost
    started_at: float  # Unix time
    duration_s: float
    ttfb_s: float | None  # time to the first byte from upstream
    attempts: int = 1  # upstream calls made for it (retries of 429/5xx before the first byte)
    error: str | None = None
    usage_missing: bool = False  # the upstream reported no usage for an answer it gave
    estimated: bool = False  # `usage` was estimated with litellm's token counter
    response_id: str | None = None  # the upstream's id of the call (chatcmpl-...)
    session_id: str | None = None  # the OpenCode session that made it (x-session-id)
    purpose: Purpose = "main"
    # The text of the answer as the endpoint relayed it from the model (None: not kept). A run's
    # answer is taken from here, never from OpenCode's output, which the agent can write to.
    # Not in the ledger, nor in to_dict().
    answer: str | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status_code < 400 and self.error is None

    def to_dict(self) -> dict[str, Any]:
        usage = self.usage.to_dict() if self.usage else None
        return {
            "request_id": self.request_id,
            "model": self.model,
            "upstream_model": self.upstream_model,
            "status_code": self.status_code,
            "stream": self.stream,
            "usage": usage,
            "usage_missing": self.usage_missing,
            "estimated": self.estimated,
            "cost": usd(self.cost.usd),
            "cost_source": self.cost.source,
            "cache_saved": usd(self.cost.cache_saved),
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 6),
            "ttfb_s": None if self.ttfb_s is None else round(self.ttfb_s, 6),
            "attempts": self.attempts,
            "error": self.error,
            "response_id": self.response_id,
            "session_id": self.session_id,
            "purpose": self.purpose,
        }


@dataclass(frozen=True)
class ApprovalRecord:
    """A tool call the host was asked about, and its answer (approvals/): one row of `approvals`."""

    approval_id: str
    session_id: str | None
    call_id: str | None
    tool: str
    subject: str | None  # what a policy's patterns match: the command, the path, the URL
    decision: str  # allow | deny
    by: str  # mode | policy | callback | person | host
    reason: str
    asked_at: float
    waited_s: float


def calls_said(requests: int, refused: int = 0) -> str:
    """Calls as a line says them, the refused ones apart: "3 requests (2 refused)"."""
    return f"{requests} request{'s' if requests != 1 else ''}" + (f" ({refused} refused)" if refused else "")


@dataclass(frozen=True)
class RunUsage(Usage):
    """A run's tokens, summed over its requests as the endpoint saw them."""

    requests: int = 0  # calls that reached the model or the gateway
    usage_missing_requests: int = 0
    refused: int = 0  # calls a budget or the turn cap refused: they never went out

    def to_dict(self) -> dict[str, int]:
        return {
            **super().to_dict(),
            "requests": self.requests,
            "refused": self.refused,
            "usage_missing_requests": self.usage_missing_requests,
        }


@dataclass(frozen=True)
class RunRow:
    """A run's row in the ledger, one value wherever it goes (the ledger on either backend, the
    Ray driver's queue): what the run is, written when it opens, and how it went, its totals and,
    once it ended, when and how (`stop_reason` set), written as it goes."""

    run_id: str
    started_at: float
    model: str
    mode: str
    workdir: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    owner: str | None = None  # the process running it (host:pid:start time); None: this one
    session_id: str | None = None
    ended_at: float | None = None
    stop_reason: str | None = None  # a RunOutcome, or "abandoned"
    error: str | None = None
    usage: RunUsage = RunUsage()
    cost: float | None = 0.0  # None when any request could not be priced
    unpriced: int = 0
