"""The long-lived server's routing, in process: a ledger run per OpenCode session, attribution per
launch, and its small JSON API. The gateway behind it is respx; e2e tests use real OpenCode."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import respx

from opencode_gateway.accounting.ledger import Ledger
from opencode_gateway.errors import SettingsError
from opencode_gateway.gateway.app import BadRequest
from opencode_gateway.serve import LAUNCH_HEADER, Launch, ServerState, server_app, server_token
from opencode_gateway.settings import Settings

pytestmark = pytest.mark.anyio
GATEWAY = "http://gateway.test"
TOKEN = "serve-token"


def stream_body(prompt: int, completion: int, cost: float) -> bytes:
    chunks = [{"id": "c", "model": "team-a", "choices": [{"index": 0, "delta": {"content": "ok"}}]},
              {"id": "c", "model": "team-a", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "cost": cost}}]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(api_base=GATEWAY, api_key="sk-virtual", data_dir=tmp_path, tags=("team",),
                    metadata={"team": "platform"})


@pytest.fixture
def ledger(settings: Settings) -> Iterator[Ledger]:
    opened = Ledger(settings.ledger_path)
    yield opened
    opened.close()


@pytest.fixture
async def client(settings: Settings, ledger: Ledger) -> AsyncIterator[httpx.AsyncClient]:
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as c:
        yield c
    router.close()
    for upstream in router.upstreams.values():
        await upstream.aclose()


async def chat(client: httpx.AsyncClient, session: str | None, launch: Launch | None = None,
               model: object = "litellm_proxy/team-a") -> httpx.Response:
    headers = {"authorization": f"Bearer {TOKEN}"}
    if session:
        headers["x-session-id"] = session
    if launch:
        headers[LAUNCH_HEADER] = launch.header()
    return await client.post("/v1/chat/completions", headers=headers,
                       json={"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]})


@respx.mock
async def test_each_opencode_session_is_one_ledger_run_with_its_launchs_attribution(
    client: httpx.AsyncClient, settings: Settings, ledger: Ledger
) -> None:
    upstream = respx.post(f"{GATEWAY}/v1/chat/completions").mock(side_effect=[
        httpx.Response(200, content=stream_body(100 * i, 10 * i, 0.001 * i),
                       headers={"content-type": "text/event-stream"}) for i in (1, 2, 3)])
    first = Launch({"ticket": "ENG-1"}, ("alice",), "/repo/a")
    for session, launch in (("ses_a", first), ("ses_b", Launch({"ticket": "ENG-2"})), ("ses_a", first)):
        response = await chat(client, session, launch)
        assert response.status_code == 200
        await response.aread()
    sent = [call.request.headers for call in upstream.calls]
    assert sent[0]["x-litellm-tags"] == "harness,opencode,team,alice,ticket:ENG-1"
    assert json.loads(sent[0]["x-litellm-spend-logs-metadata"]) == {"team": "platform", "ticket": "ENG-1"}
    assert json.loads(sent[1]["x-litellm-spend-logs-metadata"]) == {"team": "platform", "ticket": "ENG-2"}
    assert sent[0]["x-litellm-session-id"] == sent[2]["x-litellm-session-id"] != sent[1]["x-litellm-session-id"]
    assert all(LAUNCH_HEADER not in headers for headers in sent)  # ours, never forwarded
    assert sent[0]["authorization"] == "Bearer sk-virtual"

    stats = (await client.get("/stats", headers={"authorization": f"Bearer {TOKEN}"})).json()
    assert (stats["requests"], stats["input_tokens"], stats["cost"]) == (3, 600, pytest.approx(0.006))
    by_session = {s["session_id"]: s for s in stats["sessions"]}
    assert (by_session["ses_a"]["requests"], by_session["ses_a"]["input_tokens"]) == (2, 400)
    assert by_session["ses_a"]["cost"] == pytest.approx(0.004) and by_session["ses_b"]["cost"] == pytest.approx(0.002)
    assert stats["models"]["litellm_proxy/team-a"]["requests"] == 3

    ledger.flush()  # rows are written by the ledger's own thread
    runs = sqlite3.connect(settings.ledger_path).execute("SELECT session_id, requests, input_tokens, cost, metadata, workdir FROM runs "
                          "ORDER BY session_id").fetchall()
    assert [(r[0], r[1], r[2]) for r in runs] == [("ses_a", 2, 400), ("ses_b", 1, 200)]
    assert runs[0][3] == pytest.approx(0.004) and json.loads(runs[0][4])["ticket"] == "ENG-1"
    assert runs[0][5] == "/repo/a"


async def test_requests_that_cannot_be_routed_are_400(client: httpx.AsyncClient) -> None:
    missing = await chat(client, "ses_x", model=None)
    assert missing.status_code == 400 and "names no model" in missing.json()["error"]["message"]
    response = await client.post("/v1/chat/completions", headers={
        "authorization": f"Bearer {TOKEN}", LAUNCH_HEADER: "not json"}, json={"model": "m", "messages": []})
    assert response.status_code == 400 and "relaunch OpenCode" in response.json()["error"]["message"]


async def test_health_is_open_and_stats_need_the_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/stats")).status_code == 401
    assert (await client.get("/stats", headers={"authorization": "Bearer wrong"})).status_code == 401


def test_a_launch_survives_its_header() -> None:
    launch = Launch({"ticket": "ENG-412"}, ("nightly",), "/w")
    assert Launch.from_header(launch.header()) == launch
    assert Launch.from_header(None) == Launch()
    with pytest.raises(BadRequest):
        Launch.from_header('{"tags": "not-a-list"}')


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
    ledger = Ledger(settings.ledger_path)
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        response = await chat(client, "ses_a")
    ledger.close()
    assert response.status_code == 400 and "restart it with --api-base URL" in response.json()["error"]["message"]
    assert router.sessions == {}


@respx.mock
async def test_budgets_apply_per_session(tmp_path: Path) -> None:
    settings = Settings(api_base=GATEWAY, api_key="sk-virtual", data_dir=tmp_path, max_requests=1)
    respx.post(f"{GATEWAY}/v1/chat/completions").mock(side_effect=lambda request: httpx.Response(
        200, content=stream_body(10, 1, 0.0001), headers={"content-type": "text/event-stream"}))
    ledger = Ledger(settings.ledger_path)
    app, router = server_app(settings, ledger, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as client:
        statuses = [(await chat(client, session)).status_code for session in ("ses_a", "ses_a", "ses_b")]
    for upstream in router.upstreams.values():
        await upstream.aclose()
    ledger.close()
    assert statuses == [200, 429, 200]  # ses_a spent its one request; ses_b has its own
