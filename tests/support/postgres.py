"""A real PostgreSQL server (Debian's `postgresql` package) in a temporary folder, on a free
loopback port: the LiteLLM proxy's database in the gateway tests, and the team ledger's in the
ledger tests. It can be stopped and started again with its data kept (a database that goes away
in the middle of a run and comes back), and gives each test a database of its own.

    server = Postgres().start()
    url = server.create_database("ledger_1")   # postgresql://llmproxy:dbpassword@127.0.0.1:PORT/ledger_1
    server.stop(); server.start()              # restarted, the data kept
    server.remove()
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.net import free_port

__all__ = ["PASSWORD", "USER", "Postgres", "PostgresError"]

USER = "llmproxy"
PASSWORD = "dbpassword"


class PostgresError(RuntimeError):
    """The server could not be set up or started; the message says why."""


class Postgres:
    """A private cluster, fsync off, password authentication (scram-sha-256) on 127.0.0.1 only."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            raise PostgresError("no initdb under /usr/lib/postgresql: install PostgreSQL (apt-get install postgresql)")
        self.bin = Path(found[-1]).parent
        self.user = "postgres" if os.geteuid() == 0 else None  # initdb refuses to run as root
        self.dir = Path(tempfile.mkdtemp(prefix="ocg-pg-"))
        self.port = free_port()
        self._made = 0

    def url(self, database: str, *, user: str = USER, password: str = PASSWORD) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str | os.PathLike[str], timeout: float = 120) -> None:
        command = [str(a) for a in args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise PostgresError(f"{' '.join(command[:6])} failed ({result.returncode}):\n{result.stderr[-3000:]}")

    def start(self) -> Postgres:
        """Start the server (made on the first start), on the same port and with the same data."""
        data = self.dir / "data"
        if not data.exists():
            pwfile = self.dir / "pwfile"
            pwfile.write_text(f"{PASSWORD}\n")
            if self.user:
                account = pwd.getpwnam(self.user)
                os.chown(self.dir, account.pw_uid, account.pw_gid)
                os.chown(pwfile, account.pw_uid, account.pw_gid)
            self._run(
                self.bin / "initdb", "-D", data, "-U", USER, f"--pwfile={pwfile}",
                "-A", "scram-sha-256", "--no-sync",
            )  # fmt: skip
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c max_connections=200"
        self._run(self.bin / "pg_ctl", "-D", data, "-l", self.dir / "pg.log", "-w", "-o", options, "start")
        return self

    def stop(self) -> None:
        """Stop at once (every connection cut, as a crashed or restarted server does); the data stays."""
        self._run(self.bin / "pg_ctl", "-D", self.dir / "data", "-m", "immediate", "-w", "stop", timeout=60)

    def psql(self, sql: str, database: str = "postgres", **login: str) -> str:
        """`sql` run by psql as the cluster's owner (or `user`/`password`); what it printed."""
        result = subprocess.run(
            ["psql", "-q", "-X", "-At", "-v", "ON_ERROR_STOP=1", self.url(database, **login)],
            input=sql,
            text=True,
            capture_output=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise PostgresError(f"psql failed ({result.returncode}):\n{result.stderr[-3000:]}")
        return result.stdout

    def create_database(self, name: str | None = None) -> str:
        """A new, empty database (named `name`, or numbered); its URL."""
        self._made += 1
        name = name or f"ledger_{self._made}"
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
