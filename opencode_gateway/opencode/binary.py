"""Which `opencode` a run uses: found in a fixed order, version-checked, or installed pinned.

Lookup order: the flag or setting (`--opencode-bin`), `$OPENCODE_BIN`, the pinned install in the
data dir (`opencode-gateway install-opencode`), `opencode` on PATH. Whatever is found must answer
`--version` with a supported version: a run on another program (or an OpenCode whose events and
config keys differ) would "succeed" with nothing done. The answer is cached by path and mtime, so
the check costs one process start per binary, not one per run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import OpenCodeNotFound
from .config import OPENCODE_VERSION

__all__ = ["SUPPORTED", "find_opencode", "install_opencode", "opencode_version", "pinned_binary", "supported"]

SUPPORTED = "1.18.x"  # the versions the suite runs against (it pins OPENCODE_VERSION)
INSTALL = "run `opencode-gateway install-opencode`"
INSTALL_HINT = f"{INSTALL}, or point --opencode-bin / OPENCODE_BIN at an OpenCode {SUPPORTED}"
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)\S*$")
_VERSION_TIMEOUT_S = 30.0


def supported(version: str) -> bool:
    match = _VERSION.match(version)
    return match is not None and (int(match[1]), int(match[2])) == (1, 18)


def pinned_binary(data_dir: Path) -> Path:
    return data_dir / "opencode" / "node_modules" / ".bin" / "opencode"


def _cache_file() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "opencode-gateway" / "opencode-versions.json"


def opencode_version(binary: str) -> str:
    """`binary --version`, from the cache when the file has not changed since it was asked."""
    cache_file = _cache_file()
    stat = os.stat(binary)
    key = f"{stat.st_mtime_ns}:{stat.st_size}"
    cache: dict[str, list[str]] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(cache_file.read_text())
        cache = loaded if isinstance(loaded, dict) else {}
    cached = cache.get(binary)
    if isinstance(cached, list) and len(cached) == 2 and cached[0] == key:
        return str(cached[1])
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=_VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
        version = done.stdout.strip().splitlines()[0].strip()[:60] if done.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OpenCodeNotFound(f"cannot run {binary} --version ({exc}): {INSTALL_HINT}") from None
    if supported(version):  # only a good answer is kept: a fixed binary is checked again
        cache[binary] = [key, version]
        with contextlib.suppress(OSError):
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_name(f"{cache_file.name}.{os.getpid()}")
            partial.write_text(json.dumps(cache))
            partial.replace(cache_file)  # runs at the same time never read half a file
    return version


def _checked(binary: str) -> str:
    version = opencode_version(binary)
    if not supported(version):
        found = f"version {version!r}" if version else "no version"
        raise OpenCodeNotFound(
            f"{binary} is not a supported OpenCode: `--version` gave {found}, opencode-gateway "
            f"supports {SUPPORTED}; {INSTALL}"
        )
    return binary


def find_opencode(explicit: str | None, data_dir: Path) -> str:
    """The opencode binary to run, checked (see the module's docstring for the order)."""
    candidate = explicit or os.environ.get("OPENCODE_BIN")
    if candidate:
        path = Path(candidate).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return _checked(os.path.abspath(path))
        found = shutil.which(candidate)
        if found:
            return _checked(found)
        raise OpenCodeNotFound(f"opencode binary {candidate!r} does not exist or is not executable: {INSTALL_HINT}")
    pinned = pinned_binary(data_dir)
    if os.access(pinned, os.X_OK):
        return _checked(str(pinned))
    found = shutil.which("opencode")
    if not found:
        raise OpenCodeNotFound(
            f"no opencode found (not installed in {pinned.parent.parent.parent}, not on PATH): {INSTALL_HINT}"
        )
    return _checked(found)


def install_opencode(data_dir: Path, version: str = OPENCODE_VERSION) -> Path:
    """Install `opencode-ai@version` with npm into the data dir (nothing when it is already
    there); returns the binary."""
    if not _VERSION.match(version):
        raise OpenCodeNotFound(f"--version {version!r} is not a version such as {OPENCODE_VERSION}")
    binary = pinned_binary(data_dir)
    if os.access(binary, os.X_OK) and opencode_version(str(binary)) == version:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise OpenCodeNotFound(
            "npm is not on PATH: install Node.js with npm (e.g. apt-get install npm), then "
            "run `opencode-gateway install-opencode` again"
        )
    prefix = binary.parent.parent.parent
    prefix.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(prefix),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"opencode-ai@{version}",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OpenCodeNotFound(f"npm could not install opencode-ai@{version} into {prefix}: {last}")
    return binary
