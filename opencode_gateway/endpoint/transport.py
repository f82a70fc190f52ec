"""The relay's HTTP transport: httpx's API over aiohttp's connection pool and C parser.

Measured in scripts/bench, httpx's own transport (httpcore + h11) was most of the relay's cost:
its pool polls every kept-alive connection's socket each time a request starts or ends, so the cost
of a request grows with the concurrency, and h11 parses each chunk of a stream in Python and hands
it on alone, so every SSE event became one write to OpenCode. aiohttp parses in C, keeps its idle
connections without polling them, and hands on whatever has arrived at once. The forwarding code
keeps httpx's requests, responses, timeouts and errors (and respx's mocks in the tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["AiohttpTransport"]

# Below the 5 s after which uvicorn (and so a LiteLLM proxy) closes an idle connection: a request
# never goes out on a connection the server is closing.
KEEPALIVE_S = 4.0
_DECODED = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: Any, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        import aiohttp

        try:
            async for data in self._response.content.iter_any():
                yield data
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout("no data within the read timeout", request=self._request) from None
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session, opened on the first request, in that request's event loop (a transport
    serves one loop, as httpx's does)."""

    def __init__(self, *, max_connections: int = 256) -> None:
        self._max_connections = max_connections
        self._session: Any = None

    def _open(self) -> Any:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=KEEPALIVE_S, use_dns_cache=True)
        # No cookies kept between requests of different callers; the body decoded like httpx's.
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent",),
            timeout=aiohttp.ClientTimeout(total=None),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import aiohttp

        if self._session is None:
            self._session = self._open()
        limits = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None, connect=limits.get("pool"), sock_connect=limits.get("connect"), sock_read=limits.get("read")
        )
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        try:
            response = await self._session.request(
                request.method,
                str(request.url),
                headers=headers,
                data=await request.aread(),
                timeout=timeout,
                allow_redirects=False,
            )
        except aiohttp.ConnectionTimeoutError:
            raise httpx.ConnectTimeout("no connection within the connect timeout", request=request) from None
        except asyncio.TimeoutError:  # aiohttp's read timeout is one too
            raise httpx.ReadTimeout("no answer within the read timeout", request=request) from None
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}", request=request) from exc
        return httpx.Response(
            response.status,
            headers=[(k, v) for k, v in response.raw_headers if k.lower() not in _DECODED],
            stream=_Body(response, request),
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
