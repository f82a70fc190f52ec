"""The endpoint as a long-lived server, for OpenCode's interactive TUI: every session accounted.

`opencode-gateway serve` runs one endpoint until it is stopped, with a stable token (a 0600 file
in the data dir) and a state file that tells launchers (`opencode-gateway opencode`, `env`) where
it is. Each request is attributed by OpenCode's `x-session-id` header: the first request of a
session opens a ledger run, later ones add to it, so `report --by session` works for interactive
use as it does for headless runs. Metadata and tags are set per launch: the launcher puts them in
an `x-opencode-gateway-launch` header of the generated config, which the server reads and never
forwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
from starlette.applications import Starlette
from .accounting.account import RunAccount, Totals
from .accounting.ledger import Ledger
from .accounting.pricing import Pricer
from .accounting.records import RequestRecord
from .errors import SettingsError
from .gateway.app import BadRequest, Endpoint, Target, create_app
from .gateway.server import EndpointServer
from .gateway.tagging import Tagging
from .gateway.upstream import Upstream
from .runner import upstream_for
from .settings import GATEWAY_PREFIX, Settings

__all__ = ["LAUNCH_HEADER", "Launch", "ServerState", "SessionRouter", "serve", "server_app", "server_token"]

LAUNCH_HEADER = "x-opencode-gateway-launch"


@dataclass(frozen=True)
class Launch:
    """What one launch of OpenCode adds to its requests' attribution."""

    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tags: tuple[str, ...] = ()
    workdir: str | None = None

    def header(self) -> str:
        return json.dumps({"metadata": dict(self.metadata), "tags": list(self.tags), "workdir": self.workdir},
                          separators=(",", ":"))

    @classmethod
    def from_header(cls, value: str | None) -> Launch:
        if not value:
            return cls()
        try:
            data = json.loads(value)
        except ValueError:
            data = None
        if not (isinstance(data, dict) and isinstance(data.get("metadata", {}), dict)
                and isinstance(data.get("tags", []), list) and all(isinstance(t, str) for t in data.get("tags", []))):
            raise BadRequest(f"the {LAUNCH_HEADER} header is not what opencode-gateway writes: relaunch OpenCode "
                             "with `opencode-gateway opencode`")
        workdir = data.get("workdir")
        return cls(MappingProxyType(data.get("metadata", {})), tuple(data.get("tags", [])),
                   workdir if isinstance(workdir, str) else None)


def _paths(data_dir: Path) -> tuple[Path, Path]:
    folder = data_dir / "serve"
    return folder / "token", folder / "server.json"


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


class _SessionRun:
    """One OpenCode session's requests at the server: one ledger run, its totals kept current as
    each request ends (incrementally: a long session costs no more per request than a short one,
    and no record is kept in memory). The budget is that of the session's first model."""

    def __init__(self, router: SessionRouter, session_id: str | None, model: str, launch: Launch) -> None:
        settings = router.settings
        self.router = router
        self.run_id = "run_" + uuid.uuid4().hex
        self.session_id = session_id
        self.model = model
        self.metadata = {**settings.metadata, **launch.metadata}
        self.tagging = Tagging((*settings.tags, *launch.tags), MappingProxyType(self.metadata),
                               session_id=self.run_id, tag_metadata_keys=settings.tag_metadata_keys)
        self.account = RunAccount(settings.budget_for(model), pricer=router.pricer, keep_records=False,
                                  on_record=self.recorded)
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


class SessionRouter:
    """Sends each request to its OpenCode session's run (opened on the session's first request)
    and its model's upstream (one per model, shared by the sessions)."""

    def __init__(self, settings: Settings, ledger: Ledger) -> None:
        self.settings = settings
        self.ledger = ledger
        self.started_at = time.time()
        self.upstreams: dict[str, Upstream] = {}
        self.sessions: dict[str | None, _SessionRun] = {}
        self.pricer = Pricer(settings.pricing)
        self.totals = Totals()
        self.model_totals: dict[str, Totals] = {}

    def upstream(self, model: str) -> Upstream:
        if model not in self.upstreams:
            if model.startswith(GATEWAY_PREFIX) and not self.settings.gateway_api_base:
                raise BadRequest(f"model {model} routes through a LiteLLM gateway, but this server has no gateway "
                                 "URL: restart it with --api-base URL (or LITELLM_PROXY_API_BASE)")
            self.upstreams[model] = upstream_for(self.settings, model)
        return self.upstreams[model]

    def target(self, headers: Mapping[str, str], model: Any) -> Target:
        if not isinstance(model, str) or not model.strip():
            raise BadRequest("the request names no model: launch OpenCode with `opencode-gateway opencode -m MODEL`")
        self.upstream(model)  # a model that cannot be served opens no run
        session_id = headers.get("x-session-id") or None
        run = self.sessions.get(session_id)
        if run is None:
            run = self.sessions[session_id] = _SessionRun(self, session_id, model, Launch.from_header(
                headers.get(LAUNCH_HEADER)))
        return run.target(model)

    def recorded(self, record: RequestRecord) -> None:
        self.totals.add(record)
        self.model_totals.setdefault(record.model, Totals()).add(record)

    def stats(self) -> dict[str, Any]:
        """Requests, tokens and cost since the server started, in all, per session and per model."""
        return {
            "since": self.started_at,
            **self.totals.summary(),
            "sessions": [{"session_id": run.session_id, "run_id": run.run_id, "model": run.model,
                          "metadata": run.metadata, **run.account.totals.summary()}
                         for run in self.sessions.values()],
            "models": {model: self.model_totals[model].summary() for model in sorted(self.model_totals)},
        }

    def close(self) -> None:
        for run in self.sessions.values():
            run.update("done")


def server_app(settings: Settings, ledger: Ledger, token: str) -> tuple[Starlette, SessionRouter]:
    """The long-lived endpoint's app, and the router that keeps its sessions' runs."""
    router = SessionRouter(settings, ledger)
    endpoint = Endpoint(token=token, target=router.target, secrets=(*settings.secrets, token), pricer=router.pricer,
                        estimate_usage=settings.estimate_usage, first_byte_timeout=settings.first_byte_timeout,
                        max_body_bytes=settings.max_body_bytes)
    return create_app(endpoint, stats=router.stats), router


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
    try:
        listening = EndpointServer(app, host, port, allow_remote=allow_remote)
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
        router.close()
        for upstream in router.upstreams.values():
            await upstream.aclose()
        ledger.close()
