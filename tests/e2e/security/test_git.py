"""The agent plants something for git to run later on the host, when the user commits in the
folder it worked in: a hook, a config key (`core.fsmonitor`, `core.hooksPath`), a `commondir`
that points git at a config of its own, a `.git` swapped for a copy of its own, or a repository
of its own where there was none. Nothing it planted runs, and it can still commit its work."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage
from tests.support.serving import launch

pytestmark = pytest.mark.e2e

GIT = ["git", "-c", "user.name=User", "-c", "user.email=user@example.com"]

PLANT = r"""
m="$1"
hook='#!/bin/sh
touch '$m
tried() { label=$1; shift; if "$@" >/dev/null 2>&1; then echo "$label: done"; else echo "$label: refused"; fi; }
echo 'changed by the agent' >> work.txt
tried commit git -c user.name=Agent -c user.email=a@b commit -qam 'the agent commits its work'
tried hook sh -c "printf '%s' \"$hook\" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"
tried fsmonitor git config core.fsmonitor "touch $m.fsmonitor"
mkdir -p evil/hooks && printf '%s' "$hook" > evil/hooks/pre-commit && chmod +x evil/hooks/pre-commit
printf '[core]\n\trepositoryformatversion = 0\n\thooksPath = %s/evil/hooks\n' "$PWD" > evil/config
tried commondir sh -c "echo $PWD/evil > .git/commondir"
tried swap mv .git .git-old
"""


def _run(upstream: ScriptedUpstream, workdir: Path, settings: Settings, script: str, *arguments: str) -> list[str]:
    (workdir / "plant.sh").write_text(script)
    command = " ".join(["sh", "plant.sh", *arguments, "> planted.out 2>&1"])
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": command, "description": "plant"})], usage=usage(100, 5)),
        Reply(text="done", usage=usage(100, 5)),
    )
    result = run(
        "Work",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings.replace(sandbox="bwrap"),
    )
    assert result.stop_reason == "done", result.error
    return list(result.warnings)


def test_nothing_the_agent_plants_in_git_runs_when_the_user_commits(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, tmp_path: Path
) -> None:
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    (workdir / "work.txt").write_text("the user's work\n")
    subprocess.run([*GIT, "add", "."], cwd=workdir, check=True)
    subprocess.run([*GIT, "commit", "-qm", "first"], cwd=workdir, check=True)
    marker = tmp_path / "git-ran-the-agents-code"
    warnings = _run(upstream, workdir, settings, PLANT, str(marker))
    tried = dict(line.split(": ") for line in (workdir / "planted.out").read_text().splitlines())
    assert tried == {
        "commit": "done",
        "hook": "refused",
        "fsmonitor": "refused",
        "commondir": "done",
        "swap": "refused",
    }, tried  # what the sandbox refuses; the commondir is put back after
    log = subprocess.run(["git", "log", "--format=%s"], cwd=workdir, capture_output=True, text=True, check=True)
    assert log.stdout.split("\n")[0] == "the agent commits its work"  # it could commit its work
    assert any("commondir" in warning and "put back" in warning for warning in warnings), warnings
    assert not (workdir / ".git" / "commondir").exists() and (workdir / ".git").is_dir()
    (workdir / "work.txt").write_text("the user's next change\n")
    subprocess.run([*GIT, "commit", "-qam", "the user commits"], cwd=workdir, check=True, timeout=60)
    subprocess.run(["git", "status"], cwd=workdir, check=True, capture_output=True, timeout=60)  # fsmonitor runs here
    assert not list(tmp_path.glob("git-ran-the-agents-code*"))


def test_a_repository_the_agent_creates_is_moved_out_of_gits_way(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, tmp_path: Path
) -> None:
    marker = tmp_path / "git-ran-the-agents-code"
    script = 'git init -q && printf "#!/bin/sh\\ntouch $1\\n" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
    warnings = _run(upstream, workdir, settings, script, str(marker))
    assert not (workdir / ".git").exists()
    [aside] = workdir.glob(".git.created-by-run_*")
    assert (aside / "hooks" / "pre-commit").exists() and any(aside.name in warning for warning in warnings)
    assert not marker.exists()


def test_a_launch_puts_gits_control_files_back_when_opencode_exits(
    server: subprocess.Popen[str],
    upstream: ScriptedUpstream,
    env: dict[str, str],
    workdir: Path,
) -> None:
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    (workdir / "plant.sh").write_text('mkdir -p evil && echo "$PWD/evil" > .git/commondir\n')
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "sh plant.sh", "description": "plant"})], usage=usage(100, 5)),
        Reply(text="done", usage=usage(100, 5)),
    )
    launched = launch(env, workdir, "--sandbox", "bwrap", "--", "run", "--format", "json", "--title", "g", "go")
    assert launched.returncode == 0, launched.stderr
    assert (workdir / "evil").is_dir()  # the agent's script ran
    assert not (workdir / ".git" / "commondir").exists()
    assert "put back as they were before the run" in launched.stderr


def test_restoring_gits_files_never_writes_through_a_symlink_the_agent_made(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, tmp_path: Path
) -> None:
    """The agent moves a linked worktree's git dir away and puts a symlink to a folder of the
    user's in its place: putting back its `commondir` must not overwrite the user's file there."""
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    (workdir / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (workdir / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    elsewhere = tmp_path / "users-folder"
    elsewhere.mkdir()
    (elsewhere / "commondir").write_text("the user's own file\n")
    script = f"mv .git/worktrees/wt .git/worktrees/moved && ln -s {elsewhere} .git/worktrees/wt && echo done"
    warnings = _run(upstream, workdir, settings, script)
    assert (workdir / "planted.out").read_text().strip() == "done"  # the swap happened inside
    assert (elsewhere / "commondir").read_text() == "the user's own file\n"
    assert any("nothing was written through it" in warning for warning in warnings), warnings
