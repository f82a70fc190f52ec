"""scripts/bench runs and prints its table (a smoke test: the figures are the script's business)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_and_prints(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [str(ROOT / "scripts" / "bench"), "--quick", "--requests", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for heading in (
        "relay (ms)",
        "throughput (streamed req/s)",
        "CLI start (median)",
        "memory: RSS",
        "serve, one session of",
        "targets:",
    ):
        assert heading in result.stdout
    data = json.loads(out.read_text())
    kinds = {row["kind"] for row in data["relay"]}
    assert kinds == {"upstream", "ours-gateway", "ours-sdk", "harness-gateway", "harness-sdk"}
    assert {row["kind"] for row in data["throughput"]} == {"ours-gateway", "ours-sdk"}
    assert data["memory"]["requests"] > 0 and data["cli"]["config_s"] > 0
    assert data["serve_session"]["requests"] > 0 and data["serve_session"]["last_rps"] > 0


def test_the_caching_section_prices_the_same_session_three_ways(opencode_bin: str, generation: int) -> None:
    """`--only caching`: a team-named group, a claude-named group (the real proxy) and OpenCode alone,
    each the same ten turns of a scripted Claude; the gateway's booked cost is the session's price."""
    result = subprocess.run(
        [str(ROOT / "scripts" / "bench"), "--only", "caching"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OPENCODE_BIN": opencode_bin},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    for group in ("team-coder", "claude-coder"):
        assert data[group]["stop_reason"] == "done" and data[group]["requests"] == 10
        assert data[group]["booked"] == pytest.approx(data[group]["cost"], rel=1e-9)
        assert data[group]["cached_share"] > 0.5 and data[group]["cache_saved"] > 0
    assert data["opencode alone"]["requests"] == 10
    assert data["team_over_claude"] == pytest.approx(1.0, abs=0.02)
    if generation == 1:
        assert data["ours_over_native"] == pytest.approx(1.0, abs=0.05)
    else:  # 2.1.2's own anthropic provider caches less than the endpoint's markers: 0.936 measured
        assert data["ours_over_native"] <= 1.05


def test_the_ledger_section_counts_every_row_once_on_both_backends() -> None:
    """`--only ledger --quick`: the relay on a SQLite and a PostgreSQL ledger, and eight writers of
    one PostgreSQL ledger, every row written twice (the figures themselves are the script's)."""
    result = subprocess.run(
        [str(ROOT / "scripts" / "bench"), "--only", "ledger", "--quick"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert set(data["requests_per_s_c16"]) == {"sqlite", "postgresql"} and data["postgresql_over_sqlite"] > 0
    for rows in data["relay_rows"].values():
        assert rows["rows"] == rows["distinct"] == rows["expected"] > 0
    writers = data["writers"]
    assert writers["rows"] == writers["processes"] * writers["rows_each"] == 4000
    assert (writers["lost"], writers["doubled"], writers["failures"]) == (0, 0, [])
