"""A real LiteLLM proxy (litellm[proxy] 1.108.7) with a real PostgreSQL, offline, on 127.0.0.1.

LiteLLM's proxy reaches Postgres through prisma-client-py, which normally downloads Prisma's native
engines; here they cannot be downloaded. So LiteLLM's own migrations are applied with psql, and
Prisma's official WASM query engine stands in for the native one (scripts/proxy/qe-shim.mjs, npm
packages only; the recipe came from the team's notes on running the proxy offline, outside this
repository). Everything is installed under .tools/proxy/ by `install()`, once.

    with LiteLLMProxy(model_list) as proxy:      # Postgres + proxy up, healthy
        proxy.url, proxy.master_key

As a script: `python tests/support/litellm_proxy.py --upstream URL` serves model groups (team-a,
team-b, and the Claude groups team-coder and claude-coder) in front of URL until interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (scripts/setup does): the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.net import free_port
from tests.support.postgres import Postgres  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "proxy"
VENV = TOOLS / "venv"
QE = TOOLS / "qe"
LITELLM = "litellm[proxy]==1.108.7"
PRISMA = "prisma==0.15.0"
ENGINE_HASH = "393aa359c9ad4a4bb28630fb5613f9c281cde053"
READY = TOOLS / f"ready-{LITELLM}-{PRISMA}-{ENGINE_HASH[:8]}"
MASTER_KEY = "sk-master-opencode-gateway-tests"


class ProxyError(RuntimeError):
    """The proxy or its database could not be set up or started; the message says why."""


def _run(
    *args: str | os.PathLike[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    timeout: float = 900,
) -> str:
    command = [str(a) for a in args]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise ProxyError(f"{' '.join(command[:6])} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def _environment() -> dict[str, str]:
    """What the proxy and prisma need to work offline and never try a download."""
    return {
        **os.environ,
        "PATH": f"{TOOLS / 'fastbin'}:{VENV / 'bin'}:{os.environ['PATH']}",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY_DISABLED": "true",
        "CHECKPOINT_DISABLE": "1",
        "PRISMA_HIDE_UPDATE_MESSAGE": "1",
        "PRISMA_GENERATE_SKIP_AUTOINSTALL": "1",
        "PRISMA_BINARY_CACHE_DIR": str(TOOLS / "prisma-cache"),
        "PRISMA_NODEENV_CACHE_DIR": str(TOOLS / "nodeenv"),
        "PRISMA_ENGINES_MIRROR": "http://127.0.0.1:9",  # any engine download fails at once
        "PRISMA_QUERY_ENGINE_BINARY": str(QE / "query-engine"),
        "PRISMA_SCHEMA_ENGINE_BINARY": str(QE / "schema-engine-stub"),
        "DISABLE_SCHEMA_UPDATE": "true",  # the proxy must not migrate (there is no schema engine)
    }


def _python(code: str) -> str:
    return _run(VENV / "bin" / "python", "-c", code, env=_environment()).strip()


def install() -> None:
    """Install the proxy's venv, the query-engine shim and the generated prisma client, once."""
    if READY.exists():
        return
    TOOLS.mkdir(parents=True, exist_ok=True)
    if shutil.which("pg_ctlcluster") is None and not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        if os.geteuid() != 0:
            raise ProxyError("PostgreSQL is not installed: sudo apt-get install postgresql")
        _run("apt-get", "update", "-qq")
        _run("apt-get", "install", "-y", "-qq", "postgresql", env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if not (VENV / "bin" / "python").exists():
        _run(sys.executable, "-m", "venv", VENV)
    _run(VENV / "bin" / "pip", "install", "-q", "--disable-pip-version-check", LITELLM, PRISMA)
    QE.mkdir(exist_ok=True)
    for name in ("qe-shim.mjs", "package.json"):
        shutil.copy(ROOT / "scripts" / "proxy" / name, QE / name)
    _run("npm", "install", "--no-audit", "--no-fund", "--loglevel=error", cwd=QE)
    (QE / "query-engine").write_text(f'#!/bin/sh\nexec node "{QE / "qe-shim.mjs"}" "$@"\n')
    (QE / "schema-engine-stub").write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "schema-engine-cli {ENGINE_HASH}"; exit 0; }}\n'
        'echo "no schema engine offline" >&2; exit 1\n'
    )
    fastbin = TOOLS / "fastbin"
    fastbin.mkdir(exist_ok=True)
    # The proxy runs `prisma migrate diff` at boot; it fails harmlessly offline but costs ~6 s.
    (fastbin / "prisma").write_text("#!/bin/sh\nexit 0\n")
    for path in (QE / "query-engine", QE / "schema-engine-stub", fastbin / "prisma"):
        path.chmod(0o755)
    schema = _python(
        "import litellm, os; print(os.path.join(os.path.dirname(litellm.__file__), 'proxy', 'schema.prisma'))"
    )
    env = {**_environment(), "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}  # the real prisma CLI, not fastbin's
    _run(VENV / "bin" / "prisma", "generate", "--schema", schema, env=env)
    READY.touch()


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def _migrate(url: str, migrations: Path) -> None:
    """LiteLLM's own migrations, in order, with psql (there is no Prisma schema engine here)."""
    files = sorted(migrations.glob("*/migration.sql"))
    if not files:
        raise ProxyError(f"no LiteLLM migrations under {migrations}")
    script = "".join(f"\\i '{f}'\n" for f in files)
    subprocess.run(
        ["psql", "-q", "-X", "-v", "ON_ERROR_STOP=1", url], input=script, text=True, capture_output=True, check=True,
        timeout=300,
    )  # fmt: skip


class LiteLLMProxy:
    """Postgres and a LiteLLM proxy serving `model_list`, healthy on entry, stopped on exit."""

    def __init__(
        self,
        model_list: list[dict[str, Any]],
        *,
        general_settings: dict[str, Any] | None = None,
        startup_timeout: float = 180.0,
    ) -> None:
        self.model_list = model_list
        self.general_settings = general_settings or {}
        self.startup_timeout = startup_timeout
        self.master_key = MASTER_KEY
        self.port = 0
        self.log_path: Path | None = None
        self._postgres: Postgres | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiteLLMProxy:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        install()
        self._postgres = Postgres().start()
        database = self._postgres.create_database("litellm")
        migrations = _python(
            "import litellm_proxy_extras, os; print(os.path.join(os.path.dirname("
            "litellm_proxy_extras.__file__), 'migrations'))"
        )
        _migrate(database, Path(migrations))
        self._workdir = Path(tempfile.mkdtemp(prefix="ocg-proxy-"))
        config = {
            "model_list": self.model_list,
            "general_settings": {
                "master_key": self.master_key,
                "database_url": database,
                **self.general_settings,
            },
            "litellm_settings": {"telemetry": False},
        }
        config_path = self._workdir / "config.yaml"
        config_path.write_text(json.dumps(config))  # JSON is YAML
        self.port = free_port()
        self.log_path = self._workdir / "proxy.log"
        env = {**_environment(), "DATABASE_URL": database}
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    str(VENV / "bin" / "litellm"),
                    "--config",
                    str(config_path),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                env=env,
                cwd=self._workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout
        while _get(f"{self.url}/health/readiness") != 200:
            if self._process.poll() is not None:
                raise ProxyError(f"the LiteLLM proxy exited with {self._process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ProxyError(
                    f"the LiteLLM proxy was not ready after {self.startup_timeout:g} s:\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path and self.log_path.exists() else ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        if self._postgres is not None:
            self._postgres.remove()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
        """A JSON call to the proxy (with the master key unless another is given)."""
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"authorization": f"Bearer {key or self.master_key}", "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


def groups(upstream: str) -> list[dict[str, Any]]:
    """Two priced model groups in front of one OpenAI-compatible upstream, and two Claude groups
    (one named like a team's, one with "claude" in its name) in front of the same server speaking
    Anthropic's Messages API (litellm's anthropic adapter, priced by LiteLLM's map)."""
    return [
        *(
            {
                "model_name": name,
                "litellm_params": {
                    "model": f"openai/{name}-model",
                    "api_base": upstream,
                    "api_key": "sk-upstream",
                    "input_cost_per_token": price[0],
                    "output_cost_per_token": price[1],
                    "cache_read_input_token_cost": price[2],
                },
            }
            for name, price in (("team-a", (1e-06, 4e-06, 1e-07)), ("team-b", (3e-06, 1.5e-05, 3e-07)))
        ),
        *(
            {
                "model_name": name,
                "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_base": upstream.removesuffix("/v1"),
                    "api_key": "sk-ant-upstream",
                },
            }
            for name in ("team-coder", "claude-coder")
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a real LiteLLM proxy + Postgres on loopback until Ctrl-C.")
    parser.add_argument("--upstream", help="OpenAI-compatible base URL the groups point at (…/v1)")
    parser.add_argument("--install-only", action="store_true", help="install, then exit")
    args = parser.parse_args()
    install()
    if args.install_only:
        return
    if not args.upstream:
        parser.error("--upstream URL is required to serve")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM and SIGHUP stop the proxy and its Postgres as Ctrl-C does

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    with LiteLLMProxy(groups(args.upstream)) as proxy:
        print(f"LiteLLM proxy ready at {proxy.url} (master key {proxy.master_key}); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
