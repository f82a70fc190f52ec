"""The options of one run, defined once.

`RunOptions` is the keyword arguments of `run`, `arun`, `stream`, `astream` and `check` (typed with
`Unpack`, so a type checker rejects a misspelt option or a wrong type). Every setting of a run
(config/sections.py) is an option that overrides it for the run; the others (`PER_RUN`) exist only
per run. A batch task may set the options in `TASK_OPTIONS` (the settings marked `task`, its
workdir and output), checked against the types written here. An
option left out is "not given" (the settings' value stands); `None` given on purpose clears an
optional setting, e.g. `max_cost=None` lifts a settings file's cost limit for one run.
"""

from __future__ import annotations

import inspect
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar

from .fields import json_kinds
from .settings import TABLE, UNSET, Settings

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["PER_RUN", "TASK_OPTIONS", "RunOptions", "shows_options", "task_kinds"]


class RunOptions(TypedDict, total=False):
    """model: `litellm_proxy/<group>` (a LiteLLM gateway's model group) or any LiteLLM model string.
    small_model: the model of OpenCode's background calls (titles, summaries); default: model.
    routes: {purpose: model} for OpenCode's background calls (title, summary, compaction),
        whatever model they ask for.
    api_base, api_key: the gateway and its virtual key, or the provider's in SDK mode.
    workdir: where OpenCode works (default: the current folder).
    permissions: "read-only", "edit" or "full"; disable_tools: tool names to switch off; agent.
    metadata, tags: spend attribution (x-litellm-spend-logs-metadata, x-litellm-tags).
    instructions: extra system instructions (text). skills: folders that each hold a SKILL.md.
    output: a JSON schema (dict) or a pydantic model class; RunResult.output is the answer's
        JSON object, validated, and OutputInvalid is raised when the run gives none.
    session_id: an earlier RunResult.session_id, to continue that OpenCode session (in its folder).
    timeout, max_cost, max_requests, max_tokens, max_turns: the run's limits (max_turns: main-model requests).
    opencode_bin: the opencode binary to run.
    sandbox: "auto" (default: bubblewrap when it works here), "bwrap" or "none"; RunResult.sandbox
        says what the run had.
    approvals: a policy ({"rules": {tool: answer | {pattern: answer}}, "default": answer}, answers
        "allow", "deny" or "ask"); approve: fn(ApprovalRequest) -> "allow" | "deny" | Approval
        (or an async fn), asked what the policy asks about; approval_timeout: seconds, then a deny.
    Every other setting (docs/settings.md) too, for this run: env, sandbox_network, ledger, pricing...
    opencode: a stand-in for OpenCode, e.g. RecordedOpenCode.from_file(path) (replays a recorded
        run; for tests of code that runs OpenCode, without OpenCode).
    settings: the rest (a Settings, e.g. from load_settings); the options above override it.
    tools, history: not supported (CapabilityUnsupported says why).
    """

    model: str
    api_base: str | None
    api_key: str | None
    small_model: str | None
    routes: Mapping[str, str]
    workdir: str | os.PathLike[str]
    permissions: str | None
    disable_tools: Sequence[str]
    agent: str
    metadata: Mapping[str, Any]
    tags: Sequence[str]
    instructions: str | None
    skills: Sequence[str | os.PathLike[str]]
    output: Any
    session_id: str | None
    timeout: float
    max_cost: float | None
    max_requests: int | None
    max_tokens: int | None
    max_turns: int | None
    opencode_bin: str | None
    sandbox: str
    approvals: Any
    approval_timeout: float
    tag_metadata_keys: Sequence[str]
    env: Sequence[str]
    opencode_config: Mapping[str, Any]
    mcp: Mapping[str, Any]
    budgets: Mapping[str, Any]
    connect_timeout: float
    first_byte_timeout: float
    idle_timeout: float
    max_body_bytes: int
    pricing: Mapping[str, Any]
    estimate_usage: bool
    prompt_caching: Mapping[str, str]
    sandbox_network: str
    sandbox_allow_write: Sequence[str]
    sandbox_allow_read: Sequence[str]
    data_dir: str | os.PathLike[str]
    ledger: str | None
    keep_sessions_days: float | None
    diff_max_bytes: int
    otel: Mapping[str, Any] | None
    approve: Any
    opencode: Any
    settings: Settings
    tools: Any
    history: Any


PER_RUN = (
    "workdir",
    "output",
    "session_id",
    "settings",
    "tools",
    "history",
    "approve",
    "opencode",
)  # not settings: this run's own
# What a batch task's line may set: its own workdir and output, and the settings the table marks `task`.
TASK_OPTIONS = ("workdir", "output", *(name for name, row in TABLE.items() if row.task))


def task_kinds() -> dict[str, tuple[type, ...]]:
    """The JSON types each option a batch task may set is written as: a setting's from the
    table, the run's own (workdir, output) from RunOptions' types."""
    hints = typing.get_type_hints(RunOptions)
    return {name: TABLE[name].kinds if name in TABLE else json_kinds(hints[name]) for name in TASK_OPTIONS}


def shows_options(function: F) -> F:
    """Let help() and inspect show `function(prompt, **options)` with each option by name, as a
    type checker sees it through Unpack[RunOptions] (left out: UNSET, "not given")."""
    hints = typing.get_type_hints(RunOptions)
    signature = inspect.signature(function)
    parameters = [
        signature.parameters["prompt"],
        *(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=UNSET, annotation=hints[name])
            for name in RunOptions.__annotations__
        ),
    ]
    function.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    function.__doc__ = f"{inspect.cleandoc(function.__doc__ or '')}\n\n{inspect.cleandoc(RunOptions.__doc__ or '')}"
    return function
