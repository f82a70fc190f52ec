"""Kept sessions: where each belongs and what it is, read from OpenCode's own database (a copy of its `session`
table's shape; the end-to-end test reads a real one)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from opencode_gateway.opencode.sessions import kept_sessions, prune_sessions, session_directory

# The columns of OpenCode 1.18's `session` table that are read (it has more).
SCHEMA = "CREATE TABLE session (id TEXT, directory TEXT, time_created INTEGER, time_updated INTEGER, model TEXT)"


def _store(tmp_path: Path, schema: str, *rows: tuple[str, ...]) -> Path:
    database = tmp_path / "opencode" / "opencode.db"
    database.parent.mkdir(parents=True)
    with sqlite3.connect(database) as connection:
        connection.execute(schema)
        connection.executemany(f"INSERT INTO session VALUES ({', '.join('?' * len(rows[0]))})", rows)
    connection.close()
    return tmp_path


def test_the_folder_a_session_was_started_in(tmp_path: Path) -> None:
    store = _store(tmp_path, SCHEMA, ("ses_a", "/work/a", 1, 2, None), ("ses_b", "/work/b", 1, 2, None))
    assert session_directory(store, "ses_b") == Path("/work/b")
    assert session_directory(store, "ses_c") is None


def test_a_store_that_does_not_say_is_unknown_not_an_error(tmp_path: Path) -> None:
    assert session_directory(tmp_path / "empty", "ses_a") is None
    other = _store(tmp_path / "other", "CREATE TABLE session (id TEXT, folder TEXT)", ("ses_a", "/work/a"))
    assert session_directory(other, "ses_a") is None
    broken = tmp_path / "broken" / "opencode" / "opencode.db"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a database at all" * 100)
    assert session_directory(tmp_path / "broken", "ses_a") is None


def test_reading_it_changes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path, SCHEMA, ("ses_a", "/work/a", 1, 2, None))
    database = store / "opencode" / "opencode.db"
    before = database.read_bytes()
    assert session_directory(store, "ses_a") == Path("/work/a")
    assert database.read_bytes() == before and sorted(p.name for p in database.parent.iterdir()) == ["opencode.db"]


def _kept(data_dir: Path, session_id: str, *, last_used_ms: int, directory: str = "/work/a") -> Path:
    store = _store(
        data_dir / "sessions" / session_id,
        SCHEMA,
        (session_id, directory, last_used_ms - 60_000, last_used_ms, '{"id": "openai/gpt-4o-mini"}'),
    )
    (store / "opencode" / "log.txt").write_bytes(b"x" * 1000)
    for path in store.rglob("*"):  # the files as old as the session: pruning never reads the clock's today
        os.utime(path, (last_used_ms / 1000, last_used_ms / 1000))
    return store


NOW = 1_800_000_000.0


def test_kept_sessions_say_when_where_and_on_what_least_recently_used_first(tmp_path: Path) -> None:
    _kept(tmp_path, "ses_new", last_used_ms=int(NOW * 1000), directory="/work/b")
    _kept(tmp_path, "ses_old", last_used_ms=int((NOW - 40 * 86_400) * 1000))
    old, new = kept_sessions(tmp_path)
    assert (old.session_id, old.workdir, old.model) == ("ses_old", "/work/a", "openai/gpt-4o-mini")
    assert new.session_id == "ses_new" and new.workdir == "/work/b" and new.started == NOW - 60
    assert new.size_bytes > 1000
    assert kept_sessions(tmp_path / "nothing-kept") == []


def test_prune_removes_exactly_the_sessions_unused_for_longer_than_it_says(tmp_path: Path) -> None:
    for name, days in (("ses_a", 40), ("ses_b", 31), ("ses_c", 29), ("ses_d", 1)):
        _kept(tmp_path, name, last_used_ms=int((NOW - days * 86_400) * 1000))
    removed = prune_sessions(tmp_path, 30, now=NOW)
    assert [kept.session_id for kept in removed] == ["ses_a", "ses_b"]
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == ["ses_c", "ses_d"]
    assert [kept.session_id for kept in prune_sessions(tmp_path, 0, keep="ses_d", now=NOW)] == ["ses_c"]
    assert [p.name for p in (tmp_path / "sessions").iterdir()] == ["ses_d"]


def test_last_used_is_opencodes_own_record_which_reading_does_not_change(tmp_path: Path) -> None:
    """Reading OpenCode's database touches its -shm file: last-used taken from the newest file said
    "now" for every session after a `sessions list`, and prune removed nothing."""
    store = _kept(tmp_path, "ses_old", last_used_ms=int((NOW - 40 * 86_400) * 1000))
    with sqlite3.connect(store / "opencode" / "opencode.db") as connection:
        connection.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_updated INTEGER)")
        connection.execute("INSERT INTO message VALUES ('m1', 'ses_old', ?)", (int((NOW - 35 * 86_400) * 1000),))
    connection.close()
    for path in store.rglob("*"):  # what a listing (or a backup, a copy) does to the files' times
        os.utime(path, (NOW, NOW))
    [kept] = kept_sessions(tmp_path)
    assert kept.last_used == NOW - 35 * 86_400  # its newest message
    assert [k.session_id for k in prune_sessions(tmp_path, 30, now=NOW)] == ["ses_old"]
