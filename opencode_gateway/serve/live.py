"""The dashboard, live in `serve`: never open to anyone who can reach the port.

`serve` prints a one-time login URL; opening it sets an HttpOnly, SameSite=Strict cookie (a
random secret this process keeps only as a digest) and the code is spent. The page and its data
need that cookie or the server's admin token as a bearer. A launch's token (what OpenCode holds)
is neither: an agent can spend through its launch, never read the ledger of every team.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..accounting.ledger import LedgerLocation
from ..credentials import token_digest
from ..dashboard.data import Query, dashboard_data
from ..dashboard.page import render_page
from ..endpoint.http import bearer, error_response
from ..errors import SettingsError

__all__ = ["COOKIE", "DashboardAccess", "dashboard_routes", "not_admin"]

COOKIE = "opencode_gateway_session"
RUNS_SHOWN = 500  # the live page's runs (the newest; report --html has them all)


class DashboardAccess:
    """Who may see the dashboard: the admin token's holder, and browsers that spent a login code."""

    def __init__(self, admin_token: str) -> None:
        self._admin = admin_token
        self._codes: set[str] = set()  # digests of unspent login codes
        self._sessions: set[str] = set()  # digests of the cookies handed out

    def new_code(self) -> str:
        code = secrets.token_urlsafe(24)
        self._codes.add(token_digest(code))
        return code

    def redeem(self, code: str) -> str | None:
        """A new session cookie for an unspent code (which is spent), else None."""
        digest = token_digest(code)
        if digest not in self._codes:
            return None
        self._codes.discard(digest)
        cookie = secrets.token_urlsafe(32)
        self._sessions.add(token_digest(cookie))
        return cookie

    def allows(self, request: Request) -> bool:
        """The admin token, or a login's cookie."""
        cookie = request.cookies.get(COOKIE)
        return self.is_admin(request) or (cookie is not None and token_digest(cookie) in self._sessions)

    def is_admin(self, request: Request) -> bool:
        """The server's admin token, as a bearer (it mints launches, reads /stats and the dashboard)."""
        token = bearer(request.headers) or ""
        return hmac.compare_digest(token.encode(), self._admin.encode())


_LOGIN_HELP = (
    "the dashboard needs a login: open the login URL `serve` printed, or get a new one with "
    "`opencode-gateway serve login` on the server's machine (or send the admin token as a bearer)"
)


def _login_page(why: str) -> Response:
    body = (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>opencode-gateway: log in</title>"
        f"<body style='font:15px system-ui;margin:40px'><h1>Spend dashboard</h1><p>{why}</p><p>A login link works "
        "once. For a new one, run this on the machine where <code>opencode-gateway serve</code> runs, and open "
        "the link it prints:</p><pre>opencode-gateway serve login</pre></body></html>"
    )
    return HTMLResponse(body, status_code=401, headers={"cache-control": "no-store"})


def not_admin() -> Response:
    return error_response("this needs the server's admin token (its token file)", 401, "authentication_error")


def _query(request: Request) -> Query:
    """The page's filter, from its URL: ?by=ticket&since=2026-12-01&until=...&where=team=a (repeatable)."""
    params = request.query_params
    where = []
    for pair in params.getlist("where"):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SettingsError(f"where={pair!r}: give KEY=VALUE")
        where.append((key, value))
    return Query(
        by=params.get("by") or "ticket",
        since=params.get("since") or None,
        until=params.get("until") or None,
        where=tuple(where),
        limit=RUNS_SHOWN,
    )


def dashboard_routes(
    access: DashboardAccess, ledger: LedgerLocation, sessions: Callable[[], list[dict[str, Any]]]
) -> list[Route]:
    """`/` (the page), `/dashboard/data` (its figures as JSON), `/login` and `/login-codes`."""

    def refused() -> Response:
        return error_response(_LOGIN_HELP, 401, "authentication_error")

    async def read(request: Request) -> dict[str, Any] | Response:
        if not access.allows(request):
            return refused()
        try:
            query = _query(request)
            return await asyncio.to_thread(dashboard_data, ledger, query)
        except SettingsError as exc:
            return error_response(str(exc), 400, "invalid_request_error")

    async def page(request: Request) -> Response:
        if not access.allows(request):  # a browser: a page saying how to log in, not a JSON error
            return _login_page("This dashboard needs a login.")
        data = await read(request)
        if isinstance(data, Response):
            return data
        return HTMLResponse(render_page(data, sessions=sessions()), headers={"cache-control": "no-store"})

    async def figures(request: Request) -> Response:
        data = await read(request)
        return data if isinstance(data, Response) else JSONResponse({**data, "sessions": sessions()})

    async def login(request: Request) -> Response:
        cookie = access.redeem(request.query_params.get("code", ""))
        if cookie is None:
            return _login_page("This login link was already used, or is not one of this server's.")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/")
        return response

    async def new_code(request: Request) -> Response:
        if not access.is_admin(request):
            return not_admin()
        return JSONResponse({"login_url": f"{request.base_url}login?code={access.new_code()}"})

    return [
        Route("/", page, methods=["GET"]),
        Route("/dashboard/data", figures, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Route("/login-codes", new_code, methods=["POST"]),
    ]
