"""What is held of OpenCode's pipes stays bounded, whatever is written into them: a tool can open
OpenCode's stdout and stderr through /proc and write without end. The process here is a real one
(a Python script standing in for OpenCode's output)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from opencode_gateway.opencode.lines import Event, Text
from opencode_gateway.opencode.process import EVENT_LINE_MAX, STDERR_LINE_MAX, OpenCodeProcess, ProcessExit

TEXT = json.dumps({"type": "text", "sessionID": "ses_1", "part": {"text": "still read"}})


def _run(tmp_path: Path, script: str) -> tuple[list[Event], ProcessExit]:
    events: list[Event] = []
    process = OpenCodeProcess(
        [sys.executable, "-c", script], env={}, cwd=tmp_path, prompt="", tag="OPENCODE_GATEWAY_PROCESS_TAG=test"
    )
    ended = asyncio.run(process.run(events.append, timeout=120))
    return events, ended


def test_a_line_longer_than_any_event_is_skipped_and_counted_and_the_next_is_read(tmp_path: Path) -> None:
    script = f"""
import sys
out = sys.stdout.buffer
for _ in range({EVENT_LINE_MAX // 2**20 + 4}):
    out.write(b"x" * 2**20)  # one line of 20 MiB, in pieces
out.write(b"\\n" + {TEXT!r}.encode() + b"\\n")
"""
    events, ended = _run(tmp_path, script)
    assert ended.exit_code == 0 and ended.overlong_lines == 1
    assert [e.text for e in events if isinstance(e, Text)] == ["still read"]


def test_only_the_tail_of_stderr_is_kept_each_line_cut_and_marked(tmp_path: Path) -> None:
    script = """
import sys
for n in range(100):
    sys.stderr.buffer.write(str(n).encode() + b"y" * 2**20 + b"\\n")  # 100 lines of 1 MiB
sys.stderr.buffer.write(b"the last words")
"""
    _, ended = _run(tmp_path, script)
    lines = ended.stderr_tail.split("\n")
    assert len(lines) == 40 and lines[-1] == "the last words"
    assert lines[0].startswith("61y") and lines[0].endswith(" [cut]")
    assert all(len(line) == STDERR_LINE_MAX + len(" [cut]") for line in lines[:-1])
