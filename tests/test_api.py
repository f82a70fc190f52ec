"""The Python API's promises that need no model: one signature for the four entry points, and
every problem that can be found before OpenCode starts raised before it starts."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

import opencode_gateway
from opencode_gateway import (
    CapabilityUnsupported,
    SettingsError,
    arun,
    astream,
    run,
    stream,
)
from opencode_gateway.config.settings import Settings


def test_run_arun_stream_and_astream_take_the_same_arguments() -> None:
    parameters = {
        name: list(inspect.signature(f).parameters)
        for name, f in [("run", run), ("arun", arun), ("stream", stream), ("astream", astream)]
    }
    assert len({tuple(p) for p in parameters.values()}) == 1
    assert parameters["run"][:3] == ["prompt", "model", "api_base"]
    for name in ("instructions", "skills", "output", "session_id", "max_cost", "settings", "tools", "history"):
        assert name in parameters["run"]


def test_the_public_api_is_exported() -> None:
    for name in opencode_gateway.__all__:
        assert getattr(opencode_gateway, name) is not None


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ({"tools": [print]}, "custom Python tools are not supported: OpenCode runs its own tools"),
        ({"history": [{"role": "user", "content": "hi"}]}, "continue an earlier run with session_id="),
    ],
)
def test_custom_tools_and_history_are_refused_before_anything_starts(option: dict, reason: str, tmp_path: Path) -> None:
    settings = Settings(opencode_bin=str(tmp_path / "never-started"), ledger=tmp_path / "ledger.db")
    with pytest.raises(CapabilityUnsupported, match=reason):
        run("Hi", model="openai/gpt-4o-mini", settings=settings, **option)
    with pytest.raises(CapabilityUnsupported):
        next(stream("Hi", model="openai/gpt-4o-mini", settings=settings, **option))
    assert not (tmp_path / "ledger.db").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"output": {"type": 12}}, "output is not a valid JSON schema"),
        ({"skills": ["/no/such/skill"]}, "skill folder /no/such/skill does not exist"),
        ({"max_cost": -1}, "max_cost -1 is invalid"),
    ],
)
def test_bad_arguments_raise_before_opencode_starts(option: dict, message: str, tmp_path: Path) -> None:
    settings = Settings(opencode_bin=str(tmp_path / "never-started"), ledger=tmp_path / "ledger.db")
    with pytest.raises(SettingsError, match=message):
        run("Hi", model="openai/gpt-4o-mini", settings=settings, **option)
    assert not (tmp_path / "ledger.db").exists()


def test_skills_with_the_skill_tool_disabled_is_a_contradiction(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: notes\ndescription: Notes.\n---\n")
    with pytest.raises(SettingsError, match="drop --disable-tool skill"):
        run("Hi", model="openai/gpt-4o-mini", skills=[folder], disable_tools=["skill"])


def test_the_blocking_forms_refuse_to_run_inside_an_event_loop() -> None:
    async def inside() -> None:
        with pytest.raises(RuntimeError, match="use `await arun"):
            run("Hi", model="openai/gpt-4o-mini")
        with pytest.raises(RuntimeError, match="use `async for event in astream"):
            next(stream("Hi", model="openai/gpt-4o-mini"))

    asyncio.run(inside())


def test_a_ledger_in_the_workdir_is_refused_before_opencode_starts(tmp_path: Path) -> None:
    """A CI checkout that holds the ledger: the agent would read other runs' tickets in its
    -wal file and could truncate -shm under the gateway (SIGBUS). Nothing starts, nothing is written."""
    ledger = tmp_path / "ledger.db"
    with pytest.raises(SettingsError, match=f"the ledger {ledger} is in {tmp_path}, which this run's agent can see"):
        run(
            "hi", model="m", api_key="sk-x", workdir=tmp_path, settings=Settings(ledger=ledger, data_dir=tmp_path / "d")
        )
    assert list(tmp_path.iterdir()) == []
