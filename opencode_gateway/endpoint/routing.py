"""Who may call the endpoint, and where each of their requests goes.

A run's endpoint has one token and its targets (the run's model, its small model, its routes); `serve`'s
has a token per launch and a target per OpenCode session (serve.SessionRouter). Both are a `Router`,
so the relay (app.py) asks one question of either."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..accounting.run import RunAccount
from ..domain import Purpose
from .tagging import Tagging
from .upstream import Upstream

__all__ = ["BadRequest", "Router", "RunRouter", "Target", "Targeting"]


class BadRequest(Exception):
    """A request the endpoint cannot route (answered 400 with this message)."""


@dataclass(frozen=True)
class Target:
    """Where a request goes and whose it is: one for a whole run; one per OpenCode session when
    a long-lived server serves many (serve/server.py)."""

    model: str  # the model string, as the user gave it
    upstream: Upstream
    tagging: Tagging
    account: RunAccount  # where records go; it admits each call (budgets)


# Chooses the target of one request from its headers, its body's `model` and what it is for
# (opencode/purpose.py); raises BadRequest.
Targeting = Callable[[Mapping[str, str], Any, Purpose], Target]


class Router(Protocol):
    """Who may call the endpoint, and where each of their requests goes."""

    def authorized(self, token: str) -> bool:
        """Whether a presented bearer token may call."""
        ...

    def route(self, headers: Mapping[str, str], requested: Any, purpose: Purpose) -> Target:
        """The target of one request (its headers, its body's `model`, what it is for); BadRequest
        when it has none."""
        ...

    def models(self) -> list[str]:
        """What `GET /v1/models` lists."""
        ...


@dataclass(frozen=True)
class RunRouter:
    """A run's: its one token, and its target, or with a small model or routes, the choice of one
    of its targets (`choose`)."""

    token: str
    target: Target
    choose: Targeting | None = None

    def authorized(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.token.encode())

    def route(self, headers: Mapping[str, str], requested: Any, purpose: Purpose) -> Target:
        return self.target if self.choose is None else self.choose(headers, requested, purpose)

    def models(self) -> list[str]:
        return [self.target.model]
