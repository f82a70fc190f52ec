"""Which tool calls a run's agent may make, as data: ordered rules by tool and pattern, and what
to do with a call no rule matches.

    approvals:
      default: ask            # allow | deny | ask (a person at a terminal or a callback; else deny)
      rules:
        bash: {"git *": allow, "rm *": deny}
        edit: {"src/**": allow}
        webfetch: deny

A rule's pattern matches the call's subject: bash's command, the file a tool reads or writes
(relative to the workdir when inside it), the URL a fetch gets, the pattern a search looks for.
The first rule of the call's tool that matches decides.

The agent chooses the subject, so each kind is matched as the program that acts on it reads it:
- A command is taken by an allow rule only when the shell would run it word for word: plain words
  and quotes, nothing the shell expands (`$`, backquotes, globs, braces, `~`), no chain (`;`, `&&`,
  `|`, a newline...) and no redirection but `2>&1` and `>/dev/null`. Anything else falls to the
  deny and ask rules, which match any of its parts: `git status; rm -rf ~` is not `git *`, and is
  `rm *`.
- A path is matched as it is spelled (`.` and `..` folded, relative to the workdir) and as it
  resolves (symlinks followed): an allow rule must take both, a deny or ask rule either. So
  `src/../.envrc` is `.envrc`, and a committed link `src/docs -> ../.github` is `.github`.
- A URL is matched by its parts: scheme, host, port, then path and query. A `*` in the host never
  crosses `/ ? # @ :`, and a URL with a user (`https://x@host`) is never allowed.
Pure but for resolving a path's symlinks: a policy is decided in microseconds and tested without
a run.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit

from ..errors import SettingsError

__all__ = [
    "ANSWERS",
    "NATIVE_TOOLS",
    "Answer",
    "ApprovalRequest",
    "Policy",
    "Rule",
    "literal",
    "parse_policy",
    "subject_of",
]

Answer = Literal["allow", "deny", "ask"]
ANSWERS: tuple[Answer, ...] = ("allow", "deny", "ask")

# What a rule's pattern matches, per tool (OpenCode's native names): the argument that says what
# the call does. A tool not here is decided by its rules without a pattern (`webfetch: deny`).
_SUBJECTS = {
    "bash": "command",
    "read": "filePath",
    "edit": "filePath",
    "write": "filePath",
    "patch": "filePath",
    "multiedit": "filePath",
    "list": "path",
    "glob": "pattern",
    "grep": "pattern",
    "webfetch": "url",
}
_PATHS = {"filePath", "path"}
# OpenCode 2's names for 1.18's tools: a rule may use either spelling, and takes the calls of both.
_SPELLINGS = {"shell": "bash", "subagent": "task"}
# OpenCode's own tools, in both generations' spellings (a policy may name any of them, `*`, or an
# MCP server's tool as `<server>_<tool>`): a misspelt tool would otherwise be a rule that never matches.
NATIVE_TOOLS = frozenset(
    {
        *_SUBJECTS,
        *_SPELLINGS,
        *("apply_patch", "codesearch", "execute", "lsp", "question", "skill", "task", "todoread", "todowrite"),
        "websearch",
    }
)


def _tool(name: str) -> str:
    """A tool's name in one spelling (1.18's), whichever generation wrote it."""
    return _SPELLINGS.get(name, name)


# What chains one shell command to another (or runs one inside): deny and ask rules look at each part.
_CHAINS = re.compile(r"\|\||&&|[;|\n`]|(?<![<>])&(?!>)|\$\(|<\(|>\(")  # not 2>&1, &> (redirections)
# A command the shell runs word for word: unquoted characters that mean nothing to it, single
# quotes (nothing inside is special), double quotes without `$`, backquote, backslash or `!`, and
# the redirections that touch no file. Everything else (expansions of every kind, globs, braces,
# `~`, comments, chains, here-docs, other redirections) is not literal.
_LITERAL_TOKEN = re.compile(
    r"""[ \t]+|[12]?>&[12](?![^ \t])|[12&]?>/dev/null(?![^ \t])|(?:[A-Za-z0-9_@%+=:,./-]|'[^']*'|"[^"$`\\!]*")+"""
)
# Where a `*` in a URL's host stops: it never reaches another part.
_URL_HOST_STAR = "[^/?#@:]*"


def literal(command: str) -> bool:
    """Whether the shell runs `command` as the words it shows, with nothing expanded or chained:
    read token by token (linear, whatever the agent writes)."""
    at = 0
    while at < len(command):
        token = _LITERAL_TOKEN.match(command, at)
        if token is None:
            return False
        at = token.end()
    return True


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call the agent is about to make, as the host is asked about it."""

    tool: str  # OpenCode's name (bash, edit, webfetch, ...)
    arguments: Mapping[str, Any] = field(default_factory=dict)
    subject: str | None = None  # what rules match: subject_of(tool, arguments, workdir)
    session_id: str | None = None
    call_id: str | None = None
    aliases: tuple[str, ...] = ()  # the subject's other spellings (a path as it resolves): an allow takes all

    @classmethod
    def of(cls, tool: str, arguments: Mapping[str, Any], workdir: str | None, **ids: str | None) -> ApprovalRequest:
        """The request for a call as the agent made it, its path resolved against `workdir`."""
        subject = subject_of(tool, arguments, workdir)
        resolved = _resolved(tool, arguments, workdir)
        aliases = (resolved,) if resolved is not None and resolved != subject else ()
        return cls(tool, arguments, subject, aliases=aliases, **ids)


def _argument(tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The argument a rule's pattern matches (OpenCode 2 names a file `path`, 1.18 `filePath`)."""
    key = _SUBJECTS.get(_tool(tool))
    value = arguments.get(key) if key else None
    if value is None and key == "filePath":
        value = arguments.get("path")
    return value if isinstance(value, str) else None


def _path_arg(tool: str, arguments: Mapping[str, Any]) -> str | None:
    return _argument(tool, arguments) if _SUBJECTS.get(_tool(tool)) in _PATHS else None


def _relative(path: str, root: str) -> str:
    """`path` (absolute, normalised) relative to `root` when inside it, else as it is."""
    return path if not PurePosixPath(path).is_relative_to(root) else str(PurePosixPath(path).relative_to(root))


def subject_of(tool: str, arguments: Mapping[str, Any], workdir: str | None = None) -> str | None:
    """What a rule's pattern is matched against: a path as spelled, `.` and `..` folded, relative
    to `workdir` when inside it."""
    path = _path_arg(tool, arguments)
    if path is not None and workdir:
        return _relative(posixpath.normpath(posixpath.join(workdir, path)), posixpath.normpath(workdir))
    return _argument(tool, arguments)


def _resolved(tool: str, arguments: Mapping[str, Any], workdir: str | None) -> str | None:
    """A path as the file system resolves it (every symlink, the workdir's too), relative to the
    resolved workdir when inside it: where a write through a committed link lands."""
    path = _path_arg(tool, arguments)
    if path is None or not workdir:
        return None
    return _relative(os.path.realpath(os.path.join(workdir, path)), os.path.realpath(workdir))


@functools.cache
def _compiled(pattern: str, paths: bool) -> re.Pattern[str]:
    """A glob: in paths `**` crosses folders and `*` does not; in a command `*` matches anything."""
    out = []
    for piece in re.split(r"(\*\*/?|\*|\?)", pattern):
        if piece.startswith("**"):
            out.append("(?:.*/)?" if piece.endswith("/") else ".*")
        elif piece == "*":
            out.append("[^/]*" if paths else ".*")
        elif piece == "?":
            out.append("[^/]" if paths else ".")
        else:
            out.append(re.escape(piece))
    return re.compile("".join(out), re.DOTALL)


def _url_matches(pattern: str, url: str) -> bool:
    """A URL pattern against a URL, part by part: the scheme and host as globs whose `*` stays in
    its part, the port as the URL's (its scheme's default when not written), the path and query as
    a glob whose `*` crosses folders. A URL with a user or a malformed one matches no pattern."""
    try:
        want, got = urlsplit(pattern), urlsplit(url)
        want_port, got_port = want.port, got.port
    except ValueError:
        return False
    if not want.scheme or got.username is not None or got.password is not None:
        return False if want.scheme else _compiled(pattern, False).fullmatch(url) is not None
    host = re.escape(want.hostname or "").replace(re.escape("*"), _URL_HOST_STAR)
    defaults = {"http": 80, "https": 443}
    return (
        _compiled(want.scheme, True).fullmatch(got.scheme) is not None
        and re.fullmatch(host, got.hostname or "") is not None
        and (want_port or defaults.get(want.scheme)) == (got_port or defaults.get(got.scheme))
        and _compiled(_path_and_query(want), False).fullmatch(_path_and_query(got)) is not None
    )


def _path_and_query(parts: SplitResult) -> str:
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


@dataclass(frozen=True)
class Rule:
    tool: str
    pattern: str | None  # None: every call of the tool
    answer: Answer

    def matches(self, request: ApprovalRequest) -> bool:
        if _tool(self.tool) not in (_tool(request.tool), "*"):
            return False
        if self.pattern is None:
            return True
        if request.subject is None:
            return False
        if request.tool == "webfetch":
            return _url_matches(self.pattern, request.subject)
        if _tool(request.tool) == "bash":
            return self._matches_command(request.subject)
        pattern = _compiled(self.pattern, _SUBJECTS.get(_tool(request.tool)) in _PATHS)
        spellings = [request.subject, *request.aliases]
        found = [pattern.fullmatch(spelling) is not None for spelling in spellings]
        return all(found) if self.answer == "allow" else any(found)

    def _matches_command(self, command: str) -> bool:
        pattern = _compiled(self.pattern or "*", False)
        if self.answer == "allow":
            return literal(command) and pattern.fullmatch(command.strip()) is not None
        parts = [part.strip() for part in _CHAINS.split(command)]
        return any(pattern.fullmatch(part) for part in (command, *parts))

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool} {self.pattern!r}"


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...] = ()
    default: Answer = "ask"

    def check_tools(self, mcp: Collection[str] = ()) -> None:
        """Each rule names a tool a run can call (one of OpenCode's, `*`, or a tool of one of the
        run's MCP servers, `<server>_<tool>`): a misspelt one (`bassh: deny`) would never match."""
        for rule in self.rules:
            tool = rule.tool
            if tool == "*" or tool in NATIVE_TOOLS or any(tool.startswith(f"{server}_") for server in mcp):
                continue
            servers = f", or <server>_<tool> for an MCP server's ({', '.join(mcp)})" if mcp else ""
            raise SettingsError(
                f"approvals.rules: {tool!r} is not a tool OpenCode has: use {', '.join(sorted(NATIVE_TOOLS))} "
                f"or *{servers}"
            )

    def answer(self, request: ApprovalRequest) -> tuple[Answer, Rule | None]:
        """The first matching rule's answer, or the default (no rule)."""
        for rule in self.rules:
            if rule.matches(request):
                return rule.answer, rule
        return self.default, None


def _answer(value: Any, where: str) -> Answer:
    if value not in ANSWERS:
        raise SettingsError(f"{where}: {value!r} is not one of {', '.join(ANSWERS)}")
    return value  # type: ignore[no-any-return]


def parse_policy(data: Any, where: str = "approvals") -> Policy:
    """A policy from its settings shape; a SettingsError naming the rule that is wrong."""
    if not isinstance(data, Mapping):
        raise SettingsError(f"{where}: expected a mapping with `rules` and `default`, not {type(data).__name__}")
    unknown = set(data) - {"rules", "default"}
    if unknown:
        raise SettingsError(f"{where}: unknown key(s) {', '.join(map(repr, sorted(unknown)))}: use rules, default")
    default = _answer(data.get("default", "ask"), f"{where}.default")
    rules_data = data.get("rules") or {}
    if not isinstance(rules_data, Mapping):
        raise SettingsError(f"{where}.rules: expected a mapping of tool names, not {type(rules_data).__name__}")
    rules = [rule for tool, answers in rules_data.items() for rule in _tool_rules(tool, answers, f"{where}.rules")]
    return Policy(tuple(rules), default)


def _tool_rules(tool: Any, answers: Any, where: str) -> list[Rule]:
    """One tool's rules: `tool: answer`, or `tool: {pattern: answer, ...}` in order."""
    if not isinstance(tool, str) or not tool:
        raise SettingsError(f"{where}: {tool!r} is not a tool name")
    if isinstance(answers, str):
        return [Rule(tool, None, _answer(answers, f"{where}.{tool}"))]
    if not isinstance(answers, Mapping) or not answers:
        raise SettingsError(f"{where}.{tool}: expected allow/deny/ask or a mapping of patterns to them")
    rules = []
    for pattern, answer in answers.items():
        if not isinstance(pattern, str) or not pattern:
            raise SettingsError(f"{where}.{tool}: {pattern!r} is not a pattern")
        if tool != "*" and _tool(tool) not in _SUBJECTS:
            raise SettingsError(
                f"{where}.{tool}[{pattern!r}]: {tool} calls have no subject to match; "
                f"use `{tool}: allow|deny|ask` (patterns work for {', '.join(_SUBJECTS)})"
            )
        rules.append(Rule(tool, pattern, _answer(answer, f"{where}.{tool}[{pattern!r}]")))
    return rules
