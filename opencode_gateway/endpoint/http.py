"""What every route here speaks, the relay's and `serve`'s alike: OpenAI-shaped errors and bearer
tokens. Apart from the relay (app.py), so the dashboard and `serve` use them without importing it."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping

from starlette.responses import Response

__all__ = ["bearer", "error_body", "error_message", "error_response"]


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


def error_message(raw: bytes) -> str | None:
    """What an upstream's error body says, in one line: its JSON error's message, a web server's
    HTML page named by its title (a wrong API base), or its text."""
    try:
        data = json.loads(raw)
    except ValueError:
        text = raw.decode(errors="replace").strip()
        if text[:200].lstrip().lower().startswith(("<!doctype", "<html")):  # a web server's page, not an API's
            title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
            page = " ".join(html.unescape(title.group(1)).split()) if title else "no title"
            return f"an HTML page ({page!r}), not an API's answer: is the API base URL right (it usually ends in /v1)?"
        return " ".join(text.split())[:2000] or None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict):
            return str(error.get("message") or json.dumps(error))
        if error is not None:
            return str(error)
    return None
