"""The approval plugin on OpenCode's own runtime (its Bun, `BUN_BE_BUN=1`): with no host to
answer, every tool call is denied (fail closed), and the denial says why."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from opencode_gateway.approvals.plugin import plugin_source

pytestmark = pytest.mark.e2e

DRIVER = """
const plugin = (await import(process.argv[2])).default;
const hooks = await plugin({ directory: "/work" });
try {
  await hooks["tool.execute.before"]({ tool: "bash", sessionID: "ses_1", callID: "call_1" }, { args: { command: "ls" } });
  console.log(JSON.stringify({ ran: true }));
} catch (error) {
  console.log(JSON.stringify({ ran: false, told: error.message }));
}
"""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends: nothing listens


def test_a_hook_that_cannot_reach_the_host_denies_and_says_so(opencode_bin: str, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("run-token")
    plugin = tmp_path / "approve.js"
    plugin.write_text(plugin_source(f"http://127.0.0.1:{_closed_port()}", str(tmp_path / "token"), 5.0))
    (tmp_path / "driver.mjs").write_text(DRIVER)
    ran = subprocess.run(
        [opencode_bin, str(tmp_path / "driver.mjs"), plugin.as_uri()],
        env={**os.environ, "BUN_BE_BUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout.splitlines()[-1])
    assert answer["ran"] is False
    assert answer["told"].startswith("denied by the host: the approval host could not be reached (")
