"""The Starlette app OpenCode sees as its only provider: its routes.

Each request is checked (token, body), routed, cleaned (spoofable fields dropped, model pinned,
usage asked for) and admitted by its account's budget; then call.py forwards and relays it, and
records it however it ends.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..accounting.pricing import Cost
from ..opencode.purpose import request_purpose
from .bodies import PARSED_AT_ONCE, json_body
from .call import REFUSED_STATUS, Call, Endpoint, RetryPolicy
from .http import bearer, error_response
from .routing import BadRequest, Router, RunRouter, Target, Targeting
from .tagging import clean_body, forwarded_headers

__all__ = [
    "BadRequest",
    "Endpoint",
    "RetryPolicy",
    "Router",
    "RunRouter",
    "Target",
    "Targeting",
    "create_app",
]

log = logging.getLogger("opencode_gateway.endpoint")


def _forwarded(body: dict[str, Any], target: Target) -> dict[str, Any]:
    """What goes upstream: the allowlisted fields (endpoint/tagging.py), the model pinned to the
    target's, and a streamed answer's usage asked for."""
    body, dropped = clean_body(body)
    if dropped:
        log.debug("dropped request fields that would change attribution or routing: %s", ", ".join(dropped))
    body["model"] = target.upstream.model
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream_options", None)
    return body


def create_app(endpoint: Endpoint, routes: Sequence[Route] = ()) -> Starlette:
    """The endpoint's app, with `routes` of the caller's (serve's). `GET /health` answers anyone,
    and says nothing but that the endpoint is up."""

    def authorized(request: Request) -> bool:
        return endpoint.authorized(request.headers)

    async def models(request: Request) -> Response:
        if not authorized(request):
            return _unauthorized()
        entries = [
            {"id": model, "object": "model", "created": 0, "owned_by": "opencode-gateway"}
            for model in endpoint.router.models()
        ]
        return JSONResponse({"object": "list", "data": entries})

    # Bodies being read and parsed at once, per token: one token (an agent's) cannot fill memory.
    parsing: collections.defaultdict[str, asyncio.Semaphore] = collections.defaultdict(
        lambda: asyncio.Semaphore(PARSED_AT_ONCE)
    )

    async def chat(request: Request) -> Response:
        if not authorized(request):
            return _unauthorized()
        body = await json_body(request, endpoint.max_body_bytes, parsing[bearer(request.headers) or ""])
        if isinstance(body, Response):
            return body
        if (refused := await endpoint.gates.checked()) is not None:
            return error_response(refused, 403, "preflight_failed")
        purpose = request_purpose(body)  # read before the body is cleaned: what OpenCode sent
        try:
            target = endpoint.router.route(request.headers, body.get("model"), purpose)
        except BadRequest as exc:
            return error_response(str(exc), 400, "invalid_request_error")
        body = _forwarded(body, target)
        stream = bool(body.get("stream"))
        call = Call(endpoint, target, stream, body, request.headers.get("x-session-id"), purpose)
        await endpoint.gates.follows(call.session_id, body)
        account = target.account
        reservation = account.reserve(body, [target.model, target.upstream.model], purpose)
        refusal = await account.admit(call.request_id, reservation)
        if refusal:
            call.record(REFUSED_STATUS, None, Cost(0.0, "refused"), None, str(refusal))
            return error_response(str(refusal), REFUSED_STATUS, "budget_exceeded")
        return await call.respond(forwarded_headers(request.headers))

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/models", models, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
            *routes,
        ],
        exception_handlers={404: _not_found, 405: _not_found},
    )


def _unauthorized() -> Response:
    return error_response(
        "missing or wrong bearer token for this opencode-gateway endpoint", 401, "authentication_error"
    )


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = {404: f"no route {request.url.path}", 405: f"method {request.method} not allowed here"}
    return error_response(message.get(status, "request failed"), status, "invalid_request_error")
