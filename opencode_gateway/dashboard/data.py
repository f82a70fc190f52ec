"""What the spend dashboard shows, read from the ledger and aggregated there (SQLite does the sums:
a ledger of 100,000 requests comes to a few days x groups of figures and one page of runs).

The totals and the groups are `report`'s own (build_report), so the page and `report --format
json` agree by construction for the same filter. Unpriced requests stay unpriced: their cost is
None, counted apart, never 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..accounting.ledger import LedgerLocation, connect
from ..accounting.ledger.queries import (
    cost_per_bucket,
    days_covered,
    grouping,
    requests_of,
    runs_page,
    selection,
    usage_missing,
)
from ..accounting.report import report_from

__all__ = ["Query", "dashboard_data"]

SERIES = 8  # groups (and models) drawn one by one; the others are summed as "(others)"
REQUEST_COLUMNS = (
    "started_at",
    "model",
    "purpose",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost",
    "cost_source",
    "status_code",
    "ttfb_s",
    "usage_missing",
)
RUN_COLUMNS = (
    "run_id",
    "started_at",
    "ended_at",
    "model",
    "metadata",
    "stop_reason",
    "requests",
    "refused",
    "cost",
    "unpriced_requests",
)


@dataclass(frozen=True)
class Query:
    """Which requests, grouped how, and which page of runs (`limit` None: every run)."""

    by: str = "ticket"
    since: str | None = None
    until: str | None = None
    where: tuple[tuple[str, str], ...] = ()
    offset: int = 0
    limit: int | None = 50


def dashboard_data(path: LedgerLocation | Path, query: Query) -> dict[str, Any]:
    """Everything the page draws, as JSON-able values."""
    connection = connect(path, create=False)
    try:
        chosen = selection(connection.dialect, query.since, query.until, query.where)
        report = report_from(connection, by=query.by, since=query.since, until=query.until, where=query.where)
        bucket = "hour" if days_covered(connection, chosen) <= 1 else "day"
        days = cost_per_bucket(connection, grouping(connection.dialect, query.by), chosen, bucket)
        models = cost_per_bucket(connection, grouping(connection.dialect, "model"), chosen, bucket)
        missing = usage_missing(connection, chosen)
        runs = _runs(connection, chosen, query.offset, query.limit)
    finally:
        connection.close()
    figures = report.to_dict()
    all_days = sorted({day for day, _, _ in days} | {day for day, _, _ in models})
    return {
        "by": query.by,
        "since": query.since,
        "until": query.until,
        "where": [list(pair) for pair in query.where],
        "generated_at": time.time(),
        "total": figures["total"],
        "groups": figures["groups"],
        "days": all_days,
        "bucket": bucket,
        "by_group": _series(days, all_days),
        "by_model": _series(models, all_days),
        "usage_missing_requests": missing or 0,
        **runs,
    }


def _series(rows: Sequence[tuple[str, str | None, float]], days: Sequence[str]) -> dict[str, Any]:
    """Cost per day of the most expensive names, and of the others summed."""
    totals: dict[str | None, float] = {}
    for _, name, cost in rows:
        totals[name] = totals.get(name, 0.0) + cost
    ranked = sorted(totals, key=lambda name: (-totals[name], str(name)))
    shown = ranked[:SERIES] if len(ranked) <= SERIES else ranked[: SERIES - 1]
    index = {day: i for i, day in enumerate(days)}
    values = {name: [0.0] * len(days) for name in shown}
    others = [0.0] * len(days)
    for day, name, cost in rows:
        (values[name] if name in values else others)[index[day]] += cost
    names = ["(none)" if name is None else name for name in shown]
    series = [values[name] for name in shown]
    if len(ranked) > len(shown):
        names.append("(others)")
        series.append(others)
    return {"names": names, "cost": series}


# A request's figures as the page shows them, in fewer bytes (a page of 100,000 requests embeds
# them all): times to the millisecond, costs to 1e-12 USD.
_DIGITS = {"started_at": 3, "ttfb_s": 3, "cost": 12}


def _compact(column: str, value: Any) -> Any:
    return round(value, _DIGITS[column]) if column in _DIGITS and isinstance(value, float) else value


def _runs(connection: Any, chosen: tuple[str, list[Any]], offset: int, limit: int | None) -> dict[str, Any]:
    """A page of runs, newest first, with the requests of each (those the filter covers)."""
    count, page = runs_page(connection, chosen, offset, limit)
    rows = [
        [row[column] if column != "metadata" else json.loads(row["metadata"] or "{}") for column in RUN_COLUMNS]
        for row in page
    ]
    requests: dict[str, list[list[Any]]] = {row[0]: [] for row in rows}
    for row in requests_of(connection, chosen, list(requests), REQUEST_COLUMNS):
        requests[row["run_id"]].append([_compact(column, row[column]) for column in REQUEST_COLUMNS])
    return {
        "runs": {"count": count, "offset": offset, "limit": limit, "columns": list(RUN_COLUMNS), "rows": rows},
        "requests": {"columns": list(REQUEST_COLUMNS), "by_run": requests},
    }
