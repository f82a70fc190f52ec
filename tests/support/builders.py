"""What the unit tests build again and again: request records, run rows and SSE streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opencode_gateway.accounting.pricing import Cost
from opencode_gateway.accounting.records import RequestRecord, RunRow
from opencode_gateway.accounting.usage import Usage


def record(
    request_id: str = "r",
    *,
    usage: Usage | None = Usage(100, 10),
    cost: float | None = 0.001,
    source: str = "litellm",
    status: int = 200,
    saved: float | None = 0.0,
    **fields: Any,
) -> RequestRecord:
    """A finished request's record (`saved`: what caching saved); `fields` sets any other
    RequestRecord field."""
    values: dict[str, Any] = {
        "model": "m",
        "upstream_model": None,
        "stream": True,
        "started_at": 0.0,
        "duration_s": 0.0,
        "ttfb_s": 0.0,
        **fields,
    }
    return RequestRecord(
        request_id=request_id, status_code=status, usage=usage, cost=Cost(cost, source, cache_saved=saved), **values
    )


def run_row(run_id: str, **fields: Any) -> RunRow:
    """A run's ledger row; `fields` sets any RunRow field (the rest: a gateway run of model m)."""
    values: dict[str, Any] = {"started_at": 1_790_000_000.0, "model": "m", "mode": "gateway", "workdir": "/w", **fields}
    if "tags" in values:
        values["tags"] = tuple(values["tags"])
    return RunRow(run_id, **values)


def chunk(content: str = "x", model: str = "gpt-4o-mini") -> dict[str, Any]:
    """A Chat Completions stream chunk carrying `content`."""
    return {"id": "c", "model": model, "choices": [{"index": 0, "delta": {"content": content}}]}


def sse(*events: object, done: bool = True) -> bytes:
    """`events` as an SSE body, ended by [DONE] unless `done` is False."""
    body = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def spend_ledger(path: Path, runs: int = 12, requests_per_run: int = 3, *, start: float = 1_796_000_000.0) -> Path:
    """A ledger of finished runs over several days, tickets and models: one request unpriced and
    one without usage, cache reads on the priced ones (gpt-4o-mini is in LiteLLM's price map)."""
    from opencode_gateway.accounting.ledger import Ledger
    from opencode_gateway.accounting.pricing import Pricer
    from opencode_gateway.accounting.records import RunUsage

    models = ("openai/gpt-4o-mini", "litellm_proxy/team-a", "anthropic/claude-sonnet-4-5")
    ledger = Ledger(path)
    for number in range(runs):
        run_id, model, started = f"run_{number:02}", models[number % 3], start + number * 30_000.0
        ledger.start_run(
            run_row(
                run_id,
                started_at=started,
                model=model,
                metadata={"ticket": f"ENG-{400 + number % 5}"},
                tags=("harness",),
            )
        )
        for index in range(requests_per_run):
            unpriced, missing = (number, index) == (1, 0), (number, index) == (2, 0)
            usage = None if missing else Usage(1000 + 10 * number, 50 + index, 200 * index, 0, 5)
            ledger.record_request(
                run_id,
                record(
                    f"{run_id}_{index}",
                    usage=usage,
                    cost=None if unpriced or missing else 0.001 * (number + 1) + index * 1e-4,
                    source="unpriced" if unpriced or missing else "litellm",
                    model=model,
                    upstream_model=model.rsplit("/", 1)[-1],
                    started_at=started + index,
                    duration_s=1.0,
                    ttfb_s=0.25,
                    usage_missing=missing,
                    session_id="ses_1",
                    purpose="title" if index == 2 else "main",
                    saved=Pricer().cache_saved(usage, [model]) if usage else 0.0,
                ),
            )
        ledger.update_run(
            run_row(
                run_id,
                ended_at=started + 10,
                session_id="ses_1",
                stop_reason="done",
                usage=RunUsage(0, 0, 0, 0, 0, requests=requests_per_run, usage_missing_requests=0),
                cost=0.0,
            )
        )
    ledger.close()
    return path
