"""Spend reports over the ledger: totals per ticket (or any metadata key), model, tag, day, week,
month, run, session, workdir or outcome, with every token kind, the cost, and how many requests
could not be priced."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import SettingsError
from .ledger import connect

__all__ = ["BUILT_IN_GROUPS", "DEFAULT_BY", "SOURCE", "STARTED", "Group", "Grouping", "Report", "RunFacts",
           "build_report", "grouping", "parse_time", "render_table", "report_from", "selection", "utc_time", "zone"]

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
class RunFacts:
    """What `--by run` says of a run besides its totals (as the dashboard's runs table does)."""

    started_at: float
    ended_at: float | None
    model: str
    metadata: Mapping[str, Any]
    error: str | None

    @property
    def duration(self) -> str:
        return "running" if self.ended_at is None else f"{self.ended_at - self.started_at:.1f} s"


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
    run: RunFacts | None = None  # by run: when, on what, with what metadata, how it ended
    parts: tuple[Group, ...] = ()  # with breakdown: the group per model

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

    @classmethod
    def empty(cls, by: str) -> Report:
        """A report of no runs (no ledger yet): the same shape as any other."""
        return cls(by, (), Group("TOTAL", 0, 0, 0, 0, 0, 0, 0, 0.0, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "groups": [_group_dict(g) for g in self.groups], "total": _group_dict(self.total)}

    def render(self, fmt: str) -> str:
        """As `table`, `csv`, `markdown` (a GitHub table: a CI job's summary, a pull request
        comment) or `json`."""
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        by_run = self.by == "run"
        header = [self.by, *(("started (UTC)", "duration", "model", "outcome", "metadata") if by_run else ()),
                  "runs", "requests", "input", "output", "cache_read", "cache_write", "reasoning", "cost_usd",
                  "unpriced", "cached", "cache_saved_usd"]
        cells = []
        for group in self.groups:  # a breakdown's rows under their group's (in CSV: "group / model")
            cells.append(_cells(group, group.label, by_run))
            cells += [_cells(part, f"{group.label} / {part.label}" if fmt == "csv" else f"  └ {part.label}", by_run)
                      for part in group.parts]
        cells.append(_cells(self.total, "TOTAL", by_run))
        if fmt == "csv":
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(cells)
            return out.getvalue()
        if fmt == "markdown":  # the figures' columns aligned right
            rows = [header, ["---:" if i >= len(header) - 11 else "---" for i in range(len(header))]]
            rows += [[cell.replace("|", "\\|") for cell in row] for row in cells[:-1]]
            rows.append([f"**{cell}**" if cell else "" for cell in cells[-1]])
            return "".join("| " + " | ".join(row) + " |\n" for row in rows)
        return render_table(header, cells)


def _cells(group: Group, label: str, by_run: bool) -> list[str]:
    facts = group.run
    described = [] if not by_run else ["", "", "", "", ""] if facts is None else [
        utc_time(facts.started_at), facts.duration,
        facts.model, group.status or "", ", ".join(f"{k}={v}" for k, v in facts.metadata.items())]
    return [label, *described, str(group.runs), str(group.requests), str(group.input_tokens), str(group.output_tokens),
            str(group.cache_read_tokens), str(group.cache_write_tokens), str(group.reasoning_tokens),
            f"{group.cost:.6f}",
            str(group.unpriced_requests), f"{group.cached_share:.1%}",
            "unknown" if group.cache_saved is None else f"{group.cache_saved:.6f}"]


def _group_dict(group: Group) -> dict[str, Any]:
    """A group as JSON: USD to 1e-12 (no 0.0028320000000000003), the cache share to 1e-6."""
    data = {field.name: getattr(group, field.name) for field in dataclasses.fields(group)}
    data.update(cost=round(group.cost, 12), cached_share=round(group.cached_share, 6),
                cache_saved=None if group.cache_saved is None else round(group.cache_saved, 12),
                run=None if group.run is None else {**asdict(group.run), "metadata": dict(group.run.metadata)},
                parts=[_group_dict(part) for part in group.parts])
    if group.run is None:
        del data["run"]
    if not group.parts:
        del data["parts"]
    return data


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, total: bool = True) -> str:
    """Aligned columns (the first to the left, the rest to the right), a rule above the last row
    when it is a `total`."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [header, *rows]]
    if total and rows:
        lines.insert(-1, "-" * len(lines[0]))
    return "\n".join(lines) + "\n"


def utc_time(seconds: float | None, missing: str = "—") -> str:
    """A Unix time as `2026-12-05 14:03:09` (UTC), as every table here writes it."""
    return missing if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def zone(name: str | None) -> tzinfo:
    """`--tz`: an IANA zone (Europe/Berlin), a UTC offset (+02:00, -0530) or UTC (None)."""
    if not name or name.upper() == "UTC":
        return UTC
    offset = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", name)
    if offset:
        minutes = int(offset.group(2)) * 60 + int(offset.group(3))
        return timezone(timedelta(minutes=minutes if offset.group(1) == "+" else -minutes))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingsError(f"--tz {name!r} is not a time zone: give an IANA name (Europe/Berlin), an offset "
                            "(+02:00) or UTC") from None


_RELATIVE = re.compile(r"(\d+)([hdw])")
_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, *, end_of_day: bool = False, tz: tzinfo = UTC, now: float | None = None) -> float:
    """Unix seconds of a date (YYYY-MM-DD, in `tz`), an ISO 8601 time, `today`, `yesterday`, or a
    time ago (`24h`, `7d`, `2w`). A date (and today, yesterday) given `end_of_day` is its end."""
    now = time.time() if now is None else now
    relative = _RELATIVE.fullmatch(text.strip().lower())
    if relative:
        return now - int(relative.group(1)) * _UNITS[relative.group(2)]
    day = {"today": 0, "yesterday": 1}.get(text.strip().lower())
    if day is not None:
        text = (datetime.fromtimestamp(now, tz).date() - timedelta(days=day)).isoformat()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SettingsError(f"{text!r} is not a date: use YYYY-MM-DD, an ISO 8601 time, today, yesterday, or a time "
                            "ago such as 24h, 7d or 2w") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    seconds = moment.timestamp()
    return seconds + 86400 if end_of_day and len(text) == 10 else seconds


def _group(row: Mapping[str, Any], key: str | None) -> Group:
    names = row.keys()
    run = RunFacts(row["started_at"], row["ended_at"], row["model"], json.loads(row["metadata"] or "{}"),
                   row["error"]) if "started_at" in names else None
    return Group(key=key, run=run, runs=row["runs"] or 0, requests=row["requests"] or 0,
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


def grouping(by: str, offset_s: float = 0.0) -> Grouping:
    """`offset_s`: the report's time zone's offset from UTC, which days, weeks and months follow."""
    if by in ("day", "week", "month") and offset_s:
        return Grouping(BUILT_IN_GROUPS[by].replace(STARTED, f"({STARTED} + ?)"), parameters=(offset_s,))
    if by in BUILT_IN_GROUPS:
        return Grouping(BUILT_IN_GROUPS[by], ", json_each(r.tags) AS tag" if by == "tag" else "")
    if _METADATA_KEY.match(by):
        return Grouping("json_extract(r.metadata, ?)", parameters=(f'$."{by}"',))
    raise SettingsError(f"cannot group by {by!r}: use a metadata key (letters, digits, _ . -) or one of "
                        f"{', '.join(BUILT_IN_GROUPS)}")


def selection(since: str | None = None, until: str | None = None, where: Sequence[tuple[str, str]] = (),
              tz: tzinfo = UTC) -> tuple[str, list[Any]]:
    """The WHERE clause (or "") of the requests a report covers, and its parameters."""
    conditions: list[str] = []
    filters: list[Any] = []
    if since:
        conditions.append(f"{STARTED} >= ?")
        filters.append(parse_time(since, tz=tz))
    if until:
        conditions.append(f"{STARTED} < ?")
        filters.append(parse_time(until, end_of_day=True, tz=tz))
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
                 where: Sequence[tuple[str, str]] = (), breakdown: bool = False, tz: str | None = None) -> Report:
    """Totals per group, most expensive first, and a total that counts each request once; with
    `breakdown`, each group's totals per model too. `tz` (an IANA name or an offset) says which
    days, weeks and months the dates and groups are; by default UTC."""
    connection = connect(path, create=False)
    try:
        return report_from(connection, by=by, since=since, until=until, where=where, breakdown=breakdown,
                           tz=zone(tz))
    finally:
        connection.close()


_RUN_FACTS = (", MAX(COALESCE(r.stop_reason, 'running')) AS status, MIN(r.started_at) AS started_at, "
              "MAX(r.ended_at) AS ended_at, MAX(r.model) AS model, MAX(r.metadata) AS metadata, MAX(r.error) AS error")


def report_from(connection: Any, *, by: str, since: str | None, until: str | None,
                where: Sequence[tuple[str, str]], breakdown: bool = False, tz: tzinfo = UTC) -> Report:
    """build_report, on a connection open to the ledger."""
    offset = datetime.now(tz).utcoffset() or timedelta()  # the zone's offset now (a day's groups follow it)
    group = grouping(by, offset.total_seconds())
    where_sql, filters = selection(since, until, where, tz)
    _check_dimension(connection, by)
    rows = connection.execute(
        f"SELECT {group.key} AS grp, {_SUMS}{_RUN_FACTS if by == 'run' else ''} FROM {SOURCE}{group.join} {where_sql} "
        "GROUP BY grp ORDER BY SUM(q.cost) IS NULL, SUM(q.cost) DESC, grp", [*group.parameters, *filters]).fetchall()
    total = connection.execute(f"SELECT {_SUMS} FROM {SOURCE} {where_sql}", filters).fetchone()
    parts: dict[str | None, list[Group]] = {}
    if breakdown:
        model = BUILT_IN_GROUPS["model"]
        for row in connection.execute(
                f"SELECT {group.key} AS grp, {model} AS part, {_SUMS} FROM {SOURCE}{group.join} {where_sql} "
                "GROUP BY grp, part ORDER BY SUM(q.cost) DESC, part", [*group.parameters, *filters]):
            parts.setdefault(_key(row["grp"]), []).append(_group(row, _key(row["part"])))
    groups = tuple(dataclasses.replace(_group(row, _key(row["grp"])), parts=tuple(parts.get(_key(row["grp"]), ())))
                   for row in rows)
    return Report(by=by, groups=groups, total=_group(total, "TOTAL"))


def _key(value: Any) -> str | None:
    return None if value is None else str(value)


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
