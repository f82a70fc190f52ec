"""`opencode-gateway doctor`: is this machine ready for a run, and if not, what to fix.

Each check is what a run would fail on, tried the way the run tries it (the same lookup, the same
preflight), so a green doctor means the run gets past its start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config.settings import Settings
from ..errors import GatewayError, PreflightError

__all__ = ["Check", "diagnose", "system_packages"]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: skipped, because an earlier check it needs failed
    detail: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return f"{mark} {self.name:<10} {self.detail}"


def _opencode(settings: Settings) -> Check:
    from ..opencode.binary import find_opencode

    try:
        found = find_opencode(settings.opencode_bin, settings.data_dir)
    except GatewayError as exc:
        return Check("opencode", False, str(exc))
    return Check("opencode", True, f"OpenCode {found.version} (generation {found.generation.number}) at {found.path}")


# What a run takes from the system, as (program, its Debian package, what needs it, when).
_PROGRAMS = (
    ("rg", "ripgrep", "OpenCode's glob, grep and skill tools", "always"),
    ("bwrap", "bubblewrap", "the sandbox", "sandbox"),
    ("socat", "socat", "the sandbox's bridge to the endpoint", "sandbox"),
    ("npm", "npm", "install-opencode", "no opencode"),
)


def system_packages(settings: Settings) -> Check:
    """Each program missing from PATH, and the one command that installs every package missing.
    The sandbox's are needed unless it is off (`auto` runs unconfined without them: a note, not a
    failure); npm only until OpenCode is installed."""
    from ..opencode.binary import find_opencode

    try:
        find_opencode(settings.opencode_bin, settings.data_dir)
        installed = True
    except GatewayError:
        installed = False
    wanted = {"always": True, "sandbox": settings.sandbox != "none", "no opencode": not installed}
    missing = [row for row in _PROGRAMS if wanted[row[3]] and shutil.which(row[0]) is None]
    if not missing:
        found = [program for program, _, _, when in _PROGRAMS if wanted[when]]
        return Check("packages", True, f"{', '.join(found)} on PATH")
    command = ("" if os.geteuid() == 0 else "sudo ") + "apt-get install -y " + " ".join(row[1] for row in missing)
    said = "; ".join(f"{program} ({package}: {why})" for program, package, why, _ in missing)
    failed = any(when != "sandbox" or settings.sandbox == "bwrap" for *_, when in missing)
    return Check("packages", not failed, f"not on PATH: {said}; install them with `{command}`")


def _sandbox(settings: Settings) -> Check:
    from ..opencode.sandbox import INSTALL_HINT, probe

    problem = probe()
    if settings.sandbox == "none":
        return Check("sandbox", True, "off (--sandbox none): OpenCode runs unconfined")
    if problem is None:
        return Check(
            "sandbox",
            True,
            "bubblewrap confines every run: no capability inside (as root too), seccomp "
            f"denies TIOCSTI, ptrace and io_uring, the host from an allowlist (network: "
            f"{settings.sandbox_network})",
        )
    if settings.sandbox == "auto":
        return Check("sandbox", True, f"runs are NOT confined: {problem}; {INSTALL_HINT}")
    return Check("sandbox", False, f"--sandbox bwrap cannot work: {problem}; {INSTALL_HINT}")


def _ledger(settings: Settings) -> Check:
    from ..accounting.ledger import connect

    location = settings.ledger_location
    if location.path is None:
        try:
            connect(location, create=False).close()
        except GatewayError as exc:
            return Check("ledger", False, str(exc))
        return Check("ledger", True, f"{location} opens (PostgreSQL)")
    path = location.path
    if path.exists():
        try:
            connect(path, create=False).close()
        except GatewayError as exc:
            return Check("ledger", False, str(exc))
        return Check("ledger", True, f"{path} opens" + ("" if os.access(path, os.W_OK) else " (read-only!)"))
    parent = next((p for p in (path.parent, *path.parents) if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK | os.X_OK):
        return Check("ledger", False, f"{path} cannot be created: {parent} is not writable; pass --ledger PATH")
    return Check("ledger", True, f"{path} (created by the first run)")


def _gateway(settings: Settings) -> list[Check]:
    import asyncio

    from ..litellm_gateway.preflight import check_gateway
    from ..litellm_gateway.protocol import gateway_base

    base = settings.gateway_api_base
    if not base:
        return [Check("gateway", False, "no gateway URL: set LITELLM_PROXY_API_BASE or pass --api-base")]
    group = settings.route.upstream_model
    passed = [
        Check("reachable", True, base),
        Check("key", True, "accepted"),
        Check("group", True, f"the key may use {group!r}"),
    ]
    try:
        asyncio.run(check_gateway(gateway_base(base), settings.gateway_api_key, group))
        return passed
    except PreflightError as exc:
        failed, problem = [check.name for check in passed].index(exc.check), str(exc)
    except GatewayError as exc:  # a spent budget: reachable and known, but no call would pass
        failed, problem = 1, str(exc)
    return [
        *passed[:failed],
        Check(passed[failed].name, False, problem),
        *(Check(check.name, None, "not checked") for check in passed[failed + 1 :]),
    ]


def diagnose(settings: Settings) -> list[Check]:
    """Every check, in the order a run meets them; with a gateway model, the gateway's too."""
    checks: list[Callable[[Settings], Check]] = [_opencode, system_packages, _sandbox, _ledger]
    found = [check(settings) for check in checks]
    if settings.mode == "gateway":
        found += _gateway(settings)
    return found
