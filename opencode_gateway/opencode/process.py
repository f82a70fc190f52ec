"""`opencode run` as a child process: started in its own process group, read line by line,
and killed whole (with everything it spawned) when the run must end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OpenCodeNotFound
from .binary import INSTALL_HINT, OpenCodeBinary
from .lines import Event, parse_line

__all__ = [
    "EVENT_LINE_MAX",
    "STDERR_LINE_MAX",
    "OpenCodeProcess",
    "ProcessExit",
    "opencode_retries",
    "run_argv",
    "tui_argv",
]

RUN_TITLE = "opencode-gateway run"  # a fixed title: OpenCode then makes no extra title request
_STDERR_TAIL_LINES = 40
# What is held of OpenCode's pipes is bounded whatever is written into them (a tool can open them
# through /proc): OpenCode truncates what a tool outputs (its `truncated` mark), so a line past
# 16 MiB is none of its events; stderr is kept for the error message only.
EVENT_LINE_MAX = 16 * 1024 * 1024
STDERR_LINE_MAX = 4096
_CHUNK = 64 * 1024
_KILL_GRACE_S = 3.0


def _tagged(tag: bytes) -> list[int]:
    """Processes whose environment carries `tag` (Linux /proc; none where there is no /proc)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    with open(f"/proc/{entry.name}/environ", "rb") as environ:
                        if tag in environ.read().split(b"\0"):
                            found.append(int(entry.name))
    return found


async def _lines(stream: asyncio.StreamReader, limit: int) -> AsyncIterator[tuple[bytes, bool]]:
    """The stream's lines, each cut to its first `limit` bytes (True: it was cut)."""
    line, cut = bytearray(), False

    def add(piece: bytes) -> None:
        nonlocal cut
        room = limit - len(line)
        line.extend(piece[:room])
        cut = cut or len(piece) > room

    while chunk := await stream.read(_CHUNK):
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            add(piece)
            yield bytes(line), cut
            line.clear()
            cut = False
        add(rest)
    if line or cut:
        yield bytes(line), cut


def run_argv(
    binary: OpenCodeBinary, model: str, agent: str, session_id: str | None = None, *, plugins: bool = False
) -> list[str]:
    """`opencode run` for one headless turn; the prompt goes on stdin, never in argv (OpenCode
    quotes argv words that contain spaces, and argv is visible to every local user). With
    `--thinking`, OpenCode prints the reasoning the model streams (without, it drops it).
    On 1.18, `--pure` keeps every plugin out, the config's too: `plugins` (the run's approval
    plugin, the only one its config names) drops it; the user's and the project's stay off (the
    private config dir, OPENCODE_DISABLE_PROJECT_CONFIG). On 2.x, `--standalone` runs OpenCode's
    server as a child that ends with the run: without it, `run` starts a service that outlives it
    (127.0.0.1:49374, ../../docs/architecture.md); 2.x has no `--pure` and loads only the config's
    plugins (ours) since the project's config is off."""
    if binary.generation.number == 1:
        own = [] if plugins else ["--pure"]
    else:
        own = ["--standalone"]
    argv = [
        binary.path,
        "run",
        "--format",
        "json",
        "-m",
        model,
        "--agent",
        agent,
        "--title",
        RUN_TITLE,
        *own,
        "--thinking",
    ]
    if session_id:
        argv += ["--session", session_id]
    return argv


def tui_argv(binary: OpenCodeBinary, arguments: Sequence[str]) -> list[str]:
    """OpenCode launched with the user's `arguments` (its TUI, or any command of its own): on 2.x
    with `--standalone` unless they choose a server, so no background service outlives it."""
    if binary.generation.number == 1 or {"--standalone", "--server"} & set(arguments):
        return [binary.path, *arguments]
    return [binary.path, *arguments, "--standalone"]


@dataclass(frozen=True)
class ProcessExit:
    exit_code: int | None  # None: killed before it exited by itself
    stderr_tail: str
    timed_out: bool
    overlong_lines: int = 0  # stdout lines past EVENT_LINE_MAX, skipped: not OpenCode's


def opencode_retries(status_code: int) -> bool:
    """Whether OpenCode retries this status by itself (6 attempts over ~70 s for a 500)."""
    return status_code in (408, 409, 429) or status_code >= 500


class OpenCodeProcess:
    """One `opencode run`. `await run(...)` returns when it exits, times out, or is stopped."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: Path,
        prompt: str,
        tag: str,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.argv = list(argv)
        self._pass_fds = tuple(pass_fds)  # inherited by the child (the sandbox's seccomp filter), closed here after
        # Every process OpenCode starts inherits this tag (NAME=value, the run's Watchdog's), even
        # one that leaves its process group and session (OpenCode's bash tool starts commands
        # detached): kill() finds them by it, and so does the watchdog if we are killed.
        self._tag = tag
        name, _, value = self._tag.partition("=")
        # OpenCode takes its project directory from $PWD when set, not from the real cwd.
        self.env = {**env, "PWD": str(cwd), name: value}
        self.cwd = cwd
        self.prompt = prompt
        self._process: asyncio.subprocess.Process | None = None
        self._stop = asyncio.Event()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        self._overlong = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def stop(self) -> None:
        """Ask the run to end now (idempotent); run() kills the process group and returns."""
        self._stop.set()

    async def start(self) -> None:
        """Start OpenCode (`run` does, unless this did): a run starts it as early as it can, and
        builds its endpoint while OpenCode starts."""
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=self._pass_fds,
            )
        except OSError as exc:
            raise OpenCodeNotFound(f"cannot start {self.argv[0]}: {exc.strerror}: {INSTALL_HINT}") from exc
        finally:
            for fd in self._pass_fds:
                os.close(fd)
            self._pass_fds = ()
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(self.prompt.encode())
            with contextlib.suppress(ConnectionError):
                await stdin.drain()
            stdin.close()  # OpenCode reads stdin to EOF before it starts
        except BaseException:  # Ctrl-C while the prompt is written: nothing left behind
            await self.kill()
            raise

    async def run(self, on_event: Callable[[Event], None], timeout: float) -> ProcessExit:
        if self._process is None:
            await self.start()
        process = self._process
        assert process is not None and process.stdout and process.stderr

        async def read_events() -> None:
            async for line, cut in _lines(process.stdout, EVENT_LINE_MAX):  # type: ignore[arg-type]
                if cut:
                    self._overlong += 1
                    continue
                for event in parse_line(line):
                    on_event(event)

        async def read_stderr() -> None:
            async for line, cut in _lines(process.stderr, STDERR_LINE_MAX):  # type: ignore[arg-type]
                self._stderr.append(line.decode(errors="replace").rstrip() + (" [cut]" if cut else ""))

        readers: asyncio.Future[Any] = asyncio.gather(read_events(), read_stderr())
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:  # from here on, whatever happens, the finally cleans up
            done, _ = await asyncio.wait({readers, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if readers in done:
                readers.result()
                return ProcessExit(await process.wait(), self.stderr_tail, False, self._overlong)
            await self.kill()
            return ProcessExit(None, self.stderr_tail, not done, self._overlong)
        finally:
            stop.cancel()
            await self.kill()  # also when cancelled (Ctrl-C): never leave anything behind
            readers.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await readers
            # The pipes' transport closes itself only after reading EOF on each pipe, which a
            # killed run may not have done yet: left open, it outlives the event loop and warns
            # ("Event loop is closed") when it is collected.
            process._transport.close()  # type: ignore[attr-defined]

    @property
    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    async def kill(self) -> None:
        """SIGTERM to the whole process group, SIGKILL after a grace period; then SIGKILL to what
        is left of the group (a tool's background job outlives OpenCode otherwise)."""
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), _KILL_GRACE_S)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in _tagged(self._tag.encode()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
