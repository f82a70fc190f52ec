"""What is read from the ledger: every SQL query of it, but its writer's, lives here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from ...errors import SettingsError
from ..times import parse_time
from .connection import connect
from .database import Database
from .dialect import Dialect
from .location import LedgerLocation

__all__ = [
    "BUILT_IN_GROUPS",
    "approval_counts",
    "DEFAULT_BY",
    "MADE",
    "REFUSED",
    "REPORT_WORDS",
    "SOURCE",
    "STARTED",
    "Grouping",
    "cost_per_bucket",
    "days_covered",
    "finished_values",
    "gateway_requests",
    "group_rows",
    "grouping",
    "requests_of",
    "runs_page",
    "selection",
    "usage_missing",
]

# When a request started; a run that made none, when it started (reports count every run).
STARTED = "COALESCE(q.started_at, r.started_at)"
_TIMES = ("day", "week", "month")  # of when a request started, in the report's time zone
BUILT_IN_GROUPS: Mapping[str, str] = {
    "model": "COALESCE(q.model, r.model)",
    "tag": "tag.value",
    **{size: "" for size in _TIMES},  # the dialect's (Grouping)
    "run": "r.run_id",
    "session": "COALESCE(r.session_id, q.session_id)",
    "workdir": "r.workdir",
    "project": "r.workdir",  # ccusage's word for it
    "outcome": "COALESCE(r.stop_reason, 'running')",  # done, error, timeout, interrupted, abandoned...
    "purpose": "CASE WHEN q.request_id IS NOT NULL THEN COALESCE(q.purpose, 'main') END",  # main, title, ...
    "host": "",  # the dialect's: the machine the run's process ran on (its owner's host)
}
DEFAULT_BY = "ticket"  # may be grouped by before any run has a ticket
# ccusage's words for its reports, as `report <word>`: the dimension each one is
REPORT_WORDS: Mapping[str, str] = {"daily": "day", "weekly": "week", "monthly": "month", "session": "session"}
_METADATA_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
# A request's row that went out to the model or gateway, and one a budget or the turn cap refused
# (it never went out): counted apart, so a cap of three requests shows three, and its refusals.
MADE = "SUM(CASE WHEN q.request_id IS NOT NULL AND q.cost_source <> 'refused' THEN 1 ELSE 0 END)"
REFUSED = "SUM(CASE WHEN q.cost_source = 'refused' THEN 1 ELSE 0 END)"
_SUMS = f"""COUNT(DISTINCT r.run_id) AS runs, {MADE} AS requests, {REFUSED} AS refused,
    SUM(q.input_tokens) AS input_tokens, SUM(q.output_tokens) AS output_tokens,
    SUM(q.cache_read_tokens) AS cache_read_tokens, SUM(q.cache_write_tokens) AS cache_write_tokens,
    SUM(q.reasoning_tokens) AS reasoning_tokens, SUM(q.cost) AS cost,
    SUM(CASE WHEN q.request_id IS NOT NULL AND q.cost IS NULL THEN 1 ELSE 0 END) AS unpriced_requests,
    SUM(q.cache_saved) AS cache_saved,
    SUM(CASE WHEN q.cache_saved IS NULL AND q.cache_read_tokens + q.cache_write_tokens > 0 THEN 1 ELSE 0 END)
        AS cache_saved_unknown"""


def finished_values(location: LedgerLocation, key: str, where: Mapping[str, str]) -> set[str]:
    """The values of metadata `key` among the runs that finished (stop_reason "done") and whose
    metadata holds every `where` pair. An absent ledger file has none."""
    if location.path is not None and not location.path.exists():
        return set()
    connection = connect(location, create=False)
    try:
        meta = connection.dialect.meta("metadata")
        conditions = "".join(f" AND {meta} = ?" for _ in where)
        param = connection.dialect.meta_param
        parameters = [param(key), *(p for name, value in where.items() for p in (param(name), value))]
        rows = connection.execute(
            f"SELECT DISTINCT {meta} FROM runs WHERE stop_reason = 'done'{conditions}", parameters
        ).fetchall()
    finally:
        connection.close()
    return {str(row[0]) for row in rows if row[0] is not None}


@dataclass(frozen=True)
class Grouping:
    """The SQL of a `--by` dimension over `requests q JOIN runs r`: the group's key, what joins
    to the source (a run's tags, for by tag) and the key's parameters."""

    key: str
    join: str = ""
    parameters: tuple[Any, ...] = ()


def grouping(dialect: Dialect, by: str, offset_s: float = 0.0) -> Grouping:
    """`offset_s`: the report's time zone's offset from UTC, which days, weeks and months follow."""
    if by in _TIMES:
        if offset_s:
            return Grouping(dialect.bucket(by, f"({STARTED} + ?)"), parameters=(offset_s,) * _uses(dialect, by))
        return Grouping(dialect.bucket(by, STARTED))
    if by == "host":
        return Grouping(dialect.host("r.owner"))
    if by in BUILT_IN_GROUPS:
        return Grouping(BUILT_IN_GROUPS[by], dialect.tags_join if by == "tag" else "")
    if _METADATA_KEY.match(by):
        return Grouping(dialect.meta("r.metadata"), parameters=(dialect.meta_param(by),))
    raise SettingsError(
        f"cannot group by {by!r}: use a metadata key (letters, digits, _ . -) or one of {', '.join(BUILT_IN_GROUPS)}"
    )


def _uses(dialect: Dialect, size: str) -> int:
    """How often a bucket's expression names its time (each a parameter, with an offset)."""
    return dialect.bucket(size, "\0").count("\0")


def selection(
    dialect: Dialect,
    since: str | None = None,
    until: str | None = None,
    where: Sequence[tuple[str, str]] = (),
    tz: tzinfo = timezone.utc,
) -> tuple[str, list[Any]]:
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
        conditions.append(f"{dialect.meta('r.metadata')} = ?")
        filters += [dialect.meta_param(key), value]
    return ("WHERE " + " AND ".join(conditions)) if conditions else "", filters


# Every run, with its requests: a run that made none (refused by the gateway's check, interrupted
# before its first call) is a run all the same, counted with its outcome.
SOURCE = "runs r LEFT JOIN requests q ON q.run_id = r.run_id"


_RUN_FACTS = (
    ", MAX(COALESCE(r.stop_reason, 'running')) AS status, MIN(r.started_at) AS started_at, "
    "MAX(r.ended_at) AS ended_at, MAX(r.model) AS model, MAX(r.metadata) AS metadata, MAX(r.error) AS error"
)


def group_rows(
    connection: Database,
    *,
    by: str,
    since: str | None,
    until: str | None,
    where: Sequence[tuple[str, str]],
    breakdown: bool = False,
    tz: tzinfo = timezone.utc,
) -> tuple[list[Any], Any, list[Any]]:
    """The rows of a report: one per group (with the run's facts, by run), the total, and with
    `breakdown` one per group and model (`grp`, `part`). Days, weeks and months are `tz`'s (its
    offset now)."""
    offset = datetime.now(tz).utcoffset() or timedelta()
    group = grouping(connection.dialect, by, offset.total_seconds())
    where_sql, filters = selection(connection.dialect, since, until, where, tz)
    _check_dimension(connection, by)
    rows = connection.execute(
        f"SELECT {group.key} AS grp, {_SUMS}{_RUN_FACTS if by == 'run' else ''} FROM {SOURCE}{group.join} {where_sql} "
        "GROUP BY grp ORDER BY SUM(q.cost) IS NULL, SUM(q.cost) DESC, grp",
        [*group.parameters, *filters],
    ).fetchall()
    total = connection.execute(f"SELECT {_SUMS} FROM {SOURCE} {where_sql}", filters).fetchone()
    parts = (
        []
        if not breakdown
        else connection.execute(
            f"SELECT {group.key} AS grp, {BUILT_IN_GROUPS['model']} AS part, {_SUMS} FROM {SOURCE}{group.join} "
            f"{where_sql} GROUP BY grp, part ORDER BY SUM(q.cost) DESC, part",
            [*group.parameters, *filters],
        ).fetchall()
    )
    return rows, total, parts


# The asks of the runs a report covers, grouped as its requests are: a run's approvals under its
# groups (its model, its start, its tags and metadata); `q` is there, empty, for the groupings.
_APPROVALS = "runs r JOIN approvals a ON a.run_id = r.run_id LEFT JOIN requests q ON 1 = 0"
_APPROVAL_SUMS = """COUNT(*) AS asked, SUM(CASE WHEN a.decision = 'allow' THEN 1 ELSE 0 END) AS allowed,
    SUM(CASE WHEN a.decision = 'deny' THEN 1 ELSE 0 END) AS denied"""


def approval_counts(
    connection: Database,
    *,
    by: str,
    since: str | None,
    until: str | None,
    where: Sequence[tuple[str, str]],
    tz: tzinfo = timezone.utc,
) -> tuple[dict[Any, tuple[int, int, int]], tuple[int, int, int]]:
    """(asked, allowed, denied) per group of a report, and in all."""
    offset = datetime.now(tz).utcoffset() or timedelta()
    group = grouping(connection.dialect, by, offset.total_seconds())
    where_sql, filters = selection(connection.dialect, since, until, where, tz)
    rows = connection.execute(
        f"SELECT {group.key} AS grp, {_APPROVAL_SUMS} FROM {_APPROVALS}{group.join} {where_sql} GROUP BY grp",
        [*group.parameters, *filters],
    ).fetchall()
    total = connection.execute(f"SELECT {_APPROVAL_SUMS} FROM {_APPROVALS} {where_sql}", filters).fetchone()
    counts = {row["grp"]: (row["asked"], row["allowed"] or 0, row["denied"] or 0) for row in rows}
    return counts, (total["asked"], total["allowed"] or 0, total["denied"] or 0)


def _check_dimension(connection: Database, by: str) -> None:
    """A word that is no dimension and no metadata key of any run is a typo (`--by modle`), not a
    report with one "(none)" group."""
    if by in BUILT_IN_GROUPS or by == DEFAULT_BY:
        return
    keys = sorted(row[0] for row in connection.execute(connection.dialect.metadata_keys))
    if by not in keys:
        raise SettingsError(
            f"cannot group by {by!r}: it is neither a dimension ({', '.join(BUILT_IN_GROUPS)}) nor a "
            f"metadata key of a run in this ledger ({', '.join(keys) or 'none'})"
        )


# The dashboard's charts: cost per bucket (a day, or an hour: `hour` when every request shown is of
# one day, which one bar would not tell apart), for the requests a selection covers.
def days_covered(connection: Database, chosen: tuple[str, list[Any]]) -> int:
    where_sql, filters = chosen
    day = connection.dialect.bucket("day", STARTED)
    return int(connection.execute(f"SELECT COUNT(DISTINCT {day}) FROM {SOURCE} {where_sql}", filters).fetchone()[0])


def cost_per_bucket(
    connection: Database, group: Grouping, chosen: tuple[str, list[Any]], bucket: str
) -> list[tuple[str, str | None, float]]:
    """(bucket, group, cost) of the requests a selection covers."""
    where_sql, filters = chosen
    day = connection.dialect.bucket(bucket, STARTED)
    rows = connection.execute(
        f"SELECT {day} AS day, {group.key} AS grp, SUM(q.cost) AS cost FROM {SOURCE}{group.join}"
        f" {where_sql} GROUP BY day, grp",
        [*group.parameters, *filters],
    ).fetchall()
    return [(row["day"], None if row["grp"] is None else str(row["grp"]), row["cost"] or 0.0) for row in rows]


def usage_missing(connection: Database, chosen: tuple[str, list[Any]]) -> int:
    where_sql, filters = chosen
    return int(connection.execute(f"SELECT SUM(q.usage_missing) FROM {SOURCE} {where_sql}", filters).fetchone()[0] or 0)


def runs_page(
    connection: Database, chosen: tuple[str, list[Any]], offset: int, limit: int | None
) -> tuple[int, list[Any]]:
    """How many runs a selection covers, and a page of them, newest first, with their totals."""
    where_sql, filters = chosen
    count = connection.execute(f"SELECT COUNT(DISTINCT r.run_id) FROM {SOURCE} {where_sql}", filters).fetchone()[0]
    page = connection.execute(
        f"SELECT r.run_id, r.started_at, r.ended_at, r.model, r.metadata, COALESCE(r.stop_reason, 'running') AS "
        f"stop_reason, {MADE} AS requests, {REFUSED} AS refused, SUM(q.cost) AS cost, "
        f"SUM(CASE WHEN q.request_id IS NOT NULL AND q.cost IS NULL THEN 1 ELSE 0 END) AS unpriced_requests "
        f"FROM {SOURCE} {where_sql} GROUP BY r.run_id ORDER BY r.started_at DESC, r.run_id "
        f"LIMIT ? OFFSET ?",
        [*filters, connection.dialect.no_limit if limit is None else limit, offset],
    ).fetchall()
    return int(count), page


def requests_of(
    connection: Database, chosen: tuple[str, list[Any]], run_ids: Sequence[str], columns: Sequence[str]
) -> list[Any]:
    """The requests of `run_ids` a selection covers (`run_id` and `columns`), in order."""
    if not run_ids:
        return []
    where_sql, filters = chosen
    wanted = " AND ".join(
        filter(None, [where_sql.removeprefix("WHERE "), connection.dialect.in_list.format(column="q.run_id")])
    )
    return list(
        connection.execute(
            f"SELECT q.run_id, {', '.join('q.' + c for c in columns)} FROM {SOURCE} WHERE {wanted} "
            "ORDER BY q.started_at",
            [*filters, connection.dialect.list_param(run_ids)],
        )
    )


def gateway_requests(connection: Database, run_id: str | None, since: float | None) -> list[dict[str, Any]]:
    """The successful gateway requests of a run, or since a time (reconcile compares them)."""
    sql = (
        "SELECT q.run_id, q.request_id, q.response_id, q.cost, r.started_at AS run_started, r.ended_at AS run_ended "
        "FROM requests q JOIN runs r ON r.run_id = q.run_id WHERE r.mode = 'gateway' AND q.status_code < 400"
    )
    parameters: list[Any] = []
    if run_id:
        sql += " AND q.run_id = ?"
        parameters.append(run_id)
    if since is not None:
        sql += " AND q.started_at >= ?"
        parameters.append(since)
    return [dict(row) for row in connection.execute(sql + " ORDER BY q.started_at", parameters)]
