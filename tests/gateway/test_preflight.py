"""Gateway preflight, with the gateway mocked by respx: each failure names its fix."""

from __future__ import annotations

import httpx
import pytest
import respx

from opencode_gateway.errors import PreflightError, SettingsError
from opencode_gateway.gateway.preflight import check_gateway

pytestmark = pytest.mark.anyio
GATEWAY = "http://gateway.test"


def models(*ids: str) -> dict:
    return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}


@respx.mock
async def test_an_allowed_group_passes() -> None:
    route = respx.get(f"{GATEWAY}/v1/models").respond(200, json=models("team-a", "team-b"))
    await check_gateway(GATEWAY, "sk-v", "team-a")
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-v"


@respx.mock
async def test_a_group_the_key_may_not_use_names_alias_and_allowed_groups() -> None:
    respx.get(f"{GATEWAY}/v1/models").respond(200, json=models("team-a", "team-c"))
    respx.get(f"{GATEWAY}/key/info").respond(200, json={"info": {"key_alias": "ci-bot", "models": ["team-a"]}})
    with pytest.raises(PreflightError) as info:
        await check_gateway(GATEWAY, "sk-v", "team-b")
    assert str(info.value) == ("the key 'ci-bot' may not use model group 'team-b' on http://gateway.test; "
                               "it may use: team-a, team-c")
    assert isinstance(info.value, SettingsError)  # the CLI exits 2


@respx.mock
async def test_wildcard_access_is_not_second_guessed() -> None:
    respx.get(f"{GATEWAY}/v1/models").respond(200, json=models("openai/*"))
    await check_gateway(GATEWAY, "sk-v", "anything")


@respx.mock
async def test_a_refused_key_points_at_the_key_setting() -> None:
    respx.get(f"{GATEWAY}/v1/models").respond(401, json={"error": {"message": "Invalid API key"}})
    with pytest.raises(PreflightError, match=r"refused the key \(HTTP 401: Invalid API key\).*LITELLM_PROXY_API_KEY"):
        await check_gateway(GATEWAY, "sk-bad", "team-a")


@respx.mock
async def test_an_unreachable_gateway_points_at_the_url_setting() -> None:
    respx.get(f"{GATEWAY}/v1/models").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(PreflightError, match="cannot reach the LiteLLM gateway at http://gateway.test.*--api-base"):
        await check_gateway(GATEWAY, "sk-v", "team-a")
