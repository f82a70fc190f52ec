"""Which `opencode` a run uses: found in a fixed order, version-checked, or installed pinned.

Lookup order: the flag or setting (`--opencode-bin`), `$OPENCODE_BIN`, the pinned install in the
data dir (`opencode-gateway install-opencode`), `opencode` on PATH. Whatever is found must answer
`--version` with a supported version: a run on another program (or an OpenCode whose events and
config keys differ) would "succeed" with nothing done. The answer is cached by path and mtime, so
the check costs one process start per binary, not one per run. Which generation a version is
is generation.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import OpenCodeNotFound
from .generation import DEFAULT, GENERATIONS, Generation, generation_of, version_of

__all__ = ["SUPPORTED", "OpenCodeBinary", "find_opencode", "install_opencode", "opencode_version", "pinned_binary"]

SUPPORTED = " or ".join(generation.supported for generation in GENERATIONS)
INSTALL = "run `opencode-gateway install-opencode`"
INSTALL_HINT = f"{INSTALL}, or point --opencode-bin / OPENCODE_BIN at an OpenCode {SUPPORTED}"
_VERSION_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class OpenCodeBinary:
    """A checked OpenCode: where it is, and what it is."""

    path: str
    version: str
    generation: Generation


def pinned_binary(data_dir: Path, generation: Generation = DEFAULT) -> Path:
    """Where install-opencode puts a generation's binary under the data dir."""
    return data_dir / generation.folder / "node_modules" / ".bin" / "opencode"


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
        version = version_of(done.stdout.strip().splitlines()[0][:60]) if done.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OpenCodeNotFound(f"cannot run {binary} --version ({exc}): {INSTALL_HINT}") from None
    if generation_of(version) is not None:  # only a good answer is kept: a fixed binary is checked again
        cache[binary] = [key, version]
        with contextlib.suppress(OSError):
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_name(f"{cache_file.name}.{os.getpid()}")
            partial.write_text(json.dumps(cache))
            partial.replace(cache_file)  # runs at the same time never read half a file
    return version


def _checked(binary: str) -> OpenCodeBinary:
    version = opencode_version(binary)
    generation = generation_of(version)
    if generation is None:
        found = f"version {version!r}" if version else "no version"
        raise OpenCodeNotFound(
            f"{binary} is not a supported OpenCode: `--version` gave {found}, opencode-gateway "
            f"supports {SUPPORTED}; {INSTALL}"
        )
    return OpenCodeBinary(binary, version, generation)


def find_opencode(explicit: str | None, data_dir: Path) -> OpenCodeBinary:
    """The opencode binary to run, checked (see the module's docstring for the order; of the
    pinned installs, the default generation's first)."""
    candidate = explicit or os.environ.get("OPENCODE_BIN")
    if candidate:
        path = Path(candidate).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return _checked(os.path.abspath(path))
        found = shutil.which(candidate)
        if found:
            return _checked(found)
        raise OpenCodeNotFound(f"opencode binary {candidate!r} does not exist or is not executable: {INSTALL_HINT}")
    pinned = [pinned_binary(data_dir, generation) for generation in dict.fromkeys((DEFAULT, *GENERATIONS))]
    for binary in pinned:
        if os.access(binary, os.X_OK):
            return _checked(str(binary))
    found = shutil.which("opencode")
    if not found:
        raise OpenCodeNotFound(
            f"no opencode found (not installed in {pinned[0].parent.parent.parent.parent}, not on PATH): {INSTALL_HINT}"
        )
    return _checked(found)


def install_opencode(data_dir: Path, version: str = DEFAULT.pinned) -> Path:
    """Install OpenCode `version` with npm into the data dir, from its generation's package
    (`opencode-ai` for 1.18, `@opencode/cli` for 2.x), each generation in a folder of its own
    (nothing when it is already there); returns the binary."""
    generation = generation_of(version)
    if generation is None:
        known = ", ".join(f"{g.supported} (e.g. {g.pinned})" for g in GENERATIONS)
        raise OpenCodeNotFound(f"--version {version!r} is not an OpenCode version this installs: {known}")
    binary = pinned_binary(data_dir, generation)
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
            f"{generation.package}@{version}",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OpenCodeNotFound(f"npm could not install {generation.package}@{version} into {prefix}: {last}")
    return binary
