"""A request's cost and its source: reported, else a configured price, else LiteLLM's price map
given the whole usage object, else unpriced (never 0)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from opencode_gateway import _litellm
from opencode_gateway.accounting.pricing import Cost, Price, Pricer, per_million
from opencode_gateway.accounting.usage import StreamUsageReader, Usage
from opencode_gateway.errors import SettingsError

litellm = _litellm.load()

MODELS = ["openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash"]

# The usage shapes LiteLLM and providers send at the end of a stream.
SHAPES: dict[str, dict[str, Any]] = {
    "plain": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500},
    "openai_cached": {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1000},
    },
    "anthropic_cache_read_and_write": {
        "prompt_tokens": 1700,
        "completion_tokens": 300,
        "total_tokens": 2000,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 500,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_creation_tokens": 500},
    },
    "reasoning": {
        "prompt_tokens": 1200,
        "completion_tokens": 900,
        "total_tokens": 2100,
        "completion_tokens_details": {"reasoning_tokens": 600},
    },
}


def stream(usage: dict[str, Any], *, usage_first: bool = False) -> bytes:
    text = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    carrying = {"id": "c1", "model": "m", "choices": [], "usage": usage}
    events = (
        [carrying, text, {**text, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        if usage_first
        else [text, carrying]
    )
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def read(data: bytes) -> Usage | None:
    reader = StreamUsageReader()
    for i in range(0, len(data), 7):  # in awkward 7-byte pieces
        reader.feed(data[i : i + 7])
    reader.close()
    return reader.usage


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("usage_first", [False, True], ids=["usage_last", "usage_before_final_chunk"])
def test_cost_is_litellms_own_price_for_the_full_usage_object(model: str, shape: str, usage_first: bool) -> None:
    usage = read(stream(SHAPES[shape], usage_first=usage_first))
    assert usage is not None
    prompt, completion = litellm.cost_per_token(model=model, usage_object=litellm.Usage(**SHAPES[shape]))
    cost = Pricer().price(usage, [model])
    assert cost.source == "litellm" and cost.model == model
    assert cost.usd == pytest.approx(prompt + completion, rel=1e-12)


def prices(model: str) -> dict[str, float]:
    return litellm.model_cost[model.split("/", 1)[1]]


@pytest.mark.parametrize(
    ("model", "shape", "by_hand"),
    [
        # 100 prompt tokens (80 cached) + 3 completion: 1.08e-05, where prompt+completion pricing says 1.68e-05.
        (
            "openai/gpt-4o-mini",
            {"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 80}},
            lambda p: (
                20 * p["input_cost_per_token"] + 80 * p["cache_read_input_token_cost"] + 3 * p["output_cost_per_token"]
            ),
        ),
        (
            "anthropic/claude-sonnet-4-5",
            SHAPES["anthropic_cache_read_and_write"],
            lambda p: (
                200 * p["input_cost_per_token"]
                + 1000 * p["cache_read_input_token_cost"]
                + 500 * p["cache_creation_input_token_cost"]
                + 300 * p["output_cost_per_token"]
            ),
        ),
        (
            "gemini/gemini-2.5-flash",
            SHAPES["openai_cached"],
            lambda p: (
                200 * p["input_cost_per_token"]
                + 1000 * p["cache_read_input_token_cost"]
                + 300 * p["output_cost_per_token"]
            ),
        ),
    ],
)
def test_litellm_prices_match_the_hand_computed_figures(model: str, shape: dict, by_hand: Any) -> None:
    cost = Pricer().price(Usage.from_mapping(shape), [model])
    assert cost.usd == pytest.approx(by_hand(prices(model)), rel=1e-12)


def test_the_issues_example_is_1_08e_05() -> None:
    usage = Usage.from_mapping(
        {"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 80}}
    )
    assert Pricer().price(usage, ["openai/gpt-4o-mini"]).usd == pytest.approx(1.08e-05, abs=1e-15)


def test_reported_cost_wins_over_every_price() -> None:
    usage = read(stream({**SHAPES["plain"], "cost": 0.0042}))
    pricer = Pricer({"gpt-4o-mini": Price(input=1.0, output=1.0)})
    assert pricer.price(usage, ["gpt-4o-mini"]) == Cost(0.0042, "reported")
    assert pricer.price(Usage(1000, 100), ["gpt-4o-mini"], header_cost=0.25) == Cost(0.25, "reported")


def test_a_missing_usage_is_unpriced() -> None:
    assert read(stream({})) is None
    assert Pricer().price(None, ["openai/gpt-4o-mini"]) == Cost(None, "unpriced")


def test_a_configured_price_is_used_before_litellms_and_computed_by_hand() -> None:
    price = Price.from_setting(
        "pricing.qwen-coder",
        {
            "input_cost_per_million": 0.4,
            "output_cost_per_million": 1.6,
            "cache_read_cost_per_million": 0.04,
            "cache_write_cost_per_million": 0.5,
            "reasoning_cost_per_million": 2.0,
        },
    )
    usage = Usage(
        input_tokens=10_000,
        output_tokens=2_000,
        cache_read_tokens=6_000,
        cache_write_tokens=1_000,
        reasoning_tokens=500,
    )
    cost = Pricer({"qwen-coder": price}).price(usage, ["gpt-4o-mini", "litellm_proxy/qwen-coder", "qwen-coder"])
    by_hand = (3_000 * 0.4 + 6_000 * 0.04 + 1_000 * 0.5 + 1_500 * 1.6 + 500 * 2.0) / 1e6
    saved = (6_000 * (0.4 - 0.04) - 1_000 * (0.5 - 0.4)) / 1e6
    assert cost == Cost(pytest.approx(by_hand, rel=1e-12), "config", "qwen-coder", pytest.approx(saved, rel=1e-12))


def test_unset_kinds_cost_their_parent_kinds_price() -> None:
    price = Price.from_setting("pricing.m", {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6})
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=400, reasoning_tokens=50)
    assert price.cost(usage) == pytest.approx(1000 * 2e-6 + 100 * 8e-6, rel=1e-12)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"input_cost_per_million": 1}, "needs an output price"),
        ({"input_cost_per_million": 1, "output_cost_per_million": -2}, "must be a number of USD >= 0"),
        (
            {"input_cost_per_million": 1, "output_cost_per_million": 2, "input_cost_per_token": 1e-6},
            "prices input twice",
        ),
        ({"input": 1, "output": 2}, "unknown price 'input'"),
        ("cheap", "must be a mapping of prices"),
    ],
)
def test_bad_price_settings_say_what_is_wrong(setting: Any, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Price.from_setting("pricing.qwen-coder", setting)


def test_the_first_known_model_is_priced() -> None:
    cost = Pricer().price(Usage(input_tokens=1000, output_tokens=100), ["my-team-group", "gpt-4o-mini"])
    assert cost.source == "litellm" and cost.model == "gpt-4o-mini"


def test_an_unknown_model_is_unpriced_not_free() -> None:
    assert Pricer().price(Usage(input_tokens=1000, output_tokens=100), ["self-hosted-qwen"]) == Cost(None, "unpriced")


def test_no_provider_litellm_knows_books_tokens_at_a_silent_zero() -> None:
    """For every provider prefix litellm knows, a model its map has no price for is unpriced
    (flagged), never $0; a model the map prices at 0 on purpose (a local one) stays free."""
    litellm = _litellm.load()
    usage = Usage(input_tokens=1000, output_tokens=50)
    for provider in litellm.provider_list:
        cost = Pricer().price(usage, [f"{provider}/opencode-gateway-unknown-model"])
        assert cost.usd is None or cost.usd > 0, (provider, cost)
        assert (cost.source == "unpriced") is (cost.usd is None)
    assert Pricer().price(usage, ["ollama/llama3"]) == Cost(0.0, "litellm", "ollama/llama3")


def test_opencode_is_given_the_prices_the_ledger_uses_where_they_are_known() -> None:
    mini = _litellm.load().model_cost["gpt-4o-mini"]
    assert per_million("openai/gpt-4o-mini", {}) == pytest.approx(
        {
            "input": mini["input_cost_per_token"] * 1e6,
            "output": mini["output_cost_per_token"] * 1e6,
            "cache_read": mini["cache_read_input_token_cost"] * 1e6,
            "cache_write": mini["input_cost_per_token"] * 1e6,
        }
    )
    configured = {"team-coder": Price(input=3e-6, output=15e-6, cache_read=3e-7)}
    assert per_million("litellm_proxy/team-coder", configured) == pytest.approx(
        {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.0}
    )
    assert per_million("litellm_proxy/team-a", {}) is None  # a gateway group's price is the gateway's


CLAUDE = Price(input=3e-6, output=15e-6, cache_read=3e-7, cache_write=3.75e-6)  # claude-sonnet-4-5's
CACHED = Usage(input_tokens=10_000, output_tokens=100, cache_read_tokens=8000, cache_write_tokens=1000)
# 8000 tokens read at 3e-7 instead of 3e-6, less the 1000 written at 3.75e-6 instead of 3e-6.
CACHED_SAVED = 8000 * (3e-6 - 3e-7) - 1000 * (3.75e-6 - 3e-6)


def test_what_caching_saved_is_the_same_tokens_uncached_minus_as_billed() -> None:
    cost = Pricer({"team-coder": CLAUDE}).price(CACHED, ["team-coder"])
    assert cost.cache_saved == pytest.approx(CACHED_SAVED, rel=1e-12)
    assert cost.usd == pytest.approx(CLAUDE.cost(CACHED), rel=1e-12)


def test_litellms_prices_say_what_caching_saved_as_they_price_the_request() -> None:
    assert Pricer().price(CACHED, ["anthropic/claude-sonnet-4-5"]).cache_saved == pytest.approx(CACHED_SAVED, rel=1e-9)


def test_a_first_turn_that_only_writes_the_cache_saved_less_than_nothing() -> None:
    written = Usage(input_tokens=10_000, output_tokens=10, cache_write_tokens=9000)
    assert Pricer({"m": CLAUDE}).price(written, ["m"]).cache_saved == pytest.approx(-9000 * 0.75e-6, rel=1e-12)


def test_a_reported_cost_is_kept_and_caching_priced_by_the_model_that_answered() -> None:
    reported = Usage(
        input_tokens=10_000, output_tokens=100, cache_read_tokens=8000, cache_write_tokens=1000, reported_cost=0.01
    )
    cost = Pricer().price(reported, ["claude-sonnet-4-5", "litellm_proxy/team-coder"])
    assert (cost.usd, cost.source) == (0.01, "reported")
    assert cost.cache_saved == pytest.approx(CACHED_SAVED, rel=1e-9)


def test_what_caching_saved_is_zero_without_cache_tokens_and_unknown_without_a_price() -> None:
    assert Pricer().price(Usage(1000, 10), ["self-hosted-qwen"]).cache_saved == 0.0
    assert Pricer().price(CACHED, ["self-hosted-qwen"]).cache_saved is None
    assert Pricer().price(dataclasses.replace(CACHED, reported_cost=0.01), ["litellm_proxy/team-a"]).cache_saved is None


def test_a_usage_in_anthropics_spelling_is_priced_whole() -> None:
    """litellm.Usage reads no tokens of Anthropic's spelling (input_tokens, output_tokens): the
    output was priced at 0 when that object was passed on."""
    usage = Usage.from_mapping(
        {
            "input_tokens": 1000,
            "output_tokens": 30,
            "cache_read_input_tokens": 4000,
            "cache_creation_input_tokens": 2000,
        }
    )
    expected = 1000 * 3e-6 + 4000 * 3e-7 + 2000 * 3.75e-6 + 30 * 15e-6  # claude-sonnet-4-5, LiteLLM's map
    assert Pricer().price(usage, ["anthropic/claude-sonnet-4-5"]).usd == pytest.approx(expected, rel=1e-12)
