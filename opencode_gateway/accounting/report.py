"""Spend reports over the ledger: totals per ticket (or any metadata key), model, tag, day, week,
month, run, session, workdir or outcome, with every token kind, the cost, and how many requests
could not be priced."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timezone, tzinfo
from pathlib import Path
from typing import Any

from ..terminal import cell
from .ledger import LedgerLocation, connect
from .ledger.queries import approval_counts, group_rows
from .pricing import usd
from .times import utc_time, zone

__all__ = ["Group", "Report", "RunFacts", "build_report", "markdown_cell", "render_table", "report_from"]


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
    refused: int = 0  # calls a budget or the turn cap refused (not in `requests`: they never went out)
    # What prompt caching saved (pricing.Cost.cache_saved); None when a request with cache tokens
    # had no known price.
    cache_saved: float | None = 0.0
    # Tool calls the host was asked about (approvals/), and of them how many it allowed and denied
    asked: int = 0
    allowed: int = 0
    denied: int = 0
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

    def render(self, fmt: str, *, width: int | None = None) -> str:
        """As `table`, `csv`, `markdown` (a GitHub table: a CI job's summary, a pull request
        comment) or `json`. A table wider than `width` (a narrow terminal's) is the compact one."""
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        header, cells = self._header(), self._rows(fmt)
        if fmt == "csv":
            return _csv(header, cells)
        if fmt == "markdown":
            return _markdown(header, cells, figures=12 + (3 if self.total.asked else 0))
        table = render_table(header, cells)
        if width is None or max(map(len, table.splitlines())) <= width:
            return table
        return self._compact(width)

    def _compact(self, width: int) -> str:
        """The figures a person reads first, tokens in k and M, names cut to fit `width` (80
        columns and up); a pipe, a file or --format csv keep every column."""
        refused = bool(self.total.refused)
        header = [
            self.by,
            "runs",
            "requests",
            *(("refused",) if refused else ()),
            "input",
            "output",
            "cached",
            "cost_usd",
        ]
        groups: list[tuple[str, Group]] = []
        for group in self.groups:  # a breakdown's rows under their group's
            groups += [(group.label, group), *((f"  └ {part.label}", part) for part in group.parts)]
        rows = [
            [
                label,
                str(g.runs),
                str(g.requests),
                *((str(g.refused),) if refused else ()),
                _short(g.input_tokens),
                _short(g.output_tokens),
                f"{g.cached_share:.0%}",
                f"{g.cost:.4f}",
            ]
            for label, g in [*groups, ("TOTAL", self.total)]
        ]
        figures = [
            max(len(text) for text in column) for column in zip(header[1:], *(row[1:] for row in rows), strict=True)
        ]
        room = max(width - sum(figures) - 2 * len(figures), 8)
        return render_table(header, [[_cut(row[0], room), *row[1:]] for row in rows])

    def _header(self) -> list[str]:
        by_run = self.by == "run"
        return [
            self.by,
            *(("started (UTC)", "duration", "model", "outcome", "metadata") if by_run else ()),
            "runs",
            "requests",
            "refused",
            "input",
            "output",
            "cache_read",
            "cache_write",
            "reasoning",
            "cost_usd",
            "unpriced",
            "cached",
            "cache_saved_usd",
            *(("asked", "allowed", "denied") if self.total.asked else ()),
        ]

    def _rows(self, fmt: str) -> list[list[str]]:
        """Each group's cells, a breakdown's under their group's, then the total's."""
        by_run = self.by == "run"
        cells = []
        for group in self.groups:  # a breakdown's rows under their group's (in CSV: "group / model")
            cells.append(_cells(group, group.label, by_run, self.total.asked))
            cells += [
                _cells(part, f"{group.label} / {part.label}" if fmt == "csv" else f"  └ {part.label}", by_run)
                + ([""] * 3 if self.total.asked else [])  # a model's share of a run's asks is not known
                for part in group.parts
            ]
        cells.append(_cells(self.total, "TOTAL", by_run, self.total.asked))
        return cells


def _short(count: int) -> str:
    """A token count in at most 6 characters: 950, 12.3k, 4.56M."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def _csv(header: list[str], cells: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_csv_cell(cell) for cell in row] for row in cells])
    return out.getvalue()


def _markdown(header: list[str], cells: list[list[str]], *, figures: int) -> str:
    """A GitHub table, the last `figures` columns aligned right, the total in bold."""
    rows = [header, ["---:" if i >= len(header) - figures else "---" for i in range(len(header))]]
    rows += [[markdown_cell(cell) for cell in row] for row in cells[:-1]]
    rows.append([f"**{markdown_cell(cell)}**" if cell else "" for cell in cells[-1]])
    return "".join("| " + " | ".join(row) + " |\n" for row in rows)


# A cell a spreadsheet would run as a formula (=HYPERLINK(...), +cmd|..., -, @SUM) or that
# begins with a tab or CR (which some spreadsheets strip, then run what follows)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Markdown that would leave a cell or draw outside its text: the cell's end, an escape, HTML
# (an <img> beacon), an entity, and a link's brackets
_MARKDOWN = str.maketrans({"\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]", "&": "&amp;", "<": "&lt;", ">": "&gt;"})


def _csv_cell(text: str) -> str:
    """A cell no spreadsheet runs: one that could begin a formula is prefixed with `'`."""
    return f"'{text}" if text.startswith(_FORMULA_START) else text


def markdown_cell(text: str) -> str:
    """A cell of a GitHub table that stays one line of text: newlines folded, markup escaped."""
    return cell(" ".join(text.splitlines())).translate(_MARKDOWN)


def _cells(group: Group, label: str, by_run: bool, asks: int = 0) -> list[str]:
    facts = group.run
    described = (
        []
        if not by_run
        else ["", "", "", "", ""]
        if facts is None
        else [
            utc_time(facts.started_at),
            facts.duration,
            facts.model,
            group.status or "",
            ", ".join(f"{k}={v}" for k, v in facts.metadata.items()),
        ]
    )
    return [
        label,
        *described,
        str(group.runs),
        str(group.requests),
        str(group.refused),
        str(group.input_tokens),
        str(group.output_tokens),
        str(group.cache_read_tokens),
        str(group.cache_write_tokens),
        str(group.reasoning_tokens),
        f"{group.cost:.6f}",
        str(group.unpriced_requests),
        f"{group.cached_share:.1%}",
        "unknown" if group.cache_saved is None else f"{group.cache_saved:.6f}",
        *((str(group.asked), str(group.allowed), str(group.denied)) if asks else ()),
    ]


def _group_dict(group: Group) -> dict[str, Any]:
    """A group as JSON: USD to 1e-12 (no 0.0028320000000000003), the cache share to 1e-6."""
    data = {field.name: getattr(group, field.name) for field in dataclasses.fields(group)}
    data.update(
        cost=usd(group.cost),
        cached_share=round(group.cached_share, 6),
        cache_saved=usd(group.cache_saved),
        run=None if group.run is None else {**asdict(group.run), "metadata": dict(group.run.metadata)},
        parts=[_group_dict(part) for part in group.parts],
    )
    if group.run is None:
        del data["run"]
    if not group.parts:
        del data["parts"]
    return data


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, total: bool = True) -> str:
    """Aligned columns (the first to the left, the rest to the right), a rule above the last row
    when it is a `total`; every control character shown (terminal.cell)."""
    table = [[cell(text) for text in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in table
    ]
    if total and rows:
        lines.insert(-1, "-" * len(lines[0]))
    return "\n".join(lines) + "\n"


# A group's counts, as the ledger's sums name them (a sum over no rows is NULL: 0)
_COUNTS = (
    "runs",
    "requests",
    "refused",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "unpriced_requests",
)


def _group(row: Mapping[str, Any], key: str | None) -> Group:
    names = row.keys()
    run = (
        RunFacts(row["started_at"], row["ended_at"], row["model"], json.loads(row["metadata"] or "{}"), row["error"])
        if "started_at" in names
        else None
    )
    counts: dict[str, Any] = {name: row[name] or 0 for name in _COUNTS}
    return Group(
        key=key,
        run=run,
        **counts,
        cost=row["cost"] or 0.0,
        cache_saved=None if row["cache_saved_unknown"] else row["cache_saved"] or 0.0,
        status=row["status"] if "status" in row.keys() else None,
    )


def build_report(
    path: LedgerLocation | Path,
    *,
    by: str = "ticket",
    since: str | None = None,
    until: str | None = None,
    where: Sequence[tuple[str, str]] = (),
    breakdown: bool = False,
    tz: str | None = None,
) -> Report:
    """Totals per group, most expensive first, and a total that counts each request once; with
    `breakdown`, each group's totals per model too. `tz` (an IANA name or an offset) says which
    days, weeks and months the dates and groups are; by default UTC."""
    connection = connect(path, create=False)
    try:
        return report_from(connection, by=by, since=since, until=until, where=where, breakdown=breakdown, tz=zone(tz))
    finally:
        connection.close()


def report_from(
    connection: Any,
    *,
    by: str,
    since: str | None,
    until: str | None,
    where: Sequence[tuple[str, str]],
    breakdown: bool = False,
    tz: tzinfo = timezone.utc,
) -> Report:
    """build_report, on a connection open to the ledger."""
    rows, total, part_rows = group_rows(
        connection, by=by, since=since, until=until, where=where, breakdown=breakdown, tz=tz
    )
    asks, all_asks = approval_counts(connection, by=by, since=since, until=until, where=where, tz=tz)
    parts: dict[str | None, list[Group]] = {}
    for row in part_rows:
        parts.setdefault(_key(row["grp"]), []).append(_group(row, _key(row["part"])))
    groups = tuple(
        _asked(
            dataclasses.replace(_group(row, _key(row["grp"])), parts=tuple(parts.get(_key(row["grp"]), ()))),
            asks.get(row["grp"], (0, 0, 0)),
        )
        for row in rows
    )
    return Report(by=by, groups=groups, total=_asked(_group(total, "TOTAL"), all_asks))


def _asked(group: Group, counts: tuple[int, int, int]) -> Group:
    asked, allowed, denied = counts
    return dataclasses.replace(group, asked=asked, allowed=allowed, denied=denied)


def _key(value: Any) -> str | None:
    return None if value is None else str(value)
