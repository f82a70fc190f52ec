"""Prompt caching, whatever a model group is called.

OpenCode 1.18 marks its prompt for caching (`cache_control` on the first two system messages and
the last two others) only when the model's id contains "claude" or "anthropic". Ours is the model
string, or the gateway's group name (`litellm_proxy/team-coder`): a Claude group named otherwise
lost caching, and a 10-turn session cost 4.4x as much. So the endpoint marks the request itself
as OpenCode would have, for a backend that caches by markers, unless the request already has
markers: `cache_control` on the same messages and parts, as OpenCode's openai-compatible provider
sends it, which litellm (SDK and proxy) turns into Anthropic's markers as it does OpenCode's own
(a 10-turn session then costs what it costs through a group named "claude-..."). For an
OpenAI-family backend it sends a `prompt_cache_key` (OpenCode's own OpenAI provider sends its
session id there). Any other backend gets neither: a provider that would reject a field never
sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["CacheStyle", "cache_style", "prepared"]

CacheStyle = Literal["markers", "cache_key"]

# Providers (litellm's prefix) that serve Claude, and caches it by markers, when the model is a Claude.
_CLAUDE_HOSTS = frozenset({"anthropic", "bedrock", "bedrock_converse", "vertex_ai", "vertex_ai_beta", "azure_ai"})
# Providers that cache OpenAI-style, keyed by `prompt_cache_key`.
_OPENAI_HOSTS = frozenset({"openai", "azure"})


def cache_style(model: str) -> CacheStyle | None:
    """How the backend of a litellm model string (`provider/model`, or a bare name litellm knows)
    caches a prompt: by markers (Claude, wherever it is served; OpenRouter's `anthropic/` models
    pass the markers on), by key (OpenAI, Azure OpenAI), or None (no field is added)."""
    provider, _, name = model.partition("/")
    if not name:
        provider, name = "", provider
    name = name.lower()
    claude = "claude" in name or name.startswith("anthropic.") or ".anthropic." in name
    if (provider in _CLAUDE_HOSTS and claude) or (not provider and name.startswith("claude")):
        return "markers"
    if provider == "openrouter" and name.startswith("anthropic/"):
        return "markers"
    if provider in _OPENAI_HOSTS or (not provider and name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-"))):
        return "cache_key"
    return None


def _marked(message: Any) -> bool:
    if not isinstance(message, Mapping):
        return False
    parts = [part for key in ("content", "tool_calls") if isinstance(message.get(key), list) for part in message[key]]
    return "cache_control" in message or any(isinstance(part, Mapping) and "cache_control" in part for part in parts)


_EPHEMERAL = {"type": "ephemeral"}


def _with_marker(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message marked as OpenCode marks it: on its last part (an assistant's last tool call, a
    list's last content part), else on the message."""
    calls, content = message.get("tool_calls"), message.get("content")
    if isinstance(calls, list) and calls and isinstance(calls[-1], Mapping):
        return {**message, "tool_calls": [*calls[:-1], {**calls[-1], "cache_control": _EPHEMERAL}]}
    if isinstance(content, list) and content and isinstance(content[-1], Mapping):
        return {**message, "content": [*content[:-1], {**content[-1], "cache_control": _EPHEMERAL}]}
    return {**message, "cache_control": _EPHEMERAL}


def _marked_as_opencode_marks(messages: list[Any]) -> list[Any]:
    """The messages with OpenCode's own markers: on the first two system messages and the last two
    others (opencode's provider/transform.ts, applyCaching)."""
    system = [i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") == "system"][:2]
    others = [i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") != "system"][-2:]
    return [_with_marker(message) if index in (*system, *others) else message for index, message in enumerate(messages)]


def prepared(body: dict[str, Any], style: CacheStyle | None, cache_key: str | None) -> dict[str, Any]:
    """`body` as the backend caches it best: marked as OpenCode marks a Claude prompt (unless it
    is marked already), or keyed by `cache_key` (unless it has a key); else unchanged."""
    messages = body.get("messages")
    if style == "markers" and isinstance(messages, list) and messages and not any(map(_marked, messages)):
        return {**body, "messages": _marked_as_opencode_marks(messages)}
    if style == "cache_key" and cache_key and "prompt_cache_key" not in body:
        return {**body, "prompt_cache_key": cache_key}
    return body
