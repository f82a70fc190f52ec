"""What a run leaves running, and what it can make the gateway and the machine hold.

- Under `--sandbox none` the agent starts a job that leaves OpenCode's process group and session
  and drops the run's tag (`env -i setsid`): it still ends with the run (OpenCode runs under a
  subreaper of the run's own), as root and as a plain user.
- The agent writes 500 MiB into OpenCode's stdout and stderr through /proc/<pid>/fd (events of
  1 MiB, a line of 100 MiB, a stderr line of 200 MiB without an end): the gateway's memory stays
  bounded, the run ends as it would have, with a warning and `events_truncated`.
- The sandbox's own /tmp, /var/tmp, /run and /dev/shm are tmpfs mounts of a fixed size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from opencode_gateway.opencode.sandbox import EMPTY_DIRS
from opencode_gateway.opencode.watchdog import TAG_VARIABLE
from tests.e2e.security.agent import FIND_OPENCODE, PYTHON
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e

_BOUND_S = 30.0

# The job writes its pid, environment and session id (the stat's 6th field) before it sleeps.
DETACH = (
    'env -i setsid sh -c \'echo $$ > job.pid; tr "\\0" "\\n" < /proc/$$/environ > job.env;'
    ' cut -d" " -f6 /proc/$$/stat > job.sid; exec sleep 1000\' < /dev/null > /dev/null 2>&1 &'
    " for _ in $(seq 200); do [ -s job.sid ] && break; sleep 0.05; done; echo started"
)


def _detaching() -> tuple[Reply, Reply]:
    return (
        Reply(tool_calls=[ToolCall("bash", {"command": DETACH, "description": "start a job"})], usage=usage(100, 5)),
        Reply(text="started it", usage=usage(200, 5)),
    )


def _assert_detached_and_ended(workdir: Path) -> None:
    job = int((workdir / "job.pid").read_text())
    assert (workdir / "job.sid").read_text().strip() == str(job), "the job has a session of its own"
    assert TAG_VARIABLE not in (workdir / "job.env").read_text(), "the job dropped the run's tag"
    ended = time.monotonic()
    while Path(f"/proc/{job}").exists() and time.monotonic() < ended + _BOUND_S:
        time.sleep(0.1)
    assert not Path(f"/proc/{job}").exists(), "the detached job outlived the run"


def test_a_job_that_detaches_and_drops_the_tag_ends_with_an_unsandboxed_run(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(*_detaching())
    result = run(
        "Start the job",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings.replace(sandbox="none"),
    )
    assert result.ok and result.text == "started it", result.error
    _assert_detached_and_ended(workdir)


def test_as_a_plain_user_a_job_that_detaches_ends_with_an_unsandboxed_run(
    plain_user: tuple[str, Path, list[str]], upstream: ScriptedUpstream
) -> None:
    user, home, command = plain_user
    workdir = home / "work"
    workdir.mkdir()
    subprocess.run(["chown", "-R", f"{user}:", str(home)], check=True, timeout=60)
    upstream.script(*_detaching())
    result = subprocess.run(
        [*command, "-m", "openai/gpt-4o-mini", "--api-base", upstream.url, "--api-key", "sk-x"]
        + ["--workdir", str(workdir), "--ledger", str(home / "ledger.db"), "--sandbox", "none", "--json", "Start it"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["text"] == "started it"
    _assert_detached_and_ended(workdir)


FLOOD = (
    FIND_OPENCODE
    + r"""
import json, sys
mib = b"m" * 2**20
event = json.dumps({"type": "text", "sessionID": "ses_flood", "part": {"type": "text", "text": "m" * 2**20}})
with open(f"/proc/{opencode}/fd/1", "wb") as out, open(f"/proc/{opencode}/fd/2", "wb") as err:
    for _ in range(200):
        out.write(event.encode() + b"\n")  # 200 events of 1 MiB
    for _ in range(100):
        out.write(mib)  # a line of 100 MiB
    out.write(b"\n")
    for _ in range(200):
        err.write(mib)  # a stderr line of 200 MiB, not ended
print("flooded")
"""
)

# Measured in a process of its own: the gateway's peak memory (ru_maxrss, KiB), and the result.
MEASURED = r"""
import json, resource, sys
from pathlib import Path
from opencode_gateway import run
from opencode_gateway.config.settings import Settings
url, binary, data_dir, workdir = sys.argv[1:5]
settings = Settings(opencode_bin=binary, data_dir=Path(data_dir), timeout=300, ledger=Path(data_dir) / "ledger.db",
                    sandbox_allow_read=(sys.base_prefix,))
result = run("Flood it", model="openai/gpt-4o-mini", api_base=url, api_key="sk-x", workdir=Path(workdir),
             settings=settings)
print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "text": result.text,
                  "ok": result.ok, "warnings": result.warnings, "events_truncated": result.events_truncated,
                  "kept": sum(e.size() for e in result.events)}))
"""


@pytest.mark.only_generation(
    1,
    "not yet bounded on OpenCode 2: in one full CI run the gateway peaked at 1311 MiB, every other "
    "assertion passing; 6 runs beside 3 busy loops peaked at 450 MiB, as on 1.18 (issue 51 stays open on it)",
)
def test_what_the_agent_writes_into_opencodes_pipes_leaves_the_gateways_memory_bounded(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, tmp_path: Path
) -> None:
    (workdir / "flood.py").write_text(FLOOD)
    command = f"{PYTHON} flood.py $PPID"
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": command, "description": "flood"})], usage=usage(100, 5)),
        Reply(text="flooded it", usage=usage(200, 5)),
    )
    measured = subprocess.run(
        [sys.executable, "-c", MEASURED, upstream.url, opencode_bin, str(tmp_path / "data"), str(workdir)],
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert measured.returncode == 0, measured.stderr[-3000:]
    seen = json.loads(measured.stdout.splitlines()[-1])
    assert seen["ok"] and seen["text"] == "flooded it", seen
    assert seen["events_truncated"] and seen["kept"] <= 32 * 2**20
    assert any("more events than a run keeps" in w for w in seen["warnings"]), seen["warnings"]
    assert any("1 line(s) of OpenCode's output were longer" in w for w in seen["warnings"]), seen["warnings"]
    # 500 MiB were written; the gateway (its Python, LiteLLM, the endpoint) peaked well below
    assert seen["peak_kib"] < 640 * 1024, f"the gateway peaked at {seen['peak_kib'] // 1024} MiB"


def test_the_sandboxs_temp_folders_are_sized_and_a_fill_stops_at_the_size(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    command = (
        f"df -B1 --output=target,size {' '.join(EMPTY_DIRS)} > df.out;"
        " head -c 20M /dev/zero > /run/fill 2> fill.err; echo $? > fill.rc; rm -f /run/fill;"
        " head -c 20M /dev/zero 2> dev.err > /dev/fill; echo $? > dev.rc; echo kept > /dev/null; echo $? > null.rc"
    )
    upstream.script(
        Reply(tool_calls=[ToolCall("bash", {"command": command, "description": "fill"})], usage=usage(100, 5)),
        Reply(text="done", usage=usage(200, 5)),
    )
    result = run(
        "Fill /run",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings.replace(sandbox="bwrap"),
    )
    assert result.ok, result.error
    sizes = dict(line.split() for line in (workdir / "df.out").read_text().splitlines()[1:])
    assert {target: int(size) for target, size in sizes.items()} == dict(EMPTY_DIRS)
    assert (workdir / "fill.rc").read_text().strip() == "1"
    assert "No space left on device" in (workdir / "fill.err").read_text()
    # /dev is not a tmpfs of half the machine's memory to fill: read-only, its devices still work
    assert (workdir / "dev.rc").read_text().strip() == "1"
    assert "Read-only file system" in (workdir / "dev.err").read_text()
    assert (workdir / "null.rc").read_text().strip() == "0"
