"""scripts/bench runs and prints its table (a smoke test: the figures are the script's business)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.e2e
def test_the_benchmark_runs_and_prints(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run([str(ROOT / "scripts" / "bench"), "--quick", "--requests", "3", "--out", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for heading in ("relay (ms)", "throughput (streamed req/s)", "CLI start (median)", "memory: RSS",
                    "serve, one session of", "targets:"):
        assert heading in result.stdout
    data = json.loads(out.read_text())
    kinds = {row["kind"] for row in data["relay"]}
    assert kinds == {"upstream", "ours-gateway", "ours-sdk", "harness-gateway", "harness-sdk"}
    assert {row["kind"] for row in data["throughput"]} == {"ours-gateway", "ours-sdk"}
    assert data["memory"]["requests"] > 0 and data["cli"]["config_s"] > 0
    assert data["serve_session"]["requests"] > 0 and data["serve_session"]["last_rps"] > 0
