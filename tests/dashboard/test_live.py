"""The live dashboard in `serve`: never open without a login (a one-time code that sets an HttpOnly,
SameSite=Strict cookie) or the admin token; a launch's token (what OpenCode, and so the agent,
holds) cannot read it; /health stays open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from opencode_gateway.accounting.ledger import Ledger
from opencode_gateway.config.settings import Settings
from opencode_gateway.serve.live import COOKIE, DashboardAccess
from opencode_gateway.serve.server import server_app
from tests.support.builders import spend_ledger

pytestmark = pytest.mark.anyio
ADMIN = "admin-token"


@pytest.fixture
def access() -> DashboardAccess:
    return DashboardAccess(ADMIN)


@pytest.fixture
async def client(tmp_path: Path, access: DashboardAccess) -> AsyncIterator[httpx.AsyncClient]:
    path = spend_ledger(tmp_path / "ledger.db")
    settings = Settings(api_base="http://127.0.0.1:9/v1", data_dir=tmp_path, ledger=path)
    ledger = Ledger(path)
    app, _ = server_app(settings, ledger, ADMIN, access)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve") as c:
        yield c
    ledger.close()


@pytest.mark.parametrize("path", ["/", "/dashboard/data", "/dashboard/data?by=model"])
async def test_without_a_login_the_page_and_its_data_are_401(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 401
    if path == "/":  # a browser's: a page that says how to get a login link
        assert "opencode-gateway serve login" in response.text and "<h1>Spend</h1>" not in response.text
    else:
        assert "opencode-gateway serve login" in response.json()["error"]["message"]
    client.cookies.set(COOKIE, "guessed")
    assert (await client.get(path)).status_code == 401


async def test_health_stays_open(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).status_code == 200


async def test_a_login_code_works_once_and_sets_a_strict_httponly_cookie(
    client: httpx.AsyncClient, access: DashboardAccess
) -> None:
    code = access.new_code()
    login = await client.get(f"/login?code={code}", follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == "/"
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    page = await client.get("/")  # the client keeps the cookie
    assert page.status_code == 200 and "<h1>Spend</h1>" in page.text
    assert (await client.get("/dashboard/data")).json()["total"]["requests"] == 36
    client.cookies.clear()
    again = await client.get(f"/login?code={code}", follow_redirects=False)
    assert again.status_code == 401 and again.headers["content-type"].startswith("text/html")
    assert "already used" in again.text and "opencode-gateway serve login" in again.text  # not a raw JSON 401
    assert (await client.get("/")).status_code == 401


async def test_the_admin_token_reads_it_and_makes_new_login_urls(client: httpx.AsyncClient) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    assert (await client.get("/dashboard/data?by=model&where=ticket=ENG-401", headers=admin)).status_code == 200
    minted = await client.post("/login-codes", headers=admin)
    url = minted.json()["login_url"]
    assert url.startswith("http://serve/login?code=")
    assert (await client.get(url.removeprefix("http://serve"), follow_redirects=False)).status_code == 303
    assert (await client.post("/login-codes")).status_code == 401


async def test_a_launchs_token_cannot_read_the_dashboard(client: httpx.AsyncClient) -> None:
    """The agent holds its launch's token: it may spend through it, never read every team's ledger."""
    minted = await client.post(
        "/launches",
        json={"metadata": {"ticket": "ENG-1"}, "model": "openai/gpt-4o-mini"},
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    launch = {"authorization": f"Bearer {minted.json()['token']}"}
    for path in ("/", "/dashboard/data"):
        assert (await client.get(path, headers=launch)).status_code == 401
    assert (await client.post("/login-codes", headers=launch)).status_code == 401


async def test_a_bad_filter_is_a_400_that_says_what_to_give(client: httpx.AsyncClient) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    assert "KEY=VALUE" in (await client.get("/dashboard/data?where=ticket", headers=admin)).json()["error"]["message"]
    assert (await client.get("/dashboard/data?by=tikcet", headers=admin)).status_code == 400
