"""The settings file (config.yaml): read into Settings, every key checked against the settings
that exist, `os.environ/NAME` values read from the environment, `file:PATH` keys and relative paths
taken beside the file."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._yaml import load_yaml
from ..errors import SettingsError
from .settings import TABLE, Settings

__all__ = ["ENV_PREFIX", "FILE_PREFIX", "beside", "load_settings"]

ENV_PREFIX = "os.environ/"
FILE_PREFIX = "file:"


def beside(file: Path, paths: Iterable[str]) -> list[str]:
    """Paths named in `file` (a settings or tasks file), found relative to the file's folder."""
    return [str(file.parent / Path(path).expanduser()) for path in paths]


def _resolve_env(value: Any, where: str) -> Any:
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        name = value[len(ENV_PREFIX) :]
        if name not in os.environ:
            raise SettingsError(f"{where}: environment variable {name} is not set (referenced as {value})")
        return os.environ[name]
    if isinstance(value, dict):
        return {k: _resolve_env(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_env(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _key_from_file(settings_file: Path, name: str) -> str:
    """`api_key: file:PATH`: the key in PATH (beside the settings file when relative)."""
    path = Path(beside(settings_file, [name])[0])
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{settings_file}: api_key: cannot read the key file {path} ({exc})") from None
    if not key:
        raise SettingsError(f"{settings_file}: api_key: the key file {path} is empty")
    return key


def _read(file: Path) -> Any:
    """The file's YAML, or a SettingsError saying why it cannot be read."""
    import yaml

    try:
        return load_yaml(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"{file}: cannot read the settings file ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{file}: not UTF-8 text (byte {exc.start}): save the settings file as UTF-8") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise SettingsError(f"{file}: not valid YAML{at}{f' ({problem})' if problem else ''}") from exc


def _unknown(file: Path, key: Any) -> SettingsError:
    close = difflib.get_close_matches(str(key), list(TABLE), n=1, cutoff=0.6)
    return SettingsError(
        f"{file}: unknown setting {key!r}"
        + (f"; did you mean {close[0]}?" if close else f"; known settings: {', '.join(TABLE)}")
    )


def _checked(file: Path, key: str, value: Any) -> Any:
    """`value` of setting `key`, its `os.environ/` references read, refused unless it is of one of
    the kinds the setting takes."""
    value = _resolve_env(value, f"{file}: {key}")
    expected = TABLE[key].kinds
    if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
        names = " or ".join(t.__name__ for t in expected)
        raise SettingsError(f"{file}: {key} must be {names}, not {type(value).__name__}")
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        raise SettingsError(f"{file}: {key} must be a list of strings")
    return value


def _placed(file: Path, key: str, value: Any, secret_files: list[Path]) -> Any:
    """A checked value as the settings take it: paths beside the file, a `file:` key read (its file
    a secret of the run's), a ledger path with `~` expanded."""
    if TABLE[key].paths and isinstance(value, list):
        return [str(Path(p).resolve()) for p in beside(file, value)]  # paths in a settings file: beside it
    if key == "api_key" and isinstance(value, str) and value.startswith(FILE_PREFIX):
        secret_files.append(Path(beside(file, [value[len(FILE_PREFIX) :]])[0]))
        return _key_from_file(file, value[len(FILE_PREFIX) :])
    if key == "ledger" and isinstance(value, str) and "://" not in value:
        return str(Path(value).expanduser())
    return value


def load_settings(path: str | os.PathLike[str] | None, base: Settings | None = None) -> Settings:
    """Read a config.yaml into Settings (over `base`); None reads nothing."""
    base = base or Settings()
    if path is None:
        return base
    file = Path(path)
    raw = _read(file)
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise SettingsError(f"{file}: the top level must be a mapping of settings")
    secret_files = [*base.secret_files, file.resolve()]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in TABLE:  # what config.yaml may contain: every setting of the table
            raise _unknown(file, key)
        if value is not None:  # written but empty: the default
            values[key] = _placed(file, key, _checked(file, key, value), secret_files)
    try:
        return base.replace(**values, secret_files=tuple(secret_files))  # which checks prices and budgets
    except SettingsError as exc:
        raise SettingsError(f"{file}: {exc}") from exc
