"""What a request cost, and where that figure came from.

The sources, in order: the cost the response reports; a price set in the settings for the model
or model group; LiteLLM's price map, given the whole usage object; else none. A cost is never a
silent 0: without a price it is `None` and its source is `unpriced`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _litellm
from ..domain import ModelRoute
from ..errors import SettingsError
from .price_map import map_price, price_map
from .usage import Usage, per_token_cost

__all__ = ["Cost", "Price", "Pricer", "litellm_price", "per_million", "usd"]

# Setting name -> (Price field, divisor). LiteLLM's own per-token names, and per-million ones.
_PRICE_KEYS: Mapping[str, tuple[str, float]] = {
    "input_cost_per_token": ("input", 1.0),
    "output_cost_per_token": ("output", 1.0),
    "cache_read_input_token_cost": ("cache_read", 1.0),
    "cache_creation_input_token_cost": ("cache_write", 1.0),
    "output_cost_per_reasoning_token": ("reasoning", 1.0),
    "input_cost_per_million": ("input", 1e6),
    "output_cost_per_million": ("output", 1e6),
    "cache_read_cost_per_million": ("cache_read", 1e6),
    "cache_write_cost_per_million": ("cache_write", 1e6),
    "reasoning_cost_per_million": ("reasoning", 1e6),
}


@dataclass(frozen=True)
class Cost:
    usd: float | None
    # "reported", "config", "litellm", "unpriced", "failed" (nothing generated) or "refused" (a
    # budget or the turn cap stopped the call before it went out)
    source: str
    model: str | None = None  # the model whose price was used
    # What prompt caching saved: the same tokens priced as if none had been cached, minus their
    # price as they were (cache writes' premium subtracted). 0 without cache tokens; None when no
    # price of the model is known (a gateway group's, say: only the gateway knows it).
    cache_saved: float | None = 0.0


def usd(amount: float | None) -> float | None:
    """USD as it is written out (JSON, /stats, events): to 1e-12, so a sum reads 0.00042 and not
    0.00041999999999999996. A token costs ~1e-8 USD at the least: nothing real is rounded away."""
    return None if amount is None else round(amount, 12)


@dataclass(frozen=True)
class Price:
    """USD per token. A kind without its own price costs what its parent kind costs: cache reads
    and writes the input price, reasoning the output price."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    reasoning: float | None = None

    @classmethod
    def from_setting(cls, where: str, setting: Any) -> Price:
        if not isinstance(setting, Mapping):
            raise SettingsError(f"{where} must be a mapping of prices, e.g. {{input_cost_per_million: 0.15}}")
        values: dict[str, float] = {}
        for key, value in setting.items():
            if key not in _PRICE_KEYS:
                raise SettingsError(f"{where}: unknown price {key!r}; known prices: {', '.join(_PRICE_KEYS)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise SettingsError(f"{where}.{key} must be a number of USD >= 0, not {value!r}")
            field, divisor = _PRICE_KEYS[key]
            if field in values:
                raise SettingsError(f"{where} prices {field} twice: give it per token or per million, not both")
            values[field] = value / divisor
        for required in ("input", "output"):
            if required not in values:
                raise SettingsError(
                    f"{where} needs an {required} price ({required}_cost_per_million or {required}_cost_per_token)"
                )
        return cls(**values)

    def cost(self, usage: Usage) -> float:
        return per_token_cost(usage, self.input, self.output, self.cache_read, self.cache_write, self.reasoning)


def litellm_price(model: str, usage: Usage) -> float | None:
    """LiteLLM's price for the usage, given the whole usage object so every token kind is priced
    as LiteLLM prices it; None when LiteLLM does not know the model. Read from its bundled map
    without importing litellm where that gives the same figure (price_map.py)."""
    usd = map_price(model, usage)
    if usd is not None:
        return usd
    litellm = _litellm.load()
    # The raw object in LiteLLM's own (OpenAI) spelling; in Anthropic's, litellm.Usage would read
    # neither its input nor its output tokens: the normalised counts then.
    usage_object = (
        litellm.Usage(**dict(usage.raw))
        if "prompt_tokens" in usage.raw
        else litellm.Usage(
            prompt_tokens=usage.input_tokens,
            completion_tokens=usage.output_tokens,
            total_tokens=usage.input_tokens + usage.output_tokens,
            prompt_tokens_details={"cached_tokens": usage.cache_read_tokens},
            completion_tokens_details={"reasoning_tokens": usage.reasoning_tokens},
            cache_creation_input_tokens=usage.cache_write_tokens,
        )
    )
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(model=model, usage_object=usage_object)
    except Exception:  # litellm raises a bare Exception for a model missing from its map
        return None
    usd = float(prompt_cost) + float(completion_cost)
    if usd == 0 and (usage.input_tokens or usage.output_tokens) and not _free(litellm, model):
        return None  # litellm's 0 for tokens of a model it has no price for: unpriced, never a silent $0
    return usd


def _free(litellm: Any, model: str) -> bool:
    """Whether LiteLLM's map prices `model` at 0 on purpose (a local or free model)."""
    try:
        info = litellm.get_model_info(model)
    except Exception:  # not in the map
        return False
    return bool(info.get("input_cost_per_token") == 0 and info.get("output_cost_per_token") == 0)


def per_million(model: str, prices: Mapping[str, Price]) -> dict[str, float] | None:
    """The model's prices in OpenCode's `cost` shape (USD per million tokens: input, output,
    cache_read, cache_write), from the settings or LiteLLM's bundled map; None when neither has a
    plain per-token price (a gateway group's price is the gateway's). OpenCode then shows what a
    session costs as the ledger does (OpenCode prices reasoning as output, and its openai-compatible
    provider counts cache writes as input: where those are priced otherwise, its figure is close)."""
    route = ModelRoute.of(model)
    price = route.setting(prices)
    if price is None:
        entries = price_map()
        entry = None if entries is None else entries.get(route.upstream_model)
        if entry is None:
            return None
        price = Price(
            entry["input_cost_per_token"],
            entry["output_cost_per_token"],
            entry.get("cache_read_input_token_cost"),
            entry.get("cache_creation_input_token_cost"),
        )
    return {
        "input": price.input * 1e6,
        "output": price.output * 1e6,
        "cache_read": (price.input if price.cache_read is None else price.cache_read) * 1e6,
        "cache_write": (price.input if price.cache_write is None else price.cache_write) * 1e6,
    }


class Pricer:
    """Prices requests with the settings' prices first, then LiteLLM's map."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self.prices = dict(prices or {})

    def price(
        self,
        usage: Usage | None,
        models: Sequence[str],
        *,
        header_cost: float | None = None,
        backends: Sequence[str] = (),
    ) -> Cost:
        """`models`: the names this request goes by, most specific first (the model that answered,
        the run's model, the gateway's model group). `backends`: the models behind a gateway's
        group, whose prices say what caching saved when the gateway reports only the cost."""
        if usage is None:
            return Cost(header_cost, "reported") if header_cost is not None else Cost(None, "unpriced")
        names = tuple(dict.fromkeys(m for m in models if m))
        reported = usage.reported_cost if usage.reported_cost is not None else header_cost
        if reported is not None:  # a gateway's run does not import litellm to say what caching saved
            saved = self.cache_saved(usage, (*names, *backends), load="litellm" in sys.modules)
            return Cost(reported, "reported", cache_saved=saved)
        found = self._first_price(usage, names, load=True)
        if found is None:
            return Cost(None, "unpriced", cache_saved=None if _cached(usage) else 0.0)
        source, model, usd, price_of = found
        return Cost(usd, source, model, _saved(usage, usd, price_of))

    def cache_saved(self, usage: Usage, models: Sequence[str], *, load: bool = True) -> float | None:
        """What caching saved on `usage`: its price with every cached or cache-written token priced
        as plain input, minus its price as it was, both by the first price known for `models`
        (the settings', then LiteLLM's; with `load` False, only what the bundled map says without
        importing litellm). None when no price is known."""
        if not _cached(usage):
            return 0.0
        if not load:  # the token counts alone, which the bundled map prices whatever else the usage says
            usage = dataclasses.replace(usage, raw={})
        found = self._first_price(usage, models, load=load)
        return None if found is None else _saved(usage, found[2], found[3])

    def _first_price(
        self, usage: Usage, models: Sequence[str], *, load: bool
    ) -> tuple[str, str, float, Callable[[Usage], float | None]] | None:
        """(source, model, USD, how that model prices a usage) by the first price known for
        `models`: the settings', then LiteLLM's (only its bundled map without `load`)."""
        for model in models:
            if model in self.prices:
                price = self.prices[model]
                return "config", model, price.cost(usage), price.cost
        price_of = litellm_price if load else map_price
        for model in models:
            usd = price_of(model, usage)
            if usd is not None:
                return "litellm", model, usd, functools.partial(price_of, model)
        return None


def _cached(usage: Usage) -> bool:
    return bool(usage.cache_read_tokens or usage.cache_write_tokens)


def _saved(usage: Usage, actual: float, price_of: Callable[[Usage], float | None]) -> float | None:
    """The same tokens priced as if none had been cached, less `actual`; 0 without cache tokens."""
    if not _cached(usage):
        return 0.0
    without = price_of(
        Usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, reasoning_tokens=usage.reasoning_tokens
        )
    )
    return None if without is None else without - actual
