"""What a run changed in its workdir: a snapshot before OpenCode starts, one after it exits, and
the difference as created, modified and deleted files with unified diffs.

OpenCode's own events name the files its write and edit tools touched, but not what its bash tool
did (a `sed -i`, a generated file, an `rm`). Comparing the tree itself catches every change.

A snapshot keeps the bytes of small files (to diff them later) and only the size and mtime of the
rest; version-control folders are skipped. A tree too big to snapshot is reported, not walked.
Diffs are computed in a worker process that is killed at the run's deadline: difflib takes minutes
on some files (many repeated lines), and a run ends by its deadline, diffs included. Each diff is
cut at a cap, which the cut diff names.
The workdir is the agent's (or a hostile repository's): only regular files are ever opened, and
without blocking, so a FIFO, a socket or a device is listed by its metadata and never read; a walk
that outlasts its deadline stops.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import math
import os
import pickle
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileChange", "Snapshot", "Unlisted", "changes", "snapshot"]

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
MAX_FILES = 100_000
MAX_KEPT_BYTES = 256 * 1024 * 1024  # bytes of file content one snapshot keeps in memory at most
DEFAULT_MAX_DIFF_BYTES = 256 * 1024  # a diff longer than this is cut (diff_max_bytes)


class Unlisted(Exception):
    """The workdir could not be snapshotted: more files than a snapshot walks, or past the deadline."""


@dataclass(frozen=True)
class FileChange:
    """One file the run created, modified or deleted, relative to the workdir (with `/`)."""

    path: str
    change: str  # "created", "modified" or "deleted"
    # Unified diff, cut at diff_max_bytes (the cut one says so); None for binary files, files over
    # the size limit, and diffs the run's deadline left uncomputed.
    diff: str | None = None

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

    def changes(
        self, after: Snapshot, *, deadline: float = math.inf, max_diff_bytes: int = DEFAULT_MAX_DIFF_BYTES
    ) -> tuple[tuple[FileChange, ...], tuple[str, ...]]:
        """What happened between this snapshot and `after`, sorted by path, with diffs computed
        until `deadline` (time.monotonic()) and cut at `max_diff_bytes`; and notes on what was
        left out (diffs the deadline left uncomputed, diffs cut)."""
        found: list[tuple[str, str]] = []
        pairs: dict[str, tuple[str, list[str], list[str]]] = {}
        for path in sorted(self.entries.keys() | after.entries.keys()):
            old, new = self.entries.get(path), after.entries.get(path)
            if old is not None and new is not None and not _differ(old, new):
                continue
            change = "created" if old is None else "deleted" if new is None else "modified"
            found.append((path, change))
            before, now = [] if old is None else _text(old.content), [] if new is None else _text(new.content)
            if before is not None and now is not None:
                pairs[path] = (change, before, now)
        diffs = _diff_in_worker(pairs, deadline, max_diff_bytes)
        notes = []
        if len(diffs) < len(pairs):
            notes.append(
                f"{len(pairs) - len(diffs)} file diffs were not computed by the run's deadline (their "
                "files are listed without one)"
            )
        cut = sum(diff.endswith(_cut_note(max_diff_bytes)) for diff in diffs.values())
        if cut:
            notes.append(f"{cut} file diffs are cut at {max_diff_bytes:,} bytes (diff_max_bytes)")
        return tuple(FileChange(path, change, diffs.get(path)) for path, change in found), tuple(notes)


def _differ(old: _Entry, new: _Entry) -> bool:
    if old.content is not None and new.content is not None:
        return old.content != new.content
    # A file too big to keep is compared by size and mtime: a rewrite with the same bytes counts.
    return (old.size, old.mtime_ns) != (new.size, new.mtime_ns)


def _cut_note(cap: int) -> str:
    return f"\\ diff cut at {cap:,} bytes (diff_max_bytes)\n"


def _diff(path: str, change: str, before: list[str], after: list[str], cap: int) -> str:
    """A unified diff (git's headers), cut at `cap` bytes."""
    lines = difflib.unified_diff(
        before,
        after,
        "/dev/null" if change == "created" else f"a/{path}",
        "/dev/null" if change == "deleted" else f"b/{path}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if len(text.encode()) <= cap:
        return text
    return text.encode()[:cap].decode(errors="ignore").rsplit("\n", 1)[0] + "\n" + _cut_note(cap)


def _diff_in_worker(pairs: Mapping[str, tuple[str, list[str], list[str]]], deadline: float, cap: int) -> dict[str, str]:
    """The diffs the worker (this module, run as a process) finished by `deadline`, smallest file
    first; then it is killed."""
    if not pairs or time.monotonic() >= deadline:
        return {}
    order = sorted(pairs, key=lambda path: sum(map(len, pairs[path][1])) + sum(map(len, pairs[path][2])))
    work = pickle.dumps(([(path, *pairs[path]) for path in order], cap))
    worker = subprocess.Popen(
        [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        remaining = None if deadline == math.inf else max(deadline - time.monotonic(), 0.001)
        out, _ = worker.communicate(work, timeout=remaining)
    except subprocess.TimeoutExpired:
        worker.kill()
        out, _ = worker.communicate()  # what it wrote before the deadline
    diffs = {}
    for line in out.splitlines():
        try:
            path, diff = json.loads(line)
        except ValueError:  # the line it was writing when it was killed
            continue
        diffs[path] = diff
    return diffs


def _work() -> None:
    """The worker: diffs for the pickled (path, change, before, after) lines on stdin, a JSON line
    each, flushed as each is done."""
    items, cap = pickle.loads(sys.stdin.buffer.read())
    for path, change, before, after in items:
        sys.stdout.write(json.dumps([path, _diff(path, change, before, after, cap)]) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _work()


async def snapshot(workdir: Path, max_file_bytes: int, deadline: float, warnings: list[str]) -> Snapshot | None:
    """The workdir's files, for RunResult.files; None (and a warning) when there are too many."""
    try:
        return await asyncio.to_thread(Snapshot.take, workdir, max_file_bytes=max_file_bytes, deadline=deadline)
    except Unlisted as exc:
        warnings.append(f"file changes are not listed: {exc}")
        return None


async def changes(
    before: Snapshot | None, workdir: Path, max_bytes: int, deadline: float, warnings: list[str]
) -> tuple[FileChange, ...]:
    """What the run changed in its workdir, diffs computed until the deadline."""
    after = None if before is None else await snapshot(workdir, max_bytes, deadline, warnings)
    if before is None or after is None:
        return ()
    files, notes = await asyncio.to_thread(before.changes, after, deadline=deadline, max_diff_bytes=max_bytes)
    warnings.extend(notes)
    return files
