"""What every upstream call carries for attribution, and what OpenCode may not decide.

OpenCode (or a prompt-injected agent driving it) controls the request it sends us. Anything in it
that would change who pays or how a call is routed at the gateway is removed; our own tags and
metadata are added last, so they are the only ones the gateway sees.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["HARNESS_TAGS", "Tagging", "clean_body", "forwarded_headers"]

HARNESS_TAGS = ("harness", "opencode")

# Hop-by-hop headers (RFC 9110 §7.6.1) and those the client library must set for itself.
_NOT_FORWARDED = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
        "content-type", "accept-encoding", "authorization", "x-api-key", "api-key", "cookie",
    }
)

# Body fields that would change attribution or routing at a LiteLLM gateway or in the SDK call.
_SPOOFABLE_FIELDS = frozenset(
    {"metadata", "tags", "user", "litellm_metadata", "extra_body", "extra_headers", "mock_response",
     "api_base", "api_key", "base_url", "api_version", "custom_llm_provider"}
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
        """Headers for a LiteLLM gateway (proxy); built once, sent with every request."""
        headers = {"x-litellm-tags": ",".join(self.all_tags)}
        if self.metadata:
            headers["x-litellm-spend-logs-metadata"] = json.dumps(dict(self.metadata), separators=(",", ":"))
        if self.session_id:
            headers["x-litellm-session-id"] = self.session_id
        return headers

    def sdk_metadata(self) -> dict[str, Any]:
        """The `metadata` argument of litellm.acompletion, where its callbacks and spend logging
        read tags and spend-log metadata."""
        return {"tags": list(self.all_tags), "spend_logs_metadata": dict(self.metadata)}


def forwarded_headers(incoming: Mapping[str, str]) -> dict[str, str]:
    """OpenCode's headers minus credentials, hop-by-hop headers, every x-litellm-* header and our
    own x-opencode-gateway-* launch headers."""
    return {
        name: value
        for name, value in incoming.items()
        if name.lower() not in _NOT_FORWARDED and not name.lower().startswith(("x-litellm-", "x-opencode-gateway-"))
    }


def clean_body(body: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The request body without spoofable fields, and the names of the fields removed."""
    dropped = tuple(k for k in body if k in _SPOOFABLE_FIELDS or k.startswith("litellm_"))
    return {k: v for k, v in body.items() if k not in dropped}, dropped
