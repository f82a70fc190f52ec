"""What a LiteLLM gateway's URLs and answers mean, for every client of it here."""

from __future__ import annotations

from typing import Literal

__all__ = ["GATEWAY_PREFIX", "Mode", "gateway_base", "is_budget_error", "mode_of"]

Mode = Literal["gateway", "sdk"]

GATEWAY_PREFIX = "litellm_proxy/"  # a model string naming one of the gateway's model groups


def mode_of(model: str) -> Mode:
    """`gateway` for one of a LiteLLM gateway's model groups (`litellm_proxy/<group>`), else `sdk`
    (litellm in this process calls the provider)."""
    return "gateway" if model.startswith(GATEWAY_PREFIX) else "sdk"


def gateway_base(api_base: str) -> str:
    """A gateway URL as users write it (with or without /v1, a trailing slash), without /v1."""
    base = api_base.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def is_budget_error(body: bytes) -> bool:
    """A gateway's spent budget (key, team, user or tag): no retry can succeed."""
    return b"budget" in body.lower()
