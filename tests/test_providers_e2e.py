"""SDK mode against servers speaking each provider's own protocol, behind litellm's real adapters:
the cost is exact, the provider's own report, or flagged unpriced; never a silent $0."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted_upstream import Reply, ScriptedUpstream, usage

from opencode_gateway import run
from opencode_gateway.settings import Settings

pytestmark = pytest.mark.e2e


def test_openrouter_is_booked_at_the_cost_it_reports(upstream: ScriptedUpstream, workdir: Path,
                                                    settings: Settings) -> None:
    """OpenRouter reports what it charged in `usage.cost`; LiteLLM's map prices no OpenRouter model
    (the run was booked at $0.000000 before)."""
    upstream.script(Reply(text="Done.", usage=usage(1000, 50, cost=0.0123)))
    result = run("Say done", model="openrouter/anthropic/claude-3.5-sonnet", api_base=upstream.url,
                 api_key="sk-or-test", workdir=workdir, settings=settings)
    assert result.stop_reason == "done", result.error
    [request] = result.requests
    assert (request.cost.usd, request.cost.source) == (0.0123, "reported") and result.cost == 0.0123
