"""Per-run limits, checked before each upstream call.

A call that would start over a limit is refused; a stream already running when a limit is crossed
is allowed to finish (no half answers), and the overshoot is reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from ..errors import SettingsError
from .records import RequestRecord

__all__ = [
    "HOLD_TTL_S",
    "PERIODS",
    "WAIT",
    "Budget",
    "Claim",
    "PeriodBudget",
    "Refusal",
    "Spent",
    "Verdict",
    "period_caps",
]

_LIMITS = {"max_cost": (int, float), "max_requests": (int,), "max_tokens": (int,), "max_turns": (int,)}


@dataclass(frozen=True)
class Refusal:
    """Why a call may not start: the limit it would pass, and a message that names it."""

    limit: str  # max_cost, max_requests, max_tokens, max_turns (or "budget": a gateway's, before the run)
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Budget:
    max_cost: float | None = None  # USD, of the requests that could be priced
    max_requests: int | None = None  # upstream calls
    max_tokens: int | None = None  # input + output tokens
    max_turns: int | None = None  # main-model requests: the agent's turns (background calls are not)

    @classmethod
    def from_setting(cls, where: str, setting: Any) -> Budget:
        if not isinstance(setting, Mapping):
            raise SettingsError(f"{where} must be a mapping of limits ({', '.join(_LIMITS)})")
        for key, value in setting.items():
            if key not in _LIMITS:
                raise SettingsError(f"{where}: unknown limit {key!r}; known limits: {', '.join(_LIMITS)}")
            if isinstance(value, bool) or not isinstance(value, _LIMITS[key]) or not 0 < value < math.inf:
                raise SettingsError(f"{where}.{key} must be a number above 0, not {value!r}")
        return cls(**setting)

    def check(self) -> None:
        """Raise SettingsError naming a limit that is no number above 0 (NaN is not: a limit never hit)."""
        for name in _LIMITS:
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                raise SettingsError(f"{name} {value} is invalid: give a number above 0")

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.max_cost, self.max_requests, self.max_tokens, self.max_turns))

    def or_else(self, fallback: Budget | None) -> Budget:
        """These limits, with the ones not set taken from `fallback`."""
        if fallback is None:
            return self
        return Budget(
            self.max_cost if self.max_cost is not None else fallback.max_cost,
            self.max_requests if self.max_requests is not None else fallback.max_requests,
            self.max_tokens if self.max_tokens is not None else fallback.max_tokens,
            self.max_turns if self.max_turns is not None else fallback.max_turns,
        )

    def refusal(self, spent: Spent, *, turn: bool = True) -> Refusal | None:
        """Why the next call (a turn of the agent's, or a background call) may not start after
        `spent`, or None."""
        if turn and self.max_turns is not None and spent.turns >= self.max_turns:
            return Refusal(
                "max_turns",
                f"turn limit reached: max_turns is {self.max_turns} and the run made {spent.turns} main-model requests",
            )
        if self.max_requests is not None and spent.requests >= self.max_requests:
            return Refusal(
                "max_requests",
                f"run budget exceeded: max_requests is {self.max_requests} and {spent.requests} requests were made",
            )
        if self.max_tokens is not None and spent.tokens >= self.max_tokens:
            return Refusal(
                "max_tokens",
                f"run budget exceeded: max_tokens is {self.max_tokens:,} and the run used {spent.tokens:,} tokens",
            )
        if self.max_cost is not None and spent.cost >= self.max_cost:
            return Refusal(
                "max_cost", f"run budget exceeded: max_cost is ${self.max_cost:g} and the run cost ${spent.cost:.6f}"
            )
        return None

    def allows(self, spent: Spent) -> bool:
        """Whether `spent` (what was spent, and reserved, with the next call) stays within every limit."""
        return (
            (self.max_turns is None or spent.turns <= self.max_turns)
            and (self.max_requests is None or spent.requests <= self.max_requests)
            and (self.max_tokens is None or spent.tokens <= self.max_tokens)
            and (self.max_cost is None or spent.cost <= self.max_cost)
        )

    def overshoot(self, spent: Spent) -> tuple[str, ...]:
        """What streams already running took the run past its limits."""
        notes = []
        if self.max_tokens is not None and spent.tokens > self.max_tokens:
            notes.append(
                f"the run used {spent.tokens - self.max_tokens:,} tokens over max_tokens "
                f"({self.max_tokens:,}) in requests that had already started"
            )
        if self.max_cost is not None and spent.cost > self.max_cost:
            notes.append(
                f"the run cost ${spent.cost - self.max_cost:.6f} over max_cost (${self.max_cost:g}) in "
                "requests that had already started"
            )
        return tuple(notes)


@dataclass(frozen=True)
class Spent:
    """What counts against a budget: calls, input + output tokens, USD of the priced calls, and
    the agent's turns (its main-model calls)."""

    requests: int = 0
    tokens: int = 0
    cost: float = 0.0
    turns: int = 0

    @classmethod
    def of(cls, record: RequestRecord) -> Spent:
        usage = record.usage
        return cls(
            1,
            usage.input_tokens + usage.output_tokens if usage else 0,
            record.cost.usd or 0.0,
            int(record.purpose == "main"),
        )

    def __add__(self, other: Spent) -> Spent:
        return Spent(
            self.requests + other.requests, self.tokens + other.tokens, self.cost + other.cost, self.turns + other.turns
        )


PERIODS = ("day", "week", "month")


@dataclass(frozen=True)
class PeriodBudget:
    """A cap on what all runs with one value of a metadata key spend in a period (UTC day, week
    from Monday, calendar month), e.g. `ticket: {per: day, max_cost: 5}`: ENG-412's runs of today
    together may spend $5. It is read from the ledger before each call."""

    key: str  # the metadata key whose value the spend is summed by
    per: str  # day, week or month
    limits: Budget

    @classmethod
    def from_setting(cls, key: str, setting: Mapping[str, Any]) -> PeriodBudget:
        where = f"budgets.{key}"
        per = setting.get("per")
        if per not in PERIODS:
            raise SettingsError(f"{where}.per must be one of {', '.join(PERIODS)}, not {per!r}")
        limits = Budget.from_setting(where, {name: value for name, value in setting.items() if name != "per"})
        if not limits or limits.max_turns is not None:
            raise SettingsError(f"{where}: give max_cost, max_requests or max_tokens for each {per}")
        return cls(key, per, limits)

    def start(self, now: float) -> float:
        """When the period holding `now` began (Unix seconds, UTC)."""
        moment = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        if self.per == "week":
            moment -= timedelta(days=moment.weekday())
        elif self.per == "month":
            moment = moment.replace(day=1)
        return moment.timestamp()

    def refusal(self, value: str, spent: Spent, since: float) -> Refusal | None:
        """Why the next call may not start, when the runs with `key` = `value` spent `spent`
        since the period began at `since`."""
        over = self.limits.refusal(spent)
        if over is None:
            return None
        day = datetime.fromtimestamp(since, timezone.utc).strftime("%Y-%m-%d")
        figures = str(over).removeprefix("run budget exceeded: ").replace("the run", f"{self.key}={value}")
        return Refusal(
            over.limit,
            f"{self.per} budget of {self.key}={value} exceeded since {day} (UTC): {figures} "
            f"(budgets.{self.key} in the settings)",
        )


def period_caps(
    budgets: Mapping[str, Budget | PeriodBudget], metadata: Mapping[str, Any]
) -> list[tuple[PeriodBudget, str]]:
    """The caps per metadata value and period (`budgets:` entries with `per`) that apply to a run
    with `metadata`, each with the run's value of its key."""
    caps = [cap for cap in budgets.values() if isinstance(cap, PeriodBudget) and cap.key in metadata]
    return [(cap, str(metadata[cap.key])) for cap in caps]


# A hold older than this is a call that never ended (its process froze or lost the database):
# it no longer stands in another call's way.
HOLD_TTL_S = 3600.0
WAIT: Literal["wait"] = "wait"
Verdict = Refusal | Literal["wait"] | None  # why not; wait for the calls held to end; or go


@dataclass(frozen=True)
class Claim:
    """A call asking to start under its run's period caps: decided where the spend of every
    machine is (the ledger), in one transaction that holds it when it may go."""

    request_id: str
    caps: tuple[tuple[PeriodBudget, str], ...]  # each cap, with the run's value of its key
    reservation: Spent  # what the call may spend (run.py's estimate)
    at: float  # when it asks (Unix seconds): which periods count
    patient: bool = True  # False once it waited long enough: decided on what was spent alone


def period_verdict(claim: Claim, cap: PeriodBudget, value: str, spent: Spent, held: Spent) -> Verdict:
    """Whether `claim` may start under `cap`, after `spent` (recorded calls) with `held` (calls
    admitted and still going, on any machine): a refusal only on what was spent, as a run's own
    budget (a call is never refused on an estimate); WAIT when only the calls held stand in the way."""
    since = cap.start(claim.at)
    refusal = cap.refusal(value, spent, since)
    if refusal is not None:
        return refusal
    if claim.patient and held.requests and not cap.limits.allows(spent + held + claim.reservation):
        return WAIT
    return None
