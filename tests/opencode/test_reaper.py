"""An unsandboxed run's processes end with it, even one that left OpenCode's process group, its
session and the run's tag (`env -i setsid`). A shell stands in for OpenCode here; the attack
through OpenCode's own bash tool is in tests/e2e/security/test_processes.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from opencode_gateway.opencode.reaper import reaped_argv

_BOUND_S = 30.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _detaching(tmp_path: Path, then: str) -> list[str]:
    """A shell that starts a job in a session of its own with an empty environment, writes the
    job's pid, and goes on with `then`."""
    pid_file = tmp_path / "job.pid"
    job = f"env -i setsid sh -c 'echo $$ > {pid_file}; exec sleep 1000' < /dev/null > /dev/null 2>&1 &"
    return reaped_argv(["/bin/sh", "-c", f"{job} while [ ! -s {pid_file} ]; do sleep 0.01; done; {then}"])


def _job(tmp_path: Path) -> int:
    return int((tmp_path / "job.pid").read_text())


def test_a_detached_job_ends_when_opencode_does_and_its_exit_code_is_kept(tmp_path: Path) -> None:
    ended = subprocess.run(_detaching(tmp_path, "exit 3"), start_new_session=True, timeout=_BOUND_S)
    assert ended.returncode == 3
    job = _job(tmp_path)
    assert not _alive(job), "the detached job outlived the run"


def test_asked_to_stop_it_ends_opencode_within_its_grace_and_the_job_too(tmp_path: Path) -> None:
    """OpenCode ignoring SIGTERM gets SIGKILL a second later; the gateway sees the signal."""
    ready = tmp_path / "ignoring"  # written once the shell ignores SIGTERM (and the job's pid is in)
    process = subprocess.Popen(_detaching(tmp_path, f"trap '' TERM; : > {ready}; sleep 1000"), start_new_session=True)
    deadline = time.monotonic() + _BOUND_S
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    job = _job(tmp_path)
    assert _alive(job)
    os.killpg(process.pid, signal.SIGTERM)  # what the gateway's kill() sends
    assert process.wait(timeout=_BOUND_S) == -signal.SIGKILL
    assert not _alive(job)


def test_opencode_killed_by_a_signal_is_reported_as_that_signal(tmp_path: Path) -> None:
    ended = subprocess.run(reaped_argv(["/bin/sh", "-c", "kill -SEGV $$"]), timeout=_BOUND_S)
    assert ended.returncode == -signal.SIGSEGV


def test_a_binary_that_cannot_start_is_exit_127_saying_why(tmp_path: Path) -> None:
    ended = subprocess.run(reaped_argv([str(tmp_path / "opencode")]), capture_output=True, timeout=_BOUND_S)
    assert ended.returncode == 127
    assert ended.stderr.decode() == f"cannot start {tmp_path / 'opencode'}: No such file or directory\n"
