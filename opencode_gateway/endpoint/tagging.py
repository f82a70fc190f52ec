"""What every upstream call carries for attribution, and what OpenCode may not decide.

OpenCode (or a prompt-injected agent driving it) controls the request it sends us. Only the
fields and headers a model call needs are passed on (allowlists: anything else could choose a
route, a price or a payer); our own tags and metadata are added last, so they are the only ones
the gateway sees.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["FORWARDED_FIELDS", "HARNESS_TAGS", "Tagging", "clean_body", "forwarded_headers"]

HARNESS_TAGS = ("harness", "opencode")

# The only request header passed on: what the client accepts. Everything else (x-litellm-*,
# credentials, provider beta switches, even user-agent: a LiteLLM gateway turns it into a spend tag)
# is OpenCode's or the agent's to send and ours to drop.
_FORWARDED_HEADERS = frozenset({"accept"})
USER_AGENT = "opencode-gateway"  # ours, so the gateway's user-agent tag is ours too

# The only body fields passed on, each because OpenCode's openai-compatible provider sends it and a
# model needs it. Every other field (fallbacks, prices, api_base, timeouts, retries, caching, user,
# metadata, any litellm parameter) would let the request choose where it goes or what it costs.
FORWARDED_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "model": "replaced by the run's model (pinned)",
        "messages": "the conversation",
        "tools": "the tools OpenCode offers",
        "tool_choice": "whether the model must call a tool",
        "parallel_tool_calls": "whether it may call several at once",
        "stream": "OpenCode streams every call",
        "stream_options": "replaced by {include_usage: true} (usage is how a call is priced)",
        "max_tokens": "the answer's length limit (clamped to the model's in SDK mode)",
        "max_completion_tokens": "the same limit, as newer OpenAI models name it",
        "temperature": "sampling",
        "top_p": "sampling",
        "frequency_penalty": "sampling",
        "presence_penalty": "sampling",
        "seed": "sampling",
        "stop": "stop sequences",
        "response_format": "structured output",
        "reasoning_effort": "how much a reasoning model thinks",
    }
)


@dataclass(frozen=True)
class Tagging:
    """The tags, spend metadata and session of one run, in the forms LiteLLM reads them.

    The gateway can total spend per tag but not per metadata key, so the values of
    `tag_metadata_keys` (default: ticket) are also sent as tags, `ticket:ENG-412`.
    """

    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    session_id: str | None = None  # groups the run's rows in the gateway's spend log
    tag_metadata_keys: tuple[str, ...] = ("ticket",)

    @property
    def all_tags(self) -> tuple[str, ...]:
        from_metadata = (f"{key}:{self.metadata[key]}" for key in self.tag_metadata_keys if key in self.metadata)
        return tuple(dict.fromkeys((*HARNESS_TAGS, *self.tags, *from_metadata)))

    @functools.cached_property
    def headers(self) -> Mapping[str, str]:
        """Headers for a LiteLLM gateway (proxy); built once, sent with every request. The
        metadata is JSON with every non-ASCII character escaped, so it arrives intact; tags have
        no such escape, so non-ASCII tags go only in the body (`proxy_body`)."""
        tags = ",".join(self.all_tags)
        headers = {"user-agent": USER_AGENT, **({"x-litellm-tags": tags} if tags.isascii() else {})}
        if self.metadata:
            headers["x-litellm-spend-logs-metadata"] = json.dumps(dict(self.metadata), separators=(",", ":"))
        if self.session_id:
            headers["x-litellm-session-id"] = self.session_id
        return headers

    @functools.cached_property
    def proxy_body(self) -> Mapping[str, Any]:
        """Body fields for a LiteLLM gateway: the tags as a JSON list, which the gateway prefers to
        the header and which carries any text intact."""
        return MappingProxyType({"tags": list(self.all_tags)})

    def sdk_metadata(self) -> dict[str, Any]:
        """The `metadata` argument of litellm.acompletion, where its callbacks and spend logging
        read tags and spend-log metadata."""
        return {"tags": list(self.all_tags), "spend_logs_metadata": dict(self.metadata)}


def forwarded_headers(incoming: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted few of OpenCode's headers (`_FORWARDED_HEADERS`)."""
    return {name: value for name, value in incoming.items() if name.lower() in _FORWARDED_HEADERS}


def clean_body(body: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The request body with only the allowlisted fields (`FORWARDED_FIELDS`), and the names of
    the fields removed."""
    dropped = tuple(k for k in body if k not in FORWARDED_FIELDS)
    return {k: v for k, v in body.items() if k in FORWARDED_FIELDS}, dropped
