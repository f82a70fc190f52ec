"""One exception base, and a subclass for each thing a user can act on.

Every message says what was wrong and what to do about it; the CLI prints it as one line.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetExceeded",
    "CapabilityUnsupported",
    "ConfigConflict",
    "GatewayError",
    "LedgerConfigError",
    "LedgerError",
    "LedgerUnavailable",
    "OpenCodeError",
    "OpenCodeFailed",
    "OpenCodeNotFound",
    "PreflightError",
    "RunTimeout",
    "SettingsError",
    "TurnLimitReached",
    "UpstreamError",
    "one_line",
]


class GatewayError(Exception):
    """Base of every error opencode-gateway raises or reports in a RunResult."""

    def to_dict(self) -> dict[str, object]:
        return {"type": type(self).__name__, "message": str(self)}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a batch task's result coming back from a Ray worker) with its attributes as
        # they are: the subclasses' keyword-only arguments would not survive Exception's own way.
        return _restored, (type(self), self.args), self.__dict__


def _restored(kind: type[GatewayError], args: tuple[Any, ...]) -> GatewayError:
    error = kind.__new__(kind)
    Exception.__init__(error, *args)
    return error


class SettingsError(GatewayError):
    """A flag, a config.yaml value or an argument is invalid (CLI exit code 2)."""


class PreflightError(SettingsError):
    """The gateway is unreachable, refuses the key, or the key may not use the model group;
    `check` says which ("reachable", "key" or "group")."""

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


class ConfigConflict(SettingsError):
    """A user OpenCode config sets a key that opencode-gateway manages."""


class CapabilityUnsupported(SettingsError):
    """The caller asked for something OpenCode cannot do in a headless run; the message says why
    and what to use instead."""


class OpenCodeNotFound(SettingsError):
    """The `opencode` binary could not be found or run, or is not a supported OpenCode."""


class OpenCodeFailed(GatewayError):
    """OpenCode exited non-zero without reporting an error event; carries the tail of its stderr."""

    def __init__(self, message: str, *, exit_code: int, stderr_tail: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "exit_code": self.exit_code, "stderr_tail": self.stderr_tail}


class OpenCodeError(GatewayError):
    """OpenCode reported an error event that did not come from an upstream HTTP status."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "name": self.name}


class UpstreamError(GatewayError):
    """The model provider or the LiteLLM gateway answered with an error status."""

    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "status_code": self.status_code}


class LedgerError(GatewayError):
    """The ledger cannot be opened, migrated or written (corrupt, locked, too new)."""


class LedgerConfigError(LedgerError, SettingsError):
    """A ledger database that answered and refused: a wrong password, a missing database or role
    (CLI exit code 2, before anything starts)."""


class LedgerUnavailable(LedgerError):
    """A ledger database cannot be reached (refused, timed out, restarting): a run goes on, its
    rows spooled on this machine until `opencode-gateway ledger sync` or the next command ships them."""


class BudgetExceeded(GatewayError):
    """The run reached one of its limits (max_cost, max_requests, max_tokens) and was stopped."""


class TurnLimitReached(GatewayError):
    """The run made its `max_turns` main-model requests and OpenCode was stopped (its answer so far
    is the result's text): raise --max-turns, or continue the session with --session."""


class RunTimeout(GatewayError):
    """The run exceeded its wall-clock limit and OpenCode was killed."""


def one_line(text: str, limit: int = 300) -> str:
    """An error text (a provider's message, a web server's HTML page) as one line of at most `limit`."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
