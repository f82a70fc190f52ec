"""Where a kept session belongs, read from OpenCode's own database (a copy of its `session`
table's shape; the end-to-end test reads a real one)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from opencode_gateway.opencode.sessions import session_directory


def _store(tmp_path: Path, schema: str, *rows: tuple[str, ...]) -> Path:
    database = tmp_path / "opencode" / "opencode.db"
    database.parent.mkdir(parents=True)
    with sqlite3.connect(database) as connection:
        connection.execute(schema)
        connection.executemany(f"INSERT INTO session VALUES ({', '.join('?' * len(rows[0]))})", rows)
    connection.close()
    return tmp_path


def test_the_folder_a_session_was_started_in(tmp_path: Path) -> None:
    store = _store(tmp_path, "CREATE TABLE session (id TEXT, project_id TEXT, directory TEXT)",
                   ("ses_a", "global", "/work/a"), ("ses_b", "global", "/work/b"))
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
    store = _store(tmp_path, "CREATE TABLE session (id TEXT, directory TEXT)", ("ses_a", "/work/a"))
    database = store / "opencode" / "opencode.db"
    before = database.read_bytes()
    assert session_directory(store, "ses_a") == Path("/work/a")
    assert database.read_bytes() == before and sorted(p.name for p in database.parent.iterdir()) == ["opencode.db"]
