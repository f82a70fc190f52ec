"""Token usage, read from the end of a stream (or a JSON body) as it passes through the endpoint.

Providers and LiteLLM spell usage in several ways; everything is normalised here into one `Usage`
whose `input_tokens` is *all* prompt tokens (cached and cache-written ones included) and whose
`output_tokens` is *all* completion tokens (reasoning included). The kinds are subsets of those
totals, which is how OpenAI counts and how LiteLLM prices.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .. import _litellm

__all__ = ["StreamUsageReader", "Usage", "estimate_usage", "per_token_cost", "usage_from_body"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(int(value), 0)


def _details(usage: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = usage.get(key)
    return value if isinstance(value, Mapping) else _EMPTY


@dataclass(frozen=True)
class Usage:
    """Tokens of one request (or a sum of requests)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    reported_cost: float | None = None
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, usage: Mapping[str, Any]) -> Usage:
        """Normalise one usage object (OpenAI, LiteLLM, Anthropic or OpenRouter spelling)."""
        prompt_details = _details(usage, "prompt_tokens_details")
        completion_details = _details(usage, "completion_tokens_details")
        cache_read = _int(prompt_details.get("cached_tokens")) or _int(usage.get("cache_read_input_tokens"))
        cache_write = _int(usage.get("cache_creation_input_tokens")) or _int(
            prompt_details.get("cache_creation_tokens")
        )
        if "prompt_tokens" in usage:
            input_tokens = _int(usage.get("prompt_tokens"))
        else:  # Anthropic's Messages spelling: input_tokens excludes cache reads and writes
            input_tokens = _int(usage.get("input_tokens")) + cache_read + cache_write
        output_tokens = _int(usage.get("completion_tokens", usage.get("output_tokens")))
        cost = usage.get("cost")
        reported = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
        return cls(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=_int(completion_details.get("reasoning_tokens")),
            reported_cost=reported,
            raw=MappingProxyType(dict(usage)),
        )

    @property
    def is_empty(self) -> bool:
        return not (self.input_tokens or self.output_tokens)

    @property
    def cached_share(self) -> float:
        """The share of the prompt tokens that were read from the provider's cache."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }


def per_token_cost(
    usage: Usage,
    input: float,
    output: float,
    cache_read: float | None = None,
    cache_write: float | None = None,
    reasoning: float | None = None,
) -> float:
    """`usage` priced per token, as LiteLLM's generic formula prices it: a kind without a price of
    its own costs its parent kind's (cache reads and writes the input's, reasoning the output's)."""
    cache_read = input if cache_read is None else cache_read
    cache_write = input if cache_write is None else cache_write
    reasoning = output if reasoning is None else reasoning
    uncached = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
    answer = max(usage.output_tokens - usage.reasoning_tokens, 0)
    prompt = uncached * input + usage.cache_read_tokens * cache_read + usage.cache_write_tokens * cache_write
    return float(prompt + answer * output + usage.reasoning_tokens * reasoning)


def usage_from_body(body: object) -> Usage | None:
    """Usage of a non-streamed Chat Completions response, or None when it carries none."""
    if isinstance(body, Mapping) and isinstance(body.get("usage"), Mapping):
        usage = Usage.from_mapping(body["usage"])
        return None if usage.is_empty and usage.reported_cost is None else usage
    return None


def estimate_usage(model: str, messages: Any, completion: str) -> Usage | None:
    """Tokens counted with litellm's token counter, for a stream that reported none."""
    litellm = _litellm.load()
    try:
        prompt = litellm.token_counter(model=model, messages=messages)
        answer = litellm.token_counter(model=model, text=completion, count_response_tokens=True)
    except Exception:  # the counter raises on message shapes it does not know; then there is no estimate
        return None
    return Usage(input_tokens=int(prompt), output_tokens=int(answer))


class StreamUsageReader:
    """Reads an SSE byte stream, in whatever pieces it arrives, for its usage and model.

    Only lines that can matter are decoded: the first chunk (for the model that answered and the
    call's id) and chunks that mention usage or an error; with `collect_text`, every chunk, to keep
    the answer's text for a token estimate; with `on_text`, every chunk, to pass each piece of text
    and reasoning on as it arrives, and the name of each tool the model calls (`on_text("text" |
    "reasoning" | "tool", piece)`). The last non-empty
    usage wins, so a usage object that arrives before the final chunk, or is repeated, is still
    counted once.
    """

    def __init__(
        self,
        *,
        collect_text: bool = False,
        on_text: Callable[[str, str], None] | None = None,
        keep_answer: bool = False,
    ) -> None:
        self._pending = b""
        self._collect = collect_text
        self._on_text = on_text
        self._keep_answer = keep_answer
        self._text: list[str] = []
        self._answer: list[str] = []
        self.usage: Usage | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.error: Mapping[str, Any] | None = None
        self.done = False

    @property
    def text(self) -> str:
        """The answer's text, tool-call arguments included (only with `collect_text`)."""
        return "".join(self._text)

    @property
    def answer(self) -> str | None:
        """The answer's text as the model streamed it (its `content` deltas; only with
        `keep_answer`): what a run reports as its answer, whatever OpenCode printed."""
        return "".join(self._answer) if self._keep_answer else None

    def feed(self, data: bytes) -> None:
        end = data.rfind(b"\n")
        if end < 0:
            self._pending += data
            return
        lines = (self._pending + data[: end + 1]).split(b"\n")
        self._pending = data[end + 1 :]
        for line in lines:
            self._line(line)

    def close(self) -> None:
        """Read whatever is left after the last newline (a stream cut mid-line)."""
        if self._pending:
            self._line(self._pending)
            self._pending = b""

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
        elif self._wants(payload) and isinstance(event := _parsed(payload), dict):
            self._read(event)

    def _wants(self, payload: bytes) -> bool:
        """Whether a chunk may hold what this reader keeps: once the model is known, a reader of
        usage alone parses only the chunks that name usage or an error (the last one, mostly)."""
        return self.model is None or self._reads_deltas or b'"usage"' in payload or b'"error"' in payload

    def _read(self, event: Mapping[str, Any]) -> None:
        if self.model is None and isinstance(event.get("model"), str) and event["model"]:
            # The first chunk that names it: Azure's first chunk (its prompt filter's results)
            # names no model.
            self.model = event["model"]
            self.response_id = event.get("id") if isinstance(event.get("id"), str) else None
        if self._reads_deltas:
            self._read_deltas(event)
        if isinstance(event.get("usage"), Mapping):
            usage = Usage.from_mapping(event["usage"])
            if not usage.is_empty or usage.reported_cost is not None:
                self.usage = usage
        if isinstance(event.get("error"), Mapping):
            self.error = event["error"]

    @property
    def _reads_deltas(self) -> bool:
        """Whether the streamed pieces are wanted (for an estimate, the live text, the answer)."""
        return self._collect or self._on_text is not None or self._keep_answer

    def _read_deltas(self, event: Mapping[str, Any]) -> None:
        for delta in _deltas(event):
            content, reasoning = delta.get("content"), delta.get("reasoning_content", delta.get("reasoning"))
            functions = _functions(delta)
            if self._keep_answer and isinstance(content, str):
                self._answer.append(content)
            if self._on_text is not None:
                _tell(self._on_text, content, reasoning, functions)
            if self._collect:
                pieces = (content, reasoning, *(v for f in functions for v in (f.get("name"), f.get("arguments"))))
                self._text.extend(piece for piece in pieces if isinstance(piece, str))


def _parsed(payload: bytes) -> Any:
    """A chunk's JSON; None for one that is not JSON."""
    try:
        return json.loads(payload)
    except ValueError:
        return None


def _deltas(event: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Each choice's delta in a chunk."""
    for choice in event.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if isinstance(delta, Mapping):
            yield delta


def _functions(delta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The function pieces of a delta's tool calls."""
    calls = delta.get("tool_calls") or ()
    return [c["function"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)]


def _tell(
    on_text: Callable[[str, str], None], content: Any, reasoning: Any, functions: list[Mapping[str, Any]]
) -> None:
    """The live text of a delta: its text, its reasoning, and each tool call's name (a call's name
    comes once, in its first piece)."""
    if isinstance(content, str) and content:
        on_text("text", content)
    if isinstance(reasoning, str) and reasoning:
        on_text("reasoning", reasoning)
    for function in functions:
        if isinstance(function.get("name"), str) and function["name"]:
            on_text("tool", function["name"])
