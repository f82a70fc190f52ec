"""What a LiteLLM gateway's URLs and answers mean, for every client of it here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["GATEWAY_PREFIX", "Mode", "ModelRoute", "gateway_base", "is_budget_error"]

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


def gateway_base(api_base: str) -> str:
    """A gateway URL as users write it (with or without /v1, a trailing slash), without /v1."""
    base = api_base.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def is_budget_error(body: bytes) -> bool:
    """A gateway's spent budget (key, team, user or tag): no retry can succeed."""
    return b"budget" in body.lower()
