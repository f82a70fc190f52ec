"""What a kept OpenCode session says about itself: the folder it belongs to.

OpenCode 1.18 continues a session (`--session ID`) in the folder the session was started in,
whatever folder `opencode run` was started in: it answers the prompt there, tools included, but
the run command waits for the session to go idle in its own folder and never exits. So a run that
continues a session must run in the session's folder, and the runner checks that before OpenCode
starts. The folder is in OpenCode's own database (`opencode/opencode.db` under the session's data
home, table `session`, column `directory`); it is read read-only, and a database this version does
not know reads as "unknown", not as an error.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

__all__ = ["session_directory"]


def session_directory(data_home: Path, session_id: str) -> Path | None:
    """The folder OpenCode started session `session_id` in, from the data home it is kept in;
    None when the store does not say (no database, another schema, locked for longer than 2 s)."""
    database = data_home / "opencode" / "opencode.db"
    if not database.is_file():
        return None
    with contextlib.suppress(sqlite3.Error):
        connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=2.0)
        try:
            row = connection.execute("SELECT directory FROM session WHERE id = ?", (session_id,)).fetchone()
        finally:
            connection.close()
        if row is not None and isinstance(row[0], str) and row[0]:
            return Path(row[0])
    return None
