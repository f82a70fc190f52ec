"""Every run as an OpenTelemetry trace, sent over OTLP (http/protobuf) to the collector a team
already runs: Arize Phoenix, Langfuse, Grafana Tempo, Honeycomb, Datadog, an OTel Collector.

A run is a root span (its model, attribution, outcome and totals) with a child span per model
request and per OpenCode tool call, written from what the run recorded, with the times things
happened: a request's span as its record is made, the root when the run ends. Ids come from the
run's id, so a child can be sent before its root, and a serve session streams its requests as
they end. The SDK's background thread sends them from a bounded queue: a collector that is down
or slow costs a warning, never the run.

Names follow the OpenTelemetry GenAI semantic conventions. A request's cost is
`gen_ai.usage.cost` (USD): the name proposed for the conventions, not yet in them; its source
(`reported`, `litellm`, `gateway`, ...) is `opencode_gateway.cost_source`. No prompt, answer,
tool input or output is sent unless `otel.content` is true, and what is sent is redacted of every
secret of the run it belongs to (its keys and its token: one process runs many runs, with other
keys, on one Tracing).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..accounting.records import RequestRecord
from ..accounting.run import RunTotals
from ..credentials import redact, redacted
from ..errors import SettingsError
from ..events import ApprovalAnswered
from ..opencode.lines import ToolCall, ToolResult

__all__ = ["INSTALL", "OtelConfig", "RunSpan", "RunTrace", "Tracing", "flush", "root_attributes", "tracing_for"]

INSTALL = "pip install 'opencode-gateway[otel]'"
_QUEUE = 4096  # spans waiting to be sent; more are dropped (counted by the SDK), never waited for
_SEND_TIMEOUT_S = 5.0
# What an agent writes (a tool's title is its command) is cut after redaction, so a span stays small.
_LINE_MAX = 500  # a title, an error
_TEXT_MAX = 10_000  # with content: an answer, a tool's input or output
_ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
log = logging.getLogger("opencode_gateway.traces")


@dataclass(frozen=True)
class OtelConfig:
    """The `otel:` settings. Unset fields fall back to the standard OTEL_EXPORTER_OTLP_* variables
    (the SDK reads them); header values are secrets (written `os.environ/NAME` in a file)."""

    endpoint: str | None = None  # the traces URL, e.g. http://collector:4318/v1/traces
    headers: tuple[tuple[str, str], ...] = ()  # (name, value): a config is a key of the per-process cache
    content: bool = False  # prompts' answers and tools' input and output in the spans
    service_name: str = "opencode-gateway"

    @classmethod
    def from_setting(cls, setting: Mapping[str, Any]) -> OtelConfig:
        known = {"endpoint", "headers", "protocol", "content", "service_name"}
        unknown = sorted(set(setting) - known)
        if unknown:
            raise SettingsError(f"otel.{unknown[0]}: no such setting; otel takes {', '.join(sorted(known))}")
        if setting.get("protocol", "http/protobuf") != "http/protobuf":
            raise SettingsError(
                f"otel.protocol {setting['protocol']!r} is not supported: use http/protobuf (port 4318)"
            )
        endpoint, headers = setting.get("endpoint"), setting.get("headers") or {}
        if endpoint is not None and (not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://"))):
            raise SettingsError(f"otel.endpoint {endpoint!r} is not a URL: give http(s)://host:4318/v1/traces")
        if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
            raise SettingsError("otel.headers must map header names to text (e.g. Authorization: os.environ/OTEL_AUTH)")
        if not isinstance(setting.get("content", False), bool):
            raise SettingsError("otel.content must be true or false")
        return cls(
            endpoint,
            tuple(sorted(headers.items())),
            setting.get("content", False),
            str(setting.get("service_name") or "opencode-gateway"),
        )

    @classmethod
    def wanted(cls, setting: Mapping[str, Any] | None, environ: Mapping[str, str]) -> OtelConfig | None:
        """The config when traces are asked for: an `otel:` setting, or the standard variables."""
        if setting is not None:
            return cls.from_setting(setting)
        return cls() if any(environ.get(name) for name in _ENV_ENDPOINTS) else None


@dataclass(frozen=True)
class RunSpan:
    """What a trace's root says: a run (or a serve session, or a batch) from start to end."""

    run_id: str
    kind: str  # "run", "session" or "batch"
    model: str
    started_at: float
    ended_at: float
    attributes: Mapping[str, Any]  # the run's attribution, outcome and totals, named as spans name them
    batch_id: str | None = None  # a batch task's run links to its batch's span
    error: str | None = None


def root_attributes(
    model: str, mode: str, totals: RunTotals, metadata: Mapping[str, Any], tags: Sequence[str]
) -> dict[str, Any]:
    """A root span's attributes: the model, the attribution (each metadata key its own attribute,
    as spend reports group by them) and the totals, the cost as the ledger's."""
    usage = totals.usage
    return {
        "gen_ai.request.model": model,
        "opencode_gateway.mode": mode,
        "opencode_gateway.tags": list(tags),
        **{f"opencode_gateway.metadata.{key}": str(value) for key, value in metadata.items()},
        "opencode_gateway.requests": usage.requests,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
        "gen_ai.usage.cost": totals.cost,
    }


class RunTrace:
    """One run's trace as it goes: each request's and tool call's span as it ends, the root at
    the run's end. The Tracing is asked for at the first span (the warm-up has made it by then),
    so nothing of it is imported before OpenCode starts."""

    def __init__(self, tracing: Callable[[], Tracing | None], run_id: str, secrets: Sequence[str]) -> None:
        self._tracing = tracing
        self.run_id = run_id
        self.secrets = tuple(secrets)
        self._inputs: dict[str, Mapping[str, Any]] = {}  # a tool call's input, until its result
        self._answers: dict[str, ApprovalAnswered] = {}  # the host's answer to a call, until its result

    def request(self, record: RequestRecord) -> None:
        if (tracing := self._tracing()) is not None:
            tracing.request(self.run_id, record, self.secrets)

    def event(self, event: object) -> None:
        if isinstance(event, ToolCall):  # its input goes with its result, when content is sent
            if (tracing := self._tracing()) is not None and tracing.config.content:
                self._inputs[event.call_id] = event.input
        elif isinstance(event, ApprovalAnswered) and event.call_id:
            self._answers[event.call_id] = event
        elif isinstance(event, ToolResult) and (tracing := self._tracing()) is not None:
            inputs, answer = self._inputs.pop(event.call_id, None), self._answers.pop(event.call_id, None)
            tracing.tool(self.run_id, event, self.secrets, inputs, answer)

    def end(self, root: RunSpan) -> None:
        if (tracing := self._tracing()) is not None:
            tracing.root(root, self.secrets)


def _approval_attributes(answer: ApprovalAnswered) -> dict[str, Any]:
    return {
        "opencode_gateway.approval.decision": answer.decision,
        "opencode_gateway.approval.by": answer.by,
        "opencode_gateway.approval.reason": answer.reason[:_LINE_MAX],
        "opencode_gateway.approval.waited_s": answer.waited_s,
    }


def _ids(key: str) -> tuple[int, int]:
    """A trace id and a root span id made from a run's (or batch's) id: a child can name its root
    before the root is sent, in this process or another (a Ray worker)."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


class Tracing:
    """The SDK's tracer provider and its OTLP exporter behind a bounded batch queue, one per
    process (`tracing_for`). SettingsError naming the install when the extra is missing."""

    def __init__(self, config: OtelConfig) -> None:
        try:
            from . import _otel
        except ImportError:
            raise SettingsError(f"otel settings need OpenTelemetry, which is not installed: {INSTALL}") from None
        from opentelemetry import trace
        from opentelemetry.context import Context

        self._trace = trace
        self._context = Context  # an empty one: a root has no parent, whatever is current
        self.config = config
        self._fixed: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("ids", default=None)
        self.provider = _otel.provider(
            config.endpoint,
            dict(config.headers),
            config.service_name,
            self._fixed,
            queue=_QUEUE,
            timeout_s=_SEND_TIMEOUT_S,
        )
        self.tracer = self.provider.get_tracer("opencode_gateway")

    def _root_context(self, key: str) -> Any:
        """The span context of the root of `key` (a run's, a batch's id), sent or not yet."""
        trace_id, span_id = _ids(key)
        flags = self._trace.TraceFlags(self._trace.TraceFlags.SAMPLED)
        return self._trace.SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags)

    def _parent(self, run_id: str) -> Any:
        return self._trace.set_span_in_context(self._trace.NonRecordingSpan(self._root_context(run_id)))

    def _span(
        self,
        name: str,
        start: float,
        end: float,
        parent: Any,
        attributes: Mapping[str, Any],
        secrets: Sequence[str],
        error: str | None = None,
        links: Sequence[Any] = (),
        events: Sequence[tuple[str, float, Mapping[str, Any]]] = (),
    ) -> None:
        span = self.tracer.start_span(
            name,
            context=parent,
            start_time=_ns(start),
            links=links,
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        for event_name, at, event_attributes in events:
            span.add_event(event_name, redacted(dict(event_attributes), secrets), _ns(at))
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, redact(error, secrets)[:_LINE_MAX]))
        span.end(end_time=_ns(max(end, start)))

    def request(self, run_id: str, record: RequestRecord, secrets: Sequence[str]) -> None:
        """A model request's span (`chat <model>`), child of its run's root, redacted of `secrets`."""
        usage = record.usage
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": record.model,
            "gen_ai.response.model": record.upstream_model,
            "gen_ai.response.id": record.response_id,
            "gen_ai.usage.input_tokens": usage.input_tokens if usage else None,
            "gen_ai.usage.output_tokens": usage.output_tokens if usage else None,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens if usage else None,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens if usage else None,
            "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens if usage else None,
            "gen_ai.usage.cost": record.cost.usd,
            "opencode_gateway.cost_source": record.cost.source,
            "opencode_gateway.purpose": record.purpose,
            "opencode_gateway.request_id": record.request_id,
            "opencode_gateway.time_to_first_token_s": record.ttfb_s,
            "opencode_gateway.attempts": record.attempts,
            "http.response.status_code": record.status_code,
            "gen_ai.conversation.id": record.session_id,
        }
        if self.config.content and record.answer:
            attributes["opencode_gateway.answer"] = redact(record.answer, secrets)[:_TEXT_MAX]
        self._span(
            f"chat {record.model}",
            record.started_at,
            record.started_at + record.duration_s,
            self._parent(run_id),
            attributes,
            secrets,
            None if record.ok else record.error or f"HTTP {record.status_code}",
        )

    def tool(
        self,
        run_id: str,
        event: ToolResult,
        secrets: Sequence[str],
        tool_input: Mapping[str, Any] | None = None,
        approval: ApprovalAnswered | None = None,
    ) -> None:
        """A tool call's span under its run's root: its title, end, the host's answer (`approval`)."""
        if event.started_at is None or event.ended_at is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool,
            "gen_ai.tool.call.id": event.call_id,
            "opencode_gateway.tool.title": redact(event.title, secrets)[:_LINE_MAX],
            "opencode_gateway.tool.status": "error" if event.is_error else "completed",
            "gen_ai.conversation.id": event.session_id,
        }
        if self.config.content:
            attributes["opencode_gateway.tool.output"] = redact(event.output, secrets)[:_TEXT_MAX]
            attributes["opencode_gateway.tool.input"] = redact(json.dumps(tool_input or {}), secrets)[:_TEXT_MAX]
        self._span(
            f"execute_tool {event.tool}",
            event.started_at,
            event.ended_at,
            self._parent(run_id),
            attributes,
            secrets,
            event.output if event.is_error else None,  # redacted, then cut
            events=() if approval is None else [("approval", event.started_at, _approval_attributes(approval))],
        )

    def root(self, run: RunSpan, secrets: Sequence[str]) -> None:
        """A run's (session's, batch's) root span, with the ids its children already named."""
        links = []
        if run.batch_id is not None:
            links = [self._trace.Link(self._root_context(run.batch_id))]
        attributes = {k: redact(v, secrets) if isinstance(v, str) else v for k, v in run.attributes.items()}
        attributes.update({"opencode_gateway.kind": run.kind, "opencode_gateway.run_id": run.run_id})
        with self._ids_of(run.run_id):
            name = f"{run.kind} {run.model}".strip()
            self._span(name, run.started_at, run.ended_at, self._context(), attributes, secrets, run.error, links)

    @contextmanager
    def _ids_of(self, key: str) -> Iterator[None]:
        token = self._fixed.set(_ids(key))
        try:
            yield
        finally:
            self._fixed.reset(token)

    def close(self, timeout_s: float = _SEND_TIMEOUT_S) -> None:
        """Send what is queued, waiting at most `timeout_s`, then stop."""
        self.provider.force_flush(int(timeout_s * 1000))
        self.provider.shutdown()


_TRACING: dict[OtelConfig, Tracing] = {}
_LOCK = threading.Lock()


def tracing_for(setting: Mapping[str, Any] | None, environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """This process's Tracing for an `otel` setting (None when traces are not asked for): made
    once, and closed when the process exits."""
    config = OtelConfig.wanted(setting, environ)
    if config is None:
        return None
    with _LOCK:
        if config not in _TRACING:
            import atexit

            _TRACING[config] = tracing = Tracing(config)
            atexit.register(tracing.close)
        return _TRACING[config]


def flush(timeout_s: float = _SEND_TIMEOUT_S) -> None:
    """Send what this process has queued, waiting at most `timeout_s` (a Ray worker, whose
    process Ray may end without its exit hooks, after each task)."""
    for tracing in list(_TRACING.values()):
        tracing.provider.force_flush(int(timeout_s * 1000))


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
