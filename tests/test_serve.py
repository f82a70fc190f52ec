"""The long-lived server's routing, in process: launches minted by the server, a ledger run per
session of a launch, attribution that is the server's record, and its small JSON API. The gateway
behind it is respx; e2e tests use real OpenCode."""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import MappingProxyType

import httpx
import pytest
import respx

from opencode_gateway.accounting.budget import Budget
from opencode_gateway.accounting.ledger import Ledger, LedgerLocation
from opencode_gateway.config.settings import Settings
from opencode_gateway.errors import SettingsError
from opencode_gateway.serve.launch import Launch, ServerState, server_token
from opencode_gateway.serve.server import server_app
from tests.support.ledger import select
from tests.support.serving import serve_client

pytestmark = pytest.mark.anyio
GATEWAY = "http://gateway.test"
TOKEN = "serve-token"
# These tests are about routing and attribution: the groups' prompt caching is set, not asked of
# the gateway (endpoint/caching.py has its own tests).
NO_CACHING = {"team-a": "off", "team-small": "off"}


def stream_body(prompt: int, completion: int, cost: float) -> bytes:
    chunks = [
        {"id": "c", "model": "team-a", "choices": [{"index": 0, "delta": {"content": "ok"}}]},
        {
            "id": "c",
            "model": "team-a",
            "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "cost": cost},
        },
    ]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.fixture
def settings(tmp_path: Path, ledger_at: LedgerLocation) -> Settings:
    """A server on a gateway, its ledger a SQLite file or a team's PostgreSQL."""
    return Settings(
        api_base=GATEWAY,
        api_key="sk-virtual",
        data_dir=tmp_path,
        tags=("team",),
        metadata={"team": "platform"},
        prompt_caching=NO_CACHING,
        ledger=ledger_at.url or ledger_at.path,
    )


def ledger_rows(settings: Settings, sql: str) -> list[tuple]:
    return [tuple(row) for row in select(settings.ledger_location, sql)]


@pytest.fixture
def ledger(settings: Settings) -> Iterator[Ledger]:
    opened = Ledger(settings.ledger_location)
    yield opened
    opened.close()


@pytest.fixture
async def client(settings: Settings, ledger: Ledger) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_client(settings, ledger, TOKEN) as c:
        yield c


ADMIN = {"authorization": f"Bearer {TOKEN}"}


async def mint(client: httpx.AsyncClient, launch: Launch = Launch()) -> str:
    """A launch's token, on the gateway group team-a unless the launch names its model."""
    launch = launch if launch.model else dataclasses.replace(launch, model="litellm_proxy/team-a")
    response = await client.post("/launches", headers=ADMIN, json=launch.to_request())
    assert response.status_code == 200, response.text
    return str(response.json()["token"])


def forwarded(gateway: respx.MockRouter) -> list[httpx.Request]:
    """The chat requests that reached the gateway (respx also sees the test's own calls to the
    server, and each group's one model-info lookup)."""
    return [
        call.request
        for call in gateway.calls
        if call.request.url.host == "gateway.test" and call.request.url.path.endswith("/chat/completions")
    ]


async def chat(
    client: httpx.AsyncClient, session: str | None, token: str, model: object = "litellm_proxy/team-a", **headers: str
) -> httpx.Response:
    sent = {"authorization": f"Bearer {token}", **headers}
    if session:
        sent["x-session-id"] = session
    return await client.post(
        "/v1/chat/completions",
        headers=sent,
        json={"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    )


async def test_each_opencode_session_is_one_ledger_run_with_its_launchs_attribution(
    gateway: respx.MockRouter, client: httpx.AsyncClient, settings: Settings, ledger: Ledger
) -> None:
    upstream = gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=[
            httpx.Response(
                200, content=stream_body(100 * i, 10 * i, 0.001 * i), headers={"content-type": "text/event-stream"}
            )
            for i in (1, 2, 3)
        ]
    )
    first = await mint(client, Launch({"ticket": "ENG-1"}, ("alice",), "/repo/a"))
    second = await mint(client, Launch({"ticket": "ENG-2"}))
    for session, token in (("ses_a", first), ("ses_b", second), ("ses_a", first)):
        response = await chat(client, session, token)
        assert response.status_code == 200
        await response.aread()
    sent = [call.request.headers for call in upstream.calls]
    assert sent[0]["x-litellm-tags"] == "harness,opencode,team,alice,ticket:ENG-1"
    assert json.loads(sent[0]["x-litellm-spend-logs-metadata"]) == {"team": "platform", "ticket": "ENG-1"}
    assert json.loads(sent[1]["x-litellm-spend-logs-metadata"]) == {"team": "platform", "ticket": "ENG-2"}
    assert sent[0]["x-litellm-session-id"] == sent[2]["x-litellm-session-id"] != sent[1]["x-litellm-session-id"]
    assert sent[0]["authorization"] == "Bearer sk-virtual"

    stats = (await client.get("/stats", headers=ADMIN)).json()
    assert (stats["requests"], stats["input_tokens"], stats["cost"]) == (3, 600, pytest.approx(0.006))
    by_session = {s["session_id"]: s for s in stats["sessions"]}
    assert (by_session["ses_a"]["requests"], by_session["ses_a"]["input_tokens"]) == (2, 400)
    assert by_session["ses_a"]["cost"] == pytest.approx(0.004) and by_session["ses_b"]["cost"] == pytest.approx(0.002)
    assert stats["models"]["litellm_proxy/team-a"]["requests"] == 3

    ledger.flush()  # rows are written by the ledger's own thread
    runs = ledger_rows(
        settings, "SELECT session_id, requests, input_tokens, cost, metadata, workdir FROM runs ORDER BY session_id"
    )
    assert [(r[0], r[1], r[2]) for r in runs] == [("ses_a", 2, 400), ("ses_b", 1, 200)]
    assert runs[0][3] == pytest.approx(0.004) and json.loads(runs[0][4])["ticket"] == "ENG-1"
    assert runs[0][5] == "/repo/a"


async def test_health_is_open_and_stats_and_launches_need_the_admin_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).json() == {"status": "ok"}
    launch_token = await mint(client)
    for token in (None, "wrong", launch_token):  # a launch's token (the agent's) is not the admin's
        headers = {"authorization": f"Bearer {token}"} if token else {}
        assert (await client.get("/stats", headers=headers)).status_code == 401
        assert (await client.post("/launches", headers=headers, json={})).status_code == 401
    assert (await chat(client, "ses_a", TOKEN)).status_code == 401  # the admin token makes no model call
    assert (await chat(client, "ses_a", "made-up")).status_code == 401


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ({"tags": ["a,b"]}, "no comma"),
        ({"tags": ["x\r\nx-evil: 1"]}, "control characters"),
        ({"metadata": {"ticket": "ENG-1\n"}}, "control character"),
        ({"budget": {"max_cost": -1}}, "budget.max_cost must be a number above 0"),
        ({"budget": {"max_cost": float("nan")}}, "budget.max_cost must be a number above 0"),
        ({"owner": "me"}, "a launch is"),
    ],
)
async def test_a_launch_is_checked_as_the_command_line_checks_its_flags(
    client: httpx.AsyncClient, launch: dict[str, object], message: str
) -> None:
    body = {"model": "litellm_proxy/team-a", **launch}
    response = await client.post("/launches", headers=ADMIN, content=json.dumps(body))  # NaN is sent as NaN
    assert response.status_code == 400 and message in response.json()["error"]["message"]


async def test_a_launch_cannot_add_to_another_launchs_session_or_choose_its_attribution(
    gateway: respx.MockRouter, client: httpx.AsyncClient, settings: Settings, ledger: Ledger
) -> None:
    upstream = gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=lambda request: httpx.Response(
            200, content=stream_body(100, 10, 0.001), headers={"content-type": "text/event-stream"}
        )
    )
    victim = await mint(client, Launch({"ticket": "ENG-1"}))
    attacker = await mint(client, Launch({"ticket": "ENG-2"}))
    await (await chat(client, "ses_victim", victim)).aread()
    spoof = {
        "x-opencode-gateway-launch": json.dumps({"metadata": {"ticket": "ENG-1"}, "tags": ["x,y"]}),
        "x-litellm-tags": "free",
        "x-litellm-spend-logs-metadata": '{"ticket": "ENG-1"}',
    }
    await (await chat(client, "ses_victim", attacker, **spoof)).aread()  # the victim's session id, its own token
    sent = [call.request.headers for call in upstream.calls]
    assert json.loads(sent[1]["x-litellm-spend-logs-metadata"]) == {"team": "platform", "ticket": "ENG-2"}
    assert sent[1]["x-litellm-tags"] == "harness,opencode,team,ticket:ENG-2"
    assert sent[0]["x-litellm-session-id"] != sent[1]["x-litellm-session-id"]
    ledger.flush()
    runs = ledger_rows(settings, "SELECT session_id, requests, metadata FROM runs")
    assert sorted((r[0], r[1], json.loads(r[2])["ticket"]) for r in runs) == [
        ("ses_victim", 1, "ENG-1"),
        ("ses_victim", 1, "ENG-2"),
    ]  # two runs: the victim's holds only its own


def test_a_launch_survives_its_request() -> None:
    launch = Launch({"ticket": "ENG-412"}, ("nightly",), "/w", Budget(max_cost=1.5), "litellm_proxy/a", "openai/b")
    again = Launch.from_request(launch.to_request(), ("ticket",))
    assert (again.metadata, again.tags, again.workdir, again.budget, again.model, again.small_model) == (
        launch.metadata,
        launch.tags,
        "/w",
        Budget(max_cost=1.5),
        "litellm_proxy/a",
        "openai/b",
    )


def test_the_token_is_stable_and_private(tmp_path: Path) -> None:
    token_file = server_token(tmp_path)
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert server_token(tmp_path).read_text() == token_file.read_text() and len(token_file.read_text()) == 64


def test_no_running_server_is_named_with_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no opencode-gateway server is running: start one with"):
        ServerState.read(tmp_path)
    (tmp_path / "serve").mkdir(exist_ok=True)
    ServerState("http://127.0.0.1:9", 1, "/t").write(tmp_path)  # port 9: nothing listens
    with pytest.raises(SettingsError, match="does not answer"):
        ServerState.read(tmp_path)


async def test_a_gateway_model_on_a_server_without_a_gateway_is_refused_and_opens_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LITELLM_PROXY_API_BASE", raising=False)
    settings = Settings(data_dir=tmp_path)
    ledger = Ledger(settings.ledger_location)
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        response = await chat(client, "ses_a", await mint(client))
    ledger.close()
    assert response.status_code == 400 and "restart it with --api-base URL" in response.json()["error"]["message"]
    assert router.sessions == {}


async def test_a_launchs_budget_covers_all_its_sessions_whatever_they_are_called(
    gateway: respx.MockRouter, tmp_path: Path
) -> None:
    """A session is whatever a request's x-session-id says: a fresh id per request must not be a
    fresh budget (12 calls got through a limit of 3 that way)."""
    settings = Settings(
        api_base=GATEWAY, api_key="sk-virtual", data_dir=tmp_path, max_requests=1, prompt_caching=NO_CACHING
    )
    gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=lambda request: httpx.Response(
            200, content=stream_body(10, 1, 0.0001), headers={"content-type": "text/event-stream"}
        )
    )
    ledger = Ledger(settings.ledger_location)
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        token = await mint(client)
        statuses = [(await chat(client, session, token)).status_code for session in ("ses_a", "ses_a", "ses_b")]
        capped = await mint(client, Launch(budget=Budget(max_requests=3, max_turns=1)))  # a launch's own comes first
        statuses += [(await chat(client, f"ses_fresh_{i}", capped)).status_code for i in range(12)]
        another = await mint(client)  # another launch: a budget of its own
        statuses.append((await chat(client, "ses_a", another)).status_code)
    for upstream in router.upstreams.values():
        await upstream.aclose()
    ledger.close()
    assert statuses == [200, 400, 400, 200, *[400] * 11, 200]  # one turn for all of the launch's sessions
    assert len(forwarded(gateway)) == 3


async def test_only_the_launchs_model_and_small_model_are_forwarded(
    gateway: respx.MockRouter, client: httpx.AsyncClient
) -> None:
    gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=lambda request: httpx.Response(
            200, content=stream_body(10, 1, 0.0001), headers={"content-type": "text/event-stream"}
        )
    )
    token = await mint(client, Launch(model="litellm_proxy/team-a", small_model="litellm_proxy/team-small"))
    for asked in ("litellm_proxy/team-b", "gpt-4o", None, "litellm_proxy/team-small", "litellm_proxy/team-a"):
        response = await chat(client, "ses_a", token, model=asked)
        assert response.status_code == 200, response.text
    models = [json.loads(request.content)["model"] for request in forwarded(gateway)]
    assert models == ["team-a", "team-a", "team-a", "team-small", "team-a"]


async def test_the_servers_routes_take_each_launchs_background_calls(gateway: respx.MockRouter, tmp_path: Path) -> None:
    settings = Settings(
        api_base=GATEWAY, api_key="sk-virtual", data_dir=tmp_path, routes={"compaction": "litellm_proxy/team-big"}
    )
    gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=lambda request: httpx.Response(
            200, content=stream_body(10, 1, 0.0001), headers={"content-type": "text/event-stream"}
        )
    )
    ledger = Ledger(settings.ledger_location)
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        token = await mint(client, Launch(model="litellm_proxy/team-a"))
        compaction = {
            "model": "litellm_proxy/team-a",
            "stream": True,
            "messages": [
                {"role": "system", "content": "You are a context summarization agent. ..."},
                {"role": "user", "content": "the conversation"},
            ],
        }
        compacted = await client.post(
            "/v1/chat/completions",
            json=compaction,
            headers={"authorization": f"Bearer {token}", "x-session-id": "ses_a"},
        )
        turn = await chat(client, "ses_a", token, model="litellm_proxy/team-big")
    router.close()
    for upstream in router.upstreams.values():
        await upstream.aclose()
    ledger.close()
    assert (compacted.status_code, turn.status_code) == (200, 200)
    models = [json.loads(request.content)["model"] for request in forwarded(gateway)]
    assert models == ["team-big", "team-a"]  # a turn naming the route's model still goes to the launch's


async def test_a_launch_whose_model_a_route_cannot_serve_is_refused(tmp_path: Path) -> None:
    settings = Settings(api_base=GATEWAY, data_dir=tmp_path, routes={"compaction": "openai/gpt-3.5-turbo"})
    ledger = Ledger(settings.ledger_location)
    app, _ = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        response = await client.post("/launches", headers=ADMIN, json={"model": "openai/gpt-4o-mini"})
    ledger.close()
    assert response.status_code == 400
    assert "routes.compaction: openai/gpt-3.5-turbo takes 16,385 input tokens" in response.json()["error"]["message"]


async def test_a_launch_names_its_model(client: httpx.AsyncClient) -> None:
    response = await client.post("/launches", headers=ADMIN, json={"metadata": {"ticket": "ENG-1"}})
    assert response.status_code == 400 and "a launch names its model" in response.json()["error"]["message"]


async def test_a_period_budget_caps_a_tickets_sessions_across_launches(
    gateway: respx.MockRouter, settings: Settings
) -> None:
    settings = settings.replace(budgets={"ticket": {"per": "day", "max_cost": 0.00015}})
    gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=lambda request: httpx.Response(
            200, content=stream_body(10, 1, 0.0001), headers={"content-type": "text/event-stream"}
        )
    )
    ledger = Ledger(settings.ledger_location)
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        first = await mint(client, Launch(metadata=MappingProxyType({"ticket": "ENG-1"})))
        second = await mint(client, Launch(metadata=MappingProxyType({"ticket": "ENG-1"})))
        other = await mint(client, Launch(metadata=MappingProxyType({"ticket": "ENG-2"})))
        statuses = [(await chat(client, "ses_a", first)).status_code, (await chat(client, "ses_b", first)).status_code]
        refused = await chat(client, "ses_c", second)  # another launch, the same ticket: $0.0002 of $0.00015 spent
        statuses += [refused.status_code, (await chat(client, "ses_d", other)).status_code]
    for upstream in router.upstreams.values():
        await upstream.aclose()
    ledger.close()
    assert statuses == [200, 200, 400, 200]
    assert "day budget of ticket=ENG-1 exceeded" in refused.json()["error"]["message"]


async def test_a_session_id_an_agent_chooses_is_shown_on_the_dashboard_as_text(
    gateway: respx.MockRouter, client: httpx.AsyncClient
) -> None:
    """The agent holds its launch's token and chooses the session ids its requests carry: on the
    admin's live page they are text, never markup."""
    gateway.post(f"{GATEWAY}/v1/chat/completions").respond(
        200, content=stream_body(10, 1, 0.001), headers={"content-type": "text/event-stream"}
    )
    hostile = '<img src=x onerror="alert(1)"></td><script>alert(2)</script>'
    response = await chat(client, hostile, await mint(client))
    assert response.status_code == 200
    await response.aread()
    page = (await client.get("/", headers=ADMIN)).text
    assert hostile not in page and "<script>alert" not in page
    assert html.escape(hostile, quote=True) in page  # in the sessions table, as text
