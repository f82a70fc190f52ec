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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..accounting.budget import Refusal
from ..accounting.ledger import Ledger, RunLedger
from ..accounting.pricing import usd
from ..accounting.records import RequestRecord
from ..accounting.run import Totals
from ..credentials import redacted
from ..endpoint.server import EndpointServer
from ..endpoint.tagging import Tagging
from ..errors import PreflightError
from ..events import RequestFinished, UpstreamRetry
from ..observability.traces import RunTrace
from ..opencode.gitguard import GitControl
from ..opencode.lines import Event
from ..opencode.process import OpenCodeProcess, ProcessExit, opencode_retries
from ..opencode.sessions import keep_session
from ..opencode.watchdog import Watchdog
from ..opencode.workspace import Workspace
from .assembly import (
    Parts,
    account_for,
    endpoint_app,
    live_event,
    opencode_process,
    run_approvals,
    run_root,
    run_tracing,
    targets,
    warm_up,
)
from .conclusion import Happened, conclude
from .files import FileChange, changes, snapshot
from .offered import connected_servers, offering_servers, silent_mcp_servers, tool_names
from .ordering import CausalOrder
from .plan import Plan
from .preflight import Preflight
from .result import KEPT_EVENTS_MAX, OutputInvalid, RunResult

if TYPE_CHECKING:
    from ..domain import WrittenCall
    from ..endpoint.routing import Target

__all__ = ["Parts", "execute"]
# How long a request waits for OpenCode's events it follows from (they are normally read within
# milliseconds: OpenCode prints them before it sends the request).
_ORDER_WAIT_S = 10.0


async def execute(
    plan: Plan,
    on_event: Callable[[Event], None] | None = None,
    *,
    deltas: bool = False,
    ledger: RunLedger | None = None,
    parts: Parts = Parts(),
) -> RunResult:
    """Run `plan`. The run's rows go to its settings' ledger, or to `ledger` (a batch
    task on a Ray worker sends them to the driver's)."""
    if plan.opencode is not None:  # the run's stand-in for OpenCode
        parts = dataclasses.replace(parts, opencode=plan.opencode)
    own = None
    if ledger is None:
        own = ledger = Ledger(plan.settings.ledger_location)  # a bad ledger file fails here, before OpenCode starts
    run = _Run(plan, ledger, on_event, deltas, parts)
    try:
        return await run.execute()
    except PreflightError as exc:  # the gateway's check failed while OpenCode started: no model call made
        run.account.row.finish(plan.session_id, "error", str(exc))
        raise
    except BaseException as exc:  # interrupted (Ctrl-C, cancelled) or failed: the run's row still closes
        run.account.row.finish(plan.session_id, "interrupted", _interruption(exc))
        raise
    finally:
        if own is not None:
            own.close()


def _interruption(exc: BaseException) -> str:
    """What a ledger row says of a run that ended on an exception (not `CancelledError`)."""
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        return "interrupted before it ended (Ctrl-C, or its caller cancelled it)"
    return f"failed inside opencode-gateway: {type(exc).__name__}: {exc}"


class _Gates:
    """What a request to the run's endpoint waits for (endpoint/hooks.py): the approval plugin's
    hello and the preflight (either may refuse it), and OpenCode's events it follows from."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    @property
    def holds_tool_calls(self) -> bool:
        return self.run.approvals is not None and not self.run.plan.binary.generation.tool_hook

    async def approved(self, session_id: str | None, calls: Sequence[WrittenCall]) -> Sequence[str | None]:
        assert self.run.approvals is not None
        return await self.run.approvals.held(session_id, calls, self.run.state.offered)

    async def checked(self) -> str | None:
        if self.run.approvals is not None and (unloaded := await self.run.approvals.loaded()) is not None:
            return unloaded
        return None if self.run.state.preflight is None else await self.run.state.preflight.refusal()

    async def follows(self, session_id: str | None, body: Mapping[str, Any]) -> None:
        state, offered = self.run.state, tool_names(body)
        state.offered.update(offered)
        waiting = [server for server in self.run.settings.mcp if server not in state.offering]
        state.offering.update(offering_servers(body, offered, waiting))
        await self.run.order.wait(self.run.order.causes(session_id, body), _ORDER_WAIT_S)


class _Observers:
    """What the run's endpoint tells the run (endpoint/hooks.py): retries, and the live text."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    @property
    def streams_text(self) -> bool:
        return self.run.deltas

    def retrying(self, status_code: int, attempt: int, delay: float) -> None:
        self.run.seen(UpstreamRetry(None, status_code=status_code, attempt=attempt, delay_s=round(delay, 3)))

    def streamed(self, session_id: str | None, kind: str, piece: str) -> None:
        """Live text is passed on, not kept: OpenCode's Text events hold the same text whole. Each
        piece is redacted as it comes (a secret split over two pieces is caught in the whole Text)."""
        if self.run.on_event is not None:
            self.run.on_event(redacted(live_event(session_id, kind, piece), self.run.secrets))


def _happened(
    run: _Run, ended: ProcessExit, session_id: str | None, files: tuple[FileChange, ...], duration_s: float
) -> Happened:
    """What happened in the run, for conclusion.conclude."""
    return Happened(
        run_id=run.account.run_id,
        model=run.settings.model,
        mode=run.settings.mode,
        sandbox=run.plan.sandbox,
        timeout=run.settings.timeout,
        exit=ended,
        totals=run.account.totals.taken(),
        requests=tuple(run.account.records or ()),
        events=tuple(run.state.kept.events),
        events_truncated=run.state.kept.truncated,
        session_id=session_id,
        fatal=run.state.fatal,
        refusal=run.state.refusal,
        warnings=(
            *run.account.budget.overshoot(run.account.totals.spent),
            *run.state.warnings,
            *silent_mcp_servers(run.settings, run.state.offering, asked=bool(run.state.offered)),
        ),
        files=files,
        duration_s=duration_s,
    )


def _finished(record: RequestRecord, totals: Totals) -> RequestFinished:
    """A request's end, as an event: its usage and cost, and the run's totals so far."""
    usage = totals.usage
    return RequestFinished(
        record.session_id,
        request_id=record.request_id,
        status_code=record.status_code,
        usage=record.usage.to_dict() if record.usage else None,
        cost=usd(record.cost.usd),
        cost_source=record.cost.source,
        run_tokens=usage.input_tokens + usage.output_tokens,
        run_cost=usd(totals.cost),
        error=record.error,
    )


class _Kept:
    """The events a run keeps for its result: until they reach KEPT_EVENTS_MAX in size, whatever
    an agent writes into OpenCode's stdout (the rest are passed on as they come, not kept)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.size = 0
        self.truncated = False

    def add(self, event: Event) -> None:
        if not self.truncated:
            self.size += event.size()
            self.truncated = self.size > KEPT_EVENTS_MAX
            if not self.truncated:
                self.events.append(event)


@dataclass
class _State:
    """What changes while a run goes; the rest of a _Run is fixed when it starts."""

    warnings: list[str]  # of the runner's own (no sandbox, a tree too big to list)
    offered: set[str] = field(default_factory=set)  # the tools OpenCode offered the model
    offering: set[str] = field(default_factory=set)  # the MCP servers whose tools it offered
    kept: _Kept = field(default_factory=_Kept)
    fatal: RequestRecord | None = None  # the failure that ended the run, or
    refusal: Refusal | None = None  # the budget refusal (or the turn cap) that did
    process: OpenCodeProcess | None = None
    preflight: Preflight | None = None


class _Run:
    """One run while it goes: where its records and events arrive, and what ends it early. Its
    account keeps the records and the ledger row; this passes them on as events, and stops
    OpenCode when a request fails in a way OpenCode would retry for minutes, or a budget refuses."""

    def __init__(
        self, plan: Plan, ledger: RunLedger, on_event: Callable[[Event], None] | None, deltas: bool, parts: Parts
    ) -> None:
        self.plan = plan
        self.parts = parts
        self.settings = plan.settings
        self.on_event = on_event
        self.deltas = deltas
        self.account = account_for(plan.settings, ledger, self.recorded)
        self.token = secrets.token_urlsafe(32)  # the endpoint's, which OpenCode is given
        # What no event, result or span of this run may show: its keys and its token
        self.secrets = (*plan.settings.secrets, self.token)
        self.trace = RunTrace(run_tracing(plan.settings), self.account.run_id, self.secrets)
        self.order = CausalOrder()
        self.state = _State(warnings=list(plan.notes))  # all that changes as the run goes
        self.approvals = run_approvals(plan, self.secrets, self.account, self.seen, self.trace)

    def recorded(self, record: RequestRecord) -> None:
        """A request's record, counted (and committed) by the account: out as an event. The
        endpoint has already retried what can be retried; OpenCode would retry again for minutes
        (or forever, after a cut stream), and a refused call would be retried too: end the run."""
        self.trace.request(record)
        self.seen(_finished(record, self.account.totals))
        if self.state.fatal is None and self.state.refusal is None:  # what ends the run is what came first
            if self.account.refusal is not None:
                self.state.refusal = self.account.refusal
            elif not record.ok and opencode_retries(record.status_code):
                self.state.fatal = record
            else:
                return
        if self.state.process is not None:
            self.state.process.stop()

    def printed(self, event: Event) -> None:
        """An event of OpenCode's own (its stdout)."""
        event = self.seen(event)
        self.trace.event(event)
        self.order.saw(event)

    def seen(self, event: Event) -> Event:
        """An event, kept and passed on redacted of the run's secrets (an agent can echo a key
        it was given, a model one it was told): as the caller, `--json` and the terminal get it."""
        event = redacted(event, self.secrets)
        self.state.kept.add(event)
        if self.on_event is not None:
            self.on_event(event)
        return event

    async def execute(self) -> RunResult:
        plan, settings = self.plan, self.settings
        started = time.monotonic()
        deadline = started + settings.timeout  # the whole run, snapshots included, ends by then
        tagging = Tagging(
            settings.tags,
            settings.metadata,
            session_id=self.account.run_id,
            tag_metadata_keys=settings.tag_metadata_keys,
        )
        self.account.row.open(
            model=settings.model,
            mode=settings.mode,
            workdir=str(plan.workdir),
            metadata=settings.metadata,
            tags=tagging.all_tags,
            session_id=plan.session_id,
        )
        private = Path(tempfile.mkdtemp(prefix="opencode-gateway-"))  # mode 0700
        watchdog = Watchdog([private])  # cleans up if this process is killed
        git = GitControl.take(plan.workdir)
        try:
            workspace = Workspace(private, plan.resumed_store or private / "data", plan.binary.generation)
            before = await snapshot(plan.workdir, settings.diff_max_bytes, deadline, self.state.warnings)
            ended = await self._converse(workspace, tagging, deadline, watchdog.tag, git)
            if settings.mcp:  # OpenCode 2's servers connect beside the run: after its last request?
                self.state.offering.update(connected_servers(workspace.data_home))
            session_id = next((e.session_id for e in self.state.kept.events if e.session_id), None) or plan.session_id
            if plan.resumed_store is None:
                lost = keep_session(settings.data_dir, workspace.data_home, session_id)
                self.state.warnings.extend([lost] if lost else [])
            files = await changes(before, plan.workdir, settings.diff_max_bytes, deadline, self.state.warnings)
        finally:  # OpenCode has ended (or was killed): git's control files put back, interrupted or not
            self.state.warnings.extend(git.restore(self.account.run_id))
            shutil.rmtree(private, ignore_errors=True)
            watchdog.close()
        return self._result(_happened(self, ended, session_id, files, time.monotonic() - started))

    async def _converse(
        self, workspace: Workspace, tagging: Tagging, deadline: float, tag: str, git: GitControl
    ) -> ProcessExit:
        """OpenCode started first; then, while it starts (~2 s), the endpoint built and served (its
        first request waits in the port's backlog meanwhile); until OpenCode exits, is stopped, or
        the deadline."""
        settings = self.settings
        bridged = self.plan.sandbox == "bwrap" and settings.sandbox_network == "endpoint"
        socket_path = workspace.private / "endpoint.sock" if bridged else None
        server = EndpointServer(unix_socket=socket_path)
        where: dict[str, Target] = {}  # the targets of the run's requests, once built
        warm: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # the warm-up, once it starts
        try:
            self.state.process = opencode_process(
                self.plan, workspace, server, socket_path, tag, git, self.parts.opencode, self.token
            )
            await self.state.process.start()
            self.state.preflight = Preflight(settings, self.state.process)
            warm = asyncio.ensure_future(asyncio.to_thread(warm_up, settings, self.plan.session_id))
            where.update(targets(settings, tagging, self.account, self.parts))
            observers, gates = _Observers(self), _Gates(self)
            server.app = endpoint_app(settings, self.token, where, self.account, observers, gates, self.approvals)
            async with server:
                ended = await self.state.process.run(self.printed, max(deadline - time.monotonic(), 0.0))
            if self.state.preflight is not None:
                self.state.refusal = self.state.refusal or await self.state.preflight.outcome()
            return ended
        except BaseException:
            if self.state.process is not None:  # started, and the endpoint failed to come up: not left running
                await self.state.process.kill()
            raise
        finally:
            server.close()
            self.order.close()
            for target in where.values():
                await target.upstream.aclose()
            warm.cancel()
            if self.state.preflight is not None:
                self.state.preflight.cancel()

    def _result(self, happened: Happened) -> RunResult:
        """The result, the ledger row closed with it; an invalid output is raised."""
        result = conclude(redacted(happened, self.secrets), self.plan.output)
        self.trace.end(run_root(result, self.settings, self.plan.workdir, time.time()))
        error = result.error
        self.account.row.finish(result.session_id, result.stop_reason, None if error is None else str(error))
        ledger = self.account.ledger
        if ledger is not None and ledger.failure is not None:
            result = dataclasses.replace(
                result,
                warnings=(*result.warnings, f"the ledger could not record this run completely: {ledger.failure}"),
            )
        if isinstance(error, OutputInvalid):
            error.result = result
            raise error
        return result
