"""A policy is data: ordered rules by tool and pattern, and a default. The first rule of a call's
tool that matches its subject decides; a wrong rule is one line that names it."""

from __future__ import annotations

import pytest

from opencode_gateway.approvals.policy import ApprovalRequest, Policy, Rule, parse_policy, subject_of
from opencode_gateway.errors import SettingsError

POLICY = parse_policy(
    {
        "rules": {
            "bash": {"git push *": "ask", "git *": "allow", "rm *": "deny"},
            "edit": {"src/**": "allow", "*.md": "allow"},
            "webfetch": "deny",
        },
        "default": "ask",
    }
)


def _bash(command: str) -> ApprovalRequest:
    return ApprovalRequest("bash", {"command": command}, subject_of("bash", {"command": command}))


def _edit(path: str) -> ApprovalRequest:
    return ApprovalRequest("edit", {"filePath": path}, subject_of("edit", {"filePath": path}, "/work"))


def test_the_first_matching_rule_of_the_tool_decides() -> None:
    assert POLICY.answer(_bash("git status"))[0] == "allow"
    assert POLICY.answer(_bash("git push origin main"))[0] == "ask"  # listed before "git *"
    assert POLICY.answer(_bash("rm -rf /"))[0] == "deny"
    assert POLICY.answer(_bash("make test")) == ("ask", None)  # the default


def test_in_a_path_double_star_crosses_folders_and_a_star_does_not() -> None:
    assert POLICY.answer(_edit("/work/src/a/b.py"))[0] == "allow"  # relative to the workdir
    assert POLICY.answer(_edit("/work/README.md"))[0] == "allow"
    assert POLICY.answer(_edit("/work/docs/README.md"))[0] == "ask"  # "*.md" stays in the top folder
    assert POLICY.answer(_edit("/etc/passwd"))[0] == "ask"  # outside: matched as it is, by nothing here


def test_a_command_that_chains_another_is_never_allowed_by_a_prefix_and_denied_by_any_part() -> None:
    assert POLICY.answer(_bash("git log -- a/b"))[0] == "allow"  # a star in a command crosses slashes
    for chained in ("git status; rm -rf x", "git log && rm -rf x", "git log\nrm -rf x"):
        assert POLICY.answer(_bash(chained))[0] == "deny", chained
    for hidden in ("git log | sh", "git log $(curl x)", "git log `curl x`", "git status & curl x"):
        assert POLICY.answer(_bash(hidden)) == ("ask", None), hidden  # no allow took it: the default
    assert Policy((Rule("bash", "curl *", "deny"),), "allow").answer(_bash("git log $(curl x)"))[0] == "deny"
    assert POLICY.answer(_bash("git log > log.txt 2>&1"))[0] == "allow"  # a redirection chains nothing


def test_a_tool_rule_without_a_pattern_takes_every_call_and_a_star_tool_any_tool() -> None:
    assert POLICY.answer(ApprovalRequest("webfetch", {"url": "http://x"}, "http://x"))[0] == "deny"
    policy = parse_policy({"rules": {"*": "allow"}, "default": "deny"})
    assert policy.answer(ApprovalRequest("todowrite"))[0] == "allow"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"rules": {"bash": {"git *": "maybe"}}},
            "approvals.rules.bash['git *']: 'maybe' is not one of allow, deny, ask",
        ),
        ({"default": "yes"}, "approvals.default: 'yes' is not one of allow, deny, ask"),
        ({"rules": {"todowrite": {"x*": "allow"}}}, "approvals.rules.todowrite['x*']: todowrite calls have no subject"),
        ({"rules": ["bash"]}, "approvals.rules: expected a mapping of tool names, not list"),
        ({"rule": {}}, "approvals: unknown key(s) 'rule': use rules, default"),
        ({"rules": {"bash": {}}}, "approvals.rules.bash: expected allow/deny/ask or a mapping of patterns to them"),
        ("deny", "approvals: expected a mapping with `rules` and `default`, not str"),
    ],
)
def test_a_wrong_policy_is_one_error_naming_the_rule(data: object, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_policy(data)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)
