"""What OpenCode is told to be in a run or a launch: its models, agent, permissions, tools, MCP
servers, the user's own config and the variables passed to it on purpose.

One frozen value that checks itself, built from the settings (config/settings.py composes it), so this
package never reads the settings and a bad value fails before anything starts, naming the fix.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import SettingsError
from .config import check_permissions

__all__ = ["AgentConfig"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MANAGED_ENV = frozenset({"HOME", "PWD", "NO_PROXY", "no_proxy"})  # set for OpenCode by opencode/config.py


@dataclass(frozen=True)
class AgentConfig:
    model: str
    small_model: str | None = None  # OpenCode's background calls (titles, summaries); None: the model
    agent: str = "build"
    permissions: str | None = None  # None: the agent's own restrictions (build has none: full)
    disable_tools: tuple[str, ...] = ()
    opencode_config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    mcp: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # OpenCode's `mcp` shape
    env: tuple[str, ...] = ()  # variables passed to OpenCode on purpose (its environment is an allowlist)

    def check(self, environ: Mapping[str, str], keys: Iterable[str]) -> None:
        """Raise SettingsError naming what is wrong and how to fix it."""
        check_permissions(self.permissions)
        for name, server in self.mcp.items():
            _check_mcp(name, server)
        self.passed_env(environ, keys)

    def passed_env(self, environ: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
        """The variables named by `env`, checked: each must be set, not one opencode-gateway
        manages, and not hold one of `keys` (the gateway's, which would hand it to the agent)."""
        keys = tuple(keys)
        passed = {}
        for name in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise SettingsError(f"--env {name!r} is not a variable name: give NAME (letters, digits, _)")
            if name in _MANAGED_ENV or name.startswith(("XDG_", "OPENCODE_")):
                raise SettingsError(f"--env {name}: opencode-gateway sets {name} itself for OpenCode")
            if name not in environ:
                raise SettingsError(f"--env {name}: {name} is not set in this environment")
            value = environ[name]
            if any(key in value for key in keys):
                raise SettingsError(
                    f"--env {name}: {name} holds a key the gateway uses, which the agent must "
                    "never see; give the agent a key of its own in another variable"
                )
            passed[name] = value
        return passed


def _check_mcp(name: str, server: Any) -> None:
    """An MCP server as OpenCode's `mcp` config takes it, whose command exists: OpenCode itself
    would start the run without the server's tools, saying so only in its log."""
    where = f"mcp server {name!r}"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or not isinstance(server, Mapping):
        raise SettingsError(
            f"{where}: give a name of letters, digits, _ or -, and a mapping with type local "
            "(command: [program, args...]) or remote (url)"
        )
    if server.get("type") == "remote":
        if not isinstance(server.get("url"), str):
            raise SettingsError(f"{where}: a remote server needs a url")
        return
    command = server.get("command")
    if (
        server.get("type") != "local"
        or not isinstance(command, list)
        or not command
        or not all(isinstance(part, str) for part in command)
    ):
        raise SettingsError(f"{where}: a local server needs type: local and command: [program, args...]")
    program = command[0]
    found = os.access(program, os.X_OK) if os.sep in program else shutil.which(program) is not None
    if not found:
        raise SettingsError(
            f"{where}: its command {program!r} is not found or not executable: install it or fix "
            "the path (under --sandbox bwrap a program in the real HOME also needs "
            "--sandbox-allow-read)"
        )
