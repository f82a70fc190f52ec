"""Tool calls held at the endpoint until the run answers them (OpenCode 2's approvals): what
OpenCode gets is the stream as it came, but each tool call whole, after the model finished its
turn, as the host decided it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_gateway.domain import WrittenCall
from opencode_gateway.endpoint.held import ToolCallHold, hold_whole
from opencode_gateway.opencode.denial import denial_of, denied_name

pytestmark = pytest.mark.anyio


def _event(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return (
        b"data: " + json.dumps({"id": "c1", "model": "m", "created": 1, "choices": choices, **extra}).encode() + b"\n\n"
    )


def _call_deltas(index: int, call_id: str, name: str, arguments: str, pieces: int) -> list[bytes]:
    step = max(1, len(arguments) // pieces)
    parts = [arguments[i : i + step] for i in range(0, len(arguments), step)] or [""]
    first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": parts[0]}}
    rest = [{"index": index, "function": {"arguments": part}} for part in parts[1:]]
    return [_event({"tool_calls": [delta]}) for delta in [first, *rest]]


class Decider:
    def __init__(self, deny: dict[str, str]) -> None:
        self.deny = deny
        self.asked: list[list[WrittenCall]] = []

    async def __call__(self, calls: Sequence[WrittenCall]) -> list[str | None]:
        self.asked.append(list(calls))
        return [self.deny.get(call.name) for call in calls]


async def _relayed(stream: bytes, decide: Decider, cut: int = 7) -> list[dict[str, Any] | str]:
    """The stream fed in `cut`-byte pieces, as OpenCode gets it: each event's data, parsed."""
    hold = ToolCallHold(decide)
    out = b""
    for start in range(0, len(stream), cut):
        out += b"".join(await hold.feed(stream[start : start + cut]))
    out += b"".join(await hold.close())
    events = [e[len(b"data: ") :] for e in out.split(b"\n\n") if e]
    return [e.decode() if e == b"[DONE]" else json.loads(e) for e in events]


async def test_a_stream_without_tool_calls_passes_as_it_came() -> None:
    stream = _event({"role": "assistant", "content": "Hel"}) + _event({"content": "lo"}) + _event({}, "stop")
    stream += _event(None, usage={"prompt_tokens": 3}) + b"data: [DONE]\n\n"
    decide = Decider({})
    assert await _relayed(stream, decide) == [json.loads(e[6:]) for e in stream.split(b"\n\n")[:-2]] + ["[DONE]"]
    assert decide.asked == []


async def test_calls_split_over_chunks_reach_opencode_whole_after_the_turn_ends_and_before_its_finish() -> None:
    stream = _event({"role": "assistant", "content": "Let me."})
    stream += b"".join(_call_deltas(0, "call_a", "shell", '{"command": "touch made.txt"}', 4))
    stream += b"".join(_call_deltas(1, "call_b", "shell", '{"command": "rm -rf src"}', 3))
    stream += _event({}, "tool_calls") + _event(None, usage={"prompt_tokens": 3}) + b"data: [DONE]\n\n"
    decide = Decider({})
    events = await _relayed(stream, decide)
    [asked] = decide.asked
    assert asked == [
        WrittenCall("call_a", "shell", '{"command": "touch made.txt"}'),
        WrittenCall("call_b", "shell", '{"command": "rm -rf src"}'),
    ]
    text, released, finish, usage, done = events
    assert isinstance(text, dict) and text["choices"][0]["delta"]["content"] == "Let me."
    assert isinstance(released, dict)
    calls = released["choices"][0]["delta"]["tool_calls"]
    assert [(c["index"], c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "call_a", "shell", '{"command": "touch made.txt"}'),
        (1, "call_b", "shell", '{"command": "rm -rf src"}'),
    ]
    assert isinstance(finish, dict) and finish["choices"][0]["finish_reason"] == "tool_calls"
    assert isinstance(usage, dict) and usage["usage"] == {"prompt_tokens": 3} and done == "[DONE]"


async def test_a_denied_call_goes_on_under_a_name_that_says_why_and_reads_back_as_the_tool_it_named() -> None:
    stream = b"".join(_call_deltas(0, "call_b", "shell", '{"command": "rm -rf src"}', 2))
    stream += _event({}, "tool_calls") + b"data: [DONE]\n\n"
    events = await _relayed(stream, Decider({"shell": "the rule bash 'rm *' says deny"}))
    released = events[0]
    assert isinstance(released, dict)
    [call] = released["choices"][0]["delta"]["tool_calls"]
    assert call["function"]["name"] == "shell: denied by the host: the rule bash 'rm *' says deny"
    assert call["function"]["arguments"] == '{"command": "rm -rf src"}'
    assert denial_of(call["function"]["name"]) == ("shell", "denied by the host: the rule bash 'rm *' says deny")


async def test_calls_of_a_turn_that_never_finished_are_dropped_not_asked_about() -> None:
    stream = b"".join(_call_deltas(0, "call_a", "shell", '{"command": "touch x"}', 2))  # cut: no finish, no [DONE]
    decide = Decider({})
    assert await _relayed(stream, decide) == []
    assert decide.asked == []


async def test_an_event_that_is_not_a_chunk_passes_untouched() -> None:
    stream = b": keep-alive\n\n" + b'data: {"error": {"message": "boom"}}\n\n' + b"data: not json\n\n"
    hold = ToolCallHold(Decider({}))
    assert b"".join(await hold.feed(stream)) == stream


async def test_a_whole_answer_has_its_calls_decided_too() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "shell", "arguments": "{}"}}],
                },
            }
        ]
    }
    decided = json.loads(await hold_whole(json.dumps(body).encode(), Decider({"shell": "no"})))
    assert decided["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "shell: denied by the host: no"
    assert await hold_whole(b"not json", Decider({})) == b"not json"


def test_a_denied_name_is_no_tool_s_name_and_its_reason_is_one_bounded_line() -> None:
    name = denied_name("shell", "line one\nline two\t" + "x" * 1000)
    assert "\n" not in name and len(name) < 400 and name.endswith("...")
    assert denial_of("shell") is None and denial_of("my tool: denied by the host: x") is None


@settings(max_examples=60, deadline=None)
@given(
    pieces=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6),
    arguments=st.text(max_size=60),
    cut=st.integers(min_value=1, max_value=40),
)
def test_however_the_stream_is_cut_the_text_and_the_call_arrive_whole_and_once(
    pieces: list[str], arguments: str, cut: int
) -> None:
    import anyio

    stream = b"".join(_event({"content": piece}) for piece in pieces)
    stream += b"".join(_call_deltas(0, "call_a", "read", arguments, 3)) + _event({}, "tool_calls") + b"data: [DONE]\n\n"
    decide = Decider({})
    events = anyio.run(_relayed, stream, decide, cut)
    texts = [e["choices"][0]["delta"].get("content", "") for e in events if isinstance(e, dict) and e["choices"]]
    assert "".join(texts) == "".join(pieces)
    assert decide.asked == [[WrittenCall("call_a", "read", arguments)]]
