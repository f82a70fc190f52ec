"""What a request cost, and where that figure came from.

A cost is never silently 0: when no source knows the price, the cost is `None` and its source is
`unpriced`, so a report can say how much of a run it could not price.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import _litellm
from .usage import Usage

__all__ = ["Cost", "litellm_price", "price"]


@dataclass(frozen=True)
class Cost:
    usd: float | None
    source: str  # "reported" (by the response), "litellm" (its price map), "unpriced", "failed" (refused)
    model: str | None = None  # the model whose price was used


def litellm_price(model: str, usage: Usage) -> float | None:
    """LiteLLM's price for the usage, given the whole usage object so every token kind is priced
    as LiteLLM prices it; None when LiteLLM does not know the model."""
    litellm = _litellm.load()
    usage_object = litellm.Usage(**dict(usage.raw)) if usage.raw else litellm.Usage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
        prompt_tokens_details={"cached_tokens": usage.cache_read_tokens},
        completion_tokens_details={"reasoning_tokens": usage.reasoning_tokens},
        cache_creation_input_tokens=usage.cache_write_tokens,
    )
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, usage_object=usage_object
        )
    except Exception:  # litellm raises a bare Exception for a model missing from its map
        return None
    return float(prompt_cost) + float(completion_cost)


def price(usage: Usage | None, models: Sequence[str], *, header_cost: float | None = None) -> Cost:
    """The cost of one request: reported by the response, else LiteLLM's price for the first of
    `models` it knows (the model that answered, then the one asked for), else unpriced."""
    if usage is None:
        return Cost(header_cost, "reported") if header_cost is not None else Cost(None, "unpriced")
    if usage.reported_cost is not None:
        return Cost(usage.reported_cost, "reported")
    if header_cost is not None:
        return Cost(header_cost, "reported")
    for model in dict.fromkeys(m for m in models if m):
        usd = litellm_price(model, usage)
        if usd is not None:
            return Cost(usd, "litellm", model)
    return Cost(None, "unpriced")
