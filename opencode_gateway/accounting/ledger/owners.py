"""Which process runs a run: `host:pid:start time` names one process even after its pid is reused,
and tells a run whose process is gone (killed, its machine rebooted) from one still going."""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["gone", "this_process"]


def this_process() -> str:
    """host:pid:start time, which names one process even after its pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # field 22, counted after the command name


def gone(owner: str) -> bool:
    """Whether the process `owner` names has ended (on this machine; another's never is)."""
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not started:
        return False  # another machine's run, or no way to tell: leave it as it is
    return _start_time(int(pid)) != started
