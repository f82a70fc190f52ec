"""A real terminal for the tests that type into one: tmux, a session of its own, at a real bash."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

__all__ = ["Terminal"]


class Terminal:
    """A tmux session of its own (its own server socket) running bash, as a user's terminal."""

    def __init__(self, name: str, environ: dict[str, str]) -> None:
        self.socket = name
        self.env = environ
        self.tmux("new-session", "-d", "-s", "main", "-x", "200", "-y", "50", "bash --norc --noprofile")

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True, timeout=30, check=True
        ).stdout

    def type(self, keys: str, enter: bool = True) -> None:
        self.tmux("send-keys", "-t", "main", "-l", keys)
        if enter:
            self.tmux("send-keys", "-t", "main", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "main")

    def wait_for(self, seen: Callable[[str], bool], what: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if seen(screen):
                return screen
            assert time.monotonic() < deadline, f"{what} not on screen within {timeout:g} s:\n{screen}\n{self.state()}"
            time.sleep(0.2)

    def state(self) -> str:
        """What a failure needs to tell a lost keystroke from a missed one: whether the pane is in
        one of tmux's own modes (keys then go to tmux, not the program) and its terminal's line
        discipline (echo, canonical input)."""
        pane = self.tmux("display-message", "-p", "-t", "main", "#{pane_tty} in_mode=#{pane_in_mode}").split()
        stty = subprocess.run(["stty", "-a", "-F", pane[0]], capture_output=True, text=True, timeout=30)
        flags = [flag for flag in stty.stdout.split() if flag.lstrip("-") in ("echo", "icanon", "isig")]
        return f"pane {' '.join(pane)}; {' '.join(flags) or stty.stderr.strip()}"

    def shell_idle(self) -> None:
        """Wait until the shell has read everything typed before now (input is read in order)."""
        self.type("echo SHELL-READ-$((40+2))")
        self.wait_for(lambda screen: "SHELL-READ-42" in screen, "the shell's echo")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)
