"""What each `opencode-gateway` command does, given its parsed arguments (program.py builds the parser
and runs them); and how the flags become Settings (`settings_of`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._litellm import owning_loop
from ..config.file import load_settings
from ..config.settings import RunSettings, check_choices
from ..errors import SettingsError
from .arguments import output_schema, settings_of, stdin_text
from .ci import batch_figures, report_to_ci, run_figures
from .printed import print_json, print_result

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..opencode.lines import Event
    from ..runs.result import RunResult
    from ..serve.launch import ServerState


def _cmd_run(args: argparse.Namespace) -> int:
    from ..runs.result import OutputInvalid

    settings = settings_of(args)
    prompt = stdin_text("prompt") if args.prompt == ["-"] else " ".join(args.prompt)
    options: dict[str, Any] = {
        "settings": settings,
        "workdir": args.workdir,
        "session_id": args.session,
        "output": output_schema(args.output_schema),
    }
    try:
        result = _ran(args, prompt, options)
    except OutputInvalid as exc:
        result = exc.result
    print_result(result, as_json=args.json)
    report_to_ci(run_figures(result), settings)
    return 0 if result.ok else 1


def _ran(args: argparse.Namespace, prompt: str, options: dict[str, Any]) -> RunResult:
    """The run, its events as --show-events prints them, in the live view on a terminal (a person
    there answers what the policy asks), or unseen."""
    from ..api import run

    if args.show_events:
        return _streamed(prompt, options, lambda event: print_json(event.to_dict(), sys.stderr))
    if sys.stderr.isatty() and not args.quiet:
        from ..approvals.person import Person, terminal_reachable
        from ..console import RunView

        settings = options["settings"]
        with RunView(sys.stderr, model=settings.model or "") as view:
            if settings.approvals is not None and terminal_reachable():  # what the policy asks: you
                options["approve"] = Person(view.paused, settings.approval_timeout)
            return _streamed(prompt, options, view.show)
    return run(prompt, **options)


def _streamed(prompt: str, options: dict[str, Any], show: Callable[[Event], None]) -> RunResult:
    from ..api import stream
    from ..events import Done

    for event in stream(prompt, **options):
        if isinstance(event, Done):  # the last
            return event.result
        show(event)
    raise AssertionError("a run's events end with Done")


def _cmd_config(args: argparse.Namespace) -> int:
    from ..opencode.config import build_config, known_models

    settings = settings_of(args)
    if not settings.model:
        raise SettingsError("no model given: pass -m MODEL (e.g. openai/gpt-4o-mini or litellm_proxy/<group>)")
    config = build_config(
        model=settings.model,
        base_url="http://127.0.0.1:<port>/v1",
        api_key_ref="{file:<private dir>/token}",
        small_model=settings.small_model,
        mcp=settings.mcp,
        permissions=settings.permissions,
        agent=settings.agent,
        disable_tools=settings.disable_tools,
        user_config=settings.opencode_config,
        known=known_models(settings.pricing, settings.model, settings.small_model),
    )
    text = json.dumps(config, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose

    checks = diagnose(settings_of(args))
    if args.json:
        print_json([check.to_dict() for check in checks])
    else:
        print("\n".join(check.line() for check in checks))
    return 0 if all(check.ok for check in checks) else 1


def _cmd_sessions(args: argparse.Namespace) -> int:
    from ..accounting.report import render_table
    from ..accounting.times import utc_time
    from ..opencode.sessions import kept_sessions, prune_sessions

    data_dir = settings_of(args).data_dir
    if args.action == "prune":
        if args.older_than is None or not 0 <= args.older_than < float("inf"):
            raise SettingsError("sessions prune needs --older-than DAYS (0 or more; 0 removes every kept session)")
        sessions = prune_sessions(data_dir, args.older_than)
        verb = "removed"
    else:
        sessions = kept_sessions(data_dir)
        verb = "kept"
    if args.json:
        print_json([kept.to_dict() for kept in sessions])
        return 0
    rows = [
        [
            kept.session_id,
            utc_time(kept.started, "-"),
            utc_time(kept.last_used, "-"),
            kept.workdir or "-",
            kept.model or "-",
            f"{kept.size_bytes / 1e6:.1f} MB",
        ]
        for kept in sessions
    ]
    total = sum(kept.size_bytes for kept in sessions)
    rows.append([f"{len(sessions)} {verb}", "", "", "", "", f"{total / 1e6:.1f} MB"])
    sys.stdout.write(render_table(["session", "started", "last used", "workdir", "model", "size"], rows))
    return 0


def _cmd_install_opencode(args: argparse.Namespace) -> int:
    from ..opencode.binary import install_opencode
    from .doctor import system_packages

    settings = load_settings(args.config)
    print(install_opencode(settings.data_dir, args.version))
    packages = system_packages(settings)  # what else a run needs, from the system, with its command
    if not packages.ok:
        print(f"opencode-gateway: a run also needs what is {packages.detail}", file=sys.stderr)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from ..serve.server import serve

    if args.action == "login":
        from ..serve.launch import login_url

        print(login_url(load_settings(args.config).data_dir))
        return 0

    def announce(url: str, token_file: str, login_url: str) -> None:
        print(
            f"opencode-gateway: serving on {url} (token in {token_file}); launch OpenCode with "
            "`opencode-gateway opencode -m MODEL`; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        print(f"opencode-gateway: spend dashboard: {login_url} (a one-time login)", file=sys.stderr, flush=True)

    asyncio.run(
        owning_loop(
            serve(
                settings_of(args),
                host=args.host or "127.0.0.1",
                port=args.port,
                allow_remote=args.host is not None,
                on_ready=announce,
            )
        )
    )
    return 0


def _launch_env(args: argparse.Namespace) -> tuple[RunSettings, ServerState, dict[str, str]]:
    from ..serve.launch import ServerState, launch_env

    unchecked = settings_of(args)
    server = ServerState.read(unchecked.data_dir)
    if unchecked.gateway_api_base is None and server.gateway is not None:  # the server talks to the gateway
        unchecked = unchecked.replace(api_base=server.gateway)
    settings = unchecked.validated()
    return settings, server, launch_env(settings, server, workdir=Path.cwd())


def _cmd_opencode(args: argparse.Namespace) -> int:
    from ..serve.launch import run_opencode

    settings, server, env = _launch_env(args)
    arguments = args.opencode_args[1:] if args.opencode_args[:1] == ["--"] else args.opencode_args
    return run_opencode(settings, server, arguments, env)


def _cmd_env(args: argparse.Namespace) -> int:
    from ..serve.launch import shell_exports

    _, _, env = _launch_env(args)
    sys.stdout.write(
        "# OpenCode on the running opencode-gateway server; use it in a subshell:\n"
        '#   ( eval "$(opencode-gateway env -m MODEL)"; opencode )\n' + shell_exports(env)
    )
    return 0


def _cmd_batch(args: argparse.Namespace) -> int:
    import asyncio

    from ..batch.local import Batch, Executor, LocalExecutor, load_tasks, run_batch, summary

    settings = settings_of(args)
    batch = Batch.of(
        Path(args.tasks),
        batch_id=args.batch_id,
        workdir_root=Path(args.workdir_root) if args.workdir_root else None,
        results_file=Path(args.out) if args.out else None,
    )
    tasks = load_tasks(batch.tasks_file)
    check_choices(settings)  # the executor among them
    executor: Executor = LocalExecutor()
    if settings.executor == "ray":
        from ..batch.ray_cluster import RayExecutor

        executor = RayExecutor(
            settings.ledger_location,
            address=args.ray_address,
            num_cpus=args.ray_num_cpus,
            max_retries=args.ray_max_retries,
        )
    started = time.monotonic()
    try:
        outcomes = asyncio.run(
            owning_loop(
                run_batch(tasks, batch, settings, concurrency=args.concurrency, resume=args.resume, executor=executor)
            )
        )
    finally:
        executor.close()
    skipped = len(tasks) - len(outcomes)
    if args.json:
        print_json(
            {
                "batch_id": batch.batch_id,
                "results_file": str(batch.results_file),
                "skipped": skipped,
                "tasks": [{"task_id": o.task_id, "ok": o.ok} for o in outcomes],
            }
        )
    else:
        sys.stdout.write(summary(outcomes, time.monotonic() - started))
        if skipped:
            print(f"{skipped} task(s) finished in an earlier invocation were skipped (--resume)")
        print(
            f"results: {batch.results_file}\nper run: opencode-gateway report --by run --where "
            f"batch_id={batch.batch_id}"
        )
    report_to_ci(batch_figures(batch.batch_id, settings.model or "", outcomes), settings)
    return 0 if all(o.ok for o in outcomes) else 1
