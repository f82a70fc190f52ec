"""One rule for everything printed to a terminal (the answer on a tty, warnings, errors, the
summary, tables, the live view): control characters are shown, never interpreted.

What the model, the agent, a repository or a metadata value writes can reach a person's terminal,
where ESC starts a command (set the clipboard with OSC 52, retitle the window, draw a hyperlink
that lies about its target, clear the screen) and CR overwrites what was printed. Newline and tab
are kept: an answer has lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["cell", "quoted", "shown"]

# C0 but tab and newline, DEL, and C1 (U+0080-U+009F: CSI and OSC on terminals that take 8-bit codes)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def shown(text: str) -> str:
    """`text` with every control character but newline and tab written as `\\xNN`."""
    return _CONTROL.sub(_escaped, text)


def cell(text: str) -> str:
    """`text` for one cell of a table: every control character, newline and tab too, as `\\xNN`,
    so a value stays on its row and in its column."""
    return _ANY_CONTROL.sub(_escaped, text)


def quoted(path: str | Path) -> str:
    """A path the agent chose, in double quotes with every control character (newline too)
    escaped, so a warning that names it says where it begins and ends."""
    return cell(json.dumps(str(path), ensure_ascii=False))
