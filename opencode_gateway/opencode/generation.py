"""OpenCode's generations, as data: which versions make one, the npm package it comes from, its
pinned version, and whether this opencode-gateway runs it yet.

1.18 (npm `opencode-ai`) and 2.x (npm `@opencode/cli`, whose installer replaces 1.x) differ in how
OpenCode is started, configured, read and asked (../../docs/architecture.md). A binary's
generation is told from its `--version` alone (`1.18.33`, `opencode v2.1.2`), once, here: nothing
else in the package guesses it.

Runs on 2.x are not built yet: a 2.x binary is recognised, installable and named by `doctor`, and
a run refuses it with one line saying so and how to get 1.18, rather than starting an OpenCode
whose approvals, events and config this version would get wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GENERATIONS", "Generation", "generation_of", "version_of"]

_VERSION = re.compile(r"^(?:opencode\s+v?)?(\d+)\.(\d+)\.(\d+)(\S*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Generation:
    """One generation of OpenCode: `series` is the (major, minor) a supported version has."""

    number: int
    series: tuple[int, int]
    pinned: str  # the version the suite runs against, and install-opencode's default for it
    package: str  # npm's name for it
    folder: str  # where install-opencode puts it under the data dir
    runs: bool  # whether this opencode-gateway can run it
    why_not: str = ""  # when it cannot: what is missing, for the one line that refuses it

    @property
    def supported(self) -> str:
        return f"{self.series[0]}.{self.series[1]}.x"

    def covers(self, version: str) -> bool:
        match = _VERSION.match(version)
        return match is not None and (int(match[1]), int(match[2])) == self.series


GENERATIONS = (
    Generation(1, (1, 18), "1.18.33", "opencode-ai", "opencode", runs=True),
    Generation(
        2,
        (2, 1),
        "2.1.2",
        "@opencode/cli",
        "opencode2",
        runs=False,
        why_not="runs on OpenCode 2 (its server API, renamed tools, approvals and events) are not built yet",
    ),
)


def version_of(answer: str) -> str:
    """The version in what `opencode --version` printed (`1.18.33`, `opencode v2.1.2` -> `2.1.2`),
    or the answer as it is when it holds none."""
    match = _VERSION.match(answer.strip())
    return f"{match[1]}.{match[2]}.{match[3]}{match[4]}" if match else answer.strip()


def generation_of(version: str) -> Generation | None:
    """The generation a version belongs to, None for one no generation supports."""
    return next((generation for generation in GENERATIONS if generation.covers(version)), None)
