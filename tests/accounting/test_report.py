"""Spend reports: per ticket (or any metadata key), model, tag, day, run, session; json and csv.
Each runs on a SQLite ledger and on a PostgreSQL one, and the two give the same numbers."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from pathlib import Path

import pytest

from opencode_gateway.accounting.budget import Claim, PeriodBudget, Spent
from opencode_gateway.accounting.ledger import Ledger, LedgerLocation
from opencode_gateway.accounting.ledger.maintenance import find_runs
from opencode_gateway.accounting.pricing import Cost
from opencode_gateway.accounting.records import ApprovalRecord, RequestRecord, RunUsage
from opencode_gateway.accounting.report import build_report
from opencode_gateway.accounting.usage import Usage
from opencode_gateway.errors import SettingsError
from tests.support.builders import run_row
from tests.support.postgres import Postgres

DAY1, DAY2 = 1_790_000_000.0, 1_790_000_000.0 + 86_400  # 2026-09-21 and -22 (UTC)


def request(
    run_id: str,
    n: int,
    tokens: tuple[int, int, int],
    cost: float | None,
    *,
    model: str = "litellm_proxy/coder",
    started_at: float = DAY1,
) -> RequestRecord:
    usage = Usage(input_tokens=tokens[0], output_tokens=tokens[1], cache_read_tokens=tokens[2])
    return RequestRecord(
        request_id=f"{run_id}-{n}",
        model=model,
        upstream_model=None,
        status_code=200,
        stream=True,
        usage=usage,
        cost=Cost(cost, "litellm" if cost is not None else "unpriced"),
        started_at=started_at,
        duration_s=1.0,
        ttfb_s=0.1,
        session_id=f"ses_{run_id}",
    )


def fill(location: LedgerLocation) -> LedgerLocation:
    """Four runs: ENG-1 twice (one on another model), ENG-2 once, one run without a ticket."""
    ledger = Ledger(location)
    runs = [
        (
            "r1",
            {"ticket": "ENG-1", "team": "a"},
            ("harness", "opencode", "nightly"),
            [request("r1", 1, (1000, 100, 0), 0.010), request("r1", 2, (2000, 50, 1500), 0.005)],
        ),
        (
            "r2",
            {"ticket": "ENG-1", "team": "b"},
            ("harness", "opencode"),
            [request("r2", 1, (500, 10, 0), 0.002, model="openai/gpt-4o-mini", started_at=DAY2)],
        ),
        (
            "r3",
            {"ticket": "ENG-2", "team": "a"},
            ("harness", "opencode", "nightly"),
            [request("r3", 1, (4000, 400, 0), 0.050), request("r3", 2, (100, 1, 0), None)],
        ),
        ("r4", {}, ("harness", "opencode"), [request("r4", 1, (10, 1, 0), 0.0001, started_at=DAY2)]),
    ]
    for run_id, metadata, tags, records in runs:
        ledger.start_run(run_row(run_id, started_at=DAY1, model="litellm_proxy/coder", metadata=metadata, tags=tags))
        for r in records:
            ledger.record_request(run_id, r)
    ledger.close()
    return location


@pytest.fixture
def filled(ledger_at: LedgerLocation) -> LedgerLocation:
    """fill()'s four runs, in a new ledger on each backend."""
    return fill(ledger_at)


def test_by_ticket_sums_each_ticket_most_expensive_first(filled: LedgerLocation) -> None:
    report = build_report(filled, by="ticket")
    rows = {g.key: g for g in report.groups}
    assert [g.key for g in report.groups] == ["ENG-2", "ENG-1", None]
    eng1 = rows["ENG-1"]
    assert (eng1.runs, eng1.requests, eng1.input_tokens, eng1.output_tokens, eng1.cache_read_tokens) == (
        2,
        3,
        3500,
        160,
        1500,
    )
    assert eng1.cost == pytest.approx(0.017) and eng1.unpriced_requests == 0
    assert rows["ENG-2"].cost == pytest.approx(0.050) and rows["ENG-2"].unpriced_requests == 1
    total = report.total
    assert (total.runs, total.requests, total.input_tokens) == (4, 6, 7610)
    assert total.cost == pytest.approx(0.0671) and total.unpriced_requests == 1


def test_json_and_csv_carry_the_same_sums(filled: LedgerLocation) -> None:
    report = build_report(filled, by="ticket")
    data = json.loads(report.render("json"))
    assert data["by"] == "ticket"
    assert [(g["key"], g["requests"]) for g in data["groups"]] == [("ENG-2", 2), ("ENG-1", 3), (None, 1)]
    assert data["total"]["cost"] == pytest.approx(0.0671)
    rows = list(csv.DictReader(io.StringIO(report.render("csv"))))
    assert [r["ticket"] for r in rows] == ["ENG-2", "ENG-1", "(none)", "TOTAL"]
    assert rows[1]["input"] == "3500" and rows[1]["cost_usd"] == "0.017000"
    assert rows[-1]["runs"] == "4" and rows[-1]["unpriced"] == "1"


def test_the_table_has_a_total_line(filled: LedgerLocation) -> None:
    table = build_report(filled, by="ticket").render("table").splitlines()
    assert table[0].split()[:3] == ["ticket", "runs", "requests"]
    assert table[-1].split()[0] == "TOTAL" and table[-2].startswith("---")


def test_any_metadata_key_model_tag_day_run_session(filled: LedgerLocation) -> None:
    assert {g.key: g.requests for g in build_report(filled, by="team").groups} == {"a": 4, "b": 1, None: 1}
    assert {g.key: g.requests for g in build_report(filled, by="model").groups} == {
        "litellm_proxy/coder": 5,
        "openai/gpt-4o-mini": 1,
    }
    by_tag = build_report(filled, by="tag")
    assert {g.key: g.requests for g in by_tag.groups} == {"harness": 6, "opencode": 6, "nightly": 4}
    assert by_tag.total.requests == 6  # a request is counted once in the total, whatever its tags
    assert {g.key: g.requests for g in build_report(filled, by="day").groups} == {"2026-09-21": 4, "2026-09-22": 2}
    assert {g.key for g in build_report(filled, by="run").groups} == {"r1", "r2", "r3", "r4"}
    assert {g.key for g in build_report(filled, by="session").groups} == {"ses_r1", "ses_r2", "ses_r3", "ses_r4"}


def test_filters_by_time_and_metadata(filled: LedgerLocation) -> None:
    assert build_report(filled, by="ticket", since="2026-09-22").total.requests == 2
    assert build_report(filled, by="ticket", until="2026-09-21").total.requests == 4
    only_a = build_report(filled, by="ticket", where=[("team", "a")])
    assert {g.key: g.requests for g in only_a.groups} == {"ENG-2": 2, "ENG-1": 2}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"by": "ticket; DROP TABLE runs"}, "cannot group by"),
        ({"since": "last tuesday"}, "is not a date"),
        ({"where": [("bad key", "x")]}, "metadata keys are"),
    ],
)
def test_bad_report_arguments_are_settings_errors(filled: LedgerLocation, kwargs: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        build_report(filled, **kwargs)


def test_by_workdir_project_week_and_month(filled: LedgerLocation) -> None:
    ledger = Ledger(filled)
    ledger.start_run(run_row("r5", started_at=DAY2, mode="sdk", workdir="/src/app"))
    ledger.record_request("r5", request("r5", 1, (7, 1, 0), 0.001, started_at=DAY2 + 40 * 86_400))
    ledger.close()
    assert {g.key: g.requests for g in build_report(filled, by="workdir").groups} == {"/w": 6, "/src/app": 1}
    assert build_report(filled, by="project").groups == build_report(filled, by="workdir").groups
    assert {g.key: g.requests for g in build_report(filled, by="month").groups} == {"2026-09": 6, "2026-11": 1}
    # 2026-09-21 is a Monday: it and the 22nd are one week; 2026-11-01, a Sunday, ends week 43
    assert {g.key: g.requests for g in build_report(filled, by="week").groups} == {"2026-W38": 6, "2026-W43": 1}


def test_a_word_that_is_no_dimension_and_no_metadata_key_is_an_error_naming_both(
    filled: LedgerLocation, tmp_path: Path
) -> None:
    with pytest.raises(SettingsError) as caught:
        build_report(filled, by="modle")
    message = str(caught.value)
    assert "cannot group by 'modle'" in message and "model, tag, day" in message and "team, ticket" in message
    assert build_report(filled, by="team").groups  # a key some run has
    empty = LedgerLocation(path=tmp_path / "empty.db")
    Ledger(empty).close()
    assert build_report(empty, by="ticket").groups == ()  # the default, before any run has a ticket


def test_by_run_marks_runs_that_are_unfinished_or_abandoned(filled: LedgerLocation) -> None:
    ledger = Ledger(filled)
    ledger.update_run(run_row("r1", ended_at=DAY1 + 5, stop_reason="done", usage=RunUsage(), cost=0.015))
    ledger.abandon("r2")
    ledger.close()
    report = build_report(filled, by="run")
    status = {g.key: g.status for g in report.groups}
    assert status == {"r1": "done", "r2": "abandoned", "r3": "running", "r4": "running"}
    table = report.render("table")
    assert "r2 (abandoned)" in table and "r3 (running)" in table and "r1 (" not in table
    assert {g["key"]: g["status"] for g in json.loads(report.render("json"))["groups"]}["r2"] == "abandoned"


def test_the_report_says_the_share_read_from_cache_and_what_caching_saved(ledger_at: LedgerLocation) -> None:
    path = ledger_at
    ledger = Ledger(path)
    ledger.start_run(run_row("r", started_at=DAY1, mode="sdk", metadata={"ticket": "T"}))
    for n, saved in enumerate((0.004, -0.001, 0.0)):
        ledger.record_request(
            "r",
            dataclasses.replace(
                request("r", n, (1000, 10, 500), 0.001), cost=Cost(0.001, "litellm", cache_saved=saved)
            ),
        )
    ledger.close()
    report = build_report(path, by="ticket")
    [group] = report.groups
    assert group.cache_saved == pytest.approx(0.003) and group.cached_share == pytest.approx(0.5)
    assert report.to_dict()["total"]["cached_share"] == 0.5
    assert "50.0%" in report.render("table") and "0.003000" in report.render("table")
    ledger = Ledger(path)
    ledger.record_request(
        "r", dataclasses.replace(request("r", 9, (1000, 10, 500), None), cost=Cost(None, "unpriced", cache_saved=None))
    )
    ledger.close()
    assert build_report(path, by="ticket").total.cache_saved is None  # never a partial sum read as the whole


def test_a_run_that_made_no_request_is_counted_with_its_outcome(filled: LedgerLocation) -> None:
    """Runs refused by the gateway's check, or interrupted before their first call, were left out
    (a ledger of 30 runs reported 20)."""
    ledger = Ledger(filled)
    for run_id, outcome, error in (
        ("r5", "error", "the key may not use model group 'x'"),
        ("r6", "interrupted", "interrupted before it ended (Ctrl-C, ...)"),
    ):
        ledger.start_run(
            run_row(run_id, started_at=DAY2, model="litellm_proxy/x", metadata={"ticket": "ENG-3"}, tags=("harness",))
        )
        ledger.update_run(
            run_row(run_id, ended_at=DAY2 + 1, stop_reason=outcome, error=error, usage=RunUsage(), cost=0.0)
        )
    ledger.close()
    outcomes = {g.key: g for g in build_report(filled, by="outcome").groups}
    assert outcomes["error"].runs == 1 and outcomes["error"].requests == 0
    assert outcomes["interrupted"].runs == 1 and outcomes["interrupted"].unpriced_requests == 0
    report = build_report(filled, by="ticket")
    assert report.total.runs == 6 and report.total.requests == 6  # the requests of r1..r4 only
    [eng3] = [g for g in report.groups if g.key == "ENG-3"]
    assert (eng3.runs, eng3.requests, eng3.cost) == (2, 0, 0.0)
    by_day = {g.key: g.runs for g in build_report(filled, by="day", since="2026-09-22").groups}
    assert by_day == {"2026-09-22": 4}  # r2, r4, and the two without requests, on the day they started


def refused(run_id: str, n: int) -> RequestRecord:
    """A call a budget refused, as the endpoint records it: it never went out."""
    return RequestRecord(
        request_id=f"{run_id}-refused-{n}",
        model="litellm_proxy/coder",
        upstream_model=None,
        status_code=400,
        stream=True,
        usage=None,
        cost=Cost(0.0, "refused"),
        started_at=DAY1,
        duration_s=0.0,
        ttfb_s=None,
        error="run budget exceeded: max_requests is 3 and 3 requests were made",
    )


def test_calls_a_budget_refused_are_counted_apart_from_the_requests_made(ledger_at: LedgerLocation) -> None:
    """A ticket capped at 3 requests that asked for 5: every report says 3 requests, and 2 refused."""
    ledger = Ledger(ledger_at)
    ledger.start_run(run_row("capped", started_at=DAY1, metadata={"ticket": "ENG-9"}))
    for n in range(3):
        ledger.record_request("capped", request("capped", n, (100, 10, 0), 0.001))
    for n in range(2):
        ledger.record_request("capped", refused("capped", n))
    ledger.close()
    report = build_report(ledger_at, by="ticket")
    [eng9] = report.groups
    assert (eng9.requests, eng9.refused, report.total.requests, report.total.refused) == (3, 2, 3, 2)
    data = json.loads(report.render("json"))
    assert (data["groups"][0]["requests"], data["groups"][0]["refused"]) == (3, 2)
    [row, total] = list(csv.DictReader(io.StringIO(report.render("csv"))))
    assert (row["requests"], row["refused"], total["requests"], total["refused"]) == ("3", "2", "3", "2")
    assert report.render("table").split()[:4] == ["ticket", "runs", "requests", "refused"]
    assert "| ENG-9 | 1 | 3 | 2 |" in report.render("markdown")
    [run] = find_runs(ledger_at)
    assert (run["requests"], run["refused"]) == (3, 2)
    [by_run] = build_report(ledger_at, by="run").groups
    assert (by_run.requests, by_run.refused) == (3, 2)


def test_costs_in_json_carry_no_float_noise(ledger_at: LedgerLocation) -> None:
    path = ledger_at
    ledger = Ledger(path)
    ledger.start_run(run_row("r", started_at=DAY1, mode="sdk", metadata={"ticket": "T"}))
    for n, cost in enumerate((0.001416, 0.001416)):  # 0.0028320000000000003 as floats add up
        ledger.record_request("r", request("r", n, (10, 1, 0), cost))
    ledger.close()
    assert '"cost": 0.002832,' in build_report(path).render("json")


def test_by_run_says_when_on_what_how_each_run_ended_and_its_metadata(filled: LedgerLocation) -> None:
    report = build_report(filled, by="run")
    r1 = next(g for g in report.groups if g.key == "r1")
    assert r1.run is not None and (r1.run.model, dict(r1.run.metadata)) == (
        "litellm_proxy/coder",
        {"ticket": "ENG-1", "team": "a"},
    )
    table = report.render("table")
    assert "started (UTC)" in table and "2026-09-21 " in table and "ticket=ENG-1, team=a" in table
    assert report.to_dict()["groups"][0]["run"]["started_at"] == DAY1


def test_a_breakdown_gives_each_group_its_models(filled: LedgerLocation) -> None:
    report = build_report(filled, by="ticket", breakdown=True)
    eng1 = next(g for g in report.groups if g.key == "ENG-1")
    assert {p.key: p.requests for p in eng1.parts} == {"litellm_proxy/coder": 2, "openai/gpt-4o-mini": 1}
    assert sum(p.cost for p in eng1.parts) == pytest.approx(eng1.cost)
    assert "  └ openai/gpt-4o-mini" in report.render("table")
    assert "ENG-1 / openai/gpt-4o-mini," in report.render("csv")


def test_relative_times_and_a_time_zone() -> None:
    from opencode_gateway.accounting.times import parse_time, zone

    midnight = 1_790_035_200.0  # 2026-09-22 00:00 UTC
    now = midnight + 3600
    assert parse_time("7d", now=now) == now - 7 * 86400 and parse_time("24h", now=now) == now - 86400
    assert parse_time("today", now=now) == midnight and parse_time("yesterday", now=now) == midnight - 86400
    assert parse_time("today", end_of_day=True, now=now) == midnight + 86400
    berlin = zone("Europe/Berlin")  # UTC+2 in September: the 22nd starts there at 22:00 UTC on the 21st
    assert parse_time("2026-09-22", tz=berlin) == midnight - 7200 == parse_time("2026-09-22", tz=zone("+02:00"))
    with pytest.raises(SettingsError, match="--tz 'Mars/Olympus' is not a time zone"):
        zone("Mars/Olympus")
    with pytest.raises(SettingsError, match="a time ago such as 24h"):
        parse_time("last tuesday")


def test_days_follow_the_time_zone(filled: LedgerLocation) -> None:
    """The requests start at 13:33 UTC on the 21st and 22nd: at +11:00 that is 00:33 the next day."""
    assert {g.key for g in build_report(filled, by="day").groups} == {"2026-09-21", "2026-09-22"}
    assert {g.key for g in build_report(filled, by="day", tz="+11:00").groups} == {"2026-09-22", "2026-09-23"}


def test_markdown_is_a_github_table(filled: LedgerLocation) -> None:
    lines = build_report(filled, by="ticket").render("markdown").splitlines()
    assert lines[0].startswith("| ticket | runs | requests |") and lines[1].startswith("| --- | ---: | ---: |")
    assert lines[-1].startswith("| **TOTAL** |") and all(line.endswith("|") for line in lines)


@pytest.mark.parametrize("by", ["ticket", "team", "model", "tag", "day", "week", "month", "run", "session", "outcome"])
def test_both_backends_give_the_same_report(by: str, tmp_path: Path, postgres: Postgres) -> None:
    sqlite = fill(LedgerLocation(path=tmp_path / "ledger.db"))
    team = fill(LedgerLocation.of(postgres.create_database(), tmp_path))

    def figures(location: LedgerLocation) -> dict:
        return build_report(location, by=by, breakdown=True, tz="+11:00").to_dict()

    one, other = figures(sqlite), figures(team)
    assert json.dumps(one, sort_keys=True) == json.dumps(other, sort_keys=True)  # costs too, to the last digit
    assert one["groups"] and one["total"]["requests"] == 6


def test_a_number_in_metadata_is_its_text_in_groups_filters_and_budgets(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    for run_id, pr in (("a", 42), ("b", 42), ("c", 7.5)):
        ledger.start_run(run_row(run_id, started_at=DAY1, mode="sdk", metadata={"pr": pr}))  # fmt: skip
        ledger.record_request(run_id, request(run_id, 1, (10, 1, 0), 0.001))
    cap = PeriodBudget.from_setting("pr", {"per": "day", "max_requests": 2})
    verdict = ledger.hold(Claim("x", ((cap, "42"),), Spent(1, 10, 0.0), DAY1 + 60)).result()
    ledger.close()
    assert {g.key: g.requests for g in build_report(ledger_at, by="pr").groups} == {"42": 2, "7.5": 1}
    assert build_report(ledger_at, by="run", where=[("pr", "42")]).total.requests == 2
    assert verdict is not None  # pr=42's two calls today are counted: a third is refused


HOSTILE = {
    "team": 'a\n\n## Approved\n[merge now](http://127.0.0.1:9/x) <img src="http://127.0.0.1:9/b.png"> |x|\\',
    "ticket": '=HYPERLINK("http://127.0.0.1:9/","ok")',
    "owner": "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;TITLE\x07",
}


@pytest.fixture
def hostile(tmp_path: Path) -> LedgerLocation:
    """A ledger holding values no check let through today (an older gateway wrote them, or an
    import did): a report still shows each as text in its cell."""
    location = LedgerLocation(path=tmp_path / "ledger.db")
    ledger = Ledger(location)
    for run_id, metadata in (("h1", HOSTILE), ("h2", {"ticket": "+cmd|' /C calc'!A0", "team": "@SUM(1)"})):
        ledger.start_run(run_row(run_id, started_at=DAY1, mode="sdk", metadata=metadata))  # fmt: skip
        ledger.record_request(run_id, request(run_id, 1, (10, 1, 0), 0.001))
    ledger.close()
    return location


def test_markdown_keeps_a_hostile_value_in_its_cell(hostile: LedgerLocation) -> None:
    """A pull-request comment gets no heading, link or image beacon from a metadata value."""
    for by in ("team", "run"):
        text = build_report(hostile, by=by).render("markdown")
        lines = text.splitlines()
        assert len(lines) == 2 + 2 + 1  # header, rule, two groups, total: the newlines were folded
        assert all(line.startswith("| ") and line.endswith(" |") for line in lines)
        assert "<img" not in text and not re.search(r"(?<!\\)\]\(", text) and "\x1b" not in text
        assert "&lt;img" in text and "\\[merge now\\]" in text and "\\|x\\|\\\\" in text
        cell_ends = re.compile(r"(?<!\\)(?:\\\\)*\|")  # a | after an even run of backslashes
        assert {len(cell_ends.findall(line)) for line in lines} == {len(cell_ends.findall(lines[0]))}


def test_csv_cells_cannot_start_a_formula(hostile: LedgerLocation) -> None:
    for by in ("ticket", "team", "run"):
        rows = list(csv.reader(io.StringIO(build_report(hostile, by=by).render("csv"))))
        assert not [c for row in rows for c in row if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    tickets = [row[0] for row in csv.reader(io.StringIO(build_report(hostile, by="ticket").render("csv")))]
    assert '\'=HYPERLINK("http://127.0.0.1:9/","ok")' in tickets  # kept whole, shown as text


def test_the_terminal_table_shows_control_characters(hostile: LedgerLocation) -> None:
    for by in ("owner", "team", "run"):
        text = build_report(hostile, by=by).render("table")
        assert "\x1b" not in text and "\x07" not in text
        assert len(text.splitlines()) == 1 + 2 + 1 + 1  # header, groups, rule, total
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in build_report(hostile, by="owner").render("table")


@pytest.mark.parametrize("value", ["a\nb", "ok\x1b]0;T\x07", "tab\there", "c1\x9b2J", ["x", {"y": "\r"}]])
def test_a_metadata_value_with_a_control_character_is_refused(value: object) -> None:
    from opencode_gateway.config.attribution import check_attribution

    with pytest.raises(SettingsError, match="holds a control character"):
        check_attribution((), {"team": value}, ("ticket",))
    with pytest.raises(SettingsError, match="holds a control character"):
        check_attribution((), {"te\nam": "x"}, ())
    check_attribution((), {"team": "a b", "pr": 42, "labels": ["x", {"y": "z"}]}, ("ticket",))


def _asks(location: LedgerLocation, run_id: str, *decisions: str) -> None:
    ledger = Ledger(location)
    for n, decision in enumerate(decisions):
        record = ApprovalRecord(f"{run_id}-a{n}", None, f"call_{n}", "bash", "make", decision, "policy", "", DAY1, 0.01)
        ledger.record_approval(run_id, record)
    ledger.close()


def test_asks_are_counted_per_group_once_a_ledger_has_any(filled: LedgerLocation) -> None:
    """A run's asks count once in each of its groups, however many requests it made."""
    plain = build_report(filled, by="ticket")
    assert "asked" not in plain.render("table") and plain.total.asked == 0  # no asks: no columns
    _asks(filled, "r1", "allow", "deny", "deny")  # r1 made two requests
    _asks(filled, "r3", "allow")
    report = build_report(filled, by="ticket")
    groups = {g.key: (g.asked, g.allowed, g.denied) for g in report.groups}
    assert groups == {"ENG-1": (3, 1, 2), "ENG-2": (1, 1, 0), None: (0, 0, 0)}
    assert (report.total.asked, report.total.allowed, report.total.denied) == (4, 2, 2)
    by_tag = {g.key: g.asked for g in build_report(filled, by="tag").groups}
    assert by_tag["nightly"] == 4 and by_tag["harness"] == 4
    rows = list(csv.reader(io.StringIO(report.render("csv"))))
    assert rows[0][-3:] == ["asked", "allowed", "denied"] and rows[-1][-3:] == ["4", "2", "2"]
    assert json.loads(report.render("json"))["total"]["denied"] == 2


def test_by_host_groups_runs_by_the_machine_they_ran_on(ledger_at: LedgerLocation) -> None:
    ledger = Ledger(ledger_at)
    for run_id, owner in (("a", "laptop:101:5"), ("b", "laptop:102:6"), ("c", "ci-runner-7:9:1")):
        ledger.start_run(run_row(run_id, started_at=DAY1, metadata={"ticket": "ENG-1"}, owner=owner))
        ledger.record_request(run_id, request(run_id, 1, (100, 10, 0), 0.001))
    ledger.close()
    groups = {g.key: (g.runs, g.requests) for g in build_report(ledger_at, by="host").groups}
    assert groups == {"laptop": (2, 2), "ci-runner-7": (1, 1)}


def test_a_narrow_terminal_gets_a_compact_table_every_line_within_its_width(filled: LedgerLocation) -> None:
    for by in ("ticket", "run", "model"):
        report = build_report(filled, by=by, breakdown=True)
        assert max(map(len, report.render("table").splitlines())) > 80  # every column: wider
        compact = report.render("table", width=80).splitlines()
        assert max(map(len, compact)) <= 80, compact
        assert compact[0].split()[:3] == [by, "runs", "requests"] and compact[-1].split()[0] == "TOTAL"
    rows = {
        line.split()[0]: line.split()
        for line in build_report(filled, by="ticket").render("table", width=80).splitlines()
    }
    assert rows["ENG-1"][1:5] == ["2", "3", "3.5k", "160"]  # runs, requests, input and output tokens
    assert build_report(filled, by="ticket").render("table", width=400) == build_report(filled, by="ticket").render(
        "table"
    )
