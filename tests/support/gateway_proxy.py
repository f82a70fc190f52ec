"""Helpers for tests against the real LiteLLM proxy (the `proxy` fixture is in conftest)."""

from __future__ import annotations

import time
from typing import Any

from tests.support.litellm_proxy import LiteLLMProxy


def new_key(proxy: LiteLLMProxy, **body: Any) -> str:
    status, key = proxy.call("POST", "/key/generate", body)
    assert status == 200, key
    return str(key["key"])


def spend_rows(proxy: LiteLLMProxy, session_id: str, expected: int, timeout: float = 40) -> list[dict[str, Any]]:
    """The gateway writes spend logs in batches: poll (bounded) until the rows are there."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = proxy.call(
            "GET",
            f"/spend/logs/v2?session_id={session_id}&start_date=2020-01-01%2000:00:00"
            "&end_date=2100-01-01%2000:00:00&page_size=100",
        )
        assert status == 200, body
        rows = [r for r in body["data"] if r["session_id"] == session_id]
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)
