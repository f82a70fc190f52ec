"""How a run ended, decided from what happened: every ending, without running anything."""

from __future__ import annotations

import dataclasses

import pytest

from opencode_gateway.accounting.budget import Refusal
from opencode_gateway.accounting.records import RequestRecord
from opencode_gateway.accounting.run import Totals
from opencode_gateway.accounting.usage import Usage
from opencode_gateway.errors import (
    BudgetExceeded,
    OpenCodeError,
    OpenCodeFailed,
    RunTimeout,
    TurnLimitReached,
    UpstreamError,
)
from opencode_gateway.opencode.lines import Error, StepStart, Text
from opencode_gateway.opencode.process import ProcessExit
from opencode_gateway.runs.conclusion import Happened, conclude
from opencode_gateway.runs.output import OutputSpec
from opencode_gateway.runs.result import OutputInvalid
from tests.support import builders

EXITED = ProcessExit(0, "", timed_out=False)
ANSWER = (StepStart("ses_1"), Text("ses_1", text="Looking."), StepStart("ses_1"), Text("ses_1", text="Done."))


def record(status: int = 200, error: str | None = None, cost: float | None = 0.25) -> RequestRecord:
    return builders.record(
        f"r{status}", status=status, error=error, cost=cost, usage=Usage(100, 10) if status < 400 else None
    )


def happened(**changes: object) -> Happened:
    """What happened in a run; its totals summed from its records, as its account sums them."""
    base = Happened(
        run_id="run_1",
        model="m",
        mode="sdk",
        sandbox="bwrap",
        timeout=30,
        exit=EXITED,
        requests=(record(),),
        events=ANSWER,
        session_id="ses_1",
    )
    changed = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    totals = Totals()
    for each in changed.requests:
        totals.add(each)
    return dataclasses.replace(changed, totals=totals.taken())


def test_a_run_that_exited_cleanly_is_done_with_its_last_steps_text_and_totals() -> None:
    result = conclude(happened(warnings=("no sandbox",)))
    assert (result.stop_reason, result.error, result.text) == ("done", None, "Done.")
    assert result.cost == 0.25 and result.usage.requests == 1 and result.sandbox == "bwrap"
    assert result.warnings == ("no sandbox",)


def test_a_budget_refusal_ends_it_as_budget_exceeded_whatever_else_happened() -> None:
    result = conclude(
        happened(
            refusal=Refusal("max_requests", "run budget exceeded: max_requests is 1"),
            exit=ProcessExit(None, "", True),
            fatal=record(500, "boom"),
        )
    )
    assert result.stop_reason == "budget_exceeded" and isinstance(result.error, BudgetExceeded)
    assert "max_requests is 1" in str(result.error)


def test_a_timeout_names_the_limit() -> None:
    result = conclude(happened(exit=ProcessExit(None, "", timed_out=True)))
    assert result.stop_reason == "timeout" and isinstance(result.error, RunTimeout)
    assert "timeout of 30 s" in str(result.error)


def test_the_failed_request_that_ended_the_run_is_its_error() -> None:
    failed = record(503, "the provider is overloaded")
    result = conclude(happened(requests=(record(), failed), fatal=failed, exit=ProcessExit(None, "", False)))
    assert result.stop_reason == "error" and isinstance(result.error, UpstreamError)
    assert (result.error.status_code, str(result.error)) == (503, "the provider is overloaded")


def test_a_gateway_budget_error_is_budget_exceeded() -> None:
    failed = record(400, "Budget has been exceeded! Current cost: 2.0, Max budget: 1.0")
    result = conclude(
        happened(
            requests=(failed,),
            events=(Error("ses_1", name="APIError", message="x", status_code=400),),
            exit=ProcessExit(1, "", False),
        )
    )
    assert result.stop_reason == "budget_exceeded" and isinstance(result.error, BudgetExceeded)


@pytest.mark.parametrize(
    ("error", "expected", "status"),
    [
        (Error("ses_1", name="APIError", message="bad key", status_code=401), UpstreamError, 401),
        (Error("ses_1", name="ContextOverflow", message="too long"), OpenCodeError, None),
    ],
)
def test_opencodes_own_error_event_is_the_error(error: Error, expected: type, status: int | None) -> None:
    result = conclude(happened(events=(*ANSWER, error), exit=ProcessExit(1, "", False)))
    assert result.stop_reason == "error" and isinstance(result.error, expected)
    assert getattr(result.error, "status_code", None) == status


def test_an_upstream_errors_own_message_wins_over_opencodes_rewording() -> None:
    failed = record(401, "Incorrect API key provided")
    result = conclude(
        happened(
            requests=(failed,),
            exit=ProcessExit(1, "", False),
            events=(Error("ses_1", name="APIError", message="Unauthorized", status_code=401),),
        )
    )
    assert str(result.error) == "Incorrect API key provided"


def test_a_nonzero_exit_without_an_event_names_the_last_stderr_line() -> None:
    result = conclude(happened(events=(), exit=ProcessExit(1, "starting\nError: Session not found", False)))
    assert result.stop_reason == "error" and isinstance(result.error, OpenCodeFailed)
    assert str(result.error) == "opencode exited with code 1: Error: Session not found"


def test_requested_output_is_parsed_from_the_answer_or_is_an_output_invalid() -> None:
    spec = OutputSpec.of({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    good = conclude(happened(events=(StepStart("s"), Text("s", text='All done. {"n": 3}'))), spec)
    assert good.ok and good.output == {"n": 3}
    bad = conclude(happened(events=(StepStart("s"), Text("s", text="no JSON here"))), spec)
    assert bad.stop_reason == "error" and isinstance(bad.error, OutputInvalid)
    assert bad.error.raw_text == "no JSON here" and bad.error.result is bad
    failed = conclude(happened(exit=ProcessExit(None, "", True)), spec)
    assert failed.stop_reason == "timeout" and failed.output is None  # no answer is parsed from a failed run


def test_unpriced_requests_make_the_cost_unknown_and_say_so() -> None:
    result = conclude(happened(requests=(record(), record(cost=None))))
    assert result.cost is None and any("no price is known for model m" in w for w in result.warnings)


def test_the_turn_cap_ends_it_as_max_turns_keeping_the_text_so_far() -> None:
    result = conclude(
        happened(refusal=Refusal("max_turns", "turn limit reached: max_turns is 2"), exit=ProcessExit(None, "", False))
    )
    assert result.stop_reason == "max_turns" and isinstance(result.error, TurnLimitReached)
    assert result.text == "Done." and not result.ok


OVERFLOW = Error("ses_1", name="ContextOverflowError", message="maximum context length", status_code=400)


def test_a_context_overflow_that_opencode_compacted_away_is_done_with_a_warning() -> None:
    """OpenCode answers a provider's context overflow by compacting the conversation and going on,
    and exits 1 all the same (the real OpenCode, tried in tests/e2e/test_routes.py)."""
    records = (
        builders.record("r1"),
        builders.record("r2", status=400, error="context_length_exceeded", usage=None),
        builders.record("r3", purpose="compaction"),
        builders.record("r4"),
    )
    result = conclude(
        happened(
            requests=records, events=(*ANSWER[:2], OVERFLOW, *ANSWER[2:]), exit=ProcessExit(1, "", timed_out=False)
        )
    )
    assert (result.stop_reason, result.error, result.text) == ("done", None, "Done.")
    assert any("OpenCode compacted it and went on" in warning for warning in result.warnings)


@pytest.mark.parametrize(
    "records",
    [
        # no compaction after the overflow; a compaction but no turn after it; a turn after it failed
        (builders.record("r1"), builders.record("r2", status=400, error="context_length_exceeded", usage=None)),
        (builders.record("r2", status=400, error="too long", usage=None), builders.record("r3", purpose="compaction")),
        (builders.record("r3", purpose="compaction"), builders.record("r4", status=400, error="too long", usage=None)),
    ],
)
def test_an_overflow_that_was_not_compacted_away_is_an_error(records: tuple[RequestRecord, ...]) -> None:
    result = conclude(happened(requests=records, events=(*ANSWER, OVERFLOW), exit=ProcessExit(1, "", timed_out=False)))
    assert result.stop_reason == "error" and result.error is not None


def test_the_runs_totals_are_carried_into_the_result_as_the_account_summed_them() -> None:
    """Summed once, as the requests ended: the conclusion does not sum the records again."""
    from opencode_gateway.accounting.records import RunUsage
    from opencode_gateway.accounting.run import RunTotals

    summed = RunTotals(RunUsage(7, 3, requests=1), 0.5, 0, 0.125)
    result = conclude(dataclasses.replace(happened(), totals=summed))
    assert result.totals is summed
    assert (result.usage, result.cost, result.cache_saved) == (summed.usage, 0.5, 0.125)
    assert result.to_dict()["cost"] == 0.5 and result.to_dict()["usage"]["input_tokens"] == 7
