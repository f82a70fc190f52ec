"""What a run is assembled from; here, what its permission mode denies before anyone is asked."""

from __future__ import annotations

from collections.abc import Callable

from opencode_gateway.config.settings import Settings
from opencode_gateway.runs.assembly import mode_denial


def _denial(
    permissions: str | None = None, disable_tools: tuple[str, ...] = (), agent: str = "build"
) -> Callable[[str], str | None]:
    settings = Settings(model="openai/gpt-4o-mini", permissions=permissions, disable_tools=disable_tools, agent=agent)
    return mode_denial(settings.validated())


def test_read_only_denies_what_changes_the_workdir_and_asks_nothing_of_what_reads_it() -> None:
    denied = _denial(permissions="read-only")
    assert denied("bash") == "the permission mode read-only denies bash"
    assert denied("write") is not None and denied("edit") is not None
    assert denied("read") is None and denied("grep") is None


def test_edit_allows_every_tool_its_edit_permission_gates() -> None:
    denied = _denial(permissions="edit")
    assert all(denied(tool) is None for tool in ("edit", "write", "patch", "multiedit"))
    assert denied("bash") is not None


def test_a_disabled_tool_is_denied_in_full_and_an_agents_own_mode_is_opencodes() -> None:
    assert _denial(permissions="full", disable_tools=("bash",))("bash") == (
        "the permission mode full denies bash (disabled)"
    )
    assert _denial(permissions="full")("bash") is None
    assert _denial(agent="plan")("edit") is None
    assert _denial(permissions="read-only")("invalid") is None
