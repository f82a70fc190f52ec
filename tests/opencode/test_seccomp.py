"""The seccomp filter, run for real: a child under it (loaded by bubblewrap, as a sandbox loads
it) makes each denied call and gets EPERM; other calls and other ioctls go through."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys

import pytest

from opencode_gateway.opencode.seccomp import DENIED, DENIED_IOCTLS, SYSCALL_NUMBERS, filter_fd, filter_program

CALLS = r"""
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
numbers = json.loads(sys.argv[1])
def call(number, *args):
    ctypes.set_errno(0)
    result = libc.syscall(number, *[ctypes.c_ulong(a) for a in args])
    return ctypes.get_errno() if result == -1 else 0
out = {name: call(number, 0, 0, 0) for name, number in numbers["calls"].items()}
out.update({hex(request): call(numbers["ioctl"], 0, request, 0) for request in numbers["ioctls"]})
out["high bits"] = call(numbers["ioctl"], 0, (1 << 32) | 0x5412, 0)
out["getpid"] = call(39 if numbers["ioctl"] == 16 else 172)
out["TCGETS"] = call(numbers["ioctl"], 0, 0x5401, 0)
print(json.dumps(out))
"""


def test_the_program_is_whole_instructions_for_each_architecture() -> None:
    for machine in ("x86_64", "aarch64"):
        assert len(filter_program(machine)) % 8 == 0
    with pytest.raises(OSError, match="no seccomp filter for sparc"):
        filter_program("sparc")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap loads the filter")
def test_every_denied_call_gets_eperm_and_the_rest_go_through() -> None:
    numbers = SYSCALL_NUMBERS[platform.machine()]
    spec = {"calls": {name: numbers[name] for name in DENIED}, "ioctl": numbers["ioctl"], "ioctls": list(DENIED_IOCTLS)}
    fd = filter_fd()
    try:
        result = subprocess.run(
            [
                "bwrap",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--seccomp",
                str(fd),
                "--",
                sys.executable,
                "-c",
                CALLS,
                json.dumps(spec),
            ],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.close(fd)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    eperm = 1
    assert all(seen[name] == eperm for name in DENIED), seen
    assert all(seen[hex(request)] == eperm for request in DENIED_IOCTLS) and seen["high bits"] == eperm
    assert seen["getpid"] == 0 and seen["TCGETS"] != eperm  # ENOTTY on a non-terminal, not refused
