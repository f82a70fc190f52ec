"""What cleans up after a run when the gateway process itself is killed (SIGKILL, OOM).

A run's own `finally` stops OpenCode and removes its private dir, but nothing of ours runs after
SIGKILL: OpenCode would be re-parented to init and keep its tools going, and the token would stay
in the temp dir. So each run starts a watchdog first: a small process in its own session that
holds the read end of a pipe whose write end only the gateway holds. The kernel closes that end
when the gateway dies, however it dies; the watchdog then kills every process carrying the run's
tag (OpenCode and all it started, detached or not) and removes the run's private dir. When the
run ends normally, the gateway says so and the watchdog exits doing nothing.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

__all__ = ["TAG_VARIABLE", "Watchdog"]

TAG_VARIABLE = "OPENCODE_GATEWAY_PROCESS_TAG"
_DONE = b"done"

# Runs with `python -I -S`: only the standard library, no site-packages, ~20 ms to start.
_WATCHDOG = r"""
import os, shutil, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
tag, paths = sys.argv[1].encode(), sys.argv[2:]
said = sys.stdin.buffer.read()  # returns when the gateway closes the pipe, or dies
if said != b"done":
    for _ in range(5):  # a process may fork while the others are killed: look again
        found = 0
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/environ", "rb") as environ:
                        tagged = tag in environ.read().split(b"\0")
                    if tagged:
                        os.kill(int(entry), signal.SIGKILL)
                        found += 1
                except OSError:
                    pass
        if not found:
            break
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
"""


class Watchdog:
    """`Watchdog(paths)` from the start of a run; `close()` at its end. `tag` is the environment
    entry (NAME=value) that every process of the run must carry."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.tag = f"{TAG_VARIABLE}={uuid.uuid4().hex}"
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG, self.tag, *map(str, paths)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal reaches the gateway, not the watchdog
            env={},
        )

    def close(self) -> None:
        """The run ended and cleaned up after itself: the watchdog exits without doing anything."""
        stdin = self._process.stdin
        assert stdin is not None
        with contextlib.suppress(BrokenPipeError):
            stdin.write(_DONE)
            stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
