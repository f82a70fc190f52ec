"""Prompt caching through the real LiteLLM proxy: a Claude group gets OpenCode's cache markers at
the provider whatever it is called, and an OpenAI group none. The scripted server speaks
Anthropic's Messages API behind litellm's own anthropic adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from litellm_proxy import LiteLLMProxy
from scripted_upstream import Reply, ScriptedUpstream, ToolCall, anthropic_usage, usage

from opencode_gateway import run
from opencode_gateway.settings import Settings
from tests.gateway_proxy import new_key

pytestmark = pytest.mark.e2e


def _marked_blocks(body: dict[str, Any]) -> tuple[bool, list[int]]:
    """Whether Anthropic's system blocks carry a marker, and which messages do."""
    system = body.get("system")
    system_marked = isinstance(system, list) and any("cache_control" in block for block in system)
    marked = [i for i, message in enumerate(body["messages"]) if isinstance(message.get("content"), list)
              and any("cache_control" in part for part in message["content"])]
    return system_marked, marked


@pytest.mark.parametrize("group", ["team-coder", "claude-coder"])
def test_a_claude_group_gets_opencodes_cache_markers_whatever_it_is_called(
    group: str, proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "greet"})],
              usage=anthropic_usage(2000, 40, cache_write=1500)),
        Reply(text="Done.", usage=anthropic_usage(300, 10, cache_read=1500)))
    result = run("Say hi with bash", model=f"litellm_proxy/{group}", api_base=proxy.url,
                 api_key=new_key(proxy, models=[group]), workdir=workdir, settings=settings)
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
    result = run("Say done", model="litellm_proxy/team-a", api_base=proxy.url,
                 api_key=new_key(proxy, models=["team-a"]), workdir=workdir, settings=settings)
    assert result.stop_reason == "done", result.error
    [call] = upstream.requests
    assert "cache_control" not in json.dumps(call["body"]) and call["body"].get("prompt_cache_key") == result.run_id


def test_without_the_endpoints_markers_a_team_named_claude_group_has_none(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """What the markers above are the endpoint's doing: with `prompt_caching: off`, OpenCode alone
    marks nothing on a group whose name lacks "claude" (the 4.4x session)."""
    upstream.script(Reply(text="Done.", usage=anthropic_usage(2000, 10)))
    result = run("Say done", model="litellm_proxy/team-coder", api_base=proxy.url,
                 api_key=new_key(proxy, models=["team-coder"]), workdir=workdir,
                 settings=settings.replace(prompt_caching={"team-coder": "off"}))
    assert result.stop_reason == "done", result.error
    [call] = [r for r in upstream.requests if r["path"] == "/v1/messages"]
    assert _marked_blocks(call["body"]) == (False, [])


class CachingClaude:
    """A Claude that caches as Anthropic does, closely enough to price a session: a request's
    prefix up to its last `cache_control` marker (tools, then system, then messages) is written to
    the cache, and read from it by a later request that starts with the same prefix. Tokens are
    the JSON's characters over four. Nine turns call bash, the tenth answers."""

    def __init__(self) -> None:
        self.cached: list[str] = []  # the blocks of the longest prefix written so far
        self.turns = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        blocks = [json.dumps(tool, sort_keys=True) for tool in body.get("tools") or ()]
        system = body.get("system") or []
        for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
            blocks.append(json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True))
        marks = [len(blocks) - 1] if isinstance(system, list) and any("cache_control" in b for b in system) else []
        for message in body["messages"]:
            content = message["content"]
            for part in [{"type": "text", "text": content}] if isinstance(content, str) else content:
                blocks.append(json.dumps({"role": message["role"],
                                          **{k: v for k, v in part.items() if k != "cache_control"}}, sort_keys=True))
                if "cache_control" in part:
                    marks.append(len(blocks) - 1)
        total = sum(map(len, blocks)) // 4
        shared = 0
        while shared < min(len(blocks), len(self.cached)) and blocks[shared] == self.cached[shared]:
            shared += 1
        read = sum(map(len, blocks[:shared])) // 4 if marks and shared else 0
        written = 0
        if marks:
            prefix = blocks[:max(marks) + 1]
            written = max(sum(map(len, prefix)) // 4 - read, 0)
            self.cached = prefix
        self.turns += 1
        usage = anthropic_usage(total - read - written, 30, cache_read=read, cache_write=written)
        if self.turns < 10:
            return Reply(tool_calls=[ToolCall("bash", {"command": f"echo step {self.turns}",
                                                      "description": f"step {self.turns}"})], usage=usage)
        return Reply(text="All ten steps done.", usage=usage)


def test_a_ten_turn_session_costs_the_same_through_a_team_named_and_a_claude_named_group(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    """Measured before: $0.780 through `team-coder`, $0.176 through `claude-coder` (4.4x). Here:
    $0.0572 and $0.0567 (OpenCode's system prompt for a "claude" model id is 300 characters shorter),
    and $0.243 with the markers off."""
    costs, results = {}, {}
    for group in ("team-coder", "claude-coder", "team-coder-uncached"):
        claude = CachingClaude()
        upstream.script(*[claude] * 10)
        result = run("Take ten steps with bash", model=f"litellm_proxy/{group.removesuffix('-uncached')}",
                     api_base=proxy.url, api_key=new_key(proxy, models=[group.removesuffix("-uncached")]),
                     workdir=workdir, max_turns=12, settings=settings.replace(
                         prompt_caching={"team-coder": "off"} if group.endswith("-uncached") else {}))
        assert result.stop_reason == "done" and result.usage.requests == 10, result.error
        assert result.cost is not None
        costs[group], results[group] = result.cost, result
    assert costs["team-coder"] == pytest.approx(costs["claude-coder"], rel=0.01)
    assert costs["team-coder-uncached"] > 2 * costs["claude-coder"]  # what the markers save
    # What the run says caching saved is what the same session cost without it.
    cached = results["team-coder"]
    assert cached.usage.cached_share > 0.7 and results["team-coder-uncached"].usage.cached_share == 0
    assert cached.cache_saved is not None
    assert costs["team-coder"] + cached.cache_saved == pytest.approx(costs["team-coder-uncached"], rel=0.01)
