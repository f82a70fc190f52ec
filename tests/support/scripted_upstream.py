"""A scripted OpenAI-compatible model server: the stand-in for the model, and nothing else.

It streams like a real Chat Completions server (SSE chunks, tool-call deltas split over several
chunks, a usage chunk only when `stream_options.include_usage` is asked for) and logs every request
it receives, so tests can assert what reached "the model". The demo and the benchmarks use it too.

Replies are queued with `script()`; each request takes the next one. A reply may be a callable that
builds the reply from the request body (the demo echoes tool output back this way). When the queue
is empty the server answers with a short text, so a run never hangs waiting for a script.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["CachingClaude", "Reply", "ScriptedUpstream", "ToolCall", "anthropic_usage", "gemini_usage", "usage"]


def usage(
    prompt: int = 1000,
    completion: int = 50,
    *,
    cached: int = 0,
    reasoning: int = 0,
    cost: float | None = None,
) -> dict[str, Any]:
    """An OpenAI-shaped usage object."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        body["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning:
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    if cost is not None:
        body["cost"] = cost
    return body


def anthropic_usage(
    input_tokens: int, output_tokens: int, *, cache_read: int = 0, cache_write: int = 0
) -> dict[str, Any]:
    """An Anthropic Messages usage object (input_tokens excludes cache reads and writes)."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }


def gemini_usage(prompt: int, candidates: int, *, cached: int = 0, thoughts: int = 0) -> dict[str, Any]:
    """Gemini's usageMetadata (promptTokenCount includes the cached tokens; candidatesTokenCount
    excludes the thoughts)."""
    body = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
    }
    if cached:
        body["cachedContentTokenCount"] = cached
    if thoughts:
        body["thoughtsTokenCount"] = thoughts
    return body


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted model turn: text and/or tool calls, the usage it reports, or an HTTP error."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str = ""
    usage: Mapping[str, Any] = field(default_factory=usage)
    status: int = 200
    error: str = "scripted error"
    chunk_delay: float = 0.0
    omit_usage: bool = False  # like a self-hosted server that ignores include_usage
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. retry-after on an error
    cut_after: int | None = None  # drop the connection after this many chunks
    sse_error: str | None = None  # end the stream with an SSE error event instead of [DONE]
    hang: float = 0.0  # wait this long before answering at all
    until: Callable[[], bool] | None = None  # with hang: answer as soon as this holds (at most `hang` s)
    byte_delay: float = 0.0  # send the stream one byte at a time, this far apart
    echo_key: bool = False  # an error that repeats the request's key, as a careless server would


class CachingClaude:
    """A Claude that caches as Anthropic does, closely enough to price a session: a request's
    prefix up to its last `cache_control` marker (tools, then system, then messages) is written to
    the cache, and read from it by a later request that starts with the same prefix. Tokens are
    the JSON's characters over four. Nine turns call bash, the tenth answers. `usages`: what each
    turn reported (Anthropic's spelling)."""

    def __init__(self, turns: int = 10) -> None:
        self.cached: list[str] = []  # the blocks of the longest prefix written so far
        self.turns = 0
        self.last_turn = turns
        self.usages: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        blocks = [json.dumps(tool, sort_keys=True) for tool in body.get("tools") or ()]
        system = body.get("system") or []
        for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
            blocks.append(json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True))
        marks = [len(blocks) - 1] if isinstance(system, list) and any("cache_control" in b for b in system) else []
        for message in body["messages"]:
            content = message["content"]
            for part in [{"type": "text", "text": content}] if isinstance(content, str) else content:
                blocks.append(
                    json.dumps(
                        {"role": message["role"], **{k: v for k, v in part.items() if k != "cache_control"}},
                        sort_keys=True,
                    )
                )
                if "cache_control" in part:
                    marks.append(len(blocks) - 1)
        total = sum(map(len, blocks)) // 4
        shared = 0
        while shared < min(len(blocks), len(self.cached)) and blocks[shared] == self.cached[shared]:
            shared += 1
        read = sum(map(len, blocks[:shared])) // 4 if marks and shared else 0
        written = 0
        if marks:
            prefix = blocks[: max(marks) + 1]
            written = max(sum(map(len, prefix)) // 4 - read, 0)
            self.cached = prefix
        self.turns += 1
        usage = anthropic_usage(total - read - written, 30, cache_read=read, cache_write=written)
        self.usages.append(usage)
        if self.turns < self.last_turn:
            return Reply(
                tool_calls=[
                    ToolCall("bash", {"command": f"echo step {self.turns}", "description": f"step {self.turns}"})
                ],
                usage=usage,
            )
        return Reply(text="All ten steps done.", usage=usage)


# The same tool as each OpenCode generation offers it (1.18 -> 2.x), and its arguments' names.
_SPELLINGS = {"bash": "shell", "task": "subagent"}
_ARGUMENTS = {"filePath": "path", "subagent_type": "agent"}
_ARGUMENTS_OF = {"skill": {"name": "id"}}  # a tool's own renamed arguments
_DROPPED = {"shell": {"description"}}  # 1.18's bash takes a description; 2.x's shell does not


def _offered(body: Mapping[str, Any]) -> set[str]:
    """The names of the tools a request offers, in OpenAI's, Anthropic's or Gemini's shape."""
    names = set()
    for tool in body.get("tools") or ():
        if isinstance(tool, Mapping):
            names.add(tool.get("name") or (tool.get("function") or {}).get("name"))
            names.update(d.get("name") for d in tool.get("functionDeclarations") or () if isinstance(d, Mapping))
    return {name for name in names if isinstance(name, str)}


def spoken(reply: Reply, body: Mapping[str, Any]) -> Reply:
    """The reply's tool calls in the spelling of the tools the request offered, as a model calls
    what it is offered: a script written for one OpenCode generation runs on the other (1.18's
    `bash` with `filePath` arguments, 2.x's `shell` with `path`). A call of a tool offered in
    neither spelling is left as written."""
    offered = _offered(body)
    if not reply.tool_calls or not offered:
        return reply
    second = not offered & set(_SPELLINGS) and bool(offered & set(_SPELLINGS.values()))
    if not second:
        return reply
    calls = []
    for call in reply.tool_calls:
        name = _SPELLINGS.get(call.name, call.name)
        if name not in offered:
            calls.append(call)
            continue
        renamed = {**_ARGUMENTS, **_ARGUMENTS_OF.get(name, {})}
        arguments = {renamed.get(key, key): value for key, value in call.arguments.items()}
        calls.append(ToolCall(name, {k: v for k, v in arguments.items() if k not in _DROPPED.get(name, ())}))
    return dataclasses.replace(reply, tool_calls=calls)


ReplySource = Reply | Callable[[Mapping[str, Any]], Reply]
FALLBACK = Reply(text="(scripted upstream: no reply was scripted for this request)")


class ScriptedUpstream:
    """The server and its script. `start()` serves it on 127.0.0.1 in a background thread."""

    def __init__(self) -> None:
        self._replies: collections.deque[ReplySource] = collections.deque()
        self.requests: list[dict[str, Any]] = []
        self.abandoned = 0  # streams whose client went away before the end
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        routes = [
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1beta/models/{target:path}", self._gemini, methods=["POST"]),
            Route("/openai/deployments/{deployment}/chat/completions", self._azure, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes)

    @property
    def url(self) -> str:
        """The base URL clients use, ending in /v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: ReplySource) -> None:
        """Replace the queue of replies and forget earlier requests."""
        self._replies.clear()
        self._replies.extend(replies)
        self.requests.clear()
        self.abandoned = 0

    def wait_abandoned(self, count: int = 1, timeout: float = 5.0) -> int:
        """How many streams were abandoned, once `count` were or `timeout` passed (a client's
        going away is noticed on the server's next write)."""
        deadline = time.monotonic() + timeout
        while self.abandoned < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.abandoned

    def start(self) -> ScriptedUpstream:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[sock])),  # type: ignore[union-attr]
            name="scripted-upstream",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("scripted upstream did not start within 10 s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def _next_reply(self, body: Mapping[str, Any]) -> Reply:
        source = self._replies.popleft() if self._replies else self.fallback
        return source(body) if callable(source) else source

    fallback: ReplySource = FALLBACK

    async def _models(self, request: Request) -> Response:
        # It answers whatever model it is asked for, so it lists none (a gateway preflight then
        # has nothing to check against).
        return JSONResponse({"object": "list", "data": []})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        reply = spoken(self._next_reply(body), body)
        if reply.hang:
            deadline = asyncio.get_running_loop().time() + reply.hang
            while asyncio.get_running_loop().time() < deadline and not (reply.until and reply.until()):
                await asyncio.sleep(0.05 if reply.until else reply.hang)
        if reply.status >= 400:
            message = reply.error
            if reply.echo_key:
                message += f" (key: {request.headers.get('authorization', '').removeprefix('Bearer ')})"
            error = {"error": {"message": message, "type": "scripted_error", "code": str(reply.status)}}
            return JSONResponse(error, status_code=reply.status, headers=dict(reply.headers))
        model = str(body.get("model", "scripted"))
        if not body.get("stream"):
            return JSONResponse(_completion(model, reply))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and not reply.omit_usage
        return StreamingResponse(
            self._watched(_misbehave(_stream(model, reply, include_usage), reply)), media_type="text/event-stream"
        )

    async def _watched(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        finished = False
        try:
            async for chunk in chunks:
                yield chunk
            finished = True
        finally:
            if not finished:
                self.abandoned += 1

    async def _azure(self, request: Request) -> Response:
        """Azure OpenAI's chat completions: the body names no model (the deployment is in the
        path), and a stream starts with the prompt filter's results, in a chunk that names none."""
        body = await request.json()
        self.requests.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        reply = spoken(self._next_reply(body), body)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        filters = {
            "id": "",
            "object": "",
            "created": 0,
            "model": "",
            "choices": [],
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
        }

        async def chunks() -> AsyncIterator[bytes]:
            yield b"data: " + json.dumps(filters).encode() + b"\n\n"
            async for chunk in _stream(AZURE_MODEL, reply, include_usage):
                yield chunk

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def _messages(self, request: Request) -> Response:
        """Anthropic's Messages API, streamed as Anthropic streams it (reply.usage in its spelling)."""
        body = await request.json()
        self.requests.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        reply = spoken(self._next_reply(body), body)
        if reply.status >= 400:
            error = {"type": "error", "error": {"type": "api_error", "message": reply.error}}
            return JSONResponse(error, status_code=reply.status)
        return StreamingResponse(
            _anthropic_stream(str(body.get("model", "claude")), reply), media_type="text/event-stream"
        )

    async def _gemini(self, request: Request) -> Response:
        """Gemini's streamGenerateContent (`models/<model>:streamGenerateContent?alt=sse`), streamed
        as Gemini streams it: whole parts per chunk, usageMetadata on the last (reply.usage in its
        spelling: gemini_usage)."""
        model, _, method = request.path_params["target"].partition(":")
        body = await request.json()
        self.requests.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        reply = spoken(self._next_reply(body), body)
        if method != "streamGenerateContent" or reply.status >= 400:
            error = {"error": {"code": reply.status, "message": reply.error, "status": "INTERNAL"}}
            return JSONResponse(error, status_code=reply.status if reply.status >= 400 else 404)
        return StreamingResponse(_gemini_stream(model, reply), media_type="text/event-stream")


AZURE_MODEL = "gpt-4o-2024-11-20"  # the model an Azure deployment answers as


def _completion(model: str, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(reply.tool_calls)
        ]
    finish = "tool_calls" if reply.tool_calls else "stop"
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": dict(reply.usage),
    }


def _pieces(text: str, n: int) -> list[str]:
    """Split text into n roughly equal pieces (some may be empty for short text)."""
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


async def _stream(model: str, reply: Reply, include_usage: bool) -> AsyncIterator[bytes]:
    base = {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        event = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    async def pause() -> None:
        if reply.chunk_delay:
            await asyncio.sleep(reply.chunk_delay)

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.reasoning, 3) if reply.reasoning else []:
        await pause()
        yield chunk({"reasoning_content": piece})
    words = reply.text.split(" ") if reply.text else []
    for i, word in enumerate(words):
        await pause()
        yield chunk({"content": word if i == len(words) - 1 else word + " "})
    for index, call in enumerate(reply.tool_calls):
        await pause()
        call_id = f"call_{uuid.uuid4().hex[:8]}"
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(json.dumps(call.arguments), 3):
            await pause()
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
    if include_usage:
        yield b"data: " + json.dumps({**base, "choices": [], "usage": dict(reply.usage)}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


class _Cut(Exception):
    """Raised inside a response stream: uvicorn then drops the connection mid-body."""


async def _misbehave(chunks: AsyncIterator[bytes], reply: Reply) -> AsyncIterator[bytes]:
    count = 0
    async for chunk in chunks:
        if reply.cut_after is not None and count >= reply.cut_after:
            raise _Cut("scripted cut")
        if reply.sse_error is not None and (chunk.startswith(b"data: [DONE]") or b'"usage"' in chunk):
            error = {"error": {"message": reply.sse_error, "type": "server_error", "code": "overloaded"}}
            yield b"data: " + json.dumps(error).encode() + b"\n\n"
            return
        if reply.byte_delay:
            for i in range(len(chunk)):
                await asyncio.sleep(reply.byte_delay)
                yield chunk[i : i + 1]
        else:
            yield chunk
        count += 1


async def _anthropic_stream(model: str, reply: Reply) -> AsyncIterator[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    usage = dict(reply.usage)
    start_usage = {**usage, "output_tokens": 1}
    yield event(
        "message_start",
        {
            "message": {
                "id": "msg_" + uuid.uuid4().hex[:12],
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "usage": start_usage,
            }
        },
    )
    index = 0
    if reply.text:
        yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
        for piece in _pieces(reply.text, 3):
            yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
        yield event("content_block_stop", {"index": index})
        index += 1
    for call in reply.tool_calls:
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:12], "name": call.name, "input": {}}
        yield event("content_block_start", {"index": index, "content_block": block})
        for piece in _pieces(json.dumps(call.arguments), 3):
            yield event(
                "content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}
            )
        yield event("content_block_stop", {"index": index})
        index += 1
    stop = "tool_use" if reply.tool_calls else "end_turn"
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        },
    )
    yield event("message_stop", {})


async def _gemini_stream(model: str, reply: Reply) -> AsyncIterator[bytes]:
    response_id = uuid.uuid4().hex[:16]

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        data: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
        if finish:
            candidate["finishReason"] = finish
            data["usageMetadata"] = dict(reply.usage)
        return b"data: " + json.dumps(data).encode() + b"\r\n\r\n"

    if reply.reasoning:
        yield chunk([{"text": reply.reasoning, "thought": True}])
    pieces = _pieces(reply.text, 3) if reply.text else []
    for piece in pieces[:-1]:
        yield chunk([{"text": piece}])
    last = [{"text": pieces[-1]}] if pieces else []
    last += [{"functionCall": {"name": call.name, "args": dict(call.arguments)}} for call in reply.tool_calls]
    yield chunk(last, "STOP")


def bench_reply(body: Mapping[str, Any]) -> Reply:
    """For benchmarks: a user message `chunks=N` asks for an answer of N content chunks;
    `cost=reported` adds the usage.cost a LiteLLM proxy puts in the last chunk; `tools=N` makes
    the first turn ask for N bash calls (`echo N`), answered by the next one."""
    messages = body.get("messages") or [{}]
    content = json.dumps(messages[-1].get("content", ""))
    tools = re.search(r"tools=(\d+)", content)
    if tools and messages[-1].get("role") == "user":
        calls = [ToolCall("bash", {"command": f"echo {n}", "description": "echo"}) for n in range(int(tools.group(1)))]
        return Reply(tool_calls=calls, usage=usage(100, 10))
    asked = re.search(r"chunks=(\d+)", content)
    chunks = int(asked.group(1)) if asked else 10
    cost = 1e-07 * (100 + chunks) if "cost=reported" in content else None
    return Reply(text=" ".join(["x"] * chunks), usage=usage(100, chunks, cost=cost))


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the scripted stand-in model until interrupted.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bench", action="store_true", help="answer every request with bench_reply")
    args = parser.parse_args()
    server = ScriptedUpstream()
    if args.bench:
        server.fallback = bench_reply
    if args.port:
        uvicorn.run(server.app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    else:
        server.start()
        print(server.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
