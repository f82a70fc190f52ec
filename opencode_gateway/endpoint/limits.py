"""How long the endpoint waits on an upstream and how much of a request it reads: one frozen value
that checks itself (config/settings.py composes it from the settings; runs/wiring.py and runs/assembly.py hand its
parts to the upstreams and the endpoint). Stdlib only: settings import it at every start."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SettingsError

__all__ = ["UpstreamLimits"]


@dataclass(frozen=True)
class UpstreamLimits:
    connect_timeout: float = 10.0  # seconds to connect to the upstream
    first_byte_timeout: float = 300.0  # from forwarding a request to the upstream's answer
    idle_timeout: float = 300.0  # between two chunks of a stream
    max_body_bytes: int = 32 * 1024 * 1024  # of a request OpenCode sends

    def check(self) -> None:
        """Raise SettingsError naming a limit that is no number above 0 (NaN is not)."""
        for name in ("connect_timeout", "first_byte_timeout", "idle_timeout", "max_body_bytes"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                unit = "a number" if name == "max_body_bytes" else "a number of seconds"
                raise SettingsError(f"{name} {value} is invalid: give {unit} above 0")
