"""The README's command synopses name every flag `--help` lists, so the two cannot drift apart."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from opencode_gateway.cli import build_parser

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _synopsis(command: str) -> str:
    """Every line of the README's code blocks that starts `opencode-gateway <command> `, with the
    lines that continue it (indented)."""
    text, blocks, block, inside = [], [], [], False
    for line in README.splitlines():
        if line.startswith("```"):
            if inside:
                blocks.append(block)
            block, inside = [], not inside
        elif inside:
            block.append(line)
    for lines in blocks:
        for i, line in enumerate(lines):
            if line.startswith(f"opencode-gateway {command} ") or line == f"opencode-gateway {command}":
                text.append(line)
                text += [more for more in lines[i + 1:] if more.startswith(" ")][:12]
    return "\n".join(text)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_flag_of_a_command_is_in_its_synopsis(command: str) -> None:
    synopsis = _synopsis(command)
    assert synopsis, f"the README has no synopsis of `opencode-gateway {command}`"
    def named(flag: str) -> bool:
        return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", synopsis) is not None

    actions = [action for action in _commands()[command]._actions if action.option_strings
               and "--help" not in action.option_strings]
    missing = sorted(action.option_strings[-1] for action in actions if not any(map(named, action.option_strings)))
    assert missing == [], f"`opencode-gateway {command}` in the README lacks {missing}"
