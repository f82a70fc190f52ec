"""serve's `/metrics`: scraped as Prometheus does (prometheus-client's own parser), the cost total
the same as `/stats'`, labels bounded, and only the admin token or the metrics token may read it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import respx
from prometheus_client.parser import text_string_to_metric_families

from opencode_gateway.accounting.budget import Budget
from opencode_gateway.accounting.ledger import Ledger
from opencode_gateway.config.settings import Settings
from opencode_gateway.observability.metrics import MAX_VALUES, Metrics
from opencode_gateway.serve.launch import Launch
from tests.support.builders import record
from tests.support.serving import serve_client
from tests.test_serve import ADMIN, GATEWAY, NO_CACHING, TOKEN, chat, mint, stream_body

pytestmark = pytest.mark.anyio
SCRAPER = "metrics-scraper-token"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        api_base=GATEWAY,
        api_key="sk-virtual",
        data_dir=tmp_path,
        prompt_caching=NO_CACHING,
        metrics_token=SCRAPER,
        metrics_labels=("ticket",),
    )
    ledger = Ledger(settings.ledger_location)
    async with serve_client(settings, ledger, TOKEN) as c:
        yield c
    ledger.close()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_a_scrape_counts_requests_tokens_cost_and_refusals_and_agrees_with_stats(
    gateway: respx.MockRouter, client: httpx.AsyncClient
) -> None:
    gateway.post(f"{GATEWAY}/v1/chat/completions").mock(
        side_effect=[
            httpx.Response(
                200, content=stream_body(100 * i, 10 * i, 0.001 * i), headers={"content-type": "text/event-stream"}
            )
            for i in (1, 2)
        ]
    )
    first = await mint(client, Launch({"ticket": "ENG-1"}))
    capped = await mint(client, Launch({"ticket": "ENG-2"}, budget=Budget(max_requests=1)))
    for token in (first, capped, capped):  # the third is refused by its launch's budget
        await (await chat(client, "ses", token)).aread()
    scraped = await client.get("/metrics", headers={"authorization": f"Bearer {SCRAPER}"})
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    found = samples(scraped.text)
    model = ("model", "litellm_proxy/team-a")
    one = frozenset({model, ("purpose", "main"), ("ticket", "ENG-1")})
    two = frozenset({model, ("purpose", "main"), ("ticket", "ENG-2")})
    # A refused call never went out: it is a refusal, not a request
    assert found[("opencode_gateway_requests_total", one)] == 1 and found[("opencode_gateway_requests_total", two)] == 1
    assert found[("opencode_gateway_tokens_total", one | {("kind", "input")})] == 100
    assert found[("opencode_gateway_tokens_total", two | {("kind", "output")})] == 20
    assert found[("opencode_gateway_refusals_total", two | {("limit", "max_requests"), ("scope", "run")})] == 1
    assert found[("opencode_gateway_request_duration_seconds_count", one)] == 1
    assert found[("opencode_gateway_requests_in_flight", frozenset())] == 0
    stats = (await client.get("/stats", headers=ADMIN)).json()
    cost = sum(v for (name, _), v in found.items() if name == "opencode_gateway_cost_usd_total")
    assert cost == pytest.approx(0.003) and stats["cost"] == 0.003  # as written, not 0.0030000000000000005
    assert (stats["requests"], stats["refused"]) == (2, 1)


async def test_only_the_admin_or_the_metrics_token_may_scrape(client: httpx.AsyncClient) -> None:
    launch = await mint(client)
    assert (await client.get("/metrics")).status_code == 401
    assert (await client.get("/metrics", headers={"authorization": f"Bearer {launch}"})).status_code == 401
    assert (await client.get("/metrics", headers=ADMIN)).status_code == 200


def test_a_labels_values_are_bounded() -> None:
    metrics = Metrics(("ticket",))
    for i in range(MAX_VALUES + 50):
        metrics.recorded(record(f"r{i}"), {"ticket": f"ENG-{i}"})
    tickets = {
        dict(labels)["ticket"]
        for (name, labels) in samples(metrics.exposition().decode())
        if name == "opencode_gateway_requests_total"
    }
    assert len(tickets) == MAX_VALUES + 1 and "_other" in tickets
