"""Per-run limits, checked before each upstream call.

A call that would start over a limit is refused; a stream already running when a limit is crossed
is allowed to finish (no half answers), and the overshoot is reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SettingsError
from .records import RequestRecord

__all__ = ["Budget"]

_LIMITS = {"max_cost": (int, float), "max_requests": (int,), "max_tokens": (int,)}


@dataclass(frozen=True)
class Budget:
    max_cost: float | None = None  # USD, of the requests that could be priced
    max_requests: int | None = None  # upstream calls
    max_tokens: int | None = None  # input + output tokens

    @classmethod
    def from_setting(cls, where: str, setting: Any) -> Budget:
        if not isinstance(setting, Mapping):
            raise SettingsError(f"{where} must be a mapping of limits ({', '.join(_LIMITS)})")
        for key, value in setting.items():
            if key not in _LIMITS:
                raise SettingsError(f"{where}: unknown limit {key!r}; known limits: {', '.join(_LIMITS)}")
            if isinstance(value, bool) or not isinstance(value, _LIMITS[key]) or value <= 0:
                raise SettingsError(f"{where}.{key} must be a number above 0, not {value!r}")
        return cls(**setting)

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.max_cost, self.max_requests, self.max_tokens))

    def or_else(self, fallback: Budget | None) -> Budget:
        """These limits, with the ones not set taken from `fallback`."""
        if fallback is None:
            return self
        return Budget(self.max_cost if self.max_cost is not None else fallback.max_cost,
                      self.max_requests if self.max_requests is not None else fallback.max_requests,
                      self.max_tokens if self.max_tokens is not None else fallback.max_tokens)

    def _spent(self, records: Sequence[RequestRecord]) -> tuple[int, int, float]:
        made = [r for r in records if r.cost.source != "refused"]
        tokens = sum(r.usage.input_tokens + r.usage.output_tokens for r in made if r.usage)
        return len(made), tokens, sum(r.cost.usd or 0.0 for r in made)

    def refusal(self, records: Sequence[RequestRecord]) -> str | None:
        """Why the next call may not start, or None."""
        requests, tokens, cost = self._spent(records)
        if self.max_requests is not None and requests >= self.max_requests:
            return f"run budget exceeded: max_requests is {self.max_requests} and {requests} requests were made"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"run budget exceeded: max_tokens is {self.max_tokens:,} and the run used {tokens:,} tokens"
        if self.max_cost is not None and cost >= self.max_cost:
            return f"run budget exceeded: max_cost is ${self.max_cost:g} and the run cost ${cost:.6f}"
        return None

    def overshoot(self, records: Sequence[RequestRecord]) -> tuple[str, ...]:
        """What streams already running took the run past its limits."""
        requests, tokens, cost = self._spent(records)
        notes = []
        if self.max_tokens is not None and tokens > self.max_tokens:
            notes.append(f"the run used {tokens - self.max_tokens:,} tokens over max_tokens ({self.max_tokens:,}) "
                         "in requests that had already started")
        if self.max_cost is not None and cost > self.max_cost:
            notes.append(f"the run cost ${cost - self.max_cost:.6f} over max_cost (${self.max_cost:g}) in "
                         "requests that had already started")
        return tuple(notes)
