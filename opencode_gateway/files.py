"""What a run changed in its workdir: a snapshot before OpenCode starts, one after it exits, and
the difference as created, modified and deleted files with unified diffs.

OpenCode's own events name the files its write and edit tools touched, but not what its bash tool
did (a `sed -i`, a generated file, an `rm`). Comparing the tree itself catches every change.

A snapshot keeps the bytes of small files (to diff them later) and only the size and mtime of the
rest; version-control folders are skipped. A tree too big to snapshot is reported, not walked.
The workdir is the agent's (or a hostile repository's): only regular files are ever opened, and
without blocking, so a FIFO, a socket or a device is listed by its metadata and never read; a walk
that outlasts its deadline stops.
"""

from __future__ import annotations

import difflib
import math
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileChange", "Snapshot", "Unlisted"]

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
MAX_FILES = 100_000
MAX_KEPT_BYTES = 256 * 1024 * 1024  # bytes of file content one snapshot keeps in memory at most


class Unlisted(Exception):
    """The workdir could not be snapshotted: more files than a snapshot walks, or past the deadline."""


@dataclass(frozen=True)
class FileChange:
    """One file the run created, modified or deleted, relative to the workdir (with `/`)."""

    path: str
    change: str  # "created", "modified" or "deleted"
    diff: str | None = None  # unified diff; None for binary files and files over the size limit

    def to_dict(self) -> dict[str, str | None]:
        return {"path": self.path, "change": self.change, "diff": self.diff}


@dataclass(frozen=True)
class _Entry:
    size: int
    mtime_ns: int
    content: bytes | None  # None: over the size limit, or past the snapshot's memory budget


def _text(content: bytes | None) -> list[str] | None:
    if content is None or b"\0" in content[:8192]:
        return None
    try:
        return content.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _read(path: Path, mode: int) -> bytes | None:
    """A symlink's target (never followed: it may point out of the workdir), a regular file's
    bytes, nothing of anything else. O_NONBLOCK: a file swapped for a FIFO since its lstat must not
    block the walk; fstat then tells what was opened."""
    if stat.S_ISLNK(mode):
        return os.readlink(path).encode()
    if not stat.S_ISREG(mode):
        return None
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as file:
        return file.read() if stat.S_ISREG(os.fstat(descriptor).st_mode) else None


@dataclass(frozen=True)
class Snapshot:
    root: Path
    entries: Mapping[str, _Entry]

    @classmethod
    def take(cls, root: Path, *, max_file_bytes: int, deadline: float = math.inf) -> Snapshot:
        """Walk `root`; files up to `max_file_bytes` are kept whole. Raises Unlisted when the tree
        is too big or `deadline` (time.monotonic()) passes."""
        entries: dict[str, _Entry] = {}
        kept = 0
        for directory, dirs, files in os.walk(root):
            linked = [d for d in dirs if os.path.islink(os.path.join(directory, d))]  # listed, never entered
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and d not in linked)
            if time.monotonic() > deadline:
                raise Unlisted(f"listing {root} took longer than the run's timeout")
            for name in (*files, *linked):
                path = Path(directory, name)
                try:
                    info = path.lstat()
                    keep = info.st_size <= max_file_bytes and kept + info.st_size <= MAX_KEPT_BYTES
                    content = _read(path, info.st_mode) if keep else None
                except OSError:  # gone or unreadable while we looked: not a change of the run's
                    continue
                kept += len(content or b"")
                entries[path.relative_to(root).as_posix()] = _Entry(info.st_size, info.st_mtime_ns, content)
                if len(entries) > MAX_FILES:
                    raise Unlisted(f"{root} holds over {MAX_FILES:,} files")
        return cls(root, entries)

    def changes(self, after: Snapshot) -> tuple[FileChange, ...]:
        """What happened between this snapshot and `after`, sorted by path."""
        found = []
        for path in sorted(self.entries.keys() | after.entries.keys()):
            old, new = self.entries.get(path), after.entries.get(path)
            if old is None:
                found.append(FileChange(path, "created", _diff(path, None, new)))
            elif new is None:
                found.append(FileChange(path, "deleted", _diff(path, old, None)))
            elif _differ(old, new):
                found.append(FileChange(path, "modified", _diff(path, old, new)))
        return tuple(found)


def _differ(old: _Entry, new: _Entry) -> bool:
    if old.content is not None and new.content is not None:
        return old.content != new.content
    # A file too big to keep is compared by size and mtime: a rewrite with the same bytes counts.
    return (old.size, old.mtime_ns) != (new.size, new.mtime_ns)


def _diff(path: str, old: _Entry | None, new: _Entry | None) -> str | None:
    before = [] if old is None else _text(old.content)
    after = [] if new is None else _text(new.content)
    if before is None or after is None:
        return None
    lines = difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{path}",
                                 "/dev/null" if new is None else f"b/{path}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
