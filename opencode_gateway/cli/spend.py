"""The commands that read and keep the ledger: `report` (a table, JSON, CSV, markdown, the HTML
dashboard, or a reconciliation with the gateway's spend logs) and `ledger` (status, sync, import,
runs, forget)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..accounting.ledger import LedgerLocation
from ..accounting.ledger.queries import DEFAULT_BY, REPORT_WORDS
from ..accounting.records import calls_said
from ..config.settings import Settings
from ..errors import SettingsError
from ..terminal import cell
from .arguments import pairs, settings_of
from .printed import print_json

__all__ = ["cmd_ledger", "cmd_report"]


def _report_by(word: str | None, by: str | None) -> str:
    """What a report groups by: `report daily` is `--by day`; both, when they differ, are a mistake."""
    if word is None:
        return by or DEFAULT_BY
    if by is not None and by != REPORT_WORDS[word]:
        raise SettingsError(f"report {word} groups by {REPORT_WORDS[word]}, and --by says {by}: give one of them")
    return REPORT_WORDS[word]


def cmd_report(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    if args.reconcile:
        return _reconcile(args, settings)
    from ..accounting.report import build_report

    by = _report_by(args.word, args.by)
    where = list(pairs(args.where, "--where").items())
    if not settings.ledger_location.exists():  # nothing has run yet: an empty report, not an error
        from ..accounting.report import Report

        print(f"opencode-gateway: no runs yet (no ledger at {settings.ledger_location})", file=sys.stderr)
        sys.stdout.write(Report.empty(by).render(args.format))
        return 0
    if args.html:
        return _write_dashboard(args, by, settings, where)
    report = build_report(
        settings.ledger_location,
        by=by,
        since=args.since,
        until=args.until,
        where=where,
        breakdown=args.breakdown,
        tz=args.tz,
    )
    if where and not report.total.runs:
        chosen = " and ".join(f"{key}={value}" for key, value in where)
        print(
            f"opencode-gateway: no run in {settings.ledger_location} has {chosen} (in the time asked)", file=sys.stderr
        )
    narrow = sys.stdout.isatty() and args.format == "table"  # a pipe or a file gets every column
    sys.stdout.write(report.render(args.format, width=shutil.get_terminal_size().columns if narrow else None))
    return 0


def _write_dashboard(args: argparse.Namespace, by: str, settings: Settings, where: list[tuple[str, str]]) -> int:
    """`report --html FILE`: the dashboard as one file that opens with no network."""
    from ..dashboard.data import Query, dashboard_data
    from ..dashboard.page import render_page

    data = dashboard_data(
        settings.ledger_location, Query(by=by, since=args.since, until=args.until, where=tuple(where), limit=None)
    )
    target = Path(args.html)
    try:  # as private as the ledger it shows (0600): it names every ticket, workdir and cost
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)  # a file that existed keeps its mode through O_CREAT
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(render_page(data))
    except OSError as exc:
        raise SettingsError(f"cannot write {target}: {exc.strerror}: pass --html PATH in a writable folder") from None
    print(
        f"opencode-gateway: wrote {target} ({data['total']['requests']:,} requests, {data['runs']['count']:,} runs)",
        file=sys.stderr,
    )
    return 0


def _reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from ..litellm_gateway.reconcile import reconcile, render

    base, key = args.api_base or settings.gateway_api_base, args.api_key or settings.gateway_api_key
    if not base or not key:
        raise SettingsError("--reconcile needs the gateway: --api-base URL and --api-key KEY (an admin key)")
    lines = reconcile(settings.ledger_location, base, key, run_id=args.run, since=args.since, wait=args.wait)
    sys.stdout.write(render(lines, "json" if args.format == "json" else "table"))
    return 0 if lines and all(line.status == "ok" for line in lines) else 1


def cmd_ledger(args: argparse.Namespace) -> int:
    """`ledger status|sync|import|runs|forget`: 0 done; 1 the team's database cannot be reached
    (the spool kept)."""
    from ..accounting.ledger.maintenance import forget_run, import_ledger, status, sync
    from ..errors import LedgerUnavailable

    location = settings_of(args).ledger_location
    if args.action == "runs":
        return _ledger_runs(args, location)
    if args.action == "forget":
        requests, asks = forget_run(location, args.run_id)
        data: dict[str, Any] = {"ledger": location.shown, "run_id": args.run_id, "requests": requests, "asks": asks}
        line = f"forgot run {args.run_id}: its {requests} requests and {asks} asks are gone from {location}"
        print_json(data) if args.json else print(f"opencode-gateway: {line}")
        return 0
    if args.action == "status":
        state = status(location)
        print_json(state.to_dict()) if args.json else print("\n".join(state.lines()))
        return 0 if state.problem is None or not location.exists() else 1
    if args.action == "import":
        moved = import_ledger(Path(args.file), location)
        data = {"ledger": location.shown, **moved.__dict__}
        line = (
            f"imported {args.file} into {location}: {moved.new_runs} of {moved.runs} runs and "
            f"{moved.new_requests} of {moved.requests} requests were new"
        )
    elif not location.is_postgres:
        data, line = {"ledger": location.shown, "runs": 0, "requests": 0}, f"ledger {location} is a file: no spool"
    else:
        try:
            runs, requests = sync(location)
        except LedgerUnavailable as exc:
            if args.json:
                print_json({"ledger": location.shown, "error": str(exc)})
            print(f"opencode-gateway: {exc}; the spool {location.spool} is kept for the next try", file=sys.stderr)
            return 1
        data = {"ledger": location.shown, "runs": runs, "requests": requests}
        line = f"shipped {runs} runs and {requests} requests to {location}; nothing is waiting"
    print_json(data) if args.json else print(f"opencode-gateway: {line}")
    return 0


def _ledger_runs(args: argparse.Namespace, location: LedgerLocation) -> int:
    from ..accounting.ledger.maintenance import find_runs

    if not location.exists():
        raise SettingsError(f"ledger {location}: no runs recorded yet (the first run creates it)")
    found = find_runs(location, list(pairs(args.where, "--where").items()), args.since, args.until)
    if args.json:
        print_json({"ledger": location.shown, "runs": found})
        return 0
    for run in found:
        when = datetime.fromtimestamp(run["started_at"], timezone.utc).strftime("%Y-%m-%d %H:%M")
        cost = "-" if run["cost"] is None else f"${run['cost']:.6f}"
        requests = calls_said(run["requests"], run["refused"])
        print(cell(f"{run['run_id']}  {when}  {run['outcome']}  {requests}  {cost}  {run['metadata']}"))
    if not found:
        print(f"opencode-gateway: no run in {location} matches", file=sys.stderr)
    return 0
