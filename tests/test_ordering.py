"""CausalOrder: a model request is held until OpenCode's events it follows from are delivered."""

from __future__ import annotations

import asyncio
from typing import Any

from opencode_gateway.opencode.lines import (
    StepFinish,
    StepStart,
    Text,
    ToolCall,
    ToolResult,
)
from opencode_gateway.runs.ordering import CausalOrder

MAIN, CHILD = "ses_main", "ses_child"


def body(*results: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for call_id in results:
        messages.append({"role": "assistant", "tool_calls": [{"id": call_id, "type": "function"}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "ok"})
    return {"messages": messages}


def step(order: CausalOrder, *call_ids: str, finish: bool = True) -> None:
    order.saw(StepStart(MAIN))
    for call_id in call_ids:
        order.saw(ToolCall(MAIN, call_id=call_id, tool="bash"))
        order.saw(ToolResult(MAIN, call_id=call_id, tool="bash"))
    if finish:
        order.saw(StepFinish(MAIN, reason="tool-calls"))


def test_the_first_request_is_the_baseline_and_never_waits() -> None:
    order = CausalOrder()
    causes = order.causes(MAIN, body("call_from_an_earlier_turn"))
    assert causes == frozenset() and order.satisfied(causes)


def test_a_request_waits_for_the_results_and_the_end_of_the_step_it_carries() -> None:
    order = CausalOrder()
    order.causes(MAIN, body())
    causes = order.causes(MAIN, body("call_1", "call_2"))
    assert causes == {"call_1", "call_2"}
    assert not order.satisfied(causes)
    order.saw(StepStart(MAIN))
    order.saw(ToolResult(MAIN, call_id="call_1"))
    assert not order.satisfied(causes)  # call_2 not reported yet
    order.saw(ToolResult(MAIN, call_id="call_2"))
    assert not order.satisfied(causes)  # reported, but the step has not finished
    order.saw(StepFinish(MAIN, reason="tool-calls"))
    assert order.satisfied(causes)


def test_a_step_finish_before_the_results_does_not_count() -> None:
    order = CausalOrder()
    order.causes(MAIN, body())
    step(order, "call_1")
    causes = order.causes(MAIN, body("call_1", "call_2"))
    assert causes == {"call_1", "call_2"}
    assert not order.satisfied(causes)
    order.saw(ToolResult(MAIN, call_id="call_2"))
    assert not order.satisfied(causes)
    order.saw(StepFinish(MAIN))
    assert order.satisfied(causes)


def test_only_results_new_to_the_session_are_waited_for() -> None:
    order = CausalOrder()
    order.causes(MAIN, body())
    first = order.causes(MAIN, body("call_1"))
    step(order, "call_1")
    assert order.satisfied(first)
    assert order.causes(MAIN, body("call_1")) == frozenset()  # a retried request carries nothing new
    assert order.causes(MAIN, body("call_1", "call_2")) == {"call_2"}


def test_a_subagents_requests_never_wait() -> None:
    order = CausalOrder()
    order.causes(MAIN, body())
    assert order.causes(CHILD, body("child_call")) == frozenset()
    # ...and what the subagent carried does not excuse the main session from waiting for it.
    assert order.causes(MAIN, body("child_call")) == {"child_call"}


def test_nothing_waits_once_opencode_is_gone() -> None:
    order = CausalOrder()
    order.causes(MAIN, body())
    causes = order.causes(MAIN, body("never_printed"))
    order.close()
    assert order.satisfied(causes)


def test_wait_returns_when_the_events_arrive_and_gives_up_at_its_bound() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        order = CausalOrder()
        order.causes(MAIN, body())
        causes = order.causes(MAIN, body("call_1"))
        waiter = asyncio.ensure_future(order.wait(causes, timeout=60))
        await asyncio.sleep(0)
        held = not waiter.done()
        order.saw(Text(MAIN, text="ignored"))
        step(order, "call_1")
        released = await asyncio.wait_for(waiter, 60)
        gave_up = await order.wait(order.causes(MAIN, body("call_1", "lost")), timeout=0.01)
        return held, released, gave_up

    assert asyncio.run(scenario()) == (True, True, False)
