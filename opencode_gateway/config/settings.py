"""Settings: config.yaml and flags, resolved into one frozen value before anything starts: the
settings' sections side by side (config/sections.py), and TABLE, what is said of each setting
(config/fields.py), which the file, the flags, the task options and docs/settings.md follow.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..accounting.budget import Budget, PeriodBudget
from ..accounting.ledger.location import LedgerLocation
from ..accounting.price_map import context_window
from ..accounting.pricing import Price
from ..approvals.policy import parse_policy
from ..credentials import gateway_keys, held_secrets
from ..domain import ModelRoute
from ..errors import SettingsError
from ..observability.traces import INSTALL, OtelConfig
from ..opencode.agent import AgentConfig
from ..opencode.purpose import BACKGROUND
from .attribution import check_attribution
from .fields import table
from .sections import (
    AgentSection,
    AttributionSection,
    LimitSection,
    ModelSection,
    ObservabilitySection,
    SandboxSection,
    StoreSection,
    UpstreamSection,
    frozen,
)

__all__ = ["TABLE", "UNSET", "RunSettings", "Settings", "check_choices", "check_routes"]


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


@dataclass(frozen=True)
class Settings(
    ModelSection,
    AttributionSection,
    AgentSection,
    LimitSection,
    UpstreamSection,
    SandboxSection,
    StoreSection,
    ObservabilitySection,
):
    """Everything one run needs to know, file and flags merged: the settings' sections
    (config/sections.py), and the environment they are read with."""

    # The environment, read once by validated() (the URL and key's fallback; its credentials redacted)
    environ: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    # Files the gateway read its settings or a key from: a sandbox hides them wherever they are.
    secret_files: tuple[Path, ...] = field(default=(), repr=False)

    @property
    def ledger_location(self) -> LedgerLocation:
        """Where runs are recorded: the `ledger` setting (or flag), else $OPENCODE_GATEWAY_LEDGER,
        else the data dir's ledger.db."""
        return LedgerLocation.of(self.ledger or self._environ.get("OPENCODE_GATEWAY_LEDGER"), self.data_dir)

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

    @property
    def gateway_files(self) -> tuple[Path, ...]:
        """The gateway's own files, which a sandbox hides wherever they are: settings and key
        files, the data dir, the ledger file and the live files SQLite keeps beside it (a Postgres
        ledger's spool is in the data dir) and every file libpq may read for a team ledger
        (password, service and TLS files)."""
        location = self.ledger_location
        ledger = location.path
        ledgers = [ledger.with_name(ledger.name + end) for end in ("", "-wal", "-shm", "-journal")] if ledger else []
        files = (self.data_dir, *ledgers)
        # resolved, each: a key named through a symlink (or `..`) is where it lands, for the sandbox
        # that hides it and for every check that it is not inside a folder the agent gets
        return (*(file.resolve() for file in (*self.secret_files, *files)), *location.files(self._environ))

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
        given = (self.api_key, self.gateway_api_key, self.metrics_token, *self.ledger_location.passwords)
        return held_secrets(self._environ, (*given, *headers.values()))


def _typed(given: dict[str, Any]) -> dict[str, Any]:
    """Settings given as plain values (a file's, a caller's), as the fields hold them: mappings
    frozen, sequences tuples (as the table's types say), prices, budgets and a policy checked and
    parsed."""
    if "pricing" in given:  # per model: a value, or a setting mapping to check and turn into one
        given["pricing"] = {
            model: value if isinstance(value, Price) else Price.from_setting(f"pricing.{model}", value)
            for model, value in dict(given["pricing"]).items()
        }
    if isinstance(given.get("approvals"), Mapping):
        given["approvals"] = parse_policy(given["approvals"])
    if "budgets" in given:
        given["budgets"] = {name: _budget(name, value) for name, value in dict(given["budgets"]).items()}
    for name in given.keys() & _MAPPINGS:
        if isinstance(given[name], Mapping):  # not None, nor the parsed policy
            given[name] = frozen(given[name])
    for name in given.keys() & _SEQUENCES:
        given[name] = tuple(given[name])
    if isinstance(given.get("data_dir"), (str, os.PathLike)):
        given["data_dir"] = Path(given["data_dir"]).expanduser()
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
    environ: Mapping[str, str] = field(default_factory=frozen, repr=False, compare=False)


copyreg.pickle(Settings, _reduced)
TABLE = table(Settings)
_MAPPINGS = {name for name, row in TABLE.items() if dict in row.kinds}
_SEQUENCES = {name for name, row in TABLE.items() if list in row.kinds}
copyreg.pickle(RunSettings, _reduced)


def _check(settings: RunSettings) -> None:
    """What validated() checks once the environment is read: each value among its setting's
    choices, then what each package's config checks of itself."""
    check_choices(settings)
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
    if settings.approvals is not None:
        settings.approvals.check_tools(settings.mcp)
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


def check_choices(settings: Settings) -> None:
    """Each setting with choices (the table's) holds one of them. `batch` checks this before its
    tasks, whose own settings are validated as each starts."""
    for name, row in TABLE.items():
        if row.choices and getattr(settings, name) not in row.choices:
            raise SettingsError(f"{name} {getattr(settings, name)!r} is not known: use {', '.join(row.choices)}")


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
