"""What `serve` has done, in Prometheus' text format (`GET /metrics`, prometheus-client's own
registry and exposition): requests, tokens by kind, cost in USD, errors, refusals by the limit
that refused, calls in flight, time to first token and request duration.

Every series is labelled by model and purpose, and by the metadata keys the settings name
(`metrics_labels`), never by an unbounded value: past `MAX_VALUES` values of one key, the rest
are counted under `_other`. Cost counts what was priced; `/stats` says the same total.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..accounting.records import RequestRecord

__all__ = ["CONTENT_TYPE", "MAX_VALUES", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_VALUES = 100  # distinct values of one metadata label; more are `_other`
_OTHER = "_other"
_LIMIT = re.compile(r"\b(max_cost|max_requests|max_tokens|max_turns)\b")
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """The registry of one server. `recorded` counts a request as its record is made;
    `in_flight` is read when scraped."""

    def __init__(self, labels: Sequence[str] = (), in_flight: Callable[[], float] = lambda: 0) -> None:
        self.keys = tuple(labels)
        self.registry = CollectorRegistry()
        names = ("model", "purpose", *self.keys)
        self.requests = Counter("opencode_gateway_requests", "Model requests", names, registry=self.registry)
        self.tokens = Counter("opencode_gateway_tokens", "Tokens, by kind", (*names, "kind"), registry=self.registry)
        self.cost = Counter(
            "opencode_gateway_cost_usd", "Cost of the priced requests (USD)", names, registry=self.registry
        )
        self.errors = Counter(
            "opencode_gateway_errors", "Failed requests, by status", (*names, "status"), registry=self.registry
        )
        self.refusals = Counter(
            "opencode_gateway_refusals",
            "Calls a budget refused, by its limit",
            (*names, "limit", "scope"),
            registry=self.registry,
        )
        self.ttfb = Histogram(
            "opencode_gateway_time_to_first_token_seconds",
            "From forwarding to the first byte",
            names,
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "opencode_gateway_request_duration_seconds",
            "A request, start to end",
            names,
            buckets=_SECONDS,
            registry=self.registry,
        )
        Gauge(
            "opencode_gateway_requests_in_flight", "Calls admitted and not yet ended", registry=self.registry
        ).set_function(in_flight)
        self._seen: dict[str, set[str]] = {key: set() for key in self.keys}
        self._lock = threading.Lock()

    def recorded(self, record: RequestRecord, metadata: Mapping[str, Any]) -> None:
        with self._lock:
            labels = (record.model, record.purpose, *(self._value(key, metadata.get(key)) for key in self.keys))
            if record.cost.source == "refused":  # never went out: a refusal, not a request
                limit = _LIMIT.search(record.error or "")
                scope = "period" if " budget of " in (record.error or "") else "run"
                self.refusals.labels(*labels, limit.group(1) if limit else "budget", scope).inc()
                return
            self.requests.labels(*labels).inc()
            usage = record.usage
            if usage is not None:
                for kind, count in (
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                    ("cache_read", usage.cache_read_tokens),
                    ("cache_write", usage.cache_write_tokens),
                    ("reasoning", usage.reasoning_tokens),
                ):
                    self.tokens.labels(*labels, kind).inc(count)
            if record.cost.usd is not None:
                self.cost.labels(*labels).inc(record.cost.usd)
            if not record.ok:
                self.errors.labels(*labels, str(record.status_code)).inc()
            if record.ttfb_s is not None:
                self.ttfb.labels(*labels).observe(record.ttfb_s)
            self.duration.labels(*labels).observe(record.duration_s)

    def _value(self, key: str, value: Any) -> str:
        """A label's value: the metadata's, the empty text when the run has none, `_other` past
        MAX_VALUES values of the key."""
        text = "" if value is None else str(value)
        seen = self._seen[key]
        if text in seen or text == "":
            return text
        if len(seen) >= MAX_VALUES:
            return _OTHER
        seen.add(text)
        return text

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
