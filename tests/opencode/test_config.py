"""The generated OpenCode config and environment: one provider, our permissions, no secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencode_gateway.errors import ConfigConflict, SettingsError
from opencode_gateway.opencode.config import (
    TOOLS,
    build_config,
    build_env,
    check_agent,
    permission_of,
    permission_rules,
    seed_config_dir,
)
from opencode_gateway.opencode.generation import GENERATIONS

BASE = {"model": "openai/gpt-4o-mini", "base_url": "http://127.0.0.1:5555/v1", "api_key_ref": "{file:/p/token}"}


def test_the_only_provider_is_litellm_pointing_at_the_endpoint() -> None:
    config = build_config(**BASE)
    assert list(config["provider"]) == ["litellm"]
    provider = config["provider"]["litellm"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:5555/v1", "apiKey": "{file:/p/token}"}
    assert list(provider["models"]) == ["openai/gpt-4o-mini"]
    assert config["enabled_providers"] == ["litellm"]
    assert config["model"] == config["small_model"] == "litellm/openai/gpt-4o-mini"
    assert config["autoupdate"] is False
    assert config["share"] == "disabled"


def test_full_mode_allows_everything_but_never_asks() -> None:
    assert permission_rules("full") == {"*": "allow", "question": "deny", "doom_loop": "deny"}


def test_read_only_mode_denies_edits_bash_web_and_unknown_tools() -> None:
    rules = permission_rules("read-only")
    assert rules["*"] == "deny"
    for allowed in ("read", "glob", "grep", "list"):
        assert rules[allowed] == "allow"
    for denied in ("edit", "bash", "webfetch", "websearch", "external_directory"):
        assert rules.get(denied, rules["*"]) == "deny"


def test_edit_mode_allows_edits_but_not_bash() -> None:
    rules = permission_rules("edit")
    assert rules["edit"] == "allow"
    assert rules.get("bash", rules["*"]) == "deny"


def test_no_mode_ever_asks() -> None:
    for mode in ("read-only", "edit", "full"):
        assert "ask" not in permission_rules(mode).values()


def test_disabled_tools_are_denied_by_their_opencode_names() -> None:
    rules = permission_rules("full", ["bash", "ls", "web_search", "write"])
    assert rules["bash"] == rules["list"] == rules["webfetch"] == rules["websearch"] == rules["edit"] == "deny"


def test_a_native_tool_is_checked_against_a_permission_key_a_tool_name_has() -> None:
    """What the approvals' mode check asks (runs/assembly.py): a native edit tool is checked as
    `edit`, OpenCode's websearch as `webfetch`; every key it comes to is one TOOLS gives."""
    keys = {key for keys in TOOLS.values() for key in keys}
    for native in ("write", "patch", "multiedit", "apply_patch", "websearch", "edit", "bash", "list"):
        assert permission_of(native) in keys, native
    assert (permission_of("multiedit"), permission_of("websearch")) == ("edit", "webfetch")


def test_an_unknown_tool_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SettingsError, match="cannot disable tool 'shell': known tools are read, write"):
        permission_rules("full", ["shell"])


def test_ask_mode_is_refused_before_anything_starts() -> None:
    with pytest.raises(SettingsError, match="cannot answer permission prompts"):
        permission_rules("ask")


def test_user_config_is_merged_under_managed_keys() -> None:
    config = build_config(
        **BASE, user_config={"instructions": ["STYLE.md"], "share": "auto", "agent": {"build": {"temperature": 0.1}}}
    )
    assert config["instructions"] == ["STYLE.md"]
    assert config["agent"] == {"build": {"temperature": 0.1}}
    assert config["share"] == "disabled"


@pytest.mark.parametrize(
    ("user_config", "flag"),
    [
        ({"provider": {"evil": {}}}, "use -m/--model and --api-base"),
        ({"model": "evil/m"}, "use -m/--model"),
        ({"small_model": "evil/m"}, "use --small-model"),
        ({"enabled_providers": ["evil"]}, "the run's only provider is litellm"),
        ({"disabled_providers": []}, "the run's only provider is litellm"),
        ({"permission": {"bash": "allow"}}, "use --permissions"),
        ({"tools": {"bash": True}}, "use --disable-tool"),
        ({"plugin": ["evil-plugin"]}, "plugins never load"),
        ({"agent": {"build": {"model": "evil/m"}}}, "agent.build sets 'model'"),
        ({"agent": {"build": {"permission": {"bash": "allow"}}}}, "agent.build sets 'permission'"),
        ({"mode": {"plan": {"tools": {"write": True}}}}, "mode.plan sets 'tools'"),
    ],
)
def test_user_config_setting_a_managed_key_is_refused_naming_the_flag(user_config: dict, flag: str) -> None:
    with pytest.raises(ConfigConflict, match="which opencode-gateway manages") as info:
        build_config(**BASE, user_config=user_config)
    assert flag in str(info.value)


INHERITED = {
    "PATH": "/usr/bin",
    "LANG": "C.UTF-8",
    "OPENAI_API_KEY": "sk-openai",
    "ANTHROPIC_API_KEY": "sk-ant",
    "LITELLM_PROXY_API_KEY": "sk-virtual",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "GITHUB_TOKEN": "ghp",
    "MY_SERVICE_PASSWORD": "pw",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
    "OPENCODE_CONFIG": "/home/u/.config/opencode/evil.json",
    "OPENCODE_PERMISSION": '{"bash":"allow"}',
    "INNOCENT_LOOKING": "contains sk-virtual inside",
    "NO_PROXY": "corp.internal",
}


def test_environment_is_an_allowlist_of_the_callers(tmp_path: Path) -> None:
    inherited = {
        **INHERITED,
        "DATABASE_URL": "postgres://app:hunter2@db/app",
        "REDIS_URL": "redis://:pw@r:6379",
        "SENTRY_DSN": "https://key@sentry.example/1",
        "MY_PROVIDER_KEY": "mpk-123",
        "TERM": "xterm",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "HTTPS_PROXY": "http://proxy:3128",
        "NODE_OPTIONS": "--require x",
    }
    env = build_env(inherited, private_dir=tmp_path, data_dir=tmp_path / "data", config={"a": 1})
    kept = {name for name in inherited if name in env and env[name] == inherited[name]}
    assert kept == {"PATH", "LANG", "LC_ALL", "TZ", "TERM"}
    assert not any(
        secret in value
        for value in env.values()
        for secret in ("sk-openai", "sk-virtual", "ghp", "hunter2", "mpk-123", "key@sentry")
    )


def test_a_variable_passed_on_purpose_reaches_opencode(tmp_path: Path) -> None:
    env = build_env(
        INHERITED, private_dir=tmp_path, data_dir=tmp_path / "data", config={"a": 1}, passed={"GITHUB_TOKEN": "ghp"}
    )
    assert env["GITHUB_TOKEN"] == "ghp"
    assert "OPENAI_API_KEY" not in env


def test_environment_isolates_opencode(tmp_path: Path) -> None:
    env = build_env(INHERITED, private_dir=tmp_path, data_dir=tmp_path / "data", config={"model": "litellm/m"})
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == {"model": "litellm/m"}
    assert env["OPENCODE_DISABLE_PROJECT_CONFIG"] == "1"
    for switch in (
        "AUTOUPDATE",
        "MODELS_FETCH",
        "LSP_DOWNLOAD",
        "SHARE",
        "DEFAULT_PLUGINS",
        "CLAUDE_CODE",
        "EXTERNAL_SKILLS",
    ):
        assert env[f"OPENCODE_DISABLE_{switch}"] == "1"
    assert env["HOME"] == str(tmp_path / "home")
    assert env["XDG_CONFIG_HOME"] == str(tmp_path / "config")
    assert env["XDG_DATA_HOME"] == str(tmp_path / "data")
    assert env["NO_PROXY"] == env["no_proxy"] == "corp.internal,127.0.0.1,localhost"


def test_seeded_config_dir_marks_the_plugin_package_installed(tmp_path: Path) -> None:
    seed_config_dir(tmp_path)
    opencode = tmp_path / "opencode"
    lock = json.loads((opencode / "package-lock.json").read_text())
    assert "node_modules/@opencode-ai/plugin" in lock["packages"]
    assert json.loads((opencode / "node_modules/@opencode-ai/plugin/package.json").read_text())["version"]


def test_instruction_files_follow_the_users_own() -> None:
    config = build_config(**BASE, user_config={"instructions": ["/team/STYLE.md"]}, instructions=["/private/run.md"])
    assert config["instructions"] == ["/team/STYLE.md", "/private/run.md"]
    assert "instructions" not in build_config(**BASE)


def test_skill_dirs_stay_readable_when_everything_else_outside_is_denied() -> None:
    rules = permission_rules("read-only", readable_dirs=["/private/config/opencode/skills"])
    assert rules["external_directory"] == {"*": "deny", "/private/config/opencode/skills/*": "allow"}
    assert list(rules).index("external_directory") > list(rules).index("*")  # the last matching rule wins
    assert "external_directory" not in permission_rules("read-only")
    assert permission_rules("full", readable_dirs=["/x"]) == permission_rules("full")  # "*": "allow" covers it


def test_without_a_mode_the_agent_keeps_its_own_restrictions_but_never_asks() -> None:
    assert permission_rules(None) == {"question": "deny", "doom_loop": "deny"}
    plan = build_config(model="m", base_url="http://127.0.0.1:1/v1", api_key_ref="{file:/t}", agent="plan")
    assert "*" not in plan["permission"]  # no blanket allow over plan's own denial of edits
    build = build_config(model="m", base_url="http://127.0.0.1:1/v1", api_key_ref="{file:/t}")
    assert build["permission"]["*"] == "allow"  # build's own: everything
    explicit = build_config(
        model="m", base_url="http://127.0.0.1:1/v1", api_key_ref="{file:/t}", agent="plan", permissions="full"
    )
    assert explicit["permission"]["*"] == "allow"  # given on purpose, it wins


def test_an_agent_is_a_built_in_primary_one_or_one_the_settings_define() -> None:
    check_agent("plan", {})
    check_agent("reviewer", {"agent": {"reviewer": {"prompt": "Review."}}})
    with pytest.raises(SettingsError, match="agent 'plna' is not available: use one of build, plan, reviewer"):
        check_agent("plna", {"agent": {"reviewer": {}, "helper": {"mode": "subagent"}}})
    with pytest.raises(SettingsError, match="use one of build, plan \\("):
        check_agent("explore", {})  # a subagent: OpenCode would run build instead


def test_mcp_servers_are_in_the_config_and_their_tools_allowed_in_every_mode() -> None:
    mcp = {"lookup": {"type": "local", "command": ["lookup-server"]}}
    for mode in ("read-only", "edit"):
        config = build_config(
            model="m", base_url="http://127.0.0.1:1/v1", api_key_ref="{file:/t}", permissions=mode, mcp=mcp
        )
        assert config["mcp"] == mcp and config["permission"]["lookup_*"] == "allow"
        assert config["permission"]["*"] == "deny"  # everything else as the mode says


def test_with_the_web_off_opencode_2s_execute_is_denied_too_since_its_fetch_ignores_webfetch_rules() -> None:
    assert permission_rules("full", ["web_search"])["execute"] == "deny"
    assert "execute" not in permission_rules("full")  # the web is on: execute is the agent's
    assert permission_rules("read-only")["*"] == "deny"  # and execute with it


def test_opencode_2_gets_no_instructions_key_since_it_reads_none() -> None:
    second = GENERATIONS[1]
    config = build_config(**BASE, instructions=["/p/instructions.md"], generation=second)
    assert "instructions" not in config
    assert build_config(**BASE, instructions=["/p/instructions.md"])["instructions"] == ["/p/instructions.md"]
