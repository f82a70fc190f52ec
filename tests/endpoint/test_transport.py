"""The relay's transport (aiohttp under httpx's API), against the scripted model server on loopback:
what a gateway sends and how its failures reach the relay, as httpx's own errors."""

from __future__ import annotations

import gzip
import socket

import httpx
import pytest

from opencode_gateway.accounting.usage import StreamUsageReader
from opencode_gateway.endpoint.transport import AiohttpTransport
from tests.support.scripted_upstream import Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

BODY = {
    "model": "m",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "hi"}],
}


def client(read: float = 30.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=AiohttpTransport(), timeout=httpx.Timeout(5.0, read=read))


async def test_a_stream_arrives_whole_with_the_request_as_sent(upstream: ScriptedUpstream) -> None:
    upstream.script(*[Reply(text="one two three four", chunk_delay=0.01)] * 3)
    async with client() as http:
        for _ in range(3):  # the connection kept alive between them
            request = http.build_request(
                "POST",
                f"{upstream.url}/chat/completions",
                json=BODY,
                headers={"authorization": "Bearer sk-virtual", "x-litellm-tags": "harness"},
            )
            response = await http.send(request, stream=True)
            reader = StreamUsageReader()
            async for piece in response.aiter_bytes():
                reader.feed(piece)
            await response.aclose()
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            assert reader.done and reader.usage is not None
    seen = upstream.requests[-1]
    assert seen["body"] == BODY
    assert seen["headers"]["authorization"] == "Bearer sk-virtual" and seen["headers"]["x-litellm-tags"] == "harness"
    assert len(upstream.requests) == 3


async def test_an_error_answer_keeps_its_status_and_body(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(status=429, error="slow down", headers={"retry-after": "3"}))
    async with client() as http:
        response = await http.post(f"{upstream.url}/chat/completions", json=BODY)
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert "slow down" in response.json()["error"]["message"]


async def test_a_stream_that_stalls_is_a_read_timeout(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(text="a b c d e f", chunk_delay=3.0))
    async with client(read=0.3) as http:
        async with http.stream("POST", f"{upstream.url}/chat/completions", json=BODY) as response:
            with pytest.raises(httpx.ReadTimeout):
                async for _ in response.aiter_bytes():
                    pass


async def test_an_answer_that_never_starts_is_a_read_timeout(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(text="late", hang=3.0))
    async with client(read=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(f"{upstream.url}/chat/completions", json=BODY)


async def test_a_stream_cut_off_is_a_read_error(upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(text="a b c d e f g h", cut_after=2))
    async with client() as http:
        async with http.stream("POST", f"{upstream.url}/chat/completions", json=BODY) as response:
            with pytest.raises(httpx.ReadError):
                async for _ in response.aiter_bytes():
                    pass


async def test_nobody_listening_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        async with client() as http:
            with pytest.raises(httpx.ConnectError):
                await http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=BODY)


async def test_a_compressed_body_is_handed_on_decoded(upstream: ScriptedUpstream) -> None:
    """aiohttp decodes it; httpx is then told nothing is left to decode."""
    from starlette.responses import Response
    from starlette.routing import Route

    payload = b'{"ok": true}'
    upstream.app.router.routes.insert(
        0,
        Route(
            "/gz",
            lambda request: Response(
                gzip.compress(payload), headers={"content-encoding": "gzip"}, media_type="application/json"
            ),
        ),
    )
    try:
        async with client() as http:
            response = await http.get(f"http://127.0.0.1:{upstream.port}/gz")
        assert response.content == payload and "content-encoding" not in response.headers
    finally:
        upstream.app.router.routes.pop(0)
