"""A scripted model's tool calls, as each OpenCode generation names its tools: 1.18's `bash`
with `filePath` arguments, 2.x's `shell` with `path` ones (../shared/facts/opencode2.md)."""

from __future__ import annotations

from typing import Any

from tests.support.scripted_upstream import ToolCall

__all__ = ["read", "shell", "write"]


def shell(generation: int, command: str, **more: Any) -> ToolCall:
    if generation == 1:
        return ToolCall("bash", {"command": command, "description": more.pop("description", "run it"), **more})
    return ToolCall("shell", {"command": command, **more})


def read(generation: int, path: str) -> ToolCall:
    return ToolCall("read", {"filePath" if generation == 1 else "path": path})


def write(generation: int, path: str, content: str) -> ToolCall:
    return ToolCall("write", {"filePath" if generation == 1 else "path": path, "content": content})
