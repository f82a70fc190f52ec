"""A run's account: totals kept as records arrive (equal to summing the list), and admission that
counts the calls in flight."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opencode_gateway.accounting.budget import Budget, Spent
from opencode_gateway.accounting.pricing import Price, Pricer
from opencode_gateway.accounting.records import RequestRecord
from opencode_gateway.accounting.run import (
    DEFAULT_OUTPUT_RESERVE,
    RunAccount,
    reservation_usage,
)
from opencode_gateway.accounting.usage import Usage
from tests.support import builders


def record(
    request_id: str,
    tokens: tuple[int, int] = (100, 10),
    cost: float | None = 0.001,
    source: str = "litellm",
    missing: bool = False,
) -> RequestRecord:
    return builders.record(
        request_id, usage=None if missing else Usage(*tokens), cost=cost, source=source, usage_missing=missing
    )


def any_record(
    request_id: str, tokens: tuple[int, int], cost: float | None, source: str, missing: bool
) -> RequestRecord:
    """A record as the endpoint makes one: a refused call has no usage and costs nothing."""
    if source == "refused":
        return builders.record(request_id, usage=None, cost=0.0, source="refused")
    return record(request_id, tokens, cost, source, missing)


records = st.lists(
    st.builds(
        any_record,
        st.uuids().map(str),
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)),
        st.one_of(st.none(), st.floats(0, 10, allow_nan=False)),
        st.sampled_from(["litellm", "reported", "refused"]),
        st.booleans(),
    ),
    max_size=30,
)


@given(records)
def test_incremental_totals_equal_the_totals_of_the_list(made: list[RequestRecord]) -> None:
    account = RunAccount(keep_records=False)
    for each in made:
        account.add(each)
    assert account.records is None
    usage = account.totals.usage
    went_out = [r for r in made if r.cost.source != "refused"]
    assert (usage.input_tokens, usage.output_tokens, usage.requests, usage.refused) == (
        sum(r.usage.input_tokens for r in made if r.usage),
        sum(r.usage.output_tokens for r in made if r.usage),
        len(went_out),
        len(made) - len(went_out),
    )
    unpriced = any(r.cost.usd is None for r in made)
    assert (account.totals.cost is None) == unpriced
    if not unpriced:
        assert abs((account.totals.cost or 0.0) - sum(r.cost.usd or 0.0 for r in made)) < 1e-9


def test_a_reservation_is_the_prompt_at_4_characters_a_token_and_the_output_cap() -> None:
    body = {"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 256}
    assert reservation_usage(body).output_tokens == 256
    assert 100 <= reservation_usage(body).input_tokens <= 120
    assert reservation_usage({"messages": []}).output_tokens == DEFAULT_OUTPUT_RESERVE
    account = RunAccount(Budget(max_cost=1.0), pricer=Pricer({"m": Price(input=1e-6, output=2e-6)}))
    reserved = account.reserve({"messages": [], "max_tokens": 1000}, ["m"])
    assert reserved.requests == 1 and abs(reserved.cost - 0.002) < 1e-4


@pytest.mark.anyio
async def test_calls_in_flight_count_so_ten_parallel_calls_never_pass_a_limit_of_two() -> None:
    account = RunAccount(Budget(max_requests=2))
    decisions = [asyncio.ensure_future(account.admit(f"r{i}", Spent(1))) for i in range(10)]
    await asyncio.sleep(0.05)
    admitted = [i for i, d in enumerate(decisions) if d.done() and d.result() is None]
    assert admitted == [0, 1]  # the other eight wait for those two to end
    account.add(record("r0"))
    account.add(record("r1"))
    refusals = await asyncio.gather(*decisions[2:])
    assert all("max_requests is 2 and 2 requests were made" in str(r) for r in refusals)


@pytest.mark.anyio
async def test_a_call_waiting_on_reservations_is_decided_on_what_was_really_spent() -> None:
    account = RunAccount(Budget(max_cost=0.01))
    assert await account.admit("big", Spent(1, 0, 0.008)) is None  # reserved near the whole budget
    waiting = asyncio.ensure_future(account.admit("next", Spent(1, 0, 0.008)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    account.add(record("big", cost=0.001))  # it spent far less than reserved
    assert await waiting is None


@pytest.mark.anyio
async def test_a_call_that_never_reached_the_upstream_releases_its_reservation() -> None:
    account = RunAccount(Budget(max_requests=1))
    assert await account.admit("gone", Spent(1)) is None
    waiting = asyncio.ensure_future(account.admit("next", Spent(1)))
    await asyncio.sleep(0.05)
    account.release("gone")
    assert await waiting is None


def test_a_prompt_sent_in_any_field_of_the_body_is_reserved_for() -> None:
    """Providers bill every input token, tools' descriptions too: the whole body is counted."""
    small = {"messages": [{"role": "user", "content": "hi"}]}
    in_tools = {**small, "tools": [{"type": "function", "function": {"name": "f", "description": "x" * 40_000}}]}
    assert reservation_usage(in_tools).input_tokens >= 10_000 > reservation_usage(small).input_tokens


@pytest.mark.anyio
async def test_with_no_price_known_calls_wait_for_the_first_cost_then_reserve_the_costliest() -> None:
    """A gateway group's price is known only from what the gateway reports: until a call of the
    run has had a cost, one call at a time; then each is reserved at the highest cost seen, and a
    burst of twenty passes the limit by less than one call."""
    account = RunAccount(Budget(max_cost=0.01), pricer=Pricer({}))
    reservation = account.reserve({"messages": [{"role": "user", "content": "hi"}]}, ["team-coder"])
    decisions = [asyncio.ensure_future(account.admit(f"r{i}", reservation)) for i in range(20)]

    async def admitted() -> list[int]:
        await asyncio.sleep(0.05)
        return [i for i, d in enumerate(decisions) if d.done() and d.result() is None]

    assert await admitted() == [0]  # alone: what it costs is not known yet
    account.add(record("r0", cost=0.004))
    second = await admitted()
    assert len(second) == 2  # 0.004 spent, 0.004 held for the second: a third would pass $0.01
    account.add(record(f"r{second[1]}", cost=0.004))
    third = await admitted()
    assert len(third) == 3  # alone again: decided on what was spent, never on a reservation alone
    account.add(record(f"r{third[2]}", cost=0.004))
    refusals = await asyncio.gather(*(d for i, d in enumerate(decisions) if i not in third))
    assert all(r is not None and r.limit == "max_cost" for r in refusals)
    assert account.totals.spent.cost == pytest.approx(0.012)  # over by half a call: never by a burst
