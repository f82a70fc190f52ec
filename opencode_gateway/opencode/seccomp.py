"""The seccomp filter every sandboxed OpenCode runs under: a few system calls that no coding agent
needs and that each open a class of attack, denied.

Written as classic BPF here (a dozen instructions) rather than through libseccomp: bubblewrap
loads a compiled program from a file descriptor (`--seccomp FD`), and the program is small
enough to read whole. Each rule is data with its reason (`DENIED`); the filter is checked by
tests that make the calls inside a real sandbox.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from collections.abc import Mapping

__all__ = ["DENIED", "DENIED_IOCTLS", "SYSCALL_NUMBERS", "filter_fd", "filter_program"]

# System call -> why it is denied. The numbers are per architecture (x86_64, aarch64).
DENIED: Mapping[str, str] = {
    "ptrace": "attaching to another process of the sandbox reads its memory (OpenCode's, with the run's token)",
    "process_vm_readv": "reads another process's memory without ptrace",
    "process_vm_writev": "writes another process's memory without ptrace",
    "io_uring_setup": "io_uring's operations bypass seccomp's per-call checks (Codex and sandbox-runtime deny it)",
    "io_uring_enter": "io_uring's operations bypass seccomp's per-call checks",
    "io_uring_register": "io_uring's operations bypass seccomp's per-call checks",
}
# ioctl requests -> why. Only the low 32 bits of the request are compared: the kernel ignores
# the rest, so a request with high bits set is the same request.
DENIED_IOCTLS: Mapping[int, str] = {
    0x5412: "TIOCSTI types characters into the terminal's input: a command for the user's shell outside",
    0x541C: "TIOCLINUX can paste the console's selection as input, as TIOCSTI does",
}

SYSCALL_NUMBERS = {
    "x86_64": {
        "ioctl": 16,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
    },
    "aarch64": {
        "ioctl": 29,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
    },
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers

# Classic BPF (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG1_LOW = 0, 4, 24  # offsets in struct seccomp_data (little-endian: an arg's low word first)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes:
    """The compiled filter for `machine` (this one by default). Calls of another architecture (a
    32-bit call from a 64-bit process, x32) are denied whole: their numbers mean other calls."""
    machine = machine or platform.machine()
    if machine not in SYSCALL_NUMBERS:
        raise OSError(f"no seccomp filter for {machine}: only {', '.join(SYSCALL_NUMBERS)}")
    numbers = SYSCALL_NUMBERS[machine]
    denied = [numbers[name] for name in DENIED]
    eperm = _ERRNO | errno.EPERM
    ioctls = list(DENIED_IOCTLS)
    # Layout: arch check, x32 check, the denied calls, ioctl -> its check, allow; deny; ioctl check.
    program = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH[machine], 1, 0),
        _insn(_RET_K, eperm),
        _insn(_LD_W_ABS, _NR),
    ]
    if machine == "x86_64":
        program += [_insn(_JGE_K, _X32_BIT, 0, 1), _insn(_RET_K, eperm)]
    # After the jumps: [allow] [deny] [load arg1] [ioctl compares...] [allow] [deny]
    count = len(denied)
    for index, number in enumerate(denied):
        program.append(_insn(_JEQ_K, number, count - index + 1, 0))  # -> deny
    program.append(_insn(_JEQ_K, numbers["ioctl"], 2, 0))  # -> the ioctl check
    program += [_insn(_RET_K, _ALLOW), _insn(_RET_K, eperm)]
    program.append(_insn(_LD_W_ABS, _ARG1_LOW))
    for index, request in enumerate(ioctls):
        program.append(_insn(_JEQ_K, request, len(ioctls) - index, 0))  # -> deny
    program += [_insn(_RET_K, _ALLOW), _insn(_RET_K, eperm)]
    return b"".join(program)


def filter_fd() -> int:
    """A file descriptor holding the filter, positioned at its start and inheritable: bubblewrap
    reads it (`--seccomp FD`) in the child. The caller closes it once the child started."""
    fd = os.memfd_create("opencode-gateway-seccomp", 0)
    os.write(fd, filter_program())
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd
