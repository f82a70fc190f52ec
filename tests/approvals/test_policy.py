"""A policy is data: ordered rules by tool and pattern, and a default. The first rule of a call's
tool that matches its subject decides; a wrong rule is one line that names it."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_gateway.approvals.policy import ApprovalRequest, Policy, Rule, literal, parse_policy, subject_of
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
    assert POLICY.answer(_bash("git log 2>&1 >/dev/null"))[0] == "allow"  # these touch no file
    assert POLICY.answer(_bash("git log > log.txt")) == ("ask", None)  # a redirection to a file is not literal


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


ONLY_GIT_DIFF = parse_policy({"rules": {"bash": {"git diff *": "allow"}}, "default": "deny"})


@pytest.mark.parametrize(
    "command",
    [
        "git diff ${y:=$'a[\\x24(id > arith.txt)]'}$[y]",  # assignment, $'...' quoting, arithmetic
        "git diff ${x:=$'\\x24(id)'}${x@P}",  # prompt expansion runs the command substitution
        "git diff $HOME",
        'git diff "$(id)"',
        "git diff *",
        "git diff {a,b}",
        "git diff ~root",
        "git diff a\\;id",
        "git diff <<EOF",
        "git diff > out.txt",
        "git diff # comment",
        "git diff 'a'$'b'",
    ],
)
def test_an_allow_rule_takes_no_command_the_shell_would_expand(command: str) -> None:
    assert not literal(command)
    assert ONLY_GIT_DIFF.answer(_bash(command)) == ("deny", None)


def test_plain_words_and_quotes_are_literal() -> None:
    for command in ("git diff HEAD", "git diff -- src/a.py", "git diff 'a b' \"c d\"", "git diff --stat 2>&1"):
        assert literal(command), command
        assert ONLY_GIT_DIFF.answer(_bash(command))[0] == "allow", command


_SHELL_ALPHABET = st.sampled_from(list("ab =-./'\"$`\\!*?[]{}~#;&|<>()\n\t@:,%+^") + ["$(", "${", "$'"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SHELL_ALPHABET, max_size=14).map("".join))
def test_what_is_literal_is_what_bash_runs_word_for_word(tail: str) -> None:
    """Property: for every command our check calls literal, bash (run for real, in an empty folder,
    with a variable set that an expansion would show) passes exactly the words a reader sees, and
    makes no file."""
    command = f"printf '<%s>' {tail}"
    if not literal(command):
        return
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"literal-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    seen = subprocess.run(
        ["bash", "-c", command], cwd=folder, capture_output=True, text=True, env={"a": "EXPANDED"}, timeout=10
    )
    assert "EXPANDED" not in seen.stdout and not list(folder.iterdir()), (command, seen.stdout)
    words = "".join(f"<{word}>" for word in shlex.split(tail))  # the words as a reader splits them
    assert seen.stdout == (words or "<>"), command


def _write(path: str, workdir: Path) -> ApprovalRequest:
    return ApprovalRequest.of("write", {"filePath": path}, str(workdir))


def test_a_path_is_matched_as_spelled_and_as_resolved(tmp_path: Path) -> None:
    policy = parse_policy({"rules": {"write": {"src/**": "allow"}, "read": {"secrets/**": "deny"}}, "default": "deny"})
    (tmp_path / "src").mkdir()
    (tmp_path / ".github").mkdir()
    (tmp_path / "src" / "docs").symlink_to("../.github")
    assert policy.answer(_write("src/a.py", tmp_path))[0] == "allow"
    assert policy.answer(_write(f"{tmp_path}/src/b/c.py", tmp_path))[0] == "allow"
    for escaping in ("src/../.envrc", f"{tmp_path}/src/../Makefile", "src/docs/workflows/pwn.yml", "src/../../x"):
        assert policy.answer(_write(escaping, tmp_path)) == ("deny", None), escaping
    assert _write("src/docs/workflows/pwn.yml", tmp_path).aliases == (".github/workflows/pwn.yml",)
    read = ApprovalRequest.of("read", {"filePath": "./secrets/token.txt"}, str(tmp_path))
    assert read.subject == "secrets/token.txt" and policy.answer(read)[0] == "deny"
    (tmp_path / "public").symlink_to("secrets")  # a deny rule takes either spelling
    assert policy.answer(ApprovalRequest.of("read", {"filePath": "public/token.txt"}, str(tmp_path)))[0] == "deny"


@pytest.mark.parametrize(
    ("url", "answer"),
    [
        ("https://docs.python.org/3/library/", "allow"),
        ("https://docs.python.org", "allow"),
        ("https://127.0.0.1:8080/.python.org/?leak=2", "deny"),  # the star must not cross the host
        ("https://evil.com/x.python.org/", "deny"),
        ("https://docs.python.org@evil.com/", "deny"),
        ("https://user@docs.python.org/", "deny"),  # a user in the URL is never allowed
        ("https://docs.python.org:8443/", "deny"),  # another port
        ("http://docs.python.org/", "deny"),  # another scheme
        ("https://evil.com#.python.org/", "deny"),
    ],
)
def test_a_url_is_matched_by_its_parts(url: str, answer: str) -> None:
    policy = parse_policy({"rules": {"webfetch": {"https://*.python.org/*": "allow"}}, "default": "deny"})
    request = ApprovalRequest.of("webfetch", {"url": url}, "/work")
    assert policy.answer(request)[0] == answer


def test_a_rule_naming_a_tool_opencode_does_not_have_is_refused() -> None:
    policy = parse_policy({"rules": {"bassh": "deny"}})
    with pytest.raises(SettingsError, match="'bassh' is not a tool OpenCode has: use apply_patch, bash"):
        policy.check_tools()
    parse_policy({"rules": {"github_create_issue": "deny"}}).check_tools(["github"])  # an MCP server's tool
    with pytest.raises(SettingsError, match="<server>_<tool> for an MCP server's \\(github\\)"):
        parse_policy({"rules": {"gitlab_x": "deny"}}).check_tools(["github"])


def test_a_rule_takes_both_generations_spelling_of_a_tool_and_its_arguments(tmp_path: Path) -> None:
    """OpenCode 2 calls bash `shell` and a file `path` (1.18: `filePath`): a policy written with
    either name decides the calls of both."""
    for spelling in ("bash", "shell"):
        policy = parse_policy({"rules": {spelling: {"git *": "allow", "rm *": "deny"}}, "default": "ask"})
        policy.check_tools()
        for tool in ("bash", "shell"):
            assert policy.answer(ApprovalRequest.of(tool, {"command": "git status"}, "/w"))[0] == "allow"
            assert policy.answer(ApprovalRequest.of(tool, {"command": "rm -rf x"}, "/w"))[0] == "deny"
    writes = parse_policy({"rules": {"write": {"src/**": "allow"}}, "default": "deny"})
    assert writes.answer(ApprovalRequest.of("write", {"path": "src/a.py"}, str(tmp_path)))[0] == "allow"
    assert writes.answer(ApprovalRequest.of("write", {"path": "src/../.envrc"}, str(tmp_path)))[0] == "deny"
    parse_policy({"rules": {"subagent": "deny", "execute": "deny"}}).check_tools()
