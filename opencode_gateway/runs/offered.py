"""What OpenCode offered the model, read from its requests: the tools (a held call to a tool it
did not offer is refused unasked), and which MCP servers offered theirs (a server that offered
none failed to start, and OpenCode says so only in its log)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from ..config.settings import RunSettings

__all__ = ["connected_servers", "offering_servers", "silent_mcp_servers", "tool_names"]


def tool_names(body: Mapping[str, Any]) -> set[str]:
    return {
        tool["function"]["name"]
        for tool in body.get("tools") or ()
        if isinstance(tool, Mapping)
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
    }


# OpenCode 2 offers an MCP server's tools in its Code Mode catalog, for `execute`'s code to call
# (`tools.<server>.<tool>(...)`): in the system prompt, or in a later user message
# (`<system-update>The Code Mode tool catalog has changed...`) once the server has connected.
_CATALOG_ENTRY = re.compile(r"\btools\.([A-Za-z0-9_-]+)\.")


def offering_servers(body: Mapping[str, Any], tools: Collection[str], servers: Collection[str]) -> set[str]:
    """The MCP servers among `servers` whose tools a request (offering `tools`, its tool_names)
    offers: as tools of their own (`<server>_<tool>`, 1.18) or in OpenCode 2's Code Mode catalog.
    Only OpenCode's words are read (the system prompt and the user's turns), never a tool's output;
    and nothing when no server is left to find (a request's messages are the run's whole context)."""
    if not servers:
        return set()
    named = {server for server in servers for tool in tools if tool.startswith(f"{server}_")}
    for message in body.get("messages") or ():
        if isinstance(message, Mapping) and message.get("role") in ("system", "user"):
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            named.update(server for server in _CATALOG_ENTRY.findall(text) if server in servers)
    return named


# OpenCode 2's log line for a server that connected: `message="mcp connected" server=<name> tools=<n>`
_CONNECTED = re.compile(r'message="mcp connected" server=(\S+) tools=([1-9][0-9]*)')


def connected_servers(data_home: Path) -> set[str]:
    """The MCP servers OpenCode 2's log (in the run's data home) says connected with tools: one
    that connected after the run's last request offered them too late to be seen in a request.
    (The agent can write that log: the worst it can do is silence this warning.)"""
    try:
        log = (data_home / "opencode" / "log" / "opencode.log").read_text(errors="replace")
    except OSError:
        return set()
    return {server for server, _ in _CONNECTED.findall(log)}


def silent_mcp_servers(settings: RunSettings, offering: set[str], *, asked: bool) -> list[str]:
    """Warnings for the MCP servers none of whose tools OpenCode offered (in a request, or as its
    log says): the server failed to start or to answer (OpenCode goes on without it, saying so only
    in its log). A run that never asked the model with tools (`asked`) cannot tell."""
    if not asked:
        return []
    return [
        f"mcp server {name!r} offered no tools: it failed to start or to list them, or (OpenCode 2) had not "
        "connected when the run ended (check its command and that the sandbox lets it run)"
        for name in settings.mcp
        if name not in offering
    ]
