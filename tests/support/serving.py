"""Launching OpenCode through a running `opencode-gateway serve`, as a user does, and reading what
it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "opencode_gateway"]


def launch(env: dict[str, str], workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "opencode", "-m", "openai/gpt-4o-mini", *args],
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def sessions(stdout: str) -> set[str]:
    return {json.loads(line)["sessionID"] for line in stdout.splitlines() if line.startswith("{")}
