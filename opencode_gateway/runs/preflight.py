"""Before OpenCode's first model call: the checks its calls need, under way while OpenCode starts
(`Preflight`). In gateway mode, the gateway's (litellm_gateway/preflight.py); in SDK mode, this
module's own: does litellm know the model's provider, and is the provider's key there?

`-m gpt4o-mini` (no provider) or a missing OPENAI_API_KEY started OpenCode and failed 15 s later
with exit 1, the message twice and litellm's multi-line text; the gateway's same mistakes were one
line and exit 2. This is the gateway check's twin (litellm_gateway/preflight.py): run while
OpenCode starts, it holds every request until it passed.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Iterable, Mapping

from .. import _litellm
from ..accounting.budget import Refusal
from ..config.settings import RunSettings
from ..domain import ModelRoute
from ..errors import BudgetExceeded, PreflightError
from ..litellm_gateway.protocol import gateway_base
from ..opencode.process import OpenCodeProcess

__all__ = ["Preflight", "check_providers"]


def _suggestion(model: str, known: Iterable[str], providers: Mapping[str, str]) -> str:
    """`; did you mean openai/gpt-4o-mini?` for a misspelt or unprefixed model LiteLLM prices."""
    close = difflib.get_close_matches(model.split("/")[-1], list(known), n=1, cutoff=0.8)
    if not close:
        return ""
    name = close[0]
    provider = providers.get(name)
    return f"; did you mean {name if '/' in name or not provider else f'{provider}/{name}'}?"


def check_providers(models: Iterable[str], *, api_key: str | None, api_base: str | None) -> None:
    """Raise PreflightError naming the fix unless litellm knows each model's provider and, where
    the provider needs a key (`*_API_KEY`), it is given (`api_key`) or set in the environment.
    Credentials a cloud provider finds by itself (AWS's, Google's application default) are its own."""
    litellm = _litellm.load()
    for model in dict.fromkeys(models):
        try:
            litellm.get_llm_provider(model, api_base=api_base)
        except Exception:  # litellm's BadRequestError, or ValueError for a malformed string
            entries = litellm.model_cost
            providers = {
                name: str(entry.get("litellm_provider", ""))
                for name, entry in entries.items()
                if isinstance(entry, dict)
            }
            raise PreflightError(
                f"litellm knows no provider for model {model!r}: name it provider/model, e.g. openai/gpt-4o-mini or "
                f"anthropic/claude-sonnet-4-5{_suggestion(model, entries, providers)}",
                check="provider",
            ) from None
        if api_key:
            continue
        needed = litellm.validate_environment(model=model, api_base=api_base).get("missing_keys") or []
        keys = [name for name in needed if str(name).endswith("_API_KEY")]
        if keys:
            raise PreflightError(
                f"{keys[0]} is not set, and litellm needs it for {model}: export it, or pass "
                "--api-key (or --api-key-file)",
                check="key",
            )


class Preflight:
    """The check a run's model calls need, under way while OpenCode starts: in gateway mode, does
    the gateway answer and may the key use the group; in SDK mode, does litellm know each model's
    provider and is its key set. No request is forwarded until it passed (Endpoint.checked); a
    failed check stops OpenCode before any model call."""

    def __init__(self, settings: RunSettings, process: OpenCodeProcess) -> None:
        self._check = asyncio.ensure_future(_checks(settings))
        self._check.add_done_callback(lambda _: self._stop_on_failure(process))

    def _stop_on_failure(self, process: OpenCodeProcess) -> None:
        if self.failed() is not None:
            process.stop()

    def failed(self) -> BaseException | None:
        """What failed, once the check is done (None before, or if it passed)."""
        check = self._check
        return None if not check.done() or check.cancelled() else check.exception()

    async def done(self) -> BaseException | None:
        """What failed, waiting for the check to be done."""
        await asyncio.wait([self._check])
        return self.failed()

    async def outcome(self) -> Refusal | None:
        """Once the check is done: a spent budget ends the run as a refused call does; any other
        failure is raised (PreflightError: exit 2), as it was when the check came before OpenCode."""
        error = await self.done()
        if error is not None and not isinstance(error, BudgetExceeded):
            raise error
        return None if error is None else Refusal("budget", str(error))

    async def refusal(self) -> str | None:
        """For the endpoint: None once the check passed, else what failed."""
        error = await self.done()
        return None if error is None else str(error)

    def cancel(self) -> None:
        self._check.cancel()


async def _checks(settings: RunSettings) -> None:
    group = settings.route.group
    if group is not None:
        from ..litellm_gateway.preflight import check_gateway  # httpx: imported while OpenCode starts

        await check_gateway(gateway_base(settings.gateway_api_base or ""), settings.gateway_api_key, group)
    models = [
        m
        for m in (settings.model, settings.small_model, *settings.routes.values())
        if m and ModelRoute.of(m).mode == "sdk"
    ]
    if models:
        await asyncio.to_thread(check_providers, models, api_key=settings.api_key, api_base=settings.api_base)
