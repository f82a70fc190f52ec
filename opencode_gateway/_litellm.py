"""The one place litellm is imported: lazily, because `import litellm` costs about 2.4 s."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["close_clients", "load", "owning_loop"]


def load() -> Any:
    """litellm, imported with its bundled price map (never fetched from the internet) and quiet.

    litellm's settings are process-wide: when the host program imported it first, they are the
    host's, and stay as it set them. (`import` is what waits for an import under way in another
    thread, e.g. the run's warm-up: sys.modules holds the module half-initialised meanwhile.)"""
    if "litellm" in sys.modules:
        import litellm

        return litellm
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # it prints a provider banner to stdout for unknown models
    return litellm


async def close_clients() -> None:
    """Close the HTTP clients litellm cached for the running event loop, which is about to close.

    litellm keys its cached clients by event loop; one left open outlives its loop and, when
    collected at exit, warns "Event loop is closed". Only this loop's clients are closed: another
    thread's run keeps its own."""
    litellm = sys.modules.get("litellm")
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    if cache is None:
        return
    from litellm.caching.evicted_client_closer import running_loop_token

    suffix = f"-{running_loop_token()}"
    for key in [key for key in list(cache.cache_dict) if str(key).endswith(suffix)]:
        client = cache.cache_dict.pop(key, None)
        getattr(cache, "ttl_dict", {}).pop(key, None)
        close = getattr(client, "aclose", None) or getattr(client, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                closing = close()
                if inspect.isawaitable(closing):
                    await closing


async def owning_loop(work: Awaitable[T]) -> T:
    """`work`, then litellm's clients of this loop closed: for `asyncio.run(owning_loop(...))`."""
    try:
        return await work
    finally:
        await close_clients()
