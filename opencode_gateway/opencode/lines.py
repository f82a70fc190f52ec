"""OpenCode's `run --format json` lines, as typed events.

OpenCode 1.18 prints six event types (step_start, text, reasoning, tool_use, step_finish, error);
a `tool_use` line arrives only once the tool has finished, so it becomes a ToolCall followed by its
ToolResult. Tool names are normalised (`list` is `ls`, `webfetch` is `web_search`, ...) with the
native name kept beside them.

OpenCode 2 prints the same six types with other shapes, which the line itself tells apart: a
`tool_use` part's call id is its `id` (its own id is `partID`), its tools are renamed (`shell`,
`subagent`), and an error is `{type, message, status}` (1.18: `{name, data: {message,
statusCode}}`). Both parse to the same events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from .denial import denial_of

__all__ = [
    "Error",
    "Event",
    "Reasoning",
    "StepFinish",
    "StepStart",
    "Text",
    "ToolCall",
    "ToolResult",
    "normalize_tool",
    "parse_line",
]

_TOOL_NAMES = {
    "list": "ls",
    "webfetch": "web_search",
    "websearch": "web_search",
    "patch": "edit",
    "multiedit": "edit",
    "apply_patch": "edit",
    "shell": "bash",  # OpenCode 2's names
    "subagent": "task",
}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def normalize_tool(native: str) -> str:
    return _TOOL_NAMES.get(native, native)


@dataclass(frozen=True)
class Event:
    type: ClassVar[str] = "event"
    session_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}

    def size(self) -> int:
        """About how many characters the event holds: what a run keeps of its events is capped by it."""
        values = (getattr(self, f.name) for f in fields(self))
        return sum(len(value) if isinstance(value, str) else len(repr(value)) for value in values)


@dataclass(frozen=True)
class StepStart(Event):
    """OpenCode began one model call (a retried call starts another step)."""

    type: ClassVar[str] = "step_start"
    message_id: str | None = None


@dataclass(frozen=True)
class Text(Event):
    type: ClassVar[str] = "text"
    text: str = ""
    message_id: str | None = None


@dataclass(frozen=True)
class Reasoning(Event):
    type: ClassVar[str] = "reasoning"
    text: str = ""
    message_id: str | None = None


@dataclass(frozen=True)
class ToolCall(Event):
    type: ClassVar[str] = "tool_call"
    call_id: str = ""
    tool: str = ""
    native_tool: str = ""
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult(Event):
    type: ClassVar[str] = "tool_result"
    call_id: str = ""
    tool: str = ""
    native_tool: str = ""
    output: str = ""
    is_error: bool = False
    title: str = ""  # OpenCode's one-line title of the call (the command, the file)
    started_at: float | None = None  # when OpenCode ran it (Unix seconds), as OpenCode says
    ended_at: float | None = None


@dataclass(frozen=True)
class StepFinish(Event):
    """OpenCode's own view of a step; the endpoint's records, not these counts, are the usage."""

    type: ClassVar[str] = "step_finish"
    reason: str = ""
    tokens: Mapping[str, Any] = field(default_factory=dict)
    cost: float | None = None  # OpenCode's own figure, from the prices the config gave it (0 without)


@dataclass(frozen=True)
class Error(Event):
    type: ClassVar[str] = "error"
    name: str = ""
    message: str = ""
    status_code: int | None = None


def _tool_events(session_id: str | None, part: Mapping[str, Any]) -> list[Event]:
    native = str(part.get("tool", ""))
    state = _mapping(part.get("state"))
    tool_input = _mapping(state.get("input"))
    if native == "invalid":  # OpenCode's stand-in when the model called a tool it was not offered
        native = str(tool_input.get("tool") or native)
    # 1.18: `callID` (the part's own id is `id`); 2.x: `id`, the part's own id being `partID`
    call_id = part.get("callID") if "callID" in part else part.get("id") if "partID" in part else ""
    tool, call_id = normalize_tool(native), str(call_id or "")
    is_error = state.get("status") == "error" or part.get("tool") == "invalid"
    output = state.get("error") if state.get("status") == "error" else state.get("output")
    if part.get("tool") == "invalid" and not output:
        output = tool_input.get("error")
    denial = denial_of(native)
    if denial is not None:  # 2.x: the host denied it at the endpoint (denial.py)
        native, output = denial
        tool = normalize_tool(native)
    return [
        ToolCall(session_id, call_id=call_id, tool=tool, native_tool=native, input=dict(tool_input)),
        ToolResult(
            session_id,
            call_id=call_id,
            tool=tool,
            native_tool=native,
            output=str(output or ""),
            is_error=is_error,
            title=_title(state, tool_input, native),
            started_at=_seconds(_mapping(state.get("time")).get("start")),
            ended_at=_seconds(_mapping(state.get("time")).get("end")),
        ),
    ]


# What OpenCode 2 titles a call by (1.18 titles it itself, by its description or path): the first
# of these arguments the call has.
_TITLED_BY = ("command", "path", "pattern", "url", "query", "id")


def _title(state: Mapping[str, Any], tool_input: Mapping[str, Any], native: str) -> str:
    """A call's title: OpenCode's own, but where 2.x says only the tool's name, what it acted on."""
    title = str(state.get("title") or "")
    if title and title != native:
        return title
    return next((value for key in _TITLED_BY if isinstance(value := tool_input.get(key), str) and value), title)


def _seconds(milliseconds: Any) -> float | None:
    return (
        milliseconds / 1000 if isinstance(milliseconds, (int, float)) and not isinstance(milliseconds, bool) else None
    )


def _error_event(session_id: str | None, error: Any) -> Error:
    """1.18's `{name, data: {message, statusCode}}` or 2.x's `{type, message, status}`."""
    error = _mapping(error)
    data = _mapping(error.get("data"))
    status = data.get("statusCode", error.get("status"))
    name = error.get("name") or error.get("type") or "UnknownError"
    return Error(
        session_id,
        name=str(name),
        message=str(data.get("message") or error.get("message") or name or "unknown error"),
        status_code=status if isinstance(status, int) and not isinstance(status, bool) else None,
    )


def parse_line(line: str | bytes) -> list[Event]:
    """The events of one output line; a line that is not an OpenCode event gives none."""
    try:
        raw = json.loads(line)
    except ValueError:
        return []
    if not isinstance(raw, Mapping):
        return []
    kind = raw.get("type")
    session_id = raw.get("sessionID") if isinstance(raw.get("sessionID"), str) else None
    part = _mapping(raw.get("part"))
    message_id = part.get("messageID")
    if kind == "step_start":
        return [StepStart(session_id, message_id=message_id)]
    if kind == "text":
        return [Text(session_id, text=str(part.get("text", "")), message_id=message_id)]
    if kind == "reasoning":
        return [Reasoning(session_id, text=str(part.get("text", "")), message_id=message_id)]
    if kind == "tool_use":
        return _tool_events(session_id, part)
    if kind == "step_finish":
        tokens = dict(_mapping(part.get("tokens")))
        cost = part.get("cost")
        return [
            StepFinish(
                session_id,
                reason=str(part.get("reason", "")),
                tokens=tokens,
                cost=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            )
        ]
    if kind == "error":
        return [_error_event(session_id, raw.get("error"))]
    return []
