"""Prompt caching whatever a model group is called: a Claude backend gets cache markers where
OpenCode would put them, an OpenAI one a cache key, any other neither (endpoint/caching.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
import respx

from opencode_gateway.config.settings import Settings
from opencode_gateway.endpoint.caching import cache_style, prepared
from opencode_gateway.endpoint.tagging import Tagging
from opencode_gateway.endpoint.upstream import ProxyUpstream
from opencode_gateway.runs.wiring import upstream_for

GATEWAY = "http://gateway.test"
OPENCODE_BODY = {
    "model": "m",
    "stream": True,
    "messages": [
        {"role": "system", "content": "You are OpenCode..."},
        {"role": "user", "content": "Fix the test"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
    ],
}


@pytest.mark.parametrize(
    ("model", "style"),
    [
        ("anthropic/claude-sonnet-4-5", "markers"),
        ("claude-3-5-haiku-latest", "markers"),
        ("bedrock/us.anthropic.claude-sonnet-4-5-v1:0", "markers"),
        ("vertex_ai/claude-opus-4", "markers"),
        ("openrouter/anthropic/claude-sonnet-4.5", "markers"),
        ("openai/gpt-4o-mini", "cache_key"),
        ("gpt-4.1", "cache_key"),
        ("azure/my-deployment", "cache_key"),
        ("gemini/gemini-2.5-pro", None),
        ("deepseek/deepseek-chat", None),
        ("openrouter/openai/gpt-4o", None),
        ("bedrock/amazon.nova-pro-v1:0", None),
    ],
)
def test_the_backend_is_known_from_the_litellm_model_string(model: str, style: str | None) -> None:
    assert cache_style(model) == style


def test_a_claude_prompt_is_marked_where_opencode_marks_it_unless_it_is_marked_already() -> None:
    marked = prepared(OPENCODE_BODY, "markers", "run_1")
    system, user, assistant, tool = marked["messages"]
    assert "cache_control" in system and "cache_control" not in json.dumps(user)
    assert "cache_control" in assistant["tool_calls"][-1] and "cache_control" not in assistant  # its last part
    assert "cache_control" in tool
    assert "cache_control" not in json.dumps(OPENCODE_BODY)  # a copy: the body given is left as it was
    by_opencode = {
        **OPENCODE_BODY,
        "messages": [
            {**OPENCODE_BODY["messages"][0], "cache_control": {"type": "ephemeral"}},  # type: ignore[index, dict-item]
            *OPENCODE_BODY["messages"][1:],
        ],
    }  # type: ignore[index]
    assert prepared(by_opencode, "markers", "run_1") == by_opencode
    assert prepared(OPENCODE_BODY, "cache_key", "run_1")["prompt_cache_key"] == "run_1"
    assert prepared(OPENCODE_BODY, None, "run_1") == OPENCODE_BODY


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("backend", "added", "absent"),
    [
        ("anthropic/claude-sonnet-4-5", "cache_control", "prompt_cache_key"),
        ("openai/gpt-4o", "prompt_cache_key", "cache_control"),
        ("gemini/gemini-2.5-pro", None, "cache_control"),
    ],
)
@respx.mock(using="httpx")
async def test_a_gateway_groups_backend_is_learned_from_the_gateway_once(
    respx_mock: respx.MockRouter, backend: str, added: str | None, absent: str
) -> None:
    gateway = respx_mock
    info = gateway.get(f"{GATEWAY}/v1/model/info").respond(
        200,
        json={
            "data": [
                {"model_name": "team-coder", "litellm_params": {"model": backend}},
                {"model_name": "other", "litellm_params": {"model": "openai/gpt-4o"}},
            ]
        },
    )
    chat = gateway.post(f"{GATEWAY}/v1/chat/completions").respond(200, json={"choices": []})
    upstream = ProxyUpstream(GATEWAY, "team-coder", "sk-virtual")
    replies = await asyncio.gather(*(upstream.send(OPENCODE_BODY, {}, Tagging(session_id="run_1")) for _ in range(2)))
    for reply in replies:  # two first requests at once (the title's and the turn's): one lookup, both marked
        await reply.aclose()
    await upstream.aclose()
    sent = [json.loads(call.request.content) for call in chat.calls]
    assert info.call_count == 1 and len(sent) == 2
    assert all(absent not in json.dumps(body) and (added is None or added in json.dumps(body)) for body in sent)


@pytest.mark.anyio
@respx.mock(using="httpx")
async def test_the_setting_forces_markers_or_nothing(respx_mock: respx.MockRouter) -> None:
    """Whatever the gateway says the group's backend is (here a Claude): the group's deployments
    are still learned, for what caching saved."""
    gateway = respx_mock
    gateway.get(f"{GATEWAY}/v1/model/info").respond(
        200, json={"data": [{"model_name": "team-coder", "litellm_params": {"model": "anthropic/claude-sonnet-4-5"}}]}
    )
    chat = gateway.post(f"{GATEWAY}/v1/chat/completions").respond(200, json={"choices": []})
    for setting, expected in (("markers", True), ("off", False)):
        upstream = ProxyUpstream(GATEWAY, "team-coder", "sk-virtual", caching=setting)
        await (await upstream.send(OPENCODE_BODY, {}, Tagging())).aclose()
        await upstream.aclose()
        assert ("cache_control" in chat.calls[-1].request.content.decode()) is expected
        assert upstream.backends == ("anthropic/claude-sonnet-4-5",)


def test_the_setting_names_a_model_or_its_group() -> None:
    settings = Settings(api_base=GATEWAY, prompt_caching={"team-coder": "markers", "openai/gpt-4o": "off"})
    assert upstream_for(settings, "litellm_proxy/team-coder")._caching == "markers"  # type: ignore[union-attr]
    assert upstream_for(settings, "openai/gpt-4o")._caching is None  # type: ignore[union-attr]
    assert upstream_for(settings, "openai/gpt-4o-mini")._caching == "cache_key"  # type: ignore[union-attr]
