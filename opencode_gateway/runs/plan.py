"""A run that passed every check that can be made before OpenCode starts: its settings, workdir,
binary, kept session, skills, output schema and sandbox. `prepare` makes one from `run`'s options
and raises what is wrong; `runner.execute(plan)` runs it: the plan is data the runner reads."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from ..config.options import PER_RUN, RunOptions
from ..config.settings import RunSettings, Settings
from ..errors import CapabilityUnsupported, SettingsError
from ..opencode import config as oc_config
from ..opencode.binary import OpenCodeBinary, find_opencode
from ..opencode.generation import DEFAULT
from ..opencode.process import OpenCodeProcess
from ..opencode.sandbox import resolve_sandbox
from ..opencode.sessions import session_directory, session_store
from ..opencode.skills import Skill, load_skills
from .output import OutputSpec

if TYPE_CHECKING:
    from ..approvals.host import Approve

__all__ = ["Plan", "prepare"]


@dataclass(frozen=True)
class Plan:
    """A run that passed every check that can be made before OpenCode starts."""

    settings: RunSettings
    prompt: str
    workdir: Path
    binary: OpenCodeBinary
    session_id: str | None
    resumed_store: Path | None
    skills: tuple[Skill, ...]
    output: OutputSpec | None
    sandbox: str  # "bwrap" or "none": what `settings.sandbox` comes to on this machine
    notes: tuple[str, ...]  # warnings found before the run (auto fell back to no sandbox)
    approve: Approve | None = None  # who answers what the policy asks about (the API's callback)
    opencode: Callable[..., OpenCodeProcess] | None = None  # a stand-in for OpenCode (RecordedOpenCode)

    @property
    def asks(self) -> bool:
        """Whether tool calls are asked about: a policy or a callback (approvals/)."""
        return self.settings.approvals is not None or self.approve is not None


def _check_session(settings: Settings, session_id: str | None, workdir: Path) -> Path | None:
    """The kept store of the session a run continues (None for a new session)."""
    if session_id is None:
        return None
    store = session_store(settings.data_dir, session_id)
    if not store.is_dir():
        raise SettingsError(f"no kept session {session_id} under {settings.data_dir}: it cannot be continued")
    started_in = session_directory(store, session_id)
    if started_in is not None and started_in.resolve() != workdir:
        raise SettingsError(
            f"session {session_id} was started in {started_in}, and OpenCode continues a session only "
            f"in its own folder: run it with --workdir {started_in} (workdir= in the Python API)"
        )
    return store


def _refuse_unsupported(options: RunOptions) -> None:
    """What the harness API has and OpenCode cannot do, each with what to do instead."""
    if options.get("tools") is not None:
        raise CapabilityUnsupported(
            "custom Python tools are not supported: OpenCode runs its own tools in its own process and a "
            "headless run cannot call back into Python; give the agent a command (it has bash) or a skill instead"
        )
    if options.get("history") is not None:
        raise CapabilityUnsupported(
            "a conversation history cannot be injected: OpenCode keeps its own sessions; continue an earlier run "
            "with session_id=<its RunResult.session_id>"
        )


def _check_prompt(prompt: str) -> None:
    if not prompt.strip():
        raise SettingsError("the prompt is empty: give the task to run")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes of argv arrive as lone surrogates
        raise SettingsError(f"the prompt is not UTF-8 text (character {exc.start}): give the task as UTF-8") from None


def _settings(options: RunOptions) -> RunSettings:
    """The run's settings: its `settings` (or the defaults) with its per-run options over them."""
    overrides: dict[str, Any] = {name: value for name, value in options.items() if name not in PER_RUN}
    if overrides.get("skills") is not None:
        overrides["skills"] = [str(folder) for folder in overrides["skills"]]
    return (options.get("settings") or Settings()).replace(**overrides).validated()


def check_writable(data_dir: Path) -> None:
    """Refuse a data dir this run could not write (read-only, full, not ours) before OpenCode
    starts: the session, the spool and the default ledger go there, and a run that learns it
    after its model calls has spent the money and lost what it made."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".writable-") as probe:
            probe.write(b"\0" * 65536)  # a full disk refuses this much; a nearly full one, the session
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise SettingsError(
            f"the data dir {data_dir} cannot be written ({exc.strerror or exc}): free space there, "
            "or give another (data_dir in the settings, or $OPENCODE_GATEWAY_HOME)"
        ) from None


def _binary(settings: Settings, stand_in: Callable[..., OpenCodeProcess] | None) -> OpenCodeBinary:
    """The OpenCode a run starts (a stand-in starts none: the default generation's config)."""
    if stand_in is None:
        return find_opencode(settings.opencode_bin, settings.data_dir)
    return OpenCodeBinary("opencode", DEFAULT.pinned, DEFAULT)


def prepare(prompt: str, **options: Unpack[RunOptions]) -> Plan:
    _refuse_unsupported(options)
    settings = _settings(options)
    _check_prompt(prompt)
    cwd = Path(options.get("workdir", ".")).expanduser().resolve()
    if not cwd.is_dir():
        raise SettingsError(f"workdir {cwd} is not a directory")
    oc_config.check_user_config(settings.opencode_config)
    oc_config.check_agent(settings.agent, settings.opencode_config)
    oc_config.permission_rules(settings.permissions, settings.disable_tools)
    loaded_skills = load_skills(settings.skills)
    if loaded_skills and "skill" in settings.disable_tools:
        raise SettingsError("skills were given but the skill tool is disabled: drop --disable-tool skill")
    output = options.get("output")
    spec = None if output is None else OutputSpec.of(output)
    approve = options.get("approve")
    if approve is not None and not callable(approve):
        raise SettingsError(f"approve must be a function of an ApprovalRequest, not {type(approve).__name__}")
    stand_in = options.get("opencode")
    if stand_in is not None and not callable(stand_in):
        raise SettingsError(f"opencode must be a stand-in such as RecordedOpenCode, not {type(stand_in).__name__}")
    session_id = options.get("session_id")
    resumed_store = _check_session(settings, session_id, cwd)
    notes: list[str] = []
    confinement = resolve_sandbox(settings.sandbox, notes)
    settings.sandbox_config.check_ledger(
        settings.ledger_location.path, workdir=cwd, data_dir=settings.data_dir, confinement=confinement
    )
    check_writable(settings.data_dir)  # the last check: the first to write anything
    return Plan(
        settings=settings,
        prompt=prompt + (spec.prompt_suffix() if spec else ""),
        workdir=cwd,
        binary=_binary(settings, stand_in),
        session_id=session_id,
        resumed_store=resumed_store,
        skills=loaded_skills,
        output=spec,
        approve=approve,
        opencode=stand_in,
        sandbox=confinement,
        notes=tuple(notes),
    )
