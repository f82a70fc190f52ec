"""One run, end to end: endpoint up, isolated config written, OpenCode run, result assembled.

Data goes one way: Settings in, a RunResult out. OpenCode only ever learns the endpoint's loopback
URL and a per-run token; the real keys stay in this process.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _litellm
from .accounting.ledger import Ledger
from .accounting.pricing import Pricer
from .accounting.records import RequestRecord, RunUsage, totals
from .errors import (
    BudgetExceeded,
    GatewayError,
    OpenCodeError,
    OpenCodeFailed,
    RunTimeout,
    SettingsError,
    UpstreamError,
)
from .events import RequestFinished, UpstreamRetry
from .gateway.app import Endpoint, create_app
from .gateway.preflight import check_gateway
from .gateway.server import EndpointServer
from .gateway.tagging import Tagging
from .gateway.upstream import ProxyUpstream, SdkUpstream, Upstream, gateway_base, opencode_retries
from .opencode import config as oc_config
from .opencode.events import Error, Event, StepStart, Text
from .opencode.process import OpenCodeProcess, find_opencode, run_argv
from .settings import GATEWAY_PREFIX, Settings

__all__ = ["RunResult", "arun", "run"]

_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True)
class RunResult:
    run_id: str
    text: str  # the final answer: the text of the last step that produced text
    session_id: str | None
    stop_reason: str  # "done", "error", "timeout" or "budget_exceeded"
    model: str
    mode: str  # "sdk" or "gateway"
    usage: RunUsage
    cost: float | None  # USD; None when some request could not be priced
    requests: tuple[RequestRecord, ...] = ()
    events: tuple[Event, ...] = ()
    error: GatewayError | None = None
    warnings: tuple[str, ...] = ()
    duration_s: float = 0.0

    @property
    def cost_sources(self) -> dict[str, int]:
        """How many requests were priced from each source (reported, config, litellm, unpriced, ...)."""
        return dict(collections.Counter(r.cost.source for r in self.requests))

    @property
    def ok(self) -> bool:
        return self.stop_reason == "done"

    def raise_for_error(self) -> RunResult:
        """Raise the run's error, if it has one; return self otherwise."""
        if self.error is not None:
            raise self.error
        return self

    def to_dict(self, *, events: bool = True) -> dict[str, Any]:
        result: dict[str, Any] = {
            "run_id": self.run_id,
            "text": self.text,
            "session_id": self.session_id,
            "stop_reason": self.stop_reason,
            "model": self.model,
            "mode": self.mode,
            "usage": self.usage.to_dict(),
            "cost": self.cost,
            "cost_sources": self.cost_sources,
            "error": self.error.to_dict() if self.error else None,
            "warnings": list(self.warnings),
            "duration_s": round(self.duration_s, 3),
            "requests": [r.to_dict() for r in self.requests],
        }
        if events:
            result["events"] = [e.to_dict() for e in self.events]
        return result


def _final_text(events: Sequence[Event]) -> str:
    steps: list[list[str]] = [[]]
    for event in events:
        if isinstance(event, StepStart):
            steps.append([])
        elif isinstance(event, Text):
            steps[-1].append(event.text)
    return next(("".join(texts) for texts in reversed(steps) if texts), "")


def _group(settings: Settings) -> str:
    return (settings.model or "")[len(GATEWAY_PREFIX):]


def _upstream(settings: Settings, tagging: Tagging) -> Upstream:
    if settings.mode == "gateway":
        return ProxyUpstream(settings.gateway_api_base or "", _group(settings), settings.gateway_api_key, tagging,
                             connect_timeout=settings.connect_timeout, idle_timeout=settings.idle_timeout)
    return SdkUpstream(settings.model or "", settings.api_base, settings.api_key, tagging,
                       idle_timeout=settings.idle_timeout)


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


async def arun(
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
    session_id: str | None = None,
    timeout: float | None = None,
    opencode_bin: str | None = None,
    settings: Settings | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> RunResult:
    """Run OpenCode once on `model` through a local endpoint and account for every request.

    Arguments override `settings`. Problems found before OpenCode starts (bad settings, no
    binary, unknown session) raise; what happens during the run is reported in the RunResult
    (`stop_reason`, `error`; `raise_for_error()` raises it).
    """
    settings = (settings or Settings()).replace(
        model=model, api_base=api_base, api_key=api_key, permissions=permissions, disable_tools=disable_tools,
        agent=agent, metadata=metadata, tags=tags, timeout=timeout, opencode_bin=opencode_bin,
    ).validated()
    if not prompt.strip():
        raise SettingsError("the prompt is empty: give the task to run")
    cwd = Path(workdir).expanduser().resolve()
    if not cwd.is_dir():
        raise SettingsError(f"workdir {cwd} is not a directory")
    oc_config.check_user_config(settings.opencode_config)
    oc_config.permission_rules(settings.permissions, settings.disable_tools)
    resumed_store = _session_store(settings, session_id) if session_id else None
    if resumed_store is not None and not resumed_store.is_dir():
        raise SettingsError(f"no kept session {session_id} under {settings.data_dir}: it cannot be continued")
    binary = find_opencode(settings.opencode_bin)
    if settings.mode == "gateway":
        await check_gateway(gateway_base(settings.gateway_api_base or ""), settings.gateway_api_key, _group(settings))
    ledger = Ledger(settings.ledger_path)  # a bad ledger file fails here, before OpenCode starts
    state = _RunState(settings, ledger, on_event)
    try:
        return await state.execute(prompt, cwd, binary, session_id, resumed_store)
    except BaseException as exc:  # interrupted (Ctrl-C, cancelled) or failed: the run's row still closes
        state.finish(session_id, "interrupted", type(exc).__name__)
        raise
    finally:
        ledger.close()


class _RunState:
    """One run while it goes: its records and events as they arrive, and the process to stop."""

    def __init__(self, settings: Settings, ledger: Ledger, on_event: Callable[[Event], None] | None) -> None:
        self.settings = settings
        self.ledger = ledger
        self.on_event = on_event
        self.run_id = "run_" + uuid.uuid4().hex
        self.records: list[RequestRecord] = []
        self.events: list[Event] = []
        self.fatal: RequestRecord | None = None  # the failure, or the refusal, that ended the run
        self.process: OpenCodeProcess | None = None
        self.budget = settings.budget
        self.finished = False

    def admit(self) -> str | None:
        return self.budget.refusal(self.records) if self.budget else None

    def recorded(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.ledger.record_request(self.run_id, record)
        usage, cost, _ = totals(self.records)
        self.seen(RequestFinished(record.session_id, request_id=record.request_id, status_code=record.status_code,
                                  usage=record.usage.to_dict() if record.usage else None, cost=record.cost.usd,
                                  cost_source=record.cost.source, run_tokens=usage.input_tokens + usage.output_tokens,
                                  run_cost=cost,
                                  error=record.error))
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

    def seen(self, event: Event) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def finish(self, session_id: str | None, stop_reason: str, error: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        usage, cost, _ = totals(self.records)
        self.ledger.finish_run(run_id=self.run_id, ended_at=time.time(), session_id=session_id,
                               stop_reason=stop_reason, error=error, usage=usage, cost=cost,
                               unpriced=sum(r.cost.usd is None for r in self.records))

    async def execute(self, prompt: str, cwd: Path, binary: str, session_id: str | None,
                      resumed_store: Path | None) -> RunResult:
        settings = self.settings
        model = settings.model or ""
        # SDK mode calls litellm on the first request: import it (~2.4 s) while OpenCode starts. In
        # gateway mode a LiteLLM proxy reports each stream's cost, so litellm is imported only if a
        # price must be looked up; importing it anyway would cost every run its 2.4 s of CPU.
        warm = asyncio.ensure_future(asyncio.to_thread(_litellm.load)) if settings.mode == "sdk" else None
        started = time.monotonic()
        token = secrets.token_urlsafe(32)
        real_secrets = tuple(s for s in (settings.api_key, settings.gateway_api_key) if s)
        tagging = Tagging(settings.tags, settings.metadata, session_id=self.run_id,
                          tag_metadata_keys=settings.tag_metadata_keys)
        upstream = _upstream(settings, tagging)
        self.ledger.start_run(run_id=self.run_id, started_at=time.time(), model=model, mode=settings.mode,
                              workdir=str(cwd), metadata=settings.metadata, tags=tagging.all_tags,
                              session_id=session_id)
        private = Path(tempfile.mkdtemp(prefix="opencode-gateway-"))  # mode 0700
        try:
            token_file = private / "token"
            token_file.write_text(token)
            token_file.chmod(0o600)
            data_home = resumed_store or private / "data"
            for sub in ("home", "config", "cache", "state"):
                (private / sub).mkdir(mode=0o700)
            data_home.mkdir(mode=0o700, parents=True, exist_ok=True)
            oc_config.seed_config_dir(private / "config")
            app = create_app(Endpoint(
                token=token, model=model, upstream=upstream, on_request=self.recorded,
                secrets=(*real_secrets, token), pricer=Pricer(settings.pricing), estimate_usage=settings.estimate_usage,
                first_byte_timeout=settings.first_byte_timeout,
                max_body_bytes=settings.max_body_bytes, admit=self.admit, on_retry=self.retrying,
            ))
            async with EndpointServer(app) as server:
                config = oc_config.build_config(
                    model=model, base_url=server.url + "/v1", api_key_ref=f"{{file:{token_file}}}",
                    permissions=settings.permissions, disable_tools=settings.disable_tools,
                    user_config=settings.opencode_config,
                )
                (private / "opencode.json").write_text(json.dumps(config, indent=2) + "\n")
                env = oc_config.build_env(os.environ, private_dir=private, data_dir=data_home, config=config,
                                          secrets=real_secrets)
                argv = run_argv(binary, oc_config.opencode_model(model), settings.agent, session_id)
                self.process = OpenCodeProcess(argv, env=env, cwd=cwd, prompt=prompt)
                outcome = await self.process.run(self.seen, settings.timeout)
            found_session = next((e.session_id for e in self.events if e.session_id), None) or session_id
            if resumed_store is None and found_session and _SESSION_ID.match(found_session):
                store = _session_store(settings, found_session)
                store.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(data_home), store)
        finally:
            await upstream.aclose()
            shutil.rmtree(private, ignore_errors=True)
            if warm is not None and not warm.done():
                warm.cancel()

        usage, cost, warnings = totals(self.records)
        warnings += self.budget.overshoot(self.records)
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
        self.finish(found_session, stop_reason, str(error) if error else None)
        if self.ledger.failure is not None:
            warnings += (f"the ledger could not record this run completely: {self.ledger.failure}",)
        return RunResult(
            run_id=self.run_id, text=_final_text(self.events), session_id=found_session, stop_reason=stop_reason,
            model=model, mode=settings.mode, usage=usage, cost=cost, requests=tuple(self.records),
            events=tuple(self.events), error=error, warnings=warnings, duration_s=time.monotonic() - started,
        )


def run(prompt: str, **kwargs: Any) -> RunResult:
    """`arun` for code without an event loop; takes the same arguments."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun(prompt, **kwargs))
    raise RuntimeError("run() was called inside a running event loop: use `await arun(...)` instead")
