"""The flags several commands share, and the parser that says which flag a misspelt one meant:
each flag is defined once, with its help, for every command that takes it (docs/cli.md is
checked against them)."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any, NoReturn

from ..config.fields import Setting
from ..config.settings import TABLE

__all__ = [
    "Parser",
    "all_flags",
    "common_flags",
    "limit_flags",
    "setting_flags",
    "upstream_flags",
]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, exit code 2, and the nearest command or flag to a misspelt one."""
        self.exit(2, f"{self.prog}: error: {message}{self._did_you_mean(message)} (see --help)\n")

    def _did_you_mean(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        unknown = re.search(r"unrecognized arguments: (-[^\s=]+)", message)
        if choice:
            word, candidates = choice.group(1), re.findall(r"'([^']+)'", choice.group(2))
        elif unknown:
            word, candidates = unknown.group(1), sorted(all_flags(self))
        else:
            return ""
        close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
        return f"; did you mean {close[0]}?" if close else ""


def all_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and of its commands."""
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= all_flags(command)
    return flags


def setting_flags(parser: argparse._ActionsContainer, group: str, of: str = "the run") -> None:
    """The flags of every setting of `group`, each as the table declares it (config/sections.py):
    its dest the setting's name, repeatable when the setting is a list or KEY=VALUE pairs, typed
    as the setting is; `of` names what the limits bound, in their help."""
    for row in TABLE.values():
        if row.group == group:
            _add(parser, row, of)


def _add(parser: argparse._ActionsContainer, row: Setting, of: str) -> None:
    options: dict[str, Any] = {"dest": row.name, "help": row.doc.replace("{of}", of)}
    if row.metavar:
        options["metavar"] = row.metavar
    if row.choices:
        options["choices"] = row.choices
    if list in row.kinds or "=" in (row.metavar or ""):
        options.update(action="append", default=[])
    elif row.kinds in ((int,), (int, float)):
        options["type"] = float if float in row.kinds else int
    parser.add_argument(*row.flag, **options)


def upstream_flags(parser: argparse.ArgumentParser) -> None:
    setting_flags(parser, "upstream")
    key = parser.add_mutually_exclusive_group()  # the key: given, or read from a file
    setting_flags(key, "key")
    key.add_argument("--api-key-file", metavar="PATH", help="read the key from this file (kept out of argv)")


def limit_flags(parser: argparse.ArgumentParser, of: str) -> None:
    """What bounds a run: its time, its budgets, and which tool calls it may make."""
    setting_flags(parser, "limits", of)
    setting_flags(parser, "budget", of)


def common_flags(parser: argparse.ArgumentParser) -> None:
    setting_flags(parser, "common")
    parser.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
