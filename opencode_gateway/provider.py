"""Before OpenCode's first model call, in SDK mode: does litellm know the model's provider, and is
the provider's key there?

`-m gpt4o-mini` (no provider) or a missing OPENAI_API_KEY started OpenCode and failed 15 s later
with exit 1, the message twice and litellm's multi-line text; the gateway's same mistakes were one
line and exit 2. This is the gateway check's twin (litellm_gateway/preflight.py): run while
OpenCode starts, it holds every request until it passed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from . import _litellm
from .errors import PreflightError

__all__ = ["check_providers"]


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
            providers = {name: str(entry.get("litellm_provider", "")) for name, entry in entries.items()
                         if isinstance(entry, dict)}
            raise PreflightError(
                f"litellm knows no provider for model {model!r}: name it provider/model, e.g. openai/gpt-4o-mini or "
                f"anthropic/claude-sonnet-4-5{_suggestion(model, entries, providers)}", check="provider") from None
        if api_key:
            continue
        needed = litellm.validate_environment(model=model, api_base=api_base).get("missing_keys") or []
        keys = [name for name in needed if str(name).endswith("_API_KEY")]
        if keys:
            raise PreflightError(f"{keys[0]} is not set, and litellm needs it for {model}: export it, or pass "
                                 "--api-key (or --api-key-file)", check="key")
