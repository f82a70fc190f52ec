"""A workspace: what OpenCode is given to read, and how it is started (the end-to-end tests run it)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from opencode_gateway.opencode.agent import AgentConfig
from opencode_gateway.opencode.binary import OpenCodeBinary
from opencode_gateway.opencode.generation import GENERATIONS
from opencode_gateway.opencode.process import run_argv, tui_argv
from opencode_gateway.opencode.sandbox import SandboxConfig
from opencode_gateway.opencode.seccomp import filter_program
from opencode_gateway.opencode.workspace import Workspace


def test_the_token_is_a_private_file_the_config_reads_and_the_env_never_holds(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "private", tmp_path / "data")
    workspace.prepare()
    token_file = workspace.write_token("tok-123")
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and token_file.read_text() == "tok-123"
    config = workspace.config(
        AgentConfig("openai/gpt-4o-mini"), {}, base_url="http://127.0.0.1:9/v1", token_file=token_file
    )
    assert config["provider"]["litellm"]["options"]["apiKey"] == f"{{file:{token_file}}}"
    assert json.loads((tmp_path / "private" / "opencode.json").read_text()) == config
    env = workspace.environment({"PATH": "/bin", "OPENAI_API_KEY": "sk-real"}, {}, config, tmp_path / "work")
    assert "tok-123" not in json.dumps(env) and "sk-real" not in json.dumps(env) and env["PATH"] == "/bin"
    assert env["PWD"] == str(tmp_path / "work") and env["XDG_DATA_HOME"] == str(tmp_path / "data")
    assert env["HOME"].startswith(str(tmp_path / "private"))


def test_a_token_is_never_written_over_another(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "tui" / "launch_1", tmp_path / "tui" / "launch_1" / "data")
    workspace.prepare()
    first = workspace.write_token("a")
    assert first == tmp_path / "tui" / "launch_1" / "token"
    with pytest.raises(FileExistsError):
        workspace.write_token("b")
    assert first.read_text() == "a"


def test_confined_it_runs_under_bwrap_with_its_own_tmp_and_the_seccomp_filter_inherited(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "private", tmp_path / "data")
    workspace.prepare()
    argv, env, fd = workspace.confine(
        ["/bin/opencode", "run"],
        {"PATH": "/bin"},
        SandboxConfig(),
        (tmp_path / "ledger.db",),
        workdir=tmp_path,
        port=4141,
        socket_path=tmp_path / "private" / "endpoint.sock",
    )
    try:
        assert os.get_inheritable(fd) and argv[argv.index("--seccomp") + 1] == str(fd)
        assert os.read(fd, 8) == filter_program()[:8]
    finally:
        os.close(fd)
    assert argv[0] == "bwrap" and "--unshare-pid" in argv and "--unshare-net" in argv and "--new-session" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-2:] == ["/bin/opencode", "run"] and env == {"PATH": "/bin", "TMPDIR": "/tmp"}


def test_for_opencode_2_the_instructions_go_into_its_private_global_agents_md_and_the_plugin_is_a_folder(
    tmp_path: Path,
) -> None:
    workspace = Workspace(tmp_path / "private", tmp_path / "data", GENERATIONS[1])
    workspace.prepare()
    assert workspace.add_instructions(["Be brief.", "Answer in JSON."]) == []  # no `instructions` key
    assert (tmp_path / "private" / "config" / "opencode" / "AGENTS.md").read_text() == "Be brief.\n\nAnswer in JSON.\n"
    named = workspace.add_plugin("export default {};\n")
    assert named == str(workspace.plugin) and workspace.plugin.is_dir()
    assert json.loads((workspace.plugin / "package.json").read_text())["main"] == "index.js"
    assert not os.access(workspace.plugin / "index.js", os.W_OK) or os.geteuid() == 0
    assert stat.S_IMODE((workspace.plugin / "index.js").stat().st_mode) == 0o444


def test_opencode_2_runs_standalone_and_1_18_pure_and_a_launch_on_2_never_starts_the_service() -> None:
    first, second = (OpenCodeBinary("/oc", g.pinned, g) for g in GENERATIONS)
    assert "--pure" in run_argv(first, "litellm/m", "build") and "--standalone" not in run_argv(
        first, "litellm/m", "build"
    )
    argv = run_argv(second, "litellm/m", "build", "ses_1")
    assert "--standalone" in argv and "--pure" not in argv and argv[-2:] == ["--session", "ses_1"]
    assert tui_argv(second, ["--session", "ses_1"]) == ["/oc", "--session", "ses_1", "--standalone"]
    assert tui_argv(second, ["--server", "http://127.0.0.1:1"]) == ["/oc", "--server", "http://127.0.0.1:1"]
    assert tui_argv(first, []) == ["/oc"]
