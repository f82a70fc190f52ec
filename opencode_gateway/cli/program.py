"""The `opencode-gateway` command line: its parser, and how a command exits. A thin layer: what each
command does is in commands.py, and every behaviour lives in the Python API.

Exit codes: 0 the run finished; 1 the run failed (error, timeout, budget exceeded); 2 a problem
found before OpenCode starts (bad flags or settings, no usable OpenCode, a gateway that refuses);
130 interrupted (Ctrl-C); 143 and 129 stopped by SIGTERM and SIGHUP, handled like Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ..accounting.ledger.queries import BUILT_IN_GROUPS, REPORT_WORDS
from ..config.options import TASK_OPTIONS
from ..credentials import refuse_inspection
from ..errors import GatewayError, SettingsError
from ..opencode.binary import SUPPORTED
from ..opencode.config import OPENCODE_VERSION
from ..opencode.generation import GENERATIONS
from ..opencode.sandbox import SANDBOX_KINDS
from ..terminal import shown
from .commands import (
    _cmd_batch,
    _cmd_config,
    _cmd_doctor,
    _cmd_env,
    _cmd_install_opencode,
    _cmd_opencode,
    _cmd_run,
    _cmd_serve,
    _cmd_sessions,
)
from .flags import Parser, common_flags, limit_flags, setting_flags, upstream_flags
from .spend import cmd_ledger, cmd_report

DEFAULT_PORT = 4141  # of `serve`

__all__ = ["entry", "main"]


def _run_command(commands: argparse._SubParsersAction[Parser]) -> None:
    run = commands.add_parser("run", help="run OpenCode once on a prompt")
    common_flags(run)
    setting_flags(run, "route")
    upstream_flags(run)
    setting_flags(run, "attribution")
    setting_flags(run, "run")
    run.add_argument(
        "--output-schema",
        metavar="FILE",
        help="a JSON schema file: the answer must end with a JSON object matching it (printed alone)",
    )
    run.add_argument("--workdir", default=".", metavar="DIR", help="where OpenCode works (default: .)")
    run.add_argument("--session", metavar="ID", help="continue a session of an earlier run")
    limit_flags(run, "the run")
    setting_flags(run, "sandbox")
    setting_flags(run, "opencode_bin")
    setting_flags(run, "ledger")
    run.add_argument("--json", action="store_true", help="print the RunResult as one JSON object")
    run.add_argument("--show-events", action="store_true", help="print events to stderr as they happen, as JSON")
    run.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no live view on a terminal's stderr (the answer and the summary line only)",
    )
    run.add_argument("prompt", nargs="+", help="the task; - reads it from stdin")
    run.set_defaults(handler=_cmd_run)


def _batch_command(commands: argparse._SubParsersAction[Parser]) -> None:
    batch = commands.add_parser("batch", help="run many tasks from a JSONL file, N at a time, with progress")
    batch.add_argument(
        "tasks",
        metavar="TASKS.jsonl",
        help=f'one task a line: {{"id", "prompt", optional {", ".join(TASK_OPTIONS)}}}',
    )
    common_flags(batch)
    setting_flags(batch, "route")
    setting_flags(batch, "attribution")
    batch.add_argument("--concurrency", type=int, default=4, metavar="N", help="tasks at a time (default: 4)")
    batch.add_argument(
        "--workdir-root",
        metavar="DIR",
        help="where each task's fresh workdir is made (default: TASKS.work/ beside the file)",
    )
    batch.add_argument("--out", metavar="FILE", help="results, one JSON line a task (default: TASKS.results.jsonl)")
    batch.add_argument("--resume", action="store_true", help="skip the tasks that finished in an earlier invocation")
    batch.add_argument("--batch-id", metavar="ID", help="the batch's id in the ledger (default: from the file's path)")
    upstream_flags(batch)
    limit_flags(batch, "each run")
    setting_flags(batch, "sandbox")
    setting_flags(batch, "opencode_bin")
    setting_flags(batch, "ledger")
    setting_flags(batch, "batch")
    batch.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: the cluster (auto, ray://...; default: a local Ray instance)",
    )
    batch.add_argument("--ray-num-cpus", type=float, default=1.0, metavar="N", help="CPUs a task takes (default: 1)")
    batch.add_argument(
        "--ray-max-retries", type=int, default=1, metavar="N", help="attempts after a worker dies mid-task (default: 1)"
    )
    batch.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    batch.set_defaults(handler=_cmd_batch)


def _serve_command(commands: argparse._SubParsersAction[Parser]) -> None:
    serve = commands.add_parser("serve", help="run the endpoint as a long-lived server, for OpenCode's TUI")
    serve.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    serve.add_argument(
        "--host",
        metavar="ADDR",
        help="address to listen on (default: 127.0.0.1; others are "
        "reachable from the network, with the token as only guard)",
    )
    serve.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"port (default: {DEFAULT_PORT}; 0 picks a free one)",
    )
    serve.add_argument(
        "action",
        nargs="?",
        choices=("login",),
        help="login: print a new one-time login URL of the running server's dashboard",
    )
    upstream_flags(serve)
    setting_flags(serve, "ledger")
    serve.set_defaults(handler=_cmd_serve)


def _launchers_command(commands: argparse._SubParsersAction[Parser]) -> None:
    for name, help_text, handler in (
        (
            "opencode",
            "launch OpenCode (the TUI, or any OpenCode command after --) on the running server",
            _cmd_opencode,
        ),
        ("env", "print the shell exports that wire OpenCode to the running server", _cmd_env),
    ):
        launcher = commands.add_parser(name, help=help_text)
        common_flags(launcher)
        setting_flags(launcher, "attribution")
        setting_flags(launcher, "budget", "each session of this launch")
        setting_flags(launcher, "opencode_bin")
        if name == "opencode":
            setting_flags(launcher, "sandbox")
            launcher.add_argument(
                "opencode_args",
                nargs=argparse.REMAINDER,
                metavar="-- OPENCODE ARGS",
                help="arguments for opencode (default: none, the TUI)",
            )
        launcher.set_defaults(handler=handler)


def _config_command(commands: argparse._SubParsersAction[Parser]) -> None:
    config = commands.add_parser("config", help="print the isolated opencode.json a run would use")
    common_flags(config)
    setting_flags(config, "route")
    config.add_argument("--out", metavar="PATH", help="write it to a file instead of stdout")
    config.set_defaults(handler=_cmd_config)


def _install_opencode_command(commands: argparse._SubParsersAction[Parser]) -> None:
    install = commands.add_parser(
        "install-opencode", help="install the pinned OpenCode (npm) into the data dir; prints the binary's path"
    )
    install.add_argument(
        "--version",
        default=OPENCODE_VERSION,
        metavar="V",
        help=f"the OpenCode version (default: {OPENCODE_VERSION}; runs take {SUPPORTED}; "
        f"{', '.join(f'{g.supported} from npm {g.package}' for g in GENERATIONS)})",
    )
    install.add_argument("--config", metavar="FILE", help="settings file (for its data_dir)")
    install.set_defaults(handler=_cmd_install_opencode)


def _sessions_command(commands: argparse._SubParsersAction[Parser]) -> None:
    sessions = commands.add_parser("sessions", help="list or prune the OpenCode sessions runs kept for --session")
    sessions.add_argument("action", choices=("list", "prune"))
    sessions.add_argument(
        "--older-than",
        type=float,
        metavar="DAYS",
        help="prune: remove the sessions unused for more than DAYS days (0: all)",
    )
    sessions.add_argument("--config", metavar="FILE", help="settings file (for its data_dir)")
    sessions.add_argument("--json", action="store_true", help="print them as a JSON list")
    sessions.set_defaults(handler=_cmd_sessions)


def _ledger_command(commands: argparse._SubParsersAction[Parser]) -> None:
    ledger = commands.add_parser(
        "ledger",
        help="the ledger: its backend and spool (status), ship the spool (sync), import a ledger.db, "
        "list runs (runs), remove one (forget)",
    )
    actions = ledger.add_subparsers(dest="action", required=True, parser_class=Parser)
    status = actions.add_parser("status", help="the backend, schema version and what waits in the spool")
    sync = actions.add_parser(
        "sync", help="ship the spool to the team's database now (exit 1 while it cannot be reached)"
    )
    imported = actions.add_parser("import", help="merge a SQLite ledger file into the configured ledger")
    imported.add_argument("file", metavar="FILE.db", help="a ledger file (runs already there are not added twice)")
    runs = actions.add_parser("runs", help="list the runs (--where, --since, --until as for report)")
    runs.add_argument(
        "--where", action="append", default=[], metavar="KEY=VALUE", help="only runs whose metadata KEY is VALUE"
    )
    runs.add_argument("--since", metavar="DATE", help="runs from this date (as for report)")
    runs.add_argument("--until", metavar="DATE", help="up to this date, inclusive")
    forget = actions.add_parser("forget", help="remove a run, its requests and its asks from the ledger")
    forget.add_argument("run_id", metavar="RUN", help="the run's id (ledger runs lists them)")
    for parser in (status, sync, imported, runs, forget):
        setting_flags(parser, "ledger")
        parser.add_argument("--config", metavar="FILE", help="settings file (for its data_dir or ledger)")
        parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
        parser.set_defaults(handler=cmd_ledger)


def _doctor_command(commands: argparse._SubParsersAction[Parser]) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check that a run can start here: OpenCode, rg, the sandbox, the "
        "ledger, "
        "and with -m litellm_proxy/<group> the gateway, the key and the group",
    )
    doctor.add_argument("-m", "--model", help="with a gateway group (litellm_proxy/<group>), check the gateway too")
    doctor.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    upstream_flags(doctor)
    doctor.add_argument("--sandbox", choices=SANDBOX_KINDS, help="the sandbox to check (default: auto)")
    setting_flags(doctor, "opencode_bin")
    setting_flags(doctor, "ledger")
    doctor.add_argument("--json", action="store_true", help="print the checks as a JSON list")
    doctor.set_defaults(handler=_cmd_doctor)


def _reconcile_flags(report: Parser) -> None:
    """report --reconcile: each request's cost against the gateway's spend log."""
    report.add_argument(
        "--reconcile",
        action="store_true",
        help="compare each request's cost with the gateway's spend log (exit 1 on any difference)",
    )
    report.add_argument("--api-base", metavar="URL", help="with --reconcile: the gateway URL")
    report.add_argument("--api-key", metavar="KEY", help="with --reconcile: an admin key of the gateway")
    report.add_argument("--run", metavar="ID", help="with --reconcile: the run to check")
    report.add_argument(
        "--wait",
        type=float,
        default=15.0,
        metavar="S",
        help="with --reconcile: wait up to S seconds for spend logs to arrive (default: 15)",
    )


def _report_command(commands: argparse._SubParsersAction[Parser]) -> None:
    report = commands.add_parser("report", help=f"spend per ticket, any metadata key, {', '.join(BUILT_IN_GROUPS)}")
    report.add_argument(
        "word",
        nargs="?",
        choices=REPORT_WORDS,
        metavar="|".join(REPORT_WORDS),
        help="the reports ccusage users know: the same as --by " + ", ".join(REPORT_WORDS.values()),
    )
    report.add_argument(
        "--by",
        metavar="KEY",
        help=f"a metadata key (default: ticket), or {', '.join(BUILT_IN_GROUPS)} (project is workdir; outcome: "
        "how runs ended, done, abandoned...; purpose: main, title...; host: the machine a run ran on)",
    )
    report.add_argument(
        "--since",
        metavar="DATE",
        help="from this date (YYYY-MM-DD), ISO time, today, yesterday, or a time ago (24h, 7d, 2w)",
    )
    report.add_argument("--until", metavar="DATE", help="up to this date, inclusive (the same forms)")
    report.add_argument(
        "--tz",
        metavar="ZONE",
        help="the time zone of dates and of --by day/week/month: an IANA "
        "name (Europe/Berlin) or an offset (+02:00); default UTC",
    )
    report.add_argument("--breakdown", action="store_true", help="each group's totals per model too")
    report.add_argument(
        "--where", action="append", default=[], metavar="KEY=VALUE", help="only runs whose metadata KEY is VALUE"
    )
    report.add_argument(
        "--format",
        choices=("table", "json", "csv", "markdown"),
        default="table",
        help="markdown: a GitHub table, for a CI job's summary or a pull request comment",
    )
    report.add_argument(
        "--html",
        metavar="FILE",
        help="write the spend dashboard (charts, top groups, runs and their "
        "requests) as one HTML file that opens with no network",
    )
    setting_flags(report, "ledger")
    report.add_argument("--config", metavar="FILE", help="settings file (for its data_dir or ledger)")
    _reconcile_flags(report)
    report.set_defaults(handler=cmd_report)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = Parser(prog="opencode-gateway", description="Run OpenCode on any LiteLLM model group, with exact cost.")
    parser.add_argument("--version", action="version", version=f"opencode-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _run_command(commands)
    _batch_command(commands)
    _serve_command(commands)
    _launchers_command(commands)
    _config_command(commands)
    _install_opencode_command(commands)
    _doctor_command(commands)
    _report_command(commands)
    _ledger_command(commands)
    _sessions_command(commands)
    return parser


class _Stopped:
    """SIGTERM and SIGHUP stop a command the way Ctrl-C does (OpenCode stopped, the request in
    flight recorded, the run's row closed), then exit 128 + the signal's number. A signal the
    command was started ignoring stays ignored (`nohup` ignores SIGHUP; `&` in a script, SIGINT)."""

    signum = signal.SIGINT

    @classmethod
    def install(cls) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, cls._as_interrupt)

    @classmethod
    def _as_interrupt(cls, signum: int, frame: Any) -> None:
        cls.signum = signal.Signals(signum)
        on_ctrl_c = signal.getsignal(signal.SIGINT)  # asyncio's runner's while a run goes
        if not callable(on_ctrl_c):  # SIGINT ignored: stop all the same
            raise KeyboardInterrupt
        on_ctrl_c(signal.SIGINT, frame)


def main(argv: Sequence[str] | None = None) -> int:
    refuse_inspection()
    args = build_parser().parse_args(argv)
    _Stopped.install()
    try:
        return int(args.handler(args))
    except SettingsError as exc:
        print(shown(f"opencode-gateway: error: {exc}"), file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(shown(f"opencode-gateway: error: {exc}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        signum = _Stopped.signum
        print(
            "opencode-gateway: interrupted" + ("" if signum == signal.SIGINT else f" ({signum.name})"), file=sys.stderr
        )
        return 128 + signum


def entry() -> NoReturn:
    """The console script (and `python -m opencode_gateway`): `main()`, then exit at once.

    When `main()` returns, everything it opened is closed: the ledger's rows committed, servers
    and OpenCode stopped, output written. What the interpreter would do next is free every object,
    and with litellm loaded that takes about a second of garbage collection (several under load),
    which a supervisor that sent SIGTERM to `serve` waits through. So run the exit hooks the
    standard library and litellm registered, flush, and leave without that teardown."""
    try:
        code = main()
        atexit._run_exitfuncs()
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left; what was left to print goes nowhere, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.stderr.flush()
    os._exit(code)
