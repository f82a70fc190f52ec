"""The agent fires a burst of parallel calls at the run's endpoint with the run's token, where a
budget's reservation is weakest: a gateway group whose price only the gateway knows (reserved at
$0 before), and a prompt carried in `tools` (the reservation counted `messages` only). Each burst
passes its limit by less than one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from tests.e2e.security.agent import attack
from tests.support.gateway_proxy import new_key
from tests.support.litellm_proxy import LiteLLMProxy
from tests.support.scripted_upstream import Reply, ScriptedUpstream, usage

pytestmark = pytest.mark.e2e
MESSAGES = [{"role": "user", "content": "hi"}]
TEAM_A_CALL = 1000 * 1e-06 + 50 * 4e-06  # team-a's prices in the proxy, for usage(1000, 50)


def test_twenty_parallel_calls_on_a_group_priced_only_by_the_gateway_stay_within_max_cost(
    proxy: LiteLLMProxy, upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    max_cost = 2.5 * TEAM_A_CALL
    slow = Reply(text="slow " * 20, chunk_delay=0.1, usage=usage(1000, 50))
    upstream.script(
        attack(workdir, "parallel", 20, {"model": "m", "stream": True, "messages": MESSAGES}),
        *[slow] * 20,
        Reply(text="done"),
    )
    result = run(
        "Run the script",
        model="litellm_proxy/team-a",
        api_base=proxy.url,
        api_key=new_key(proxy, models=["team-a"]),
        workdir=workdir,
        settings=settings.replace(max_cost=max_cost),
    )
    refused = [r for r in result.requests if r.cost.source == "refused"]
    assert refused, "the attack never reached the endpoint"
    made = [r for r in result.requests if r.cost.source != "refused"]
    assert all(r.cost.usd is not None and r.cost.source != "litellm" for r in made)  # the gateway's figures
    assert result.stop_reason == "budget_exceeded"
    assert len(upstream.requests) <= 3  # OpenCode's call and two of the twenty (before: all twenty)
    assert sum(r.cost.usd or 0.0 for r in made) <= max_cost + TEAM_A_CALL  # over by one call at most


def test_a_prompt_hidden_in_tools_is_counted_against_max_tokens(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "pad", "description": "lorem ipsum " * 7000, "parameters": {"type": "object"}},
        }
    ]
    body = {"model": "m", "stream": True, "messages": MESSAGES, "tools": tools, "max_tokens": 50}
    billed = Reply(text="slow " * 20, chunk_delay=0.1, usage=usage(20_000, 50))  # what a provider bills for it
    upstream.script(attack(workdir, "parallel", 10, body), *[billed] * 10, Reply(text="done"))
    result = run(
        "Run the script",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-provider",
        workdir=workdir,
        settings=settings.replace(max_tokens=40_000),
    )
    assert any(r.cost.source == "refused" for r in result.requests), "the attack never reached the endpoint"
    assert result.stop_reason == "budget_exceeded"
    assert len(upstream.requests) <= 3  # OpenCode's call and two of the ten (before: all ten)
    used = result.usage.input_tokens + result.usage.output_tokens
    assert used <= 40_000 + 20_050  # over by one call at most
