"""How a run ended: a pure function from what happened to the RunResult.

Everything a run observed (its records, OpenCode's events and exit, the request that ended it, a
budget refusal, the output it was asked for) goes in as one value; the result comes out, with its
`stop_reason` and `error`. Nothing here starts, waits or writes, so every way a run can end is a
unit test of milliseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..accounting.budget import Refusal
from ..accounting.records import RequestRecord
from ..accounting.run import usage_warnings
from ..domain import StopReason
from ..errors import (
    BudgetExceeded,
    GatewayError,
    OpenCodeError,
    OpenCodeFailed,
    RunTimeout,
    TurnLimitReached,
    UpstreamError,
)
from ..litellm_gateway.protocol import is_budget_error
from ..opencode.lines import Error, Event
from ..opencode.process import EVENT_LINE_MAX, ProcessExit
from .output import OutputSpec
from .result import KEPT_EVENTS_MAX, OutputInvalid, RunFacts, RunResult, final_text, relayed_text

__all__ = ["Happened", "conclude"]


@dataclass(frozen=True, kw_only=True)
class Happened(RunFacts):
    """What one run did, as its runner saw it: the facts its result carries, and what decides how
    it ended."""

    timeout: float  # the run's limit, for the message when it was hit
    exit: ProcessExit
    fatal: RequestRecord | None = None  # the failed request that ended the run
    refusal: Refusal | None = None  # why the account refused a call (a budget, the turn cap): it ended the run
    warnings: tuple[str, ...] = ()  # of the runner's own: no sandbox, a budget overshoot, ...


def conclude(happened: Happened, output: OutputSpec | None = None) -> RunResult:
    """The run's result. A refused budget comes first, then a timeout, then the error that ended
    it, if any; an answer without the asked-for output is an OutputInvalid (in `error`: the
    caller raises it)."""
    stop_reason, error = _ending(happened)
    warnings = (*usage_warnings(happened.requests), *_memory_warnings(happened))
    if _compacted_after_overflow(happened.events, happened.requests):
        warnings = (
            *warnings,
            "the conversation outgrew the model's context window; OpenCode compacted it and went "
            "on (a window OpenCode is told, where LiteLLM's map knows it, lets it compact before that)",
        )
    # The answer is what the model sent through the endpoint: OpenCode's output can be written to by
    # the agent (a plugin's code runs in OpenCode, a tool can open its stdout through /proc).
    relayed = relayed_text(happened.requests)
    text = final_text(happened.events) if relayed is None else relayed
    result = RunResult(
        **happened.facts(), text=text, stop_reason=stop_reason, error=error, warnings=(*warnings, *happened.warnings)
    )
    if output is None or stop_reason != "done":
        return result
    value, problem = output.parse(text)
    if problem is None:
        return dataclasses.replace(result, output=value)
    invalid = OutputInvalid(f"{problem} (the answer is in the error's raw_text)", raw_text=text, result=result)
    result = dataclasses.replace(result, stop_reason="error", error=invalid)
    invalid.result = result  # the exception carries the run, and the run its exception
    return result


def _memory_warnings(happened: Happened) -> tuple[str, ...]:
    """What of OpenCode's output the run did not keep, to stay within its memory caps."""
    warnings = []
    if happened.events_truncated:
        warnings.append(
            f"OpenCode printed more events than a run keeps ({KEPT_EVENTS_MAX // 2**20} Mi characters): the rest "
            "were passed on as they came but are not in the result's events (events_truncated)"
        )
    if happened.exit.overlong_lines:
        warnings.append(
            f"{happened.exit.overlong_lines} line(s) of OpenCode's output were longer than "
            f"{EVENT_LINE_MAX // 2**20} MiB and skipped: none of OpenCode's events is that long"
        )
    return tuple(warnings)


def _ending(happened: Happened) -> tuple[StopReason, GatewayError | None]:
    if happened.refusal is not None:
        if happened.refusal.limit == "max_turns":
            return "max_turns", TurnLimitReached(str(happened.refusal))
        return "budget_exceeded", BudgetExceeded(str(happened.refusal))
    if happened.exit.timed_out:
        return "timeout", RunTimeout(f"the run exceeded its timeout of {happened.timeout:g} s and OpenCode was stopped")
    error = _run_error(happened.events, happened.requests, happened.exit, happened.fatal)
    if isinstance(error, UpstreamError) and error.status_code < 500 and is_budget_error(str(error).encode()):
        return "budget_exceeded", BudgetExceeded(str(error))  # the gateway's budget
    return ("done", None) if error is None else ("error", error)


def _compacted_after_overflow(events: Sequence[Event], records: Sequence[RequestRecord]) -> bool:
    """OpenCode's own recovery from a provider's context overflow: its only errors say so, it then
    compacted the conversation, and the turns after the compaction succeeded. OpenCode exits 1
    all the same; the run is done."""
    errors = [e for e in events if isinstance(e, Error)]
    if not errors or any(e.name != "ContextOverflowError" for e in errors):
        return False
    compactions = [i for i, r in enumerate(records) if r.purpose == "compaction" and r.ok]
    after = records[compactions[-1] + 1 :] if compactions else ()
    return any(r.purpose == "main" for r in after) and all(r.ok for r in after)


def _reported(error: Error, failed: RequestRecord | None) -> GatewayError:
    """OpenCode's last error event: an upstream's (in the upstream's own words, when the endpoint
    saw the failed request) or OpenCode's own."""
    if error.status_code is None:
        return OpenCodeError(f"OpenCode reported {error.name}: {error.message}", name=error.name)
    if failed is not None and failed.status_code >= 400:
        return UpstreamError(failed.error or error.message, status_code=failed.status_code)
    return UpstreamError(error.message, status_code=error.status_code)


def _run_error(
    events: Sequence[Event], records: Sequence[RequestRecord], exit: ProcessExit, fatal: RequestRecord | None
) -> GatewayError | None:
    if fatal is not None:
        return UpstreamError(
            fatal.error or f"upstream answered HTTP {fatal.status_code}", status_code=fatal.status_code
        )
    if _compacted_after_overflow(events, records):
        return None
    error_event = next((e for e in reversed(events) if isinstance(e, Error)), None)
    if error_event is not None:
        return _reported(error_event, next((r for r in reversed(records) if not r.ok), None))
    if exit.exit_code:
        last = exit.stderr_tail.strip().splitlines()[-1:] or ["(no stderr)"]
        return OpenCodeFailed(
            f"opencode exited with code {exit.exit_code}: {last[0]}",
            exit_code=exit.exit_code,
            stderr_tail=exit.stderr_tail,
        )
    return None
