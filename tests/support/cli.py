"""The command line called in this process, as `opencode-gateway ARGS` would run it: its exit
code, what it wrote to stdout and stderr. A subprocess per call cost a Python start and an import
each; what only a real process shows (bytes in argv, a closed pipe, signals) is tested with one."""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

from opencode_gateway.cli import program as cli_module

__all__ = ["Result", "cli"]


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, stdin: str | None = None, env: Mapping[str, str] | None = None) -> Result:
    """`main(args)` with stdin, stdout and stderr of its own, `env` added to the environment, and
    the process left as it was: its signal handlers, its environment, inspectable (main makes the
    process undumpable, which a test process must not become)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, env or {}),
        _signal_handlers(),
        mock.patch.object(cli_module, "refuse_inspection", lambda: None),
        mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO((stdin or "").encode()))),
        mock.patch.object(sys, "stdout", stdout),
        mock.patch.object(sys, "stderr", stderr),
    ):
        try:
            code = cli_module.main(list(args))
        except SystemExit as exc:  # argparse: --help, --version, a bad flag
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(code, stdout.getvalue(), stderr.getvalue())


@contextmanager
def _signal_handlers() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
