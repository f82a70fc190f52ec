"""The host's side of approvals: OpenCode asks before every tool call, the host answers.

OpenCode 1.18's headless `run` rejects every permission ask, so the ask goes elsewhere: a plugin of
ours (plugin.py, written by the run where the agent cannot change it, the only plugin that loads)
whose `tool.execute.before` hook POSTs each call to the run's endpoint and throws when the answer
is not "allow": OpenCode then ends that tool call with the thrown message, which the model gets as
the tool's result, and the run goes on. The hook runs before OpenCode's own permission check.

The agent holds the run's token (it can read OpenCode's config), so the token alone cannot tell
the plugin from the agent. The plugin says hello when OpenCode loads it, before any model call and
so before the agent exists, and gets a key of the run's, given once: every ask carries it, and the
endpoint refuses model calls until the hello came (a plugin that did not load would let every tool
run unasked). A hook that cannot reach the host denies.

OpenCode 2 has no such hook: its run's endpoint holds the model's tool calls until this host has
answered them (`held`, endpoint/held.py), outside the sandbox, with no channel the agent could
answer on. Its plugin only seals OpenCode's server (whose API password the agent could otherwise
read) and says hello, as 1.18's does.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import secrets as random_secrets
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..credentials import redact, redacted
from ..domain import WrittenCall
from .policy import ApprovalRequest, Policy

__all__ = ["Approval", "Approvals", "Approve", "Decided"]

Decision = Literal["allow", "deny"]


@dataclass(frozen=True)
class Approval:
    """An answer, with the reason the model is told when it is a deny."""

    decision: Decision
    reason: str = ""


Approve = Callable[[ApprovalRequest], Decision | Approval | Awaitable[Decision | Approval]]


By = Literal["mode", "policy", "callback", "person", "host"]


@dataclass(frozen=True)
class Decided:
    """How an ask was answered: by the permission mode, the policy, the callback, a person at the
    terminal or the host (no one to ask), after `waited_s`."""

    approval: Approval
    by: By
    waited_s: float


def _json(data: Mapping[str, Any], status: int = 200) -> Response:
    return JSONResponse(data, status_code=status)


class Approvals:
    """A run's approvals: the plugin's hello, and each ask answered by the permission mode (what it
    denies is denied, never asked), the policy, then the callback; with neither to ask, a deny."""

    def __init__(
        self,
        policy: Policy,
        *,
        denied_by_mode: Callable[[str], str | None],
        workdir: str,
        timeout: float,
        approve: Approve | None = None,
        on_asked: Callable[[ApprovalRequest], object] = lambda request: None,
        on_answered: Callable[[ApprovalRequest, Decided], None] = lambda request, decided: None,
        secrets: Sequence[str] = (),
        hello_wait: float = 10.0,
    ) -> None:
        self.policy = policy
        self._secrets = tuple(secrets)
        self.approve = approve
        self.timeout = timeout
        self._denied_by_mode = denied_by_mode
        self._workdir = workdir
        self._on_asked = on_asked
        self._on_answered = on_answered
        self._key = random_secrets.token_urlsafe(32)
        self._said_hello = asyncio.Event()
        self._unsealed = False  # the plugin said hello but could not seal OpenCode's memory
        self._hello_wait = hello_wait  # how long a model call waits for the plugin's hello (it comes first)

    async def loaded(self) -> str | None:
        """None once the plugin said hello; else why a model call is refused."""
        try:
            await asyncio.wait_for(self._said_hello.wait(), self._hello_wait)
        except asyncio.TimeoutError:
            return "the approval plugin did not load in OpenCode, so tool calls would not be asked about"
        if self._unsealed:
            return (
                "the approval plugin could not make OpenCode non-dumpable (prctl through bun:ffi and "
                "glibc's libc.so.6), so the agent could read its approval key"
            )
        return None

    def routes(self, authorized: Callable[[Mapping[str, str]], bool]) -> list[Route]:
        """The plugin's two routes on the run's endpoint, behind the run's token (`authorized`:
        the endpoint's own check of a request's headers)."""

        async def hello(request: Request) -> Response:
            if not authorized(request.headers):
                return _json({"error": "missing or wrong bearer token"}, 401)
            if self._said_hello.is_set():  # the plugin said it first: whoever asks again is not it
                return _json({"error": "this run's approval plugin has already said hello"}, 403)
            try:
                self._unsealed = json.loads(await request.body()).get("sealed") is not True
            except (ValueError, AttributeError):
                self._unsealed = True
            self._said_hello.set()  # once, sealed or not: no second hello is heard
            if self._unsealed:
                return _json({"error": "OpenCode's memory could not be sealed: its approvals cannot be trusted"}, 403)
            return _json({"key": self._key})

        async def ask(request: Request) -> Response:
            if not authorized(request.headers):
                return _json({"error": "missing or wrong bearer token"}, 401)
            if not hmac.compare_digest(request.headers.get("x-approval-key", ""), self._key):
                return _json({"decision": "deny", "reason": "only the run's approval plugin may ask"}, 403)
            try:
                body = json.loads(await request.body())
                tool, arguments = str(body["tool"]), body.get("args") or {}
            except (ValueError, KeyError, TypeError):
                return _json({"decision": "deny", "reason": "the ask was not understood"}, 400)
            if tool == "invalid":  # a tool OpenCode does not offer (the mode denies it): OpenCode says so
                return _json({"decision": "allow", "reason": ""})
            approval = await self.asked(tool, arguments, body.get("sessionID"), body.get("callID"))
            return _json({"decision": approval.decision, "reason": approval.reason})

        return [Route("/approvals/hello", hello, methods=["POST"]), Route("/approvals/ask", ask, methods=["POST"])]

    async def asked(self, tool: str, arguments: Any, session_id: Any, call_id: Any) -> Approval:
        """The answer to a call of `tool` with `arguments` (what the model wrote), the reason
        cleared of the run's secrets."""
        if not isinstance(arguments, dict):
            arguments = {"value": arguments}
        asked = ApprovalRequest.of(tool, arguments, self._workdir, session_id=session_id, call_id=call_id)
        decided = await self.decide(redacted(asked, self._secrets))
        return Approval(decided.approval.decision, redact(decided.approval.reason, self._secrets))

    async def held(
        self, session_id: str | None, calls: Sequence[WrittenCall], offered: Collection[str]
    ) -> list[str | None]:
        """A turn's tool calls held at the endpoint (OpenCode 2: endpoint/held.py), answered one
        after the other: None for an allowed call, else why it is not. A call of a tool the
        request did not offer, or whose arguments are no JSON object, is denied unasked: OpenCode
        would refuse the first (and may repair its name into an offered one), and could not run
        the second as it was asked about."""
        answers: list[str | None] = []
        for call in calls:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = None
            if call.name not in offered:
                answers.append(f"{call.name!r} is not a tool this run offers")
            elif not isinstance(arguments, dict):
                answers.append("its arguments are not a JSON object")
            else:
                approval = await self.asked(call.name, arguments, session_id, call.id)
                answers.append(None if approval.decision == "allow" else approval.reason or "denied")
        return answers

    async def decide(self, request: ApprovalRequest) -> Decided:
        started = time.monotonic()
        self._on_asked(request)
        approval, by = await self._answer(request)
        decided = Decided(approval, by, round(time.monotonic() - started, 3))
        self._on_answered(request, decided)
        return decided

    async def _answer(self, request: ApprovalRequest) -> tuple[Approval, By]:
        denied = self._denied_by_mode(request.tool)
        if denied is not None:
            return Approval("deny", denied), "mode"
        answer, rule = self.policy.answer(request)
        if answer != "ask":
            where = f"the rule {rule}" if rule else "the policy's default"
            return Approval(answer, f"{where} says {answer}"), "policy"
        if self.approve is None:
            return Approval("deny", "no one to ask: a headless run denies what its policy asks about"), "host"
        return await self._called(request), getattr(self.approve, "by", "callback")  # a Person: "person"

    async def _called(self, request: ApprovalRequest) -> Approval:
        """The callback's answer; one that raises, answers nonsense or takes too long is a deny."""
        assert self.approve is not None
        approve = self.approve
        try:
            if inspect.iscoroutinefunction(approve):
                answered = await asyncio.wait_for(approve(request), self.timeout)
            else:  # in a thread: the endpoint goes on serving while it decides
                answered = await asyncio.wait_for(asyncio.to_thread(approve, request), self.timeout)
                if inspect.isawaitable(answered):
                    answered = await asyncio.wait_for(answered, self.timeout)
        except asyncio.TimeoutError:
            return Approval("deny", f"no answer within {self.timeout:g} s (approval_timeout)")
        except Exception as exc:
            return Approval("deny", f"the approval callback failed: {type(exc).__name__}: {exc}")
        if isinstance(answered, Approval) and answered.decision in ("allow", "deny"):
            return answered
        if answered in ("allow", "deny"):
            return Approval(answered)
        return Approval("deny", f"the approval callback answered {answered!r}, not 'allow', 'deny' or an Approval")
