"""What the command line's arguments become: the Settings (the settings file with the flags over
it), KEY=VALUE pairs, and the texts a flag names (a file, or stdin), read as UTF-8 or refused
with a message that says which."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._yaml import load_yaml
from ..approvals.policy import Policy, parse_policy
from ..config.file import load_settings
from ..config.settings import TABLE, Settings
from ..errors import SettingsError, one_line

__all__ = ["api_key_of", "output_schema", "pairs", "read_text_file", "settings_of", "stdin_text"]


def pairs(pairs: Sequence[str], flag: str = "--metadata", example: str = "ticket=ENG-412") -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{flag} {pair!r} is not KEY=VALUE (e.g. {flag} {example})")
        metadata[key.strip()] = value
    return metadata


def read_text_file(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read the {what} file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SettingsError(f"the {what} file {path} is not UTF-8 text (byte {exc.start})") from None


def stdin_text(what: str) -> str:
    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(f"the {what} on stdin is not UTF-8 text (byte {exc.start})") from None


def output_schema(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        schema = json.loads(read_text_file(path, "output schema"))
    except ValueError as exc:
        raise SettingsError(f"the output schema file {path} is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise SettingsError(f"the output schema file {path} must hold a JSON object (a JSON schema)")
    return schema


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings file (--config) with the flags over it. A flag sets the setting of the same
    name (its argparse dest, cli/flags.py); a repeatable one adds to the file's list or mapping; a
    file flag is read here."""
    base = load_settings(args.config)
    key = api_key_of(args)  # --api-key, or --api-key-file read
    changes: dict[str, Any] = {} if key is None else {"api_key": key}
    if getattr(args, "api_key_file", None):
        changes["secret_files"] = (*base.secret_files, Path(args.api_key_file).resolve())
    for name, row in TABLE.items():
        given = getattr(args, name, None)
        if name in changes or given is None or given == []:
            continue
        if name in _FROM_FILE:
            changes[name] = _FROM_FILE[name](given)
        elif isinstance(getattr(base, name), Mapping):  # KEY=VALUE pairs, over the file's
            changes[name] = {**getattr(base, name), **pairs(given, row.flag[-1], _EXAMPLES.get(name, ""))}
        elif isinstance(given, list):  # added to the file's list; paths resolved where the flag was given
            changes[name] = (*getattr(base, name), *map(_absolute if row.paths else str, given))
        else:
            changes[name] = given
    return base.replace(**changes)


def api_key_of(args: argparse.Namespace) -> str | None:
    path = getattr(args, "api_key_file", None)
    if path:
        key = read_text_file(path, "API key").strip()
        if not key:
            raise SettingsError(f"the API key file {path} is empty")
        return key
    return getattr(args, "api_key", None)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _policy(path: str) -> Policy:
    """An --approve file: the `approvals:` setting's mapping, alone or under that key."""
    import yaml

    try:
        data = load_yaml(read_text_file(path, "approval policy"))
    except yaml.YAMLError as exc:
        raise SettingsError(f"the approval policy file {path} is not valid YAML: {one_line(str(exc))}") from None
    if isinstance(data, dict) and set(data) == {"approvals"}:
        data = data["approvals"]
    return parse_policy(data, where=f"{path}: approvals")


_FROM_FILE: dict[str, Callable[[str], Any]] = {
    "instructions": lambda path: read_text_file(path, "instructions"),
    "approvals": _policy,
}
_EXAMPLES = {"metadata": "ticket=ENG-412", "routes": "compaction=openai/gpt-4.1"}
