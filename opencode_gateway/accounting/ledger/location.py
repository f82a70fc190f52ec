"""Where the ledger is: a SQLite file on this machine (the default), or a PostgreSQL database a
team shares (`postgresql://user:password@host/db`), with the private spool that holds a Postgres
ledger's rows on this machine while the database cannot be reached."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ...errors import SettingsError

__all__ = ["INSTALL", "LedgerLocation"]

INSTALL = "pip install 'opencode-gateway[postgres]'"
_SCHEMES = ("postgresql://", "postgres://")


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
            if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
                raise SettingsError(
                    f"ledger {mask(text)}: only postgresql:// (or postgres://) URLs and file paths are ledgers"
                )
            return cls(path=Path(text))
        parts = urlsplit(text)
        try:
            parts.port  # noqa: B018 (a malformed port raises here)
        except ValueError:
            raise SettingsError(f"ledger {mask(text)}: the port is not a number") from None
        if not parts.path.strip("/"):
            raise SettingsError(f"ledger {mask(text)} names no database: add /DBNAME (postgresql://user@host/spend)")
        digest = hashlib.sha256(_hiding_password(text, None).encode()).hexdigest()
        return cls(url=text, spool=data_dir / "spool" / f"ledger-{digest[:16]}.db")

    @property
    def is_postgres(self) -> bool:
        return self.url is not None

    @property
    def shown(self) -> str:
        return mask(self.url) if self.url is not None else str(self.path)

    @property
    def password(self) -> str | None:
        """The URL's password, a secret to redact wherever the run's keys are."""
        return urlsplit(self.url).password if self.url else None

    def exists(self) -> bool:
        """Whether runs were recorded here yet, as far as this machine can tell without asking a
        database (which a team's always is: connecting says more)."""
        return self.path is None or self.path.exists()

    def __str__(self) -> str:
        return self.shown


def _hiding_password(url: str, shown: str | None) -> str:
    """`url` with its password replaced by `shown` (None: dropped)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{shown}@{host}" if shown else f"{user}@{host}"))


def mask(url: str) -> str:
    """`url` with its password as `***`."""
    return _hiding_password(url, "***")
