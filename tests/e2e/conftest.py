"""Fixtures of the end-to-end tests: a real `opencode-gateway serve` process and its environment;
a real headless Chromium (Debian's, driven by Playwright), and where the tests' screenshots go."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.phoenix import Phoenix
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


ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Missing is a failure, not a skip: scripts/setup installs Debian's chromium and Playwright.
    One a module: Playwright's sync API holds an event loop while it runs, and anyio's tests (in
    other modules) need none to be running."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no chromium on PATH: run scripts/setup (it installs Debian's chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], f"the page's script failed: {errors}"


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def phoenix() -> Iterator[Phoenix]:
    """Arize Phoenix receiving OTLP on loopback; shared by the session (each test finds its own
    trace by its run's id)."""
    started = Phoenix()
    try:
        yield started.start()
    finally:
        started.stop()
