"""Fixtures of the end-to-end tests: a real `opencode-gateway serve` process and its environment."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.serving import CLI


@pytest.fixture
def gateway_home(tmp_path: Path) -> Path:
    return tmp_path / "gateway-home"


@pytest.fixture
def env(gateway_home: Path, opencode_bin: str) -> dict[str, str]:
    return {**os.environ, "OPENCODE_GATEWAY_HOME": str(gateway_home), "OPENCODE_BIN": opencode_bin}


@pytest.fixture
def server(upstream: ScriptedUpstream, gateway_home: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--api-base", upstream.url, "--api-key", "sk-provider"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    state = gateway_home / "serve" / "server.json"
    deadline = time.monotonic() + 30
    while not state.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "serve did not start within 30 s"
        time.sleep(0.1)
    yield process
    if process.poll() is None:
        process.kill()
        process.wait(10)
