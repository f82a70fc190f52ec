"""OpenCode's generations, as data: which versions make one, the npm package it comes from, its
pinned version.

1.18 (npm `opencode-ai`) and 2.x (npm `@opencode/cli`, whose installer replaces 1.x) differ in how
OpenCode is started, configured, read and asked (../../docs/architecture.md). A binary's
generation is told from its `--version` alone (`1.18.33`, `opencode v2.1.2`), once, here: nothing
else in the package guesses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT", "GENERATIONS", "Generation", "generation_of", "version_of"]

_VERSION = re.compile(r"^(?:opencode\s+v?)?(\d+)\.(\d+)\.(\d+)(\S*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Generation:
    """One generation of OpenCode: `series` is the (major, minor) a supported version has."""

    number: int
    series: tuple[int, int]
    pinned: str  # the version the suite runs against, and install-opencode's default for it
    package: str  # npm's name for it
    folder: str  # where install-opencode puts it under the data dir
    # Whether a plugin's hook runs before each tool call (1.18's tool.execute.before), where the
    # host answers it; without one (2.x), the run's endpoint holds the model's tool calls instead.
    tool_hook: bool

    @property
    def supported(self) -> str:
        return f"{self.series[0]}.{self.series[1]}.x"

    def covers(self, version: str) -> bool:
        match = _VERSION.match(version)
        return match is not None and (int(match[1]), int(match[2])) == self.series


GENERATIONS = (
    Generation(1, (1, 18), "1.18.33", "opencode-ai", "opencode", tool_hook=True),
    Generation(2, (2, 1), "2.1.2", "@opencode/cli", "opencode2", tool_hook=False),
)
DEFAULT = GENERATIONS[0]  # what install-opencode installs unasked (docs/architecture.md says why)


def version_of(answer: str) -> str:
    """The version in what `opencode --version` printed (`1.18.33`, `opencode v2.1.2` -> `2.1.2`),
    or the answer as it is when it holds none."""
    match = _VERSION.match(answer.strip())
    return f"{match[1]}.{match[2]}.{match[3]}{match[4]}" if match else answer.strip()


def generation_of(version: str) -> Generation | None:
    """The generation a version belongs to, None for one no generation supports."""
    return next((generation for generation in GENERATIONS if generation.covers(version)), None)
