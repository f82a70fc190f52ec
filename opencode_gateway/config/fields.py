"""The table of settings: each setting declared once, as a field of a settings section, with what
the table says of it (`setting(...)`): its description, its flag, whether a batch task may set it.

From that one declaration come its config.yaml key and the types the file may write it as
(config/file.py), the flag and its help (cli/flags.py), what a task may set (config/options.py),
and the reference page docs/settings.md (`reference`, checked by tests/test_docs.py). What is
written besides is prose a test names when it is missing: the RunOptions line a type checker
reads (tests/test_options.py), the setting's note in config.example.yaml and a new flag in its
command's synopsis in docs/ (tests/test_docs.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass
from typing import Any, Literal, Union

from ..approvals.policy import Policy

__all__ = ["MARK", "Scope", "Setting", "json_kinds", "reference", "setting", "table"]

Scope = Literal["run", "batch", "serve"]


@dataclass(frozen=True)
class Setting:
    """What the table says of one setting beyond its name, type and default."""

    name: str
    doc: str  # one line: its flag's help and its line in docs/settings.md; {of}: "the run", "each run"...
    section: str  # the heading it is documented under: its section's first docstring line
    flag: tuple[str, ...] = ()  # its flags, e.g. ("-m", "--model"); none: the file and the API alone
    group: str = ""  # which commands take the flag: cli/flags.py adds a group's flags to a command
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    task: bool = False  # a batch task's line may set it
    paths: bool = False  # a list of paths: found beside a settings file, made absolute from a flag
    scope: Scope = "run"  # "run", or what alone reads it: "batch" or "serve" (not a run option)
    default: str = ""  # as the reference shows it
    kinds: tuple[type, ...] = ()  # the JSON (and YAML) types it is written as (json_kinds of its type)
    nullable: bool = False  # it may be written null


def setting(
    default: Any = MISSING,
    doc: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    flag: str = "",
    group: str = "",
    metavar: str | None = None,
    choices: tuple[str, ...] = (),
    task: bool = False,
    paths: bool = False,
    scope: Scope = "run",
    secret: bool = False,
) -> Any:
    """A settings section's field with its row of the table (its name, section and shown default
    are filled in by `table`); `secret` keeps it out of repr."""
    row = Setting("", doc, "", tuple(flag.split()), group, metavar, choices, task, paths, scope)
    if factory is not None:
        return dataclasses.field(default_factory=factory, repr=not secret, metadata={"setting": row})
    return dataclasses.field(default=default, repr=not secret, metadata={"setting": row})


def table(settings: type) -> dict[str, Setting]:
    """Every setting of `settings` (a class made of sections), section by section as its bases
    are listed, each in the order its section declares it."""
    rows: dict[str, Setting] = {}
    fields = {field.name: field for field in dataclasses.fields(settings)}
    hints = typing.get_type_hints(settings)  # once: each call resolves every annotation (~1 ms)
    for section in settings.__bases__:
        heading = inspect.cleandoc(section.__doc__ or "").splitlines()[0]
        for name in vars(section).get("__annotations__", {}):
            field = fields[name]
            if "setting" in field.metadata:
                row = field.metadata["setting"]
                hint = hints[name]
                rows[name] = dataclasses.replace(
                    row,
                    name=name,
                    section=heading,
                    default=_shown(field),
                    kinds=json_kinds(hint),
                    nullable=type(None) in typing.get_args(hint),
                )
    return rows


def _shown(field: dataclasses.Field[Any]) -> str:
    """The default as config.yaml would write it; one made when the settings are (the data dir's)
    is the description's to tell."""
    if field.default_factory is not MISSING:
        value = field.default_factory()
        return json.dumps(dict(value)) if isinstance(value, Mapping) else "—"
    value = field.default
    return json.dumps(list(value) if isinstance(value, tuple) else value)


MARK = "<!-- generated from config/sections.py by scripts/settings-reference: edit the sections, not this -->"


def reference(settings: type) -> str:
    """docs/settings.md below its MARK: every setting, section by section, with its type, default,
    flag and whether a batch task may set it."""
    lines = [MARK]
    heading = None
    for row in table(settings).values():
        if row.section != heading:
            heading = row.section
            lines += ["", f"## {heading}", "", *_HEAD]
        flag = " ".join(f"`{f}`" for f in row.flag) or "—"
        scope = "" if row.scope == "run" else f" ({row.scope} only)"
        doc = row.doc.replace("{of}", "the run").replace("|", "\\|").replace("<", "&lt;") + scope  # text, not HTML
        task = "yes" if row.task else ""
        lines.append(f"| `{row.name}` | {_kind(row)} | `{row.default}` | {flag} | {task} | {doc} |")
    return "\n".join(lines) + "\n"


def _kind(row: Setting) -> str:
    """A setting's type as config.yaml writes it."""
    names = [_KIND_NAMES[kind] for kind in row.kinds if not (kind is int and float in row.kinds)]
    return " or ".join([*names, *(["null"] if row.nullable else [])])


_KIND_NAMES = {str: "text", int: "integer", float: "number", bool: "true/false", list: "list", dict: "mapping"}
_HEAD = ("| setting | type | default | flag | task | |", "|---|---|---|---|---|---|")


def json_kinds(annotation: Any) -> tuple[type, ...]:
    """The JSON (and YAML) value types a setting or option of type `annotation` is written as:
    a text for str and paths, a list for sequences, an object for mappings and JSON schemas."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return tuple(
            dict.fromkeys(
                kind for arg in typing.get_args(annotation) if arg is not type(None) for kind in json_kinds(arg)
            )
        )
    if annotation is float:
        return (int, float)
    if annotation is Policy:  # written as its settings mapping (approvals/policy.py)
        return (dict,)
    if annotation in (str, int, bool):
        return (annotation,)
    if annotation is Any or annotation is Mapping or origin in (dict, Mapping):
        return (dict,)
    if origin in (tuple, list, Sequence):
        return (list,)
    if origin is os.PathLike or isinstance(annotation, type) and issubclass(annotation, os.PathLike):
        return (str,)
    raise TypeError(f"no JSON form for {annotation!r}")
