"""One run, end to end: endpoint up, isolated config written, OpenCode run, result assembled.

Data goes one way: arguments and Settings in, events and a RunResult out. OpenCode only ever
learns the endpoint's loopback URL and a per-run token; the real keys stay in this process.

`run`, `arun`, `stream` and `astream` take the same arguments (`_prepare`'s). Everything that can
be checked before OpenCode starts is checked there, and raises; what happens during the run is
reported in the RunResult (`stop_reason`, `error`), except an invalid structured output, which
raises OutputInvalid because the caller asked for a value the run did not give.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import os
import re
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from . import _litellm
from .accounting.account import RunAccount
from .accounting.ledger import Ledger
from .accounting.pricing import Pricer
from .accounting.records import RequestRecord, totals
from .endpoint.app import Endpoint, Target, create_app
from .endpoint.server import EndpointServer
from .endpoint.tagging import Tagging
from .endpoint.upstream import opencode_retries, upstream_for
from .errors import (
    BudgetExceeded,
    CapabilityUnsupported,
    GatewayError,
    OpenCodeError,
    OpenCodeFailed,
    RunTimeout,
    SettingsError,
    UpstreamError,
)
from .events import Done, ReasoningDelta, RequestFinished, TextDelta, UpstreamRetry
from .files import FileChange, Snapshot, Unlisted
from .litellm_gateway.preflight import check_gateway
from .litellm_gateway.protocol import GATEWAY_PREFIX, gateway_base, is_budget_error
from .opencode import config as oc_config
from .opencode.binary import find_opencode
from .opencode.events import Error, Event
from .opencode.process import OpenCodeProcess, run_argv
from .opencode.sandbox import Sandbox, resolve_sandbox
from .opencode.sessions import session_directory
from .opencode.skills import Skill, install_skills, load_skills, skills_dir
from .opencode.watchdog import Watchdog
from .ordering import CausalOrder
from .output import OutputSpec
from .result import OutputInvalid, RunResult, final_text
from .settings import Settings

__all__ = ["RunResult", "arun", "astream", "check", "run", "stream"]

_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
# How long a request waits for OpenCode's events it follows from (they are normally read within
# milliseconds: OpenCode prints them before it sends the request).
_ORDER_WAIT_S = 10.0
P = ParamSpec("P")
T = TypeVar("T")


def _group(settings: Settings) -> str:
    return (settings.model or "")[len(GATEWAY_PREFIX):]


def _session_store(settings: Settings, session_id: str) -> Path:
    if not _SESSION_ID.match(session_id):
        raise SettingsError(f"session id {session_id!r} is invalid: pass a RunResult.session_id (ses_...)")
    return settings.data_dir / "sessions" / session_id


def _run_error(events: Sequence[Event], records: Sequence[RequestRecord], exit_code: int | None,
               stderr_tail: str, fatal: RequestRecord | None) -> GatewayError | None:
    if fatal is not None:
        return UpstreamError(fatal.error or f"upstream answered HTTP {fatal.status_code}",
                             status_code=fatal.status_code)
    error_event = next((e for e in reversed(events) if isinstance(e, Error)), None)
    failed = next((r for r in reversed(records) if not r.ok), None)
    if error_event is not None:
        if failed is not None and failed.status_code >= 400 and error_event.status_code is not None:
            return UpstreamError(failed.error or error_event.message, status_code=failed.status_code)
        if error_event.status_code is not None:
            return UpstreamError(error_event.message, status_code=error_event.status_code)
        return OpenCodeError(f"OpenCode reported {error_event.name}: {error_event.message}", name=error_event.name)
    if exit_code:
        last = stderr_tail.strip().splitlines()[-1:] or ["(no stderr)"]
        return OpenCodeFailed(f"opencode exited with code {exit_code}: {last[0]}", exit_code=exit_code,
                              stderr_tail=stderr_tail)
    return None


@dataclass(frozen=True)
class _Plan:
    """A run that passed every check that can be made before OpenCode starts."""

    settings: Settings
    prompt: str
    workdir: Path
    binary: str
    session_id: str | None
    resumed_store: Path | None
    skills: tuple[Skill, ...]
    output: OutputSpec | None
    sandbox: str  # "bwrap" or "none": what `settings.sandbox` comes to on this machine
    notes: tuple[str, ...]  # warnings found before the run (auto fell back to no sandbox)

    async def execute(self, on_event: Callable[[Event], None] | None = None, *, deltas: bool = False) -> RunResult:
        """Run it. `on_event` sees every event as it happens; `deltas` adds the streamed text."""
        settings = self.settings
        if settings.mode == "gateway":
            try:
                await check_gateway(gateway_base(settings.gateway_api_base or ""), settings.gateway_api_key,
                                    _group(settings))
            except BudgetExceeded as exc:  # spent before the run: it ends as a refusal would, unstarted
                usage, cost, _ = totals(())
                return RunResult(run_id="run_" + uuid.uuid4().hex, text="", session_id=self.session_id,
                                 stop_reason="budget_exceeded", model=settings.model or "", mode=settings.mode,
                                 usage=usage, cost=cost, error=exc)
        ledger = Ledger(settings.ledger_path)  # a bad ledger file fails here, before OpenCode starts
        state = _RunState(self, ledger, on_event, deltas)
        try:
            return await state.execute()
        except BaseException as exc:  # interrupted (Ctrl-C, cancelled) or failed: the run's row still closes
            state.finish(self.session_id, "interrupted", type(exc).__name__)
            raise
        finally:
            ledger.close()


def _prepare(
    prompt: str,
    *,
    model: str | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    workdir: str | os.PathLike[str] = ".",
    permissions: str | None = None,
    disable_tools: Sequence[str] | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    instructions: str | None = None,
    skills: Sequence[str | os.PathLike[str]] | None = None,
    output: Any = None,
    session_id: str | None = None,
    timeout: float | None = None,
    max_cost: float | None = None,
    max_requests: int | None = None,
    max_tokens: int | None = None,
    opencode_bin: str | None = None,
    sandbox: str | None = None,
    settings: Settings | None = None,
    tools: Any = None,
    history: Any = None,
) -> _Plan:
    """Run OpenCode once on `model` through a local endpoint and account for every request.

    model: `litellm_proxy/<group>` (a LiteLLM gateway's model group) or any LiteLLM model string.
    api_base, api_key: the gateway and its virtual key, or the provider's in SDK mode.
    permissions: "read-only", "edit" or "full"; disable_tools: tool names to switch off.
    metadata, tags: spend attribution (x-litellm-spend-logs-metadata, x-litellm-tags).
    instructions: extra system instructions (text). skills: folders that each hold a SKILL.md.
    output: a JSON schema (dict) or a pydantic model class; RunResult.output is the answer's
        JSON object, validated, and OutputInvalid is raised when the run gives none.
    session_id: an earlier RunResult.session_id, to continue that OpenCode session.
    timeout, max_cost, max_requests, max_tokens: the run's limits.
    sandbox: "auto" (default: bubblewrap when it works here), "bwrap" or "none"; RunResult.sandbox
        says what the run had.
    settings: the rest (a Settings, e.g. from load_settings); the arguments above override it.
    tools, history: not supported (CapabilityUnsupported says why).
    """
    if tools is not None:
        raise CapabilityUnsupported(
            "custom Python tools are not supported: OpenCode runs its own tools in its own process and a "
            "headless run cannot call back into Python; give the agent a command (it has bash) or a skill instead")
    if history is not None:
        raise CapabilityUnsupported(
            "a conversation history cannot be injected: OpenCode keeps its own sessions; continue an earlier run "
            "with session_id=<its RunResult.session_id>")
    settings = (settings or Settings()).replace(
        model=model, api_base=api_base, api_key=api_key, permissions=permissions, disable_tools=disable_tools,
        agent=agent, metadata=metadata, tags=tags, instructions=instructions,
        skills=None if skills is None else [str(s) for s in skills], timeout=timeout, max_cost=max_cost,
        max_requests=max_requests, max_tokens=max_tokens, opencode_bin=opencode_bin, sandbox=sandbox,
    ).validated()
    if not prompt.strip():
        raise SettingsError("the prompt is empty: give the task to run")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes of argv arrive as lone surrogates
        raise SettingsError(f"the prompt is not UTF-8 text (character {exc.start}): give the task as UTF-8") from None
    cwd = Path(workdir).expanduser().resolve()
    if not cwd.is_dir():
        raise SettingsError(f"workdir {cwd} is not a directory")
    oc_config.check_user_config(settings.opencode_config)
    oc_config.permission_rules(settings.permissions, settings.disable_tools)
    loaded_skills = load_skills(settings.skills)
    if loaded_skills and "skill" in settings.disable_tools:
        raise SettingsError("skills were given but the skill tool is disabled: drop --disable-tool skill")
    spec = None if output is None else OutputSpec.of(output)
    resumed_store = _session_store(settings, session_id) if session_id else None
    if resumed_store is not None and not resumed_store.is_dir():
        raise SettingsError(f"no kept session {session_id} under {settings.data_dir}: it cannot be continued")
    started_in = session_directory(resumed_store, session_id) if resumed_store and session_id else None
    if started_in is not None and started_in.resolve() != cwd:
        raise SettingsError(f"session {session_id} was started in {started_in}, and OpenCode continues a session only "
                            f"in its own folder: run it with --workdir {started_in} (workdir= in the Python API)")
    notes: list[str] = []
    confinement = resolve_sandbox(settings.sandbox, notes)
    return _Plan(settings=settings, prompt=prompt + (spec.prompt_suffix() if spec else ""), workdir=cwd,
                 binary=find_opencode(settings.opencode_bin, settings.data_dir), session_id=session_id,
                 resumed_store=resumed_store, skills=loaded_skills, output=spec, sandbox=confinement,
                 notes=tuple(notes))


def _takes_run_options(function: Callable[..., T]) -> Callable[P, T]:
    """Give `function` the signature of `_prepare` (for type checkers and help()): the four entry
    points take the same arguments, written once."""
    signature = inspect.signature(_prepare).replace(return_annotation=inspect.signature(function).return_annotation)
    function.__signature__ = signature  # type: ignore[attr-defined]
    function.__doc__ = f"{function.__doc__}\n\n{_prepare.__doc__}"
    return function


@_takes_run_options
def check(prompt: str, **options: Any) -> None:
    """Raise what `run` would raise before OpenCode starts, without running anything."""
    _prepare(prompt, **options)


@_takes_run_options
async def arun(prompt: str, **options: Any) -> RunResult:
    """Run OpenCode once and return its RunResult."""
    return await _prepare(prompt, **options).execute()


@_takes_run_options
async def astream(prompt: str, **options: Any) -> AsyncIterator[Event]:
    """Run OpenCode once, yielding its events as they happen; the last is Done(result).

    Leaving the loop early stops the run (OpenCode is killed, the ledger row closed)."""
    plan = _prepare(prompt, **options)
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    task = asyncio.ensure_future(plan.execute(queue.put_nowait, deltas=True))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        result = task.result()  # raises what the run raised (a preflight error, OutputInvalid, ...)
        yield Done(result.session_id, result=result)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _no_running_loop(name: str, instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{name}() was called inside a running event loop: use `{instead}` instead")


@_takes_run_options
def run(prompt: str, **options: Any) -> RunResult:
    """`arun` for code without an event loop."""
    _no_running_loop("run", "await arun(...)")
    return asyncio.run(_litellm.owning_loop(arun(prompt, **options)))


@_takes_run_options
def stream(prompt: str, **options: Any) -> Iterator[Event]:
    """`astream` for code without an event loop: a plain iterator of events, ending with Done.

    The run makes progress while the caller waits for the next event."""
    _no_running_loop("stream", "async for event in astream(...)")
    loop = asyncio.new_event_loop()
    events = astream(prompt, **options)
    try:
        while True:
            step: asyncio.Future[Event] = asyncio.ensure_future(anext(events), loop=loop)
            try:
                event = loop.run_until_complete(step)
            except StopAsyncIteration:
                return
            except BaseException:  # Ctrl-C while the loop ran: cancel the step, which stops the run
                step.cancel()
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(step)
                raise
            yield event
    finally:
        loop.run_until_complete(events.aclose())  # type: ignore[attr-defined]
        loop.run_until_complete(_litellm.close_clients())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


class _RunState:
    """One run while it goes: its records and events as they arrive, and the process to stop."""

    def __init__(self, plan: _Plan, ledger: Ledger, on_event: Callable[[Event], None] | None, deltas: bool) -> None:
        self.plan = plan
        self.settings = plan.settings
        self.ledger = ledger
        self.on_event = on_event
        self.deltas = deltas
        self.run_id = "run_" + uuid.uuid4().hex
        self.pricer = Pricer(plan.settings.pricing)
        self.account = RunAccount(plan.settings.budget, pricer=self.pricer, on_record=self.recorded)
        self.events: list[Event] = []
        self.fatal: RequestRecord | None = None  # the failure, or the refusal, that ended the run
        self.process: OpenCodeProcess | None = None
        self.warnings: list[str] = list(plan.notes)  # of the runner's own (no sandbox, a tree too big to list)
        self.finished = False
        self.order = CausalOrder()

    @property
    def records(self) -> list[RequestRecord]:
        assert self.account.records is not None  # a run keeps its records (RunResult.requests)
        return self.account.records

    def recorded(self, record: RequestRecord) -> None:
        """A request's record, counted by the account: into the ledger, and out as an event."""
        self.ledger.record_request(self.run_id, record)
        usage = self.account.usage
        self.seen(RequestFinished(record.session_id, request_id=record.request_id, status_code=record.status_code,
                                  usage=record.usage.to_dict() if record.usage else None, cost=record.cost.usd,
                                  cost_source=record.cost.source, run_tokens=usage.input_tokens + usage.output_tokens,
                                  run_cost=self.account.cost, error=record.error))
        # The endpoint has already retried what can be retried; OpenCode would retry again for
        # minutes (or forever, after a cut stream), and a refused call would be retried too.
        # End the run with the error instead.
        refused = record.cost.source == "refused"
        if (refused or not record.ok and opencode_retries(record.status_code)) and self.fatal is None:
            self.fatal = record
            if self.process is not None:
                self.process.stop()

    def retrying(self, status_code: int, attempt: int, delay: float) -> None:
        self.seen(UpstreamRetry(None, status_code=status_code, attempt=attempt, delay_s=round(delay, 3)))

    def streamed(self, session_id: str | None, kind: str, piece: str) -> None:
        """Live text is passed on, not kept: OpenCode's Text events hold the same text whole."""
        if self.on_event is not None:
            self.on_event(TextDelta(session_id, text=piece) if kind == "text" else ReasoningDelta(session_id, text=piece))

    async def follows(self, session_id: str | None, body: Mapping[str, Any]) -> None:
        await self.order.wait(self.order.causes(session_id, body), _ORDER_WAIT_S)

    def printed(self, event: Event) -> None:
        """An event of OpenCode's own (its stdout)."""
        self.seen(event)
        self.order.saw(event)

    def seen(self, event: Event) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def finish(self, session_id: str | None, stop_reason: str, error: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        account = self.account
        self.ledger.update_run(run_id=self.run_id, ended_at=time.time(), session_id=session_id,
                               stop_reason=stop_reason, error=error, usage=account.usage, cost=account.cost,
                               unpriced=account.unpriced)
        self.ledger.flush()

    def _write_private_dir(self, private: Path, token: str) -> tuple[Path, list[str]]:
        """The token file, OpenCode's private dirs, the skills and the instructions file; returns
        the token file and the instruction files for the config."""
        plan = self.plan
        token_file = private / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        oc_config.make_private_dirs(private)
        install_skills(plan.skills, private / "config")
        parts = [part for part in (self.settings.instructions, plan.output and plan.output.instructions()) if part]
        if not parts:
            return token_file, []
        instructions = private / "instructions.md"
        instructions.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
        return token_file, [str(instructions)]

    async def _snapshot(self, deadline: float) -> Snapshot | None:
        try:
            return await asyncio.to_thread(Snapshot.take, self.plan.workdir,
                                           max_file_bytes=self.settings.diff_max_bytes, deadline=deadline)
        except Unlisted as exc:
            self.warnings.append(f"file changes are not listed: {exc}")
            return None

    async def execute(self) -> RunResult:
        plan, settings = self.plan, self.settings
        model = settings.model or ""
        # SDK mode calls litellm on the first request: import it (~2.4 s) while OpenCode starts. In
        # gateway mode a LiteLLM proxy reports each stream's cost, so litellm is imported only if a
        # price must be looked up; importing it anyway would cost every run its 2.4 s of CPU.
        warm = asyncio.ensure_future(asyncio.to_thread(_litellm.load)) if settings.mode == "sdk" else None
        started = time.monotonic()
        deadline = started + settings.timeout  # the whole run, snapshots included, ends by then
        token = secrets.token_urlsafe(32)
        tagging = Tagging(settings.tags, settings.metadata, session_id=self.run_id,
                          tag_metadata_keys=settings.tag_metadata_keys)
        upstream = upstream_for(settings, model)
        self.ledger.start_run(run_id=self.run_id, started_at=time.time(), model=model, mode=settings.mode,
                              workdir=str(plan.workdir), metadata=settings.metadata, tags=tagging.all_tags,
                              session_id=plan.session_id)
        private = Path(tempfile.mkdtemp(prefix="opencode-gateway-"))  # mode 0700
        watchdog = Watchdog([private])  # cleans up if this process is killed
        try:
            token_file, instruction_files = self._write_private_dir(private, token)
            data_home = plan.resumed_store or private / "data"
            data_home.mkdir(mode=0o700, parents=True, exist_ok=True)
            before = await self._snapshot(deadline)
            app = create_app(Endpoint(
                token=token, target=Target(model, upstream, tagging, self.account),
                secrets=(*settings.secrets, token), pricer=self.pricer, estimate_usage=settings.estimate_usage,
                first_byte_timeout=settings.first_byte_timeout, max_body_bytes=settings.max_body_bytes,
                on_retry=self.retrying, on_text=self.streamed if self.deltas else None, follows=self.follows,
            ))
            confined = plan.sandbox == "bwrap"
            socket_path = private / "endpoint.sock" if confined and settings.sandbox_network == "endpoint" else None
            async with EndpointServer(app, unix_socket=socket_path) as server:
                config = oc_config.build_config(
                    model=model, base_url=server.url + "/v1", api_key_ref=f"{{file:{token_file}}}",
                    permissions=settings.permissions, disable_tools=settings.disable_tools,
                    user_config=settings.opencode_config, instructions=instruction_files,
                    readable_dirs=[str(skills_dir(private / "config"))] if plan.skills else [],
                )
                (private / "opencode.json").write_text(json.dumps(config, indent=2) + "\n")
                env = oc_config.build_env(os.environ, private_dir=private, data_dir=data_home, config=config,
                                          passed=settings.passed_env())
                argv = run_argv(plan.binary, oc_config.opencode_model(model), settings.agent, plan.session_id)
                if confined:
                    env["TMPDIR"] = "/tmp"  # the sandbox's own, empty /tmp
                    argv = Sandbox(settings.sandbox_network, tuple(map(Path, settings.sandbox_allow_write)),
                                           tuple(map(Path, settings.sandbox_allow_read))).wrap(
                        argv, workdir=plan.workdir, private_dir=private, data_home=data_home, port=server.port,
                        socket_path=socket_path)
                self.process = OpenCodeProcess(argv, env=env, cwd=plan.workdir, prompt=plan.prompt, tag=watchdog.tag)
                try:
                    outcome = await self.process.run(self.printed, max(deadline - time.monotonic(), 0.0))
                finally:
                    self.order.close()
            found_session = next((e.session_id for e in self.events if e.session_id), None) or plan.session_id
            if plan.resumed_store is None and found_session and _SESSION_ID.match(found_session):
                store = _session_store(settings, found_session)
                store.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(data_home), store)
            after = await self._snapshot(deadline) if before is not None else None
        finally:
            await upstream.aclose()
            shutil.rmtree(private, ignore_errors=True)
            watchdog.close()
            if warm is not None and not warm.done():
                warm.cancel()

        files: tuple[FileChange, ...] = before.changes(after) if before is not None and after is not None else ()
        usage, cost, warnings = totals(self.records)
        warnings += (*self.account.budget.overshoot(self.account.spent), *self.warnings)
        error: GatewayError | None
        if self.fatal is not None and self.fatal.cost.source == "refused":
            stop_reason = "budget_exceeded"
            error = BudgetExceeded(self.fatal.error or "run budget exceeded")
        elif outcome.timed_out:
            stop_reason = "timeout"
            error = RunTimeout(f"the run exceeded its timeout of {settings.timeout:g} s and OpenCode was stopped")
        else:
            error = _run_error(self.events, self.records, outcome.exit_code, outcome.stderr_tail, self.fatal)
            stop_reason = "done" if error is None else "error"
            if isinstance(error, UpstreamError) and error.status_code < 500 and is_budget_error(str(error).encode()):
                stop_reason, error = "budget_exceeded", BudgetExceeded(str(error))  # the gateway's budget
        text = final_text(self.events)
        spec = self.plan.output
        output, problem = spec.parse(text) if spec is not None and stop_reason == "done" else (None, None)
        result = RunResult(
            run_id=self.run_id, text=text, session_id=found_session, stop_reason=stop_reason, model=model,
            mode=settings.mode, usage=usage, cost=cost, requests=tuple(self.records), events=tuple(self.events),
            error=error, warnings=warnings, duration_s=time.monotonic() - started, output=output, files=files,
            sandbox=plan.sandbox,
        )
        if problem is not None:
            error = OutputInvalid(f"{problem} (the answer is in the error's raw_text)", raw_text=text, result=result)
            result = dataclasses.replace(result, stop_reason="error", error=error)
        self.finish(found_session, result.stop_reason, None if error is None else str(error))
        if self.ledger.failure is not None:
            result = dataclasses.replace(result, warnings=(
                *result.warnings, f"the ledger could not record this run completely: {self.ledger.failure}"))
        if isinstance(error, OutputInvalid):
            error.result = result  # the exception carries the run, and the run its exception
            raise error
        return result
