"""Settings come from config.yaml and flags; every mistake is one clear SettingsError."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_gateway.accounting.budget import period_caps
from opencode_gateway.config.file import load_settings
from opencode_gateway.config.settings import UNSET, Settings
from opencode_gateway.errors import SettingsError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_file_values_are_read_and_env_references_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_KEY", "sk-team")
    path = write(
        tmp_path,
        "model: litellm_proxy/coder\napi_base: http://127.0.0.1:4000\n"
        "api_key: os.environ/TEAM_KEY\ntags: [team-a]\nmetadata: {ticket: ENG-412}\ntimeout: 60\n",
    )
    settings = load_settings(path)
    assert settings.model == "litellm_proxy/coder"
    assert settings.api_key == "sk-team"
    assert settings.tags == ("team-a",)
    assert dict(settings.metadata) == {"ticket": "ENG-412"}
    assert settings.timeout == 60
    assert settings.mode == "gateway"


def test_flags_override_the_file_unset_keeps_it_and_none_clears_it(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "model: openai/gpt-4o-mini\npermissions: edit\nmax_cost: 5\n"))
    changed = settings.replace(model="anthropic/claude-sonnet-4-5", permissions=UNSET, max_cost=None)
    assert changed.model == "anthropic/claude-sonnet-4-5"
    assert changed.permissions == "edit"
    assert changed.mode == "sdk"
    assert changed.max_cost is None and settings.max_cost == 5


def test_api_key_is_not_in_the_repr() -> None:
    assert "sk-secret" not in repr(Settings(model="m", api_key="sk-secret"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modle: x\n", "unknown setting 'modle'"),
        ("timeout: soon\n", "timeout must be int or float, not str"),
        ("tags: [1, 2]\n", "tags must be a list of strings"),
        ("api_key: os.environ/NOT_SET_ANYWHERE\n", "environment variable NOT_SET_ANYWHERE is not set"),
        ("model: [unclosed\n", "not valid YAML at line"),
        ("- a\n- b\n", "top level must be a mapping"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SettingsError, match=message) as info:
        load_settings(path)
    assert str(path) in str(info.value)


def test_missing_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read the settings file"):
        load_settings(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (Settings(), "no model given"),
        (Settings(model="litellm_proxy/coder"), "no gateway URL is set"),
        (Settings(model="litellm_proxy/", api_base="http://127.0.0.1:1"), "names no model group"),
        (Settings(model="m", permissions="ask"), "cannot answer permission prompts"),
        (Settings(model="m", permissions="yolo"), "use one of read-only, edit, full"),
        (Settings(model="m", tags=("a,b",)), "no comma"),
        (Settings(model="m", timeout=0), "timeout 0 is invalid"),
        (Settings(model="m", timeout=float("nan")), "timeout nan is invalid"),
        (Settings(model="m", max_cost=float("nan")), "max_cost nan is invalid"),
        (Settings(model="m", max_cost=float("inf")), "max_cost inf is invalid"),
        (Settings(model="m", tags=("a\r\nx-evil: 1",)), "control characters"),
        (Settings(model="m", metadata={"ticket": "ENG-1\nx"}), "control character"),
        (Settings(model="m", metadata={"owner": "x\x1b]0;T\x07"}), "holds a control character"),
        (Settings(model="m", env=("HOME",)), "sets HOME itself"),
        (Settings(model="m", env=("OPENCODE_CONFIG",)), "sets OPENCODE_CONFIG itself"),
        (Settings(model="m", env=("NOT_SET_ANYWHERE_X",)), "is not set in this environment"),
        (Settings(model="m", env=("a-b",)), "is not a variable name"),
    ],
)
def test_validation_refuses_what_cannot_run(settings: Settings, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LITELLM_PROXY_API_BASE", raising=False)
    with pytest.raises(SettingsError, match=message):
        settings.validated()


def test_gateway_url_and_key_fall_back_to_litellm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_PROXY_API_BASE", "http://127.0.0.1:4000")
    monkeypatch.setenv("LITELLM_PROXY_API_KEY", "sk-virtual")
    settings = Settings(model="litellm_proxy/coder").validated()
    assert settings.gateway_api_base == "http://127.0.0.1:4000"
    assert settings.gateway_api_key == "sk-virtual"


def test_the_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_PROXY_API_BASE", "http://127.0.0.1:4000")
    monkeypatch.setenv("LITELLM_PROXY_API_KEY", "sk-virtual")
    example = Path(__file__).resolve().parent.parent / "config.example.yaml"
    settings = load_settings(example).validated()
    assert settings.mode == "gateway" and settings.api_key == "sk-virtual"
    assert dict(settings.metadata) == {"ticket": "ENG-412"}


def test_skill_folders_in_a_file_are_found_beside_it(tmp_path: Path) -> None:
    path = write(
        tmp_path, "skills: [skills/notes, /abs/other]\ninstructions: Prefer small diffs.\ndiff_max_bytes: 1000\n"
    )
    settings = load_settings(path)
    assert settings.skills == (str(tmp_path / "skills" / "notes"), "/abs/other")
    assert settings.instructions == "Prefer small diffs."
    assert settings.diff_max_bytes == 1000


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "LITELLM_PROXY_API_KEY", "COPY_OF_THE_KEY"])
def test_env_refuses_a_variable_holding_a_key_the_gateway_uses(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    monkeypatch.setenv("LITELLM_PROXY_API_KEY", "sk-virtual-key")
    monkeypatch.setenv("COPY_OF_THE_KEY", "Bearer sk-openai-0123456789")
    with pytest.raises(SettingsError, match=f"--env {name}: {name} holds a key the gateway uses"):
        Settings(model="openai/m", env=(name,)).validated()


def test_env_passes_a_named_variable_that_holds_no_gateway_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_0123456789abcdef")
    assert Settings(model="openai/m", env=("GITHUB_TOKEN",)).validated().passed_env() == {
        "GITHUB_TOKEN": "ghp_0123456789abcdef"
    }


def test_secrets_include_every_credential_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    monkeypatch.setenv("SENTRY_AUTH_TOKEN", "sntrys_0123456789")
    secrets = Settings(model="openai/m", api_key="sk-given").secrets
    assert {"sk-given", "sk-openai-0123456789", "sntrys_0123456789"} <= set(secrets)


def test_a_yaml_alias_is_refused_so_no_file_can_expand_without_bound(tmp_path: Path) -> None:
    bomb = (
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "opencode_config: {c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]}\n"
    )
    with pytest.raises(SettingsError, match="aliases .* are not allowed"):
        load_settings(write(tmp_path, bomb))


def test_a_settings_file_that_is_not_utf8_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"model: caf\xe9\n")
    with pytest.raises(SettingsError, match="not UTF-8 text"):
        load_settings(path)


def test_an_api_key_can_come_from_a_file_beside_the_settings(tmp_path: Path) -> None:
    (tmp_path / "key.txt").write_text("sk-from-file\n")
    assert load_settings(write(tmp_path, "api_key: file:key.txt\n")).api_key == "sk-from-file"
    with pytest.raises(SettingsError, match="cannot read the key file"):
        load_settings(write(tmp_path, "api_key: file:absent.txt\n"))


def test_budgets_are_a_models_defaults_or_with_per_a_metadata_keys_period_cap(tmp_path: Path) -> None:
    settings = load_settings(
        write(tmp_path, "budgets:\n  qwen-coder: {max_cost: 2}\n  ticket: {per: day, max_cost: 5}\n")
    )
    assert settings.budget_for("litellm_proxy/qwen-coder").max_cost == 2
    [(period, value)] = period_caps(settings.budgets, {"ticket": "ENG-1", "team": "a"})
    assert (period.key, period.per, period.limits.max_cost, value) == ("ticket", "day", 5, "ENG-1")
    assert period_caps(settings.budgets, {"team": "a"}) == []  # a run without a ticket has no day cap
    assert settings.budget_for("ticket").max_cost is None  # a period cap is no model's default


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"type": "local", "command": "python server.py"}, "needs type: local and command: \\[program, args...\\]"),
        ({"type": "remote"}, "a remote server needs a url"),
        ({"type": "stdio", "command": ["x"]}, "needs type: local"),
        ({"type": "local", "command": ["no-such-mcp-program-anywhere"]}, "is not found or not executable"),
    ],
)
def test_an_mcp_server_is_checked_before_a_run(server: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings(model="openai/m", mcp={"tools": server}).validated()
    assert Settings(model="openai/m", mcp={"web": {"type": "remote", "url": "https://mcp.example/x"}}).validated()


def test_prompt_caching_is_set_per_model_or_group_and_checked() -> None:
    with pytest.raises(SettingsError, match="prompt_caching.team-coder is 'yes': use markers"):
        Settings(model="m").replace(prompt_caching={"team-coder": "yes"}).validated()


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ({"turns": "openai/gpt-4.1"}, "routes.turns: no such purpose; routes are for title, summary, compaction"),
        ({"title": ""}, "routes.title must name a model"),
        # gpt-3.5-turbo takes 16,385 input tokens, gpt-4o-mini 128,000 (LiteLLM's map).
        (
            {"compaction": "openai/gpt-3.5-turbo"},
            "routes.compaction: openai/gpt-3.5-turbo takes 16,385 input tokens, "
            "fewer than openai/gpt-4o-mini's 128,000",
        ),
        ({"summary": "openai/gpt-3.5-turbo"}, "routes.summary: .* fewer than"),
        ({"compaction": "litellm_proxy/team-big"}, "no gateway URL is set"),
    ],
)
def test_routes_name_a_background_purpose_and_a_model_with_the_window_it_needs(routes: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings(model="openai/gpt-4o-mini", routes=routes).validated()


def test_a_route_whose_window_is_large_enough_or_unknown_is_taken() -> None:
    routes = {"title": "openai/gpt-3.5-turbo", "compaction": "openai/gpt-4.1", "summary": "litellm_proxy/team-big"}
    settings = Settings(model="openai/gpt-4o-mini", api_base="http://gateway", routes=routes).validated()
    assert dict(settings.routes) == routes  # a title is small; a gateway group's window only the gateway knows


def test_routes_come_from_the_file_and_the_flags(tmp_path: Path) -> None:
    from opencode_gateway.cli.arguments import settings_of
    from opencode_gateway.cli.program import build_parser

    path = tmp_path / "config.yaml"
    path.write_text("routes:\n  compaction: openai/gpt-4.1\n  title: openai/gpt-4.1-nano\n")
    args = build_parser().parse_args(
        ["run", "-m", "openai/gpt-4o-mini", "--config", str(path), "--route", "title=openai/gpt-4o", "hi"]
    )
    assert dict(settings_of(args).routes) == {"compaction": "openai/gpt-4.1", "title": "openai/gpt-4o"}
    with pytest.raises(SettingsError, match="--route 'title' is not KEY=VALUE"):
        settings_of(build_parser().parse_args(["run", "-m", "m", "--route", "title", "hi"]))


@pytest.mark.parametrize(
    "attribution",
    [{"metadata": {"note": "caf\udce9"}}, {"tags": ("t\udce9",)}, {"metadata": {"nested": {"k\udce9": "v"}}}],
)
def test_the_python_api_refuses_attribution_that_is_not_utf8(attribution: dict) -> None:
    """What `run(..., metadata=...)` is given is checked as the flags are: strict UTF-8."""
    with pytest.raises(SettingsError, match="is not UTF-8 text"):
        Settings(model="openai/gpt-4o-mini").replace(**attribution).validated()
