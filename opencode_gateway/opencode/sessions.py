"""The sessions runs keep for `--session`: what each says about itself, and pruning them.

OpenCode 1.18 continues a session (`--session ID`) in the folder the session was started in,
whatever folder `opencode run` was started in: it answers the prompt there, tools included, but
the run command waits for the session to go idle in its own folder and never exits. So a run that
continues a session must run in the session's folder, and the runner checks that before OpenCode
starts; on 2.x too, whose `--session` creates a session it does not know: a run continues only a
session it kept. The folder is in OpenCode's own database (`opencode/opencode.db` under the
session's data home, table `session`, 2.x's `session_v2`, column `directory`); it is read
read-only, and a database this version does not know reads as "unknown", not as an error. Each
kept session is about a megabyte: they are pruned after `keep_sessions_days` without use, and by
`opencode-gateway sessions prune`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SettingsError

__all__ = [
    "KeptSession",
    "is_session_id",
    "keep_session",
    "kept_sessions",
    "prune_sessions",
    "session_directory",
    "session_store",
]

# Where OpenCode's database keeps a session's row: 1.18's `session`, 2.x's `session_v2` (same
# columns for what is read here: time_created, time_updated, directory, model).
_SESSION_TABLES = ("session", "session_v2")
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def is_session_id(text: str) -> bool:
    """Whether `text` can name a session (and so a folder of its own: no path in it)."""
    return _SESSION_ID.match(text) is not None


def session_store(data_dir: Path, session_id: str) -> Path:
    """Where session `session_id` is kept for `--session`; SettingsError for an id that is none."""
    if not is_session_id(session_id):
        raise SettingsError(f"session id {session_id!r} is invalid: pass a RunResult.session_id (ses_...)")
    return data_dir / "sessions" / session_id


def session_directory(data_home: Path, session_id: str) -> Path | None:
    """The folder OpenCode started session `session_id` in, from the data home it is kept in;
    None when the store does not say (no database, another schema, locked for longer than 2 s)."""
    row = _session_row(data_home, session_id)
    return Path(row[1]) if row is not None and isinstance(row[1], str) and row[1] else None


@dataclass(frozen=True)
class KeptSession:
    """A session a run kept (under `<data dir>/sessions/`), for `--session`."""

    session_id: str
    path: Path
    started: float | None  # Unix seconds, as OpenCode recorded it
    last_used: float  # Unix seconds: OpenCode's last write to the session (else the store's newest file)
    workdir: str | None
    model: str | None
    size_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "started": self.started,
            "last_used": self.last_used,
            "workdir": self.workdir,
            "model": self.model,
            "size_bytes": self.size_bytes,
            "path": str(self.path),
        }


def _session_row(store: Path, session_id: str) -> tuple[Any, ...] | None:
    database = store / "opencode" / "opencode.db"
    if not database.is_file():
        return None
    with contextlib.suppress(sqlite3.Error):
        connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=2.0)
        try:
            for table in _SESSION_TABLES:
                with contextlib.suppress(sqlite3.Error):
                    row = connection.execute(
                        f"SELECT time_created, directory, model FROM {table} WHERE id = ?", (session_id,)
                    ).fetchone()
                    if row is not None:
                        return tuple(row)
        finally:
            connection.close()
    return None


def _model(text: Any) -> str | None:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(text)["id"])
    return None


def _last_written(store: Path) -> float | None:
    """When OpenCode last wrote to the session (its row's or its newest message's time_updated),
    from its own records: reading the database touches its -shm file, so a file's time said
    "just now" for every session after a `sessions list`, and nothing was ever pruned."""
    database = store / "opencode" / "opencode.db"
    if not database.is_file():
        return None
    times: list[float] = []
    with contextlib.suppress(sqlite3.Error):
        connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=2.0)
        try:
            for query in (
                *(f"SELECT time_updated FROM {table} WHERE id = ?" for table in _SESSION_TABLES),
                "SELECT MAX(time_updated) FROM message WHERE session_id = ?",
            ):
                with contextlib.suppress(sqlite3.Error):
                    row = connection.execute(query, (store.name,)).fetchone()
                    times += [row[0]] if row is not None and isinstance(row[0], (int, float)) and row[0] > 0 else []
        finally:
            connection.close()
    return max(times) / 1000 if times else None


def _stores(data_dir: Path) -> list[tuple[Path, float]]:
    """Each kept session's folder and when it was last used (OpenCode's own record of it; for a
    store without one, its newest file), the least recently used first."""
    root = data_dir / "sessions"
    found = []
    for store in root.iterdir() if root.is_dir() else ():
        if store.is_dir() and not store.is_symlink():
            last = _last_written(store)
            if last is None:
                times = [path.stat().st_mtime for path in store.rglob("*") if path.is_file() and not path.is_symlink()]
                last = max(times, default=store.stat().st_mtime)
            found.append((store, last))
    return sorted(found, key=lambda entry: (entry[1], entry[0].name))


def _describe(store: Path, last_used: float) -> KeptSession:
    """A kept session, as OpenCode's database and the folder say."""
    row = _session_row(store, store.name)
    created, directory, model = row if row is not None else (None, None, None)
    return KeptSession(
        session_id=store.name,
        path=store,
        started=created / 1000 if isinstance(created, (int, float)) else None,
        last_used=last_used,
        workdir=directory if isinstance(directory, str) else None,
        model=_model(model),
        size_bytes=sum(path.stat().st_size for path in store.rglob("*") if path.is_file() and not path.is_symlink()),
    )


def kept_sessions(data_dir: Path) -> list[KeptSession]:
    """Every kept session, the least recently used first."""
    return [_describe(store, last_used) for store, last_used in _stores(data_dir)]


def prune_sessions(
    data_dir: Path, older_than_days: float, *, keep: str | None = None, now: float | None = None
) -> list[KeptSession]:
    """Remove the kept sessions last used more than `older_than_days` ago (0: every one) but
    `keep`; return what was removed. Only those are read closely: a run calls this as it starts."""
    cutoff = (time.time() if now is None else now) - older_than_days * 86_400
    removed = []
    for store, last_used in _stores(data_dir):
        if store.name != keep and (older_than_days <= 0 or last_used < cutoff):
            removed.append(_describe(store, last_used))
            shutil.rmtree(store, ignore_errors=True)
    return removed


def keep_session(data_dir: Path, data_home: Path, session_id: str | None) -> str | None:
    """A new session's store (the run's data home), kept under the data dir for --session; when
    it cannot be (a full disk, a data dir made read-only during the run), why, in one line, and no
    half-copied store left behind: the run itself is done, only its session is not kept."""
    if not session_id or not is_session_id(session_id):
        return None
    store = session_store(data_dir, session_id)
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(data_home), store)
    except OSError as exc:
        shutil.rmtree(store, ignore_errors=True)
        # shutil.move's copy gathers each file's error in one shutil.Error: its first one says why
        number = exc.errno or next(map(int, re.findall(r"\[Errno (\d+)\]", str(exc))), None)
        reason = os.strerror(number) if number else str(exc)
        return f"the session {session_id} could not be kept under {data_dir} ({reason}): --session cannot continue it"
    return None
