"""Run OpenCode on any LiteLLM model group, and know exactly what each run cost.

    from opencode_gateway import run, stream
    result = run("Add a test for parse()", model="openai/gpt-4o-mini", permissions="edit")
    print(result.text, result.usage.input_tokens, result.cost, result.files)

    for event in stream("Fix the failing test", model="litellm_proxy/team-a"):
        print(event.to_dict())          # text as it streams, tool calls, costs so far; last: Done

Importing this package does not import litellm (it costs ~2.4 s); a run imports it when needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config.file import load_settings
from .config.settings import Settings
from .errors import (
    BudgetExceeded,
    CapabilityUnsupported,
    ConfigConflict,
    GatewayError,
    LedgerError,
    OpenCodeError,
    OpenCodeFailed,
    OpenCodeNotFound,
    PreflightError,
    RunTimeout,
    SettingsError,
    TurnLimitReached,
    UpstreamError,
)
from .runs.files import FileChange

if TYPE_CHECKING:
    from .api import arun, astream, run, stream
    from .opencode.recorded import RecordedOpenCode
    from .runs.result import OutputInvalid, RunResult

__all__ = [
    "BudgetExceeded",
    "CapabilityUnsupported",
    "ConfigConflict",
    "FileChange",
    "GatewayError",
    "LedgerError",
    "OpenCodeError",
    "OpenCodeFailed",
    "OpenCodeNotFound",
    "OutputInvalid",
    "PreflightError",
    "RecordedOpenCode",
    "RunResult",
    "RunTimeout",
    "Settings",
    "SettingsError",
    "TurnLimitReached",
    "UpstreamError",
    "arun",
    "astream",
    "load_settings",
    "run",
    "stream",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The run machinery pulls in starlette, uvicorn and httpx: load it on first use, so that
    # `import opencode_gateway` and the CLI's --help stay fast.
    if name in ("OutputInvalid", "RunResult"):
        from .runs import result

        return getattr(result, name)
    if name == "RecordedOpenCode":
        from .opencode import recorded

        return recorded.RecordedOpenCode
    if name in ("arun", "astream", "run", "stream"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
