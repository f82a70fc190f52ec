"""The settings, section by section: each setting declared once with its row of the table
(config/fields.py), and each section building, once, the config its package takes.

config.yaml stays flat (a key per setting, as LiteLLM's own config), so `Settings` is these
sections side by side (config/settings.py); what a package receives is its own frozen value,
built here from its section: the sandbox's `SandboxConfig`, the
endpoint's `UpstreamLimits`, a run's `Budget`, the model's `ModelRoute`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..accounting.budget import Budget, PeriodBudget
from ..accounting.pricing import Price
from ..approvals.policy import Policy
from ..domain import Mode, ModelRoute
from ..endpoint.limits import UpstreamLimits
from ..opencode.config import PERMISSION_MODES, TOOLS
from ..opencode.sandbox import SANDBOX_KINDS, SANDBOX_NETWORKS, SandboxConfig
from .fields import setting

__all__ = [
    "AgentSection",
    "AttributionSection",
    "LimitSection",
    "ModelSection",
    "ObservabilitySection",
    "SandboxSection",
    "StoreSection",
    "UpstreamSection",
    "default_data_dir",
    "frozen",
]


def default_data_dir() -> Path:
    """Where kept sessions and the ledger live: $OPENCODE_GATEWAY_HOME or the XDG data dir."""
    explicit = os.environ.get("OPENCODE_GATEWAY_HOME")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "opencode-gateway"


def frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ModelSection:
    """The model and the gateway"""

    model: str | None = setting(
        None,
        "LiteLLM model (openai/gpt-4o-mini) or gateway group (litellm_proxy/<group>)",
        flag="-m --model",
        group="common",
        task=True,
    )
    small_model: str | None = setting(
        None,
        "model of OpenCode's background calls (titles, summaries), e.g. a cheap group (default: -m)",
        flag="--small-model",
        group="common",
        metavar="MODEL",
        task=True,
    )
    routes: Mapping[str, str] = setting(
        doc="send OpenCode's title, summary or compaction calls to MODEL, whatever OpenCode asks for (a summary's "
        "or compaction's model must take as much input as -m); repeatable",
        factory=frozen,
        flag="--route",
        group="route",
        metavar="PURPOSE=MODEL",
    )
    api_base: str | None = setting(
        None,
        "gateway URL (litellm_proxy/ models) or provider API base (default: $LITELLM_PROXY_API_BASE)",
        flag="--api-base",
        group="upstream",
        metavar="URL",
    )
    api_key: str | None = setting(
        None,
        "virtual key or provider key; visible to local users in the process list: prefer --api-key-file "
        "or LITELLM_PROXY_API_KEY",
        flag="--api-key",
        group="key",
        metavar="KEY",
        secret=True,
    )

    @functools.cached_property
    def route(self) -> ModelRoute:
        """The run's model, parsed: its mode, its gateway group, the names it is priced by."""
        return ModelRoute.of(self.model or "")

    @property
    def mode(self) -> Mode:
        return self.route.mode


@dataclass(frozen=True)
class AttributionSection:
    """Spend attribution"""

    metadata: Mapping[str, Any] = setting(
        doc="spend-log metadata (x-litellm-spend-logs-metadata)",
        factory=frozen,
        flag="--metadata",
        group="attribution",
        metavar="KEY=VALUE",
        task=True,
    )
    tags: tuple[str, ...] = setting(
        (),
        "extra spend tag (x-litellm-tags: harness,opencode and these)",
        flag="--tag",
        group="attribution",
        metavar="TAG",
        task=True,
    )
    tag_metadata_keys: tuple[str, ...] = setting(
        ("ticket",), "metadata keys also sent as tags KEY:VALUE (a gateway totals spend per tag, not per metadata key)"
    )


@dataclass(frozen=True)
class AgentSection:
    """The agent: what OpenCode is told and may do"""

    permissions: str | None = setting(
        None,
        f"what the agent may do: {', '.join(PERMISSION_MODES)} (default: the agent's own; build: full)",
        flag="--permissions",
        group="common",
        metavar="MODE",
        task=True,
    )
    disable_tools: tuple[str, ...] = setting(
        (), f"turn a tool off: {', '.join(TOOLS)}", flag="--disable-tool", group="common", metavar="NAME", task=True
    )
    agent: str = setting("build", "OpenCode agent (default: build)", flag="--agent", group="run", task=True)
    instructions: str | None = setting(
        None,
        "extra system instructions for {of} (text; the flag reads them from a file)",
        flag="--instructions",
        group="run",
        metavar="FILE",
        task=True,
    )
    skills: tuple[str, ...] = setting(
        (),
        "a skill folder (with a SKILL.md) {of} may use; repeatable",
        flag="--skill",
        group="run",
        metavar="DIR",
        task=True,
        paths=True,
    )
    env: tuple[str, ...] = setting(
        (),
        "pass the variable NAME to OpenCode (its environment is otherwise only PATH, LANG, LC_*, TZ, TERM and the "
        "like); repeatable; never a key the gateway uses",
        flag="--env",
        group="common",
        metavar="NAME",
    )
    opencode_bin: str | None = setting(
        None,
        "the opencode binary (default: $OPENCODE_BIN, the one install-opencode put in the data dir, or PATH)",
        flag="--opencode-bin",
        group="opencode_bin",
        metavar="PATH",
    )
    opencode_config: Mapping[str, Any] = setting(
        doc="extra OpenCode config, merged under the keys the gateway manages (setting one of those is refused)",
        factory=frozen,
    )
    mcp: Mapping[str, Any] = setting(
        doc="MCP servers, in OpenCode's `mcp` shape (a local one runs in the run's sandbox)", factory=frozen
    )


@dataclass(frozen=True)
class LimitSection:
    """Limits and approvals"""

    timeout: float = setting(
        1800.0, "wall-clock limit of {of} (default: 1800)", flag="--timeout", group="limits", metavar="S", task=True
    )
    max_cost: float | None = setting(
        None, "stop {of} before it spends more", flag="--max-cost", group="budget", metavar="USD", task=True
    )
    max_requests: int | None = setting(
        None, "stop {of} after N upstream calls", flag="--max-requests", group="budget", metavar="N", task=True
    )
    max_tokens: int | None = setting(
        None, "stop {of} after N input+output tokens", flag="--max-tokens", group="budget", metavar="N", task=True
    )
    max_turns: int | None = setting(
        None, "stop {of} after N main-model requests", flag="--max-turns", group="budget", metavar="N", task=True
    )
    budgets: Mapping[str, Budget | PeriodBudget] = setting(
        doc="per model or group: the defaults of a run's limits; with `per`, what all runs with one value of a "
        "metadata key may spend in a day, week or month",
        factory=frozen,
    )
    approvals: Policy | None = setting(
        None,
        "a YAML policy that answers every tool call of {of} (rules by tool and pattern, a default; docs/cli.md)",
        flag="--approve",
        group="limits",
        metavar="FILE",
    )
    approval_timeout: float = setting(
        300.0,
        "an ask unanswered this long is a deny (default: 300)",
        flag="--approval-timeout",
        group="limits",
        metavar="S",
    )

    def budget_for(self, model: str) -> Budget:
        """The limits of a run on `model`: its own, else the budgets' defaults for the model."""
        default = ModelRoute.of(model).setting(self.budgets)
        return Budget(self.max_cost, self.max_requests, self.max_tokens, self.max_turns).or_else(
            default if isinstance(default, Budget) else None
        )


@dataclass(frozen=True)
class UpstreamSection:
    """Upstream calls and their prices"""

    connect_timeout: float = setting(10.0, "seconds a connection to an upstream may take")
    first_byte_timeout: float = setting(300.0, "seconds an upstream's answer may take to start")
    idle_timeout: float = setting(300.0, "the longest gap between two chunks of a stream, in seconds")
    max_body_bytes: int = setting(32 * 1024 * 1024, "a request from OpenCode over this size is refused (413)")
    pricing: Mapping[str, Price] = setting(
        doc="prices of models or groups LiteLLM's map does not know, per million tokens or per token", factory=frozen
    )
    estimate_usage: bool = setting(False, "estimate the tokens of a stream that reports none (flagged `estimated`)")
    prompt_caching: Mapping[str, str] = setting(
        doc="per model or group: how its backend caches prompts: markers (Claude), key (OpenAI) or off",
        factory=frozen,
    )

    @functools.cached_property
    def upstream_limits(self) -> UpstreamLimits:
        """How long the endpoint waits on an upstream, how much of a request it reads (endpoint/limits.py)."""
        return UpstreamLimits(self.connect_timeout, self.first_byte_timeout, self.idle_timeout, self.max_body_bytes)


@dataclass(frozen=True)
class SandboxSection:
    """The sandbox"""

    sandbox: str = setting(
        "auto",
        "confine OpenCode with bubblewrap (default: auto, when it works here)",
        flag="--sandbox",
        group="sandbox",
        choices=SANDBOX_KINDS,
    )
    sandbox_network: str = setting(
        "endpoint",
        "in the sandbox, reach only the run's endpoint (default) or the host's network",
        flag="--sandbox-network",
        group="sandbox",
        choices=SANDBOX_NETWORKS,
    )
    sandbox_allow_write: tuple[str, ...] = setting(
        (),
        "a path the sandboxed run may write besides its workdir; repeatable",
        flag="--sandbox-allow-write",
        group="sandbox",
        metavar="PATH",
        paths=True,
    )
    sandbox_allow_read: tuple[str, ...] = setting(
        (),
        "a path the sandbox hides (in the real HOME or /tmp) that the run may read; repeatable",
        flag="--sandbox-allow-read",
        group="sandbox",
        metavar="PATH",
        paths=True,
    )

    @functools.cached_property
    def sandbox_config(self) -> SandboxConfig:
        """How runs are confined (opencode/sandbox.py)."""
        return SandboxConfig(self.sandbox, self.sandbox_network, self.sandbox_allow_write, self.sandbox_allow_read)


@dataclass(frozen=True)
class StoreSection:
    """What is kept, and where"""

    data_dir: Path = setting(
        doc="where kept sessions and the ledger live (default: $OPENCODE_GATEWAY_HOME, else "
        "~/.local/share/opencode-gateway)",
        factory=default_data_dir,
    )
    ledger: str | None = setting(
        None,
        "the ledger: a file, or a team's postgresql://user@host/db (default: $OPENCODE_GATEWAY_LEDGER, else "
        "<data dir>/ledger.db)",
        flag="--ledger",
        group="ledger",
        metavar="PATH|URL",
        secret=True,
    )
    keep_sessions_days: float | None = setting(
        30.0, "kept sessions unused this many days are removed when a run starts (null: keep every one)"
    )
    diff_max_bytes: int = setting(256 * 1024, "RunResult.files: a text file up to this size comes with a diff")
    executor: str = setting(
        "local",
        "where tasks run: this process (default) or a Ray cluster (pip install 'opencode-gateway[ray]')",
        flag="--executor",
        group="batch",
        choices=("local", "ray"),
        scope="batch",
    )


@dataclass(frozen=True)
class ObservabilitySection:
    """Traces and metrics"""

    otel: Mapping[str, Any] | None = setting(
        None, "OpenTelemetry traces (endpoint, headers); null: only when OTEL_EXPORTER_OTLP_* names a collector"
    )
    metrics_token: str | None = setting(
        None, "a token for serve's /metrics, besides the admin token", scope="serve", secret=True
    )
    metrics_labels: tuple[str, ...] = setting(
        (), "metadata keys serve's metrics are labelled by (a bounded set)", scope="serve"
    )
