"""Our ledger against the gateway's spend log, request by request.

Rows are matched by the gateway's request id (the `chatcmpl-…` id of the response, which the
ledger keeps as `response_id`) within each run's session (`x-litellm-session-id` is the run id).
Reading the spend log needs an admin key of the gateway; a virtual key may not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx

from ..accounting.ledger import LedgerLocation, connect
from ..accounting.ledger.queries import gateway_requests
from ..accounting.report import render_table
from ..accounting.times import parse_time
from ..errors import GatewayError, SettingsError
from .protocol import gateway_base

__all__ = ["TOLERANCE_USD", "Line", "reconcile", "render"]

TOLERANCE_USD = 1e-9


@dataclass(frozen=True)
class Line:
    run_id: str
    request_id: str | None  # ours (None: the gateway has a row the ledger lacks)
    gateway_request_id: str | None
    ours: float | None
    theirs: float | None

    @property
    def status(self) -> str:
        if self.request_id is None:
            return "missing_in_ledger"
        if self.gateway_request_id is None:
            return "missing_at_gateway"
        if self.ours is None or self.theirs is None or abs(self.ours - self.theirs) > TOLERANCE_USD:
            return "differs"
        return "ok"

    @property
    def difference(self) -> float | None:
        return None if self.ours is None or self.theirs is None else self.ours - self.theirs


def _our_requests(
    ledger: LedgerLocation | Path, run_id: str | None, since: str | None
) -> dict[str, list[dict[str, Any]]]:
    if not run_id and not since:
        raise SettingsError("--reconcile needs --run ID or --since DATE")
    connection = connect(ledger, create=False)
    try:
        rows = gateway_requests(connection, run_id, parse_time(since) if since else None)
    finally:
        connection.close()
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault(row["run_id"], []).append(row)
    if run_id and not runs:
        raise SettingsError(f"the ledger {ledger} has no gateway requests for run {run_id}")
    return runs


def _gateway_rows(
    client: httpx.Client, base: str, run_id: str, started: float, ended: float | None
) -> list[dict[str, Any]]:
    fmt = "%Y-%m-%d %H:%M:%S"
    start = datetime.fromtimestamp(started, timezone.utc) - timedelta(days=1)
    end = datetime.fromtimestamp(ended or time.time(), timezone.utc) + timedelta(days=1)
    rows: list[dict[str, Any]] = []
    page = 1
    while True:
        response = client.get(
            f"{base}/spend/logs/v2",
            params={
                "session_id": run_id,
                "start_date": start.strftime(fmt),
                "end_date": end.strftime(fmt),
                "page": page,
                "page_size": 1000,
            },
        )
        if response.status_code in (401, 403):  # the wrong key: a usage problem (exit 2), not a difference
            raise SettingsError(
                f"the gateway refused to show its spend logs to this key (HTTP {response.status_code}):"
                " --reconcile needs an admin key of the gateway (--api-key, or LITELLM_PROXY_API_KEY)"
            )
        if response.status_code != 200:
            raise GatewayError(
                f"the gateway's /spend/logs/v2 answered HTTP {response.status_code}: {response.text[:300]}"
            )
        body = response.json()
        rows += [r for r in body.get("data", []) if r.get("session_id") == run_id and r.get("status") == "success"]
        if page >= int(body.get("total_pages") or 1):
            return rows
        page += 1


def reconcile(
    ledger: LedgerLocation | Path,
    api_base: str,
    api_key: str,
    *,
    run_id: str | None = None,
    since: str | None = None,
    wait: float = 0.0,
) -> list[Line]:
    """One Line per request on either side. The gateway writes spend logs in batches: with `wait`,
    ask again (for up to that many seconds) while a request is missing there."""
    ours = _our_requests(ledger, run_id, since)
    base = gateway_base(api_base)
    deadline = time.monotonic() + wait
    with httpx.Client(headers={"authorization": f"Bearer {api_key}"}, timeout=30) as client:
        while True:
            lines = [
                line
                for run, rows in ours.items()
                for line in _match(
                    run,
                    rows,
                    _gateway_rows(
                        client, base, run, min(r["run_started"] for r in rows), max(r["run_ended"] or 0 for r in rows)
                    ),
                )
            ]
            if all(line.status != "missing_at_gateway" for line in lines) or time.monotonic() >= deadline:
                return lines
            time.sleep(1.0)


def _match(run_id: str, ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> list[Line]:
    by_id = {row["request_id"]: row for row in theirs}
    lines = []
    for row in ours:
        match = by_id.pop(row["response_id"], None) if row["response_id"] else None
        lines.append(
            Line(
                run_id,
                row["request_id"],
                match["request_id"] if match else None,
                row["cost"],
                float(match["spend"]) if match else None,
            )
        )
    lines += [Line(run_id, None, row["request_id"], None, float(row["spend"])) for row in by_id.values()]
    return lines


def render(lines: Sequence[Line], fmt: str) -> str:
    if fmt == "json":
        return (
            json.dumps(
                [{**asdict(line), "difference": line.difference, "status": line.status} for line in lines], indent=2
            )
            + "\n"
        )

    def usd(value: float | None) -> str:
        return "-" if value is None else f"{value:.9f}"

    rows = [
        [
            line.run_id,
            line.request_id or "-",
            line.gateway_request_id or "-",
            usd(line.ours),
            usd(line.theirs),
            usd(line.difference),
            line.status,
        ]
        for line in lines
    ]
    bad = sum(line.status != "ok" for line in lines)
    table = render_table(
        ["run", "request", "gateway_request", "ours_usd", "gateway_usd", "difference", "status"], rows, total=False
    )
    return table + f"{len(lines)} request(s), {bad} not matching within {TOLERANCE_USD:g} USD\n"
