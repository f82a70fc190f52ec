"""SDK mode: the real litellm.acompletion against the scripted model server on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from opencode_gateway import _litellm
from opencode_gateway.accounting.usage import StreamUsageReader
from opencode_gateway.endpoint.tagging import Tagging
from opencode_gateway.endpoint.upstream import SdkUpstream
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.anyio

BODY = {
    "model": "ignored",
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 32000,
    "messages": [{"role": "user", "content": "hi"}],
}


def sdk(upstream: ScriptedUpstream) -> SdkUpstream:
    return SdkUpstream("openai/gpt-4o-mini", upstream.url, "sk-provider")


async def test_stream_carries_text_tool_call_deltas_and_usage(upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(
            text="Writing it",
            tool_calls=[ToolCall("write", {"filePath": "/w/a.py", "content": "x"})],
            usage=usage(1234, 56),
        )
    )
    reply = await sdk(upstream).send(dict(BODY), {}, Tagging())
    raw = await reply.read()
    reader = StreamUsageReader()
    reader.feed(raw)
    assert reply.status_code == 200 and reply.is_stream and not reply.reports_cost
    assert reader.done and reader.usage is not None
    assert (reader.usage.input_tokens, reader.usage.output_tokens) == (1234, 56)
    events = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]
    arguments = "".join(
        call["function"].get("arguments") or ""
        for e in events
        for choice in e["choices"]
        for call in (choice["delta"].get("tool_calls") or [])
    )
    assert json.loads(arguments) == {"filePath": "/w/a.py", "content": "x"}
    sent = upstream.requests[0]["body"]
    assert sent["model"] == "gpt-4o-mini" and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 16384  # gpt-4o-mini's output limit, not OpenCode's 32000
    assert upstream.requests[0]["headers"]["authorization"] == "Bearer sk-provider"


async def test_litellm_callbacks_see_the_runs_tags_and_metadata(upstream: ScriptedUpstream) -> None:
    litellm = _litellm.load()
    from litellm.integrations.custom_logger import CustomLogger

    seen: list[dict[str, Any]] = []

    class Capture(CustomLogger):  # type: ignore[misc]
        async def async_log_success_event(
            self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any
        ) -> None:
            seen.append(kwargs["standard_logging_object"])

    capture = Capture()
    litellm.callbacks.append(capture)
    try:
        upstream.script(Reply(text="ok"))
        reply = await sdk(upstream).send(dict(BODY), {}, Tagging(("team-a",), {"ticket": "ENG-412"}))
        await reply.read()
        for _ in range(100):  # litellm logs from a background task once the stream has ended
            if seen:
                break
            await asyncio.sleep(0.05)
    finally:
        litellm.callbacks.remove(capture)
    assert seen, "litellm's success callback never ran"
    logged = seen[0]
    assert {"harness", "opencode", "team-a"} <= set(logged["request_tags"])
    assert logged["metadata"]["spend_logs_metadata"] == {"ticket": "ENG-412"}


async def test_provider_errors_keep_their_status(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=401, error="Invalid API key"))
    reply = await sdk(upstream).send(dict(BODY, stream=False), {}, Tagging())
    assert reply.status_code == 401
    assert "Invalid API key" in json.loads(await reply.read())["error"]["message"]
