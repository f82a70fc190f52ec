"""What a run returns: its answer, how it ended, what it used and cost, what it changed."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..accounting.pricing import usd
from ..accounting.records import RequestRecord, RunUsage
from ..accounting.run import RunTotals
from ..domain import Mode, StopReason
from ..errors import GatewayError
from ..opencode.lines import Event, StepStart, Text
from .files import FileChange

__all__ = ["KEPT_EVENTS_MAX", "OutputInvalid", "RunFacts", "RunResult", "final_text", "relayed_text"]


# What a run keeps of its events (RunResult.events, --json), in characters; past it they are
# still passed on as they come (stream(), the live view), not kept: whatever an agent writes
# into OpenCode's stdout, the run's memory stays bounded.
KEPT_EVENTS_MAX = 32 * 1024 * 1024


@dataclass(frozen=True)
class RunFacts:
    """What a run did, as it was seen: spelled once, for both what its runner saw (Happened) and
    what it returns (RunResult), which add how it ended."""

    run_id: str
    model: str
    mode: Mode
    totals: RunTotals = RunTotals()  # summed once, as the requests ended: `usage`, `cost`, `cache_saved` are its
    requests: tuple[RequestRecord, ...] = ()
    events: tuple[Event, ...] = ()
    events_truncated: bool = False  # more events came than a run keeps (the warnings say how many bytes)
    session_id: str | None = None  # OpenCode's session, for session_id= (opencode_gateway.domain)
    files: tuple[FileChange, ...] = ()  # what the run created, modified and deleted in its workdir
    sandbox: str = "none"  # the confinement the run actually had: "bwrap" or "none"
    duration_s: float = 0.0

    def facts(self) -> dict[str, Any]:
        """These fields by name, to build another value of the same run from."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(RunFacts)}


@dataclass(frozen=True, kw_only=True)
class RunResult(RunFacts):
    text: str  # the final answer: the text of the last step that produced text
    stop_reason: StopReason
    error: GatewayError | None = None
    warnings: tuple[str, ...] = ()
    output: Any = None  # with output=: the validated JSON object (or pydantic model instance)

    @property
    def cost_sources(self) -> dict[str, int]:
        """How many requests were priced from each source (reported, config, litellm, unpriced, ...)."""
        return dict(collections.Counter(r.cost.source for r in self.requests))

    @property
    def usage(self) -> RunUsage:
        return self.totals.usage

    @property
    def cost(self) -> float | None:
        """USD; None when some request could not be priced."""
        return self.totals.cost

    @property
    def cache_saved(self) -> float | None:
        """USD that prompt caching saved this run; None when a request with cache tokens had no
        known price. The share of input read from cache is `usage.cached_share`."""
        return self.totals.cache_saved

    @property
    def ok(self) -> bool:
        return self.stop_reason == "done"

    def raise_for_error(self) -> RunResult:
        """Raise the run's error, if it has one; return self otherwise."""
        if self.error is not None:
            raise self.error
        return self

    def to_dict(self, *, events: bool = True) -> dict[str, Any]:
        output = self.output.model_dump(mode="json") if hasattr(self.output, "model_dump") else self.output
        result: dict[str, Any] = {
            "run_id": self.run_id,
            "text": self.text,
            "output": output,
            "session_id": self.session_id,
            "stop_reason": self.stop_reason,
            "model": self.model,
            "mode": self.mode,
            "sandbox": self.sandbox,
            "usage": self.usage.to_dict(),
            "cost": usd(self.cost),
            "cost_sources": self.cost_sources,
            "cached_share": round(self.usage.cached_share, 6),
            "cache_saved": usd(self.cache_saved),
            "error": self.error.to_dict() if self.error else None,
            "warnings": list(self.warnings),
            "duration_s": round(self.duration_s, 3),
            "files": [f.to_dict() for f in self.files],
            "requests": [r.to_dict() for r in self.requests],
        }
        if events:
            result["events"] = [e.to_dict() for e in self.events]
            result["events_truncated"] = self.events_truncated
        return result


def relayed_text(records: Sequence[RequestRecord]) -> str | None:
    """The run's answer as the model gave it: the text of the last of the agent's requests whose
    answer had text (earlier narration left out), as the endpoint relayed it. None when the
    records carry no answers (they were not kept)."""
    answers = [record.answer for record in records if record.purpose == "main" and record.answer is not None]
    if not answers:
        return None
    return next((answer for answer in reversed(answers) if answer.strip()), "")


def final_text(events: Sequence[Event]) -> str:
    """The text of the last step that produced text, as OpenCode printed it."""
    steps: list[list[str]] = [[]]
    for event in events:
        if isinstance(event, StepStart):
            steps.append([])
        elif isinstance(event, Text):
            steps[-1].append(event.text)
    return next(("".join(texts) for texts in reversed(steps) if texts), "")


class OutputInvalid(GatewayError):
    """The run finished, but its final answer holds no JSON object matching the requested output
    schema. `raw_text` is the answer; `result` is the run's RunResult (its usage, cost, events)."""

    def __init__(self, message: str, *, raw_text: str, result: RunResult) -> None:
        super().__init__(message)
        self.raw_text = raw_text
        self.result = result

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "raw_text": self.raw_text}
