"""One request's life at the endpoint, once it is routed and admitted: forwarded (retried before
the first byte when OpenCode would retry it for minutes), relayed back chunk by chunk while its
usage is read from the passing stream, priced, and recorded, however it ends: one RequestRecord
goes to its run's account. The routes that lead here are in app.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from starlette.responses import Response, StreamingResponse

from ..accounting.pricing import Cost, Pricer
from ..accounting.records import RequestRecord
from ..accounting.usage import StreamUsageReader, Usage, estimate_usage, usage_from_body
from ..credentials import redact
from ..domain import Purpose
from ..litellm_gateway.protocol import is_budget_error
from .held import PassThrough, ToolCallHold, hold_whole
from .hooks import NO_GATES, NO_OBSERVERS, Gates, Observers
from .http import bearer, error_body, error_message, error_response
from .routing import Router, Target
from .upstream import StreamStalled, UpstreamReply

__all__ = ["REFUSED_STATUS", "Call", "Endpoint", "RetryPolicy", "transient"]

log = logging.getLogger("opencode_gateway.endpoint")


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of upstream failures OpenCode would otherwise retry itself, for minutes and
    silently. Only before the first byte is relayed: a started answer is never sent twice."""

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        wanted = retry_after if retry_after is not None else self.base_delay * 2 ** (attempt - 1)
        return max(0.0, min(wanted, self.max_delay))


@dataclass(frozen=True)
class Endpoint:
    """What the app needs: who may call it, where to forward, and where records go."""

    router: Router  # who may call, and where each request goes (a run's: RunRouter; serve's: its own)
    secrets: Sequence[str] = ()  # values scrubbed from every error body and log line
    retry: RetryPolicy = RetryPolicy()
    pricer: Pricer = Pricer()
    estimate_usage: bool = False  # estimate tokens of streams that report no usage
    first_byte_timeout: float = 300.0  # from forwarding a request to the upstream's answer
    max_body_bytes: int = 32 * 1024 * 1024
    keep_answers: bool = False  # each record carries the text of its answer (a run's answer is taken from them)
    observers: Observers = NO_OBSERVERS  # what a run's endpoint tells the run
    gates: Gates = NO_GATES  # what a request waits for, and may be refused by

    def authorized(self, headers: Mapping[str, str]) -> bool:
        token = bearer(headers)
        return token is not None and self.router.authorized(token)

    def scrub(self, text: str) -> str:
        return redact(text, self.secrets)


# A refused call's status: 400, as LiteLLM's proxy answers a spent budget. OpenCode retries a 429
# for a minute (6 attempts) before it gives up; a run stops OpenCode on the refusal anyway, but a
# TUI launched through serve would sit retrying.
REFUSED_STATUS = 400


class Call:
    """One request's timing and accounting, from forwarding to its record."""

    def __init__(
        self,
        endpoint: Endpoint,
        target: Target,
        stream: bool,
        body: dict[str, Any],
        session_id: str | None,
        purpose: Purpose = "main",
    ) -> None:
        self.endpoint = endpoint
        self.target = target
        self.stream = stream
        self.body = body
        self.session_id = session_id
        self.purpose = purpose
        self.request_id = uuid.uuid4().hex
        self.started_at = time.time()
        self.started = time.monotonic()
        self.ttfb: float | None = None
        self.attempts = 1

    async def respond(self, headers: dict[str, str]) -> Response:
        """Forward the admitted request; the answer, relayed as it comes if streamed."""
        try:
            reply = await self.forward(headers)
        except BaseException:  # OpenCode went away before the upstream answered: nothing to record
            self.target.account.release(self.request_id)
            raise
        if reply.status_code >= 400:
            return await self.failed(reply)
        if self.stream and reply.is_stream:
            return StreamingResponse(
                relay(self, reply), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        return await whole(self, reply)

    async def forward(self, headers: dict[str, str]) -> UpstreamReply:
        """Send upstream, retrying a transient failure (never a spent budget, never a timeout:
        waiting again would only double the wait)."""
        endpoint = self.endpoint
        for attempt in range(1, endpoint.retry.attempts + 1):
            self.attempts = attempt
            try:
                reply = await asyncio.wait_for(
                    self.target.upstream.send(self.body, headers, self.target.tagging), endpoint.first_byte_timeout
                )
            except asyncio.TimeoutError:
                message = f"the upstream sent no answer within {endpoint.first_byte_timeout:g} s (first-byte timeout)"
                reply = UpstreamReply.error(message, 504)
                break
            if not transient(reply.status_code) or attempt == endpoint.retry.attempts:
                break
            if is_budget_error(await reply.read()):
                break
            await reply.aclose()
            delay = endpoint.retry.delay(attempt, reply.retry_after)
            log.warning(
                "upstream answered %s; retrying in %.1f s (attempt %d of %d)",
                reply.status_code,
                delay,
                attempt + 1,
                endpoint.retry.attempts,
            )
            endpoint.observers.retrying(reply.status_code, attempt + 1, delay)
            await asyncio.sleep(delay)
        self.ttfb = time.monotonic() - self.started
        return reply

    def record(
        self,
        status: int,
        usage: Usage | None,
        cost: Cost,
        upstream_model: str | None,
        error: str | None = None,
        *,
        usage_missing: bool = False,
        estimated: bool = False,
        response_id: str | None = None,
        answer: str | None = None,
    ) -> None:
        record = RequestRecord(
            request_id=self.request_id,
            model=self.target.model,
            upstream_model=upstream_model,
            status_code=status,
            stream=self.stream,
            usage=usage,
            cost=cost,
            started_at=self.started_at,
            duration_s=time.monotonic() - self.started,
            ttfb_s=self.ttfb,
            attempts=self.attempts,
            error=None if error is None else self.endpoint.scrub(error),
            usage_missing=usage_missing,
            estimated=estimated,
            response_id=response_id,
            session_id=self.session_id,
            purpose=self.purpose,
            answer=answer if self.endpoint.keep_answers else None,
        )
        self.target.account.add(record)

    def usage_or_estimate(self, usage: Usage | None, completion: str) -> tuple[Usage | None, bool]:
        """The reported usage, or (with estimate_usage) an estimate and True."""
        if usage is not None or not self.endpoint.estimate_usage:
            return usage, False
        estimate = estimate_usage(self.target.upstream.model, self.body.get("messages"), completion)
        return estimate, estimate is not None

    def price(self, reply: UpstreamReply, usage: Usage | None, upstream_model: str | None) -> Cost:
        if usage is not None and not reply.reports_cost:
            usage = dataclasses.replace(usage, reported_cost=None)
        names = [upstream_model or "", self.target.model, self.target.upstream.model]
        return self.endpoint.pricer.price(
            usage, names, header_cost=reply.header_cost, backends=self.target.upstream.backends
        )

    async def failed(self, reply: UpstreamReply) -> Response:
        raw = await reply.read()
        await reply.aclose()
        message = error_message(raw) or f"upstream answered HTTP {reply.status_code}"
        message = self.endpoint.scrub(message)
        log.warning("upstream error %s: %s", reply.status_code, message)
        self.record(reply.status_code, None, Cost(0.0, "failed"), None, message)  # refused: nothing generated
        return error_response(message, reply.status_code, "upstream_error")


async def whole(call: Call, reply: UpstreamReply) -> Response:
    raw = await reply.read()
    await reply.aclose()
    gates = call.endpoint.gates
    relayed = raw
    if gates.holds_tool_calls:
        relayed = await hold_whole(raw, lambda calls: gates.approved(call.session_id, calls))
    try:
        data: Any = json.loads(raw)
    except ValueError:
        data = None
    body = data if isinstance(data, dict) else {}
    model = body.get("model") if isinstance(body.get("model"), str) and body["model"] else None
    reported = usage_from_body(data)
    usage, estimated = call.usage_or_estimate(reported, json.dumps(body.get("choices", "")))
    call.record(
        reply.status_code,
        usage,
        call.price(reply, usage, model),
        model,
        usage_missing=reported is None,
        estimated=estimated,
        response_id=body.get("id") if isinstance(body.get("id"), str) else None,
        answer=_answer_of(body),
    )
    return Response(relayed, reply.status_code, media_type=reply.media_type)


async def relay(call: Call, reply: UpstreamReply) -> AsyncIterator[bytes]:
    """Relay the stream as it comes. However it ends, OpenCode gets a well-formed ending (a
    stream cut or stalled upstream becomes an SSE error event, never a cut) and one record
    is made."""
    reader = _stream_reader(call.endpoint, call.session_id)
    gates = call.endpoint.gates
    hold = (
        ToolCallHold(lambda calls: gates.approved(call.session_id, calls)) if gates.holds_tool_calls else PassThrough()
    )
    failure: str | None = None
    ended = False  # False in `finally`: OpenCode went away (or we stopped it) mid-stream
    try:
        try:
            async for chunk in reply.chunks:
                reader.feed(chunk)  # the upstream's own bytes: the record is of what the model said
                for piece in await hold.feed(chunk):
                    yield piece
            for piece in await hold.close():
                yield piece
        except StreamStalled as exc:
            failure = str(exc)
        except httpx.HTTPError as exc:
            failure = f"the upstream stream broke off ({type(exc).__name__})"
        reader.close()
        if failure is None and reader.error is not None:
            failure = _error_text(reader.error)  # the upstream's own error event, relayed as it came
        elif failure is None and not reader.done:
            failure = "the upstream stream ended before [DONE]"
        if failure is not None and reader.error is None:
            yield b"data: " + error_body(call.endpoint.scrub(failure), status_code=502) + b"\n\n"
        ended = True
    finally:
        with anyio.CancelScope(shield=True):
            await reply.aclose()
            reader.close()
            if not ended:
                failure, status = "the client closed the connection before the stream ended", 499
            else:
                status = 200 if failure is None else 502
            # Priced and recorded just after the stream's last byte is sent, not before it.
            asyncio.get_running_loop().call_soon(_record_stream, call, reply, reader, status, failure)


def _record_stream(
    call: Call, reply: UpstreamReply, reader: StreamUsageReader, status: int, failure: str | None
) -> None:
    usage, estimated = call.usage_or_estimate(reader.usage, reader.text)
    call.record(
        status,
        usage,
        call.price(reply, usage, reader.model),
        reader.model,
        failure,
        usage_missing=reader.usage is None,
        estimated=estimated,
        response_id=reader.response_id,
        answer=reader.answer,
    )


def _stream_reader(endpoint: Endpoint, session_id: str | None) -> StreamUsageReader:
    """What a relayed stream is read for: its usage, and, as the endpoint asks, its text for an
    estimate, each piece passed on live, the answer kept."""
    observers = endpoint.observers
    return StreamUsageReader(
        collect_text=endpoint.estimate_usage,
        keep_answer=endpoint.keep_answers,
        on_text=(lambda kind, piece: observers.streamed(session_id, kind, piece)) if observers.streams_text else None,
    )


def _answer_of(body: Mapping[str, Any]) -> str:
    """The text of a whole (not streamed) answer: its first choice's message content."""
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    message = first.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) else ""


def _error_text(error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or error)


def transient(status_code: int) -> bool:
    """A failure that another attempt may not meet: a timeout, a conflict, a rate limit, a server
    error. Not 501 or 505 (the server does not do what was asked, and will not), nor another 4xx."""
    return status_code in (408, 409, 429) or (status_code >= 500 and status_code not in (501, 505))
