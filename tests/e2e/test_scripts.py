"""The repository's own scripts clean up after themselves."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.e2e


def _pids(word: bytes) -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if word in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(int(pid))
        except OSError:
            continue
    return found


def _descendants(root: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, set()).add(int(pid))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def _postgres_of(script: int) -> set[int]:
    """The Postgres cluster this script started (found by the port in its proxy's DATABASE_URL):
    another suite beside this one runs clusters of its own."""
    for pid in _descendants(script):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        url = next((entry[len(b"DATABASE_URL=") :] for entry in environ if entry.startswith(b"DATABASE_URL=")), None)
        if url is not None:
            port = url.rsplit(b":", 1)[1].split(b"/")[0]
            mains = _pids(b"postgres") & _pids(b"-p\0" + port + b"\0")
            return mains | {child for main in mains for child in _descendants(main)}
    return set()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_the_proxy_script_stops_the_proxy_and_its_postgres_on_a_signal(upstream: ScriptedUpstream, signum: int) -> None:
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "support" / "litellm_proxy.py"), "--upstream", upstream.url + "/v1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert script.stdout is not None
        ready, _, _ = select.select([script.stdout], [], [], 240)
        line = script.stdout.readline().decode() if ready else ""
        assert "LiteLLM proxy ready" in line, "the proxy did not start within 240 s"
        postgres = _postgres_of(script.pid)
        started = _descendants(script.pid) | postgres
        assert postgres, "the script's Postgres was not found"
        script.send_signal(signum)
        assert script.wait(timeout=90) == 0
        deadline = time.monotonic() + 30
        while (left := {pid for pid in started if _alive(pid)}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left running: {sorted(left)}"
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()


def test_setup_says_what_it_installs_and_a_second_call_says_nothing(tmp_path: Path) -> None:
    """A fresh clone's first set-up takes minutes: it said nothing meanwhile. Here, a data dir
    without OpenCode: set-up says it installs it; once it is there, set-up is silent."""
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}
    first = subprocess.run([str(ROOT / "scripts" / "setup")], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert f"setup: installing OpenCode (npm package opencode-ai) into {tmp_path / 'home'}/" in first.stderr
    assert (tmp_path / "home" / "opencode" / "node_modules" / ".bin" / "opencode").exists()
    again = subprocess.run([str(ROOT / "scripts" / "setup")], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "setup:" not in again.stderr, again.stderr


def test_the_demos_setup_installs_only_what_a_run_needs(tmp_path: Path) -> None:
    """`scripts/demo` sets up with `--demo`: OpenCode 1.18 into the data dir, not OpenCode 2 (nor
    the tests' proxy, Phoenix, chromium or tmux); the Python environment it finds is kept."""
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [str(ROOT / "scripts" / "setup"), "--demo"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / "opencode" / "node_modules" / ".bin" / "opencode").exists()
    assert not (tmp_path / "home" / "opencode2").exists()
    assert "proxy" not in done.stderr and "Phoenix" not in done.stderr and "debconf" not in done.stderr
    assert (ROOT / ".venv" / ".deps").read_text().split()[1] == "all"  # the tests' environment, untouched
