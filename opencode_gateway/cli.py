"""The `opencode-gateway` command. A thin layer: every behaviour lives in the Python API.

Exit codes: 0 the run finished; 1 the run failed (error, timeout, budget exceeded); 2 a problem
found before OpenCode starts (bad flags or settings, no usable OpenCode, a gateway that refuses);
130 interrupted (Ctrl-C); 143 and 129 stopped by SIGTERM and SIGHUP, handled like Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import difflib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ._litellm import owning_loop
from .credentials import refuse_inspection
from .errors import GatewayError, SettingsError
from .opencode.binary import SUPPORTED
from .opencode.config import OPENCODE_VERSION, PERMISSION_MODES, TOOLS
from .opencode.sandbox import SANDBOX_KINDS, SANDBOX_NETWORKS
from .settings import RunSettings, Settings, load_settings

if TYPE_CHECKING:
    from .launch import ServerState

DEFAULT_PORT = 4141  # of `serve`

__all__ = ["entry", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, exit code 2, and the nearest command or flag to a misspelt one."""
        self.exit(2, f"{self.prog}: error: {message}{self._did_you_mean(message)} (see --help)\n")

    def _did_you_mean(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        unknown = re.search(r"unrecognized arguments: (-[^\s=]+)", message)
        if choice:
            word, candidates = choice.group(1), re.findall(r"'([^']+)'", choice.group(2))
        elif unknown:
            word, candidates = unknown.group(1), sorted(_flags(self))
        else:
            return ""
        close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
        return f"; did you mean {close[0]}?" if close else ""


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and of its commands."""
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= _flags(command)
    return flags


def _metadata(pairs: Sequence[str], flag: str = "--metadata", example: str = "ticket=ENG-412") -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{flag} {pair!r} is not KEY=VALUE (e.g. {flag} {example})")
        metadata[key.strip()] = value
    return metadata


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read the {what} file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SettingsError(f"the {what} file {path} is not UTF-8 text (byte {exc.start})") from None


def _stdin_text(what: str) -> str:
    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(f"the {what} on stdin is not UTF-8 text (byte {exc.start})") from None


def _output_schema(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        schema = json.loads(_read(path, "output schema"))
    except ValueError as exc:
        raise SettingsError(f"the output schema file {path} is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise SettingsError(f"the output schema file {path} must hold a JSON object (a JSON schema)")
    return schema


def _settings(args: argparse.Namespace) -> Settings:
    """The settings file (--config) with the flags over it. A flag sets the setting of the same
    name (its argparse dest); a repeatable one adds to the file's list, or, for --metadata, to its
    mapping; a file flag is read here."""
    base = load_settings(args.config)
    key = _api_key(args)  # --api-key, or --api-key-file read
    changes: dict[str, Any] = {} if key is None else {"api_key": key}
    if getattr(args, "api_key_file", None):
        changes["secret_files"] = (*base.secret_files, Path(args.api_key_file).resolve())
    for setting in dataclasses.fields(Settings):
        given = getattr(args, setting.name, None)
        if setting.name in changes or given is None or given == []:
            continue
        if setting.name in _FROM_FILE:
            changes[setting.name] = _FROM_FILE[setting.name](given)
        elif setting.name == "metadata":
            changes["metadata"] = {**base.metadata, **_metadata(given)}
        elif setting.name == "routes":
            changes["routes"] = {**base.routes, **_metadata(given, "--route", "compaction=openai/gpt-4.1")}
        elif isinstance(given, list):
            changes[setting.name] = (*getattr(base, setting.name), *map(_PATHS.get(setting.name, str), given))
        else:
            changes[setting.name] = Path(given) if setting.name == "ledger" else given
    return base.replace(**changes)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


_FROM_FILE: dict[str, Callable[[str], Any]] = {"instructions": lambda path: _read(path, "instructions")}
_PATHS = {"sandbox_allow_write": _absolute, "sandbox_allow_read": _absolute}  # resolved where the flag was given


def _print_json(data: Any, stream: Any = None) -> None:
    print(json.dumps(data, ensure_ascii=False), file=stream or sys.stdout, flush=True)


def _result_line(result: Any) -> str:
    usage = result.usage
    unpriced = result.cost_sources.get("unpriced", 0)
    cost = f"cost unknown ({unpriced} unpriced)" if result.cost is None else f"${result.cost:.6f}"
    parts = [
        result.stop_reason,
        f"{usage.requests} request{'s' if usage.requests != 1 else ''}",
        f"{usage.input_tokens:,} in / {usage.output_tokens:,} out tokens",
        cost,
    ]
    if usage.cache_read_tokens or usage.cache_write_tokens:
        saved = result.cache_saved
        effect = ("saving unknown" if saved is None else f"saved ${saved:.6f}" if saved >= 0
                  else f"cache writes cost ${-saved:.6f} more")
        parts.append(f"{usage.cached_share:.0%} of input from cache, {effect}")
    parts.append(f"session {result.session_id or '-'}")
    return "opencode-gateway: " + " · ".join(parts)


def _cmd_run(args: argparse.Namespace) -> int:
    from .api import run, stream
    from .events import Done
    from .result import OutputInvalid

    settings = _settings(args)
    prompt = _stdin_text("prompt") if args.prompt == ["-"] else " ".join(args.prompt)
    options: dict[str, Any] = {"settings": settings, "workdir": args.workdir, "session_id": args.session,
                               "output": _output_schema(args.output_schema)}
    try:
        if args.show_events:
            for event in stream(prompt, **options):
                if isinstance(event, Done):
                    result = event.result
                else:
                    _print_json(event.to_dict(), sys.stderr)
        elif sys.stderr.isatty() and not args.quiet:
            from .console import RunView

            with RunView(sys.stderr, model=settings.model or "") as view:
                for event in stream(prompt, **options):
                    if isinstance(event, Done):
                        result = event.result
                    else:
                        view.show(event)
        else:
            result = run(prompt, **options)
    except OutputInvalid as exc:
        result = exc.result
    for warning in result.warnings:
        print(f"opencode-gateway: warning: {warning}", file=sys.stderr)
    if args.json:
        _print_json(result.to_dict())
    else:
        if result.output is not None:
            _print_json(result.output)
        elif result.text:
            print(result.text)
        if result.error is not None:
            print(f"opencode-gateway: error: {result.error}", file=sys.stderr)
        print(_result_line(result), file=sys.stderr)
    return 0 if result.ok else 1


def _cmd_config(args: argparse.Namespace) -> int:
    from .opencode.config import build_config, known_models

    settings = _settings(args)
    if not settings.model:
        raise SettingsError("no model given: pass -m MODEL (e.g. openai/gpt-4o-mini or litellm_proxy/<group>)")
    config = build_config(
        model=settings.model, base_url="http://127.0.0.1:<port>/v1", api_key_ref="{file:<private dir>/token}",
        small_model=settings.small_model, mcp=settings.mcp,
        permissions=settings.permissions, agent=settings.agent, disable_tools=settings.disable_tools,
        user_config=settings.opencode_config,
        known=known_models(settings.pricing, settings.model, settings.small_model),
    )
    text = json.dumps(config, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.reconcile:
        return _reconcile(args, settings)
    from .accounting.report import build_report

    where = list(_metadata(args.where, "--where").items())
    if not settings.ledger_path.exists():  # nothing has run yet: an empty report, not an error
        from .accounting.report import Report

        print(f"opencode-gateway: no runs yet (no ledger at {settings.ledger_path})", file=sys.stderr)
        sys.stdout.write(Report.empty(args.by).render(args.format))
        return 0
    if args.html:
        return _write_dashboard(args, settings, where)
    report = build_report(settings.ledger_path, by=args.by, since=args.since, until=args.until, where=where,
                          breakdown=args.breakdown, tz=args.tz)
    sys.stdout.write(report.render(args.format))
    return 0


def _write_dashboard(args: argparse.Namespace, settings: Settings, where: list[tuple[str, str]]) -> int:
    """`report --html FILE`: the dashboard as one file that opens with no network."""
    from .dashboard.data import Query, dashboard_data
    from .dashboard.page import render_page

    data = dashboard_data(settings.ledger_path, Query(by=args.by, since=args.since, until=args.until,
                                                      where=tuple(where), limit=None))
    target = Path(args.html)
    try:  # as private as the ledger it shows (0600): it names every ticket, workdir and cost
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)  # a file that existed keeps its mode through O_CREAT
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(render_page(data))
    except OSError as exc:
        raise SettingsError(f"cannot write {target}: {exc.strerror}: pass --html PATH in a writable folder") from None
    print(f"opencode-gateway: wrote {target} ({data['total']['requests']:,} requests, {data['runs']['count']:,} runs)",
          file=sys.stderr)
    return 0


def _reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from .litellm_gateway.reconcile import reconcile, render

    base, key = args.api_base or settings.gateway_api_base, args.api_key or settings.gateway_api_key
    if not base or not key:
        raise SettingsError("--reconcile needs the gateway: --api-base URL and --api-key KEY (an admin key)")
    lines = reconcile(settings.ledger_path, base, key, run_id=args.run, since=args.since, wait=args.wait)
    sys.stdout.write(render(lines, "json" if args.format == "json" else "table"))
    return 0 if lines and all(line.status == "ok" for line in lines) else 1


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose

    checks = diagnose(_settings(args))
    if args.json:
        _print_json([check.to_dict() for check in checks])
    else:
        print("\n".join(check.line() for check in checks))
    return 0 if all(check.ok for check in checks) else 1


def _cmd_sessions(args: argparse.Namespace) -> int:
    from .accounting.report import render_table, utc_time
    from .opencode.sessions import kept_sessions, prune_sessions

    data_dir = _settings(args).data_dir
    if args.action == "prune":
        if args.older_than is None or not 0 <= args.older_than < float("inf"):
            raise SettingsError("sessions prune needs --older-than DAYS (0 or more; 0 removes every kept session)")
        sessions = prune_sessions(data_dir, args.older_than)
        verb = "removed"
    else:
        sessions = kept_sessions(data_dir)
        verb = "kept"
    if args.json:
        _print_json([kept.to_dict() for kept in sessions])
        return 0
    rows = [[kept.session_id, utc_time(kept.started, "-"), utc_time(kept.last_used, "-"), kept.workdir or "-",
             kept.model or "-", f"{kept.size_bytes / 1e6:.1f} MB"] for kept in sessions]
    total = sum(kept.size_bytes for kept in sessions)
    rows.append([f"{len(sessions)} {verb}", "", "", "", "", f"{total / 1e6:.1f} MB"])
    sys.stdout.write(render_table(["session", "started", "last used", "workdir", "model", "size"], rows))
    return 0


def _cmd_install_opencode(args: argparse.Namespace) -> int:
    from .opencode.binary import install_opencode

    print(install_opencode(load_settings(args.config).data_dir, args.version))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from .serve import serve

    if args.action == "login":
        from .launch import login_url

        print(login_url(load_settings(args.config).data_dir))
        return 0

    def announce(url: str, token_file: str, login_url: str) -> None:
        print(f"opencode-gateway: serving on {url} (token in {token_file}); launch OpenCode with "
              "`opencode-gateway opencode -m MODEL`; Ctrl-C stops", file=sys.stderr, flush=True)
        print(f"opencode-gateway: spend dashboard: {login_url} (a one-time login)", file=sys.stderr, flush=True)

    asyncio.run(owning_loop(serve(_settings(args), host=args.host or "127.0.0.1", port=args.port,
                                  allow_remote=args.host is not None, on_ready=announce)))
    return 0


def _launch_env(args: argparse.Namespace) -> tuple[RunSettings, ServerState, dict[str, str]]:
    from .launch import ServerState, launch_env

    settings = _settings(args).validated()
    server = ServerState.read(settings.data_dir)
    return settings, server, launch_env(settings, server, workdir=Path.cwd())


def _cmd_opencode(args: argparse.Namespace) -> int:
    from .launch import run_opencode

    settings, server, env = _launch_env(args)
    arguments = args.opencode_args[1:] if args.opencode_args[:1] == ["--"] else args.opencode_args
    return run_opencode(settings, server, arguments, env)


def _cmd_env(args: argparse.Namespace) -> int:
    from .launch import shell_exports

    _, _, env = _launch_env(args)
    sys.stdout.write("# OpenCode on the running opencode-gateway server; use it in a subshell:\n"
                     "#   ( eval \"$(opencode-gateway env -m MODEL)\"; opencode )\n" + shell_exports(env))
    return 0


def _cmd_batch(args: argparse.Namespace) -> int:
    import asyncio

    from .batch import Batch, Executor, LocalExecutor, load_tasks, run_batch, summary

    settings = _settings(args)
    batch = Batch.of(Path(args.tasks), batch_id=args.batch_id,
                     workdir_root=Path(args.workdir_root) if args.workdir_root else None,
                     results_file=Path(args.out) if args.out else None)
    tasks = load_tasks(batch.tasks_file)
    executor: Executor = LocalExecutor()
    if settings.executor == "ray":
        from .ray_executor import RayExecutor

        executor = RayExecutor(settings.ledger_path, address=args.ray_address, num_cpus=args.ray_num_cpus,
                               max_retries=args.ray_max_retries)
    elif settings.executor != "local":
        raise SettingsError(f"executor {settings.executor!r} is not known: use local or ray")
    started = time.monotonic()
    try:
        outcomes = asyncio.run(owning_loop(run_batch(tasks, batch, settings, concurrency=args.concurrency,
                                                     resume=args.resume, executor=executor)))
    finally:
        executor.close()
    skipped = len(tasks) - len(outcomes)
    if args.json:
        _print_json({"batch_id": batch.batch_id, "results_file": str(batch.results_file), "skipped": skipped,
                     "tasks": [{"task_id": o.task_id, "ok": o.ok} for o in outcomes]})
    else:
        sys.stdout.write(summary(outcomes, time.monotonic() - started))
        if skipped:
            print(f"{skipped} task(s) finished in an earlier invocation were skipped (--resume)")
        print(f"results: {batch.results_file}\nper run: opencode-gateway report --by run --where "
              f"batch_id={batch.batch_id}")
    return 0 if all(o.ok for o in outcomes) else 1


def _upstream_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-base", metavar="URL", help="gateway URL (litellm_proxy/ models) or provider API base")
    key = parser.add_mutually_exclusive_group()
    key.add_argument("--api-key", metavar="KEY", help="virtual key or provider key; visible to local users in the "
                     "process list: prefer --api-key-file or LITELLM_PROXY_API_KEY")
    key.add_argument("--api-key-file", metavar="PATH", help="read the key from this file (kept out of argv)")


def _api_key(args: argparse.Namespace) -> str | None:
    path = getattr(args, "api_key_file", None)
    if path:
        key = _read(path, "API key").strip()
        if not key:
            raise SettingsError(f"the API key file {path} is empty")
        return key
    return getattr(args, "api_key", None)


def _limit_flags(parser: argparse.ArgumentParser, of: str) -> None:
    parser.add_argument("--timeout", type=float, metavar="S", help=f"wall-clock limit of {of} (default: 1800)")
    _budget_flags(parser, of)


def _budget_flags(parser: argparse.ArgumentParser, of: str) -> None:
    parser.add_argument("--max-cost", type=float, metavar="USD", help=f"stop {of} before it spends more")
    parser.add_argument("--max-requests", type=int, metavar="N", help=f"stop {of} after N upstream calls")
    parser.add_argument("--max-tokens", type=int, metavar="N", help=f"stop {of} after N input+output tokens")
    parser.add_argument("--max-turns", type=int, metavar="N", help=f"stop {of} after N main-model requests")


def _sandbox_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sandbox", choices=SANDBOX_KINDS,
                        help="confine OpenCode with bubblewrap (default: auto, when it works here)")
    parser.add_argument("--sandbox-network", choices=SANDBOX_NETWORKS,
                        help="in the sandbox, reach only the run's endpoint (default) or the host's network")
    parser.add_argument("--sandbox-allow-write", action="append", default=[], metavar="PATH",
                        help="a path the sandboxed run may write besides its workdir; repeatable")
    parser.add_argument("--sandbox-allow-read", action="append", default=[], metavar="PATH",
                        help="a path the sandbox hides (in the real HOME or /tmp) that the run may read; repeatable")


def _ledger_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ledger", metavar="PATH", help="the ledger file (default: <data dir>/ledger.db)")


def _opencode_bin_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--opencode-bin", metavar="PATH", help="the opencode binary (default: $OPENCODE_BIN, "
                        "the one install-opencode put in the data dir, or PATH)")


def _attribution(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="spend-log metadata")
    parser.add_argument("--tag", dest="tags", action="append", default=[], metavar="TAG", help="extra spend tag")


def _route_flag(parser: argparse.ArgumentParser) -> None:
    """Not for a launch: its background calls follow the routes of the settings `serve` read."""
    parser.add_argument("--route", dest="routes", action="append", default=[], metavar="PURPOSE=MODEL",
                        help="send OpenCode's title, summary or compaction calls to MODEL, whatever OpenCode asks "
                        "for (a summary's or compaction's model must take as much input as -m); repeatable")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model",
                        help="LiteLLM model (openai/gpt-4o-mini) or gateway group (litellm_proxy/<group>)")
    parser.add_argument("--small-model", metavar="MODEL", help="model of OpenCode's background calls (titles, "
                        "summaries), e.g. a cheap group (default: -m)")
    parser.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    parser.add_argument("--permissions", metavar="MODE",
                        help=f"what the agent may do: {', '.join(PERMISSION_MODES)} (default: the agent's own; "
                        "build: full)")
    parser.add_argument("--disable-tool", dest="disable_tools", action="append", default=[], metavar="NAME",
                        help=f"turn a tool off: {', '.join(TOOLS)}")
    parser.add_argument("--env", action="append", default=[], metavar="NAME",
                        help="pass the variable NAME to OpenCode (its environment is otherwise only PATH, LANG, "
                        "LC_*, TZ, TERM and the like); repeatable; never a key the gateway uses")


def _run_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    run = commands.add_parser("run", help="run OpenCode once on a prompt")
    _common(run)
    _route_flag(run)
    _upstream_flags(run)
    _attribution(run)
    run.add_argument("--agent", help="OpenCode agent (default: build)")
    run.add_argument("--instructions", metavar="FILE", help="extra system instructions for the run, from a file")
    run.add_argument("--skill", dest="skills", action="append", default=[], metavar="DIR",
                     help="a skill folder (with a SKILL.md) the run may use; repeatable")
    run.add_argument("--output-schema", metavar="FILE",
                     help="a JSON schema file: the answer must end with a JSON object matching it (printed alone)")
    run.add_argument("--workdir", default=".", metavar="DIR", help="where OpenCode works (default: .)")
    run.add_argument("--session", metavar="ID", help="continue a session of an earlier run")
    _limit_flags(run, "the run")
    _sandbox_flags(run)
    _opencode_bin_flag(run)
    _ledger_flag(run)
    run.add_argument("--json", action="store_true", help="print the RunResult as one JSON object")
    run.add_argument("--show-events", action="store_true", help="print events to stderr as they happen, as JSON")
    run.add_argument("-q", "--quiet", action="store_true", help="no live view on a terminal's stderr (the answer and "
                     "the summary line only)")
    run.add_argument("prompt", nargs="+", help="the task; - reads it from stdin")
    run.set_defaults(handler=_cmd_run)


def _batch_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    batch = commands.add_parser("batch", help="run many tasks from a JSONL file, N at a time, with progress")
    batch.add_argument("tasks", metavar="TASKS.jsonl", help="one task a line: {\"id\", \"prompt\", optional "
                       "model, metadata, tags, workdir, permissions, disable_tools, agent, instructions, skills, "
                       "output, timeout, max_cost, max_requests, max_tokens}")
    _common(batch)
    _route_flag(batch)
    _attribution(batch)
    batch.add_argument("--concurrency", type=int, default=4, metavar="N", help="tasks at a time (default: 4)")
    batch.add_argument("--workdir-root", metavar="DIR",
                       help="where each task's fresh workdir is made (default: TASKS.work/ beside the file)")
    batch.add_argument("--out", metavar="FILE", help="results, one JSON line a task (default: TASKS.results.jsonl)")
    batch.add_argument("--resume", action="store_true", help="skip the tasks that finished in an earlier invocation")
    batch.add_argument("--batch-id", metavar="ID", help="the batch's id in the ledger (default: from the file's path)")
    _upstream_flags(batch)
    _limit_flags(batch, "each run")
    _sandbox_flags(batch)
    _opencode_bin_flag(batch)
    _ledger_flag(batch)
    batch.add_argument("--executor", choices=("local", "ray"),
                       help="where tasks run: this process (default) or a Ray cluster (pip install "
                       "'opencode-gateway[ray]')")
    batch.add_argument("--ray-address", metavar="ADDR", help="with --executor ray: the cluster (auto, ray://...; "
                       "default: a local Ray instance)")
    batch.add_argument("--ray-num-cpus", type=float, default=1.0, metavar="N", help="CPUs a task takes (default: 1)")
    batch.add_argument("--ray-max-retries", type=int, default=1, metavar="N",
                       help="attempts after a worker dies mid-task (default: 1)")
    batch.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    batch.set_defaults(handler=_cmd_batch)


def _serve_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    serve = commands.add_parser("serve", help="run the endpoint as a long-lived server, for OpenCode's TUI")
    serve.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    serve.add_argument("--host", metavar="ADDR", help="address to listen on (default: 127.0.0.1; others are "
                                                       "reachable from the network, with the token as only guard)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N",
                       help=f"port (default: {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("action", nargs="?", choices=("login",),
                       help="login: print a new one-time login URL of the running server's dashboard")
    _upstream_flags(serve)
    _ledger_flag(serve)
    serve.set_defaults(handler=_cmd_serve)


def _launchers_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    for name, help_text, handler in (
        ("opencode", "launch OpenCode (the TUI, or any OpenCode command after --) on the running server",
         _cmd_opencode),
        ("env", "print the shell exports that wire OpenCode to the running server", _cmd_env),
    ):
        launcher = commands.add_parser(name, help=help_text)
        _common(launcher)
        _attribution(launcher)
        _budget_flags(launcher, "each session of this launch")
        _opencode_bin_flag(launcher)
        if name == "opencode":
            _sandbox_flags(launcher)
            launcher.add_argument("opencode_args", nargs=argparse.REMAINDER, metavar="-- OPENCODE ARGS",
                                  help="arguments for opencode (default: none, the TUI)")
        launcher.set_defaults(handler=handler)


def _config_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    config = commands.add_parser("config", help="print the isolated opencode.json a run would use")
    _common(config)
    _route_flag(config)
    config.add_argument("--out", metavar="PATH", help="write it to a file instead of stdout")
    config.set_defaults(handler=_cmd_config)


def _install_opencode_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    install = commands.add_parser("install-opencode", help="install the pinned OpenCode (npm) into the data dir; "
                                  "prints the binary's path")
    install.add_argument("--version", default=OPENCODE_VERSION, metavar="V",
                         help=f"the opencode-ai version (default: {OPENCODE_VERSION}; supported: {SUPPORTED})")
    install.add_argument("--config", metavar="FILE", help="settings file (for its data_dir)")
    install.set_defaults(handler=_cmd_install_opencode)


def _sessions_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    sessions = commands.add_parser("sessions", help="list or prune the OpenCode sessions runs kept for --session")
    sessions.add_argument("action", choices=("list", "prune"))
    sessions.add_argument("--older-than", type=float, metavar="DAYS",
                          help="prune: remove the sessions unused for more than DAYS days (0: all)")
    sessions.add_argument("--config", metavar="FILE", help="settings file (for its data_dir)")
    sessions.add_argument("--json", action="store_true", help="print them as a JSON list")
    sessions.set_defaults(handler=_cmd_sessions)


def _doctor_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    doctor = commands.add_parser("doctor", help="check that a run can start here: OpenCode, rg, the sandbox, the "
                                 "ledger, "
                                 "and with -m litellm_proxy/<group> the gateway, the key and the group")
    doctor.add_argument("-m", "--model", help="with a gateway group (litellm_proxy/<group>), check the gateway too")
    doctor.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    _upstream_flags(doctor)
    doctor.add_argument("--sandbox", choices=SANDBOX_KINDS, help="the sandbox to check (default: auto)")
    _opencode_bin_flag(doctor)
    _ledger_flag(doctor)
    doctor.add_argument("--json", action="store_true", help="print the checks as a JSON list")
    doctor.set_defaults(handler=_cmd_doctor)


def _report_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    report = commands.add_parser("report", help="spend per ticket, metadata key, model, tag, day, week, month, run, "
                                 "session, workdir or outcome")
    report.add_argument("--by", default="ticket", metavar="KEY",
                        help="a metadata key (default: ticket), or model, tag, day, week, month, run, session, workdir "
                        "(or project), outcome (how runs ended: done, abandoned...)")
    report.add_argument("--since", metavar="DATE", help="from this date (YYYY-MM-DD), ISO time, today, yesterday, "
                        "or a time ago (24h, 7d, 2w)")
    report.add_argument("--until", metavar="DATE", help="up to this date, inclusive (the same forms)")
    report.add_argument("--tz", metavar="ZONE", help="the time zone of dates and of --by day/week/month: an IANA "
                        "name (Europe/Berlin) or an offset (+02:00); default UTC")
    report.add_argument("--breakdown", action="store_true", help="each group's totals per model too")
    report.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                        help="only runs whose metadata KEY is VALUE")
    report.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table",
                        help="markdown: a GitHub table, for a CI job's summary or a pull request comment")
    report.add_argument("--html", metavar="FILE", help="write the spend dashboard (charts, top groups, runs and their "
                        "requests) as one HTML file that opens with no network")
    _ledger_flag(report)
    report.add_argument("--config", metavar="FILE", help="settings file (for its data_dir or ledger)")
    report.add_argument("--reconcile", action="store_true",
                        help="compare each request's cost with the gateway's spend log (exit 1 on any difference)")
    report.add_argument("--api-base", metavar="URL", help="with --reconcile: the gateway URL")
    report.add_argument("--api-key", metavar="KEY", help="with --reconcile: an admin key of the gateway")
    report.add_argument("--run", metavar="ID", help="with --reconcile: the run to check")
    report.add_argument("--wait", type=float, default=15.0, metavar="S",
                        help="with --reconcile: wait up to S seconds for spend logs to arrive (default: 15)")
    report.set_defaults(handler=_cmd_report)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="opencode-gateway", description="Run OpenCode on any LiteLLM model group, with exact cost.")
    parser.add_argument("--version", action="version", version=f"opencode-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _run_command(commands)
    _batch_command(commands)
    _serve_command(commands)
    _launchers_command(commands)
    _config_command(commands)
    _install_opencode_command(commands)
    _doctor_command(commands)
    _report_command(commands)
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
        print(f"opencode-gateway: error: {exc}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"opencode-gateway: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        signum = _Stopped.signum
        print("opencode-gateway: interrupted" + ("" if signum == signal.SIGINT else f" ({signum.name})"),
              file=sys.stderr)
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
