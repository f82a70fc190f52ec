"""Where requests go: a LiteLLM gateway over HTTP, or any provider through litellm.acompletion.

Both answer in the same shape (`UpstreamReply`: a status and the body as a stream of bytes), so the
endpoint relays and accounts for them with one code path.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import httpx

from .. import _litellm
from ..errors import one_line
from ..litellm_gateway.protocol import gateway_base
from .caching import CacheStyle, cache_style, prepared
from .http import error_body
from .tagging import Tagging
from .transport import AiohttpTransport

__all__ = ["ProxyUpstream", "SdkUpstream", "StreamStalled", "Upstream", "UpstreamReply"]

SSE = "text/event-stream"
JSON = "application/json"
COST_HEADER = "x-litellm-response-cost"


class StreamStalled(Exception):
    """No chunk came for longer than the idle timeout."""


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


class UpstreamReply:
    """An upstream's answer: status, media type, the cost it reported in a header, and the body.

    `reports_cost` says whether a `usage.cost` in the body is the upstream's own figure. litellm's
    SDK writes its price-map estimate there, which is a LiteLLM price, not a report.
    """

    def __init__(
        self,
        status_code: int,
        media_type: str,
        chunks: AsyncIterator[bytes],
        *,
        header_cost: float | None = None,
        reports_cost: bool = True,
        retry_after: float | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        self.status_code = status_code
        self.media_type = media_type
        self.chunks = chunks
        self.header_cost = header_cost
        self.reports_cost = reports_cost
        self.retry_after = retry_after  # seconds the upstream asked us to wait before a retry
        self._response = response
        self._body: bytes | None = None

    @classmethod
    def error(cls, message: str, status_code: int) -> UpstreamReply:
        return cls(status_code, JSON, _one(error_body(message, status_code=status_code)))

    @property
    def is_stream(self) -> bool:
        return self.media_type.startswith(SSE)

    async def read(self) -> bytes:
        """The whole body (read once; later calls return the same bytes)."""
        if self._body is None:
            self._body = b"".join([chunk async for chunk in self.chunks])
        return self._body

    async def aclose(self) -> None:
        if self._response is not None:
            await self._response.aclose()


class Upstream(Protocol):
    model: str  # what the upstream is asked for (the group, for a gateway)
    # The litellm model strings behind `model` (a gateway group's deployments, once learned):
    # names whose price says what caching saved where the gateway reports only the cost.
    backends: tuple[str, ...]

    async def send(self, body: dict[str, Any], headers: Mapping[str, str], tagging: Tagging) -> UpstreamReply: ...

    async def aclose(self) -> None: ...


def _style(setting: str | None) -> CacheStyle | None:
    """The `prompt_caching` setting ("markers", "key" or "off") as a style."""
    return "markers" if setting == "markers" else "cache_key" if setting == "key" else None


def _float(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _retry_after(headers: httpx.Headers) -> float | None:
    milliseconds = _float(headers.get("retry-after-ms"))
    return milliseconds / 1000 if milliseconds is not None else _float(headers.get("retry-after"))


class ProxyUpstream:
    """A LiteLLM AI Gateway (proxy), called with a virtual key; `litellm_proxy/<group>` models."""

    def __init__(
        self,
        api_base: str,
        group: str,
        api_key: str | None,
        *,
        connect_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        client: httpx.AsyncClient | None = None,
        caching: str | None = None,
    ) -> None:
        self.url = gateway_base(api_base) + "/v1/chat/completions"
        self.model = group
        self.backends: tuple[str, ...] = ()
        self._auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # The group's deployments, learned from the gateway on the first request, and how they
        # cache prompts (the setting's way, if it names one).
        self._caching = _style(caching)
        self._setting = caching
        self._learn = True
        self._learning = asyncio.Lock()  # concurrent first requests wait for the one lookup
        self._idle = idle_timeout
        # httpx's read timeout bounds each wait for data: the idle gap of a stream, at no cost per
        # chunk. (The wait for the answer to start is the endpoint's first-byte timeout.)
        timeout = httpx.Timeout(connect=connect_timeout, read=idle_timeout, write=60.0, pool=30.0)
        self._client = client or httpx.AsyncClient(timeout=timeout, transport=AiohttpTransport(max_connections=256))

    async def send(self, body: dict[str, Any], headers: Mapping[str, str], tagging: Tagging) -> UpstreamReply:
        if self._learn:
            async with self._learning:
                if self._learn:
                    self.backends = await self._deployments()
                    styles = {cache_style(model) for model in self.backends}
                    if self._setting is None:
                        self._caching = styles.pop() if len(styles) == 1 else None
                    self._learn = False
        body = prepared(body, self._caching, tagging.session_id)
        request = self._client.build_request(
            "POST", self.url, json={**body, **tagging.proxy_body}, headers={**headers, **tagging.headers, **self._auth}
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            message = f"cannot reach the LiteLLM gateway at {self.url}: {type(exc).__name__}: {exc}"
            return UpstreamReply.error(message, 502)
        return UpstreamReply(
            response.status_code,
            response.headers.get("content-type", JSON),
            self._chunks(response),
            header_cost=_float(response.headers.get(COST_HEADER)),
            retry_after=_retry_after(response.headers),
            response=response,
        )

    async def _deployments(self) -> tuple[str, ...]:
        """The litellm model strings of the group's deployments, from the gateway's model info
        for the key; () when the gateway does not say."""
        try:
            response = await self._client.get(
                self.url.removesuffix("/v1/chat/completions") + "/v1/model/info", headers=self._auth
            )
            entries = response.json().get("data") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return ()
        return tuple(
            dict.fromkeys(
                str(entry["litellm_params"].get("model"))
                for entry in entries or ()
                if isinstance(entry, dict)
                and entry.get("model_name") == self.model
                and isinstance(entry.get("litellm_params"), dict)
            )
        )

    async def _chunks(self, response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():  # decoded by the transport: as they came
                yield chunk
        except httpx.ReadTimeout:
            raise StreamStalled(f"the upstream stream stalled for more than {self._idle:g} s") from None

    async def aclose(self) -> None:
        await self._client.aclose()


class SdkUpstream:
    """Any LiteLLM provider, called in-process through `litellm.acompletion`."""

    def __init__(
        self,
        model: str,
        api_base: str | None,
        api_key: str | None,
        *,
        idle_timeout: float = 300.0,
        caching: str | None = None,
    ) -> None:
        self.model = model
        self.backends: tuple[str, ...] = ()
        self._idle = idle_timeout
        self._caching = cache_style(model) if caching is None else _style(caching)
        self._credentials = {k: v for k, v in (("api_base", api_base), ("api_key", api_key)) if v}
        self._max_output: int | None | bool = False  # False: not looked up yet

    async def send(self, body: dict[str, Any], headers: Mapping[str, str], tagging: Tagging) -> UpstreamReply:
        litellm = _litellm.load()
        # max_retries=0: the endpoint's RetryPolicy is the one retry layer, and it is recorded.
        kwargs = {
            **prepared(body, self._caching, tagging.session_id),
            "model": self.model,
            "metadata": tagging.sdk_metadata(),
            "drop_params": True,
            "max_retries": 0,
        }
        kwargs.update(self._credentials)
        self._clamp_max_tokens(litellm, kwargs)
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # every provider failure must reach OpenCode as a well-formed error
            return UpstreamReply.error(*self._explained(litellm, exc))
        # A usage's `cost` is litellm's own estimate, but for OpenRouter: it reports what it charged
        # there, and litellm passes it on (its map prices no OpenRouter model).
        reports = self.model.startswith("openrouter/")
        if kwargs.get("stream"):
            return UpstreamReply(200, SSE, _sse(response, self._idle), reports_cost=reports)
        return UpstreamReply(200, JSON, _one(response.model_dump_json().encode()), reports_cost=reports)

    def _clamp_max_tokens(self, litellm: Any, kwargs: dict[str, Any]) -> None:
        """OpenCode asks for 32000 output tokens; models that allow fewer reject the request."""
        if self._max_output is False:
            try:
                self._max_output = litellm.get_model_info(self.model).get("max_output_tokens")
            except Exception:  # litellm raises a bare Exception for a model it does not know
                self._max_output = None
        limit = self._max_output
        if isinstance(limit, int) and isinstance(kwargs.get("max_tokens"), int) and kwargs["max_tokens"] > limit:
            kwargs["max_tokens"] = limit

    def _explained(self, litellm: Any, exc: Exception) -> tuple[str, int]:
        """The provider's failure, said so the user knows what to fix: an unreachable URL is
        named with the URL (502), a missing or rejected key with the variable litellm reads (401,
        which nobody retries)."""
        where = self._credentials.get("api_base") or f"{self.model}'s default API"
        unreachable = _unreachable(exc)
        if unreachable is not None:
            return f"cannot reach the provider at {where}: {unreachable}; check --api-base", 502
        message, status = _exception_text(exc), _status(exc)
        if status in (401, 403) or "missing credentials" in message.lower() or "api_key" in message.lower():
            try:
                variables = litellm.validate_environment(self.model).get("missing_keys") or []
                provider = litellm.get_llm_provider(self.model)[1]
            except Exception:  # an unknown model: no variable to name
                variables, provider = [], self.model.partition("/")[0]
            names = " or ".join(variables) or f"{provider.upper()}_API_KEY"
            if status in (401, 403) and "missing" not in message.lower():
                return f"the {provider} key was rejected ({one_line(message)}): check {names} or --api-key", 401
            return f"no {provider} key is set: litellm reads it from {names} (or pass --api-key)", 401
        return message, status

    async def aclose(self) -> None:
        return None


def _unreachable(exc: BaseException) -> str | None:
    """'connection refused' or 'name not resolved' when that is what a provider call failed on."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror) or "Name or service not known" in str(cause):
            return "the host name does not resolve"
        if isinstance(cause, ConnectionRefusedError) or any(
            sign in str(cause) for sign in ("Connection refused", "Connect call failed")
        ):
            return "connection refused"
        if isinstance(cause, httpx.ConnectError):
            return f"cannot connect ({one_line(str(cause)) or type(cause).__name__})"
        cause = cause.__cause__ or cause.__context__
    return None


def _status(exc: BaseException) -> int:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and 400 <= status <= 599 else 500


def _exception_text(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc) or type(exc).__name__


async def _sse(stream: Any, idle: float) -> AsyncIterator[bytes]:
    """litellm's stream of chunk objects, encoded as the Chat Completions SSE stream."""
    iterator = stream.__aiter__()
    try:
        while True:
            try:
                # One timeout per chunk costs ~15 µs; litellm's own work per chunk is far more.
                chunk = await asyncio.wait_for(iterator.__anext__(), idle)
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise StreamStalled(f"the upstream stream stalled for more than {idle:g} s") from None
            yield b"data: " + chunk.model_dump_json(exclude_none=True).encode() + b"\n\n"
    except StreamStalled:
        raise
    except Exception as exc:  # a provider failing mid-stream: end with an error event, not a cut
        status = _status(exc)
        yield b"data: " + error_body(_exception_text(exc), status_code=status) + b"\n\n"
        return
    yield b"data: [DONE]\n\n"
