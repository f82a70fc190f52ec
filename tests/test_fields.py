"""The settings' table: each setting is declared once (config/sections.py), and its config.yaml
key, its flag, what a batch task may set and its reference page all follow from that declaration."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

import pytest

from opencode_gateway.cli.arguments import settings_of
from opencode_gateway.cli.program import build_parser
from opencode_gateway.config.fields import Setting, json_kinds
from opencode_gateway.config.file import load_settings
from opencode_gateway.config.options import TASK_OPTIONS, task_kinds
from opencode_gateway.config.settings import TABLE, Settings
from opencode_gateway.errors import SettingsError

FLAGGED = [row for row in TABLE.values() if row.flag]
HINTS = typing.get_type_hints(Settings)


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_table_holds_every_setting_and_only_settings() -> None:
    assert "environ" not in TABLE and "secret_files" not in TABLE  # the process's, never a file's
    assert {"model", "sandbox", "ledger", "approvals", "otel"} <= set(TABLE)
    assert all(row.doc and row.section for row in TABLE.values()), "a setting without a description"
    assert TABLE["api_key"].flag == ("--api-key",) and Settings(api_key="sk-x").__repr__().count("sk-x") == 0


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_setting_is_a_key_of_the_settings_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"{name}: null\n")  # written but empty: the default
    assert load_settings(path) == Settings(secret_files=(path.resolve(),))


def test_a_key_that_is_no_setting_is_refused_with_the_nearest_one(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("sandbox_netwrok: host\n")
    with pytest.raises(SettingsError, match="unknown setting 'sandbox_netwrok'; did you mean sandbox_network"):
        load_settings(path)


def _given(row: Setting, tmp_path: Path) -> tuple[str, object]:
    """A value for `row`'s flag, and what the setting then holds."""
    if row.name == "instructions":
        (tmp_path / "notes.md").write_text("Prefer small diffs.")
        return str(tmp_path / "notes.md"), "Prefer small diffs."
    if row.name == "approvals":
        (tmp_path / "policy.yaml").write_text("default: deny\n")
        return str(tmp_path / "policy.yaml"), "deny"
    if row.choices:
        return row.choices[-1], row.choices[-1]
    if "=" in (row.metavar or ""):
        return "title=openai/gpt-4o-mini" if row.name == "routes" else "ticket=ENG-1", None
    kinds = json_kinds(HINTS[row.name])
    if list in kinds:
        return "/work/x", ("/work/x",)
    if float in kinds:
        return "2.5", 2.5
    if int in kinds:
        return "3", 3
    return "openai/gpt-4o-mini", "openai/gpt-4o-mini"


@pytest.mark.parametrize("row", FLAGGED, ids=[row.name for row in FLAGGED])
def test_each_flag_of_the_table_is_a_commands_and_sets_its_setting(row: Setting, tmp_path: Path) -> None:
    command = "batch" if row.scope == "batch" else "run"
    parser = _commands()[command]
    assert row.flag[-1] in parser._option_string_actions, f"{row.flag[-1]} is on no command"
    value, expected = _given(row, tmp_path)
    positional = ["tasks.jsonl"] if command == "batch" else ["the prompt"]
    settings = settings_of(parser.parse_args([row.flag[-1], value, *positional]))
    held = getattr(settings, row.name)
    if row.name == "approvals":
        held = held.default
    elif expected is None:  # KEY=VALUE pairs: a mapping
        held, expected = dict(held), dict([value.split("=", 1)])
    assert held == expected


def test_a_batch_task_sets_its_own_workdir_and_output_and_the_settings_marked_task() -> None:
    assert TASK_OPTIONS == ("workdir", "output", *(row.name for row in TABLE.values() if row.task))
    assert {"model", "metadata", "max_turns"} <= set(TASK_OPTIONS)
    assert not {"api_key", "api_base", "ledger", "sandbox", "env", "opencode_bin"} & set(TASK_OPTIONS)


@pytest.mark.parametrize("name", [row.name for row in TABLE.values() if row.choices])
def test_a_value_outside_its_settings_choices_is_refused_naming_them(name: str) -> None:
    with pytest.raises(SettingsError, match=f"{name} 'rya' is not known: use {', '.join(TABLE[name].choices)}"):
        Settings(model="openai/m", **{name: "rya"}).validated()


def test_a_task_option_is_typed_by_its_setting_whatever_runoptions_holds() -> None:
    """A setting marked task but not yet in RunOptions fails only the test that names the line
    (test_options), never the import of the batch's tasks file reader."""
    kinds = task_kinds()
    assert all(kinds[row.name] == json_kinds(HINTS[row.name]) for row in TABLE.values() if row.task)
