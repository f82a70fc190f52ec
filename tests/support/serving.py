"""Launching OpenCode through a running `opencode-gateway serve`, as a user does, and reading what
it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from opencode_gateway.accounting.ledger import Ledger
from opencode_gateway.config.settings import Settings
from opencode_gateway.serve.server import server_app

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


@asynccontextmanager
async def serve_client(settings: Settings, ledger: Ledger, admin_token: str) -> AsyncIterator[httpx.AsyncClient]:
    """serve's app in this process, and a client of it; its sessions closed after."""
    app, router = server_app(settings, ledger, admin_token)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        yield client
    router.close()
    for upstream in router.upstreams.values():
        await upstream.aclose()
