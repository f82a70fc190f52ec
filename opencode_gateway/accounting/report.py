"""Spend reports over the ledger: totals per ticket (or any metadata key), model, tag, day, week,
month, run, session, workdir or outcome, with every token kind, the cost, and how many requests
could not be priced."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import SettingsError
from .ledger import connect

__all__ = ["BUILT_IN_GROUPS", "DEFAULT_BY", "SOURCE", "STARTED", "Group", "Grouping", "Report", "build_report", "grouping",
           "parse_time", "render_table", "report_from", "selection"]

# When a request started; a run that made none, when it started (reports count every run).
STARTED = "COALESCE(q.started_at, r.started_at)"
BUILT_IN_GROUPS: Mapping[str, str] = {
    "model": "COALESCE(q.model, r.model)",
    "tag": "tag.value",
    "day": f"date({STARTED}, 'unixepoch')",
    "week": f"strftime('%Y-W%W', {STARTED}, 'unixepoch')",  # weeks from Monday, UTC
    "month": f"strftime('%Y-%m', {STARTED}, 'unixepoch')",
    "run": "r.run_id",
    "session": "COALESCE(r.session_id, q.session_id)",
    "workdir": "r.workdir",
    "project": "r.workdir",  # ccusage's word for it
    "outcome": "COALESCE(r.stop_reason, 'running')",  # done, error, timeout, interrupted, abandoned...
    "purpose": "CASE WHEN q.request_id IS NOT NULL THEN COALESCE(q.purpose, 'main') END",  # main, title, ...
}
DEFAULT_BY = "ticket"  # may be grouped by before any run has a ticket
_METADATA_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_SUMS = """COUNT(DISTINCT r.run_id) AS runs, COUNT(q.request_id) AS requests,
    SUM(q.input_tokens) AS input_tokens, SUM(q.output_tokens) AS output_tokens,
    SUM(q.cache_read_tokens) AS cache_read_tokens, SUM(q.cache_write_tokens) AS cache_write_tokens,
    SUM(q.reasoning_tokens) AS reasoning_tokens, SUM(q.cost) AS cost,
    SUM(q.request_id IS NOT NULL AND q.cost IS NULL) AS unpriced_requests, SUM(q.cache_saved) AS cache_saved,
    SUM(q.cache_saved IS NULL AND q.cache_read_tokens + q.cache_write_tokens > 0) AS cache_saved_unknown"""


@dataclass(frozen=True)
class Group:
    key: str | None
    runs: int
    requests: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cost: float  # of the priced requests
    unpriced_requests: int
    # What prompt caching saved (pricing.Cost.cache_saved); None when a request with cache tokens
    # had no known price.
    cache_saved: float | None = 0.0
    status: str | None = None  # by run: how it ended (done, error, ...), "running" or "abandoned"

    @property
    def cached_share(self) -> float:
        """The share of the prompt tokens read from the provider's cache."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def label(self) -> str:
        """The group's name in a table: an unfinished or abandoned run says so."""
        name = "(none)" if self.key is None else self.key
        return f"{name} ({self.status})" if self.status in ("running", "abandoned") else name


@dataclass(frozen=True)
class Report:
    by: str
    groups: tuple[Group, ...]
    total: Group

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "groups": [_group_dict(g) for g in self.groups], "total": _group_dict(self.total)}

    def render(self, fmt: str) -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        rows = [*self.groups, self.total]
        header = [self.by, "runs", "requests", "input", "output", "cache_read", "cache_write", "reasoning",
                  "cost_usd", "unpriced", "cached", "cache_saved_usd"]
        cells = [[("TOTAL" if g is self.total else g.label), str(g.runs),
                  str(g.requests), str(g.input_tokens), str(g.output_tokens), str(g.cache_read_tokens),
                  str(g.cache_write_tokens), str(g.reasoning_tokens), f"{g.cost:.6f}", str(g.unpriced_requests),
                  f"{g.cached_share:.1%}", "unknown" if g.cache_saved is None else f"{g.cache_saved:.6f}"]
                 for g in rows]
        if fmt == "csv":
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(cells)
            return out.getvalue()
        return render_table(header, cells)


def _group_dict(group: Group) -> dict[str, Any]:
    return {**asdict(group), "cached_share": round(group.cached_share, 6)}


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Aligned columns (the first to the left, the rest to the right), a rule above the last row."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in [header, *rows]]
    return "\n".join([*lines[:-1], "-" * len(lines[0]), lines[-1]]) + "\n"


def parse_time(text: str, *, end_of_day: bool = False) -> float:
    """A date (YYYY-MM-DD, UTC) or an ISO 8601 time as Unix seconds."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SettingsError(f"{text!r} is not a date: use YYYY-MM-DD or an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds = moment.timestamp()
    return seconds + 86400 if end_of_day and len(text) == 10 else seconds


def _group(row: Mapping[str, Any], key: str | None) -> Group:
    return Group(key=key, runs=row["runs"] or 0, requests=row["requests"] or 0,
                 input_tokens=row["input_tokens"] or 0, output_tokens=row["output_tokens"] or 0,
                 cache_read_tokens=row["cache_read_tokens"] or 0, cache_write_tokens=row["cache_write_tokens"] or 0,
                 reasoning_tokens=row["reasoning_tokens"] or 0, cost=row["cost"] or 0.0,
                 unpriced_requests=row["unpriced_requests"] or 0,
                 cache_saved=None if row["cache_saved_unknown"] else row["cache_saved"] or 0.0,
                 status=row["status"] if "status" in row.keys() else None)


@dataclass(frozen=True)
class Grouping:
    """The SQL of a `--by` dimension over `requests q JOIN runs r`: the group's key, what joins
    to the source (a run's tags, for by tag) and the key's parameters."""

    key: str
    join: str = ""
    parameters: tuple[Any, ...] = ()


def grouping(by: str) -> Grouping:
    if by in BUILT_IN_GROUPS:
        return Grouping(BUILT_IN_GROUPS[by], ", json_each(r.tags) AS tag" if by == "tag" else "")
    if _METADATA_KEY.match(by):
        return Grouping("json_extract(r.metadata, ?)", parameters=(f'$."{by}"',))
    raise SettingsError(f"cannot group by {by!r}: use a metadata key (letters, digits, _ . -) or one of "
                        f"{', '.join(BUILT_IN_GROUPS)}")


def selection(since: str | None = None, until: str | None = None,
              where: Sequence[tuple[str, str]] = ()) -> tuple[str, list[Any]]:
    """The WHERE clause (or "") of the requests a report covers, and its parameters."""
    conditions: list[str] = []
    filters: list[Any] = []
    if since:
        conditions.append(f"{STARTED} >= ?")
        filters.append(parse_time(since))
    if until:
        conditions.append(f"{STARTED} < ?")
        filters.append(parse_time(until, end_of_day=True))
    for key, value in where:
        if not _METADATA_KEY.match(key):
            raise SettingsError(f"--where {key!r}: metadata keys are letters, digits, _ . -")
        conditions.append("json_extract(r.metadata, ?) = ?")
        filters += [f'$."{key}"', value]
    return ("WHERE " + " AND ".join(conditions)) if conditions else "", filters


# Every run, with its requests: a run that made none (refused by the gateway's check, interrupted
# before its first call) is a run all the same, counted with its outcome.
SOURCE = "runs r LEFT JOIN requests q ON q.run_id = r.run_id"


def build_report(path: Path, *, by: str = "ticket", since: str | None = None, until: str | None = None,
                 where: Sequence[tuple[str, str]] = ()) -> Report:
    """Totals per group, most expensive first, and a total that counts each request once."""
    connection = connect(path, create=False)
    try:
        return report_from(connection, by=by, since=since, until=until, where=where)
    finally:
        connection.close()


def report_from(connection: Any, *, by: str, since: str | None, until: str | None,
                where: Sequence[tuple[str, str]]) -> Report:
    """build_report, on a connection open to the ledger."""
    group = grouping(by)
    status_sql = ", MAX(COALESCE(r.stop_reason, 'running')) AS status" if by == "run" else ""
    where_sql, filters = selection(since, until, where)
    _check_dimension(connection, by)
    rows = connection.execute(
        f"SELECT {group.key} AS grp, {_SUMS}{status_sql} FROM {SOURCE}{group.join} {where_sql} GROUP BY grp "
        "ORDER BY SUM(q.cost) IS NULL, SUM(q.cost) DESC, grp", [*group.parameters, *filters]).fetchall()
    total = connection.execute(f"SELECT {_SUMS} FROM {SOURCE} {where_sql}", filters).fetchone()
    groups = tuple(_group(row, None if row["grp"] is None else str(row["grp"])) for row in rows)
    return Report(by=by, groups=groups, total=_group(total, "TOTAL"))


def _check_dimension(connection: Any, by: str) -> None:
    """A word that is no dimension and no metadata key of any run is a typo (`--by modle`), not a
    report with one "(none)" group."""
    if by in BUILT_IN_GROUPS or by == DEFAULT_BY:
        return
    keys = sorted(row[0] for row in connection.execute(
        "SELECT DISTINCT meta.key FROM runs, json_each(runs.metadata) AS meta"))
    if by not in keys:
        raise SettingsError(f"cannot group by {by!r}: it is neither a dimension ({', '.join(BUILT_IN_GROUPS)}) nor a "
                            f"metadata key of a run in this ledger ({', '.join(keys) or 'none'})")
