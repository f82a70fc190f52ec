"""What a running OpenCode (`opencode run --format json`) holds, read from /proc by a test while
OpenCode waits for the scripted model's answer: its argv, its environment and every file of its
private folder. Tests of secrets look for a key in each."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["PRINT_RUN_TOKEN", "opencode_as_seen"]

# A bash command an agent runs to print its run's endpoint token: OpenCode's config names the
# token's file ({file:...}), and the agent may read it (it is how OpenCode gets the token).
PRINT_RUN_TOKEN = (
    'f=$(printenv OPENCODE_CONFIG_CONTENT | grep -o "{file:[^}]*}" | head -1); f=${f#"{file:"}; cat "${f%"}"}"'
)


def opencode_as_seen() -> dict[str, Any]:
    """`cmdline` and `environ` (raw bytes), `config` (the OPENCODE_CONFIG_CONTENT it was given)
    and `files` (path -> bytes) of the OpenCode running now; {} when none is found. OpenCode 2 is
    two processes, `run --standalone` and the server it started (`serve --stdio`): the cmdline
    and environ are both of theirs, joined."""
    seen: dict[str, Any] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"--format\0json" not in cmdline and b"serve\0--stdio" not in cmdline:
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            env = dict(v.split(b"=", 1) for v in environ.split(b"\0") if b"=" in v)
            private = Path(env[b"XDG_CONFIG_HOME"].decode()).parent
            seen["cmdline"] = seen.get("cmdline", b"") + cmdline
            seen["environ"] = seen.get("environ", b"") + environ
            seen["config"] = json.loads(env[b"OPENCODE_CONFIG_CONTENT"])
            seen["files"] = {str(f): f.read_bytes() for f in private.rglob("*") if f.is_file()}
        except (OSError, KeyError, ValueError):
            continue
    return seen
