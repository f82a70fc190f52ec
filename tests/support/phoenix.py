"""Arize Phoenix, a real OTLP receiver, started on free loopback ports with a store of its own
(scripts/setup installs it into .tools/phoenix/), and the spans read back with its own client."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
PHOENIX = ROOT / ".tools" / "phoenix" / "bin" / "phoenix"


class Phoenix:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.traces_endpoint = f"{self.url}/v1/traces"
        self._dir = tempfile.mkdtemp(prefix="phoenix-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> Phoenix:
        env = {
            **os.environ,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_WORKING_DIR": self._dir,
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        log = open(Path(self._dir) / "phoenix.log", "wb")  # noqa: SIM115 (the process writes it until stopped)
        self._process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"phoenix exited: {(Path(self._dir) / 'phoenix.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"phoenix did not answer within {timeout} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()

    def spans(self) -> list[dict[str, Any]]:
        """Every span Phoenix holds (its client reads them back as it stores them)."""
        from phoenix.client import Client

        return list(Client(base_url=self.url).spans.get_spans(project_identifier="default", limit=100_000))

    def trace_of(self, attribute: str, value: str, *, spans: int, timeout: float = 60) -> list[dict[str, Any]]:
        """The spans of the trace whose root has `attribute` = `value`, once it holds `spans` spans
        (Phoenix stores what it receives a moment later)."""
        deadline = time.monotonic() + timeout
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            every = self.spans()
            roots = [s for s in every if s["attributes"].get(attribute) == value and s["parent_id"] is None]
            if roots:
                trace_id = roots[0]["context"]["trace_id"]
                found = [s for s in every if s["context"]["trace_id"] == trace_id]
                if len(found) >= spans:
                    return found
            time.sleep(0.5)
        raise AssertionError(f"no trace of {spans} spans with {attribute}={value} in {timeout} s: {found}")
