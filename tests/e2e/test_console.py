"""With the real CLI in a pseudo-terminal, a person sees the run as it goes (not only at its end);
with -q or a pipe, no live view."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
CLI = [sys.executable, "-m", "opencode_gateway"]


class Terminal:
    """The other end of a pseudo-terminal: everything written to it, read as it comes."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self.output = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # the last writer closed it
                return
            if not data:
                return
            self.output += data

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace")


def test_a_run_in_a_terminal_shows_its_tool_calls_and_totals_while_it_goes(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path
) -> None:
    terminal = Terminal()
    seen_before_answer: list[bool] = []

    def answer(body: dict) -> Reply:
        # Runs while the run waits for this answer: the finished tool call must be on the terminal.
        seen_before_answer.append("✓ bash echo hi" in terminal.text and "request" in terminal.text)
        return Reply(text="It printed hi.\nAll done.", usage=usage(1200, 30))

    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo hi", "description": "echo hi"})], usage=usage(1000, 20)),
        answer,
    )
    started = time.monotonic()
    with subprocess.Popen(
        [
            *CLI,
            "run",
            "-m",
            "openai/gpt-4o-mini",
            "--api-base",
            upstream.url,
            "--api-key",
            "sk-x",
            "--opencode-bin",
            opencode_bin,
            "--workdir",
            str(workdir),
            "say hi with bash",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal.slave,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"},
    ) as process:
        os.close(terminal.slave)
        stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 0, terminal.text
    assert seen_before_answer == [True], terminal.text
    assert stdout.decode() == "It printed hi.\nAll done.\n"  # the answer, whole, on stdout as before
    deadline = started + 130
    while "opencode-gateway: done" not in terminal.text and time.monotonic() < deadline:
        time.sleep(0.05)  # the reader thread drains what is left
    text = terminal.text
    assert "→ bash" in text and "It printed hi." in text and "All done." in text
    assert "openai/gpt-4o-mini · " in text  # the status line was drawn
    assert "opencode-gateway: done · 2 requests" in text


def test_quiet_and_a_pipe_show_no_live_view(upstream: ScriptedUpstream, opencode_bin: str, workdir: Path) -> None:
    terminal = Terminal()
    upstream.script(Reply(text="Quiet answer.", usage=usage(100, 5)))
    with subprocess.Popen(
        [
            *CLI,
            "run",
            "-q",
            "-m",
            "openai/gpt-4o-mini",
            "--api-base",
            upstream.url,
            "--api-key",
            "sk-x",
            "--opencode-bin",
            opencode_bin,
            "--workdir",
            str(workdir),
            "say it",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal.slave,
    ) as process:
        os.close(terminal.slave)
        stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and stdout.decode() == "Quiet answer.\n"
    deadline = time.monotonic() + 10
    while "opencode-gateway: done" not in terminal.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "opencode-gateway: done" in terminal.text and "openai/gpt-4o-mini · " not in terminal.text


ANSWER = "Done.\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b]8;;http://evil.example\x1b\\here\x1b]8;;\x1b\\\n"


def _answer_to(stdout: int, upstream: ScriptedUpstream, opencode_bin: str, workdir: Path) -> bytes:
    upstream.script(Reply(text=ANSWER, usage=usage(100, 5)))
    result = subprocess.run(
        [
            *CLI, "run", "-q", "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", "sk-x",
            "--opencode-bin", opencode_bin, "--workdir", str(workdir), "answer",
        ],
        stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout or b""


def test_an_answer_on_a_terminal_cannot_command_it_and_a_pipe_gets_it_whole(
    upstream: ScriptedUpstream, opencode_bin: str, workdir: Path
) -> None:
    """OSC 52 (the clipboard), a window title and an OSC 8 hyperlink in the answer: shown as text on
    a terminal's stdout; a pipe or a file (a program reading the answer) gets the bytes as written."""
    terminal = Terminal()
    _answer_to(terminal.slave, upstream, opencode_bin, workdir)
    os.close(terminal.slave)
    deadline = time.monotonic() + 10
    while "Done." not in terminal.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "Done.\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]0;pwned\\x07" in terminal.text
    assert b"\x1b" not in terminal.output and b"\x07" not in terminal.output
    piped = _answer_to(subprocess.PIPE, upstream, opencode_bin, workdir)
    assert piped.decode() == ANSWER + "\n"  # the text as the model wrote it, then print's newline
