"""The docs' command synopses (docs/cli.md, docs/costs.md) name every flag `--help` lists, so the two cannot drift
apart; the settings' reference and the example file follow the settings' table; the README stays a
page people read, and links only to what exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from opencode_gateway.cli.program import build_parser
from opencode_gateway.config.fields import MARK, reference
from opencode_gateway.config.settings import TABLE, Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = "\n".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _synopsis(command: str) -> str:
    """Every line of the docs' code blocks that starts `opencode-gateway <command> `, with the
    lines that continue it (indented)."""
    text, blocks, block, inside = [], [], [], False
    for line in DOCS.splitlines():
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
                text += [more for more in lines[i + 1 :] if more.startswith(" ")][:12]
    return "\n".join(text)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_flag_of_a_command_is_in_its_synopsis(command: str) -> None:
    synopsis = _synopsis(command)
    assert synopsis, f"docs/ has no synopsis of `opencode-gateway {command}`"

    def named(flag: str) -> bool:
        return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", synopsis) is not None

    actions = [
        action
        for action in _commands()[command]._actions
        if action.option_strings and "--help" not in action.option_strings
    ]
    missing = sorted(action.option_strings[-1] for action in actions if not any(map(named, action.option_strings)))
    assert missing == [], f"`opencode-gateway {command}` in docs/ lacks {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_short_and_every_link_it_and_the_docs_hold_leads_somewhere() -> None:
    assert len(README.splitlines()) <= 250
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith("http"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name} links to {target}, which does not exist"
            if anchor and linked.suffix == ".md":
                headings = [_slug(h) for h in re.findall(r"^#+ (.*)$", linked.read_text(), re.M)]
                assert anchor in headings, f"{page.name} links to {target}: no such heading in {linked.name}"


def test_the_settings_reference_is_the_tables() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    assert MARK in page, "docs/settings.md lost its marker: restore it and run scripts/settings-reference"
    assert page.partition(MARK)[1] + page.partition(MARK)[2] == reference(Settings), (
        "docs/settings.md is stale: run scripts/settings-reference"
    )


def test_the_example_settings_file_names_every_setting_and_nothing_else() -> None:
    text = (ROOT / "config.example.yaml").read_text()
    keys = set(re.findall(r"^#? ?([a-z_]+):", text, re.M))  # set, or shown commented out
    assert sorted(set(TABLE) - keys) == [], "config.example.yaml lacks these settings"
    assert sorted(keys - set(TABLE)) == [], "config.example.yaml names keys that are no settings"
