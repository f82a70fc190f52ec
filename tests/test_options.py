"""The run's options, defined once: what a settings file, a batch task and help() derive from them."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import run
from opencode_gateway.config.fields import json_kinds
from opencode_gateway.config.options import PER_RUN, TASK_OPTIONS, RunOptions, task_kinds
from opencode_gateway.config.settings import TABLE, UNSET, Settings


@pytest.mark.parametrize(
    ("annotation", "kinds"),
    [
        (str, (str,)),
        (float, (int, float)),
        (int | None, (int,)),
        (bool, (bool,)),
        (Path | None, (str,)),
        (tuple[str, ...], (list,)),
        (Sequence[str | os.PathLike[str]], (list,)),
        (Mapping[str, Any], (dict,)),
        (Any, (dict,)),
        (str | os.PathLike[str], (str,)),
    ],
)
def test_each_type_is_written_in_json_as(annotation: Any, kinds: tuple[type, ...]) -> None:
    assert json_kinds(annotation) == kinds


def test_the_options_are_the_runs_own_and_every_setting_of_a_run() -> None:
    """RunOptions is written out for the type checker; the table says which settings it holds."""
    settings = {name for name, row in TABLE.items() if row.scope == "run"}
    options = set(RunOptions.__annotations__)
    assert settings - options == set(), f"add these settings to RunOptions (config/options.py): {settings - options}"
    assert options - settings == set(PER_RUN)


def test_an_option_given_as_plain_values_is_held_as_the_setting_is() -> None:
    settings = Settings().replace(sandbox_allow_read=["/srv/data"], data_dir="~/runs", opencode_config={"a": 1})
    assert settings.sandbox_allow_read == ("/srv/data",) and settings.data_dir == Path("~/runs").expanduser()
    assert dict(settings.opencode_config) == {"a": 1} and not isinstance(settings.opencode_config, dict)


def test_a_task_sets_options_with_their_json_types() -> None:
    kinds = task_kinds()
    assert list(kinds) == list(TASK_OPTIONS) and set(TASK_OPTIONS) <= set(RunOptions.__annotations__)
    assert kinds["timeout"] == (int, float) and kinds["metadata"] == (dict,) and kinds["skills"] == (list,)


def test_help_shows_every_option_by_name_left_out_by_default() -> None:
    parameters = inspect.signature(run).parameters
    assert list(parameters) == ["prompt", *RunOptions.__annotations__]
    assert all(p.default is UNSET for name, p in parameters.items() if name != "prompt")
    assert "max_cost" in (run.__doc__ or "") and "`arun` for code without an event loop." in (run.__doc__ or "")
