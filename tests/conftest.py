"""Shared fixtures: the scripted model server (a real uvicorn server on loopback) and the real
opencode binary. Nothing here stands in for OpenCode, LiteLLM or uvicorn."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import respx

from opencode_gateway.config.sections import default_data_dir
from opencode_gateway.config.settings import Settings
from opencode_gateway.opencode.binary import pinned_binary
from opencode_gateway.opencode.generation import GENERATIONS

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
PINNED_OPENCODE = pinned_binary(default_data_dir())  # where scripts/setup installed it
PINNED_OPENCODE_2 = pinned_binary(default_data_dir(), GENERATIONS[1])  # and OpenCode 2 beside it
# Kept sessions of test runs never land in the real user's data dir.
os.environ["OPENCODE_GATEWAY_HOME"] = tempfile.mkdtemp(prefix="opencode-gateway-tests-")

from opencode_gateway.accounting.ledger import LedgerLocation  # noqa: E402
from tests.support.litellm_proxy import LiteLLMProxy, ProxyError, groups  # noqa: E402
from tests.support.postgres import Postgres, PostgresError  # noqa: E402
from tests.support.scripted_upstream import ScriptedUpstream  # noqa: E402

SAMPLES = Path(__file__).parent / "data" / "opencode-samples"


@pytest.fixture
def gateway() -> Iterator[respx.MockRouter]:
    """A LiteLLM gateway mocked by respx at the httpx client (the relay's own transport is aiohttp's:
    endpoint/transport.py); the tests' own clients of an app under test (ASGI) pass through. Its
    model info (which a ProxyUpstream reads once) lists no group, unless a test says otherwise."""
    with respx.mock(using="httpx", assert_all_called=False) as router:
        router.route(host__in=("endpoint", "e", "serve")).pass_through()
        router.get(url__regex=r"/v1/model/info$").respond(200, json={"data": []})
        yield router


def _serve() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _upstream_server() -> Iterator[ScriptedUpstream]:
    yield from _serve()


@pytest.fixture
def upstream(_upstream_server: ScriptedUpstream) -> ScriptedUpstream:
    """The scripted model, with an empty script and request log for this test."""
    _upstream_server.script()
    return _upstream_server


@pytest.fixture(scope="session")
def _second_server() -> Iterator[ScriptedUpstream]:
    yield from _serve()


@pytest.fixture
def hostile_upstream(_second_server: ScriptedUpstream) -> ScriptedUpstream:
    """A second model server, standing where a hostile config would redirect model calls."""
    _second_server.script()
    return _second_server


def _installed(variable: str, pinned: Path) -> str:
    """A real OpenCode binary: `$variable`, else where scripts/setup installed it. Missing is a
    failure, not a skip: scripts/setup installs it."""
    candidate = os.environ.get(variable) or str(pinned)
    if not os.access(candidate, os.X_OK):
        pytest.fail(f"no opencode binary at {candidate}: run scripts/setup (or set {variable})")
    return candidate


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Which OpenCode a test that runs one gets: 1.18 and OpenCode 2 alike (the `generation`
    parameter: its scripted model calls the tools each offers, scripted_upstream.spoken), but
    for a test marked `only_generation(n, why)`, which says why the other does not apply."""
    if "generation" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("only_generation")
        numbers = [only.args[0]] if only else [1, 2]
        metafunc.parametrize("generation", numbers, ids=lambda n: f"opencode{n}", scope="session")


SERVICE_PORT = 49374  # OpenCode 2's background service (channel `latest`)


def _listening_on(port: int) -> set[str]:
    """The inodes of the sockets listening on `port` (any address), from /proc/net/tcp."""
    inodes = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            inodes.add(fields[9])
    return inodes


def opencode_services() -> list[str]:
    """What is left of OpenCode 2's background service: a `serve --service` process, an OpenCode
    listening on its port (empty when none). Another program's socket on that port (a test's
    server on a random port may get it) is none of OpenCode's."""
    left, listening = [], _listening_on(SERVICE_PORT)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"serve\0--service" in cmdline:
                left.append(f"process {pid}: opencode serve --service")
            elif listening and cmdline.split(b"\0")[0].rsplit(b"/", 1)[-1] in (b"opencode", b"opencode.exe"):
                sockets = {os.readlink(fd.path) for fd in os.scandir(f"/proc/{pid}/fd")}
                if {f"socket:[{inode}]" for inode in listening} & sockets:
                    left.append(f"process {pid}: an OpenCode listening on 127.0.0.1:{SERVICE_PORT}")
        except OSError:
            continue
    return left


@pytest.fixture(autouse=True)
def _no_opencode_service_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test that runs OpenCode, whatever it did (a run, a killed run, doctor, a
    launch), no OpenCode 2 service lives on: every command we start is `--standalone`."""
    yield
    if {"opencode_bin", "opencode2_bin"} & set(request.fixturenames):
        assert opencode_services() == [], "an OpenCode 2 service outlived the test"


@pytest.fixture(scope="session")
def opencode_bin(generation: int) -> str:
    """The real OpenCode binary of the test's generation: 1.18 (npm opencode-ai), or 2 (npm
    @opencode/cli), which scripts/setup installs beside it."""
    if generation == 1:
        return _installed("OPENCODE_BIN", PINNED_OPENCODE)
    return _installed("OPENCODE2_BIN", PINNED_OPENCODE_2)


@pytest.fixture(scope="session")
def opencode2_bin() -> str:
    """The real OpenCode 2 binary, for a test of 2.x alone."""
    return _installed("OPENCODE2_BIN", PINNED_OPENCODE_2)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "gateway-data"


@pytest.fixture
def settings(opencode_bin: str, data_dir: Path, tmp_path: Path) -> Settings:
    """A run's settings in the tests: the real OpenCode, a data dir and a ledger of the test's own."""
    return Settings(opencode_bin=opencode_bin, data_dir=data_dir, timeout=120, ledger=tmp_path / "ledger.db")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A real PostgreSQL server (Debian's) on loopback, shared by the session; each test that
    wants a team ledger makes a database of its own on it. Missing is a failure: scripts/setup
    installs it."""
    try:
        server = Postgres().start()
    except PostgresError as exc:
        pytest.fail(f"PostgreSQL could not start (run scripts/setup): {exc}")
    yield server
    server.remove()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> LedgerLocation:
    """A new, empty ledger on each backend: a SQLite file, then a database on the session's
    PostgreSQL (its spool in the test's own data dir)."""
    if request.param == "sqlite":
        return LedgerLocation(path=tmp_path / "ledger.db")
    server: Postgres = request.getfixturevalue("postgres")
    return LedgerLocation.of(server.create_database(), tmp_path / "gateway-data")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def proxy(_upstream_server: ScriptedUpstream) -> Iterator[LiteLLMProxy]:
    """The real LiteLLM proxy (with Postgres), its groups served by the scripted model; shared by the session."""
    try:
        with LiteLLMProxy(groups(_upstream_server.url)) as started:
            yield started
    except ProxyError as exc:
        pytest.fail(f"the real LiteLLM proxy could not start: {exc}")
