"""Gateway preflight, with the gateway mocked by respx: each failure names its fix."""

from __future__ import annotations

import httpx
import pytest
import respx

from opencode_gateway.errors import BudgetExceeded, PreflightError, SettingsError
from opencode_gateway.litellm_gateway.preflight import check_gateway

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
    assert str(info.value) == (
        "the key 'ci-bot' may not use model group 'team-b' on http://gateway.test; it may use: team-a, team-c"
    )
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


@respx.mock
async def test_no_key_is_one_line_that_says_how_to_set_one() -> None:
    respx.get(f"{GATEWAY}/v1/models").respond(404, text="<html>\n<body>Not Found</body>\n</html>")
    with pytest.raises(PreflightError) as info:
        await check_gateway(GATEWAY, None, "team-a")
    assert str(info.value).startswith("no key is set for the LiteLLM gateway at http://gateway.test")
    assert "LITELLM_PROXY_API_KEY" in str(info.value) and "\n" not in str(info.value)


@respx.mock
async def test_a_non_json_error_body_is_cut_to_one_line() -> None:
    page = "<html>\n<head><title>404 Not Found</title></head>\n<body>\n" + "<p>nothing here</p>\n" * 50 + "</body>"
    respx.get(f"{GATEWAY}/v1/models").respond(404, text=page)
    with pytest.raises(PreflightError) as info:
        await check_gateway(GATEWAY, "sk-v", "team-a")
    message = str(info.value)
    assert "\n" not in message and "HTTP 404: <html> <head><title>404 Not Found" in message and len(message) < 320


@respx.mock
async def test_a_key_whose_budget_is_spent_is_a_budget_refusal_not_a_settings_error() -> None:
    respx.get(f"{GATEWAY}/v1/models").respond(
        422,
        json={
            "error": {
                "message": "Budget has been exceeded! Current cost: 0.002, Max budget: 0.001",
                "type": "budget_exceeded",
                "code": "422",
            }
        },
    )
    with pytest.raises(BudgetExceeded, match="refuses the key: Budget has been exceeded"):
        await check_gateway(GATEWAY, "sk-v", "team-a")
