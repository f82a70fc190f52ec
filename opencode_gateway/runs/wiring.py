"""How a run's parts are built from its settings: the one place that reads `Settings` for the
packages below it (the endpoint's upstreams, OpenCode's workspace), so `endpoint/` and `opencode/`
never import settings, and a run and a launch wire OpenCode to an endpoint the same way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.settings import RunSettings, Settings
from ..domain import ModelRoute
from ..opencode.workspace import Workspace

if TYPE_CHECKING:
    from ..endpoint.upstream import Upstream

__all__ = ["opencode_env", "upstream_for"]


def opencode_env(
    settings: RunSettings,
    workspace: Workspace,
    *,
    endpoint_url: str,
    token: str,
    workdir: Path,
    instructions: Sequence[str] = (),
    readable_dirs: Sequence[str] = (),
    plugins: Sequence[str] = (),
) -> dict[str, str]:
    """OpenCode's environment for a run or a launch: its config names the endpoint at
    `endpoint_url` as its sole provider and reads `token` from a 0600 file of the (prepared)
    workspace; the variables passed on purpose, checked."""
    token_file = workspace.write_token(token)
    config = workspace.config(
        settings.agent_config,
        settings.pricing,
        base_url=endpoint_url + "/v1",
        token_file=token_file,
        instructions=instructions,
        readable_dirs=readable_dirs,
        plugins=plugins,
    )
    return workspace.environment(settings.environ, settings.passed_env(), config, workdir)


def upstream_for(settings: Settings, model: str) -> Upstream:
    """Where requests for `model` go: the gateway for `litellm_proxy/<group>`, else litellm."""
    from ..endpoint.upstream import ProxyUpstream, SdkUpstream  # httpx: imported while OpenCode starts

    route, limits = ModelRoute.of(model), settings.upstream_limits
    caching = route.setting(settings.prompt_caching)  # not set: known from the backend
    if route.group is not None:
        return ProxyUpstream(
            settings.gateway_api_base or "",
            route.group,
            settings.gateway_api_key,
            connect_timeout=limits.connect_timeout,
            idle_timeout=limits.idle_timeout,
            caching=caching,
        )
    return SdkUpstream(model, settings.api_base, settings.api_key, idle_timeout=limits.idle_timeout, caching=caching)
