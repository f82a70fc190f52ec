"""How OpenCode 2 is told that the host denied a tool call, and how the denial reads in its events.

A run on 2.x answers tool calls at its endpoint, before OpenCode sees them (endpoint/held.py). A
denied call reaches OpenCode under a name no tool has, one that says why: `shell: denied by the
host: <reason>`. OpenCode answers the model "No tool named "<that name>" is currently available"
and goes on, so the model learns why, and nothing ran. In OpenCode's events the call reads back
as what it was: the tool it named, its output the reason, as 1.18's plugin says it.
"""

from __future__ import annotations

__all__ = ["denial_of", "denied_name"]

_MARK = ": denied by the host: "
_REASON_MAX = 300  # a denied call's name carries its reason, cut to this many characters


def denied_name(name: str, reason: str) -> str:
    """What a denied call of `name` is renamed to: no tool's name (it has spaces), saying why."""
    reason = " ".join(reason.split()) or "no reason given"
    if len(reason) > _REASON_MAX:
        reason = reason[: _REASON_MAX - 3] + "..."
    return f"{name}{_MARK}{reason}"


def denial_of(name: str) -> tuple[str, str] | None:
    """The tool a renamed call named and what the model was told (`denied by the host: ...`);
    None for a name that is no denial."""
    tool, mark, reason = name.partition(_MARK)
    if not mark or not tool or " " in tool:
        return None
    return tool, f"denied by the host: {reason}"
