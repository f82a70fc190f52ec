"""The endpoint, with the gateway side mocked by respx: what goes upstream, what comes back, and
what gets recorded."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from opencode_gateway.accounting.records import RequestRecord
from opencode_gateway.accounting.run import RunAccount
from opencode_gateway.endpoint.app import Endpoint, Target, create_app
from opencode_gateway.endpoint.hooks import NoGates
from opencode_gateway.endpoint.routing import RunRouter
from opencode_gateway.endpoint.tagging import Tagging
from opencode_gateway.endpoint.upstream import ProxyUpstream
from tests.support.builders import chunk, sse

pytestmark = pytest.mark.anyio

GATEWAY = "http://gateway.test"
TOKEN = "per-run-token"
VIRTUAL_KEY = "sk-virtual-team-key"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}


def sse_body(*, usage: dict | None = USAGE, model: str = "gpt-4o-mini") -> bytes:
    usage_chunk = [{"id": "c", "model": model, "choices": [], "usage": usage}] if usage else []
    return sse(chunk("Hi", model), chunk("!", model), *usage_chunk)


@pytest.fixture
def records() -> list[RequestRecord]:
    return []


@pytest.fixture
async def client(records: list[RequestRecord]) -> AsyncIterator[httpx.AsyncClient]:
    upstream = ProxyUpstream(GATEWAY, "coder", VIRTUAL_KEY, caching="off")
    tagging = Tagging(("team-a",), {"ticket": "ENG-412"})
    account = RunAccount(on_record=records.append)
    endpoint = Endpoint(
        router=RunRouter(TOKEN, Target("litellm_proxy/coder", upstream, tagging, account)), secrets=(VIRTUAL_KEY, TOKEN)
    )
    transport = httpx.ASGITransport(app=create_app(endpoint))
    async with httpx.AsyncClient(transport=transport, base_url="http://endpoint") as c:
        yield c
    await upstream.aclose()


def chat(**extra: object) -> dict:
    return {"model": "whatever-opencode-says", "stream": True, "messages": [{"role": "user", "content": "hi"}], **extra}


AUTH = {"authorization": f"Bearer {TOKEN}"}


async def test_request_is_tagged_pinned_and_stripped(
    gateway: respx.MockRouter, client: httpx.AsyncClient, records: list
) -> None:
    route = gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        200, content=sse_body(), headers={"content-type": "text/event-stream"}
    )
    spoofed = {
        **AUTH,
        "x-litellm-tags": "free-lunch",
        "x-litellm-spend-logs-metadata": '{"ticket":"OTHER"}',
        "x-api-key": "stolen",
        "x-session-id": "ses_abc",
        "user-agent": "opencode/1.18.33",
    }
    body = chat(
        metadata={"ticket": "OTHER"},
        tags=["free"],
        user="mallory",
        litellm_budget="x",
        mock_response="free",
        stream_options={"include_usage": False, "evil": 1},
        fallbacks=[{"model": "other-group"}],
        input_cost_per_token=-1,
        api_base="http://127.0.0.1:1",
    )
    response = await client.post("/v1/chat/completions", json=body, headers=spoofed)
    assert response.status_code == 200
    sent = route.calls.last.request
    assert sent.headers["authorization"] == f"Bearer {VIRTUAL_KEY}"
    assert sent.headers["x-litellm-tags"] == "harness,opencode,team-a,ticket:ENG-412"
    assert json.loads(sent.headers["x-litellm-spend-logs-metadata"]) == {"ticket": "ENG-412"}
    assert "x-api-key" not in sent.headers
    assert "x-session-id" not in sent.headers  # only allowlisted headers pass
    assert sent.headers["user-agent"] == "opencode-gateway"  # OpenCode's would become a spend tag
    sent_body = json.loads(sent.content)
    assert sent_body["model"] == "coder"
    assert sent_body["stream_options"] == {"include_usage": True}
    assert sorted(sent_body) == ["messages", "model", "stream", "stream_options", "tags"]
    assert sent_body["tags"] == ["harness", "opencode", "team-a", "ticket:ENG-412"]  # ours; "free" was dropped
    assert TOKEN not in str(sent.headers) + sent.content.decode()


async def test_stream_is_relayed_unchanged_and_its_usage_recorded(
    gateway: respx.MockRouter, client: httpx.AsyncClient, records: list
) -> None:
    gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        200, content=sse_body(), headers={"content-type": "text/event-stream"}
    )
    response = await client.post("/chat/completions", json=chat(), headers=AUTH)
    assert response.content == sse_body()
    assert response.headers["content-type"].startswith("text/event-stream")
    [record] = records
    assert record.ok and record.stream
    assert record.usage is not None and (record.usage.input_tokens, record.usage.output_tokens) == (1000, 50)
    assert record.upstream_model == "gpt-4o-mini"
    assert record.cost.source == "litellm" and record.cost.usd is not None and record.cost.usd > 0


async def test_a_stream_without_usage_is_recorded_as_missing(
    gateway: respx.MockRouter, client: httpx.AsyncClient, records: list
) -> None:
    gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        200, content=sse_body(usage=None), headers={"content-type": "text/event-stream"}
    )
    await client.post("/v1/chat/completions", json=chat(), headers=AUTH)
    [record] = records
    assert record.usage is None and record.cost.usd is None and record.cost.source == "unpriced"


async def test_non_streamed_response_usage_and_header_cost(
    gateway: respx.MockRouter, client: httpx.AsyncClient, records: list
) -> None:
    body = {"id": "c", "model": "gpt-4o-mini", "choices": [], "usage": USAGE}
    gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        200, json=body, headers={"x-litellm-response-cost": "0.0123"}
    )
    response = await client.post("/v1/chat/completions", json=chat(stream=False), headers=AUTH)
    assert response.json() == body
    [record] = records
    assert not record.stream and record.cost.usd == 0.0123 and record.cost.source == "reported"


async def test_upstream_error_keeps_its_status_in_openai_shape_with_secrets_scrubbed(
    gateway: respx.MockRouter, client: httpx.AsyncClient, records: list
) -> None:
    message = f"key {VIRTUAL_KEY} may not use model coder"
    gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        403, json={"error": {"message": message, "type": "key_model_access_denied", "code": "403"}}
    )
    response = await client.post("/v1/chat/completions", json=chat(), headers=AUTH)
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["message"] == "key [REDACTED] may not use model coder"
    assert set(error) == {"message", "type", "param", "code"}
    [record] = records
    assert record.status_code == 403 and record.error == error["message"] and record.cost.usd == 0.0


async def test_unreachable_gateway_is_a_502_naming_the_url(
    gateway: respx.MockRouter, client: httpx.AsyncClient, records: list
) -> None:
    gateway.post(f"{GATEWAY}/v1/chat/completions").mock(side_effect=httpx.ConnectError("refused"))
    response = await client.post("/v1/chat/completions", json=chat(), headers=AUTH)
    assert response.status_code == 502
    assert f"{GATEWAY}/v1/chat/completions" in response.json()["error"]["message"]


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}])
async def test_wrong_or_missing_token_is_401(client: httpx.AsyncClient, headers: dict) -> None:
    for request in (
        client.post("/v1/chat/completions", json=chat(), headers=headers),
        client.get("/v1/models", headers=headers),
    ):
        response = await request
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"


async def test_models_lists_the_runs_model(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models", headers=AUTH)
    assert [m["id"] for m in response.json()["data"]] == ["litellm_proxy/coder"]


@pytest.mark.parametrize(("content", "message"), [(b"{not json", "not valid JSON"), (b"[1]", "must be a JSON object")])
async def test_bad_bodies_are_400(client: httpx.AsyncClient, content: bytes, message: str) -> None:
    response = await client.post("/v1/chat/completions", content=content, headers=AUTH)
    assert response.status_code == 400 and message in response.json()["error"]["message"]


async def test_unknown_path_and_wrong_method_are_openai_shaped(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v2/anything", headers=AUTH)).json()["error"]["code"] == "404"
    response = await client.get("/v1/chat/completions", headers=AUTH)
    assert response.status_code == 405 and response.json()["error"]["code"] == "405"


def test_gateway_url_accepts_a_base_with_or_without_v1() -> None:
    for base in ("http://gw:4000", "http://gw:4000/", "http://gw:4000/v1", "http://gw:4000/v1/"):
        assert ProxyUpstream(base, "g", None).url == "http://gw:4000/v1/chat/completions"


def test_metadata_keys_become_tags_and_the_run_groups_its_rows() -> None:
    tagging = Tagging(("nightly",), {"ticket": "ENG-412", "team": "a"}, session_id="run_1")
    headers = tagging.headers
    assert headers["x-litellm-tags"] == "harness,opencode,nightly,ticket:ENG-412"
    assert headers["x-litellm-session-id"] == "run_1"
    wider = Tagging((), {"ticket": "ENG-412", "team": "a"}, tag_metadata_keys=("ticket", "team"))
    assert wider.all_tags == ("harness", "opencode", "ticket:ENG-412", "team:a")
    assert wider.sdk_metadata()["tags"] == ["harness", "opencode", "ticket:ENG-412", "team:a"]


async def test_a_budget_error_is_not_retried(gateway: respx.MockRouter, records: list[RequestRecord]) -> None:
    route = gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        429, json={"error": {"message": "Budget has been exceeded for tag", "type": "budget_exceeded"}}
    )
    upstream = ProxyUpstream(GATEWAY, "coder", VIRTUAL_KEY, caching="off")
    account = RunAccount(on_record=records.append)
    endpoint = Endpoint(router=RunRouter(TOKEN, Target("litellm_proxy/coder", upstream, Tagging(), account)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(endpoint)), base_url="http://e") as c:
        response = await c.post("/v1/chat/completions", json=chat(), headers=AUTH)
    assert response.status_code == 429 and route.call_count == 1
    assert "Budget has been exceeded" in response.json()["error"]["message"]


async def test_a_429_is_retried_honouring_retry_after(gateway: respx.MockRouter, records: list[RequestRecord]) -> None:
    route = gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=[
            httpx.Response(429, json={"error": {"message": "slow down"}}, headers={"retry-after": "0.2"}),
            httpx.Response(200, content=sse_body(), headers={"content-type": "text/event-stream"}),
        ]
    )
    upstream = ProxyUpstream(GATEWAY, "coder", VIRTUAL_KEY, caching="off")
    account = RunAccount(on_record=records.append)
    endpoint = Endpoint(router=RunRouter(TOKEN, Target("litellm_proxy/coder", upstream, Tagging(), account)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(endpoint)), base_url="http://e") as c:
        started = time.monotonic()
        response = await c.post("/v1/chat/completions", json=chat(), headers=AUTH)
        waited = time.monotonic() - started
    assert response.status_code == 200 and route.call_count == 2
    assert waited >= 0.2
    assert records[0].attempts == 2 and records[0].ok


async def test_no_request_is_forwarded_before_the_gateway_check_passed(
    gateway: respx.MockRouter, records: list[RequestRecord]
) -> None:
    """A run checks its gateway while OpenCode starts: OpenCode's first request waits for the check."""
    route = gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        200, content=sse_body(), headers={"content-type": "text/event-stream"}
    )
    passed = asyncio.Event()

    class Checking(NoGates):
        async def checked(self) -> str | None:
            await passed.wait()
            return None

    upstream = ProxyUpstream(GATEWAY, "coder", VIRTUAL_KEY, caching="off")
    endpoint = Endpoint(
        router=RunRouter(
            TOKEN, Target("litellm_proxy/coder", upstream, Tagging(), RunAccount(on_record=records.append))
        ),
        gates=Checking(),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(endpoint)), base_url="http://e") as c:
        request = asyncio.ensure_future(c.post("/v1/chat/completions", json=chat(), headers=AUTH))
        await asyncio.sleep(0.2)
        assert not request.done() and route.call_count == 0
        passed.set()
        response = await asyncio.wait_for(request, 30)
    assert response.status_code == 200 and route.call_count == 1


async def test_a_failed_gateway_check_refuses_every_request_unforwarded(
    gateway: respx.MockRouter, records: list[RequestRecord]
) -> None:
    class Refusing(NoGates):
        async def checked(self) -> str | None:
            return "the key may not use model group 'coder'"

    upstream = ProxyUpstream(GATEWAY, "coder", VIRTUAL_KEY, caching="off")
    endpoint = Endpoint(
        router=RunRouter(
            TOKEN, Target("litellm_proxy/coder", upstream, Tagging(), RunAccount(on_record=records.append))
        ),
        gates=Refusing(),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(endpoint)), base_url="http://e") as c:
        response = await c.post("/v1/chat/completions", json=chat(), headers=AUTH)
    assert response.status_code == 403 and "may not use model group" in response.json()["error"]["message"]
    assert [call for call in gateway.calls if call.request.url.host != "e"] == [] and records == []


async def _once(records: list[RequestRecord]) -> httpx.Response:
    """One request through an endpoint on the mocked gateway."""
    upstream = ProxyUpstream(GATEWAY, "coder", VIRTUAL_KEY, caching="off")
    endpoint = Endpoint(
        router=RunRouter(
            TOKEN, Target("litellm_proxy/coder", upstream, Tagging(), RunAccount(on_record=records.append))
        )
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(endpoint)), base_url="http://e") as c:
        response = await c.post("/v1/chat/completions", json=chat(), headers=AUTH)
    await upstream.aclose()
    return response


@pytest.mark.parametrize("status", [400, 404, 422, 501, 505])
async def test_a_failure_another_attempt_would_meet_again_is_not_retried(
    gateway: respx.MockRouter, records: list[RequestRecord], status: int
) -> None:
    route = gateway.post(f"{GATEWAY}/v1/chat/completions").respond(status, json={"error": {"message": "no"}})
    response = await _once(records)
    assert response.status_code == status and route.call_count == 1 and records[0].attempts == 1


async def test_a_web_servers_html_page_is_named_in_one_line_not_shown_as_markup(
    gateway: respx.MockRouter, records: list[RequestRecord]
) -> None:
    page = "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1></body></html>"
    gateway.post(f"{GATEWAY}/v1/chat/completions").respond(404, text=page, headers={"content-type": "text/html"})
    message = (await _once(records)).json()["error"]["message"]
    assert (
        message
        == ("an HTML page ('404 Not Found'), not an API's answer: is the API base URL right (it usually ends in /v1)?")
        and records[0].error == message
    )
