"""One open connection to a ledger, SQLite or PostgreSQL, behind one small interface: queries
written with `?` parameters, rows read by index or by name, a write transaction that holds the
locks it is given, and every driver error turned into a LedgerError that says what to do
(LedgerUnavailable when the database cannot be reached: the writer then spools)."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ...errors import LedgerConfigError, LedgerError, LedgerUnavailable, SettingsError
from .dialect import POSTGRES, SQLITE, Dialect
from .location import INSTALL, LedgerLocation

__all__ = ["Database", "open_postgres", "open_sqlite", "postgres_error", "sqlite_error"]

# libpq's words for a server that answered and refused: a configuration to fix, not an outage
_REFUSALS = ("password authentication failed", "does not exist", "no password supplied", "pg_hba.conf", "permission")


class Row(tuple):  # type: ignore[type-arg]
    """A Postgres row as sqlite3.Row is: by index, by name, and `keys()` (so `dict(row)` works)."""

    names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names.index(key))
        return tuple.__getitem__(self, key)

    def keys(self) -> tuple[str, ...]:
        return self.names


def _row_factory(cursor: Any) -> Any:
    names = tuple(column.name for column in cursor.description or ())
    kind = type("Row", (Row,), {"names": names})
    return lambda values: kind(values)


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, a surrogate is always a lone one
# A JSON escape of a lone surrogate (a pair, `\ud83d\ude00`, is one character and kept)
_LONE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _storable(parameters: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters as both databases take them: a text that is not UTF-8 (a lone surrogate, from a
    byte that was not UTF-8 in argv, or a `\\udXXX` escape in JSON the agent wrote) has U+FFFD in
    its place, and a JSON escape of one too. Stored as it came, it would fail its own insert (SQLite)
    or every later query that reads it as JSON (Postgres), reports and budgets included."""
    return tuple(
        _LONE_ESCAPE.sub(r"\\ufffd", _SURROGATE.sub("\ufffd", value)) if isinstance(value, str) else value
        for value in parameters
    )


class Database:
    """A ledger connection. `shown` names it in messages (a URL without its password)."""

    def __init__(self, connection: Any, dialect: Dialect, shown: str) -> None:
        self.connection = connection
        self.dialect = dialect
        self.shown = shown

    def _sql(self, sql: str) -> str:
        return sql if self.dialect is SQLITE else sql.replace("%", "%%").replace("?", "%s")

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        with self._errors():
            return self.connection.execute(self._sql(sql), _storable(parameters))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._errors():
            if self.dialect is SQLITE:
                self.connection.executemany(sql, map(_storable, rows))
            else:
                with self.connection.cursor() as cursor:
                    cursor.executemany(self._sql(sql), [_storable(row) for row in rows])

    @contextlib.contextmanager
    def transaction(self, locks: Iterable[str] = ()) -> Iterator[None]:
        """A write transaction; `locks` names what it decides on (a budget's key and value): on
        Postgres an advisory lock each, taken in order, so two machines deciding on the same
        budget take turns; SQLite's write lock already serializes every writer of the file."""
        with self._errors():
            if self.dialect is SQLITE:
                self.connection.execute("BEGIN IMMEDIATE")
                try:
                    yield
                except BaseException:
                    self.connection.execute("ROLLBACK")
                    raise
                self.connection.execute("COMMIT")
                return
            with self.connection.transaction():
                for name in sorted(set(locks)):
                    self.connection.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))
                yield

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise sqlite_error(self.shown, exc) from exc
        except LedgerError:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                raise postgres_error(self.shown, exc) from exc
            raise

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.close()


def sqlite_error(shown: str, exc: sqlite3.Error) -> LedgerError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return LedgerError(f"ledger {shown} is locked by another process; wait for it or pass --ledger PATH")
    if "not a database" in text or "malformed" in text:
        return LedgerError(
            f"ledger {shown} is not a readable SQLite database (corrupt?): move it away or pass --ledger PATH"
        )
    return LedgerError(f"ledger {shown}: {text}")


# What a role a privilege is missing needs, by what PostgreSQL said it may not do: the ledger's
# tables made on a database's first use (15 and later give no CREATE on schema public), written
# by run, batch, serve and ledger sync|import, or read by report and doctor.
_GRANTS = (
    ("for schema", "GRANT CREATE ON SCHEMA public TO {role}; (or make {role} the database's owner)"),
    ("for table", "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}; to write, "
     "or GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}; to read"),
)  # fmt: skip


def _missing_privilege(shown: str, text: str) -> LedgerConfigError:
    """One line naming the GRANT to run, as the database's owner (docs/costs.md, Privileges)."""
    role = urllib.parse.urlsplit(shown).username or os.environ.get("PGUSER") or "<the ledger's role>"
    grant = next((grant for sign, grant in _GRANTS if sign in text), _GRANTS[1][1]).format(role=role)
    return LedgerConfigError(f"ledger {shown}: {text}: as the database's owner, run: {grant}")


def postgres_error(shown: str, exc: Exception) -> LedgerError:
    import psycopg

    text = " ".join(str(exc).split())
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return _missing_privilege(shown, text)
    if isinstance(exc, psycopg.errors.TransactionRollback):  # a deadlock or a serialization failure:
        return LedgerError(f"ledger {shown}: {text}")  # the database is there; the write is retried
    if isinstance(exc, psycopg.OperationalError) and not any(word in text for word in _REFUSALS):
        return LedgerUnavailable(f"ledger {shown} cannot be reached: {text}")
    if isinstance(exc, psycopg.OperationalError):
        return LedgerConfigError(
            f"ledger {shown} refused the connection: {text}: check the URL's user, password and database"
        )
    return LedgerError(f"ledger {shown}: {text}")


def open_sqlite(path: Path, *, timeout: float) -> Database:
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    connection.row_factory = sqlite3.Row
    return Database(connection, SQLITE, str(path))


def open_postgres(location: LedgerLocation, *, timeout: float) -> Database:
    """A connection in autocommit mode (each write its own transaction unless `transaction()`),
    bounded in time: a database that stops answering is unreachable, never a hang."""
    try:
        import psycopg
    except ImportError:
        raise SettingsError(f"a postgresql:// ledger needs psycopg, which is not installed: {INSTALL}") from None
    assert location.url is not None
    try:
        connection = psycopg.connect(
            location.url,
            autocommit=True,
            connect_timeout=max(1, int(timeout)),  # a timeout is an OperationalError: unreachable
            tcp_user_timeout=int(timeout * 1000),  # a partitioned network: writes fail in time
            keepalives=1,
            keepalives_idle=max(1, int(timeout)),
            application_name="opencode-gateway",
            row_factory=_row_factory,
        )
    except psycopg.Error as exc:
        raise postgres_error(location.shown, exc) from exc
    return Database(connection, POSTGRES, location.shown)
