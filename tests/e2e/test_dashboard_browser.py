"""The dashboard in a real headless Chromium: the `report --html` file (no network) and the live
page of a real `serve` with a real OpenCode session; screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway.dashboard.page import REFRESH_S
from tests.support.builders import run_row, spend_ledger
from tests.support.scripted_upstream import Reply, ScriptedUpstream, usage

pytestmark = pytest.mark.e2e
CLI = [sys.executable, "-m", "opencode_gateway"]


def cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done


def total(page: Any, key: str) -> float:
    return float(page.get_attribute(f'[data-total="{key}"]', "data-value"))


def legend(page: Any, chart: str) -> list[str]:
    return page.locator(f"#{chart} .u-legend .u-series .u-label").all_inner_texts()[1:]  # after the x axis


def test_the_html_report_draws_its_charts_and_agrees_with_report_json(
    tmp_path: Path, page: Any, artifacts: Path
) -> None:
    ledger = spend_ledger(tmp_path / "ledger.db")
    out = tmp_path / "spend.html"
    cli("report", "--ledger", ledger, "--html", out)
    report = json.loads(cli("report", "--ledger", ledger, "--format", "json").stdout)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]")
    assert [url for url in fetched if not url.startswith("file:")] == []  # everything is inline

    assert page.locator("#chart-group canvas").count() == 1 and page.locator("#chart-model canvas").count() == 1
    assert sorted(legend(page, "chart-group")) == sorted(group["key"] for group in report["groups"])
    assert sorted(legend(page, "chart-model")) == [
        "anthropic/claude-sonnet-4-5",
        "litellm_proxy/team-a",
        "openai/gpt-4o-mini",
    ]
    for key in (
        "cost",
        "runs",
        "requests",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "unpriced_requests",
    ):
        assert total(page, key) == pytest.approx(report["total"][key], abs=1e-12), key
    for group in report["groups"]:
        shown = page.get_attribute(f'#groups tr[data-group="{group["key"]}"] td[data-cost]', "data-cost")
        assert float(shown) == pytest.approx(group["cost"], abs=1e-12)

    alerts = " ".join(page.locator("[role=alert]").all_inner_texts())
    assert "2 requests could not be priced" in alerts and "1 request ended without usage" in alerts

    run = page.locator('#runs tbody.run[data-run="run_01"]')
    run.locator("summary").click()
    requests = run.locator("tr.request")
    requests.first.wait_for()
    assert requests.count() == 3
    assert "unpriced" in requests.nth(0).inner_text() and "$0.000000" not in requests.nth(0).inner_text()
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(artifacts / "dashboard-report-html.png"))


def test_the_runs_table_pages_fifty_runs_at_a_time(tmp_path: Path, page: Any) -> None:
    ledger = spend_ledger(tmp_path / "ledger.db", runs=120, requests_per_run=1)
    out = tmp_path / "spend.html"
    cli("report", "--ledger", ledger, "--html", out)
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]")
    visible = page.locator("#runs tbody.run:visible")
    assert visible.count() == 50 and page.inner_text("#page") == "page 1 of 3"
    newest = visible.first.get_attribute("data-run")
    page.click("#next")
    page.click("#next")
    assert visible.count() == 20 and page.inner_text("#page") == "page 3 of 3"
    assert visible.first.get_attribute("data-run") != newest


@pytest.fixture
def live_server(upstream: ScriptedUpstream, tmp_path: Path, opencode_bin: str) -> Any:
    """A real `opencode-gateway serve` (SDK mode on the scripted model); its stderr lines in a queue."""
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home"), "OPENCODE_BIN": opencode_bin}
    process = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--api-base", upstream.url, "--api-key", "sk-provider"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr], daemon=True).start()  # type: ignore[union-attr]
    yield process, lines, env
    process.terminate()
    process.wait(30)


def login_url(lines: queue.Queue[str]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
        if "spend dashboard: " in line:
            return line.split("spend dashboard: ", 1)[1].split()[0]
    raise AssertionError("serve printed no login URL within 60 s")


def test_the_live_page_shows_a_new_request_within_its_refresh(
    live_server: Any, upstream: ScriptedUpstream, workdir: Path, page: Any, artifacts: Path
) -> None:
    process, lines, env = live_server
    page.goto(login_url(lines))
    page.wait_for_selector("body[data-ready]")
    assert page.url.endswith("/") and "live, reloaded every" in page.inner_text("header")
    before = total(page, "requests")
    upstream.script(Reply(text="Done live.", usage=usage(1200, 30)))
    launched = subprocess.run(
        [
            *CLI,
            "opencode",
            "-m",
            "openai/gpt-4o-mini",
            "--metadata",
            "ticket=ENG-LIVE",
            "--",
            "run",
            "--format",
            "json",
            "--title",
            "live",
            "say hi",
        ],
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert launched.returncode == 0, launched.stderr
    ended = time.monotonic()
    page.wait_for_function(
        f"Number(document.querySelector('[data-total=\"requests\"]').dataset.value) > {before}",
        timeout=REFRESH_S * 10 * 1000,
    )  # a refresh or two; generous on a busy machine
    shown_after = time.monotonic() - ended
    assert total(page, "requests") == before + 1 and total(page, "input_tokens") >= 1200
    assert "ENG-LIVE" in page.inner_text("#sessions") and "ENG-LIVE" in page.inner_text("#groups")
    print(f"the new request was on the page {shown_after:.1f} s after the run ended (refresh: {REFRESH_S} s)")
    page.screenshot(path=str(artifacts / "dashboard-live.png"))


def test_a_spent_login_link_shows_how_to_get_a_new_one_and_serve_login_gives_one(live_server: Any, page: Any) -> None:
    process, lines, env = live_server
    first = login_url(lines)
    page.goto(first)
    page.wait_for_selector("body[data-ready]")
    page.context.clear_cookies()
    page.goto(first)  # spent: a page saying what to do, not a raw JSON 401
    assert "already used" in page.inner_text("body") and "opencode-gateway serve login" in page.inner_text("pre")
    fresh = subprocess.run([*CLI, "serve", "login"], env=env, capture_output=True, text=True, timeout=60)
    assert fresh.returncode == 0, fresh.stderr
    page.goto(fresh.stdout.strip())
    page.wait_for_selector("body[data-ready]")
    assert "<h1>Spend</h1>" in page.content()


HOSTILE = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def test_what_the_ledger_holds_is_shown_as_text_never_run_as_markup(tmp_path: Path, page: Any) -> None:
    """Session ids, metadata and the upstream's model name reach the ledger from outside (an agent
    holding a launch's token chooses its session ids): the page shows them, and runs none of them."""
    from opencode_gateway.accounting.ledger import Ledger
    from tests.support.builders import record

    ledger = Ledger(tmp_path / "ledger.db")
    ledger.start_run(
        run_row(
            "run_x",
            started_at=1_796_000_000.0,
            model=HOSTILE,
            workdir=HOSTILE,
            metadata={"ticket": HOSTILE},
            tags=(HOSTILE,),
            session_id=HOSTILE,
        )
    )
    ledger.record_request(
        "run_x",
        record(
            "r1", model=HOSTILE, upstream_model=HOSTILE, session_id=HOSTILE, started_at=1_796_000_000.0, error=HOSTILE
        ),
    )
    ledger.close()
    out = tmp_path / "spend.html"
    cli("report", "--ledger", tmp_path / "ledger.db", "--html", out)
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]")
    page.locator("#runs summary").first.click()
    page.locator("tr.request").first.wait_for()
    assert page.evaluate("window.pwned") is None
    assert HOSTILE in page.inner_text("#groups") and HOSTILE in page.inner_text("#runs")
    assert HOSTILE in legend(page, "chart-group") and HOSTILE in legend(page, "chart-model")


def test_without_javascript_the_tables_are_all_there(tmp_path: Path, browser: Any) -> None:
    ledger = spend_ledger(tmp_path / "ledger.db", runs=60, requests_per_run=1)
    out = tmp_path / "spend.html"
    cli("report", "--ledger", ledger, "--html", out)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(out.as_uri())
    assert page.locator("#groups tr[data-group]").count() == 5
    assert page.locator("#runs tbody.run:visible").count() == 60  # every page's runs, one under another
    assert page.locator("[data-total=cost]").inner_text().startswith("$")
    assert page.locator("details:has-text('spend per day by ticket as a table') table tr").count() > 1
    context.close()


def test_a_first_days_charts_start_at_zero_by_hour_with_the_figures_in_the_legend(
    tmp_path: Path, page: Any, artifacts: Path
) -> None:
    """A new user's first dashboard: every run on one day, one model with 84% of the spend. Its bar
    was drawn as a sliver (the y axis started near the smallest value) in one bar for the day."""
    from opencode_gateway.accounting.ledger import Ledger
    from opencode_gateway.accounting.usage import Usage
    from tests.support.builders import record

    path = tmp_path / "first-day.db"
    ledger = Ledger(path)
    day = 1_796_428_800.0  # 2026-12-03 00:00 UTC
    for number, (model, cost, hour) in enumerate(
        (("openai/gpt-4.1", 0.84, 9), ("openai/gpt-4o-mini", 0.16, 9), ("openai/gpt-4.1", 0.0, 14))
    ):
        run_id = f"run_{number}"
        ledger.start_run(
            run_row(run_id, started_at=day + hour * 3600, model=model, mode="sdk", metadata={"ticket": f"ENG-{number}"})
        )
        ledger.record_request(
            run_id,
            record(f"{run_id}_r", usage=Usage(1000, 10), cost=cost, model=model, started_at=day + hour * 3600 + 60),
        )
    ledger.close()
    out = tmp_path / "first-day.html"
    cli("report", "--ledger", path, "--html", out)
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]")
    page.wait_for_selector("#chart-model[data-y-min]")  # drawn
    chart = page.locator("#chart-model")
    assert float(chart.get_attribute("data-y-min")) == 0.0
    assert float(chart.get_attribute("data-y-max")) >= 1.0  # the 9:00 stack: $0.84 + $0.16
    assert chart.get_attribute("data-bars") == "2"  # 09:00 and 14:00, not one bar for the day
    headings = page.locator("h2").all_inner_texts()
    assert "Spend per hour, by model" in headings and "Top tickets by cost" in headings
    values = dict(
        zip(
            legend(page, "chart-model"),
            page.locator("#chart-model .u-legend .u-series .u-value").all_inner_texts()[1:],
            strict=True,
        )
    )
    assert values == {"openai/gpt-4.1": "$0.840000", "openai/gpt-4o-mini": "$0.160000"}  # before any hover
    page.screenshot(path=str(artifacts / "dashboard-first-day.png"))


def ledger_of(path: Path, spends: list[tuple[str, float, float]]) -> Path:
    """A ledger of one-request runs: (ticket, cost, when)."""
    from opencode_gateway.accounting.ledger import Ledger
    from opencode_gateway.accounting.usage import Usage
    from tests.support.builders import record

    ledger = Ledger(path)
    for number, (ticket, cost, when) in enumerate(spends):
        ledger.start_run(
            run_row(f"run_{number}", started_at=when, model="openai/gpt-4o-mini", metadata={"ticket": ticket})
        )
        ledger.record_request(
            f"run_{number}",
            record(f"r{number}", usage=Usage(1000, 10), cost=cost, model="openai/gpt-4o-mini", started_at=when),
        )
    ledger.close()
    return path


HOUR = 1_796_428_800.0 + 9 * 3600  # 2026-12-03 09:00 UTC
LEDGERS = {
    # three tickets at $1.10 in one hour: one $3.30 stack (drawn cut at $1 on a fixed axis, two not at all)
    "one hour": [("ENG-1", 1.10, HOUR + 60), ("ENG-2", 1.10, HOUR + 120), ("ENG-3", 1.10, HOUR + 180)],
    # many days, the tallest day $2.50
    "many days": [(f"ENG-{n % 3}", 0.5 + (n % 4), HOUR + n * 86_400 / 2) for n in range(20)],
    # a tiny spend: one $0.0013 hour
    "tiny": [("ENG-1", 0.0013, HOUR + 60)],
}


@pytest.mark.parametrize("name", list(LEDGERS))
def test_the_charts_scale_to_the_tallest_stack_and_draw_every_series(
    name: str, tmp_path: Path, page: Any, artifacts: Path
) -> None:
    """Both dashboards draw their charts with the same page.js (report --html here, serve's live page
    in the test above): the y axis from $0 to just above the tallest stacked bar, whatever it is."""
    spends = LEDGERS[name]
    ledger = ledger_of(tmp_path / "ledger.db", spends)
    out = tmp_path / "spend.html"
    cli("report", "--ledger", ledger, "--html", out)
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]")
    one_day = len({time.strftime("%Y-%m-%d", time.gmtime(when)) for _, _, when in spends}) == 1
    buckets: dict[str, float] = {}  # by hour when every spend is of one day, else by day (as the page)
    for _, cost, when in spends:
        bucket = time.strftime("%Y-%m-%dT%H" if one_day else "%Y-%m-%d", time.gmtime(when))
        buckets[bucket] = buckets.get(bucket, 0.0) + cost
    tallest = max(buckets.values())
    tickets = sorted({ticket for ticket, _, _ in spends})
    for chart, names in (("chart-group", tickets), ("chart-model", ["openai/gpt-4o-mini"])):
        page.wait_for_selector(f"#{chart}[data-y-max]")  # drawn
        element = page.locator(f"#{chart}")
        y_max = float(element.get_attribute("data-y-max"))
        assert float(element.get_attribute("data-y-min")) == 0.0
        assert tallest <= y_max <= 1.2 * tallest, (chart, tallest, y_max)  # every stack whole, none a sliver
        assert sorted(legend(page, chart)) == names  # every series drawn
        assert int(element.get_attribute("data-bars")) == len(buckets)
    page.screenshot(path=str(artifacts / f"dashboard-{name.replace(' ', '-')}.png"))
