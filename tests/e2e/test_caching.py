"""Prompt caching through the real LiteLLM proxy: a Claude group gets OpenCode's cache markers at
the provider whatever it is called, and an OpenAI group none. The scripted server speaks
Anthropic's Messages API behind litellm's own anthropic adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from tests.support.gateway_proxy import new_key
from tests.support.litellm_proxy import LiteLLMProxy
from tests.support.scripted_upstream import CachingClaude, Reply, ScriptedUpstream, ToolCall, anthropic_usage, usage

pytestmark = pytest.mark.e2e


def _marked_blocks(body: dict[str, Any]) -> tuple[bool, list[int]]:
    """Whether Anthropic's system blocks carry a marker, and which messages do."""
    system = body.get("system")
    system_marked = isinstance(system, list) and any("cache_control" in block for block in system)
    marked = [
        i
        for i, message in enumerate(body["messages"])
        if isinstance(message.get("content"), list) and any("cache_control" in part for part in message["content"])
    ]
    return system_marked, marked


@pytest.mark.parametrize("group", ["team-coder", "claude-coder"])
def test_a_claude_group_gets_opencodes_cache_markers_whatever_it_is_called(
    group: str, proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(
        Reply(
            tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "greet"})],
            usage=anthropic_usage(2000, 40, cache_write=1500),
        ),
        Reply(text="Done.", usage=anthropic_usage(300, 10, cache_read=1500)),
    )
    result = run(
        "Say hi with bash",
        model=f"litellm_proxy/{group}",
        api_base=proxy.url,
        api_key=new_key(proxy, models=[group]),
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    calls = [r for r in upstream.requests if r["path"] == "/v1/messages"]
    assert len(calls) == 2
    for call in calls:
        system_marked, marked = _marked_blocks(call["body"])
        assert system_marked and marked, json.dumps(call["body"])[:2000]  # where OpenCode marks a Claude prompt
    assert result.usage.cache_read_tokens == 1500 and result.usage.cache_write_tokens == 1500


def test_an_openai_group_gets_a_cache_key_and_no_markers(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="Done.", usage=usage(1000, 10)))
    result = run(
        "Say done",
        model="litellm_proxy/team-a",
        api_base=proxy.url,
        api_key=new_key(proxy, models=["team-a"]),
        workdir=workdir,
        settings=settings,
    )
    assert result.stop_reason == "done", result.error
    [call] = upstream.requests
    assert "cache_control" not in json.dumps(call["body"]) and call["body"].get("prompt_cache_key") == result.run_id


def test_without_the_endpoints_markers_a_team_named_claude_group_has_none(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """What the markers above are the endpoint's doing: with `prompt_caching: off`, OpenCode alone
    marks nothing on a group whose name lacks "claude" (the 4.4x session)."""
    upstream.script(Reply(text="Done.", usage=anthropic_usage(2000, 10)))
    result = run(
        "Say done",
        model="litellm_proxy/team-coder",
        api_base=proxy.url,
        api_key=new_key(proxy, models=["team-coder"]),
        workdir=workdir,
        settings=settings.replace(prompt_caching={"team-coder": "off"}),
    )
    assert result.stop_reason == "done", result.error
    [call] = [r for r in upstream.requests if r["path"] == "/v1/messages"]
    assert _marked_blocks(call["body"]) == (False, [])


def test_a_ten_turn_session_costs_the_same_through_a_team_named_and_a_claude_named_group(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """Measured before: $0.780 through `team-coder`, $0.176 through `claude-coder` (4.4x). Here:
    $0.0572 and $0.0567 on 1.18 (OpenCode's system prompt for a "claude" model id is 300 characters
    shorter), $0.0425 and $0.0430 on 2.1.2 (which marks no prompt for caching itself: the endpoint
    marks both), and $0.243 with the markers off."""
    costs, results = {}, {}
    for group in ("team-coder", "claude-coder", "team-coder-uncached"):
        claude = CachingClaude()
        upstream.script(*[claude] * 10)
        result = run(
            "Take ten steps with bash",
            model=f"litellm_proxy/{group.removesuffix('-uncached')}",
            api_base=proxy.url,
            api_key=new_key(proxy, models=[group.removesuffix("-uncached")]),
            workdir=workdir,
            max_turns=12,
            settings=settings.replace(prompt_caching={"team-coder": "off"} if group.endswith("-uncached") else {}),
        )
        assert result.stop_reason == "done" and result.usage.requests == 10, result.error
        assert result.cost is not None
        costs[group], results[group] = result.cost, result
    # Within 2%: the prompts differ a little by the model's name (1.18's is 300 characters shorter
    # for a "claude" id; 2.x's names the model in it). Measured: 0.9% on 1.18, 1.2% on 2.1.2.
    assert costs["team-coder"] == pytest.approx(costs["claude-coder"], rel=0.02)
    assert costs["team-coder-uncached"] > 2 * costs["claude-coder"]  # what the markers save
    # What the run says caching saved is what the same session cost without it.
    cached = results["team-coder"]
    assert cached.usage.cached_share > 0.7 and results["team-coder-uncached"].usage.cached_share == 0
    assert cached.cache_saved is not None
    assert costs["team-coder"] + cached.cache_saved == pytest.approx(costs["team-coder-uncached"], rel=0.01)
