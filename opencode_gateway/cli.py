"""The `opencode-gateway` command. A thin layer: every behaviour lives in the Python API.

Exit codes: 0 the run finished; 1 the run failed (error, timeout, budget exceeded); 2 bad flags
or settings; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .errors import GatewayError, SettingsError
from .settings import PERMISSION_MODES, Settings, load_settings

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, exit code 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _metadata(pairs: Sequence[str], flag: str = "--metadata") -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{flag} {pair!r} is not KEY=VALUE (e.g. {flag} ticket=ENG-412)")
        metadata[key.strip()] = value
    return metadata


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read the {what} file {path}: {exc.strerror}") from None


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
    base = load_settings(args.config)
    instructions = getattr(args, "instructions", None)
    return base.replace(
        model=args.model,
        api_base=getattr(args, "api_base", None),
        api_key=getattr(args, "api_key", None),
        permissions=args.permissions,
        disable_tools=(*base.disable_tools, *args.disable_tool) if args.disable_tool else None,
        tags=(*base.tags, *args.tag) if getattr(args, "tag", None) else None,
        metadata={**base.metadata, **_metadata(args.metadata)} if getattr(args, "metadata", None) else None,
        agent=getattr(args, "agent", None),
        instructions=_read(instructions, "instructions") if instructions else None,
        skills=(*base.skills, *args.skill) if getattr(args, "skill", None) else None,
        timeout=getattr(args, "timeout", None),
        opencode_bin=getattr(args, "opencode_bin", None),
        ledger=Path(args.ledger) if getattr(args, "ledger", None) else None,
        max_cost=getattr(args, "max_cost", None),
        max_requests=getattr(args, "max_requests", None),
        max_tokens=getattr(args, "max_tokens", None),
    )


def _print_json(data: Any, stream: Any = None) -> None:
    print(json.dumps(data, ensure_ascii=False), file=stream or sys.stdout, flush=True)


def _summary(result: Any) -> str:
    usage = result.usage
    cost = "cost unknown" if result.cost is None else f"${result.cost:.6f}"
    parts = [
        result.stop_reason,
        f"{usage.requests} request{'s' if usage.requests != 1 else ''}",
        f"{usage.input_tokens:,} in / {usage.output_tokens:,} out tokens",
        cost,
        f"session {result.session_id or '-'}",
    ]
    return "opencode-gateway: " + " · ".join(parts)


def _cmd_run(args: argparse.Namespace) -> int:
    from .errors import OutputInvalid
    from .events import Done
    from .runner import run, stream

    settings = _settings(args)
    prompt = sys.stdin.read() if args.prompt == ["-"] else " ".join(args.prompt)
    options: dict[str, Any] = {"settings": settings, "workdir": args.workdir, "session_id": args.session,
                               "output": _output_schema(args.output_schema)}
    try:
        if args.show_events:
            for event in stream(prompt, **options):
                if isinstance(event, Done):
                    result = event.result
                else:
                    _print_json(event.to_dict(), sys.stderr)
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
        print(_summary(result), file=sys.stderr)
    return 0 if result.ok else 1


def _cmd_config(args: argparse.Namespace) -> int:
    from .opencode.config import build_config

    settings = _settings(args)
    if not settings.model:
        raise SettingsError("no model given: pass -m MODEL (e.g. openai/gpt-4o-mini or litellm_proxy/<group>)")
    config = build_config(
        model=settings.model, base_url="http://127.0.0.1:<port>/v1", api_key_ref="{file:<private dir>/token}",
        permissions=settings.permissions, disable_tools=settings.disable_tools, user_config=settings.opencode_config,
    )
    text = json.dumps(config, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    settings = load_settings(args.config).replace(ledger=Path(args.ledger) if args.ledger else None)
    if args.reconcile:
        return _reconcile(args, settings)
    from .accounting.report import build_report

    where = list(_metadata(args.where, "--where").items())
    report = build_report(settings.ledger_path, by=args.by, since=args.since, until=args.until, where=where)
    sys.stdout.write(report.render(args.format))
    return 0


def _reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from .gateway.reconcile import reconcile, render

    base, key = args.api_base or settings.gateway_api_base, args.api_key or settings.gateway_api_key
    if not base or not key:
        raise SettingsError("--reconcile needs the gateway: --api-base URL and --api-key KEY (an admin key)")
    lines = reconcile(settings.ledger_path, base, key, run_id=args.run, since=args.since, wait=args.wait)
    sys.stdout.write(render(lines, "json" if args.format == "json" else "table"))
    return 0 if lines and all(line.status == "ok" for line in lines) else 1


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", help="LiteLLM model (openai/gpt-4o-mini) or gateway group (litellm_proxy/<group>)")
    parser.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    parser.add_argument("--permissions", metavar="MODE",
                        help=f"what the agent may do: {', '.join(PERMISSION_MODES)} (default: full)")
    parser.add_argument("--disable-tool", action="append", default=[], metavar="NAME",
                        help="turn a tool off: read, write, edit, bash, glob, grep, ls, web_search, task, skill")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="opencode-gateway", description="Run OpenCode on any LiteLLM model group, with exact cost.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run OpenCode once on a prompt")
    _common(run)
    run.add_argument("--api-base", metavar="URL", help="gateway URL (litellm_proxy/ models) or provider API base")
    run.add_argument("--api-key", metavar="KEY", help="virtual key or provider key (prefer LITELLM_PROXY_API_KEY)")
    run.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="spend-log metadata")
    run.add_argument("--tag", action="append", default=[], metavar="TAG", help="extra spend tag")
    run.add_argument("--agent", help="OpenCode agent (default: build)")
    run.add_argument("--instructions", metavar="FILE", help="extra system instructions for the run, from a file")
    run.add_argument("--skill", action="append", default=[], metavar="DIR",
                     help="a skill folder (with a SKILL.md) the run may use; repeatable")
    run.add_argument("--output-schema", metavar="FILE",
                     help="a JSON schema file: the answer must end with a JSON object matching it (printed alone)")
    run.add_argument("--workdir", default=".", metavar="DIR", help="where OpenCode works (default: .)")
    run.add_argument("--session", metavar="ID", help="continue a session of an earlier run")
    run.add_argument("--timeout", type=float, metavar="S", help="wall-clock limit of the run (default: 1800)")
    run.add_argument("--opencode-bin", metavar="PATH", help="the opencode binary (default: $OPENCODE_BIN or PATH)")
    run.add_argument("--max-cost", type=float, metavar="USD", help="stop the run before it spends more")
    run.add_argument("--max-requests", type=int, metavar="N", help="stop the run after N upstream calls")
    run.add_argument("--max-tokens", type=int, metavar="N", help="stop the run after N input+output tokens")
    run.add_argument("--ledger", metavar="PATH", help="the ledger file (default: <data dir>/ledger.db)")
    run.add_argument("--json", action="store_true", help="print the RunResult as one JSON object")
    run.add_argument("--show-events", action="store_true", help="print events to stderr as they happen")
    run.add_argument("prompt", nargs="+", help="the task; - reads it from stdin")
    run.set_defaults(handler=_cmd_run)

    config = commands.add_parser("config", help="print the isolated opencode.json a run would use")
    _common(config)
    config.add_argument("--out", metavar="PATH", help="write it to a file instead of stdout")
    config.set_defaults(handler=_cmd_config)

    report = commands.add_parser("report", help="spend per ticket, metadata key, model, tag, day, run or session")
    report.add_argument("--by", default="ticket", metavar="KEY",
                        help="a metadata key (default: ticket), or model, tag, day, run, session")
    report.add_argument("--since", metavar="DATE", help="from this date (YYYY-MM-DD, UTC) or ISO time")
    report.add_argument("--until", metavar="DATE", help="up to this date, inclusive, or ISO time")
    report.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                        help="only runs whose metadata KEY is VALUE")
    report.add_argument("--format", choices=("table", "json", "csv"), default="table")
    report.add_argument("--ledger", metavar="PATH", help="the ledger file (default: <data dir>/ledger.db)")
    report.add_argument("--config", metavar="FILE", help="settings file (for its data_dir or ledger)")
    report.add_argument("--reconcile", action="store_true",
                        help="compare each request's cost with the gateway's spend log (exit 1 on any difference)")
    report.add_argument("--api-base", metavar="URL", help="with --reconcile: the gateway URL")
    report.add_argument("--api-key", metavar="KEY", help="with --reconcile: an admin key of the gateway")
    report.add_argument("--run", metavar="ID", help="with --reconcile: the run to check")
    report.add_argument("--wait", type=float, default=15.0, metavar="S",
                        help="with --reconcile: wait up to S seconds for spend logs to arrive (default: 15)")
    report.set_defaults(handler=_cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except SettingsError as exc:
        print(f"opencode-gateway: error: {exc}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"opencode-gateway: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("opencode-gateway: interrupted", file=sys.stderr)
        return 130
