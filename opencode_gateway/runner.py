"""One run, end to end: endpoint up, isolated config written, OpenCode run, result assembled.

Data goes one way: a Plan (plan.py) in, events and a RunResult out. OpenCode only ever learns the
endpoint's loopback URL and a per-run token; the real keys stay in this process. A run's parts: its
account (accounting/run.py: records, ledger row, budget), its workspace (opencode/workspace.py:
what OpenCode is given), the endpoint, and OpenCode's process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _litellm
from .accounting.budget import Refusal
from .accounting.ledger import Ledger, RunLedger
from .accounting.pricing import Pricer
from .accounting.records import Purpose, RequestRecord
from .accounting.run import RunAccount
from .conclusion import Happened, conclude
from .endpoint.server import EndpointServer
from .endpoint.tagging import Tagging
from .errors import PreflightError
from .events import ReasoningDelta, RequestFinished, TextDelta, ToolRequested, UpstreamRetry
from .files import FileChange, Snapshot, Unlisted
from .opencode import config as oc_config
from .opencode.gitguard import GitControl
from .opencode.lines import Event
from .opencode.process import OpenCodeProcess, ProcessExit, opencode_retries, run_argv
from .opencode.purpose import routed_model
from .opencode.sessions import is_session_id, prune_sessions, session_store
from .opencode.watchdog import Watchdog
from .opencode.workspace import Workspace
from .ordering import CausalOrder
from .plan import Plan
from .provider import Preflight
from .result import OutputInvalid, RunResult
from .settings import RunSettings

if TYPE_CHECKING:
    from .endpoint.routing import RunRouter, Target
    from .endpoint.upstream import Upstream

__all__ = ["Parts", "execute"]
# How long a request waits for OpenCode's events it follows from (they are normally read within
# milliseconds: OpenCode prints them before it sends the request).
_ORDER_WAIT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Parts:
    """What a run is made of besides its plan, that a test may swap: how OpenCode's process is
    made (OpenCodeProcess's signature; tests/support/replay.py replays recorded runs), and where
    a model's requests go (None: `wiring.upstream_for`, the gateway or litellm)."""

    opencode: Callable[..., OpenCodeProcess] = OpenCodeProcess
    upstream: Callable[[RunSettings, str], Upstream] | None = None


async def execute(plan: Plan, on_event: Callable[[Event], None] | None = None, *, deltas: bool = False,
                  ledger: RunLedger | None = None, parts: Parts = Parts()) -> RunResult:
    """Run `plan` (Plan.execute). The run's rows go to its settings' ledger, or to `ledger` (a batch
    task on a Ray worker sends them to the driver's)."""
    own = None
    if ledger is None:
        own = ledger = Ledger(plan.settings.ledger_path)  # a bad ledger file fails here, before OpenCode starts
    run = _Run(plan, ledger, on_event, deltas, parts)
    try:
        return await run.execute()
    except PreflightError as exc:  # the gateway's check failed while OpenCode started: no model call made
        run.account.finish(plan.session_id, "error", str(exc))
        raise
    except BaseException as exc:  # interrupted (Ctrl-C, cancelled) or failed: the run's row still closes
        run.account.finish(plan.session_id, "interrupted", _interruption(exc))
        raise
    finally:
        if own is not None:
            own.close()


def _account(settings: RunSettings, ledger: RunLedger, on_record: Callable[[RequestRecord], None]) -> RunAccount:
    """The run's account: its budget, prices and ledger, and the period caps of its metadata
    (their spend read from the same ledger, through the driver on a Ray worker)."""
    return RunAccount(settings.budget, pricer=Pricer(settings.pricing), on_record=on_record, ledger=ledger,
                      periods=settings.period_caps(settings.metadata),
                      history=ledger)


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or () if isinstance(tool, Mapping)
            and isinstance(tool.get("function"), Mapping) and isinstance(tool["function"].get("name"), str)}


def _silent_mcp_servers(settings: RunSettings, offered: set[str]) -> list[str]:
    """Warnings for the MCP servers none of whose tools OpenCode offered: the server failed to start
    or to answer (OpenCode goes on without it, saying so only in its log)."""
    if not offered:
        return []
    return [f"mcp server {name!r} offered no tools: it failed to start or to list them (check its command "
            "and that the sandbox lets it run)" for name in settings.mcp
            if not any(tool.startswith(f"{name}_") for tool in offered)]


def _targets(settings: RunSettings, tagging: Tagging, account: RunAccount, parts: Parts = Parts()
             ) -> dict[str, Target]:
    """Where a run's requests go: the run's model, the small model of OpenCode's background calls
    if it is another, and each purpose's route (`routes`)."""
    from .endpoint.routing import Target
    from .wiring import upstream_for

    upstream = parts.upstream or upstream_for
    models = (settings.model, settings.small_model or settings.model, *settings.routes.values())
    return {model: Target(model, upstream(settings, model), tagging, account) for model in dict.fromkeys(models)}


def _interruption(exc: BaseException) -> str:
    """What a ledger row says of a run that ended on an exception (not `CancelledError`)."""
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        return "interrupted before it ended (Ctrl-C, or its caller cancelled it)"
    return f"failed inside opencode-gateway: {type(exc).__name__}: {exc}"


def _live_event(session_id: str | None, kind: str, piece: str) -> Event:
    """What the endpoint saw streaming by (kind: text, reasoning, or tool: a tool's name)."""
    if kind == "tool":
        return ToolRequested(session_id, tool=piece)
    return TextDelta(session_id, text=piece) if kind == "text" else ReasoningDelta(session_id, text=piece)


def _router(token: str, targets: Mapping[str, Target], settings: RunSettings) -> RunRouter:
    """Who may call the run's endpoint (its token), and where each request goes: the one model's
    target, or with a small model or routes, the one each request is routed to (purpose.py)."""
    from .endpoint.routing import RunRouter  # starlette's side: imported while OpenCode starts

    if len(targets) == 1:
        return RunRouter(token, targets[settings.model])

    def choose(headers: Mapping[str, str], requested: Any, purpose: Purpose) -> Target:
        return targets[routed_model(requested, purpose, model=settings.model, small_model=settings.small_model,
                                    routes=settings.routes)]

    return RunRouter(token, targets[settings.model], choose)


def _opencode(plan: Plan, workspace: Workspace, server: EndpointServer, socket_path: Path | None,
              tag: str, git: GitControl, make: Callable[..., OpenCodeProcess]) -> tuple[OpenCodeProcess, str]:
    """OpenCode's process, not yet started, given its isolated config with the endpoint's address;
    and the run's token, which the endpoint is to ask for."""
    settings = plan.settings
    from .wiring import opencode_env

    workspace.prepare()
    token = secrets.token_urlsafe(32)
    readable = workspace.add_skills(plan.skills)
    instructions = workspace.add_instructions(
        [part for part in (settings.instructions, plan.output and plan.output.instructions()) if part])
    env = opencode_env(settings, workspace, endpoint_url=server.url, token=token, workdir=plan.workdir,
                       instructions=instructions, readable_dirs=readable)
    argv = run_argv(plan.binary, oc_config.opencode_model(settings.model), settings.agent, plan.session_id)
    inherited: tuple[int, ...] = ()
    if plan.sandbox == "bwrap":
        argv, env, seccomp = workspace.confine(argv, env, settings.sandbox_config, settings.gateway_files,
                                               workdir=plan.workdir, port=server.port, socket_path=socket_path,
                                               git=git)
        inherited = (seccomp,)
    return make(argv, env=env, cwd=plan.workdir, prompt=plan.prompt, tag=tag, pass_fds=inherited), token


def _warm_up(settings: RunSettings, keep: str | None) -> None:
    """While OpenCode starts: the kept sessions past their days removed (each is ~1 MB), but the
    one this run continues; and what the first request needs, imported (litellm, ~2.4 s, in SDK
    mode; in gateway mode the relay's transport, aiohttp, ~0.15 s: gateway mode never imports
    litellm for its own sake, a proxy reports each stream's cost or its bundled price map prices it)."""
    if settings.keep_sessions_days is not None:
        prune_sessions(settings.data_dir, settings.keep_sessions_days, keep=keep)
    if settings.mode == "sdk":
        _litellm.load()
    else:
        import aiohttp  # noqa: F401


async def _snapshot(workdir: Path, max_file_bytes: int, deadline: float, warnings: list[str]) -> Snapshot | None:
    """The workdir's files, for RunResult.files; None (and a warning) when there are too many."""
    try:
        return await asyncio.to_thread(Snapshot.take, workdir, max_file_bytes=max_file_bytes, deadline=deadline)
    except Unlisted as exc:
        warnings.append(f"file changes are not listed: {exc}")
        return None


def _keep_session(plan: Plan, workspace: Workspace, session_id: str | None) -> None:
    """A new session's store, kept under the data dir for --session."""
    if plan.resumed_store is None and session_id and is_session_id(session_id):
        store = session_store(plan.settings.data_dir, session_id)
        store.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(workspace.data_home), store)


async def _changes(before: Snapshot | None, workdir: Path, max_bytes: int, deadline: float,
                   warnings: list[str]) -> tuple[FileChange, ...]:
    """What the run changed in its workdir, diffs computed until the deadline."""
    after = None if before is None else await _snapshot(workdir, max_bytes, deadline, warnings)
    if before is None or after is None:
        return ()
    files, notes = await asyncio.to_thread(before.changes, after, deadline=deadline, max_diff_bytes=max_bytes)
    warnings.extend(notes)
    return files


class _Hooks:
    """What the run's endpoint tells the run, and waits for (endpoint/hooks.py)."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    @property
    def streams_text(self) -> bool:
        return self.run.deltas

    async def checked(self) -> str | None:
        return None if self.run.preflight is None else await self.run.preflight.refusal()

    def retrying(self, status_code: int, attempt: int, delay: float) -> None:
        self.run.seen(UpstreamRetry(None, status_code=status_code, attempt=attempt, delay_s=round(delay, 3)))

    def streamed(self, session_id: str | None, kind: str, piece: str) -> None:
        """Live text is passed on, not kept: OpenCode's Text events hold the same text whole."""
        if self.run.on_event is not None:
            self.run.on_event(_live_event(session_id, kind, piece))

    async def follows(self, session_id: str | None, body: Mapping[str, Any]) -> None:
        self.run.offered.update(_tool_names(body))
        await self.run.order.wait(self.run.order.causes(session_id, body), _ORDER_WAIT_S)


class _Run:
    """One run while it goes: where its records and events arrive, and what ends it early. Its
    account keeps the records and the ledger row; this passes them on as events, and stops
    OpenCode when a request fails in a way OpenCode would retry for minutes, or a budget refuses."""

    def __init__(self, plan: Plan, ledger: RunLedger, on_event: Callable[[Event], None] | None, deltas: bool,
                 parts: Parts) -> None:
        self.plan = plan
        self.parts = parts
        self.settings = plan.settings
        self.on_event = on_event
        self.deltas = deltas
        self.account = _account(plan.settings, ledger, self.recorded)
        self.offered: set[str] = set()  # the tools OpenCode offered the model (an MCP server's among them?)
        self.events: list[Event] = []
        self.fatal: RequestRecord | None = None  # the failure that ended the run, or
        self.refusal: Refusal | None = None  # the budget refusal (or the turn cap) that did
        self.process: OpenCodeProcess | None = None
        self.warnings: list[str] = list(plan.notes)  # of the runner's own (no sandbox, a tree too big to list)
        self.order = CausalOrder()
        self.preflight: Preflight | None = None

    def recorded(self, record: RequestRecord) -> None:
        """A request's record, counted (and committed) by the account: out as an event. The
        endpoint has already retried what can be retried; OpenCode would retry again for minutes
        (or forever, after a cut stream), and a refused call would be retried too: end the run."""
        usage = self.account.usage
        self.seen(RequestFinished(record.session_id, request_id=record.request_id, status_code=record.status_code,
                                  usage=record.usage.to_dict() if record.usage else None, cost=record.cost.usd,
                                  cost_source=record.cost.source, run_tokens=usage.input_tokens + usage.output_tokens,
                                  run_cost=self.account.cost, error=record.error))
        if self.fatal is None and self.refusal is None:  # what ends the run is what came first
            if self.account.refusal is not None:
                self.refusal = self.account.refusal
            elif not record.ok and opencode_retries(record.status_code):
                self.fatal = record
            else:
                return
        if self.process is not None:
            self.process.stop()

    def printed(self, event: Event) -> None:
        """An event of OpenCode's own (its stdout)."""
        self.seen(event)
        self.order.saw(event)

    def seen(self, event: Event) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    async def execute(self) -> RunResult:
        plan, settings = self.plan, self.settings
        started = time.monotonic()
        deadline = started + settings.timeout  # the whole run, snapshots included, ends by then
        tagging = Tagging(settings.tags, settings.metadata, session_id=self.account.run_id,
                          tag_metadata_keys=settings.tag_metadata_keys)
        self.account.open(model=settings.model, mode=settings.mode, workdir=str(plan.workdir),
                          metadata=settings.metadata, tags=tagging.all_tags, session_id=plan.session_id)
        private = Path(tempfile.mkdtemp(prefix="opencode-gateway-"))  # mode 0700
        watchdog = Watchdog([private])  # cleans up if this process is killed
        git = GitControl.take(plan.workdir)
        try:
            workspace = Workspace(private, plan.resumed_store or private / "data")
            before = await _snapshot(plan.workdir, settings.diff_max_bytes, deadline, self.warnings)
            ended = await self._converse(workspace, tagging, deadline, watchdog.tag, git)
            session_id = next((e.session_id for e in self.events if e.session_id), None) or plan.session_id
            _keep_session(plan, workspace, session_id)
            files = await _changes(before, plan.workdir, settings.diff_max_bytes, deadline, self.warnings)
        finally:  # OpenCode has ended (or was killed): git's control files put back, interrupted or not
            self.warnings.extend(git.restore(self.account.run_id))
            shutil.rmtree(private, ignore_errors=True)
            watchdog.close()
        return self._result(Happened(
            run_id=self.account.run_id, model=settings.model, mode=settings.mode, sandbox=plan.sandbox,
            timeout=settings.timeout, exit=ended, records=tuple(self.account.records or ()),
            events=tuple(self.events), session_id=session_id, fatal=self.fatal, refusal=self.refusal,
            warnings=(*self.account.budget.overshoot(self.account.spent), *self.warnings,
                      *_silent_mcp_servers(settings, self.offered)),
            files=files,
            duration_s=time.monotonic() - started))

    async def _converse(self, workspace: Workspace, tagging: Tagging, deadline: float, tag: str,
                        git: GitControl) -> ProcessExit:
        """OpenCode started first; then, while it starts (~2 s), the endpoint built and served (its
        first request waits in the port's backlog meanwhile); until OpenCode exits, is stopped, or
        the deadline."""
        settings = self.settings
        bridged = self.plan.sandbox == "bwrap" and settings.sandbox_network == "endpoint"
        socket_path = workspace.private / "endpoint.sock" if bridged else None
        server = EndpointServer(unix_socket=socket_path)
        targets: dict[str, Target] = {}
        warm: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # the warm-up, once it starts
        try:
            self.process, token = _opencode(self.plan, workspace, server, socket_path, tag, git, self.parts.opencode)
            await self.process.start()
            self.preflight = Preflight(settings, self.process)
            warm = asyncio.ensure_future(asyncio.to_thread(_warm_up, settings, self.plan.session_id))
            from .endpoint.app import Endpoint, create_app  # starlette and httpx: imported while OpenCode starts

            targets.update(_targets(settings, tagging, self.account, self.parts))
            server.app = create_app(Endpoint(
                router=_router(token, targets, settings),
                secrets=(*settings.secrets, token), pricer=self.account.pricer, estimate_usage=settings.estimate_usage,
                first_byte_timeout=settings.first_byte_timeout, max_body_bytes=settings.max_body_bytes,
                keep_answers=True, hooks=_Hooks(self),
            ))
            async with server:
                ended = await self.process.run(self.printed, max(deadline - time.monotonic(), 0.0))
            if self.preflight is not None:
                self.refusal = self.refusal or await self.preflight.outcome()
            return ended
        except BaseException:
            if self.process is not None:  # started, and the endpoint failed to come up: not left running
                await self.process.kill()
            raise
        finally:
            server.close()
            self.order.close()
            for target in targets.values():
                await target.upstream.aclose()
            warm.cancel()
            if self.preflight is not None:
                self.preflight.cancel()

    def _result(self, happened: Happened) -> RunResult:
        """The result, the ledger row closed with it; an invalid output is raised."""
        result = conclude(happened, self.plan.output)
        error = result.error
        self.account.finish(result.session_id, result.stop_reason, None if error is None else str(error))
        ledger = self.account.ledger
        if ledger is not None and ledger.failure is not None:
            result = dataclasses.replace(result, warnings=(
                *result.warnings, f"the ledger could not record this run completely: {ledger.failure}"))
        if isinstance(error, OutputInvalid):
            error.result = result
            raise error
        return result
