"""The values every part of the package speaks of, in one small module: which way a model's
calls go (`ModelRoute`, parsed once from a model string, and its `Mode`), what a request was for
(`Purpose`), how a run ended (`StopReason`, and the ledger's `RunOutcome`), a tool call as the
model wrote it (`WrittenCall`).

Three ids are easy to confuse, so each has one name: a run's `run_id` (our own: the ledger row,
the trace, and what LiteLLM's spend logs call a session, `x-litellm-session-id`), OpenCode's
`session_id` (`ses_...`: its conversation, continued with --session), and a serve launch's
`launch_id` (a token's; each OpenCode session under it is a run of its own).

Imports nothing of the package."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["GATEWAY_PREFIX", "Mode", "ModelRoute", "Purpose", "RunOutcome", "StopReason", "WrittenCall"]

# How a run ended (RunResult.stop_reason); a ledger row may also say a run was interrupted.
StopReason = Literal["done", "error", "timeout", "budget_exceeded", "max_turns"]
RunOutcome = Literal[StopReason, "interrupted"]
# What a request was for: the agent's turn, or one of OpenCode's background calls (opencode/purpose.py).
Purpose = Literal["main", "title", "summary", "compaction"]

Mode = Literal["gateway", "sdk"]

GATEWAY_PREFIX = "litellm_proxy/"  # a model string naming one of the gateway's model groups

T = TypeVar("T")


@dataclass(frozen=True)
class ModelRoute:
    """A model string as users write it, parsed once: which way its calls go (`mode`: `gateway`
    for one of a LiteLLM gateway's model groups, `litellm_proxy/<group>`; else `sdk`, litellm in
    this process calls the provider), the name the upstream is asked for, and the names its
    per-model settings and prices are found by."""

    model: str
    mode: Mode
    upstream_model: str  # the group at a gateway (litellm prices `litellm_proxy/<m>` as <m> too), else the model

    @classmethod
    def of(cls, model: str) -> ModelRoute:
        if model.startswith(GATEWAY_PREFIX):
            return cls(model, "gateway", model[len(GATEWAY_PREFIX) :])
        return cls(model, "sdk", model)

    @property
    def group(self) -> str | None:
        """The gateway's model group; None in SDK mode."""
        return self.upstream_model if self.mode == "gateway" else None

    def setting(self, per_model: Mapping[str, T]) -> T | None:
        """A per-model setting (prices, budgets, caching): under the model as written, else under
        its group's name."""
        return per_model.get(self.model) or per_model.get(self.upstream_model)


@dataclass(frozen=True)
class WrittenCall:
    """A tool call as the model finished writing it, before OpenCode sees it (a run that asks
    holds it at its endpoint on OpenCode 2): `arguments` is its raw JSON text."""

    id: str
    name: str
    arguments: str
