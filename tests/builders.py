"""What the unit tests build again and again: request records and SSE streams."""

from __future__ import annotations

import json
from typing import Any

from opencode_gateway.accounting.pricing import Cost
from opencode_gateway.accounting.records import RequestRecord
from opencode_gateway.accounting.usage import Usage


def record(request_id: str = "r", *, usage: Usage | None = Usage(100, 10), cost: float | None = 0.001,
           source: str = "litellm", status: int = 200, **fields: Any) -> RequestRecord:
    """A finished request's record; `fields` sets any other RequestRecord field."""
    values: dict[str, Any] = {"model": "m", "upstream_model": None, "stream": True, "started_at": 0.0,
                              "duration_s": 0.0, "ttfb_s": 0.0, **fields}
    return RequestRecord(request_id=request_id, status_code=status, usage=usage, cost=Cost(cost, source), **values)


def chunk(content: str = "x", model: str = "gpt-4o-mini") -> dict[str, Any]:
    """A Chat Completions stream chunk carrying `content`."""
    return {"id": "c", "model": model, "choices": [{"index": 0, "delta": {"content": content}}]}


def sse(*events: object, done: bool = True) -> bytes:
    """`events` as an SSE body, ended by [DONE] unless `done` is False."""
    body = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)
    return body + (b"data: [DONE]\n\n" if done else b"")
