"""The dashboard's figures: report's own totals and groups, per-day series, what caching saved,
and the runs with their requests; an unpriced request is never a $0 one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencode_gateway.accounting.ledger import Ledger
from opencode_gateway.accounting.report import build_report
from opencode_gateway.dashboard.data import SERIES, Query, dashboard_data
from opencode_gateway.dashboard.page import render_page
from opencode_gateway.errors import SettingsError
from tests.support.builders import record, spend_ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return spend_ledger(tmp_path / "ledger.db")


def test_totals_and_groups_are_the_reports_own(ledger: Path) -> None:
    data = dashboard_data(ledger, Query(by="ticket"))
    report = build_report(ledger, by="ticket").to_dict()
    assert data["total"] == report["total"]
    assert [{k: v for k, v in g.items() if k in report["groups"][0]} for g in data["groups"]] == report["groups"]
    assert data["total"]["unpriced_requests"] == 2 and data["usage_missing_requests"] == 1


def test_the_filter_is_reports_filter(ledger: Path) -> None:
    query = Query(by="model", since="2026-12-01", where=(("ticket", "ENG-401"),))
    data = dashboard_data(ledger, query)
    report = build_report(ledger, by="model", since="2026-12-01", where=[("ticket", "ENG-401")]).to_dict()
    assert data["total"] == report["total"] and data["total"]["requests"] > 0
    assert {row[4]["ticket"] for row in data["runs"]["rows"]} == {"ENG-401"}


def test_spend_per_day_sums_to_the_total_per_group_and_per_model(ledger: Path) -> None:
    data = dashboard_data(ledger, Query(by="ticket"))
    assert data["days"] == sorted(data["days"]) and len(data["days"]) > 1
    for series in (data["by_group"], data["by_model"]):
        assert len(series["names"]) == len(series["cost"])
        assert all(len(values) == len(data["days"]) for values in series["cost"])
        assert sum(map(sum, series["cost"])) == pytest.approx(data["total"]["cost"], abs=1e-12)
    assert set(data["by_model"]["names"]) == {
        "openai/gpt-4o-mini",
        "litellm_proxy/team-a",
        "anthropic/claude-sonnet-4-5",
    }


def test_past_the_drawn_series_the_rest_is_one_others_series(tmp_path: Path) -> None:
    ledger = spend_ledger(tmp_path / "many.db", runs=30)
    data = dashboard_data(ledger, Query(by="run"))
    assert len(data["by_group"]["names"]) == SERIES and data["by_group"]["names"][-1] == "(others)"
    assert sum(map(sum, data["by_group"]["cost"])) == pytest.approx(data["total"]["cost"], abs=1e-12)


def test_what_caching_saved_is_priced_or_unknown_never_zero(ledger: Path) -> None:
    groups = {g["key"]: g for g in dashboard_data(ledger, Query(by="model"))["groups"]}
    mini = groups["openai/gpt-4o-mini"]
    # gpt-4o-mini: 1.5e-7 input, 7.5e-8 cache read a token (LiteLLM's map).
    assert mini["cache_read_tokens"] > 0
    assert mini["cache_saved"] == pytest.approx(mini["cache_read_tokens"] * 7.5e-8, rel=1e-9)
    assert mini["cached_share"] == pytest.approx(mini["cache_read_tokens"] / mini["input_tokens"], abs=1e-6)
    assert groups["litellm_proxy/team-a"]["cache_saved"] is None  # "team-a": no price known


def test_runs_come_newest_first_with_their_requests(ledger: Path) -> None:
    data = dashboard_data(ledger, Query(limit=5, offset=0))
    runs = data["runs"]
    assert runs["count"] == 12 and len(runs["rows"]) == 5
    started = [row[runs["columns"].index("started_at")] for row in runs["rows"]]
    assert started == sorted(started, reverse=True)
    by_run = data["requests"]["by_run"]
    assert set(by_run) == {row[0] for row in runs["rows"]} and all(len(v) == 3 for v in by_run.values())
    everything = dashboard_data(ledger, Query(limit=None))
    assert len(everything["runs"]["rows"]) == 12 and len(everything["requests"]["by_run"]) == 12
    unpriced = everything["requests"]["by_run"]["run_01"][0]
    columns = everything["requests"]["columns"]
    assert unpriced[columns.index("cost")] is None and unpriced[columns.index("cost_source")] == "unpriced"
    json.dumps(everything)  # the page embeds it


def test_a_typo_in_by_is_an_error(ledger: Path) -> None:
    with pytest.raises(SettingsError, match="cannot group by 'tikcet'"):
        dashboard_data(ledger, Query(by="tikcet"))


def test_a_refused_call_is_shown_apart_from_the_requests_made(tmp_path: Path) -> None:
    path = spend_ledger(tmp_path / "ledger.db", runs=1, requests_per_run=3)
    ledger = Ledger(path)
    ledger.record_request(
        "run_00", record("refused", usage=None, cost=0.0, source="refused", status=400, started_at=1_796_000_001.0)
    )
    ledger.close()
    data = dashboard_data(path, Query(by="ticket"))
    assert (data["total"]["requests"], data["total"]["refused"]) == (3, 1)
    page = render_page(data)
    assert 'data-total="requests" data-value="3"' in page and 'data-total="refused" data-value="1"' in page
    assert "<td>3 (1 refused)</td>" in page  # the run's row
