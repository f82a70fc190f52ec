"""The flags several commands share, and the parser that says which flag a misspelt one meant:
each flag is defined once, with its help, for every command that takes it (docs/cli.md is
checked against them)."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

from ..opencode.config import PERMISSION_MODES, TOOLS
from ..opencode.sandbox import SANDBOX_KINDS, SANDBOX_NETWORKS

__all__ = [
    "Parser",
    "all_flags",
    "attribution_flags",
    "budget_flags",
    "common_flags",
    "ledger_flag",
    "limit_flags",
    "opencode_bin_flag",
    "route_flag",
    "sandbox_flags",
    "upstream_flags",
]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, exit code 2, and the nearest command or flag to a misspelt one."""
        self.exit(2, f"{self.prog}: error: {message}{self._did_you_mean(message)} (see --help)\n")

    def _did_you_mean(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        unknown = re.search(r"unrecognized arguments: (-[^\s=]+)", message)
        if choice:
            word, candidates = choice.group(1), re.findall(r"'([^']+)'", choice.group(2))
        elif unknown:
            word, candidates = unknown.group(1), sorted(all_flags(self))
        else:
            return ""
        close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
        return f"; did you mean {close[0]}?" if close else ""


def all_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and of its commands."""
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= all_flags(command)
    return flags


def upstream_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-base", metavar="URL", help="gateway URL (litellm_proxy/ models) or provider API base")
    key = parser.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help="virtual key or provider key; visible to local users in the "
        "process list: prefer --api-key-file or LITELLM_PROXY_API_KEY",
    )
    key.add_argument("--api-key-file", metavar="PATH", help="read the key from this file (kept out of argv)")


def limit_flags(parser: argparse.ArgumentParser, of: str) -> None:
    """What bounds a run: its time, its budgets, and which tool calls it may make."""
    parser.add_argument("--timeout", type=float, metavar="S", help=f"wall-clock limit of {of} (default: 1800)")
    budget_flags(parser, of)
    approval_flags(parser, of)


def budget_flags(parser: argparse.ArgumentParser, of: str) -> None:
    parser.add_argument("--max-cost", type=float, metavar="USD", help=f"stop {of} before it spends more")
    parser.add_argument("--max-requests", type=int, metavar="N", help=f"stop {of} after N upstream calls")
    parser.add_argument("--max-tokens", type=int, metavar="N", help=f"stop {of} after N input+output tokens")
    parser.add_argument("--max-turns", type=int, metavar="N", help=f"stop {of} after N main-model requests")


def approval_flags(parser: argparse.ArgumentParser, of: str) -> None:
    parser.add_argument(
        "--approve",
        dest="approvals",
        metavar="FILE",
        help=f"a YAML policy that answers every tool call of {of} (rules by tool and pattern, a default; docs/cli.md)",
    )
    parser.add_argument(
        "--approval-timeout", type=float, metavar="S", help="an ask unanswered this long is a deny (default: 300)"
    )


def sandbox_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sandbox", choices=SANDBOX_KINDS, help="confine OpenCode with bubblewrap (default: auto, when it works here)"
    )
    parser.add_argument(
        "--sandbox-network",
        choices=SANDBOX_NETWORKS,
        help="in the sandbox, reach only the run's endpoint (default) or the host's network",
    )
    parser.add_argument(
        "--sandbox-allow-write",
        action="append",
        default=[],
        metavar="PATH",
        help="a path the sandboxed run may write besides its workdir; repeatable",
    )
    parser.add_argument(
        "--sandbox-allow-read",
        action="append",
        default=[],
        metavar="PATH",
        help="a path the sandbox hides (in the real HOME or /tmp) that the run may read; repeatable",
    )


def ledger_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ledger",
        metavar="PATH|URL",
        help="the ledger: a file, or a team's postgresql://user@host/db (default: $OPENCODE_GATEWAY_LEDGER, "
        "else <data dir>/ledger.db)",
    )


def opencode_bin_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--opencode-bin",
        metavar="PATH",
        help="the opencode binary (default: $OPENCODE_BIN, the one install-opencode put in the data dir, or PATH)",
    )


def attribution_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="spend-log metadata")
    parser.add_argument("--tag", dest="tags", action="append", default=[], metavar="TAG", help="extra spend tag")


def route_flag(parser: argparse.ArgumentParser) -> None:
    """Not for a launch: its background calls follow the routes of the settings `serve` read."""
    parser.add_argument(
        "--route",
        dest="routes",
        action="append",
        default=[],
        metavar="PURPOSE=MODEL",
        help="send OpenCode's title, summary or compaction calls to MODEL, whatever OpenCode asks "
        "for (a summary's or compaction's model must take as much input as -m); repeatable",
    )


def common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-m", "--model", help="LiteLLM model (openai/gpt-4o-mini) or gateway group (litellm_proxy/<group>)"
    )
    parser.add_argument(
        "--small-model",
        metavar="MODEL",
        help="model of OpenCode's background calls (titles, summaries), e.g. a cheap group (default: -m)",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (see config.example.yaml)")
    parser.add_argument(
        "--permissions",
        metavar="MODE",
        help=f"what the agent may do: {', '.join(PERMISSION_MODES)} (default: the agent's own; build: full)",
    )
    parser.add_argument(
        "--disable-tool",
        dest="disable_tools",
        action="append",
        default=[],
        metavar="NAME",
        help=f"turn a tool off: {', '.join(TOOLS)}",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass the variable NAME to OpenCode (its environment is otherwise only PATH, LANG, "
        "LC_*, TZ, TERM and the like); repeatable; never a key the gateway uses",
    )
