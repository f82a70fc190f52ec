"""A binary's generation is told from its `--version` alone, as OpenCode prints it."""

from __future__ import annotations

import pytest

from opencode_gateway.opencode.generation import GENERATIONS, generation_of, version_of


@pytest.mark.parametrize(
    ("answer", "version", "number"),
    [
        ("1.18.33", "1.18.33", 1),
        ("1.18.40-beta.1", "1.18.40-beta.1", 1),
        ("opencode v2.1.2", "2.1.2", 2),
        ("  opencode 2.1.9\n", "2.1.9", 2),
        ("OpenCode v2.1.0", "2.1.0", 2),
    ],
)
def test_the_version_and_generation_come_from_what_version_prints(answer: str, version: str, number: int) -> None:
    assert version_of(answer) == version
    generation = generation_of(version)
    assert generation is not None and generation.number == number


@pytest.mark.parametrize("answer", ["1.17.9", "1.19.0", "2.0.5", "3.1.0", "--version", "", "opencode", "v1.18.33x y"])
def test_no_generation_takes_another_version_or_another_program(answer: str) -> None:
    assert generation_of(version_of(answer)) is None


def test_each_generation_pins_a_version_it_covers_and_comes_from_its_own_package() -> None:
    assert [g.number for g in GENERATIONS] == [1, 2]
    assert all(g.covers(g.pinned) for g in GENERATIONS)
    assert [g.package for g in GENERATIONS] == ["opencode-ai", "@opencode/cli"]
    assert len({g.folder for g in GENERATIONS}) == 2
    assert [g.tool_hook for g in GENERATIONS] == [True, False]  # 2.x: approvals held at the endpoint
