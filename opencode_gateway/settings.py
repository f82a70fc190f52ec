"""Settings: config.yaml and flags, resolved into one frozen value before anything starts.

A value written `os.environ/NAME` is read from the environment, as LiteLLM's own config does, so a
config file can be committed without the keys it uses; `api_key: file:PATH` reads the key from a
file.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import shutil
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

from ._yaml import load_yaml
from .accounting.budget import Budget, PeriodBudget
from .accounting.pricing import Price
from .credentials import gateway_keys, held_secrets
from .errors import SettingsError
from .litellm_gateway.protocol import GATEWAY_PREFIX, Mode, mode_of
from .opencode.config import PERMISSION_MODES, check_permissions
from .opencode.sandbox import SANDBOX_KINDS, SANDBOX_NETWORKS

__all__ = ["PERMISSION_MODES", "UNSET", "RunSettings", "Settings", "beside", "check_attribution", "check_permissions",
           "check_routes",
           "default_data_dir", "json_kinds", "load_settings", "load_yaml"]

ENV_PREFIX = "os.environ/"
FILE_PREFIX = "file:"


def default_data_dir() -> Path:
    """Where kept sessions (and later the ledger) live: $OPENCODE_GATEWAY_HOME or the XDG data dir."""
    explicit = os.environ.get("OPENCODE_GATEWAY_HOME")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "opencode-gateway"


def beside(file: Path, paths: Iterable[str]) -> list[str]:
    """Paths named in `file` (a settings or tasks file), found relative to the file's folder."""
    return [str(file.parent / Path(path).expanduser()) for path in paths]


def _budget(name: str, value: Any) -> Budget | PeriodBudget:
    """A `budgets:` entry: a model's default limits, or (with `per`) a metadata key's period cap."""
    if isinstance(value, (Budget, PeriodBudget)):
        return value
    if isinstance(value, Mapping) and "per" in value:
        return PeriodBudget.from_setting(name, value)
    return Budget.from_setting(f"budgets.{name}", value)


class _Unset:
    """"Not given": keeps a setting as it is, where None would set it to none (as httpx's
    USE_CLIENT_DEFAULT)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Settings:
    """Everything one run needs to know, after the file and the flags were merged."""

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
    ledger: Path | None = None  # None: <data_dir>/ledger.db
    env: tuple[str, ...] = ()  # variables passed to OpenCode on purpose (its environment is an allowlist)
    sandbox: str = "auto"  # "auto" (bwrap when it works here), "bwrap" or "none" (opencode/sandbox.py)
    sandbox_network: str = "endpoint"  # "endpoint": only the run's endpoint is reachable; "host"
    sandbox_allow_write: tuple[str, ...] = ()  # paths the sandboxed run may write besides its workdir
    sandbox_allow_read: tuple[str, ...] = ()  # paths hidden by the sandbox (the real HOME, /tmp) to show
    executor: str = "local"  # where batch tasks run: "local" (this process) or "ray" (ray_executor.py)
    keep_sessions_days: float | None = 30.0  # kept sessions unused this long are pruned at a run's start
    # The environment, read once by validated(): the gateway's URL and key fall back to it, and
    # every credential in it is a secret to redact. None until then (read when asked).
    environ: Mapping[str, str] | None = field(default=None, repr=False, compare=False, metadata={"setting": False})
    # Files the gateway read its settings or a key from: a sandbox hides them wherever they are.
    secret_files: tuple[Path, ...] = field(default=(), repr=False, metadata={"setting": False})

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a batch task shipped to a Ray worker) as plain values: a mappingproxy cannot be.
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return _unpickled, (type(self), {name: dict(value) if isinstance(value, MappingProxyType) else value
                                         for name, value in values.items()})

    @property
    def budget(self) -> Budget:
        """The run's limits: the ones set directly, else the model's (or its group's) defaults."""
        return self.budget_for(self.model or "")

    def budget_for(self, model: str) -> Budget:
        """The limits of a run on `model`."""
        default = self.budgets.get(model) or self.budgets.get(model.removeprefix(GATEWAY_PREFIX))
        return Budget(self.max_cost, self.max_requests, self.max_tokens, self.max_turns).or_else(
            default if isinstance(default, Budget) else None)

    def period_caps(self, metadata: Mapping[str, Any]) -> list[tuple[PeriodBudget, str]]:
        """The caps per metadata value and period (`budgets:` entries with `per`) that apply to a
        run with `metadata`, each with the run's value of its key."""
        return [(cap, str(metadata[cap.key])) for cap in self.budgets.values()
                if isinstance(cap, PeriodBudget) and cap.key in metadata]

    @property
    def ledger_path(self) -> Path:
        return self.ledger or self.data_dir / "ledger.db"

    @property
    def mode(self) -> Mode:
        """`gateway` for a LiteLLM proxy model group (`litellm_proxy/<group>`), else `sdk`."""
        return mode_of(self.model or "")

    def replace(self, **changes: Any) -> Settings:
        """A copy with the given fields changed (None too: it clears an optional setting); a field
        given as UNSET keeps its value."""
        given = {name: value for name, value in changes.items() if value is not UNSET}
        if "pricing" in given:  # per model: a value, or a setting mapping to check and turn into one
            given["pricing"] = _frozen({model: value if isinstance(value, Price) else
                                        Price.from_setting(f"pricing.{model}", value)
                                        for model, value in dict(given["pricing"]).items()})
        if "budgets" in given:
            given["budgets"] = _frozen({name: _budget(name, value) for name, value in dict(given["budgets"]).items()})
        for name in ("metadata", "opencode_config", "mcp", "prompt_caching", "routes"):
            if name in given:
                given[name] = _frozen(given[name])
        for name in ("tags", "disable_tools", "tag_metadata_keys", "skills", "env", "sandbox_allow_write",
                     "sandbox_allow_read"):
            if name in given:
                given[name] = tuple(given[name])
        return dataclasses.replace(self, **given)

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
        """The variables named by `env`, checked: each must be set, not one opencode-gateway
        manages, and not hold a key the gateway uses (which would hand it to the agent)."""
        passed = {}
        environ = self._environ
        keys = gateway_keys(environ, (self.api_key, self.gateway_api_key))
        for name in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise SettingsError(f"--env {name!r} is not a variable name: give NAME (letters, digits, _)")
            if name in _MANAGED_ENV or name.startswith(("XDG_", "OPENCODE_")):
                raise SettingsError(f"--env {name}: opencode-gateway sets {name} itself for OpenCode")
            if name not in environ:
                raise SettingsError(f"--env {name}: {name} is not set in this environment")
            value = environ[name]
            if any(key in value for key in keys):
                raise SettingsError(f"--env {name}: {name} holds a key the gateway uses, which the agent must "
                                    "never see; give the agent a key of its own in another variable")
            passed[name] = value
        return passed

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
        return held_secrets(self._environ, (self.api_key, self.gateway_api_key))


def _unpickled(kind: type[Settings], values: dict[str, Any]) -> Settings:
    thawed: dict[str, Any] = {name: MappingProxyType(value) if isinstance(value, dict) else value
                              for name, value in values.items()}
    return kind(**thawed)


@dataclass(frozen=True)
class RunSettings(Settings):
    """Settings that passed `validated()`: a model is set, and the environment was read."""

    model: str = ""


def _check(settings: RunSettings) -> None:
    """What validated() checks once the environment is read."""
    check_routes(settings.model, settings.routes)
    for model in filter(None, (settings.model, settings.small_model, *settings.routes.values())):
        if mode_of(model) != "gateway":
            continue
        if model == GATEWAY_PREFIX:
            raise SettingsError("model 'litellm_proxy/' names no model group: use litellm_proxy/<group>")
        if not settings.gateway_api_base:
            raise SettingsError(
                f"model {model} routes through a LiteLLM gateway but no gateway URL is set: "
                "pass --api-base URL or set LITELLM_PROXY_API_BASE"
            )
    check_permissions(settings.permissions)
    check_attribution(settings.tags, settings.metadata, settings.tag_metadata_keys)
    for model, style in settings.prompt_caching.items():
        if style not in ("markers", "key", "off"):
            raise SettingsError(f"prompt_caching.{model} is {style!r}: use markers (Claude), key (OpenAI) or off")
    for name in ("timeout", "connect_timeout", "first_byte_timeout", "idle_timeout"):
        if not 0 < getattr(settings, name) < math.inf:
            raise SettingsError(f"{name} {getattr(settings, name)} is invalid: give a number of seconds above 0")
    days = settings.keep_sessions_days
    if days is not None and not 0 <= days < math.inf:
        raise SettingsError(f"keep_sessions_days {days} is invalid: give a number of days, 0 or more (or null)")
    for name in ("max_cost", "max_requests", "max_tokens", "max_turns", "max_body_bytes", "diff_max_bytes"):
        value = getattr(settings, name)
        if value is not None and not 0 < value < math.inf:  # NaN fails too: a limit that is never hit
            raise SettingsError(f"{name} {value} is invalid: give a number above 0")
    if settings.sandbox not in SANDBOX_KINDS:
        raise SettingsError(f"sandbox {settings.sandbox!r} is not known: use {', '.join(SANDBOX_KINDS)}")
    if settings.sandbox_network not in SANDBOX_NETWORKS:
        raise SettingsError(f"sandbox_network {settings.sandbox_network!r} is not known: use "
                            f"{', '.join(SANDBOX_NETWORKS)}")
    for path in (*settings.sandbox_allow_write, *settings.sandbox_allow_read):
        if not Path(path).is_absolute() or not Path(path).exists():
            raise SettingsError(f"sandbox path {path!r} must be an absolute path that exists")
    settings.passed_env()
    for name, server in settings.mcp.items():
        _check_mcp(name, server)


def check_routes(model: str, routes: Mapping[str, str]) -> None:
    """Each route names a background purpose and a model; a summary or compaction carries the
    whole conversation, so its model must take at least as much input as the run's model, where
    LiteLLM's map knows both (a gateway group's window only the gateway knows)."""
    from .accounting.price_map import context_window
    from .opencode.purpose import BACKGROUND

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
                "window, or drop the route (it then goes where OpenCode sends it)")


def _check_mcp(name: str, server: Any) -> None:
    """An MCP server as OpenCode's `mcp` config takes it, whose command exists: OpenCode itself
    would start the run without the server's tools, saying so only in its log."""
    where = f"mcp server {name!r}"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or not isinstance(server, Mapping):
        raise SettingsError(f"{where}: give a name of letters, digits, _ or -, and a mapping with type local "
                            "(command: [program, args...]) or remote (url)")
    if server.get("type") == "remote":
        if not isinstance(server.get("url"), str):
            raise SettingsError(f"{where}: a remote server needs a url")
        return
    command = server.get("command")
    if server.get("type") != "local" or not isinstance(command, list) or not command \
            or not all(isinstance(part, str) for part in command):
        raise SettingsError(f"{where}: a local server needs type: local and command: [program, args...]")
    program = command[0]
    found = os.access(program, os.X_OK) if os.sep in program else shutil.which(program) is not None
    if not found:
        raise SettingsError(f"{where}: its command {program!r} is not found or not executable: install it or fix "
                            "the path (under --sandbox bwrap a program in the real HOME also needs "
                            "--sandbox-allow-read)")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MANAGED_ENV = {"HOME", "PWD", "NO_PROXY", "no_proxy"}


def json_kinds(annotation: Any) -> tuple[type, ...]:
    """The JSON (and YAML) value types a setting or option of type `annotation` is written as:
    a text for str and paths, a list for sequences, an object for mappings and JSON schemas."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return tuple(dict.fromkeys(kind for arg in typing.get_args(annotation) if arg is not type(None)
                                   for kind in json_kinds(arg)))
    if annotation is float:
        return (int, float)
    if annotation in (str, int, bool):
        return (annotation,)
    if annotation is Any or annotation is Mapping or origin in (dict, Mapping):
        return (dict,)
    if origin in (tuple, list, Sequence):
        return (list,)
    if origin is os.PathLike or isinstance(annotation, type) and issubclass(annotation, os.PathLike):
        return (str,)
    raise TypeError(f"no JSON form for {annotation!r}")


# What config.yaml may contain (every setting), and the types each key may be written as.
_HINTS = typing.get_type_hints(Settings)  # once: each call resolves every annotation (~1 ms)
_FILE_KEYS: dict[str, tuple[type, ...]] = {
    f.name: json_kinds(_HINTS[f.name]) for f in dataclasses.fields(Settings) if f.metadata.get("setting", True)
}


def check_attribution(tags: Iterable[Any], metadata: Mapping[str, Any], tag_metadata_keys: Iterable[str]) -> None:
    """Tags and metadata as the gateway can carry them: raises SettingsError naming the bad one."""
    for tag in tags:
        if not isinstance(tag, str) or not tag or "," in tag or tag != tag.strip() or _CONTROL.search(tag):
            raise SettingsError(f"tag {tag!r} is invalid: tags are non-empty text with no comma, edge spaces "
                                "or control characters (CR/LF)")
    for key in tag_metadata_keys:
        value = str(metadata.get(key, ""))
        if "," in value or _CONTROL.search(value):
            raise SettingsError(f"metadata {key}={metadata[key]!r} contains a comma or a control character "
                                f"(CR/LF), but {key} is also sent as a tag (tag_metadata_keys): remove it")


def _resolve_env(value: Any, where: str) -> Any:
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        name = value[len(ENV_PREFIX) :]
        if name not in os.environ:
            raise SettingsError(f"{where}: environment variable {name} is not set (referenced as {value})")
        return os.environ[name]
    if isinstance(value, dict):
        return {k: _resolve_env(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_env(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _key_from_file(settings_file: Path, name: str) -> str:
    """`api_key: file:PATH`: the key in PATH (beside the settings file when relative)."""
    path = Path(beside(settings_file, [name])[0])
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{settings_file}: api_key: cannot read the key file {path} ({exc})") from None
    if not key:
        raise SettingsError(f"{settings_file}: api_key: the key file {path} is empty")
    return key


def load_settings(path: str | os.PathLike[str] | None, base: Settings | None = None) -> Settings:
    """Read a config.yaml into Settings (over `base`); None reads nothing."""
    base = base or Settings()
    if path is None:
        return base
    import yaml

    file = Path(path)
    try:
        raw = load_yaml(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"{file}: cannot read the settings file ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{file}: not UTF-8 text (byte {exc.start}): save the settings file as UTF-8") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise SettingsError(f"{file}: not valid YAML{at}{f' ({problem})' if problem else ''}") from exc
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise SettingsError(f"{file}: the top level must be a mapping of settings")
    values: dict[str, Any] = {"secret_files": (*base.secret_files, file.resolve())}
    for key, value in raw.items():
        if key not in _FILE_KEYS:
            close = difflib.get_close_matches(str(key), list(_FILE_KEYS), n=1, cutoff=0.6)
            raise SettingsError(f"{file}: unknown setting {key!r}" + (f"; did you mean {close[0]}?" if close else
                                f"; known settings: {', '.join(_FILE_KEYS)}"))
        if value is None:
            continue
        value = _resolve_env(value, f"{file}: {key}")
        expected = _FILE_KEYS[key]
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            names = " or ".join(t.__name__ for t in expected)
            raise SettingsError(f"{file}: {key} must be {names}, not {type(value).__name__}")
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise SettingsError(f"{file}: {key} must be a list of strings")
        if key in ("skills", "sandbox_allow_write", "sandbox_allow_read") and isinstance(value, list):
            value = [str(Path(p).resolve()) for p in beside(file, value)]  # paths in a settings file: beside it
        if key == "api_key" and isinstance(value, str) and value.startswith(FILE_PREFIX):
            key_file = Path(beside(file, [value[len(FILE_PREFIX):]])[0])
            values["secret_files"] = (*values.get("secret_files", ()), key_file)
            value = _key_from_file(file, value[len(FILE_PREFIX):])
        values[key] = Path(value).expanduser() if isinstance(value, str) and key in ("data_dir", "ledger") else value
    try:
        return base.replace(**values)  # which checks prices and budgets
    except SettingsError as exc:
        raise SettingsError(f"{file}: {exc}") from exc
