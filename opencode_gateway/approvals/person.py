"""A person at the terminal answers what the policy asks about: the live view pauses, shows the
call, and reads a line from the terminal whose first key answers: allow once, always (for the
pattern shown, for the rest of the run), or deny. No answer within the timeout is a deny.

The agent wrote the call, so it is shown as data: on one line, every control character, newline
and tab as `\\xNN`, framed by its length and line count. A command cannot draw a fake ask of its
own, nor push the real one off the screen with lines of its own. Keys typed before the ask is
shown are discarded: they were not an answer to it."""

from __future__ import annotations

import contextlib
import json
import os
import select
import termios
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import PurePosixPath

from ..terminal import cell
from .host import Approval
from .policy import ApprovalRequest, Rule

__all__ = ["Person", "always_rule", "asked_lines", "terminal_reachable"]

Write = Callable[[str], None]
_TTY = "/dev/tty"


def terminal_reachable() -> bool:
    """Whether this process has a terminal to ask on (a CI job has none: its asks are denied)."""
    try:
        os.close(os.open(_TTY, os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


def always_rule(request: ApprovalRequest) -> Rule:
    """What "always" allows: a command's program with any arguments (`git *`), a file's folder
    (`src/**`), or, for a tool without a subject, the tool."""
    subject = request.subject
    if not subject:
        return Rule(request.tool, None, "allow")
    if request.tool in ("bash", "shell"):  # OpenCode 2 calls it shell
        return Rule("bash", f"{subject.split()[0]} *", "allow")
    if request.tool in ("read", "edit", "write", "patch", "multiedit", "list"):
        folder = PurePosixPath(subject).parent
        return Rule(request.tool, "**" if str(folder) == "." else f"{folder}/**", "allow")
    return Rule(request.tool, subject, "allow")


class Person:
    """The `approve` of a run in a terminal: `pause()` stops the live view while it asks."""

    by = "person"

    def __init__(self, pause: Callable[[], AbstractContextManager[Write]], timeout: float) -> None:
        self._pause = pause
        self._timeout = timeout
        self._always: list[Rule] = []
        self._one_at_a_time = threading.Lock()

    def __call__(self, request: ApprovalRequest) -> Approval:
        with self._one_at_a_time:
            remembered = next((rule for rule in self._always if rule.matches(request)), None)
            if remembered is not None:
                return Approval("allow", f"you allowed {remembered} for this run")
            always = always_rule(request)
            with self._pause() as write:
                for line in asked_lines(request, always, self._timeout):
                    write(line)
                key = _key(self._timeout)
                write(f"  → {'no answer: denied' if key is None else key}")
        if key == "y":
            return Approval("allow", "you allowed it once")
        if key == "a":
            self._always.append(always)
            return Approval("allow", f"you allowed {always} for this run")
        if key is None:
            return Approval("deny", f"no answer within {self._timeout:g} s (approval_timeout)")
        return Approval("deny", "the person at the terminal denied it")


def asked_lines(request: ApprovalRequest, always: Rule, timeout: float) -> list[str]:
    """The ask as the terminal shows it: a header with the call's size, the call on one escaped
    line, and the keys."""
    what = request.subject or json.dumps(dict(request.arguments), ensure_ascii=False)
    lines = what.count("\n") + 1
    return [
        f"? the agent asks to run {request.tool} ({len(what)} characters, {lines} line{'s' * (lines != 1)}):",
        f"  │ {cell(what)}",
        f"  [y] allow once  [a] always allow {cell(str(always))}  [n] deny  ({timeout:g} s): "
        "type y, a or n, then Enter ",
    ]


def _key(timeout: float) -> str | None:
    """The first key of a line typed at the terminal within `timeout` (what was typed before is
    discarded), lower-cased; None: none."""
    deadline = time.monotonic() + timeout
    with contextlib.ExitStack() as stack:
        fd = os.open(_TTY, os.O_RDONLY | os.O_NOCTTY)
        stack.callback(os.close, fd)
        with contextlib.suppress(termios.error):
            termios.tcflush(fd, termios.TCIFLUSH)
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                line = os.read(fd, 1024).decode(errors="replace").strip().lower()
                if line:
                    return line[0]
    return None
