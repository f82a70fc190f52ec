"""Bad input refused, limits enforced, and load held: the endpoint on its own."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_gateway.accounting.budget import Budget
from opencode_gateway.accounting.records import RequestRecord
from opencode_gateway.accounting.run import RunAccount
from opencode_gateway.accounting.usage import Usage
from opencode_gateway.endpoint.app import Endpoint, Target, create_app
from opencode_gateway.endpoint.bodies import MAX_JSON_VALUES, too_many_values
from opencode_gateway.endpoint.routing import RunRouter
from opencode_gateway.endpoint.server import EndpointServer
from opencode_gateway.endpoint.tagging import Tagging
from opencode_gateway.endpoint.upstream import ProxyUpstream
from opencode_gateway.errors import ConfigConflict, SettingsError
from opencode_gateway.opencode.config import build_config
from tests.support import builders
from tests.support.scripted_upstream import Reply, ScriptedUpstream, usage

pytestmark = pytest.mark.anyio
TOKEN = "t"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def endpoint(
    upstream_url: str = "http://gateway.test", records: list[RequestRecord] | None = None, **extra: Any
) -> Endpoint:
    sink = records if records is not None else []
    account = RunAccount(extra.pop("budget", None), on_record=sink.append)
    for earlier in extra.pop("earlier", ()):
        account.add(earlier)
    target = Target(
        "litellm_proxy/coder", ProxyUpstream(upstream_url, "coder", "sk", caching="off"), Tagging(), account
    )
    return Endpoint(router=RunRouter(TOKEN, target), **extra)


async def post(app: Any, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as client:
        return await client.post("/v1/chat/completions", headers=AUTH, **kwargs)


async def test_a_body_over_the_limit_is_413_by_declared_length_or_by_reading() -> None:
    app = create_app(endpoint(max_body_bytes=1000))
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 2000}]}).encode()
    assert (await post(app, content=big)).status_code == 413

    async def chunked() -> Any:  # no content-length: the limit applies while reading
        for i in range(0, len(big), 100):
            yield big[i : i + 100]

    response = await post(app, content=chunked())
    assert response.status_code == 413
    assert response.json()["error"]["message"] == "request body is over the limit of 1,000 bytes"


async def test_a_refused_call_is_recorded_and_never_sent() -> None:
    sink: list[RequestRecord] = []
    app = create_app(endpoint(records=sink, budget=Budget(max_requests=1), earlier=[record((10, 5), 0.001)]))
    response = await post(app, json={"messages": [], "stream": True})
    assert response.status_code == 400  # a status OpenCode does not retry (it retries a 429 for a minute)
    assert response.json()["error"] == {
        "message": "run budget exceeded: max_requests is 1 and 1 requests were made",
        "type": "budget_exceeded",
        "param": None,
        "code": "400",
    }
    assert [(r.status_code, r.cost.source, r.cost.usd) for r in sink] == [
        (200, "litellm", 0.001),
        (400, "refused", 0.0),
    ]


def test_the_endpoint_binds_only_to_loopback_unless_asked() -> None:
    with pytest.raises(SettingsError, match="binds only to loopback, not 0.0.0.0"):
        EndpointServer(create_app(endpoint()), host="0.0.0.0")
    EndpointServer(create_app(endpoint()), host="127.0.0.1")._socket.close()


def record(tokens: tuple[int, int], cost: float | None, source: str = "litellm") -> RequestRecord:
    return builders.record(usage=Usage(*tokens), cost=cost, source=source)


MANAGED = ("provider", "model", "small_model", "enabled_providers", "permission")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
keys = st.sampled_from(
    [
        "provider",
        "model",
        "small_model",
        "enabled_providers",
        "disabled_providers",
        "permission",
        "tools",
        "plugin",
        "agent",
        "mode",
        "share",
        "autoupdate",
        "instructions",
        "theme",
        "mcp",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=6))
def test_no_user_config_overrides_a_managed_key(user_config: dict[str, Any]) -> None:
    ours = build_config(model="m", base_url="http://127.0.0.1:1/v1", api_key_ref="{file:/t}")
    try:
        merged = build_config(
            model="m", base_url="http://127.0.0.1:1/v1", api_key_ref="{file:/t}", user_config=user_config
        )
    except ConfigConflict:
        return
    for key in (*MANAGED, "autoupdate", "share"):
        assert merged[key] == ours[key]
    for section in ("agent", "mode"):
        for entry in (merged.get(section) or {}).values():
            assert not (isinstance(entry, dict) and {"model", "permission", "tools"} & set(entry))


async def test_64_concurrent_streams_are_each_recorded_exactly(upstream: ScriptedUpstream) -> None:
    upstream.script(*[Reply(text=f"answer {i}", usage=usage(1000 + i, 10 + i)) for i in range(64)])
    records: list[RequestRecord] = []
    under_load = endpoint(upstream.url, records)
    async with EndpointServer(create_app(under_load)) as server, httpx.AsyncClient(timeout=60) as client:

        async def one(i: int) -> int:
            response = await client.post(
                f"{server.url}/v1/chat/completions",
                headers=AUTH,
                json={"model": "x", "stream": True, "messages": [{"role": "user", "content": str(i)}]},
            )
            return response.status_code

        statuses = await asyncio.gather(*(one(i) for i in range(64)))
        assert isinstance(under_load.router, RunRouter)
        await under_load.router.target.upstream.aclose()
    assert statuses == [200] * 64
    assert len(records) == 64 and all(r.ok for r in records)
    assert sorted((r.usage.input_tokens, r.usage.output_tokens) for r in records if r.usage) == [
        (1000 + i, 10 + i) for i in range(64)
    ]


async def test_a_request_cannot_send_our_provider_key_elsewhere_or_set_its_price(
    upstream: ScriptedUpstream, hostile_upstream: ScriptedUpstream
) -> None:
    """SDK mode, the real litellm: fallbacks to another server, a tiny timeout and negative prices
    in the body change nothing; the hostile server never hears from us."""
    from opencode_gateway.accounting.pricing import Pricer
    from opencode_gateway.endpoint.upstream import SdkUpstream

    upstream.script(Reply(text="priced as usual", usage=usage(1000, 50)))
    records: list[RequestRecord] = []
    target = Target(
        "openai/gpt-4o-mini",
        SdkUpstream("openai/gpt-4o-mini", upstream.url, "sk-ours"),
        Tagging(),
        RunAccount(on_record=records.append),
    )
    app = create_app(Endpoint(router=RunRouter(TOKEN, target), pricer=Pricer()))
    attack = {
        "model": "x",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "timeout": 0.001,
        "fallbacks": [{"model": "openai/gpt-4o-mini", "api_base": hostile_upstream.url, "api_key": "sk-ours"}],
        "input_cost_per_token": -0.001,
        "output_cost_per_token": -0.001,
        "api_base": hostile_upstream.url,
    }
    async with EndpointServer(app) as server, httpx.AsyncClient(timeout=60) as client:
        response = await client.post(f"{server.url}/v1/chat/completions", headers=AUTH, json=attack)
        assert response.status_code == 200 and "usual" in response.text
    assert len(upstream.requests) == 1 and hostile_upstream.requests == []
    [record] = records
    assert record.cost.usd is not None and record.cost.usd > 0 and record.cost.source == "litellm"
    assert record.usage is not None and record.usage.input_tokens == 1000


async def test_a_body_of_millions_of_values_is_refused_before_it_is_parsed() -> None:
    """32 MiB of empty messages would be ~11 million dicts once parsed; text with commas and
    brackets in its strings is not counted against the limit."""
    sink: list[RequestRecord] = []
    app = create_app(endpoint(records=sink))
    hostile = b'{"stream": true, "messages": [' + b",".join([b"{}"] * (MAX_JSON_VALUES + 1)) + b"]}"
    response = await post(app, content=hostile)
    assert response.status_code == 413 and "over 250,000 JSON values" in response.json()["error"]["message"]
    nested = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = await post(app, content=nested)
    assert response.status_code in (400, 413) and sink == []  # nested too deeply, or too many values: never parsed
    prose = "a, b, {c} [d] " * 100_000  # 400,000 commas and brackets, all in one string
    assert not too_many_values(json.dumps({"messages": [{"role": "user", "content": prose}]}).encode())
