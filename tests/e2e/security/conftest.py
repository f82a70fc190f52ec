"""The attacks' settings: a run's, with the tests' Python readable in the sandbox."""

from __future__ import annotations

import sys

import pytest

from opencode_gateway.settings import Settings


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The attacker's script runs on the tests' Python, which lives in a HOME the sandbox hides.
    return settings.replace(timeout=180, sandbox_allow_read=(sys.base_prefix,))
