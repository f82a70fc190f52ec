"""What OpenCode is told (AgentConfig): a value that checks itself and names the fix."""

from __future__ import annotations

import pytest

from opencode_gateway.errors import SettingsError
from opencode_gateway.opencode.agent import AgentConfig


def test_a_good_config_passes_and_passes_only_the_named_variables() -> None:
    agent = AgentConfig(
        "openai/gpt-4o-mini",
        permissions="read-only",
        env=("GITHUB_TOKEN",),
        mcp={"files": {"type": "remote", "url": "http://127.0.0.1:9/mcp"}},
    )
    environ = {"GITHUB_TOKEN": "ghp_agent", "OPENAI_API_KEY": "sk-gateway"}
    agent.check(environ, ["sk-gateway"])
    assert agent.passed_env(environ, ["sk-gateway"]) == {"GITHUB_TOKEN": "ghp_agent"}


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (AgentConfig("m", permissions="ask"), "a headless run cannot answer permission prompts"),
        (AgentConfig("m", env=("HOME",)), "opencode-gateway sets HOME itself"),
        (AgentConfig("m", env=("NOT_SET_HERE",)), "NOT_SET_HERE is not set in this environment"),
        (AgentConfig("m", env=("LEAKY",)), "holds a key the gateway uses"),
        (
            AgentConfig("m", mcp={"x": {"type": "local", "command": ["/no/such/server"]}}),
            "is not found or not executable",
        ),
        (AgentConfig("m", mcp={"x y": {"type": "remote", "url": "http://h"}}), "give a name of letters"),
    ],
)
def test_a_bad_config_is_refused_naming_the_fix(agent: AgentConfig, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        agent.check({"LEAKY": "Bearer sk-gateway"}, ["sk-gateway"])
