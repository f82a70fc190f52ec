"""The endpoint as a long-lived server, for OpenCode's interactive TUI: every session accounted.

`opencode-gateway serve` runs one endpoint until it is stopped. Its stable token (a 0600 file in
the data dir) is an admin token: it mints launches and reads `/stats`, and cannot make a model
call. Each launch (`opencode-gateway opencode`, `env`) asks the server for a token of its own
(`POST /launches`), bound there to the launch's metadata, tags, workdir and budget, so attribution
is the server's record, never what a request says. A request is attributed by its token and
OpenCode's `x-session-id`: the first request of a session opens a ledger run, later ones add to
it. A session id is scoped to its launch's token: one launch can never add to another's run.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..accounting.budget import period_caps
from ..accounting.ledger import Ledger
from ..accounting.pricing import Pricer
from ..accounting.records import RequestRecord
from ..accounting.run import RunAccount, Totals
from ..config.settings import Settings, check_routes
from ..credentials import token_digest
from ..domain import ModelRoute, Purpose
from ..endpoint.app import Endpoint, create_app
from ..endpoint.http import bearer, error_response
from ..endpoint.routing import BadRequest, Target
from ..endpoint.server import EndpointServer
from ..endpoint.tagging import Tagging
from ..endpoint.upstream import Upstream
from ..errors import SettingsError
from ..observability.metrics import CONTENT_TYPE, Metrics
from ..observability.traces import RunSpan, root_attributes, tracing_for
from ..runs.wiring import upstream_for
from .launch import Launch, ServerState, server_socket, server_token
from .live import DashboardAccess, dashboard_routes, not_admin

__all__ = ["SessionRouter", "serve", "server_app"]


class _SessionRun:
    """One OpenCode session of one launch: one ledger run, its totals kept current as each request
    ends (incrementally: a long session costs no more per request than a short one, and no record
    is kept in memory). Its calls are admitted by its launch's limits, which all the launch's
    sessions spend together (a session id is whatever a request says)."""

    def __init__(self, router: SessionRouter, launch: Launch, session_id: str | None, limits: RunAccount) -> None:
        settings = router.settings
        self.router = router
        self.launch = launch
        self.session_id = session_id
        self.model = launch.model
        self.metadata = {**settings.metadata, **launch.metadata}
        self.account = RunAccount(
            pricer=router.pricer, keep_records=False, on_record=self.recorded, ledger=router.ledger, limits=limits
        )
        self.tagging = Tagging(
            (*settings.tags, *launch.tags),
            MappingProxyType(self.metadata),
            session_id=self.account.run_id,
            tag_metadata_keys=settings.tag_metadata_keys,
        )
        self.targets: dict[str, Target] = {}
        self.started_at = self.ended_at = time.time()
        self.account.row.open(
            model=launch.model,
            mode=ModelRoute.of(launch.model).mode,
            workdir=launch.workdir or "",
            metadata=self.metadata,
            tags=self.tagging.all_tags,
            session_id=session_id,
        )

    def target(self, model: str) -> Target:
        if model not in self.targets:
            self.targets[model] = Target(model, self.router.upstream(model), self.tagging, self.account)
        return self.targets[model]

    def recorded(self, record: RequestRecord) -> None:
        self.router.recorded(record, self)
        self.ended_at = max(self.ended_at, record.started_at + record.duration_s)
        self.update(None)

    def update(self, stop_reason: str | None) -> None:
        self.account.row.update(ended_at=self.ended_at, session_id=self.session_id, stop_reason=stop_reason)

    def root(self) -> RunSpan:
        """The session's root span: its launch's attribution and its totals."""
        attributes = root_attributes(
            self.model,
            ModelRoute.of(self.model).mode,
            self.account.totals.taken(),
            self.metadata,
            self.tagging.all_tags,
        )
        attributes.update(
            {"gen_ai.conversation.id": self.session_id, "opencode_gateway.launch_id": self.launch.launch_id}
        )
        return RunSpan(self.account.run_id, "session", self.model, self.started_at, self.ended_at, attributes)


class SessionRouter:
    """Knows the launches (by a digest of their tokens), sends each request to its launch's
    session's run (opened on the session's first request) and its model's upstream (one per
    model, shared)."""

    def __init__(self, settings: Settings, ledger: Ledger) -> None:
        self.settings = settings
        self.ledger = ledger
        self.started_at = time.time()
        self.upstreams: dict[str, Upstream] = {}
        self.launches: dict[str, Launch] = {}  # token digest -> launch
        self.limits: dict[str, RunAccount] = {}  # launch id -> the budget all its sessions spend together
        self.sessions: dict[tuple[str, str | None], _SessionRun] = {}  # (launch id, OpenCode session) -> run
        self.pricer = Pricer(settings.pricing)
        self.totals = Totals()
        self.model_totals: dict[str, Totals] = {}
        self.metrics = Metrics(settings.metrics_labels, self.in_flight)
        self.tracing = tracing_for(settings.otel)

    def mint(self, launch: Launch) -> str:
        token = secrets.token_urlsafe(32)
        self.launches[token_digest(token)] = launch
        settings = self.settings
        self.limits[launch.launch_id] = RunAccount(
            launch.budget.or_else(settings.budget_for(launch.model)),
            pricer=self.pricer,
            keep_records=False,
            periods=period_caps(settings.budgets, {**settings.metadata, **launch.metadata}),
            history=self.ledger,
        )
        return token

    def authorized(self, token: str) -> bool:
        """A launch's token (minted by /launches); never the admin token, which calls no model."""
        return token_digest(token) in self.launches

    def models(self) -> list[str]:
        return []  # each launch has its own

    def upstream(self, model: str) -> Upstream:
        if model not in self.upstreams:
            if ModelRoute.of(model).mode == "gateway" and not self.settings.gateway_api_base:
                raise BadRequest(
                    f"model {model} routes through a LiteLLM gateway, but this server has no gateway "
                    "URL: restart it with --api-base URL (or LITELLM_PROXY_API_BASE)"
                )
            self.upstreams[model] = upstream_for(self.settings, model)
        return self.upstreams[model]

    def route(self, headers: Mapping[str, str], requested: Any, purpose: Purpose) -> Target:
        """The request's session run and model: its purpose's route, the launch's model, or its
        small model when the request names that; whatever else it names is not forwarded anywhere."""
        launch = self.launches[token_digest(bearer(headers) or "")]  # the endpoint let only known tokens in
        model = launch.route(requested, purpose, self.settings.routes)
        self.upstream(model)  # a model that cannot be served opens no run
        key = (launch.launch_id, headers.get("x-session-id") or None)
        run = self.sessions.get(key)
        if run is None:
            run = self.sessions[key] = _SessionRun(self, launch, key[1], self.limits[launch.launch_id])
        return run.target(model)

    def recorded(self, record: RequestRecord, run: _SessionRun) -> None:
        self.totals.add(record)
        self.model_totals.setdefault(record.model, Totals()).add(record)
        self.metrics.recorded(record, run.metadata)
        if self.tracing is not None:
            self.tracing.request(run.account.run_id, record, self.settings.secrets)

    def in_flight(self) -> int:
        return sum(limits.in_flight for limits in self.limits.values())

    def stats(self) -> dict[str, Any]:
        """Requests, tokens and cost since the server started, in all, per session and per model."""
        return {
            "since": self.started_at,
            **self.totals.taken().summary(),
            "sessions": [
                {
                    "session_id": run.session_id,
                    "run_id": run.account.run_id,
                    "launch_id": run.launch.launch_id,
                    "model": run.model,
                    "metadata": run.metadata,
                    "last_request_at": run.ended_at,
                    **run.account.totals.taken().summary(),
                }
                for run in self.sessions.values()
            ],
            "models": {model: self.model_totals[model].taken().summary() for model in sorted(self.model_totals)},
        }

    def close(self) -> None:
        """Every session's run closed; with traces, its root sent (its requests went as they ended)."""
        for run in self.sessions.values():
            run.update("done")
            if self.tracing is not None:
                self.tracing.root(run.root(), self.settings.secrets)
        if self.tracing is not None:
            self.tracing.close()


def server_app(
    settings: Settings, ledger: Ledger, admin_token: str, access: DashboardAccess | None = None
) -> tuple[Starlette, SessionRouter]:
    """The long-lived endpoint's app, and the router that keeps its launches and sessions. Model
    calls need a launch's token; `/launches` and `/stats` need the admin token; the dashboard (`/`)
    the admin token or a login's cookie (`access` hands out the logins)."""
    router = SessionRouter(settings, ledger)
    access = access or DashboardAccess(admin_token)

    async def launches(request: Request) -> Response:
        if not access.is_admin(request):
            return not_admin()
        try:
            launch = Launch.from_request(json.loads(await request.body()), settings.tag_metadata_keys)
            check_routes(launch.model, settings.routes)  # the server's routes, against this launch's model
        except (ValueError, SettingsError) as exc:
            return error_response(f"invalid launch: {exc}", 400, "invalid_request_error")
        return JSONResponse({"token": router.mint(launch), "launch_id": launch.launch_id})

    async def statistics(request: Request) -> Response:
        return JSONResponse(router.stats()) if access.is_admin(request) else not_admin()

    async def metrics(request: Request) -> Response:
        """The admin token, a login, or `metrics_token` (a scraper's); never a launch's token."""
        token = bearer(request.headers) or ""
        scraper = settings.metrics_token is not None and hmac.compare_digest(token, settings.metrics_token)
        if not (scraper or access.is_admin(request)):
            return not_admin()
        return Response(router.metrics.exposition(), media_type=CONTENT_TYPE)

    endpoint = Endpoint(
        router=router,
        secrets=(*settings.secrets, admin_token),
        pricer=router.pricer,
        estimate_usage=settings.estimate_usage,
        first_byte_timeout=settings.upstream_limits.first_byte_timeout,
        max_body_bytes=settings.upstream_limits.max_body_bytes,
    )
    routes = [
        Route("/launches", launches, methods=["POST"]),
        Route("/stats", statistics, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *dashboard_routes(access, settings.ledger_location, lambda: list(reversed(router.stats()["sessions"]))),
    ]
    return create_app(endpoint, routes), router


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def serve(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_remote: bool = False,
    on_ready: Callable[[str, str, str], None] | None = None,
) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP (or cancellation); then every session's run is closed.
    `on_ready(url, token file, the dashboard's one-time login URL)` once it listens."""
    try:
        running = ServerState.read(settings.data_dir)
    except SettingsError:
        pass  # none runs: the usual case
    else:
        raise SettingsError(
            f"an opencode-gateway server already runs at {running.url} (pid {running.pid}) for "
            f"{settings.data_dir}: use it, or stop it first"
        )
    check_routes("", settings.routes)  # what each route says (each launch's model is checked as it comes)
    token_file = server_token(settings.data_dir)
    ledger = Ledger(settings.ledger_location)
    admin_token = token_file.read_text().strip()
    access = DashboardAccess(admin_token)
    app, router = server_app(settings, ledger, admin_token, access)
    socket_path = server_socket(settings.data_dir)
    socket_path.unlink(missing_ok=True)  # left by a server that was killed
    try:
        listening = EndpointServer(app, host, port, allow_remote=allow_remote, unix_socket=socket_path)
    except OSError as exc:
        ledger.close()
        raise SettingsError(
            f"cannot listen on {host}:{port} ({exc.strerror}): pass --port N (0 picks a free port)"
        ) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    try:
        async with listening:
            ServerState(listening.url, os.getpid(), str(token_file), settings.gateway_api_base).write(settings.data_dir)
            if on_ready is not None:
                on_ready(listening.url, str(token_file), f"{listening.url}/login?code={access.new_code()}")
            await stop.wait()
    finally:
        for signum in _STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        ServerState.clear(settings.data_dir)
        socket_path.unlink(missing_ok=True)
        router.close()
        for upstream in router.upstreams.values():
            await upstream.aclose()
        ledger.close()
