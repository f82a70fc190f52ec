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
import contextlib
import hashlib
import json
import os
import secrets
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .accounting.account import RunAccount, Totals
from .accounting.budget import Budget
from .accounting.ledger import Ledger
from .accounting.pricing import Pricer
from .accounting.records import RequestRecord
from .errors import SettingsError
from .gateway.app import BadRequest, Endpoint, Target, bearer, create_app, error_response
from .gateway.server import EndpointServer
from .gateway.tagging import Tagging
from .gateway.upstream import Upstream
from .runner import upstream_for
from .settings import GATEWAY_PREFIX, Settings, check_attribution

__all__ = ["Launch", "ServerState", "SessionRouter", "mint_launch", "serve", "server_app", "server_socket",
           "server_token"]


@dataclass(frozen=True)
class Launch:
    """What one launch of OpenCode adds to its requests: attribution, and a budget per session."""

    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tags: tuple[str, ...] = ()
    workdir: str | None = None
    budget: Budget = Budget()
    launch_id: str = field(default_factory=lambda: "launch_" + uuid.uuid4().hex[:12])

    def to_request(self) -> dict[str, Any]:
        budget = {k: v for k, v in (("max_cost", self.budget.max_cost), ("max_requests", self.budget.max_requests),
                                    ("max_tokens", self.budget.max_tokens)) if v is not None}
        return {"metadata": dict(self.metadata), "tags": list(self.tags), "workdir": self.workdir, "budget": budget}

    @classmethod
    def from_request(cls, data: Any, tag_metadata_keys: tuple[str, ...]) -> Launch:
        """A launch as a launcher asked for it, checked as the command line checks its flags."""
        if not isinstance(data, dict) or set(data) - {"metadata", "tags", "workdir", "budget"}:
            raise SettingsError("a launch is {metadata, tags, workdir, budget}")
        metadata, tags, workdir = data.get("metadata") or {}, data.get("tags") or [], data.get("workdir")
        if not isinstance(metadata, dict) or not isinstance(tags, list) or not isinstance(workdir, (str, type(None))):
            raise SettingsError("a launch's metadata is an object, its tags a list, its workdir a path")
        check_attribution(tags, metadata, tag_metadata_keys)
        budget = Budget.from_setting("budget", data.get("budget") or {})
        return cls(MappingProxyType(dict(metadata)), tuple(tags), workdir, budget)


def _paths(data_dir: Path) -> tuple[Path, Path]:
    folder = data_dir / "serve"
    return folder / "token", folder / "server.json"


def server_socket(data_dir: Path) -> Path:
    """Where the server also listens for sandboxed launches: a folder holding nothing else, so
    binding it into a sandbox shows no other file of the server's."""
    folder = data_dir / "serve-socket"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder / "endpoint.sock"


def server_token(data_dir: Path) -> Path:
    """The server's stable token file: made once (0600), the same for every start."""
    token_file, _ = _paths(data_dir)
    token_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(uuid.uuid4().hex + uuid.uuid4().hex)
    token_file.chmod(0o600)
    return token_file


@dataclass(frozen=True)
class ServerState:
    """Where a running server is, as its state file says."""

    url: str
    pid: int
    token_file: str

    def write(self, data_dir: Path) -> None:
        _, state_file = _paths(data_dir)
        state_file.write_text(json.dumps({"url": self.url, "pid": self.pid, "token_file": self.token_file}))

    @classmethod
    def read(cls, data_dir: Path) -> ServerState:
        """The running server's state; SettingsError says how to start one when none answers."""
        _, state_file = _paths(data_dir)
        hint = f"start one with `opencode-gateway serve` (it keeps its state in {state_file.parent})"
        try:
            data = json.loads(state_file.read_text())
            state = cls(str(data["url"]), int(data["pid"]), str(data["token_file"]))
        except (OSError, ValueError, KeyError, TypeError):
            raise SettingsError(f"no opencode-gateway server is running: {hint}") from None
        try:
            healthy = httpx.get(state.url + "/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            healthy = False
        if not healthy:
            raise SettingsError(f"the opencode-gateway server at {state.url} does not answer: {hint}")
        return state


def mint_launch(server: ServerState, launch: Launch) -> str:
    """Ask the running server for `launch`'s own token (the launcher's side of `POST /launches`)."""
    admin = Path(server.token_file).read_text().strip()
    try:
        response = httpx.post(server.url + "/launches", json=launch.to_request(),
                              headers={"authorization": f"Bearer {admin}"}, timeout=10.0)
    except httpx.HTTPError as exc:
        raise SettingsError(f"the opencode-gateway server at {server.url} does not answer ({exc})") from None
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}"
        raise SettingsError(f"the opencode-gateway server refused the launch: {message}")
    return str(response.json()["token"])


class _SessionRun:
    """One OpenCode session of one launch: one ledger run, its totals kept current as each request
    ends (incrementally: a long session costs no more per request than a short one, and no record
    is kept in memory). Its budget is the launch's, else that of the session's first model."""

    def __init__(self, router: SessionRouter, launch: Launch, session_id: str | None, model: str) -> None:
        settings = router.settings
        self.router = router
        self.launch = launch
        self.run_id = "run_" + uuid.uuid4().hex
        self.session_id = session_id
        self.model = model
        self.metadata = {**settings.metadata, **launch.metadata}
        self.tagging = Tagging((*settings.tags, *launch.tags), MappingProxyType(self.metadata),
                               session_id=self.run_id, tag_metadata_keys=settings.tag_metadata_keys)
        self.account = RunAccount(launch.budget.or_else(settings.budget_for(model)), pricer=router.pricer,
                                  keep_records=False, on_record=self.recorded)
        self.targets: dict[str, Target] = {}
        self.ended_at = time.time()
        router.ledger.start_run(run_id=self.run_id, started_at=time.time(), model=model,
                                mode="gateway" if model.startswith(GATEWAY_PREFIX) else "sdk",
                                workdir=launch.workdir or "", metadata=self.metadata, tags=self.tagging.all_tags,
                                session_id=session_id)

    def target(self, model: str) -> Target:
        if model not in self.targets:
            self.targets[model] = Target(model, self.router.upstream(model), self.tagging, self.account)
        return self.targets[model]

    def recorded(self, record: RequestRecord) -> None:
        self.router.ledger.record_request(self.run_id, record)
        self.router.recorded(record)
        self.ended_at = max(self.ended_at, record.started_at + record.duration_s)
        self.update(None)

    def update(self, stop_reason: str | None) -> None:
        account = self.account
        self.router.ledger.update_run(run_id=self.run_id, ended_at=self.ended_at, session_id=self.session_id,
                                      stop_reason=stop_reason, error=None, usage=account.usage, cost=account.cost,
                                      unpriced=account.unpriced)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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
        self.sessions: dict[tuple[str, str | None], _SessionRun] = {}  # (launch id, OpenCode session) -> run
        self.pricer = Pricer(settings.pricing)
        self.totals = Totals()
        self.model_totals: dict[str, Totals] = {}

    def mint(self, launch: Launch) -> str:
        token = secrets.token_urlsafe(32)
        self.launches[_digest(token)] = launch
        return token

    def known(self, token: str) -> bool:
        return _digest(token) in self.launches

    def upstream(self, model: str) -> Upstream:
        if model not in self.upstreams:
            if model.startswith(GATEWAY_PREFIX) and not self.settings.gateway_api_base:
                raise BadRequest(f"model {model} routes through a LiteLLM gateway, but this server has no gateway "
                                 "URL: restart it with --api-base URL (or LITELLM_PROXY_API_BASE)")
            self.upstreams[model] = upstream_for(self.settings, model)
        return self.upstreams[model]

    def target(self, headers: Mapping[str, str], model: Any) -> Target:
        launch = self.launches[_digest(bearer(headers) or "")]  # the endpoint let only known tokens in
        if not isinstance(model, str) or not model.strip():
            raise BadRequest("the request names no model: launch OpenCode with `opencode-gateway opencode -m MODEL`")
        self.upstream(model)  # a model that cannot be served opens no run
        key = (launch.launch_id, headers.get("x-session-id") or None)
        run = self.sessions.get(key)
        if run is None:
            run = self.sessions[key] = _SessionRun(self, launch, key[1], model)
        return run.target(model)

    def recorded(self, record: RequestRecord) -> None:
        self.totals.add(record)
        self.model_totals.setdefault(record.model, Totals()).add(record)

    def stats(self) -> dict[str, Any]:
        """Requests, tokens and cost since the server started, in all, per session and per model."""
        return {
            "since": self.started_at,
            **self.totals.summary(),
            "sessions": [{"session_id": run.session_id, "run_id": run.run_id, "launch_id": run.launch.launch_id,
                          "model": run.model, "metadata": run.metadata, **run.account.totals.summary()}
                         for run in self.sessions.values()],
            "models": {model: self.model_totals[model].summary() for model in sorted(self.model_totals)},
        }

    def close(self) -> None:
        for run in self.sessions.values():
            run.update("done")


def server_app(settings: Settings, ledger: Ledger, admin_token: str) -> tuple[Starlette, SessionRouter]:
    """The long-lived endpoint's app, and the router that keeps its launches and sessions. Model
    calls need a launch's token; `/launches` and `/stats` need the admin token."""
    router = SessionRouter(settings, ledger)

    def admin(request: Request) -> bool:
        return secrets.compare_digest((bearer(request.headers) or "").encode(), admin_token.encode())

    def not_admin() -> Response:
        return error_response("this needs the server's admin token (its token file)", 401, "authentication_error")

    async def launches(request: Request) -> Response:
        if not admin(request):
            return not_admin()
        try:
            launch = Launch.from_request(json.loads(await request.body()), settings.tag_metadata_keys)
        except (ValueError, SettingsError) as exc:
            return error_response(f"invalid launch: {exc}", 400, "invalid_request_error")
        return JSONResponse({"token": router.mint(launch), "launch_id": launch.launch_id})

    async def statistics(request: Request) -> Response:
        return JSONResponse(router.stats()) if admin(request) else not_admin()

    endpoint = Endpoint(token=router.known, target=router.target, secrets=(*settings.secrets, admin_token),
                        pricer=router.pricer, estimate_usage=settings.estimate_usage,
                        first_byte_timeout=settings.first_byte_timeout, max_body_bytes=settings.max_body_bytes)
    routes = [Route("/launches", launches, methods=["POST"]), Route("/stats", statistics, methods=["GET"])]
    return create_app(endpoint, routes), router


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def serve(settings: Settings, *, host: str = "127.0.0.1", port: int = 0, allow_remote: bool = False,
                on_ready: Callable[[str, str], None] | None = None) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP (or cancellation); then every session's run is closed."""
    try:
        running = ServerState.read(settings.data_dir)
    except SettingsError:
        pass  # none runs: the usual case
    else:
        raise SettingsError(f"an opencode-gateway server already runs at {running.url} (pid {running.pid}) for "
                            f"{settings.data_dir}: use it, or stop it first")
    token_file = server_token(settings.data_dir)
    ledger = Ledger(settings.ledger_path)
    app, router = server_app(settings, ledger, token_file.read_text().strip())
    socket_path = server_socket(settings.data_dir)
    socket_path.unlink(missing_ok=True)  # left by a server that was killed
    try:
        listening = EndpointServer(app, host, port, allow_remote=allow_remote, unix_socket=socket_path)
    except OSError as exc:
        ledger.close()
        raise SettingsError(f"cannot listen on {host}:{port} ({exc.strerror}): pass --port N (0 picks a free port)") \
            from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    state_file = _paths(settings.data_dir)[1]
    try:
        async with listening:
            ServerState(listening.url, os.getpid(), str(token_file)).write(settings.data_dir)
            if on_ready is not None:
                on_ready(listening.url, str(token_file))
            await stop.wait()
    finally:
        for signum in _STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        state_file.unlink(missing_ok=True)
        socket_path.unlink(missing_ok=True)
        router.close()
        for upstream in router.upstreams.values():
            await upstream.aclose()
        ledger.close()
