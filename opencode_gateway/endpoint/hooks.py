"""What a run's endpoint tells the run as requests go (observers: notifications, which decide
nothing), and what it asks of the run before forwarding a request and before a tool call goes on
(gates: a request waits for them, and a gate may refuse it or a tool call). Two protocols, as
httpx's event hooks are, instead of loose callbacks; `serve`'s endpoint has none of a run's
(NO_OBSERVERS, NO_GATES)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..domain import WrittenCall

__all__ = ["NO_GATES", "NO_OBSERVERS", "Gates", "NoGates", "NoObservers", "Observers"]


class Observers(Protocol):
    @property
    def streams_text(self) -> bool:
        """Whether `streamed` wants every piece (reading each chunk of every stream costs)."""
        ...

    def retrying(self, status_code: int, attempt: int, delay: float) -> None:
        """An upstream failure is about to be retried: `attempt` in `delay` seconds."""

    def streamed(self, session_id: str | None, kind: str, piece: str) -> None:
        """A piece of streamed text or reasoning, or a tool the model calls, as it passes:
        (OpenCode session, "text" | "reasoning" | "tool", piece or tool name)."""


class Gates(Protocol):
    @property
    def holds_tool_calls(self) -> bool:
        """Whether the model's tool calls wait for `approved` before OpenCode sees them (held.py)."""
        ...

    async def approved(self, session_id: str | None, calls: Sequence[WrittenCall]) -> Sequence[str | None]:
        """For each of a turn's tool calls: None lets it through, a text is why it is denied."""
        ...

    async def checked(self) -> str | None:
        """Awaited before any request is forwarded: None lets it through, a text refuses it (403).
        A run checks its gateway (or provider) while OpenCode starts, and OpenCode's first request
        waits for the answer."""

    async def follows(self, session_id: str | None, body: Mapping[str, Any]) -> None:
        """Awaited before a request is forwarded: the runner holds a request until OpenCode's
        events it follows from are delivered (runs/ordering.py)."""


class NoObservers:
    """Nothing to tell."""

    streams_text = False

    def retrying(self, status_code: int, attempt: int, delay: float) -> None:
        return None

    def streamed(self, session_id: str | None, kind: str, piece: str) -> None:
        return None


class NoGates:
    """Nothing to wait for: every request goes through."""

    holds_tool_calls = False

    async def approved(self, session_id: str | None, calls: Sequence[WrittenCall]) -> Sequence[str | None]:
        return [None] * len(calls)

    async def checked(self) -> str | None:
        return None

    async def follows(self, session_id: str | None, body: Mapping[str, Any]) -> None:
        return None


NO_OBSERVERS = NoObservers()
NO_GATES = NoGates()
