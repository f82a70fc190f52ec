"""One run's account while it goes: its ledger row, its totals, kept as each request ends, and
budget admission that counts the calls still in flight.

Shared by a headless run and by each session of `serve`. The totals are incremental (a session
of ten thousand requests costs no more per request than its first), and the records themselves
are kept only when the caller wants them (a run returns them; a server does not). With a ledger,
the account opens the run's row, commits each request's row as it ends, and closes the row.

Admission: a call may start when the run's limits still hold counting every call already in
flight at its reservation (requests exactly; tokens and cost at a stated estimate, held until the
call's record arrives). When only the reservations stand in the way, the call waits for the calls
in flight to end and is decided on what they really spent, so a budget is never refused on an
estimate alone, and ten parallel calls can never all start under a limit of two. A refused call
is recorded (a row that says why) but spends nothing, and the account remembers the refusal: the
run ends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..domain import Purpose, RunOutcome
from .budget import WAIT, Budget, Claim, PeriodBudget, Refusal, Spent
from .ledger import RunLedger
from .pricing import Pricer, usd
from .records import ApprovalRecord, RequestRecord, RunRow, RunUsage
from .usage import Usage

__all__ = [
    "DEFAULT_OUTPUT_RESERVE",
    "LedgerRow",
    "RunAccount",
    "RunTotals",
    "Totals",
    "reservation_usage",
    "usage_warnings",
]

# The output a call is reserved at when its body sets no max_tokens: a long answer, not a cap.
DEFAULT_OUTPUT_RESERVE = 4096
_CHARS_PER_TOKEN = 4  # the usual estimate of the prompt's tokens from its JSON text
_MAX_WAIT_S = 900.0
_POLL_S = (0.05, 1.0)  # how often a call held back by other machines' calls asks again: first, at most


def reservation_usage(body: Mapping[str, Any]) -> Usage:
    """What a call may spend, estimated from its body: the whole body at 4 characters a token (a
    prompt sent in `tools` or any other field is billed as input too), and its max_tokens
    (max_completion_tokens) of output, else DEFAULT_OUTPUT_RESERVE."""
    prompt = len(json.dumps(body, ensure_ascii=False)) // _CHARS_PER_TOKEN
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    output = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else DEFAULT_OUTPUT_RESERVE
    return Usage(input_tokens=prompt, output_tokens=output)


@dataclass(frozen=True)
class RunTotals:
    """A run's totals, summed once, as its requests ended (Totals), and carried whole into its
    conclusion and result, its ledger row and its trace's root span: never summed again."""

    usage: RunUsage = RunUsage()
    cost: float | None = 0.0  # None when any request could not be priced: a partial sum would read as the whole
    unpriced: int = 0
    cache_saved: float | None = 0.0  # None when a request with cache tokens had no known price

    def summary(self) -> dict[str, Any]:
        """Flat, for serve's /status: the usage's counts, the cost, the share read from cache."""
        return {
            **self.usage.to_dict(),
            "cost": usd(self.cost),
            "cached_share": round(self.usage.cached_share, 6),
            "cache_saved": usd(self.cache_saved),
        }


@dataclass
class Totals:
    """Sums over records as they come (`add`); `taken()` is what they come to."""

    _usage: Usage = Usage()
    requests: int = 0  # calls made
    refused: int = 0  # calls refused before they went out: no request, no tokens, no cost
    usage_missing: int = 0
    unpriced: int = 0
    priced_cost: float = 0.0  # of the priced requests
    known_saved: float = 0.0  # what caching saved, over the requests where that is known
    saved_unknown: int = 0  # requests with cache tokens and no known price
    spent: Spent = Spent()  # what counts for a budget: calls made (refused ones are not)

    def add(self, record: RequestRecord) -> None:
        """Count `record`: a refused call (it never went out) only as refused, so a cap of three
        requests shows three made, and the refusals beside them."""
        if record.cost.source == "refused":
            self.refused += 1
            return
        self.requests += 1
        if record.usage:
            self._usage = self._usage + record.usage
        self.usage_missing += record.usage_missing
        if record.cost.usd is None:
            self.unpriced += 1
        else:
            self.priced_cost += record.cost.usd
        if record.cost.cache_saved is None:
            self.saved_unknown += 1
        else:
            self.known_saved += record.cost.cache_saved
        self.spent = self.spent + Spent.of(record)

    @property
    def usage(self) -> RunUsage:
        u = self._usage
        return RunUsage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
            reasoning_tokens=u.reasoning_tokens,
            requests=self.requests,
            usage_missing_requests=self.usage_missing,
            refused=self.refused,
        )

    @property
    def cost(self) -> float | None:
        """None when any request could not be priced: a partial sum would read as the whole cost."""
        return None if self.unpriced else self.priced_cost

    @property
    def cache_saved(self) -> float | None:
        return None if self.saved_unknown else self.known_saved

    def taken(self) -> RunTotals:
        """The totals so far, as one value."""
        return RunTotals(self.usage, self.cost, self.unpriced, self.cache_saved)


def usage_warnings(records: Iterable[RequestRecord]) -> tuple[str, ...]:
    """What a finished run's totals cannot say by themselves: requests that reported no usage, and
    models without a known price (each with its fix)."""
    records = tuple(records)
    warnings = []
    missing = [r for r in records if r.usage_missing]
    if missing:
        estimated = sum(r.estimated for r in missing)
        if estimated:
            warnings.append(
                f"{len(missing)} request(s) reported no usage; {estimated} of them estimated "
                "with litellm's token counter (flagged `estimated`)"
            )
        else:
            warnings.append(
                f"{len(missing)} request(s) reported no usage: their tokens are not counted "
                "(set estimate_usage: true to estimate them)"
            )
    for model in dict.fromkeys(r.model for r in records if r.cost.usd is None and r.usage):
        warnings.append(
            f"no price is known for model {model}: its cost is null. Set one under `pricing:` in the "
            f"settings (e.g. {model.split('/')[-1]}: {{input_cost_per_million: 0.5, output_cost_per_million: 1.5}})"
        )
    return tuple(warnings)


class LedgerRow:
    """A run's row in the ledger (nothing without a ledger), kept as one RunRow value: opened
    before anything is sent, written again with the run's totals as they grow, closed once."""

    def __init__(self, ledger: RunLedger | None, run_id: str, totals: Totals) -> None:
        self.ledger = ledger
        self.totals = totals
        self.value = RunRow(run_id, 0.0, "", "", "")
        self.finished = False

    def open(
        self,
        *,
        model: str,
        mode: str,
        workdir: str,
        metadata: Mapping[str, Any],
        tags: Sequence[str],
        session_id: str | None,
    ) -> None:
        """The run's ledger row (a bad ledger fails here, before anything is sent)."""
        self.value = dataclasses.replace(
            self.value,
            started_at=time.time(),
            model=model,
            mode=mode,
            workdir=workdir,
            metadata=metadata,
            tags=tuple(tags),
            session_id=session_id,
        )
        if self.ledger is not None:
            self.ledger.start_run(self.value)

    def update(
        self,
        *,
        ended_at: float | None = None,
        session_id: str | None = None,
        stop_reason: str | None = None,
        error: str | None = None,
    ) -> None:
        """The run's row with its totals so far (and, once it has ended, how)."""
        totals = self.totals.taken()
        self.value = dataclasses.replace(
            self.value,
            ended_at=ended_at,
            session_id=session_id or self.value.session_id,
            stop_reason=stop_reason,
            error=error,
            usage=totals.usage,
            cost=totals.cost,
            unpriced=totals.unpriced,
        )
        if self.ledger is not None:
            self.ledger.update_run(self.value)

    def finish(self, session_id: str | None, stop_reason: RunOutcome, error: str | None) -> None:
        """Close the run's row, once (a later call changes nothing), and wait until it is committed."""
        if self.finished:
            return
        self.finished = True
        self.update(ended_at=time.time(), session_id=session_id, stop_reason=stop_reason, error=error)
        if self.ledger is not None:
            self.ledger.flush()


class RunAccount:
    """Records go in through `add`; `admit` decides whether the next call may start. With a
    `ledger`, each record is its request's row, and `row` the run's."""

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        pricer: Pricer | None = None,
        keep_records: bool = True,
        on_record: Callable[[RequestRecord], None] | None = None,
        ledger: RunLedger | None = None,
        periods: Sequence[tuple[PeriodBudget, str]] = (),
        history: RunLedger | None = None,
        limits: RunAccount | None = None,
    ) -> None:
        # `limits`: the account whose budget admits this one's calls, counting them with others'
        # (a serve launch's, shared by all its sessions); this account then keeps only its row.
        self.limits = limits
        self.run_id = "run_" + uuid.uuid4().hex
        self.budget = budget or Budget()
        self.pricer = pricer or Pricer()
        self.records: list[RequestRecord] | None = [] if keep_records else None
        self.on_record = on_record
        self.ledger = ledger
        # Caps over many runs (PeriodBudget, this run's value of its key), read from `history`.
        self.periods = tuple(periods) if history is not None else ()
        self.history = history
        self.totals = Totals()
        self.row = LedgerRow(ledger, self.run_id, self.totals)  # the run's row in the ledger
        self.refusal: Refusal | None = None  # why the first refused call was refused
        self._in_flight: dict[str, Spent] = {}
        self._ended = asyncio.Event()  # set whenever a call in flight ends
        self._costliest: float | None = None  # the highest cost a call of this run has had

    @property
    def in_flight(self) -> int:
        """Calls admitted and not yet ended."""
        return len(self._in_flight)

    def add(self, record: RequestRecord) -> None:
        """A request ended (or was refused): count it, commit its row, and release what it had
        reserved."""
        self.totals.add(record)
        if record.cost.usd is not None and record.cost.source != "refused":
            self._costliest = max(self._costliest or 0.0, record.cost.usd)
        if self.ledger is not None:
            self.ledger.record_request(self.run_id, record)
        if self.records is not None:
            self.records.append(record)
        if self._in_flight.pop(record.request_id, None) is not None:
            self._ended.set()
        if self.limits is not None:
            self.limits.add(record)
        if self.on_record is not None:
            self.on_record(record)

    def approval(self, record: ApprovalRecord) -> None:
        """An ask and its answer: its row."""
        if self.ledger is not None:
            self.ledger.record_approval(self.run_id, record)

    def reserve(self, body: Mapping[str, Any], models: Sequence[str], purpose: Purpose = "main") -> Spent:
        """A call's reservation: one request, its estimated tokens, their price, and a turn when it
        is one of the agent's (`purpose` main). With a cost limit and no price known (a gateway
        group whose cost only the gateway reports), a call is reserved at the highest cost a call
        of the run has had, and before any had one, at no less than the whole limit: it then
        starts only once no other call is in flight, so a burst overshoots by one call at most."""
        if self.limits is not None:
            return self.limits.reserve(body, models, purpose)
        turn = int(purpose == "main")
        if not self.budget and not self.periods:
            return Spent(1, turns=turn)
        usage = reservation_usage(body)
        usd = 0.0
        costs = self.budget.max_cost is not None or any(cap.limits.max_cost is not None for cap, _ in self.periods)
        if costs:  # pricing may import litellm: only when a limit needs it
            priced = self.pricer.price(usage, models).usd
            usd = priced if priced is not None else self._costliest if self._costliest is not None else math.inf
        return Spent(1, usage.input_tokens + usage.output_tokens, usd, turn)

    async def admit(self, request_id: str, reservation: Spent) -> Refusal | None:
        """None, with the call's reservation held, when it may start; else why not. A call that
        waits for the calls in flight waits at most `_MAX_WAIT_S` (a call that ended without a
        word must not hold the run forever), then is decided on what was spent."""
        if self.limits is not None:
            refusal = await self.limits.admit(request_id, reservation)
            return None if refusal is None else self._refuse(refusal)
        deadline = asyncio.get_running_loop().time() + _MAX_WAIT_S
        while True:
            if math.isinf(reservation.cost) and self._costliest is not None:  # a cost was seen while it waited
                reservation = dataclasses.replace(reservation, cost=self._costliest)
            refusal = self.budget.refusal(
                self.totals.spent, turn=reservation.turns > 0
            )  # exact: what ended calls spent
            if refusal is not None:
                return self._refuse(refusal)
            held = sum(self._in_flight.values(), Spent())
            remaining = deadline - asyncio.get_running_loop().time()
            if not self._in_flight or remaining <= 0 or self.budget.allows(self.totals.spent + held + reservation):
                self._in_flight[request_id] = reservation
                break
            self._ended.clear()  # only the calls in flight stand in the way: wait for one to end
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ended.wait(), remaining)
        refusal = await self._hold_periods(request_id, reservation, deadline)
        if refusal is not None:
            self._in_flight.pop(request_id, None)
            self._ended.set()
            return self._refuse(refusal)
        return None

    def _refuse(self, refusal: Refusal) -> Refusal:
        self.refusal = self.refusal or refusal
        return refusal

    async def _hold_periods(self, request_id: str, reservation: Spent, deadline: float) -> Refusal | None:
        """The caps over many runs (on every machine that shares the ledger): the call is held in
        the ledger when they allow it, refused when what was spent passes one, and asks again
        while only calls held elsewhere stand in the way, until `deadline`."""
        if not self.periods or self.history is None:
            return None
        loop = asyncio.get_running_loop()
        pause = _POLL_S[0]
        while True:
            patient = loop.time() < deadline
            claim = Claim(request_id, self.periods, reservation, time.time(), patient)
            verdict = await asyncio.wrap_future(self.history.hold(claim))
            if verdict != WAIT:
                return verdict
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, _POLL_S[1])

    def release(self, request_id: str) -> None:
        """A call ended without a record (it never reached the upstream)."""
        if self.limits is not None:
            self.limits.release(request_id)
        if self._in_flight.pop(request_id, None) is not None:
            self._ended.set()
