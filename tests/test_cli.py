"""The command line as a user calls it: its exit codes, what it prints and where. Called in this
process (tests/support/cli.py); what only a real process shows (bytes in argv, a reader that left
the pipe, a fresh interpreter's imports) runs as one. Real runs are in tests/e2e/test_cli.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opencode_gateway.accounting.ledger import Ledger
from tests.support.builders import run_row
from tests.support.cli import cli

CLI = [sys.executable, "-m", "opencode_gateway"]


def test_import_and_help_do_not_import_litellm() -> None:
    code = (
        "import sys, opencode_gateway, opencode_gateway.cli as c\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('LITELLM' if 'litellm' in sys.modules else 'NO-LITELLM')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip().endswith("NO-LITELLM")


def test_report_does_not_import_litellm(tmp_path: Path) -> None:
    code = (
        "import sys, opencode_gateway.cli as c\n"
        f"c.main(['report', '--ledger', {str(tmp_path / 'l.db')!r}])\n"
        "print('LITELLM' if 'litellm' in sys.modules else 'NO-LITELLM')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("NO-LITELLM") and "no runs yet" in out.stderr


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_report_before_any_run_is_empty_not_an_error_and_has_the_usual_shape(tmp_path: Path, fmt: str) -> None:
    result = cli("report", "--ledger", str(tmp_path / "none.db"), "--format", fmt)
    assert result.returncode == 0
    assert "no runs yet" in result.stderr and not (tmp_path / "none.db").exists()
    if fmt == "json":  # it was [] here, and {"by", "groups", "total"} with a ledger
        data = json.loads(result.stdout)
        assert (data["by"], data["groups"], data["total"]["runs"], data["total"]["cost"]) == ("ticket", [], 0, 0.0)
    else:
        assert "TOTAL" in result.stdout and "cost_usd" in result.stdout


def test_report_by_a_word_that_is_no_dimension_nor_metadata_key_is_exit_2(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.start_run(run_row("r1", started_at=0.0, mode="sdk", metadata={"ticket": "ENG-1"}))
    ledger.close()
    result = cli("report", "--by", "modle", "--ledger", str(tmp_path / "ledger.db"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "cannot group by 'modle'" in result.stderr and "(ticket)" in result.stderr


def test_run_help_lists_every_tool_that_can_be_disabled() -> None:
    from opencode_gateway.opencode.config import TOOLS

    help_text = " ".join(cli("run", "--help").stdout.split())
    assert all(tool in help_text for tool in TOOLS) and "todowrite" in help_text


def test_config_prints_the_isolated_config_without_secrets() -> None:
    result = cli(
        "config",
        "-m",
        "openai/gpt-4o-mini",
        "--permissions",
        "read-only",
        "--disable-tool",
        "grep",
        env={"OPENAI_API_KEY": "sk-should-not-appear"},
    )
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert list(config["provider"]) == ["litellm"]
    assert config["permission"]["grep"] == "deny" and config["permission"]["*"] == "deny"
    assert "sk-should-not-appear" not in result.stdout


def test_config_out_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "opencode.json"
    assert cli("config", "-m", "openai/gpt-4o-mini", "--out", str(out)).returncode == 0
    assert json.loads(out.read_text())["model"] == "litellm/openai/gpt-4o-mini"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "-m", "m", "--metadata", "ticket", "hi"], "--metadata 'ticket' is not KEY=VALUE"),
        (["run", "-m", "m", "--permissions", "ask", "hi"], "cannot answer permission prompts"),
        (["run", "-m", "m", "--timeout", "soon", "hi"], "invalid float value"),
        (["run", "-m", "m", "--disable-tool", "shell", "hi"], "cannot disable tool 'shell'"),
        (["config", "--config", "/nonexistent/config.yaml"], "cannot read the settings file"),
        (["frobnicate"], "invalid choice"),
        (["run", "-m", "m", "--no-such-flag", "hi"], "unrecognized arguments"),
        (["run", "-m", "m", "--skill", "/nonexistent/skill", "hi"], "skill folder /nonexistent/skill does not exist"),
        (["run", "-m", "m", "--instructions", "/nonexistent/rules.md", "hi"], "cannot read the instructions file"),
        (["run", "-m", "m", "--output-schema", "/nonexistent/s.json", "hi"], "cannot read the output schema file"),
        (["run", "-m", "m", "--timeout", "nan", "hi"], "timeout nan is invalid"),
        (["run", "-m", "m", "--max-cost", "nan", "hi"], "max_cost nan is invalid"),
        (["run", "-m", "m", "--max-cost", "inf", "hi"], "max_cost inf is invalid"),
        (["run", "-m", "m", "--tag", "a\r\nx-evil: 1", "hi"], "control characters"),
        (["run", "-m", "m", "--env", "HOME", "hi"], "opencode-gateway sets HOME itself"),
        # a byte that is not UTF-8 in argv arrives as a lone surrogate: refused, never stored
        (["run", "-m", "m", "--metadata", "note=caf\udce9", "hi"], "metadata 'caf\\udce9' is not UTF-8 text"),
        (["run", "-m", "m", "--tag", "t\udce9", "hi"], "tag 't\\udce9' is not UTF-8 text"),
        (["run", "-m", "m", "--ledger", "postgresql:/u:pw@127.0.0.1/db", "hi"], "neither a file's path nor"),
    ],
)
def test_bad_flags_and_settings_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = cli(*args)
    assert not Path("postgresql:").exists(), "a ledger file was made from a mistyped URL"
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize("how", ["stdin", "argv"])
def test_a_prompt_that_is_not_utf8_is_exit_2_before_anything_starts(how: str, tmp_path: Path, workdir: Path) -> None:
    ledger = tmp_path / "ledger.db"
    garbage = b"fix \xff\xfe\x00\x9c it"
    argv = [
        *CLI,
        "run",
        "-m",
        "openai/m",
        "--api-key",
        "sk-x",
        "--opencode-bin",
        "/nonexistent/opencode",  # refused before OpenCode is looked for
        "--workdir",
        str(workdir),
        "--ledger",
        str(ledger),
    ]
    if how == "stdin":
        result = subprocess.run([*argv, "-"], input=garbage, capture_output=True, timeout=120)
    else:
        result = subprocess.run(
            [*(a.encode() for a in argv), garbage.replace(b"\x00", b"")], capture_output=True, timeout=120
        )
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "not UTF-8 text" in lines[0], result.stderr
    assert not ledger.exists()  # nothing started: no run row, no OpenCode


def test_a_missing_binary_names_the_install_command(workdir: Path) -> None:
    result = cli(
        "run", "-m", "openai/gpt-4o-mini", "--opencode-bin", "/nonexistent/opencode", "--workdir", str(workdir), "hi"
    )
    assert result.returncode == 2
    assert "opencode-gateway install-opencode" in result.stderr and "--opencode-bin" in result.stderr


def test_a_binary_that_is_not_opencode_is_refused_before_the_run(workdir: Path) -> None:
    result = cli("run", "-m", "openai/gpt-4o-mini", "--opencode-bin", "/bin/echo", "--workdir", str(workdir), "hi")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "/bin/echo" in line and "1.18" in line and "opencode-gateway install-opencode" in line


@pytest.mark.parametrize("task_id", ["..", "."])
def test_a_batch_task_named_dot_or_dot_dot_is_exit_2_and_removes_nothing(task_id: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "ok", "prompt": "a"}) + "\n" + json.dumps({"id": task_id, "prompt": "b"}) + "\n")
    (tmp_path / "precious.txt").write_text("keep")
    result = cli("batch", str(tasks), "-m", "openai/m", "--workdir-root", str(tmp_path))
    assert result.returncode == 2
    assert f"line 2: id {task_id!r} is invalid" in result.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep" and tasks.exists()


def test_a_batch_whose_settings_name_an_unknown_executor_is_exit_2_before_any_task(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "a"}) + "\n")
    settings = tmp_path / "config.yaml"
    settings.write_text("executor: rya\n")
    result = cli(
        "batch", str(tasks), "-m", "openai/m", "--config", str(settings), "--workdir-root", str(tmp_path / "w")
    )
    assert result.returncode == 2 and "executor 'rya' is not known: use local, ray" in result.stderr
    assert not (tmp_path / "w").exists()  # no task was started


def test_version_and_did_you_mean_for_a_misspelt_command_flag_or_setting(tmp_path: Path) -> None:
    from opencode_gateway import __version__

    assert cli("--version").stdout == f"opencode-gateway {__version__}\n"
    misspelt = cli("reprot")
    assert misspelt.returncode == 2 and "did you mean report?" in misspelt.stderr
    assert "did you mean --model?" in cli("run", "--modle", "x", "hi").stderr
    settings = tmp_path / "config.yaml"
    settings.write_text("max_cots: 1\n")
    wrong = cli("config", "-m", "openai/gpt-4o-mini", "--config", str(settings))
    assert wrong.returncode == 2
    assert (
        wrong.stderr.strip()
        == f"opencode-gateway: error: {settings}: unknown setting 'max_cots'; did you mean max_cost?"
    )


def test_output_piped_into_a_reader_that_left_ends_quietly(tmp_path: Path) -> None:
    """`... | head`: a BrokenPipeError traceback in 7 of 10 tries of `sessions list --json | head -c
    400`. Here the reader leaves at once (`true`), so every write after it fails."""
    from tests.support.builders import spend_ledger

    ledger = spend_ledger(tmp_path / "ledger.db")
    command = f"{sys.executable} -m opencode_gateway report --by run --format csv --ledger {ledger} | true"
    for _ in range(3):
        piped = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        assert piped.stderr == "", piped.stderr[-2000:]


def test_the_html_report_is_as_private_as_the_ledger(tmp_path: Path) -> None:
    from tests.support.builders import spend_ledger

    ledger = spend_ledger(tmp_path / "ledger.db")
    out = tmp_path / "spend.html"
    out.write_text("an older, world-readable copy")
    out.chmod(0o644)
    assert cli("report", "--ledger", str(ledger), "--html", str(out)).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o600 == (ledger.stat().st_mode & 0o777)
    assert "<h1>Spend</h1>" in out.read_text()


def test_a_policy_naming_a_tool_opencode_does_not_have_is_exit_2_in_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "approve.yaml"
    policy.write_text("rules:\n  bassh: deny\ndefault: allow\n")
    result = cli("run", "-m", "openai/gpt-4o-mini", "--approve", str(policy), "--opencode-bin", "/nonexistent", "hi")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "approvals.rules: 'bassh' is not a tool OpenCode has: use apply_patch, bash" in line


def test_report_words_of_ccusage_are_its_dimensions_and_help_names_every_dimension(tmp_path: Path) -> None:
    from opencode_gateway.accounting.ledger.queries import BUILT_IN_GROUPS
    from tests.support.builders import spend_ledger

    ledger = str(spend_ledger(tmp_path / "ledger.db"))
    for word, by in (("daily", "day"), ("weekly", "week"), ("monthly", "month"), ("session", "session")):
        said = cli("report", word, "--ledger", ledger, "--format", "json")
        assert (
            said.returncode == 0
            and said.stdout == cli("report", "--by", by, "--ledger", ledger, "--format", "json").stdout
        )
        assert json.loads(said.stdout)["by"] == by
    both = cli("report", "daily", "--by", "ticket", "--ledger", ledger)
    assert both.returncode == 2 and "report daily groups by day, and --by says ticket" in both.stderr
    helped = " ".join(cli("report", "--help").stdout.split())
    assert all(key in helped for key in BUILT_IN_GROUPS) and "daily|weekly|monthly|session" in helped


def test_a_where_that_matches_no_run_says_so(tmp_path: Path) -> None:
    from tests.support.builders import spend_ledger

    ledger = str(spend_ledger(tmp_path / "ledger.db"))
    nothing = cli("report", "--where", "ticket=ENG-999", "--ledger", ledger)
    assert nothing.returncode == 0 and "no run in" in nothing.stderr and "has ticket=ENG-999" in nothing.stderr
    found = cli("report", "--where", "ticket=ENG-401", "--ledger", ledger)
    assert found.returncode == 0 and found.stderr == ""
