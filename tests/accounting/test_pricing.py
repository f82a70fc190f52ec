"""A request's cost and its source: reported, else LiteLLM's price, else unpriced (never 0)."""

from __future__ import annotations

import pytest

from opencode_gateway import _litellm
from opencode_gateway.accounting.pricing import Cost, price
from opencode_gateway.accounting.usage import Usage


@pytest.fixture(scope="module")
def gpt_4o_mini() -> dict:
    return _litellm.load().model_cost["gpt-4o-mini"]


def test_cached_tokens_are_priced_at_the_cache_read_price(gpt_4o_mini: dict) -> None:
    # 100 prompt tokens (80 cached) and 3 completion tokens: 1.08e-05 USD, not the 1.68e-05 a
    # prompt+completion-only price gives.
    usage = Usage.from_mapping({"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103,
                                "prompt_tokens_details": {"cached_tokens": 80}})
    expected = (20 * gpt_4o_mini["input_cost_per_token"] + 80 * gpt_4o_mini["cache_read_input_token_cost"]
                + 3 * gpt_4o_mini["output_cost_per_token"])
    cost = price(usage, ["openai/gpt-4o-mini"])
    assert cost.source == "litellm" and cost.model == "openai/gpt-4o-mini"
    assert cost.usd == pytest.approx(expected, abs=1e-15)
    assert cost.usd == pytest.approx(1.08e-05, abs=1e-15)


def test_the_first_known_model_is_priced() -> None:
    usage = Usage(input_tokens=1000, output_tokens=100)
    cost = price(usage, ["my-team-group", "gpt-4o-mini"])
    assert cost.source == "litellm" and cost.model == "gpt-4o-mini"


def test_reported_cost_wins_over_the_price_map() -> None:
    usage = Usage(input_tokens=1000, output_tokens=100, reported_cost=0.5)
    assert price(usage, ["gpt-4o-mini"]) == Cost(0.5, "reported")
    assert price(Usage(1000, 100), ["gpt-4o-mini"], header_cost=0.25) == Cost(0.25, "reported")


def test_an_unknown_model_is_unpriced_not_free() -> None:
    cost = price(Usage(input_tokens=1000, output_tokens=100), ["self-hosted-qwen"])
    assert cost == Cost(None, "unpriced")


def test_no_usage_is_unpriced() -> None:
    assert price(None, ["gpt-4o-mini"]) == Cost(None, "unpriced")
