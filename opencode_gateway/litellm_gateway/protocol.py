"""What a LiteLLM gateway's URLs and answers mean, for every client of it here."""

from __future__ import annotations

__all__ = ["gateway_base", "is_budget_error"]


def gateway_base(api_base: str) -> str:
    """A gateway URL as users write it (with or without /v1, a trailing slash), without /v1."""
    base = api_base.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def is_budget_error(body: bytes) -> bool:
    """A gateway's spent budget (key, team, user or tag): no retry can succeed."""
    return b"budget" in body.lower()
