"""What ends the processes of an unsandboxed run that left its process group, its session and its
tag behind (`env -i setsid sleep 1000 &` from a tool).

Under bubblewrap the run has a pid namespace of its own, and everything in it dies with it. With
`--sandbox none` the gateway kills OpenCode's process group and every process carrying the run's
tag, but a process that drops both is re-parented to init and outlives the run. So OpenCode runs
under this small parent of its own: a child subreaper (prctl PR_SET_CHILD_SUBREAPER), to which the
kernel re-parents every orphan of OpenCode's tree instead of init. When OpenCode has ended (or the
gateway asks, or dies), it kills its children in rounds until none is left, and exits as OpenCode
did. The gateway itself cannot be the subreaper: `serve` and `batch` run many runs in one process,
whose orphans could not be told apart.

Run as a script, `python -I reaper.py <gateway pid> <argv...>`: the standard library only, ~20 ms.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from collections.abc import Sequence

__all__ = ["reaped_argv"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_GRACE_S = 1.0  # what OpenCode gets to end by itself once we are asked to stop (the gateway waits 3 s)
_SWEEP_S = 1.5  # the rounds of killing what is left end by then whatever happens
_ROUND_PAUSE_S = 0.01


def reaped_argv(argv: Sequence[str]) -> list[str]:
    """`argv` run under a reaper whose parent is this process."""
    return [sys.executable, "-I", __file__, str(os.getpid()), *argv]


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _children() -> list[int]:
    """Our children, from /proc/*/stat (the kernel here has no /proc/<pid>/task/<tid>/children)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()  # the name may hold ")" and spaces
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(int(entry))
    return found


def _reap() -> None:
    """Collect every child that has ended, without waiting for one that has not."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _sweep() -> None:
    """SIGKILL our children (orphans re-parented to us) until none is left or the time is up: a
    killed process's own children come to us in turn, and one may fork while we kill."""
    ends = time.monotonic() + _SWEEP_S
    while time.monotonic() < ends:
        _reap()
        children = _children()
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(_ROUND_PAUSE_S)


def _start(argv: list[str]) -> int:
    """Fork and exec OpenCode, with default signal dispositions (Python ignores SIGPIPE and
    SIGXFSZ, and exec keeps what is ignored). It dies with us, so killing us ends it too."""
    child = os.fork()
    if child == 0:
        try:
            for signum in (*_STOPPING, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            os.execv(argv[0], argv)
        except OSError as exc:
            os.write(2, f"cannot start {argv[0]}: {exc.strerror}\n".encode())
        finally:
            os._exit(127)
    return child


def _exit_as(status: int) -> None:
    """End as the child ended: its exit code, or killed by its signal (the gateway reads -N)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # OpenCode's crash is not ours to dump
        if signum != signal.SIGKILL:  # whose disposition cannot be set, and which nothing blocks
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def main(parent: int, argv: list[str]) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)  # until the handlers and the child are in place
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the gateway died before the line above
        os._exit(1)
    child = _start(argv)

    def stop(signum: int, frame: object) -> None:
        """Asked to stop (the gateway's SIGTERM, or it died): OpenCode gets a grace period."""
        for stopping in _STOPPING:
            signal.signal(stopping, signal.SIG_IGN)
        os.kill(child, signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, _GRACE_S)

    def overdue(signum: int, frame: object) -> None:
        os.kill(child, signal.SIGKILL)  # not yet reaped: the pid is still OpenCode's

    for signum in _STOPPING:
        signal.signal(signum, stop)
    signal.signal(signal.SIGALRM, overdue)
    # OpenCode has the pipes; holding them here would keep the gateway from reading their end.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)
    while True:
        pid, status = os.waitpid(-1, 0)  # orphans are reaped as they end
        if pid == child:
            break
    signal.pthread_sigmask(signal.SIG_BLOCK, {*_STOPPING, signal.SIGALRM})
    signal.setitimer(signal.ITIMER_REAL, 0)
    _sweep()
    _exit_as(status)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
