"""A real headless Chromium (Debian's, driven by Playwright), and where the tests' screenshots go."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
