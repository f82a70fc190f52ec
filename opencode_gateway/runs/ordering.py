"""Causal order between the endpoint's events and OpenCode's.

A run has two sources of events: the endpoint (streamed text, finished requests) and OpenCode's
stdout (steps, tool calls and results). OpenCode prints a step's tool events and then sends the
next model request, but the two travel on different pipes, so the endpoint can be handed request
k+1 before the runner has read step k's lines. Forwarding it at once would stream request k+1's
text before the tool events that request already carries in its messages.

`CausalOrder` knows which tool results each request of the main session carries and which
OpenCode has reported; the endpoint waits (bounded) until they are reported before forwarding.
The decisions are pure (`causes`, `saw`, `satisfied`); `wait` only sleeps on them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..opencode.lines import Event, StepFinish, ToolResult

__all__ = ["CausalOrder"]


def _result_ids(body: Mapping[str, Any]) -> set[str]:
    """The tool call ids whose results a chat request carries (its `tool` messages)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return set()
    return {
        m["tool_call_id"]
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)
    }


class CausalOrder:
    """Which requests must wait for which of OpenCode's events.

    The main session is the one that sent the first request; a subagent's session never waits
    (OpenCode does not print its events). The first request is the baseline: the results it
    carries (an earlier turn of a continued session) were never going to be printed.
    """

    def __init__(self) -> None:
        self._main: str | None = None
        self._carried: set[str] = set()  # results already carried by an earlier main request
        self._reported: dict[str, int] = {}  # call id -> index of its ToolResult among events seen
        self._last_finish = -1  # index of the last StepFinish
        self._count = 0
        self._closed = False
        self._changed = asyncio.Event()

    def causes(self, session_id: str | None, body: Mapping[str, Any]) -> frozenset[str]:
        """The tool results this request is the consequence of, not yet printed by OpenCode."""
        ids = _result_ids(body)
        if self._main is None:
            self._main = session_id
            self._carried |= ids
            return frozenset()
        if session_id != self._main:
            return frozenset()
        new = ids - self._carried
        self._carried |= ids
        return frozenset(new)

    def saw(self, event: Event) -> None:
        """One event of OpenCode's, as the runner delivers it."""
        if isinstance(event, ToolResult) and event.call_id:
            self._reported[event.call_id] = self._count
        elif isinstance(event, StepFinish):
            self._last_finish = self._count
        self._count += 1
        self._changed.set()

    def close(self) -> None:
        """OpenCode is gone: nothing more will be printed, so nothing waits."""
        self._closed = True
        self._changed.set()

    def satisfied(self, causes: frozenset[str]) -> bool:
        """Every cause reported, and the step that reported the last of them finished."""
        if self._closed or not causes:
            return True
        if not causes <= self._reported.keys():
            return False
        return self._last_finish > max(self._reported[call_id] for call_id in causes)

    async def wait(self, causes: frozenset[str], timeout: float) -> bool:
        """Until `causes` are satisfied or `timeout` passed (a result OpenCode never prints must
        not hold a run up); True if they were."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.satisfied(causes):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True
