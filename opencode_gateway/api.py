"""The Python API: `run`, `arun`, `stream` and `astream` run OpenCode once and take the same options
(`RunOptions`, config/options.py); `check` raises what they would raise before OpenCode starts.

Everything that can be checked before OpenCode starts is checked by `prepare` (runs/plan.py), and
raises; what happens during the run is reported in the RunResult (`stop_reason`, `error`, decided by
runs/conclusion.py), except an invalid structured output, which raises OutputInvalid because the caller
asked for a value the run did not give.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from typing_extensions import Unpack

from . import _litellm
from .config.options import RunOptions, shows_options
from .events import Done
from .opencode.lines import Event
from .runs.plan import prepare
from .runs.result import RunResult
from .runs.runner import execute

__all__ = ["arun", "astream", "check", "run", "stream"]


@shows_options
def check(prompt: str, **options: Unpack[RunOptions]) -> None:
    """Raise what `run` would raise before OpenCode starts, without running anything."""
    prepare(prompt, **options)


@shows_options
async def arun(prompt: str, **options: Unpack[RunOptions]) -> RunResult:
    """Run OpenCode once on `model` through a local endpoint, account for every request, and
    return its RunResult."""
    return await execute(prepare(prompt, **options))


@shows_options
async def astream(prompt: str, **options: Unpack[RunOptions]) -> AsyncIterator[Event]:
    """Run OpenCode once, yielding its events as they happen; the last is Done(result).

    Leaving the loop early stops the run (OpenCode is killed, the ledger row closed)."""
    plan = prepare(prompt, **options)
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    task = asyncio.ensure_future(execute(plan, queue.put_nowait, deltas=True))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        result = task.result()  # raises what the run raised (a preflight error, OutputInvalid, ...)
        yield Done(result.session_id, result=result)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _no_running_loop(name: str, instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{name}() was called inside a running event loop: use `{instead}` instead")


@shows_options
def run(prompt: str, **options: Unpack[RunOptions]) -> RunResult:
    """`arun` for code without an event loop."""
    _no_running_loop("run", "await arun(...)")
    return asyncio.run(_litellm.owning_loop(arun(prompt, **options)))


@shows_options
def stream(prompt: str, **options: Unpack[RunOptions]) -> Iterator[Event]:
    """`astream` for code without an event loop: a plain iterator of events, ending with Done.

    The run makes progress while the caller waits for the next event."""
    _no_running_loop("stream", "async for event in astream(...)")
    loop = asyncio.new_event_loop()
    events = astream(prompt, **options)
    try:
        while True:
            step: asyncio.Future[Event] = asyncio.ensure_future(anext(events), loop=loop)
            try:
                event = loop.run_until_complete(step)
            except StopAsyncIteration:
                return
            except BaseException:  # Ctrl-C while the loop ran: cancel the step, which stops the run
                step.cancel()
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(step)
                raise
            yield event
    finally:
        loop.run_until_complete(events.aclose())  # type: ignore[attr-defined]
        loop.run_until_complete(_litellm.close_clients())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
