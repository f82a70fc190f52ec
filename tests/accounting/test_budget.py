"""A run's limits: what refuses the next call, what a reservation must fit in, what overshot."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from opencode_gateway.accounting.budget import PERIODS, Budget, PeriodBudget, Spent
from opencode_gateway.errors import SettingsError


def test_each_limit_refuses_once_reached_naming_the_figures() -> None:
    budget = Budget(max_cost=0.01, max_requests=3, max_tokens=5000)
    assert budget.refusal(Spent(1, 1100, 0.004)) is None
    assert "max_cost is $0.01 and the run cost $0.012000" in str(budget.refusal(Spent(2, 202, 0.012)))
    assert "max_requests is 3 and 3 requests were made" in str(budget.refusal(Spent(3, 6, 0.0)))
    assert "max_tokens is 5,000 and the run used 6,000" in str(budget.refusal(Spent(1, 6000, 0.0)))


def test_a_reservation_fits_only_within_every_limit() -> None:
    budget = Budget(max_cost=0.01, max_requests=3, max_tokens=5000)
    assert budget.allows(Spent(3, 5000, 0.01))
    assert not budget.allows(Spent(4, 0, 0.0))
    assert not budget.allows(Spent(1, 5001, 0.0))
    assert not budget.allows(Spent(1, 0, 0.0100001))
    assert Budget().allows(Spent(10**9, 10**12, 1e9))


def test_overshoot_and_fallbacks() -> None:
    assert Budget(max_cost=0.01).overshoot(Spent(1, 2, 0.015)) == (
        "the run cost $0.005000 over max_cost ($0.01) in requests that had already started",
    )
    assert Budget(max_requests=2).or_else(Budget(max_cost=1.0, max_requests=9)) == Budget(1.0, 2, None)


@pytest.mark.parametrize("value", [-1, 0, float("nan"), float("inf"), True, "1"])
def test_a_limit_in_the_settings_is_a_finite_number_above_0(value: object) -> None:
    with pytest.raises(SettingsError, match="budgets.coder.max_cost must be a number above 0"):
        Budget.from_setting("budgets.coder", {"max_cost": value})


def test_a_period_starts_at_midnight_utc_on_monday_or_on_the_first() -> None:
    thursday_noon = datetime(2026, 12, 3, 12, 30, tzinfo=UTC).timestamp()
    starts = {per: PeriodBudget("ticket", per, Budget(max_cost=1)).start(thursday_noon) for per in PERIODS}
    assert starts == {
        "day": datetime(2026, 12, 3, tzinfo=UTC).timestamp(),
        "week": datetime(2026, 11, 30, tzinfo=UTC).timestamp(),
        "month": datetime(2026, 12, 1, tzinfo=UTC).timestamp(),
    }


def test_a_period_budget_refuses_naming_the_period_the_value_and_the_total_so_far() -> None:
    period = PeriodBudget.from_setting("ticket", {"per": "day", "max_cost": 5})
    since = datetime(2026, 12, 3, tzinfo=UTC).timestamp()
    assert period.refusal("ENG-412", Spent(3, 900, 4.99), since) is None
    refusal = period.refusal("ENG-412", Spent(4, 1200, 5.12), since)
    assert refusal is not None and refusal.limit == "max_cost"
    assert str(refusal) == (
        "day budget of ticket=ENG-412 exceeded since 2026-12-03 (UTC): max_cost is $5 and "
        "ticket=ENG-412 cost $5.120000 (budgets.ticket in the settings)"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"per": "fortnight", "max_cost": 5}, "per must be one of day, week, month"),
        ({"per": "day"}, "give max_cost, max_requests or max_tokens"),
        ({"per": "day", "max_cost": -1}, "must be a number above 0"),
    ],
)
def test_a_bad_period_budget_says_what_is_wrong(setting: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        PeriodBudget.from_setting("ticket", setting)


@pytest.mark.parametrize("budget", [Budget(max_cost=float("nan")), Budget(max_requests=0), Budget(max_tokens=-5)])
def test_a_run_limit_that_is_no_number_above_zero_is_refused(budget: Budget) -> None:
    with pytest.raises(SettingsError, match="is invalid: give a number above 0"):
        budget.check()
