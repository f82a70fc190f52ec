"""SDK mode against servers speaking each provider's own protocol, behind litellm's real adapters:
the cost is exact, the provider's own report, or flagged unpriced; never a silent $0."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from opencode_gateway import _litellm, run
from opencode_gateway.config.settings import Settings
from opencode_gateway.opencode.lines import StepFinish
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, anthropic_usage, gemini_usage, usage

pytestmark = pytest.mark.e2e


def test_openrouter_is_booked_at_the_cost_it_reports(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """OpenRouter reports what it charged in `usage.cost`; LiteLLM's map prices no OpenRouter model
    (the run was booked at $0.000000 before)."""
    upstream.script(Reply(text="Done.", usage=usage(1000, 50, cost=0.0123)))
    result = run(
        "Say done",
        model="openrouter/anthropic/claude-3.5-sonnet",
        api_base=upstream.url,
        api_key="sk-or-test",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    [request] = result.requests
    assert (request.cost.usd, request.cost.source) == (0.0123, "reported") and result.cost == 0.0123


def test_opencode_shows_the_cost_the_ledger_books(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, generation: int
) -> None:
    """OpenCode's own figure (its TUI's "spent") comes from the prices the generated config gives
    it: the same as the ledger's, where the price is known (it showed $0.00 before)."""
    upstream.script(
        Reply(
            tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "greet"})],
            usage=usage(12_000, 80, cached=4000),
        ),
        Reply(text="Done.", usage=usage(12_500, 20, cached=12_000)),
    )
    result = run(
        "Say hi with bash",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    if generation == 1:
        shown = sum(e.cost or 0.0 for e in result.events if isinstance(e, StepFinish))
    else:  # 2.x's stream leaves out its last step's finish: its session's total is in its database
        database = settings.data_dir / "sessions" / str(result.session_id) / "opencode" / "opencode.db"
        [(shown,)] = sqlite3.connect(database).execute("SELECT cost FROM session_v2").fetchall()
    assert result.cost is not None and shown == pytest.approx(result.cost, rel=1e-9)


def test_anthropic_native_cache_writes_and_reads_are_priced_exactly(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """Anthropic's Messages API, streamed as Anthropic streams it, behind litellm's anthropic adapter."""
    upstream.script(Reply(text="Done.", usage=anthropic_usage(1000, 50, cache_read=4000, cache_write=2000)))
    result = run(
        "Say done",
        model="anthropic/claude-sonnet-4-5",
        api_base=upstream.url.removesuffix("/v1"),
        api_key="sk-ant-test",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    assert [r["path"] for r in upstream.requests] == ["/v1/messages"]
    [request] = result.requests
    usage = request.usage
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        7000,
        4000,
        2000,
        50,
    )  # every prompt token counted, the cache's among them
    expected = 1000 * 3e-06 + 4000 * 3e-07 + 2000 * 3.75e-06 + 50 * 1.5e-05  # LiteLLM's map, claude-sonnet-4-5
    assert request.cost.usd == pytest.approx(expected, rel=1e-12) and request.cost.source == "litellm"


def test_deepseek_cache_hits_are_priced_exactly(upstream: ScriptedUpstream, workdir: Path, settings: Settings) -> None:
    """DeepSeek reports its cache in fields of its own (prompt_cache_hit_tokens) beside OpenAI's."""
    deepseek_usage = {
        "prompt_tokens": 5000,
        "completion_tokens": 100,
        "total_tokens": 5100,
        "prompt_cache_hit_tokens": 4000,
        "prompt_cache_miss_tokens": 1000,
        "prompt_tokens_details": {"cached_tokens": 4000},
    }
    upstream.script(Reply(text="Done.", usage=deepseek_usage))
    result = run(
        "Say done",
        model="deepseek/deepseek-chat",
        api_base=upstream.url,
        api_key="sk-ds-test",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    [request] = result.requests
    assert request.usage is not None and request.usage.cache_read_tokens == 4000
    expected = 1000 * 2.8e-07 + 4000 * 2.8e-08 + 100 * 4.2e-07  # LiteLLM's map, deepseek/deepseek-chat
    assert request.cost.usd == pytest.approx(expected, rel=1e-12)


def test_azure_records_the_model_that_answered_and_prices_it(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """Azure OpenAI: a deployment in the path, and a first chunk (the prompt filter's) naming no
    model; the record said '' before. The deployment's name prices nothing: the model that
    answered does."""
    upstream.script(Reply(text="Done.", usage=usage(1000, 50, cached=400)))
    result = run(
        "Say done",
        model="azure/my-deployment",
        api_base=upstream.url.removesuffix("/v1"),
        api_key="sk-azure-test",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    assert upstream.requests[0]["path"] == "/openai/deployments/my-deployment/chat/completions"
    [request] = result.requests
    assert request.upstream_model == "gpt-4o-2024-11-20"
    prices = _litellm.load().model_cost["azure/gpt-4o-2024-11-20"]
    expected = (
        600 * prices["input_cost_per_token"]
        + 400 * prices["cache_read_input_token_cost"]
        + 50 * prices["output_cost_per_token"]
    )
    assert request.cost.usd == pytest.approx(expected, rel=1e-12)


def test_gemini_native_cached_and_thought_tokens_are_priced_exactly(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """Gemini's own streamGenerateContent behind litellm's gemini adapter: cached tokens are part of
    the prompt's count, thoughts are not part of the candidates' (litellm adds them)."""
    upstream.script(
        Reply(
            tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "greet"})],
            reasoning="I should greet.",
            usage=gemini_usage(9000, 40, thoughts=120),
        ),
        Reply(text="Done.", usage=gemini_usage(9500, 10, cached=8000, thoughts=30)),
    )
    result = run(
        "Say hi with bash",
        model="gemini/gemini-2.5-flash",
        api_base=upstream.url.removesuffix("/v1") + "/v1beta",
        api_key="gm-test",
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    assert [r["path"] for r in upstream.requests] == ["/v1beta/models/gemini-2.5-flash:streamGenerateContent"] * 2
    assert not any("cache_control" in json.dumps(r["body"]) for r in upstream.requests)  # not a marker provider
    first, second = result.requests
    assert second.usage is not None
    usage = second.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        9500,
        8000,
        40,
        30,
    )
    prices = _litellm.load().model_cost["gemini/gemini-2.5-flash"]
    expected = (
        1500 * prices["input_cost_per_token"]
        + 8000 * prices["cache_read_input_token_cost"]
        + 40 * prices["output_cost_per_token"]
    )  # thoughts at the output price
    assert second.cost.usd == pytest.approx(expected, rel=1e-12) and second.cost.source == "litellm"
    assert second.cost.cache_saved == pytest.approx(
        8000 * (prices["input_cost_per_token"] - prices["cache_read_input_token_cost"]), rel=1e-9
    )
    assert first.usage is not None and (first.usage.output_tokens, first.usage.reasoning_tokens) == (160, 120)
