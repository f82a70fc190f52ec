"""uvicorn, in-process, on a loopback port chosen by the OS, leaving signal handling to the host.

The host (the CLI, or a program embedding the Python API) owns Ctrl-C, so uvicorn's `serve()`
(which captures SIGINT/SIGTERM) is not used: the server is started and shut down directly. That
also skips uvicorn's 0.1 s main-loop tick and shutdown pause, which would delay the end of every run.

The port is bound and listening from the constructor on, before uvicorn is even imported: a run
starts OpenCode first and builds its server while OpenCode starts (~2 s), and a connection that
comes early waits in the socket's backlog.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import SettingsError

__all__ = ["EndpointServer"]

_GRACE_S = 5  # for requests still open when the server stops
# How long an idle connection is kept open. uvicorn's 5 s is shorter than many a tool call between
# two model requests, and a client that reuses a connection just as the server closes it sees it
# reset; OpenCode's client reconnects after longer gaps on its own.
_KEEP_ALIVE_S = 75
_BACKLOG = 2048  # uvicorn's


class _NotCancellations(logging.Filter):
    """A request cancelled because its run is being stopped (Ctrl-C, a caller leaving its loop) is
    no error of the app's; uvicorn logged each as "Exception in ASGI application" with a traceback
    (a batch interrupted with two runs going printed ~250 lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, (asyncio.CancelledError, KeyboardInterrupt))


logging.getLogger("uvicorn.error").addFilter(_NotCancellations())


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class EndpointServer:
    """`async with EndpointServer(app) as server:` serves `app` at `server.url` until the block ends.
    The app may be set later, until the block starts (`server.app = ...`)."""

    def __init__(
        self,
        app: Any = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        allow_remote: bool = False,
        unix_socket: Path | None = None,
    ) -> None:
        """`unix_socket`: also serve there (a sandboxed run reaches the endpoint only through it)."""
        if not allow_remote and not _is_loopback(host):
            raise SettingsError(
                f"the endpoint binds only to loopback, not {host}: asking for another address "
                "needs an explicit choice (serve --host)"
            )
        self.app = app  # an ASGI app (starlette's types are not imported here either)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sockets = [self._socket]
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
            if unix_socket is not None:
                local = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sockets.append(local)
                local.bind(str(unix_socket))
            for listening in self._sockets:
                listening.listen(_BACKLOG)
        except BaseException:
            self.close()
            raise
        self.host, self.port = self._socket.getsockname()[:2]
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        """Stop listening (the block's end does it; for a server whose block never started)."""
        for listening in self._sockets:
            listening.close()

    async def __aenter__(self) -> EndpointServer:
        import uvicorn

        config = uvicorn.Config(
            self.app,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=_GRACE_S,
            timeout_keep_alive=_KEEP_ALIVE_S,
        )
        config.load()
        self._server = uvicorn.Server(config)
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup(sockets=self._sockets)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        state = self._server.server_state
        if state.connections or state.tasks:  # someone is still connected: uvicorn's graceful shutdown
            requests = set(state.tasks)
            await self._server.shutdown(sockets=self._sockets)
            # uvicorn cancels what outlived the grace period without waiting for it; wait, so
            # that every request's record is made before the run's result is assembled.
            if requests:
                await asyncio.wait(requests, timeout=_GRACE_S)
        else:  # the usual end of a run: OpenCode has exited, nothing to wait for (uvicorn sleeps 0.1 s)
            for server in self._server.servers:
                server.close()
            for server in self._server.servers:
                await server.wait_closed()
        self.close()
        await asyncio.sleep(0)  # a stream's record is made just after its last byte (call_soon)
