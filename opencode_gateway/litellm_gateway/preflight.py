"""Before OpenCode starts, in gateway mode: does the gateway answer, and may the key use the group?

A run that cannot succeed should fail in a second with a message that names the fix, not after
OpenCode has started and retried.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import BudgetExceeded, GatewayError, PreflightError, one_line
from .protocol import is_budget_error

__all__ = ["check_gateway"]

_TIMEOUT = httpx.Timeout(5.0, connect=3.0)


def _refusal_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return one_line(response.text, 200)
    if isinstance(error, dict):
        return one_line(str(error.get("message") or error), 200)
    return one_line(str(error or response.text), 200)


async def check_gateway(
    base_url: str, api_key: str | None, group: str, *, client: httpx.AsyncClient | None = None
) -> None:
    """Raise PreflightError unless the gateway at `base_url` answers and lets the key use `group`;
    BudgetExceeded when the key's budget is already spent (the run ends as a budget refusal)."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    owned = client is None
    # No certificates to load (~30 ms of a run's start) for a gateway on plain http.
    client = client or httpx.AsyncClient(timeout=_TIMEOUT, verify=base_url.startswith("https:"))
    try:
        try:
            response = await client.get(f"{base_url}/v1/models", headers=headers)
        except httpx.HTTPError as exc:
            raise PreflightError(
                f"cannot reach the LiteLLM gateway at {base_url} ({type(exc).__name__}): "
                "is it running, and is --api-base / LITELLM_PROXY_API_BASE right?",
                check="reachable",
            ) from None
        if response.status_code != 200:
            raise _refusal(response, base_url, api_key)
        allowed = [str(m.get("id")) for m in response.json().get("data", []) if isinstance(m, dict)]
        if group in allowed or not allowed or any("*" in name for name in allowed):
            return
        info = await _key_info(client, base_url, headers)
        alias = f" {info['key_alias']!r}" if info.get("key_alias") else ""
        raise PreflightError(
            f"the key{alias} may not use model group {group!r} on {base_url}; it may use: {', '.join(sorted(allowed))}",
            check="group",
        )
    finally:
        if owned:
            await client.aclose()


def _refusal(response: httpx.Response, base_url: str, api_key: str | None) -> GatewayError:
    """What a gateway's refusal of /v1/models means (no key, a refused key, a spent budget, or
    something else), each with its fix."""
    if not api_key:
        return PreflightError(
            f"no key is set for the LiteLLM gateway at {base_url}: set LITELLM_PROXY_API_KEY "
            "(or pass --api-key) to a virtual key of the gateway",
            check="key",
        )
    if response.status_code in (401, 403):
        return PreflightError(
            f"the LiteLLM gateway at {base_url} refused the key (HTTP {response.status_code}: "
            f"{_refusal_text(response)}): check --api-key / LITELLM_PROXY_API_KEY",
            check="key",
        )
    if is_budget_error(response.content):
        return BudgetExceeded(f"the LiteLLM gateway at {base_url} refuses the key: {_refusal_text(response)}")
    return PreflightError(
        f"the LiteLLM gateway at {base_url} answered /v1/models with HTTP "
        f"{response.status_code}: {_refusal_text(response)}",
        check="reachable",
    )


async def _key_info(client: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> dict[str, Any]:
    """The key's own /key/info (alias, models), where the gateway allows it; {} otherwise."""
    try:
        response = await client.get(f"{base_url}/key/info", headers=headers)
        info = response.json().get("info") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    return info if isinstance(info, dict) else {}
