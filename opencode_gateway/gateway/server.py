"""uvicorn, in-process, on a loopback port chosen by the OS, leaving signal handling to the host.

The host (the CLI, or a program embedding the Python API) owns Ctrl-C; uvicorn's default of
capturing SIGINT/SIGTERM would swallow it for the length of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from ..errors import SettingsError

__all__ = ["EndpointServer"]


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class EndpointServer:
    """`async with EndpointServer(app) as server:` serves `app` at `server.url` until the block ends."""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *, allow_remote: bool = False) -> None:
        if not allow_remote and not _is_loopback(host):
            raise SettingsError(f"the endpoint binds only to loopback, not {host}: asking for another address "
                                "needs an explicit choice (serve --host)")
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5)
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> EndpointServer:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the endpoint server stopped before it started")
            await asyncio.sleep(0.005)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._socket.close()
