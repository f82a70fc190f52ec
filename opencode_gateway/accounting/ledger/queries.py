"""What is read from the ledger: every SQL query of it, but its writer's, lives here."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

from .schema import connect, ledger_error

__all__ = ["finished_values"]


def finished_values(path: Path, key: str, where: Mapping[str, str]) -> set[str]:
    """The values of metadata `key` among the runs that finished (stop_reason "done") and whose
    metadata holds every `where` pair. An absent ledger has none."""
    if not path.exists():
        return set()
    conditions = "".join(" AND json_extract(metadata, ?) = ?" for _ in where)
    parameters = [f'$."{key}"', *(p for name, value in where.items() for p in (f'$."{name}"', value))]
    connection = connect(path, create=False)
    try:
        rows = connection.execute(f"SELECT DISTINCT json_extract(metadata, ?) FROM runs WHERE stop_reason = 'done'"
                                  f"{conditions}", parameters).fetchall()
    except sqlite3.Error as exc:
        raise ledger_error(path, exc) from exc
    finally:
        connection.close()
    return {str(row[0]) for row in rows if row[0] is not None}
