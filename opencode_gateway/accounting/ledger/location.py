"""Where the ledger is: a SQLite file on this machine (the default), or a PostgreSQL database a
team shares (`postgresql://user:password@host/db`), with the private spool that holds a Postgres
ledger's rows on this machine while the database cannot be reached.

A URL is libpq's, whole: a password may be in its user part or its query (`?password=`,
`sslpassword=`), and its query may name files libpq reads (`passfile`, `sslkey`, `service`...), as
may libpq's variables. Every password is masked wherever the URL is shown and every file is one
of the gateway's, hidden from the agent. A value that looks like a URL but is not one a ledger
takes is refused: taken as a path, it would be a SQLite file named after the password."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from ...errors import SettingsError

__all__ = ["INSTALL", "LedgerLocation"]

INSTALL = "pip install 'opencode-gateway[postgres]'"
_SCHEMES = ("postgresql://", "postgres://")
# A scheme, or what a mistyped one leaves (`postgresql:/u:pw@h/db`): never a file's name.
_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# libpq's connection parameters that hold a password, and those that name a file it reads.
_PASSWORD_PARAMETERS = ("password", "sslpassword")
_FILE_PARAMETERS = ("passfile", "sslkey", "sslcert", "sslrootcert", "sslcrl", "sslcrldir")
# libpq's variables that name files it reads, and the files it reads when none is named.
_FILE_VARIABLES = ("PGPASSFILE", "PGSERVICEFILE", "PGSSLKEY", "PGSSLCERT", "PGSSLROOTCERT", "PGSSLCRL", "PGSSLCRLDIR")
_HOME_FILES = (".pgpass", ".pg_service.conf", ".postgresql")


@dataclass(frozen=True)
class LedgerLocation:
    """A ledger's place: `path` (SQLite) or `url` (PostgreSQL, with `spool` beside it). `shown`
    is how every message names it: a URL's password is never printed."""

    path: Path | None = None
    url: str | None = field(default=None, repr=False)
    spool: Path | None = None

    @classmethod
    def of(cls, value: str | Path | None, data_dir: Path) -> LedgerLocation:
        """A `--ledger` value: a Postgres URL, or a file's path (None: the data dir's ledger.db).
        A URL is checked here, so a malformed one fails before anything starts."""
        if not value:
            return cls(path=data_dir / "ledger.db")
        text = str(value)
        if not text.startswith(_SCHEMES):
            if _SCHEME_LIKE.match(text) or re.search(r"(^|\s)(host|dbname|user|password)=", text):
                raise SettingsError(
                    f"ledger {mask(text)} is neither a file's path nor a postgresql://user@host/db URL: "
                    "write a team ledger as postgresql://USER@HOST/DB (two slashes), a file as ./NAME.db"
                )
            return cls(path=Path(text))
        parts = urlsplit(text)
        try:
            parts.port  # noqa: B018 (a malformed port raises here)
        except ValueError:
            raise SettingsError(f"ledger {mask(text)}: the port is not a number") from None
        if not parts.path.strip("/"):
            raise SettingsError(f"ledger {mask(text)} names no database: add /DBNAME (postgresql://user@host/spend)")
        digest = hashlib.sha256(_hiding_passwords(text, None).encode()).hexdigest()
        return cls(url=text, spool=data_dir / "spool" / f"ledger-{digest[:16]}.db")

    @property
    def is_postgres(self) -> bool:
        return self.url is not None

    @property
    def shown(self) -> str:
        return mask(self.url) if self.url is not None else str(self.path)

    @property
    def passwords(self) -> tuple[str, ...]:
        """The URL's passwords (its user part's, its query's), secrets to redact wherever the run's
        keys are."""
        if self.url is None:
            return ()
        given = [urlsplit(self.url).password, *(v for k, v in _query(self.url) if k in _PASSWORD_PARAMETERS)]
        return tuple(password for password in given if password)

    def files(self, environ: Mapping[str, str]) -> tuple[Path, ...]:
        """The files libpq may read to open this ledger (password, service and TLS files, named by
        the URL or libpq's variables, or in their default places), which the agent must not see."""
        if self.url is None:
            return ()
        named = [v for k, v in _query(self.url) if k in _FILE_PARAMETERS]
        named += [environ[name] for name in _FILE_VARIABLES if environ.get(name)]
        home = environ.get("HOME") or os.path.expanduser("~")
        named += [os.path.join(home, name) for name in _HOME_FILES]
        if environ.get("PGSYSCONFDIR"):
            named.append(os.path.join(environ["PGSYSCONFDIR"], "pg_service.conf"))
        return tuple(Path(os.path.expanduser(path)).resolve() for path in named)

    def exists(self) -> bool:
        """Whether runs were recorded here yet, as far as this machine can tell without asking a
        database (which a team's always is: connecting says more)."""
        return self.path is None or self.path.exists()

    def __str__(self) -> str:
        return self.shown


def _query(url: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(url).query, keep_blank_values=True)


def _hiding_passwords(url: str, shown: str | None) -> str:
    """`url` with each password (the user part's, the query's) replaced by `shown` (None: dropped)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    netloc = parts.netloc
    if at and ":" in userinfo:
        user = userinfo.partition(":")[0]
        netloc = f"{user}:{shown}@{host}" if shown else f"{user}@{host}"
    query = [
        (key, shown) if key in _PASSWORD_PARAMETERS and shown else (key, value)
        for key, value in _query(url)
        if key not in _PASSWORD_PARAMETERS or shown
    ]
    joined = "&".join(
        f"{quote(key, safe='')}={value if value == shown else quote(value, safe='/')}" for key, value in query
    )
    return urlunsplit(parts._replace(netloc=netloc, query=joined if parts.query else ""))


def mask(url: str) -> str:
    """`url` with every password as `***`; a value that is not a URL with each `user:password@`
    and `password=...` masked."""
    if url.startswith(_SCHEMES):
        with contextlib.suppress(ValueError):
            return _hiding_passwords(url, "***")
    masked = re.sub(r"([^:/@\s]+):[^@/\s]*@", r"\1:***@", url)
    return re.sub(r"(?i)((?:ssl)?password=)[^\s&]*", r"\1***", masked)
