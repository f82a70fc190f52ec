"""SDK mode against servers speaking each provider's own protocol, behind litellm's real adapters:
the cost is exact, the provider's own report, or flagged unpriced; never a silent $0."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

from opencode_gateway import run
from opencode_gateway.opencode.lines import StepFinish
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


def test_opencode_shows_the_cost_the_ledger_books(upstream: ScriptedUpstream, workdir: Path,
                                                 settings: Settings) -> None:
    """OpenCode's own figure (its TUI's "spent") comes from the prices the generated config gives
    it: the same as the ledger's, where the price is known (it showed $0.00 before)."""
    upstream.script(Reply(tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "greet"})],
                          usage=usage(12_000, 80, cached=4000)),
                    Reply(text="Done.", usage=usage(12_500, 20, cached=12_000)))
    result = run("Say hi with bash", model="openai/gpt-4o-mini", api_base=upstream.url, api_key="sk-x",
                 workdir=workdir, settings=settings)
    assert result.stop_reason == "done", result.error
    shown = sum(e.cost or 0.0 for e in result.events if isinstance(e, StepFinish))
    assert result.cost is not None and shown == pytest.approx(result.cost, rel=1e-9)
