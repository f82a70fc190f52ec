"""Tool calls held at the endpoint until the run has answered them: the approvals of OpenCode 2.

OpenCode 2 has no plugin hook that runs before a tool (1.18's `tool.execute.before` is gone), and
the server API it answers permission asks through takes a password that sits where the agent can
read it. So a run that asks decides at its own endpoint, outside the sandbox, before OpenCode
sees the call: the model's tool-call deltas are held back from the relayed stream, and when the
model has finished its turn each call is decided (`decide`) and sent on whole. An allowed call
goes on as the model wrote it; a denied one goes on under a name no tool has, a name that says
why (opencode/denial.py): OpenCode answers the model that no tool of that name is available,
naming it, and the run goes on, as after a denial on 1.18. Nothing of the call ran.

Everything else in the stream (text, reasoning, usage, errors, `[DONE]`) passes as it came, in
its order; an event that is not JSON passes untouched. The stream's bytes are parsed only when a
run asks (`Gates.holds_tool_calls`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..domain import WrittenCall
from ..opencode.denial import denied_name

__all__ = ["Decide", "PassThrough", "ToolCallHold", "hold_whole"]

_EVENT_END = re.compile(rb"\r?\n\r?\n")


Decide = Callable[[Sequence[WrittenCall]], Awaitable[Sequence[str | None]]]


@dataclass
class _Building:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class PassThrough:
    """A stream whose tool calls go on as they come: the endpoint of a run that does not ask."""

    async def feed(self, chunk: bytes) -> list[bytes]:
        return [chunk]

    async def close(self) -> list[bytes]:
        return []


class ToolCallHold:
    """One relayed stream's tool calls, held until `decide` answers them: `feed` each upstream
    chunk and send what it returns, then send what `close` returns. `decide` gets every call of
    the turn at once and returns, for each, None (allowed) or why it is denied."""

    def __init__(self, decide: Decide) -> None:
        self._decide = decide
        self._buffer = b""
        self._calls: dict[tuple[int, int], _Building] = {}  # (choice, index) -> the call so far
        self._last: dict[str, Any] = {}  # the last chunk, whose id and model the released calls carry

    async def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        *events, self._buffer = _EVENT_END.split(self._buffer)
        out: list[bytes] = []
        for event in events:
            out.extend(await self._event(event))
        return out

    async def close(self) -> list[bytes]:
        """What is left once the upstream's stream ended well: a last event without its blank
        line. Calls of a turn that never said it finished are dropped, never run: the stream
        was cut, and the endpoint tells OpenCode so."""
        rest, self._buffer = self._buffer, b""
        out = await self._event(rest) if rest.strip() else []
        self._calls.clear()
        return out

    async def _event(self, event: bytes) -> list[bytes]:
        data = _data(event)
        if data == b"[DONE]":
            return [*await self._release(), event + b"\n\n"]
        chunk = _chunk(data)
        if chunk is None:
            return [event + b"\n\n"]
        self._last = chunk
        choices = [choice for choice in chunk["choices"] if isinstance(choice, dict)]
        held = any([self._take(choice) for choice in choices])  # every choice's calls taken
        finished = any(choice.get("finish_reason") for choice in choices)
        if not held and not finished:
            return [event + b"\n\n"]
        released = await self._release() if finished else []
        emptied = held and not finished and all(map(_empty, choices)) and not chunk.get("usage")
        return released + ([] if emptied else [b"data: " + json.dumps(chunk).encode() + b"\n\n"])

    def _take(self, choice: dict[str, Any]) -> bool:
        """Hold the tool-call deltas of a chunk's choice, taken out of it; whether it had any."""
        delta = choice.get("delta")
        if not isinstance(delta, dict) or not delta.get("tool_calls"):
            return False
        self._hold(_index(choice), delta.pop("tool_calls"))
        return True

    def _hold(self, choice: int, deltas: Any) -> None:
        for delta in deltas if isinstance(deltas, list) else ():
            if not isinstance(delta, dict):
                continue
            building = self._calls.setdefault((choice, _index(delta)), _Building())
            function = _mapping(delta.get("function"))
            building.id = building.id or str(delta.get("id") or "")
            building.name += str(function.get("name") or "")
            building.arguments.append(str(function.get("arguments") or ""))

    async def _release(self) -> list[bytes]:
        if not self._calls:
            return []
        held, self._calls = self._calls, {}
        order = sorted(held)
        calls = [WrittenCall(held[key].id, held[key].name, "".join(held[key].arguments)) for key in order]
        by_choice: dict[int, list[dict[str, Any]]] = {}
        for (choice, index), call in zip(order, await _decided(calls, self._decide), strict=True):
            by_choice.setdefault(choice, []).append({"index": index, **call})
        chunk = {
            "id": self._last.get("id", ""),
            "object": "chat.completion.chunk",
            "created": self._last.get("created", 0),
            "model": self._last.get("model", ""),
            "choices": [
                {"index": choice, "delta": {"role": "assistant", "tool_calls": deltas}, "finish_reason": None}
                for choice, deltas in by_choice.items()
            ],
        }
        return [b"data: " + json.dumps(chunk).encode() + b"\n\n"]


async def hold_whole(raw: bytes, decide: Decide) -> bytes:
    """A whole (not streamed) answer with its tool calls decided, as a stream's are."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw
    choices = body.get("choices") if isinstance(body, dict) else None
    messages = [c["message"] for c in choices or () if isinstance(c, dict) and isinstance(c.get("message"), dict)]
    for message in messages:
        wrote = message.get("tool_calls")
        if isinstance(wrote, list) and wrote:
            message["tool_calls"] = await _decided([_whole_call(call) for call in wrote], decide)
    return json.dumps(body).encode()


def _whole_call(call: Any) -> WrittenCall:
    call = _mapping(call)
    function = _mapping(call.get("function"))
    return WrittenCall(str(call.get("id") or ""), str(function.get("name") or ""), str(function.get("arguments") or ""))


async def _decided(calls: list[WrittenCall], decide: Decide) -> list[dict[str, Any]]:
    """The calls as OpenCode is to get them: allowed as written, denied renamed."""
    denials = await decide(calls)
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name if denied is None else denied_name(call.name, denied),
                "arguments": call.arguments,
            },
        }
        for call, denied in zip(calls, denials, strict=True)
    ]


def _data(event: bytes) -> bytes:
    """An SSE event's data: its `data:` lines, joined."""
    return b"\n".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")).strip()


def _chunk(data: bytes) -> dict[str, Any] | None:
    """A chat-completion chunk (a JSON object with a list of choices), else None."""
    try:
        chunk = json.loads(data) if data else None
    except ValueError:
        return None
    return chunk if isinstance(chunk, dict) and isinstance(chunk.get("choices"), list) else None


def _empty(choice: dict[str, Any]) -> bool:
    """A choice with nothing left to tell once its tool calls are held."""
    delta = choice.get("delta") or {}
    said = {key: value for key, value in delta.items() if key != "role" and value not in (None, "", [])}
    return not said and not choice.get("finish_reason")


def _index(part: dict[str, Any]) -> int:
    index = part.get("index")
    return index if isinstance(index, int) else 0


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
