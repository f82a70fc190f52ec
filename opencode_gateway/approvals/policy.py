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
The first rule of the call's tool that matches decides. A bash command that chains others (`;`,
`&&`, `|`, `$(...)`, a newline...) is never taken by an allow rule, and a deny or ask rule
matches any of its parts: `git status; rm -rf ~` is not `git *`, and is `rm *`. Pure: a policy
is decided in microseconds and tested without a run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from ..errors import SettingsError

__all__ = ["ANSWERS", "Answer", "ApprovalRequest", "Policy", "Rule", "parse_policy", "subject_of"]

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
# What chains one shell command to another (or runs one inside): `git status; rm -rf ~` must not
# pass as `git *`. An allow rule takes a simple command only; deny and ask rules look at each part.
_CHAINS = re.compile(r"\|\||&&|[;|\n`]|(?<![<>])&(?!>)|\$\(|<\(|>\(")  # not 2>&1, &> (redirections)


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call the agent is about to make, as the host is asked about it."""

    tool: str  # OpenCode's name (bash, edit, webfetch, ...)
    arguments: Mapping[str, Any] = field(default_factory=dict)
    subject: str | None = None  # what rules match: subject_of(tool, arguments, workdir)
    session_id: str | None = None
    call_id: str | None = None


def subject_of(tool: str, arguments: Mapping[str, Any], workdir: str | None = None) -> str | None:
    """What a rule's pattern is matched against; a path inside `workdir` relative to it."""
    key = _SUBJECTS.get(tool)
    value = arguments.get(key) if key else None
    if not isinstance(value, str):
        return None
    if key in _PATHS and workdir:
        path, root = PurePosixPath(value), PurePosixPath(workdir)
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return value


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


@dataclass(frozen=True)
class Rule:
    tool: str
    pattern: str | None  # None: every call of the tool
    answer: Answer

    def matches(self, request: ApprovalRequest) -> bool:
        if self.tool not in (request.tool, "*"):
            return False
        if self.pattern is None:
            return True
        if request.subject is None:
            return False
        paths = _SUBJECTS.get(request.tool) in _PATHS
        pattern = _compiled(self.pattern, paths)
        if request.tool != "bash":
            return pattern.fullmatch(request.subject) is not None
        parts = [part.strip() for part in _CHAINS.split(request.subject)]
        if self.answer == "allow":
            return len(parts) == 1 and pattern.fullmatch(parts[0]) is not None
        return any(pattern.fullmatch(part) for part in (request.subject, *parts))

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool} {self.pattern!r}"


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...] = ()
    default: Answer = "ask"

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
        if tool != "*" and tool not in _SUBJECTS:
            raise SettingsError(
                f"{where}.{tool}[{pattern!r}]: {tool} calls have no subject to match; "
                f"use `{tool}: allow|deny|ask` (patterns work for {', '.join(_SUBJECTS)})"
            )
        rules.append(Rule(tool, pattern, _answer(answer, f"{where}.{tool}[{pattern!r}]")))
    return rules
