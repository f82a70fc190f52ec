"""LiteLLM's price map, read without importing litellm: the same figure as `litellm.cost_per_token`
given the whole usage object, for every entry it prices, or no figure at all (litellm decides)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_gateway import _litellm
from opencode_gateway.accounting.price_map import PROVIDERS, entry_cost, map_price, plain_entry, price_map
from opencode_gateway.accounting.usage import Usage

litellm = _litellm.load()
ENTRIES = price_map()
assert ENTRIES is not None


def litellm_cost(model: str, raw: dict[str, Any]) -> float:
    prompt, completion = litellm.cost_per_token(model=model, usage_object=litellm.Usage(**raw))
    return float(prompt + completion)


def random_usage(rng: random.Random, kinds: int) -> dict[str, Any]:
    """A usage object as a stream ends with it; `kinds` (0-3) says which token kinds it has beyond plain."""
    prompt, completion = rng.randint(0, 400_000), rng.randint(0, 64_000)
    cached = rng.randint(0, prompt) if kinds & 1 else 0
    written = rng.randint(0, prompt - cached) if kinds & 1 else 0
    reasoning = rng.randint(0, completion) if kinds & 2 else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "cache_creation_tokens": written},
        "cache_creation_input_tokens": written,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


@pytest.fixture
def litellm_not_imported(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process, as a gateway-mode run sees it: litellm not imported."""
    monkeypatch.delitem(sys.modules, "litellm")
    yield


def test_every_entry_it_prices_is_priced_as_litellm_prices_it() -> None:
    assert ENTRIES is not None
    rng = random.Random(18)
    for name, entry in ENTRIES.items():
        for kinds in range(4):
            raw = random_usage(rng, kinds)
            mine = entry_cost(entry, Usage.from_mapping(raw))
            assert mine is not None, name
            assert abs(mine - litellm_cost(name, raw)) <= 1e-12, (name, raw)


def test_it_covers_the_common_providers_and_both_spellings_of_their_models() -> None:
    assert ENTRIES is not None
    assert {"gpt-4o-mini", "openai/gpt-4o-mini", "claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"} <= set(ENTRIES)
    providers = {entry["litellm_provider"] for entry in ENTRIES.values()}
    assert providers == set(PROVIDERS)
    assert len(ENTRIES) > 1000


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(ENTRIES)),
    prompt=st.integers(0, 2_000_000),
    completion=st.integers(0, 200_000),
    cached=st.integers(0, 2_000_000),
    written=st.integers(0, 2_000_000),
    reasoning=st.integers(0, 200_000),
    extra=st.sampled_from([{}, {"audio_tokens": 7}, {"image_tokens": 3}, {"text_tokens": 5}]),
)
def test_any_usage_is_priced_as_litellm_prices_it_or_left_to_litellm(
    name: str, prompt: int, completion: int, cached: int, written: int, reasoning: int, extra: dict
) -> None:
    raw = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt), **extra},
        "cache_creation_input_tokens": min(written, prompt - min(cached, prompt)),
        "completion_tokens_details": {"reasoning_tokens": min(reasoning, completion)},
    }
    assert ENTRIES is not None
    mine = entry_cost(ENTRIES[name], Usage.from_mapping(raw))
    if extra:  # a kind of token it does not price: litellm's
        assert mine is None
    else:
        assert mine is not None and abs(mine - litellm_cost(name, raw)) <= 1e-12


@pytest.mark.usefixtures("litellm_not_imported")
def test_a_gateway_model_is_priced_as_the_model_it_names() -> None:
    raw = random_usage(random.Random(3), 3)
    assert map_price("litellm_proxy/gpt-4o-mini", Usage.from_mapping(raw)) == pytest.approx(
        litellm_cost("litellm_proxy/gpt-4o-mini", raw), abs=1e-12
    )


@pytest.mark.usefixtures("litellm_not_imported")
@pytest.mark.parametrize(
    "model",
    [
        "my-team-group",  # not in the map: litellm may know it by a rule of its own
        "perplexity/sonar",  # a provider with a cost function of its own
        "fireworks_ai/accounts/fireworks/models/deepseek-r1",  # priced by its size class, not its entry
        "gemini/gemini-2.5-pro",  # prices above 200k tokens: tiers are litellm's
    ],
)
def test_what_it_cannot_say_is_left_to_litellm(model: str) -> None:
    assert map_price(model, Usage(input_tokens=10, output_tokens=2)) is None


def test_a_usage_with_other_kinds_of_tokens_is_left_to_litellm() -> None:
    assert ENTRIES is not None
    audio = Usage.from_mapping(
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"audio_tokens": 4}}
    )
    anthropic_spelling = Usage.from_mapping({"input_tokens": 10, "output_tokens": 2})
    assert entry_cost(ENTRIES["gpt-4o-mini"], audio) is None
    assert entry_cost(ENTRIES["gpt-4o-mini"], anthropic_spelling) is None


def test_once_litellm_is_imported_its_map_is_the_one_used() -> None:
    """A host may have changed litellm's map (register_model); then litellm answers."""
    assert "litellm" in sys.modules
    assert map_price("gpt-4o-mini", Usage(input_tokens=10, output_tokens=2)) is None


def test_a_run_that_prices_from_the_map_never_imports_litellm() -> None:
    code = (
        "import sys; from opencode_gateway.accounting.pricing import Pricer; "
        "from opencode_gateway.accounting.usage import Usage; "
        "cost = Pricer().price(Usage(input_tokens=1000, output_tokens=10), ['litellm_proxy/gpt-4o-mini']); "
        "assert cost.source == 'litellm' and cost.usd > 0, cost; assert 'litellm' not in sys.modules; print(cost.usd)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(
        litellm_cost("gpt-4o-mini", {"prompt_tokens": 1000, "completion_tokens": 10}), abs=1e-12
    )


def test_told_to_fetch_its_map_litellm_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "False")
    price_map.cache_clear()
    try:
        assert price_map() is None
    finally:
        monkeypatch.undo()
        price_map.cache_clear()


def test_an_entry_with_a_field_it_does_not_know_is_left_to_litellm() -> None:
    """A field this reader does not know may change the price (as `fedramp_uplift_multiplier`,
    new in litellm 1.110, does for a FedRAMP endpoint), so the entry is litellm's to price (right, if
    slower), never priced here."""
    plain = {
        "input_cost_per_token": 1e-6,
        "output_cost_per_token": 2e-6,
        "litellm_provider": "openai",
        "mode": "chat",
        "max_tokens": 8192,
        "supports_vision": True,
    }
    assert plain_entry(plain)
    assert not plain_entry({**plain, "sovereign_uplift_multiplier": 1.2})
