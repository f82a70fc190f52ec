"""A request's body, read and parsed within bounds: its size (read no further than the limit),
its shape (counted before it is parsed), and how many are parsed at once per token. A hostile body
is a 413 or a 400 that says what is wrong, never a process that runs out of memory."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .http import error_response

__all__ = ["MAX_JSON_VALUES", "PARSED_AT_ONCE", "json_body", "too_many_values"]


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it is known to be over `limit` (never read further)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            return None
    return bytes(body)


# A body's shape, bounded before it is parsed: 32 MiB of `{},` is 11 million dicts, 6 GB once
# parsed. OpenCode's longest sessions send a few tens of thousands of values.
MAX_JSON_VALUES = 250_000
PARSED_AT_ONCE = 2  # bodies of one token read and parsed at once
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def too_many_values(raw: bytes) -> bool:
    """Whether `raw` holds more than MAX_JSON_VALUES values (objects, arrays, and the items
    commas separate). Counting the brackets and commas inside strings too is an upper bound,
    enough for almost every body; only above it are the strings taken out and counted exactly."""

    def values(text: bytes) -> int:
        return text.count(b"{") + text.count(b"[") + text.count(b",")

    return values(raw) > MAX_JSON_VALUES and values(_JSON_STRING.sub(b'""', raw)) > MAX_JSON_VALUES


async def json_body(request: Request, limit: int, parsing: asyncio.Semaphore) -> dict[str, Any] | Response:
    """The request's JSON object, or the error response that says what is wrong with it. Bodies
    are read and parsed `parsing` at a time (per token), each shape bounded first."""
    async with parsing:
        raw = await _read_body(request, limit)
        if raw is None:
            return error_response(f"request body is over the limit of {limit:,} bytes", 413, "invalid_request_error")
        if too_many_values(raw):
            return error_response(
                f"request body holds over {MAX_JSON_VALUES:,} JSON values: no chat request needs that many",
                413,
                "invalid_request_error",
            )
        try:
            body = json.loads(raw)
        except ValueError:
            return error_response("request body is not valid JSON", 400, "invalid_request_error")
        except RecursionError:
            return error_response("request body is nested too deeply", 400, "invalid_request_error")
    if not isinstance(body, dict):
        return error_response("request body must be a JSON object", 400, "invalid_request_error")
    return body
