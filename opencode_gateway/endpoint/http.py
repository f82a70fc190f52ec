"""What every route here speaks, the relay's and `serve`'s alike: OpenAI-shaped errors and bearer
tokens. Apart from the relay (app.py), so the dashboard and `serve` use them without importing it."""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.responses import Response

__all__ = ["bearer", "error_body", "error_response"]


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer ...` header."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token if scheme.lower() == "bearer" and token else None


def error_body(message: str, *, status_code: int, kind: str = "upstream_error") -> bytes:
    """An OpenAI-shaped error body (OpenCode's client reads its message)."""
    error = {"message": message, "type": kind, "param": None, "code": str(status_code)}
    return json.dumps({"error": error}).encode()


def error_response(message: str, status_code: int, kind: str) -> Response:
    """An OpenAI-shaped error, as every failure of the endpoint is answered."""
    return Response(error_body(message, status_code=status_code, kind=kind), status_code, media_type="application/json")
