"""How long the endpoint waits on an upstream and how much it reads: checked before anything starts."""

from __future__ import annotations

import math

import pytest

from opencode_gateway.endpoint.limits import UpstreamLimits
from opencode_gateway.errors import SettingsError


def test_the_defaults_pass() -> None:
    UpstreamLimits().check()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (UpstreamLimits(connect_timeout=0), "connect_timeout 0 is invalid: give a number of seconds above 0"),
        (UpstreamLimits(first_byte_timeout=math.nan), "first_byte_timeout nan is invalid"),
        (UpstreamLimits(idle_timeout=math.inf), "idle_timeout inf is invalid"),
        (UpstreamLimits(max_body_bytes=-1), "max_body_bytes -1 is invalid: give a number above 0"),
    ],
)
def test_a_limit_that_is_no_number_above_zero_is_refused(limits: UpstreamLimits, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        limits.check()
