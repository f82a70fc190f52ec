"""Settings: config.yaml and flags, resolved into one frozen value before anything starts.

A value written `os.environ/NAME` is read from the environment, as LiteLLM's own config does, so a
config file can be committed without the keys it uses; `api_key: file:PATH` reads the key from a
file.
"""

from __future__ import annotations

import copyreg
import dataclasses
import functools
import importlib.util
import math
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

from ..accounting.budget import Budget, PeriodBudget
from ..accounting.ledger.location import LedgerLocation
from ..accounting.price_map import context_window
from ..accounting.pricing import Price
from ..approvals.policy import Policy, parse_policy
from ..credentials import gateway_keys, held_secrets
from ..domain import Mode, ModelRoute
from ..endpoint.limits import UpstreamLimits
from ..errors import SettingsError
from ..observability.traces import INSTALL, OtelConfig
from ..opencode.agent import AgentConfig
from ..opencode.purpose import BACKGROUND
from ..opencode.sandbox import SandboxConfig
from .attribution import check_attribution

__all__ = ["UNSET", "RunSettings", "Settings", "check_routes", "default_data_dir", "json_kinds"]


def default_data_dir() -> Path:
    """Where kept sessions (and later the ledger) live: $OPENCODE_GATEWAY_HOME or the XDG data dir."""
    explicit = os.environ.get("OPENCODE_GATEWAY_HOME")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "opencode-gateway"


def _budget(name: str, value: Any) -> Budget | PeriodBudget:
    """A `budgets:` entry: a model's default limits, or (with `per`) a metadata key's period cap."""
    if isinstance(value, (Budget, PeriodBudget)):
        return value
    if isinstance(value, Mapping) and "per" in value:
        return PeriodBudget.from_setting(name, value)
    return Budget.from_setting(f"budgets.{name}", value)


class _Unset:
    """ "Not given": keeps a setting as it is, where None would set it to none (as httpx's
    USE_CLIENT_DEFAULT)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Settings:
    """Everything one run needs to know, file and flags merged; each package's config built once."""

    model: str | None = None
    small_model: str | None = None  # OpenCode's background calls (titles, summaries); None: the model
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=_frozen)
    permissions: str | None = None  # None: the agent's own restrictions (build has none: full)
    disable_tools: tuple[str, ...] = ()
    agent: str = "build"
    instructions: str | None = None  # extra system instructions for every run (text)
    skills: tuple[str, ...] = ()  # skill folders (each with a SKILL.md) to give every run
    timeout: float = 1800.0
    opencode_bin: str | None = None
    opencode_config: Mapping[str, Any] = field(default_factory=_frozen)
    mcp: Mapping[str, Any] = field(default_factory=_frozen)  # MCP servers, in OpenCode's `mcp` shape
    data_dir: Path = field(default_factory=default_data_dir)
    pricing: Mapping[str, Price] = field(default_factory=_frozen)
    estimate_usage: bool = False  # estimate tokens (litellm's counter) for streams that report none
    # Per model or group: how its backend caches prompts, "markers", "key" or "off" (endpoint/caching.py)
    prompt_caching: Mapping[str, str] = field(default_factory=_frozen)
    # Per background purpose (title, summary, compaction): the model it goes to (opencode/purpose.py)
    routes: Mapping[str, str] = field(default_factory=_frozen)
    tag_metadata_keys: tuple[str, ...] = ("ticket",)  # metadata also sent as tags KEY:VALUE
    max_cost: float | None = None  # USD per run
    max_requests: int | None = None  # upstream calls per run
    max_tokens: int | None = None  # input + output tokens per run
    max_turns: int | None = None  # main-model requests per run (OpenCode's own step limit is soft)
    # Per model or group: the defaults of a run's limits; with `per`, per metadata key: a period's cap.
    budgets: Mapping[str, Budget | PeriodBudget] = field(default_factory=_frozen)
    connect_timeout: float = 10.0
    first_byte_timeout: float = 300.0
    idle_timeout: float = 300.0
    max_body_bytes: int = 32 * 1024 * 1024
    diff_max_bytes: int = 256 * 1024  # RunResult.files: files up to this size get a diff, cut at this size
    # A file's path, or a team's postgresql:// URL; None: $OPENCODE_GATEWAY_LEDGER, else <data_dir>/ledger.db
    ledger: str | None = field(default=None, repr=False)
    env: tuple[str, ...] = ()  # variables passed to OpenCode on purpose (its environment is an allowlist)
    sandbox: str = "auto"  # "auto" (bwrap when it works here), "bwrap" or "none" (opencode/sandbox.py)
    sandbox_network: str = "endpoint"  # "endpoint": only the run's endpoint is reachable; "host"
    sandbox_allow_write: tuple[str, ...] = ()  # paths the sandboxed run may write besides its workdir
    sandbox_allow_read: tuple[str, ...] = ()  # paths hidden by the sandbox (the real HOME, /tmp) to show
    executor: str = "local"  # where batch tasks run: "local" (this process) or "ray" (batch/ray_cluster.py)
    # OpenTelemetry traces (observability/traces.py); None: only when OTEL_EXPORTER_OTLP_* names a collector
    otel: Mapping[str, Any] | None = None
    metrics_token: str | None = field(default=None, repr=False)  # serve's /metrics, besides the admin token
    metrics_labels: tuple[str, ...] = ()  # metadata keys serve's metrics are labelled by (a bounded set)
    keep_sessions_days: float | None = 30.0  # kept sessions unused this long are pruned at a run's start
    approvals: Policy | None = None  # which tool calls the agent may make (approvals/policy.py); None: no asks
    approval_timeout: float = 300.0  # how long an ask waits for its answer, then it is a deny
    # The environment, read once by validated() (the URL and key's fallback; its credentials redacted)
    environ: Mapping[str, str] | None = field(default=None, repr=False, compare=False, metadata={"setting": False})
    # Files the gateway read its settings or a key from: a sandbox hides them wherever they are.
    secret_files: tuple[Path, ...] = field(default=(), repr=False, metadata={"setting": False})

    @functools.cached_property
    def upstream_limits(self) -> UpstreamLimits:
        """How long the endpoint waits on an upstream, how much of a request it reads (endpoint/limits.py)."""
        return UpstreamLimits(self.connect_timeout, self.first_byte_timeout, self.idle_timeout, self.max_body_bytes)

    def budget_for(self, model: str) -> Budget:
        """The limits of a run on `model`."""
        default = ModelRoute.of(model).setting(self.budgets)
        return Budget(self.max_cost, self.max_requests, self.max_tokens, self.max_turns).or_else(
            default if isinstance(default, Budget) else None
        )

    @property
    def ledger_location(self) -> LedgerLocation:
        """Where runs are recorded: the `ledger` setting (or flag), else $OPENCODE_GATEWAY_LEDGER,
        else the data dir's ledger.db."""
        return LedgerLocation.of(self.ledger or self._environ.get("OPENCODE_GATEWAY_LEDGER"), self.data_dir)

    @functools.cached_property
    def route(self) -> ModelRoute:
        """The run's model, parsed: its mode, its gateway group, the names it is priced by."""
        return ModelRoute.of(self.model or "")

    @property
    def mode(self) -> Mode:
        return self.route.mode

    def replace(self, **changes: Any) -> Settings:
        """A copy with the given fields changed (None too: it clears an optional setting); a field
        given as UNSET keeps its value."""
        return dataclasses.replace(
            self, **_typed({name: value for name, value in changes.items() if value is not UNSET})
        )

    def validated(self) -> RunSettings:
        """Check what can be checked before a run starts and read the environment once: the
        settings of a run (RunSettings), or SettingsError."""
        if not self.model:
            raise SettingsError("no model given: pass -m MODEL (e.g. openai/gpt-4o-mini or litellm_proxy/<group>)")
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["environ"] = MappingProxyType(dict(self._environ))
        settings = RunSettings(**values)
        _check(settings)
        return settings

    @property
    def _environ(self) -> Mapping[str, str]:
        return os.environ if self.environ is None else self.environ

    def passed_env(self) -> dict[str, str]:
        """The variables named by `env`, checked (opencode/agent.py)."""
        return self.agent_config.passed_env(
            self._environ, gateway_keys(self._environ, (self.api_key, self.gateway_api_key))
        )

    @functools.cached_property
    def agent_config(self) -> AgentConfig:
        """What OpenCode is told (opencode/agent.py)."""
        return AgentConfig(
            self.model or "", self.small_model, self.agent, self.permissions, self.disable_tools,
            self.opencode_config, self.mcp, self.env,
        )  # fmt: skip

    @functools.cached_property
    def sandbox_config(self) -> SandboxConfig:
        """How runs are confined (opencode/sandbox.py)."""
        return SandboxConfig(self.sandbox, self.sandbox_network, self.sandbox_allow_write, self.sandbox_allow_read)

    @property
    def gateway_files(self) -> tuple[Path, ...]:
        """The gateway's own files, which a sandbox hides wherever they are: settings and key
        files, the data dir, the ledger file and the live files SQLite keeps beside it (a Postgres
        ledger's spool is in the data dir) and libpq's password file."""
        ledger, passfile = self.ledger_location.path, self._environ.get("PGPASSFILE")
        ledgers = [ledger.with_name(ledger.name + end) for end in ("", "-wal", "-shm", "-journal")] if ledger else []
        files = (self.data_dir, *ledgers, *([Path(passfile)] if passfile else []))
        return (*self.secret_files, *(file.resolve() for file in files))

    @property
    def gateway_api_base(self) -> str | None:
        return self.api_base or self._environ.get("LITELLM_PROXY_API_BASE") or None

    @property
    def gateway_api_key(self) -> str | None:
        return self.api_key or self._environ.get("LITELLM_PROXY_API_KEY") or None

    @property
    def secrets(self) -> tuple[str, ...]:
        """The keys this process holds, which OpenCode, its config and every log must never see:
        the ones given, and every credential in the environment (litellm reads provider keys there)."""
        headers = (self.otel or {}).get("headers") or {}  # a collector's key, e.g. Langfuse's
        given = (self.api_key, self.gateway_api_key, self.metrics_token, self.ledger_location.password)
        return held_secrets(self._environ, (*given, *headers.values()))


def _typed(given: dict[str, Any]) -> dict[str, Any]:
    """Settings given as plain values (a file's, a caller's), as the fields hold them: mappings
    frozen, sequences tuples, prices and budgets checked and parsed."""
    if "pricing" in given:  # per model: a value, or a setting mapping to check and turn into one
        given["pricing"] = _frozen(
            {
                model: value if isinstance(value, Price) else Price.from_setting(f"pricing.{model}", value)
                for model, value in dict(given["pricing"]).items()
            }
        )
    if isinstance(given.get("approvals"), Mapping):
        given["approvals"] = parse_policy(given["approvals"])
    if "budgets" in given:
        given["budgets"] = _frozen({name: _budget(name, value) for name, value in dict(given["budgets"]).items()})
    for name in ("metadata", "opencode_config", "mcp", "prompt_caching", "routes", "otel"):
        if given.get(name) is not None:
            given[name] = _frozen(given[name])
    for name in (
        "tags",
        "disable_tools",
        "tag_metadata_keys",
        "skills",
        "env",
        "sandbox_allow_write",
        "sandbox_allow_read",
        "metrics_labels",
    ):
        if name in given:
            given[name] = tuple(given[name])
    return given


def _reduced(settings: Settings) -> tuple[Any, ...]:
    """Settings pickled (a batch task shipped to a Ray worker) as plain values: a mappingproxy cannot be."""
    values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    plain = {name: dict(value) if isinstance(value, MappingProxyType) else value for name, value in values.items()}
    return _unpickled, (type(settings), plain)


def _unpickled(kind: type[Settings], values: dict[str, Any]) -> Settings:
    thawed: dict[str, Any] = {
        name: MappingProxyType(value) if isinstance(value, dict) else value for name, value in values.items()
    }
    return kind(**thawed)


@dataclass(frozen=True)
class RunSettings(Settings):
    """Settings that passed `validated()`: a model is set, and the environment was read."""

    model: str = ""
    environ: Mapping[str, str] = field(default_factory=_frozen, repr=False, compare=False, metadata={"setting": False})


copyreg.pickle(Settings, _reduced)
copyreg.pickle(RunSettings, _reduced)


def _check(settings: RunSettings) -> None:
    """What validated() checks once the environment is read."""
    check_routes(settings.model, settings.routes)
    for model in filter(None, (settings.model, settings.small_model, *settings.routes.values())):
        route = ModelRoute.of(model)
        if route.mode != "gateway":
            continue
        if not route.group:
            raise SettingsError("model 'litellm_proxy/' names no model group: use litellm_proxy/<group>")
        if not settings.gateway_api_base:
            raise SettingsError(
                f"model {model} routes through a LiteLLM gateway but no gateway URL is set: "
                "pass --api-base URL or set LITELLM_PROXY_API_BASE"
            )
    check_attribution(settings.tags, settings.metadata, settings.tag_metadata_keys)
    for model, style in settings.prompt_caching.items():
        if style not in ("markers", "key", "off"):
            raise SettingsError(f"prompt_caching.{model} is {style!r}: use markers (Claude), key (OpenAI) or off")
    if not 0 < settings.timeout < math.inf:
        raise SettingsError(f"timeout {settings.timeout} is invalid: give a number of seconds above 0")
    days = settings.keep_sessions_days
    if days is not None and not 0 <= days < math.inf:
        raise SettingsError(f"keep_sessions_days {days} is invalid: give a number of days, 0 or more (or null)")
    if not 0 < settings.diff_max_bytes < math.inf:
        raise SettingsError(f"diff_max_bytes {settings.diff_max_bytes} is invalid: give a number above 0")
    settings.upstream_limits.check()
    Budget(settings.max_cost, settings.max_requests, settings.max_tokens, settings.max_turns).check()
    settings.sandbox_config.check()
    settings.ledger_location  # noqa: B018 (a malformed ledger URL fails here, before anything starts)
    _check_otel(settings)
    settings.agent_config.check(
        settings.environ, gateway_keys(settings.environ, (settings.api_key, settings.gateway_api_key))
    )


def _check_otel(settings: RunSettings) -> None:
    """Traces asked for (`otel`, or the standard variables) need the `otel` extra; serve's metric
    labels are metadata keys, each one label."""
    wanted = OtelConfig.wanted(settings.otel, settings.environ) is not None
    if wanted and not _installed("opentelemetry.exporter.otlp.proto.http"):
        raise SettingsError(f"otel settings need OpenTelemetry's SDK and OTLP exporter, not installed: {INSTALL}")
    for key in settings.metrics_labels:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise SettingsError(f"metrics_labels: {key!r} is not a metadata key usable as a label (letters, digits, _)")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or blocked
        return False


def check_routes(model: str, routes: Mapping[str, str]) -> None:
    """Each route names a background purpose and a model; a summary or compaction carries the
    whole conversation, so its model must take at least as much input as the run's model, where
    LiteLLM's map knows both (a gateway group's window only the gateway knows)."""
    for purpose, target in routes.items():
        if purpose not in BACKGROUND:
            raise SettingsError(f"routes.{purpose}: no such purpose; routes are for {', '.join(BACKGROUND)}")
        if not isinstance(target, str) or not target.strip():
            raise SettingsError(f"routes.{purpose} must name a model, e.g. {purpose}: openai/gpt-4o-mini")
        if purpose == "title":
            continue
        needed, window = context_window(model), context_window(target)
        if needed is not None and window is not None and window[0] < needed[0]:
            raise SettingsError(
                f"routes.{purpose}: {target} takes {window[0]:,} input tokens, fewer than {model}'s {needed[0]:,}; a "
                f"{purpose} request carries the whole conversation: route it to a model with at least that "
                "window, or drop the route (it then goes where OpenCode sends it)"
            )


def json_kinds(annotation: Any) -> tuple[type, ...]:
    """The JSON (and YAML) value types a setting or option of type `annotation` is written as:
    a text for str and paths, a list for sequences, an object for mappings and JSON schemas."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return tuple(
            dict.fromkeys(
                kind for arg in typing.get_args(annotation) if arg is not type(None) for kind in json_kinds(arg)
            )
        )
    if annotation is float:
        return (int, float)
    if annotation is Policy:  # written as its settings mapping (approvals/policy.py)
        return (dict,)
    if annotation in (str, int, bool):
        return (annotation,)
    if annotation is Any or annotation is Mapping or origin in (dict, Mapping):
        return (dict,)
    if origin in (tuple, list, Sequence):
        return (list,)
    if origin is os.PathLike or isinstance(annotation, type) and issubclass(annotation, os.PathLike):
        return (str,)
    raise TypeError(f"no JSON form for {annotation!r}")
