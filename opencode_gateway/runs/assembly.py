"""How a run is assembled from its plan: its account, where its requests go (the targets and the
router of its endpoint), OpenCode's process wired to the endpoint, and the warm-up while OpenCode
starts. `Parts` are what a test may swap (how OpenCode's process is made, where requests go)."""

from __future__ import annotations

import dataclasses
import fnmatch
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _litellm
from ..accounting.budget import period_caps
from ..accounting.ledger import RunLedger
from ..accounting.pricing import Pricer
from ..accounting.records import ApprovalRecord, RequestRecord
from ..accounting.run import RunAccount
from ..approvals.plugin import plugin_source
from ..approvals.policy import ApprovalRequest, Policy
from ..config.settings import RunSettings
from ..credentials import redacted
from ..domain import Purpose
from ..endpoint.server import EndpointServer
from ..endpoint.tagging import Tagging
from ..events import ApprovalAnswered, ApprovalAsked, ReasoningDelta, TextDelta, ToolRequested
from ..observability.traces import RunSpan, RunTrace, Tracing, root_attributes, tracing_for
from ..opencode import config as oc_config
from ..opencode.gitguard import GitControl
from ..opencode.lines import Event, normalize_tool
from ..opencode.process import OpenCodeProcess, run_argv
from ..opencode.purpose import routed_model
from ..opencode.reaper import reaped_argv
from ..opencode.sessions import prune_sessions
from ..opencode.workspace import Workspace
from .plan import Plan
from .result import RunResult
from .wiring import opencode_env, upstream_for

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..approvals.host import Approvals, Decided
    from ..endpoint.hooks import Gates, Observers
    from ..endpoint.routing import RunRouter, Target
    from ..endpoint.upstream import Upstream

__all__ = [
    "Parts",
    "account_for",
    "endpoint_app",
    "live_event",
    "mode_denial",
    "run_approvals",
    "opencode_process",
    "router",
    "run_root",
    "run_tracing",
    "targets",
    "warm_up",
]


@dataclasses.dataclass(frozen=True)
class Parts:
    """What a run is made of besides its plan, that a test may swap: how OpenCode's process is
    made (OpenCodeProcess's signature; tests/support/replay.py replays recorded runs), and where
    a model's requests go (None: `wiring.upstream_for`, the gateway or litellm)."""

    opencode: Callable[..., OpenCodeProcess] = OpenCodeProcess
    upstream: Callable[[RunSettings, str], Upstream] | None = None


def account_for(settings: RunSettings, ledger: RunLedger, on_record: Callable[[RequestRecord], None]) -> RunAccount:
    """The run's account: its budget, prices and ledger, and the period caps of its metadata
    (their spend read from the same ledger, through the driver on a Ray worker)."""
    return RunAccount(
        settings.budget_for(settings.model),
        pricer=Pricer(settings.pricing),
        on_record=on_record,
        ledger=ledger,
        periods=period_caps(settings.budgets, settings.metadata),
        history=ledger,
    )


def targets(settings: RunSettings, tagging: Tagging, account: RunAccount, parts: Parts = Parts()) -> dict[str, Target]:
    """Where a run's requests go: the run's model, the small model of OpenCode's background calls
    if it is another, and each purpose's route (`routes`)."""
    from ..endpoint.routing import Target

    upstream = parts.upstream or upstream_for
    models = (settings.model, settings.small_model or settings.model, *settings.routes.values())
    return {model: Target(model, upstream(settings, model), tagging, account) for model in dict.fromkeys(models)}


def endpoint_app(
    settings: RunSettings,
    token: str,
    where: Mapping[str, Target],
    account: RunAccount,
    observers: Observers,
    gates: Gates,
    approvals: Approvals | None = None,
) -> Starlette:
    """The run's endpoint: its token, its targets, the run's secrets scrubbed from what it says,
    priced by the run's prices, each answer's text kept (the run's answer is taken from them)."""
    from ..endpoint.app import Endpoint, create_app  # starlette and httpx: imported while OpenCode starts

    endpoint = Endpoint(
        router=router(token, where, settings),
        secrets=(*settings.secrets, token),
        pricer=account.pricer,
        estimate_usage=settings.estimate_usage,
        first_byte_timeout=settings.upstream_limits.first_byte_timeout,
        max_body_bytes=settings.upstream_limits.max_body_bytes,
        keep_answers=True,
        observers=observers,
        gates=gates,
    )
    return create_app(endpoint, approvals.routes(endpoint.authorized) if approvals is not None else ())


def router(token: str, targets: Mapping[str, Target], settings: RunSettings) -> RunRouter:
    """Who may call the run's endpoint (its token), and where each request goes: the one model's
    target, or with a small model or routes, the one each request is routed to (purpose.py)."""
    from ..endpoint.routing import RunRouter  # starlette's side: imported while OpenCode starts

    if len(targets) == 1:
        return RunRouter(token, targets[settings.model])

    def choose(headers: Mapping[str, str], requested: Any, purpose: Purpose) -> Target:
        return targets[
            routed_model(
                requested, purpose, model=settings.model, small_model=settings.small_model, routes=settings.routes
            )
        ]

    return RunRouter(token, targets[settings.model], choose)


def live_event(session_id: str | None, kind: str, piece: str) -> Event:
    """What the endpoint saw streaming by (kind: text, reasoning, or tool: a tool's name)."""
    if kind == "tool":
        return ToolRequested(session_id, tool=normalize_tool(piece))
    return TextDelta(session_id, text=piece) if kind == "text" else ReasoningDelta(session_id, text=piece)


def opencode_process(
    plan: Plan,
    workspace: Workspace,
    server: EndpointServer,
    socket_path: Path | None,
    tag: str,
    git: GitControl,
    make: Callable[..., OpenCodeProcess],
    token: str,
) -> OpenCodeProcess:
    """OpenCode's process, not yet started, given its isolated config with the endpoint's address
    and the run's token, which the endpoint is to ask for."""
    settings = plan.settings
    workspace.prepare()
    readable = workspace.add_skills(plan.skills)
    instructions = workspace.add_instructions(
        [part for part in (settings.instructions, plan.output and plan.output.instructions()) if part]
    )
    plugins = []
    if plan.asks:  # the token's file is written next, by opencode_env
        unix = str(socket_path) if socket_path else None
        source = plugin_source(
            server.url,
            str(workspace.private / "token"),
            settings.approval_timeout,
            unix,
            tool_hook=plan.binary.generation.tool_hook,
        )
        plugins.append(workspace.add_plugin(source))
    env = opencode_env(
        settings,
        workspace,
        endpoint_url=server.url,
        token=token,
        workdir=plan.workdir,
        instructions=instructions,
        readable_dirs=readable,
        plugins=plugins,
    )
    model = oc_config.opencode_model(settings.model)
    argv = run_argv(plan.binary, model, settings.agent, plan.session_id, plugins=bool(plugins))
    inherited: tuple[int, ...] = ()
    if plan.sandbox == "bwrap":
        argv, env, seccomp = workspace.confine(
            argv,
            env,
            settings.sandbox_config,
            settings.gateway_files,
            workdir=plan.workdir,
            port=server.port,
            socket_path=socket_path,
            git=git,
        )
        inherited = (seccomp,)
    else:  # no pid namespace to end with the run: a subreaper ends what escapes OpenCode's group and tag
        argv = reaped_argv(argv)
    return make(argv, env=env, cwd=plan.workdir, prompt=plan.prompt, tag=tag, pass_fds=inherited)


# OpenCode's tools whose permission has another name (one permission gates write, edit and patch)
def mode_denial(settings: RunSettings) -> Callable[[str], str | None]:
    """What the run's permission mode denies, for approvals: denied before anything is asked. An
    agent's own mode (no --permissions, not build) is OpenCode's to apply."""
    mode = settings.permissions or ("full" if settings.agent == "build" else None)
    rules = oc_config.permission_rules(mode, settings.disable_tools) if mode else {}

    def denied(tool: str) -> str | None:
        if not rules or tool == "invalid":  # the model named no offered tool: OpenCode tells it so
            return None
        permission = oc_config.permission_of(tool)
        matching = [value for key, value in rules.items() if fnmatch.fnmatchcase(permission, key)]
        rule = matching[-1] if matching else "allow"  # OpenCode's rule: the last that matches wins
        if rule == "deny":
            return f"the permission mode {mode} denies {tool}" + (
                " (disabled)" if any(permission in oc_config.TOOLS.get(t, ()) for t in settings.disable_tools) else ""
            )
        return None

    return denied


def _approval_row(request: ApprovalRequest, decided: Decided) -> ApprovalRecord:
    approval = decided.approval
    return ApprovalRecord(
        uuid.uuid4().hex,
        request.session_id,
        request.call_id,
        request.tool,
        request.subject,
        approval.decision,
        decided.by,
        approval.reason,
        time.time() - decided.waited_s,
        decided.waited_s,
    )


def _answered(request: ApprovalRequest, decided: Decided) -> ApprovalAnswered:
    approval = decided.approval
    return ApprovalAnswered(
        request.session_id,
        call_id=request.call_id,
        tool=request.tool,
        decision=approval.decision,
        by=decided.by,
        reason=approval.reason,
        waited_s=decided.waited_s,
    )


def _asked(request: ApprovalRequest) -> ApprovalAsked:
    return ApprovalAsked(
        request.session_id,
        call_id=request.call_id,
        tool=request.tool,
        arguments=dict(request.arguments),
        subject=request.subject,
    )


def run_approvals(
    plan: Plan,
    secrets: Sequence[str],
    account: RunAccount,
    seen: Callable[[Event], Event],
    trace: RunTrace,
) -> Approvals | None:
    """The run's approvals (None: it asks nothing): its policy and callback, each ask and answer
    an event of the run (`seen`), a row of its ledger and, on the tool's span, a span event."""
    if not plan.asks:
        return None
    from ..approvals.host import Approvals  # starlette: only for a run that asks

    def answered(request: ApprovalRequest, decided: Decided) -> None:
        account.approval(redacted(_approval_row(request, decided), secrets))
        trace.event(seen(_answered(request, decided)))

    settings = plan.settings
    return Approvals(
        settings.approvals or Policy(),
        denied_by_mode=mode_denial(settings),
        workdir=str(plan.workdir),
        timeout=settings.approval_timeout,
        approve=plan.approve,
        on_asked=lambda request: seen(_asked(request)),
        on_answered=answered,
        secrets=secrets,
    )


def run_tracing(settings: RunSettings) -> Callable[[], Tracing | None]:
    """The run's Tracing (None: traces not asked for), made once, in the warm-up if it is first."""
    made: list[Tracing | None] = []

    def tracing() -> Tracing | None:
        if not made:
            made.append(tracing_for(settings.otel, settings.environ))
        return made[0]

    return tracing


def run_root(result: RunResult, settings: RunSettings, workdir: Path, ended_at: float) -> RunSpan:
    """A run's root span: its model, attribution, workdir, outcome and totals."""
    metadata = settings.metadata
    attributes = root_attributes(result.model, result.mode, result.totals, metadata, settings.tags)
    attributes.update(
        {
            "opencode_gateway.outcome": result.stop_reason,
            "gen_ai.conversation.id": result.session_id,
            "opencode_gateway.sandbox": result.sandbox,
            "opencode_gateway.workdir": str(workdir),
            "opencode_gateway.cache_saved": result.cache_saved,
        }
    )
    error = None if result.error is None else str(result.error)
    batch = metadata.get("batch_id")
    return RunSpan(
        result.run_id,
        "run",
        result.model,
        ended_at - result.duration_s,
        ended_at,
        attributes,
        None if batch is None else str(batch),
        error,
    )


def warm_up(settings: RunSettings, keep: str | None) -> None:
    """While OpenCode starts: the kept sessions past their days removed (each is ~1 MB), but the
    one this run continues; and what the first request needs, imported (litellm, ~2.4 s, in SDK
    mode; in gateway mode the relay's transport, aiohttp, ~0.15 s: gateway mode never imports
    litellm for its own sake, a proxy reports each stream's cost or its bundled price map prices it)."""
    if settings.keep_sessions_days is not None:
        prune_sessions(settings.data_dir, settings.keep_sessions_days, keep=keep)
    run_tracing(settings)()  # the OpenTelemetry SDK, when traces are asked for
    if settings.mode == "sdk":
        # litellm prices each stream as it opens, before any usage, by counting the tokens of an
        # empty completion: the model's tokenizer, loaded then (~0.7 s of CPU), on the first
        # request's path. Counted here, it is loaded while OpenCode starts.
        _litellm.load().token_counter(model=settings.model, text="")
    else:
        import aiohttp  # noqa: F401
