"""How a run's parts are built from its settings: the one place that reads `Settings` for the
packages below it (the endpoint's upstreams), so `endpoint/` and `opencode/` never import settings."""

from __future__ import annotations

from .endpoint.upstream import ProxyUpstream, SdkUpstream, Upstream
from .litellm_gateway.protocol import ModelRoute
from .settings import Settings

__all__ = ["upstream_for"]


def upstream_for(settings: Settings, model: str) -> Upstream:
    """Where requests for `model` go: the gateway for `litellm_proxy/<group>`, else litellm."""
    route = ModelRoute.of(model)
    caching = route.setting(settings.prompt_caching)  # not set: known from the backend
    if route.group is not None:
        return ProxyUpstream(settings.gateway_api_base or "", route.group, settings.gateway_api_key,
                             connect_timeout=settings.connect_timeout, idle_timeout=settings.idle_timeout,
                             caching=caching)
    return SdkUpstream(model, settings.api_base, settings.api_key, idle_timeout=settings.idle_timeout, caching=caching)
