"""The host's side: the plugin's hello gets the run's key once, every ask must carry it, and each
ask is answered by the mode, the policy, then the callback; whatever goes wrong is a deny."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from opencode_gateway.approvals.host import Approval, Approvals, Decided
from opencode_gateway.approvals.policy import ApprovalRequest, parse_policy

TOKEN = "run-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SEALED = {"sealed": True}  # the plugin made OpenCode non-dumpable before it said hello
POLICY = parse_policy({"rules": {"bash": {"git *": "allow", "rm *": "deny"}}, "default": "ask"})


def _approvals(approve: Any = None, denied: Callable[[str], str | None] = lambda tool: None, **extra: Any) -> Any:
    seen: list[Any] = []
    approvals = Approvals(
        POLICY,
        denied_by_mode=denied,
        workdir="/work",
        timeout=extra.pop("timeout", 5.0),
        approve=approve,
        on_asked=seen.append,
        on_answered=lambda request, decided: seen.append(decided),
        **extra,
    )
    return approvals, seen


async def _client(approvals: Approvals) -> httpx.AsyncClient:
    app = Starlette(routes=approvals.routes(lambda headers: headers.get("authorization") == f"Bearer {TOKEN}"))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://endpoint")


async def _asked(approvals: Approvals, *commands: str, key: str | None = None) -> list[httpx.Response]:
    """The plugin's way: hello once (unless given a key), then an ask per bash command."""
    async with await _client(approvals) as client:
        if key is None:
            key = (await client.post("/approvals/hello", headers=AUTH, json=SEALED)).json()["key"]
        answers = []
        for command in commands:
            body = {"tool": "bash", "sessionID": "ses_1", "callID": "call_1", "args": {"command": command}}
            answers.append(await client.post("/approvals/ask", headers={**AUTH, "x-approval-key": key}, json=body))
        return answers


@pytest.mark.anyio
async def test_the_key_is_given_once_and_an_ask_without_it_is_refused() -> None:
    approvals, seen = _approvals()
    async with await _client(approvals) as client:
        assert (await client.post("/approvals/hello", json=SEALED)).status_code == 401  # no token
        first = await client.post("/approvals/hello", headers=AUTH, json=SEALED)
        assert first.status_code == 200 and first.json()["key"]
        again = await client.post("/approvals/hello", headers=AUTH, json=SEALED)  # the agent, with the token
        assert again.status_code == 403 and "key" not in again.json()
    [refused] = await _asked(approvals, "git status", key="guessed")
    assert refused.status_code == 403 and refused.json()["decision"] == "deny"
    assert seen == []  # nothing was asked
    assert await approvals.loaded() is None


@pytest.mark.anyio
@pytest.mark.parametrize("hello", [{}, {"sealed": False}, {"sealed": "yes"}])
async def test_a_plugin_that_could_not_seal_opencode_gets_no_key_and_model_calls_are_refused(hello: Any) -> None:
    approvals, _ = _approvals()
    async with await _client(approvals) as client:
        refused = await client.post("/approvals/hello", headers=AUTH, json=hello)
        assert refused.status_code == 403 and "key" not in refused.json()
        again = await client.post("/approvals/hello", headers=AUTH, json=SEALED)  # no second chance
        assert again.status_code == 403 and "key" not in again.json()
    assert "non-dumpable" in (await approvals.loaded() or "")


@pytest.mark.anyio
async def test_model_calls_are_refused_when_the_plugin_never_said_hello() -> None:
    approvals, _ = _approvals(hello_wait=0.05)
    assert "did not load" in (await approvals.loaded() or "")


@pytest.mark.anyio
async def test_the_policy_answers_first_and_each_ask_and_answer_is_reported() -> None:
    approvals, seen = _approvals(approve=lambda request: pytest.fail("the callback was asked"))
    allowed, denied = await _asked(approvals, "git status", "rm -rf /")
    assert allowed.json() == {"decision": "allow", "reason": "the rule bash 'git *' says allow"}
    assert denied.json() == {"decision": "deny", "reason": "the rule bash 'rm *' says deny"}
    requests = [s for s in seen if isinstance(s, ApprovalRequest)]
    assert [(r.tool, r.subject, r.call_id) for r in requests] == [
        ("bash", "git status", "call_1"),
        ("bash", "rm -rf /", "call_1"),
    ]
    assert [(d.approval.decision, d.by) for d in seen if isinstance(d, Decided)] == [
        ("allow", "policy"),
        ("deny", "policy"),
    ]


@pytest.mark.anyio
async def test_what_the_mode_denies_is_denied_before_anyone_is_asked() -> None:
    approvals, seen = _approvals(approve=lambda request: "allow", denied=lambda tool: f"read-only denies {tool}")
    [answer] = await _asked(approvals, "make")
    assert answer.json() == {"decision": "deny", "reason": "read-only denies bash"}
    assert [d.by for d in seen if isinstance(d, Decided)] == ["mode"]


async def _slow(request: ApprovalRequest) -> str:
    await asyncio.sleep(30)
    return "allow"


def _raises(request: ApprovalRequest) -> str:
    raise RuntimeError(f"cannot decide on {TOKEN}")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("approve", "decision", "reason"),
    [
        (lambda request: "allow", "allow", ""),
        (lambda request: Approval("deny", "not on Fridays"), "deny", "not on Fridays"),
        (_raises, "deny", "the approval callback failed: RuntimeError: cannot decide on [REDACTED]"),
        (lambda request: "yes", "deny", "the approval callback answered 'yes', not 'allow', 'deny' or an Approval"),
        (_slow, "deny", "no answer within 0.2 s (approval_timeout)"),
    ],
)
async def test_the_callback_answers_what_the_policy_asks_about_and_any_failure_is_a_deny(
    approve: Any, decision: str, reason: str
) -> None:
    approvals, seen = _approvals(approve=approve, timeout=0.2, secrets=(TOKEN,))
    [answer] = await _asked(approvals, "make test")
    assert answer.json() == {"decision": decision, "reason": reason}
    assert [d.by for d in seen if isinstance(d, Decided)] == ["callback"]


@pytest.mark.anyio
async def test_without_a_callback_what_the_policy_asks_about_is_denied() -> None:
    approvals, _ = _approvals()
    [answer] = await _asked(approvals, "make test")
    assert answer.json()["decision"] == "deny" and "no one to ask" in answer.json()["reason"]


@pytest.mark.anyio
async def test_a_call_of_a_tool_opencode_does_not_offer_is_left_to_opencode_unasked() -> None:
    approvals, seen = _approvals(approve=lambda request: pytest.fail("asked"))
    async with await _client(approvals) as client:
        key = (await client.post("/approvals/hello", headers=AUTH, json=SEALED)).json()["key"]
        answer = await client.post(
            "/approvals/ask", headers={**AUTH, "x-approval-key": key}, json={"tool": "invalid", "args": {}}
        )
    assert answer.json()["decision"] == "allow" and seen == []
