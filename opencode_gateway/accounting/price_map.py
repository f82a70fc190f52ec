"""LiteLLM's bundled price map, read without importing litellm.

`import litellm` costs ~2.4 s of CPU, which a gateway-mode run would pay only to look up a price.
The map itself is a JSON file inside the litellm package; most entries price a chat request with
five per-token figures. Those are priced here, exactly as `litellm.cost_per_token` prices them
(tests/accounting/test_price_map.py proves it for every entry of the map, to 1e-12 USD, with random
usage). Everything else answers None, and the caller asks litellm: an entry with tiers, audio,
images or any price not listed below; a usage object with more kinds than listed; a name that is
not a key of the map; a process where litellm is already imported (its map may have been changed
by the host: `litellm.register_model`) or told to fetch its map from the internet.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..domain import ModelRoute
from .usage import Usage, per_token_cost

__all__ = ["PROVIDERS", "context_window", "entry_cost", "map_price", "plain_entry", "price_map"]

_MAP_FILE = "model_prices_and_context_window_backup.json"
# Prices that apply only to what this gateway never asks for (a service tier, the batch API, web
# search) or to usage this module leaves to litellm (one-hour cache writes); an entry with them is
# still a plain per-token entry here.
_UNUSED_SUFFIXES = ("_batches", "_priority", "_flex")
_UNUSED = frozenset({"search_context_cost_per_query", "cache_creation_input_token_cost_above_1hr"})
_PRICED = frozenset(
    {
        "input_cost_per_token",
        "output_cost_per_token",
        "cache_read_input_token_cost",
        "cache_creation_input_token_cost",
        "output_cost_per_reasoning_token",
    }
)
# What an entry may say besides its prices and still be priced here: what the model supports, its
# limits, where it comes from, and the uplifts of regional and FedRAMP endpoints, which litellm
# applies only when told the request went to one (litellm 1.108 to 1.110; the newest is tested by
# scripts/test). A field not known here (a new multiplier, a new kind of price) leaves the entry to
# litellm: it is priced right, if slower, never mispriced.
_DESCRIPTIVE_PREFIXES = (
    "supports_",
    "supported_",
    "max_",
    "token_count_",
    "gemini_",
    "bedrock_",
    "regional_endpoint_",
    "regional_processing_",
    "reasoning_",
    "deprecation_",
)
_DESCRIPTIVE = frozenset(
    {
        "alias_of",
        "audio_transcription_config",
        "comment",
        "default_reasoning_effort",
        "fedramp_uplift_multiplier",
        "litellm_provider",
        "metadata",
        "mode",
        "output_vector_size",
        "prompt_cache_min_tokens",
        "provider_specific_entry",
        "rpm",
        "rules",
        "search_free_requests",
        "source",
        "successor_model",
        "thinking_always_on",
        "thinking_on_by_default",
        "tpm",
        "use_openai_responses_path",
        "uses_embed_content",
        "vertex_ai_audio_api",
        "web_search_billing_unit",
    }
)
# The usage fields priced here; any other with a non-zero count sends the request to litellm.
_USAGE_FIELDS = frozenset(
    {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cost",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
    }
)
_PROMPT_DETAILS = frozenset({"cached_tokens", "cache_creation_tokens", "text_tokens"})
_COMPLETION_DETAILS = frozenset({"reasoning_tokens", "text_tokens"})
# Providers whose entries litellm prices with its generic per-token formula and whose keys it
# resolves as written (tests/accounting/test_price_map.py checks every entry of each; the others
# have cost functions or name rules of their own, and are left to litellm).
PROVIDERS = frozenset(
    {
        "aihubmix",
        "anthropic",
        "azure_ai",
        "bedrock",
        "cerebras",
        "cloudflare",
        "dashscope",
        "deepinfra",
        "gemini",
        "groq",
        "mistral",
        "moonshot",
        "nebius",
        "novita",
        "oci",
        "ollama",
        "openai",
        "replicate",
        "sambanova",
        "snowflake",
        "together_ai",
        "vercel_ai_gateway",
        "vertex_ai",
        "watsonx",
        "zai",
    }
)
# Providers whose models litellm also knows by their bare names ("gpt-4o-mini").
_BARE = frozenset({"openai", "anthropic"})


@functools.cache
def _bundled() -> Mapping[str, Any] | None:
    """The bundled map file's entries as written; None without litellm or its file."""
    spec = importlib.util.find_spec("litellm")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _MAP_FILE
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return entries if isinstance(entries, dict) else None


def context_window(model: str) -> tuple[int, int | None] | None:
    """The most input tokens `model` takes and the most it writes (`max_input_tokens` and
    `max_output_tokens` in LiteLLM's map), by the model string or, for a provider litellm knows
    bare names of, its bare name; None when not known (a gateway's group: only the gateway knows
    its deployments)."""
    entries = _bundled() or {}
    provider, _, bare = model.partition("/")
    for name in (model, bare if provider in _BARE else None):
        entry = entries.get(name) if name else None
        if isinstance(entry, dict) and isinstance(entry.get("max_input_tokens"), int):
            output = entry.get("max_output_tokens")
            return int(entry["max_input_tokens"]), int(output) if isinstance(output, int) else None
    return None


@functools.cache
def price_map() -> Mapping[str, Mapping[str, Any]] | None:
    """The plain entries of the bundled map, by every name litellm resolves to them; None when
    this process must ask litellm instead (see the module's docstring)."""
    if os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True").lower() != "true":
        return None
    entries = _bundled()
    if entries is None:
        return None
    names: dict[str, Mapping[str, Any]] = {}
    for key, entry in entries.items():
        provider = entry.get("litellm_provider") if isinstance(entry, dict) else None
        if provider not in PROVIDERS or not plain_entry(entry):
            continue
        if key.startswith(f"{provider}/"):
            names[key] = entry
        elif provider in _BARE and not key.startswith("ft:"):
            names[key] = entry
            names[f"{provider}/{key}"] = entry
    return names


def plain_entry(entry: Mapping[str, Any]) -> bool:
    """Whether every price of the entry is one this module applies or one that cannot apply."""
    for key, value in entry.items():
        if key in _PRICED:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
        elif (
            ("cost" in key or "pric" in key or "tier" in key)
            and key not in _UNUSED
            and not key.endswith(_UNUSED_SUFFIXES)
        ):
            return False
        elif (
            key not in _DESCRIPTIVE
            and key not in _UNUSED
            and not key.startswith(_DESCRIPTIVE_PREFIXES)
            and not key.endswith(_UNUSED_SUFFIXES)
        ):
            return False  # a field this reader does not know: litellm's to price
    return "input_cost_per_token" in entry and "output_cost_per_token" in entry


def _count(details: Mapping[str, Any], key: str) -> int:
    value = details.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _simple(raw: Mapping[str, Any]) -> bool:
    """Whether the usage object has no kind of token this module does not price."""
    for key, value in raw.items():
        if key in ("prompt_tokens_details", "completion_tokens_details"):
            if value is None:
                continue
            if not isinstance(value, Mapping):
                return False
            allowed = _PROMPT_DETAILS if key == "prompt_tokens_details" else _COMPLETION_DETAILS
            if any(v and k not in allowed for k, v in value.items()):
                return False
            if _count(value, "text_tokens"):  # litellm then prices text tokens as given: its own rule
                return False
        elif key not in _USAGE_FIELDS and value:
            return False
    return True


def map_price(model: str, usage: Usage) -> float | None:
    """`litellm.cost_per_token(model, usage_object)`, summed, when this module can say it; else None."""
    if "litellm" in sys.modules:
        return None
    entries = price_map()
    entry = None if entries is None else entries.get(ModelRoute.of(model).upstream_model)
    return None if entry is None else entry_cost(entry, usage)


def entry_cost(entry: Mapping[str, Any], usage: Usage) -> float | None:
    """The usage priced by one plain entry of the map; None when the usage has kinds not priced here."""
    if not _simple(usage.raw):
        return None
    return per_token_cost(
        usage,
        entry["input_cost_per_token"],
        entry["output_cost_per_token"],
        entry.get("cache_read_input_token_cost"),
        entry.get("cache_creation_input_token_cost"),
        entry.get("output_cost_per_reasoning_token"),
    )
