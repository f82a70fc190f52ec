"""Which environment variables hold credentials, and which values this process must never show.

The gateway process holds keys OpenCode must never see: the ones given to it, and every provider
key litellm may read from the environment in SDK mode. Nothing decides from a variable's name
whether it reaches OpenCode (that is an allowlist, opencode/config.py); names decide only what is
redacted and what `--env` refuses to pass.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import hashlib
import re
import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import unquote

__all__ = [
    "gateway_keys",
    "held_secrets",
    "is_credential",
    "redact",
    "redacted",
    "refuse_inspection",
    "token_digest",
]
_T = TypeVar("_T")

REDACTED = "[REDACTED]"
# A value shorter than this is not redacted when it is found only by its variable's name: a
# `..._TOKEN=1` switch would otherwise blank every "1" of every error message.
_MIN_FOUND_LEN = 8

_CREDENTIAL_WORDS = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY|AUTH|_KEY$", re.I)
# Prefixes of the variables LiteLLM reads provider credentials from (and its own).
_PROVIDER_PREFIXES = (
    "OPENAI_",
    "ANTHROPIC_",
    "LITELLM_",
    "AZURE_",
    "AWS_",
    "GEMINI_",
    "GOOGLE_",
    "VERTEX",
    "MISTRAL_",
    "COHERE_",
    "GROQ_",
    "DEEPSEEK_",
    "OPENROUTER_",
    "TOGETHER",
    "FIREWORKS_",
    "XAI_",
    "HF_",
    "HUGGINGFACE",
    "PERPLEXITY",
    "REPLICATE_",
    "DATABRICKS_",
    "WATSONX_",
    "BEDROCK",
    "NVIDIA_",
    "CEREBRAS_",
    "SAMBANOVA_",
    "VOYAGE_",
    "OLLAMA_",
    "DASHSCOPE_",
    "MOONSHOT_",
    "ANYSCALE_",
    "DEEPINFRA_",
    "AI21_",
    "NLP_CLOUD_",
)


# What the OpenTelemetry SDK sends a collector as headers (observability/traces.py), as "name=value,..." lists.
_OTEL_HEADERS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")


def is_credential(name: str) -> bool:
    """Whether a variable's name says it holds a credential (API_KEY, TOKEN, SECRET, PASSWORD...)."""
    return bool(_CREDENTIAL_WORDS.search(name))


def gateway_keys(environ: Mapping[str, str], explicit: Iterable[str | None]) -> tuple[str, ...]:
    """The keys the gateway itself may use: the ones it was given and, for SDK mode, every
    provider credential in its environment (litellm reads them by name)."""
    found = (
        value
        for name, value in environ.items()
        if name.upper().startswith(_PROVIDER_PREFIXES) and is_credential(name) and len(value) >= _MIN_FOUND_LEN
    )
    return _unique([*(key for key in explicit if key), *found])


def held_secrets(environ: Mapping[str, str], explicit: Iterable[str | None]) -> tuple[str, ...]:
    """Every value to redact: the given keys, the value of every credential variable in the
    environment, provider or not (a DSN's password, a GitHub token), and each header value an
    OpenTelemetry collector is sent (`name=value,...`: a Langfuse or Honeycomb key)."""
    found = (value for name, value in environ.items() if is_credential(name) and len(value) >= _MIN_FOUND_LEN)
    values = (
        unquote(pair.partition("=")[2]).strip() for name in _OTEL_HEADERS for pair in environ.get(name, "").split(",")
    )
    headers = (value for value in values if len(value) >= _MIN_FOUND_LEN)
    return _unique([*(key for key in explicit if key), *found, *headers])


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced; longer secrets first, so one that holds another goes whole."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def redacted(value: _T, secrets: Iterable[str]) -> _T:
    """`value` with every secret in its text replaced, for what a run hands out (events, its
    result): text, a dataclass (an event, a record, a result), an error, or lists, tuples and
    mappings of them, copied; anything else as it is."""
    held = tuple(filter(None, secrets))
    return _walk(value, held) if held else value


def _walk(value: Any, ordered: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, ordered)
    if isinstance(value, BaseException):  # its message and attributes (an exit's stderr tail)
        error = copy.copy(value)
        error.args = _walk(value.args, ordered)
        error.__dict__.update(_walk(dict(vars(value)), ordered))
        return error
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _walk(getattr(value, f.name), ordered) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    if isinstance(value, Mapping):
        items = {_walk(key, ordered): _walk(item, ordered) for key, item in value.items()}
        return MappingProxyType(items) if isinstance(value, MappingProxyType) else items
    if type(value) in (list, tuple):
        return type(value)(_walk(item, ordered) for item in value)
    return value


def token_digest(token: str) -> str:
    """What a server keeps of a token it handed out (a launch's, a login's): a digest, to look it
    up by without holding the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


def refuse_inspection() -> bool:
    """Mark this process non-dumpable: a process of the same user outside any sandbox (an
    unconfined agent's bash tool) can then read neither its /proc/<pid>/environ nor its memory,
    nor attach a debugger. Its argv stays world-readable (hence `--api-key-file`), and root
    (CAP_SYS_PTRACE) still reads everything: the sandbox, not this, is the guard. Children are
    not affected, exec makes them dumpable again. Returns whether it took effect (False off Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable = 4
    return bool(libc.prctl(pr_set_dumpable, 0, 0, 0, 0) == 0)


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))
