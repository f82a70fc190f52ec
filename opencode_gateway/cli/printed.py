"""What a command prints of a run: JSON as one line, the answer whole into a pipe (shown on a
terminal), and the summary line of what the run used and cost."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from ..accounting.records import calls_said
from ..terminal import shown

if TYPE_CHECKING:
    from ..runs.result import RunResult

__all__ = ["print_json", "print_result", "result_line"]


def print_json(data: Any, stream: Any = None) -> None:
    print(json.dumps(data, ensure_ascii=False), file=stream or sys.stdout, flush=True)


def result_line(result: Any) -> str:
    usage = result.usage
    unpriced = result.cost_sources.get("unpriced", 0)
    cost = f"cost unknown ({unpriced} unpriced)" if result.cost is None else f"${result.cost:.6f}"
    parts = [
        result.stop_reason,
        calls_said(usage.requests, usage.refused),
        f"{usage.input_tokens:,} in / {usage.output_tokens:,} out tokens",
        cost,
    ]
    if usage.cache_read_tokens or usage.cache_write_tokens:
        saved = result.cache_saved
        effect = (
            "saving unknown"
            if saved is None
            else f"saved ${saved:.6f}"
            if saved >= 0
            else f"cache writes cost ${-saved:.6f} more"
        )
        parts.append(f"{usage.cached_share:.0%} of input from cache, {effect}")
    parts.append(f"session {result.session_id or '-'}")
    return "opencode-gateway: " + " · ".join(parts)


def print_result(result: RunResult, *, as_json: bool) -> None:
    """A run's warnings, then its result (--json) or its answer, its error and its summary line."""
    for warning in result.warnings:
        print(shown(f"opencode-gateway: warning: {warning}"), file=sys.stderr)
    if as_json:
        print_json(result.to_dict())
    else:
        if result.output is not None:
            print_json(result.output)
        elif result.text:  # whole and as written into a pipe or a file; on a terminal, shown
            print(shown(result.text) if sys.stdout.isatty() else result.text)
        if result.error is not None:
            print(shown(f"opencode-gateway: error: {result.error}"), file=sys.stderr)
        print(shown(result_line(result)), file=sys.stderr)
