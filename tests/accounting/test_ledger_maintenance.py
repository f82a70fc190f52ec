"""`opencode-gateway ledger status|sync|import`, and a team ledger's configuration errors: each
says what to do in one line, exits 2 before anything starts, and never prints the password."""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_gateway.accounting.budget import Claim, PeriodBudget, Refusal, Spent
from opencode_gateway.accounting.ledger import SCHEMA_VERSION, Ledger, LedgerLocation, connect
from opencode_gateway.accounting.ledger.schema import APPROVAL_COLUMNS, REQUEST_COLUMNS, RUN_COLUMNS
from opencode_gateway.accounting.records import ApprovalRecord, RunUsage
from tests.accounting.test_ledger import record, start
from tests.support.builders import run_row
from tests.support.cli import cli
from tests.support.ledger import select
from tests.support.postgres import PASSWORD, Postgres

ROOT = Path(__file__).parents[2]


def old_ledger(path: Path) -> Path:
    """A laptop's SQLite ledger: an ended run with two requests and two asks, and an open one with one
    request."""
    ledger = Ledger(path)
    start(ledger, "run_done", {"ticket": "ENG-1"})
    for n, (decision, by) in enumerate([("allow", "policy"), ("deny", "person")]):
        ask = ApprovalRecord(
            f"ask_{n}", "ses_1", f"call_{n}", "bash", "make", decision, by, "why", 1_790_000_050.0, 0.5
        )
        ledger.record_approval("run_done", ask)
    ledger.record_request("run_done", record("a", cost=0.125))
    ledger.record_request("run_done", record("b", usage=None, cost=None, source="unpriced"))
    ledger.update_run(run_row("run_done", ended_at=1_790_000_100.0, session_id="ses_1", stop_reason="done", usage=RunUsage(1000, 50, 600, 0, 10, requests=2), cost=0.125, unpriced=1))  # fmt: skip
    start(ledger, "run_open", {"ticket": "ENG-2"}, tags=("harness", "nightly"))
    ledger.record_request("run_open", record("c", cost=0.5))
    ledger.close()
    return path


def everything(location: LedgerLocation) -> tuple[list[tuple], ...]:
    """Every column of every run, request and approval, in key order."""
    tables = [("runs", RUN_COLUMNS), ("requests", REQUEST_COLUMNS), ("approvals", APPROVAL_COLUMNS)]
    return tuple(
        [tuple(r) for r in select(location, f"SELECT {', '.join(cols)} FROM {table} ORDER BY {cols[0]}")]
        for table, cols in tables
    )


def test_importing_a_ledger_brings_every_column_and_importing_it_again_adds_nothing(
    ledger_at: LedgerLocation, tmp_path: Path
) -> None:
    source = old_ledger(tmp_path / "laptop.db")
    where = ledger_at.url or str(ledger_at.path)
    first = cli("ledger", "import", str(source), "--ledger", where)
    assert first.returncode == 0, first.stderr
    assert "2 of 2 runs and 3 of 3 requests were new" in first.stdout
    assert everything(ledger_at) == everything(LedgerLocation(path=source))  # every column, as it was
    assert len(everything(ledger_at)[2]) == 2  # the asks came too
    again = cli("ledger", "import", str(source), "--ledger", where, "--json")
    assert again.returncode == 0 and '"new_runs": 0, "new_requests": 0' in again.stdout
    assert everything(ledger_at) == everything(LedgerLocation(path=source))
    assert PASSWORD not in first.stdout + first.stderr + again.stdout + again.stderr


def test_importing_what_is_no_ledger_or_the_ledger_itself_is_refused(tmp_path: Path) -> None:
    target = old_ledger(tmp_path / "ledger.db")
    missing = cli("ledger", "import", str(tmp_path / "absent.db"), "--ledger", str(target))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    itself = cli("ledger", "import", str(target), "--ledger", str(target))
    assert itself.returncode == 2 and "that is the configured ledger itself" in itself.stderr
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    corrupt = cli("ledger", "import", str(junk), "--ledger", str(target))
    assert corrupt.returncode != 0 and "is not a readable SQLite database" in corrupt.stderr
    assert len(everything(LedgerLocation(path=target))[1]) == 3  # nothing lost


def test_status_names_the_backend_and_schema_version(ledger_at: LedgerLocation) -> None:
    old_ledger(ledger_at.path) if ledger_at.path else Ledger(ledger_at).close()
    result = cli("ledger", "status", "--ledger", ledger_at.url or str(ledger_at.path), "--json")
    assert result.returncode == 0, result.stderr
    backend = "postgresql" if ledger_at.url else "sqlite"
    assert f'"backend": "{backend}"' in result.stdout and f'"schema_version": {SCHEMA_VERSION}' in result.stdout
    assert PASSWORD not in result.stdout


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"postgresql://llmproxy:wrong-{PASSWORD}@127.0.0.1:{{port}}/postgres", "refused the connection"),
        (f"postgresql://llmproxy:{PASSWORD}@127.0.0.1:{{port}}/no_such_db", "refused the connection"),
        (f"postgresql://llmproxy:{PASSWORD}@127.0.0.1:{{port}}", "names no database"),
        (f"postgresql://llmproxy:{PASSWORD}@127.0.0.1:port/spend", "the port is not a number"),
        (f"mysql://llmproxy:{PASSWORD}@127.0.0.1/spend", "neither a file's path nor a postgresql://"),
        # libpq's way: the password in the query, masked as well
        (f"postgresql://llmproxy@127.0.0.1:{{port}}/postgres?password=wrong-{PASSWORD}", "refused the connection"),
        (f"postgresql://llmproxy@127.0.0.1:{{port}}/no_such_db?sslpassword=x&password={PASSWORD}", "refused the"),
        # one slash: never a SQLite file named after the password
        (f"postgresql:/llmproxy:{PASSWORD}@127.0.0.1/spend", "neither a file's path nor a postgresql://"),
        (f"host=127.0.0.1 password={PASSWORD} dbname=spend", "neither a file's path nor a postgresql://"),
    ],
)
def test_a_ledger_url_that_cannot_work_is_exit_2_in_one_line_with_the_password_masked(
    url: str, message: str, postgres: Postgres
) -> None:
    url = url.format(port=postgres.port)
    run = ["run", "hi", "-m", "openai/gpt-4o-mini", "--api-base", "http://127.0.0.1:9/v1", "--ledger", url]
    # A URL that cannot work is refused before OpenCode is looked for; one the server refuses, once
    # the run opens its ledger, with OpenCode found (tests/e2e/test_team_ledger.py).
    for command in (
        ["report", "--ledger", url],
        ["ledger", "status", "--ledger", url],
        *([] if "refused" in message else [[*run, "--opencode-bin", "/nonexistent/opencode"]]),
    ):
        result = cli(*command)
        if command[:2] == ["ledger", "status"] and "refused" in message:
            assert result.returncode == 1 and message in result.stdout  # status reports it, as its finding
        else:
            assert result.returncode == 2, (command, result)
            assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert PASSWORD not in result.stdout + result.stderr and "***" in result.stdout + result.stderr
    assert not Path("postgresql:").exists() and not list(Path.cwd().glob("host=*")), "a ledger file was made"


def test_without_psycopg_a_postgres_ledger_is_exit_2_naming_the_install(postgres: Postgres) -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"  # as if the postgres extra were not installed
        "from opencode_gateway.cli import main\n"
        f"sys.exit(main(['report', '--ledger', {postgres.url('spend')!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "pip install 'opencode-gateway[postgres]'" in result.stderr and PASSWORD not in result.stderr


def test_a_sqlite_ledger_has_nothing_to_sync(tmp_path: Path) -> None:
    result = cli("ledger", "sync", "--ledger", str(old_ledger(tmp_path / "ledger.db")))
    assert result.returncode == 0 and "is a file: no spool" in result.stdout
    assert sqlite3.connect(tmp_path / "ledger.db").execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2


def test_a_read_only_role_reads_the_team_ledger_for_report_and_the_dashboard(
    postgres: Postgres, tmp_path: Path
) -> None:
    url = postgres.create_database("read_only")
    database = url.rsplit("/", 1)[1]
    assert cli("ledger", "import", str(old_ledger(tmp_path / "laptop.db")), "--ledger", url).returncode == 0
    # a run of a dead process on this machine: opening the ledger would close it as abandoned, a write
    postgres.psql(f"UPDATE runs SET owner = '{socket.gethostname()}:999999999:1' WHERE run_id = 'run_open'", database)
    postgres.psql(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reader') THEN "
        "CREATE ROLE reader LOGIN PASSWORD 'readerpw'; END IF; END $$;"
        f"GRANT CONNECT ON DATABASE {database} TO reader;",
    )
    postgres.psql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader", database)
    reader = postgres.url(database, user="reader", password="readerpw")

    report = cli("report", "--by", "ticket", "--format", "json", "--ledger", reader)
    assert report.returncode == 0, report.stderr
    total = json.loads(report.stdout)["total"]
    assert (total["runs"], total["requests"], total["cost"]) == (2, 3, 0.625)
    page = cli("report", "--html", str(tmp_path / "spend.html"), "--ledger", reader)
    assert page.returncode == 0, page.stderr
    assert "ENG-2" in (tmp_path / "spend.html").read_text()
    assert "readerpw" not in report.stdout + report.stderr + page.stdout + page.stderr
    # the reader changed nothing: the dead process's run is closed by the next writer, not by a report
    assert postgres.psql("SELECT stop_reason IS NULL FROM runs WHERE run_id = 'run_open'", database) == "t\n"
    denied = postgres.psql("SELECT has_table_privilege('reader', 'runs', 'UPDATE')", database)
    assert denied == "f\n"


def documented_roles(name: str) -> str:
    """docs/costs.md's SQL for a team's roles, its names made this test's own (roles are the
    cluster's, shared by every test on it)."""
    text = (Path(__file__).parents[2] / "docs" / "costs.md").read_text()
    sql = text.split("**Privileges.**", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    sql = sql.replace("spend_writer", f"{name}_writer").replace("spend_reader", f"{name}_reader")
    return re.sub(r"\bspend\b", name, sql)


def test_the_documented_roles_let_the_writer_make_the_ledger_and_the_reader_report_it(
    postgres: Postgres, tmp_path: Path
) -> None:
    """PostgreSQL 15+ gives no CREATE on schema public: the docs' writer owns the database, and
    the reader reads the tables the writer makes after the grants (default privileges)."""
    postgres.psql(documented_roles("team"))
    writer = postgres.url("team", user="team_writer", password="writer-password")
    reader = postgres.url("team", user="team_reader", password="reader-password")
    made = cli("ledger", "import", str(old_ledger(tmp_path / "laptop.db")), "--ledger", writer)
    assert made.returncode == 0, made.stderr
    report = cli("report", "--format", "json", "--ledger", reader)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["total"]["runs"] == 2
    # A reader that tries to write: one line naming the GRANT that would let it
    wrote = cli("ledger", "import", str(old_ledger(tmp_path / "other.db")), "--ledger", reader)
    assert wrote.returncode == 2 and len(wrote.stderr.strip().splitlines()) == 1, wrote.stderr
    assert "permission denied for table" in wrote.stderr and (
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO team_reader;" in wrote.stderr
    )
    assert "reader-password" not in wrote.stderr


def test_a_role_that_may_not_create_the_tables_is_told_the_grant_in_one_line(
    postgres: Postgres, tmp_path: Path
) -> None:
    database = postgres.create_database("not_owned").rsplit("/", 1)[1]  # the cluster owner's
    postgres.psql(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'newcomer') THEN "
        "CREATE ROLE newcomer LOGIN PASSWORD 'newcomerpw'; END IF; END $$;"
        f"GRANT CONNECT ON DATABASE {database} TO newcomer;"
    )
    url = postgres.url(database, user="newcomer", password="newcomerpw")
    result = cli("ledger", "import", str(old_ledger(tmp_path / "laptop.db")), "--ledger", url)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "permission denied for schema public" in result.stderr
    assert "as the database's owner, run: GRANT CREATE ON SCHEMA public TO newcomer;" in result.stderr
    assert "newcomerpw" not in result.stderr


POISON = """UPDATE runs SET metadata = '{"note": "caf\\udce9", "ticket": "ENG-1"}' WHERE run_id = 'bad'"""


def test_a_run_an_older_version_stored_with_text_no_query_reads_is_found_and_forgotten(
    ledger_at: LedgerLocation,
) -> None:
    """What one non-UTF-8 value did to a ledger before it was refused at the door: on Postgres every
    report failed and a ticket's budget query with it (now refused, fail closed). `ledger runs`
    lists it as stored, `ledger forget` takes it out, and reports work again."""
    ledger = Ledger(ledger_at)
    for run_id in ("good", "bad"):
        start(ledger, run_id, {"ticket": "ENG-1"})
        ledger.record_request(run_id, record(f"{run_id}-1"))
    ledger.close()
    database = connect(ledger_at)
    database.connection.execute(POISON)  # as an older version wrote it: no check, no replacement
    database.connection.commit()
    database.close()
    where = ["--ledger", ledger_at.url or str(ledger_at.path)]
    if ledger_at.is_postgres:
        assert cli("report", "--by", "ticket", *where).returncode != 0  # what the poison did
        cap = PeriodBudget.from_setting("ticket", {"per": "day", "max_requests": 9})
        verdict = Ledger(ledger_at).hold(Claim("x1", ((cap, "ENG-1"),), Spent(1, 1, 0.0), time.time())).result()
        assert isinstance(verdict, Refusal) and "could not be counted" in verdict.message  # fail closed
    listed = cli("ledger", "runs", "--json", *where)
    assert listed.returncode == 0, listed.stderr
    runs = {run["run_id"]: run for run in json.loads(listed.stdout)["runs"]}
    assert set(runs) == {"good", "bad"} and runs["bad"]["requests"] == 1 and "udce9" in runs["bad"]["metadata"]
    forgot = cli("ledger", "forget", "bad", *where)
    assert forgot.returncode == 0 and "forgot run bad: its 1 requests and 0 asks" in forgot.stdout, forgot
    report = cli("report", "--by", "ticket", "--format", "json", *where)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["total"]["runs"] == 1
    again = cli("ledger", "forget", "bad", *where)
    assert again.returncode == 2 and "no run 'bad'" in again.stderr and len(again.stderr.splitlines()) == 1
    only = cli("ledger", "runs", "--where", "ticket=ENG-1", "--json", *where)
    assert [run["run_id"] for run in json.loads(only.stdout)["runs"]] == ["good"]
