"""What a run is attributed by: its tags and metadata, checked once for everywhere they go.

Tags and metadata travel in LiteLLM's headers, the ledger, reports (a pull-request comment, a
spreadsheet), traces and terminals, and come from a settings file, a flag or a launcher's request."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SettingsError

__all__ = ["check_attribution"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1
# A byte that was not UTF-8 (argv and the environment are decoded with surrogateescape) or a
# lone surrogate a JSON file escaped: text no database, header or report can carry.
_NOT_UTF8 = re.compile("[\ud800-\udfff]")


def check_attribution(tags: Iterable[Any], metadata: Mapping[str, Any], tag_metadata_keys: Iterable[str]) -> None:
    """Tags and metadata as the gateway can carry them: raises SettingsError naming the bad one.
    No control character anywhere: a value reaches headers, reports, pull-request comments and
    terminals, where a newline or an ESC would write outside its cell. Strict UTF-8: one value
    that is not would fail every report of a team's ledger, and every budget query with it."""
    _check_utf8(tags, metadata)
    for tag in tags:
        if not isinstance(tag, str) or not tag or "," in tag or tag != tag.strip() or _CONTROL.search(tag):
            raise SettingsError(
                f"tag {tag!r} is invalid: tags are non-empty text with no comma, edge spaces "
                "or control characters (CR/LF)"
            )
    for key, value in metadata.items():
        if any(_CONTROL.search(text) for text in _texts([key, value])):
            raise SettingsError(
                f"metadata {key!r}={value!r} holds a control character (newline, tab, ESC, ...): "
                "write the value on one line of plain text"
            )
    for key in tag_metadata_keys:
        value = str(metadata.get(key, ""))
        if "," in value:
            raise SettingsError(
                f"metadata {key}={metadata[key]!r} contains a comma, but {key} is also sent as a tag "
                "(tag_metadata_keys): remove it"
            )


def _check_utf8(tags: Iterable[Any], metadata: Mapping[str, Any]) -> None:
    for what, text in [*(("tag", tag) for tag in tags), *(("metadata", t) for t in _texts(dict(metadata)))]:
        if isinstance(text, str) and _NOT_UTF8.search(text):
            raise SettingsError(
                f"{what} {ascii(text)} is not UTF-8 text: give it as UTF-8 (check the terminal's or file's encoding)"
            )


def _texts(value: Any) -> Iterable[str]:
    """Every text in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)
