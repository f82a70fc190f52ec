"""The isolated OpenCode config and environment of one run.

Isolation rests on three facts measured with OpenCode 1.18 (../shared/facts/opencode.md §3):
`OPENCODE_CONFIG_CONTENT` outranks every config file, `OPENCODE_DISABLE_PROJECT_CONFIG=1` keeps a
repository's opencode.json, .opencode/ and AGENTS.md out, and private HOME and XDG dirs hide the
user's own config, credentials and plugins. So the generated config is delivered as content; the
opencode.json written beside it is for people to read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..accounting.price_map import context_window
from ..accounting.pricing import Price, per_million
from ..errors import ConfigConflict, SettingsError
from .generation import DEFAULT, GENERATIONS, Generation

__all__ = [
    "PERMISSION_MODES",
    "PROVIDER_ID",
    "TOOLS",
    "build_config",
    "build_env",
    "check_agent",
    "check_permissions",
    "check_user_config",
    "known_models",
    "make_private_dirs",
    "opencode_model",
    "permission_of",
    "permission_rules",
    "seed_config_dir",
]

PROVIDER_ID = "litellm"
PERMISSION_MODES = ("read-only", "edit", "full")
OPENCODE_VERSION = GENERATIONS[0].pinned  # 1.18: the version its plugin package stub says

# Normalised tool name -> the OpenCode permission keys that switch it off. OpenCode 1.18 gates
# write, edit and patch with one permission (`edit`), so turning off either turns off both.
TOOLS: Mapping[str, tuple[str, ...]] = {
    "read": ("read",),
    "write": ("edit",),
    "edit": ("edit",),
    "bash": ("bash",),
    "glob": ("glob",),
    "grep": ("grep",),
    "ls": ("list",),
    "web_search": ("webfetch", "websearch"),
    "task": ("task",),
    "skill": ("skill",),
    "todowrite": ("todowrite",),
}

# OpenCode's own tools whose permission key is another's (the rest are their own key): what a
# permission rule of TOOLS' keys applies to, as OpenCode checks a call of the native tool.
_PERMISSION_OF_NATIVE = {
    "write": "edit",
    "patch": "edit",
    "multiedit": "edit",
    "apply_patch": "edit",
    "websearch": "webfetch",
}


def permission_of(native_tool: str) -> str:
    """The permission key OpenCode checks a call of `native_tool` against."""
    return _PERMISSION_OF_NATIVE.get(native_tool, native_tool)


# The read-only and edit modes deny everything not listed, MCP tools included.
_READ_ONLY_ALLOWED = ("read", "glob", "grep", "list", "lsp", "skill", "todowrite", "todoread", "task")
# OpenCode 2's `execute` (JavaScript with fetch(), ../../docs/architecture.md) reaches the web
# whatever webfetch's rule says: off with the web. 1.18 has no such tool, and a rule for it is inert.
_NO_WEB = {"execute": "deny"}
# Headless runs cannot answer a prompt, and an unanswered `ask` ends the run silently: never ask.
_NEVER_ASK = {"question": "deny", "doom_loop": "deny"}

# Keys of a user config that would take model calls or permissions out of our hands, and the flag to
# use instead.
_MANAGED_TOP = {
    "provider": "use -m/--model and --api-base",
    "model": "use -m/--model",
    "small_model": "use --small-model",
    "enabled_providers": "use -m/--model (the run's only provider is litellm)",
    "disabled_providers": "use -m/--model (the run's only provider is litellm)",
    "permission": "use --permissions and --disable-tool",
    "tools": "use --disable-tool",
    "plugin": "plugins never load in an isolated run",
}
_MANAGED_PER_AGENT = {"model": "use -m/--model", "permission": "use --permissions", "tools": "use --disable-tool"}

# What OpenCode inherits of the caller's environment; everything else stays out (`--env NAME` adds
# a variable on purpose). Each is needed by OpenCode or by the commands its tools run, and none
# carries a credential: finding tools (PATH), text encoding and dates (LANG, LANGUAGE, LC_*, TZ),
# the terminal of a launched TUI (TERM, COLORTERM), temp files (TMPDIR), the bash tool's shell
# (SHELL) and who the user is for git and friends (USER, LOGNAME).
_INHERITED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "TMPDIR", "SHELL", "USER", "LOGNAME"})


def opencode_model(model: str) -> str:
    """The run's model as OpenCode names it: provider `litellm`, model id = the LiteLLM model string."""
    return f"{PROVIDER_ID}/{model}"


def check_permissions(mode: str | None) -> None:
    """A permission mode, or None: the agent's own (build's is full; plan's forbids edits)."""
    if mode is not None and mode not in PERMISSION_MODES:
        hint = " (a headless run cannot answer permission prompts)" if mode == "ask" else ""
        raise SettingsError(f"permissions {mode!r} is not supported{hint}: use one of {', '.join(PERMISSION_MODES)}")


def permission_rules(
    mode: str | None,
    disable_tools: Iterable[str] = (),
    readable_dirs: Iterable[str] = (),
    mcp_servers: Iterable[str] = (),
) -> dict[str, Any]:
    """OpenCode's `permission` block for a mode, with the disabled tools denied (which also removes
    them from the tools offered to the model). `readable_dirs` lie outside the workdir but may be
    read in every mode: the run's skills, whose files a skill tells the model to read. Mode None
    sets no blanket rule, so an agent's own restrictions apply (a blanket allow would override
    them: `plan` would edit)."""
    check_permissions(mode)
    web = "web_search" not in disable_tools
    rules: dict[str, Any]
    if mode is None:
        rules = {}
    elif mode == "full":
        rules = {"*": "allow"} if web else {"*": "allow", **_NO_WEB}
    else:
        rules = {"*": "deny", **dict.fromkeys(_READ_ONLY_ALLOWED, "allow")}
        if mode == "edit":
            rules["edit"] = "allow"
        # The MCP servers the user configured: their tools (OpenCode names them <server>_<tool>)
        # are the user's choice, in every mode.
        rules.update({f"{server}_*": "allow" for server in mcp_servers})
        # OpenCode allows its skill dirs itself, but our "*": "deny" comes later and would win.
        outside = {f"{directory}/*": "allow" for directory in readable_dirs}
        if outside:
            rules["external_directory"] = {"*": "deny", **outside}
    rules.update(_NEVER_ASK)
    for tool in disable_tools:
        if tool not in TOOLS:
            raise SettingsError(f"cannot disable tool {tool!r}: known tools are {', '.join(TOOLS)}")
        rules.update(dict.fromkeys(TOOLS[tool], "deny"))
    if not web:
        rules.update(_NO_WEB)
    return rules


BUILT_IN_AGENTS = ("build", "plan")  # OpenCode 1.18's primary agents; general and explore are subagents


def check_agent(agent: str, user_config: Mapping[str, Any]) -> None:
    """An agent a run can use: a built-in primary agent, or one the settings define (not as a
    subagent). OpenCode itself falls back to `build` on any other name, silently for the result."""
    defined = {name: entry for section in ("agent", "mode") for name, entry in (user_config.get(section) or {}).items()}
    available = [
        *BUILT_IN_AGENTS,
        *(
            name
            for name, entry in defined.items()
            if name not in BUILT_IN_AGENTS and not (isinstance(entry, Mapping) and entry.get("mode") == "subagent")
        ),
    ]
    if agent not in available:
        raise SettingsError(
            f"agent {agent!r} is not available: use one of {', '.join(available)} (or define it "
            "under opencode_config.agent in the settings)"
        )


def check_user_config(config: Mapping[str, Any]) -> None:
    """Refuse a user OpenCode config that sets a managed key, naming the flag to use instead."""
    for key, flag in _MANAGED_TOP.items():
        if key in config:
            raise ConfigConflict(f"opencode_config sets {key!r}, which opencode-gateway manages: {flag}")
    for section in ("agent", "mode"):
        entries = config.get(section) or {}
        if not isinstance(entries, Mapping):
            raise ConfigConflict(f"opencode_config.{section} must be a mapping of names to settings")
        for name, entry in entries.items():
            for key, flag in _MANAGED_PER_AGENT.items():
                if isinstance(entry, Mapping) and key in entry:
                    raise ConfigConflict(
                        f"opencode_config.{section}.{name} sets {key!r}, which opencode-gateway manages: {flag}"
                    )


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def build_config(
    *,
    model: str,
    base_url: str,
    api_key_ref: str,
    small_model: str | None = None,
    permissions: str | None = None,
    agent: str = "build",
    disable_tools: Sequence[str] = (),
    user_config: Mapping[str, Any] | None = None,
    instructions: Sequence[str] = (),
    readable_dirs: Sequence[str] = (),
    mcp: Mapping[str, Any] | None = None,
    known: Mapping[str, Mapping[str, Any]] | None = None,
    plugins: Sequence[str] = (),
    generation: Generation = DEFAULT,
) -> dict[str, Any]:
    """The complete OpenCode config: the user's keys under ours, each one `generation` reads
    (2.x drops a key it does not know, silently). `api_key_ref` is an OpenCode reference such as
    `{file:/private/token}`, never a key. `plugins`: the run's own (approvals; 1.18: file:// URLs,
    loaded only when argv has no `--pure`; 2.x: folders). `instructions` are files OpenCode 1.18
    adds to the system prompt, after any the user's config lists (2.x reads none: the workspace
    writes them into OpenCode's global AGENTS.md). `small_model` takes OpenCode's
    background calls (titles, summaries); the run's model takes them without it. `known`: what is
    known of a model, in OpenCode's shape: its `cost` (USD per million tokens), so OpenCode's own
    displays show what the ledger says, and its `limit` (context and output tokens), without which
    OpenCode never compacts a conversation before the provider refuses it."""
    known = known or {}
    user_config = user_config or {}
    check_user_config(user_config)
    managed = {
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "LiteLLM via opencode-gateway",
                "options": {"baseURL": base_url, "apiKey": api_key_ref},
                "models": {
                    name: {"name": name, **known.get(name, {})} for name in dict.fromkeys((model, small_model or model))
                },
            }
        },
        "enabled_providers": [PROVIDER_ID],
        "model": opencode_model(model),
        "small_model": opencode_model(small_model or model),
        "autoupdate": False,
        "share": "disabled",
        # Not given, the permissions are the agent's own; build has no restrictions: full.
        "permission": permission_rules(
            permissions or ("full" if agent == "build" else None), disable_tools, readable_dirs, mcp or ()
        ),
    }
    if instructions and generation.number == 1:
        managed["instructions"] = [*user_config.get("instructions", ()), *instructions]
    if mcp:
        managed["mcp"] = dict(mcp)
    if plugins:  # ours only (approvals): the user's config may not name one
        managed["plugin"] = list(plugins)
    return _merge(user_config, managed)


def build_env(
    inherited: Mapping[str, str],
    *,
    private_dir: Path,
    data_dir: Path,
    config: Mapping[str, Any],
    passed: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """OpenCode's environment: an allowlist of the inherited one and the variables `passed` on
    purpose, plus private HOME/XDG dirs, the config as content, and the switches that keep
    OpenCode offline and away from the user's and the repository's own settings."""
    env = {name: value for name, value in inherited.items() if name in _INHERITED or name.startswith("LC_")}
    env.update(passed or {})
    no_proxy = ",".join(filter(None, [inherited.get("NO_PROXY") or inherited.get("no_proxy"), "127.0.0.1,localhost"]))
    env.update(
        HOME=str(private_dir / "home"),
        XDG_CONFIG_HOME=str(private_dir / "config"),
        XDG_CACHE_HOME=str(private_dir / "cache"),
        XDG_STATE_HOME=str(private_dir / "state"),
        XDG_DATA_HOME=str(data_dir),
        OPENCODE_CONFIG_CONTENT=json.dumps(config),
        OPENCODE_DISABLE_PROJECT_CONFIG="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        OPENCODE_DISABLE_SHARE="1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
        OPENCODE_DISABLE_CLAUDE_CODE="1",
        OPENCODE_DISABLE_CLAUDE_CODE_SKILLS="1",
        OPENCODE_DISABLE_FREE_MODELS="1",  # 2.x: a config it dropped never falls back to opencode.ai
        OPENCODE_DISABLE_EXTERNAL_SKILLS="1",
        NO_PROXY=no_proxy,
        no_proxy=no_proxy,
    )
    return env


def make_private_dirs(private_dir: Path) -> None:
    """The private HOME and XDG dirs `build_env` points OpenCode at (0700), its config dir seeded.
    XDG_DATA_HOME is the caller's to make: a run keeps it per session, the TUI across launches."""
    for sub in ("home", "config", "cache", "state"):
        (private_dir / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    seed_config_dir(private_dir / "config")


def seed_config_dir(config_home: Path) -> None:
    """Mark OpenCode's plugin package as installed in its config dir. Otherwise every run starts an
    npm install of @opencode-ai/plugin (a registry fetch, ~1 s) that an isolated run never uses."""
    opencode_dir = config_home / "opencode"
    package_dir = opencode_dir / "node_modules" / "@opencode-ai" / "plugin"
    package_dir.mkdir(parents=True, exist_ok=True)
    dependency = {"@opencode-ai/plugin": OPENCODE_VERSION}
    lock = {
        "name": "opencode",
        "lockfileVersion": 3,
        "requires": True,
        "packages": {
            "": {"dependencies": dependency},
            "node_modules/@opencode-ai/plugin": {"version": OPENCODE_VERSION},
        },
    }
    (opencode_dir / "package.json").write_text(json.dumps({"dependencies": dependency}))
    (opencode_dir / "package-lock.json").write_text(json.dumps(lock))
    (package_dir / "package.json").write_text(json.dumps({"name": "@opencode-ai/plugin", "version": OPENCODE_VERSION}))


# What OpenCode sends as max_tokens when a model's output limit is not given: kept as the cap, so a
# model that may write more is not reserved (budgets) at more than OpenCode asked for before.
_OPENCODE_OUTPUT = 32_000


def known_models(pricing: Mapping[str, Price], *models: str | None) -> dict[str, dict[str, Any]]:
    """What build_config's `known` may say of each model: its prices (the settings' or LiteLLM's)
    and its window (LiteLLM's map; a gateway group's is the gateway's, not known here)."""
    known: dict[str, dict[str, Any]] = {}
    for model in filter(None, models):
        facts: dict[str, Any] = {}
        cost = per_million(model, pricing)
        if cost is not None:
            facts["cost"] = cost
        window = context_window(model)
        if window is not None:
            facts["limit"] = {"context": window[0], "output": min(window[1] or _OPENCODE_OUTPUT, _OPENCODE_OUTPUT)}
        known[model] = facts
    return known
