"""`opencode-gateway doctor`, run as a user runs it: one line per check, exit 1 when any fails.
End to end: it checks this machine's real programs (OpenCode, rg, bubblewrap) and ledgers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import opencode_services
from tests.support.cli import cli
from tests.support.postgres import PASSWORD, Postgres

pytestmark = pytest.mark.e2e


def test_a_ready_machine_passes_every_check(opencode_bin: str, tmp_path: Path) -> None:
    result = cli("doctor", "--opencode-bin", opencode_bin, "--ledger", str(tmp_path / "ledger.db"), "--json")
    assert result.returncode == 0, result.stdout
    checks = json.loads(result.stdout)
    assert [(c["name"], c["ok"]) for c in checks] == [
        ("opencode", True),
        ("packages", True),
        ("sandbox", True),
        ("ledger", True),
    ]
    assert checks[0]["detail"].startswith(("OpenCode 1.18.", "OpenCode 2.1."))
    assert checks[2]["detail"].startswith("bubblewrap confines every run")  # scripts/setup installs it


def test_a_binary_that_is_not_opencode_fails_its_line(tmp_path: Path) -> None:
    result = cli("doctor", "--opencode-bin", "/bin/echo", "--ledger", str(tmp_path / "ledger.db"))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("FAIL opencode") and "install-opencode" in lines[0]
    assert lines[1] == "ok   packages   rg, bwrap, socat, npm on PATH"  # npm too: install-opencode needs it
    assert lines[2].startswith("ok   sandbox") and lines[3].startswith("ok   ledger")


def test_a_corrupt_ledger_fails_its_line(opencode_bin: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    ledger.write_bytes(b"this is not a database" * 100)
    result = cli("doctor", "--opencode-bin", opencode_bin, "--ledger", str(ledger))
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if "ledger" in line]
    assert line.startswith("FAIL ledger") and str(ledger) in line


def test_a_sandbox_that_cannot_work_fails_its_line_only_when_insisted_on(opencode_bin: str, tmp_path: Path) -> None:
    no_tools = {"PATH": "/nonexistent"}  # no bwrap, no socat (nor rg) on PATH
    for sandbox, ok in (("auto", True), ("bwrap", False)):
        result = cli(
            "doctor",
            "--opencode-bin",
            opencode_bin,
            "--ledger",
            str(tmp_path / "l.db"),
            "--sandbox",
            sandbox,
            "--json",
            env=no_tools,
        )
        [check] = [c for c in json.loads(result.stdout) if c["name"] == "sandbox"]
        assert (
            check["ok"] is ok
            and "bwrap is not installed" in check["detail"]
            and "apt-get install bubblewrap" in check["detail"]
        )
        # Every missing program named, with the one command that installs their packages
        [packages] = [c for c in json.loads(result.stdout) if c["name"] == "packages"]
        assert packages["ok"] is False and "rg (ripgrep: OpenCode's glob, grep and skill tools)" in packages["detail"]
        assert "apt-get install -y ripgrep bubblewrap socat`" in packages["detail"]


def test_a_team_ledger_is_checked_by_connecting_and_its_password_is_never_printed(
    opencode_bin: str, postgres: Postgres
) -> None:
    url = postgres.create_database()
    good = cli("doctor", "--opencode-bin", opencode_bin, "--ledger", url)
    [line] = [line for line in good.stdout.splitlines() if "ledger" in line]
    assert good.returncode == 0 and line.startswith("ok   ledger") and "(PostgreSQL)" in line, good.stdout
    wrong = url.replace(PASSWORD, "not-the-password")
    bad = cli("doctor", "--opencode-bin", opencode_bin, "--ledger", wrong)
    [line] = [line for line in bad.stdout.splitlines() if "ledger" in line]
    assert bad.returncode == 1 and line.startswith("FAIL ledger") and "check the URL's user, password" in line
    for result in (good, bad):
        assert PASSWORD not in result.stdout + result.stderr and "not-the-password" not in result.stdout
        assert "llmproxy:***@" in result.stdout


def test_doctor_names_the_generation_of_the_opencode_it_found_and_leaves_no_service(
    opencode_bin: str, generation: int, tmp_path: Path
) -> None:
    """Asking OpenCode 2 its version starts no background service (127.0.0.1:49374)."""
    result = cli("doctor", "--opencode-bin", opencode_bin, "--ledger", str(tmp_path / "ledger.db"))
    assert f"(generation {generation}) at {opencode_bin}" in result.stdout.splitlines()[0]
    assert opencode_services() == []
