"""Guards and faults, end to end with the real opencode binary: budgets enforced at the endpoint,
an upstream that misbehaves on cue, Ctrl-C, orphans. Every case ends as described, in bounded time."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from opencode_gateway.errors import BudgetExceeded, RunTimeout, UpstreamError
from opencode_gateway.events import RequestFinished, UpstreamRetry
from opencode_gateway.opencode.watchdog import TAG_VARIABLE
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e
MODEL = {"model": "litellm_proxy/coder", "api_key": "sk-virtual"}  # the scripted server plays the gateway


def tool_turn(workdir: Path, name: str, prompt_tokens: int = 1000) -> Reply:
    return Reply(
        tool_calls=[ToolCall("write", {"filePath": str(workdir / name), "content": name})],
        usage=usage(prompt_tokens, 50),
    )


def test_max_requests_refuses_the_next_call_and_stops_the_run(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(tool_turn(workdir, "a"), tool_turn(workdir, "b"), tool_turn(workdir, "c"), Reply(text="done"))
    result = run(
        "Write files", api_base=upstream.url, workdir=workdir, settings=settings.replace(max_requests=2), **MODEL
    )
    assert result.stop_reason == "budget_exceeded"
    assert isinstance(result.error, BudgetExceeded)
    assert "max_requests is 2 and 2 requests were made" in str(result.error)
    assert len(upstream.requests) == 2  # the third call never left the endpoint
    assert (result.usage.requests, result.usage.refused) == (2, 1)  # it is a refusal, not a request
    assert [r.cost.source for r in result.requests] == ["reported", "reported", "refused"] or [
        r.status_code for r in result.requests
    ] == [200, 200, 400]
    rows = (
        sqlite3.connect(settings.ledger_location.path)
        .execute("SELECT status_code, cost_source, error FROM requests ORDER BY started_at")
        .fetchall()
    )
    assert rows[-1][0] == 400 and rows[-1][1] == "refused" and "max_requests" in rows[-1][2]
    assert sqlite3.connect(settings.ledger_location.path).execute("SELECT stop_reason FROM runs").fetchone() == (
        "budget_exceeded",
    )


def test_a_crossed_token_limit_lets_the_running_stream_finish_and_reports_the_overshoot(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(tool_turn(workdir, "a", 1000), tool_turn(workdir, "b", 1300), Reply(text="never"))
    result = run(
        "Write files", api_base=upstream.url, workdir=workdir, settings=settings.replace(max_tokens=1500), **MODEL
    )
    assert result.stop_reason == "budget_exceeded"
    assert [r.status_code for r in result.requests] == [200, 200, 400]
    assert result.usage.input_tokens + result.usage.output_tokens == 2400
    assert any("900 tokens over max_tokens (1,500)" in w for w in result.warnings)


def test_a_budget_from_the_groups_defaults_applies(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(tool_turn(workdir, "a"), Reply(text="never"))
    limited = settings.replace(budgets={"coder": {"max_requests": 1}})
    result = run("Write", api_base=upstream.url, workdir=workdir, settings=limited, **MODEL)
    assert result.stop_reason == "budget_exceeded" and len(upstream.requests) == 1


def test_a_429_with_retry_after_is_retried_and_shown(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(status=429, error="slow down", headers={"retry-after": "1"}), Reply(text="fine"))
    result = run("Hi", api_base=upstream.url, workdir=workdir, settings=settings, **MODEL)
    assert result.ok and result.text == "fine"
    retries = [e for e in result.events if isinstance(e, UpstreamRetry)]
    assert [(e.status_code, e.attempt, e.delay_s) for e in retries] == [(429, 2, 1.0)]
    finished = [e for e in result.events if isinstance(e, RequestFinished)]
    assert [(e.status_code, e.run_tokens) for e in finished] == [(200, 1050)]
    assert result.requests[0].attempts == 2


def test_a_cut_stream_ends_the_run_with_a_clear_error(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="this answer will be cut off in the middle", cut_after=3), Reply(text="never"))
    result = run("Hi", api_base=upstream.url, workdir=workdir, settings=settings, **MODEL)
    assert result.stop_reason == "error" and isinstance(result.error, UpstreamError)
    assert result.error.status_code == 502 and "broke off" in str(result.error)
    assert len(upstream.requests) == 1  # OpenCode did not get to re-request
    assert result.requests[0].status_code == 502 and result.requests[0].usage_missing
    assert time.time() - result.requests[0].started_at < 30  # not OpenCode's minutes of retries


def test_an_sse_error_event_ends_the_run_with_its_message(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="partial answer", sse_error="the model is overloaded"), Reply(text="never"))
    result = run("Hi", api_base=upstream.url, workdir=workdir, settings=settings, **MODEL)
    assert result.stop_reason == "error" and "the model is overloaded" in str(result.error)
    assert len(upstream.requests) == 1


def test_an_upstream_that_never_answers_hits_the_first_byte_timeout(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text="late", hang=60))
    result = run("Hi", api_base=upstream.url, workdir=workdir, settings=settings.replace(first_byte_timeout=2), **MODEL)
    assert result.stop_reason == "error"
    assert isinstance(result.error, UpstreamError) and result.error.status_code == 504
    assert "first-byte timeout" in str(result.error)
    assert result.requests[0].duration_s < 30  # not the upstream's 60 s


def test_a_trickling_stream_is_ended_by_the_run_timeout_and_closed_upstream(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    # Ten minutes of text at a byte a second: only the run's timeout can end it. The timeout
    # leaves OpenCode time to start on a loaded machine and send its request.
    upstream.script(Reply(text="x" * 600, byte_delay=1.0))
    result = run("Hi", api_base=upstream.url, workdir=workdir, settings=settings.replace(timeout=20), **MODEL)
    assert result.stop_reason == "timeout" and isinstance(result.error, RunTimeout)
    assert len(upstream.requests) == 1
    assert result.duration_s < 120  # ended by the timeout, not by the stream
    assert upstream.wait_abandoned(timeout=30) == 1  # our relay closed the upstream stream when OpenCode went away
    [record] = result.requests  # made before the result was assembled
    assert record.status_code == 499 and "closed the connection" in (record.error or "")


def test_a_stalled_stream_hits_the_idle_timeout(upstream: ScriptedUpstream, workdir: Path, settings: Settings) -> None:
    upstream.script(Reply(text="slow words here", chunk_delay=3.0))
    result = run("Hi", api_base=upstream.url, workdir=workdir, settings=settings.replace(idle_timeout=1), **MODEL)
    assert result.stop_reason == "error" and "stalled for more than 1 s" in str(result.error)


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_no_process_outlives_the_run(upstream: ScriptedUpstream, workdir: Path, settings: Settings) -> None:
    marker = f"orphan-check-{os.getpid()}-{time.monotonic_ns()}"
    upstream.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash",
                    {
                        "command": f"(sleep 300; echo {marker}) > /dev/null 2>&1 & echo started",
                        "description": "start a background job",
                    },
                )
            ]
        ),
        Reply(text="started it"),
    )
    result = run("Start a job", api_base=upstream.url, workdir=workdir, settings=settings, **MODEL)
    assert result.ok
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(marker) == []


_SIGNALS_AS_IN_A_TERMINAL = (
    "import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in "
    "(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]; os.execv(sys.argv[1], sys.argv[1:])"
)


def _cli_run(
    upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, ledger: Path, *options: str
) -> subprocess.Popen[str]:
    """The CLI on a run whose second request streams slowly; returned once that request arrived.
    It starts with the signals handled, as from a terminal: a suite started in the background (`&`
    in a script) ignores SIGINT, one under `nohup` SIGHUP, and so would every program it starts."""
    cli = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SIGNALS_AS_IN_A_TERMINAL,
            sys.executable,
            "-m",
            "opencode_gateway",
            "run",
            "-m",
            "litellm_proxy/coder",
            "--api-base",
            upstream.url,
            "--api-key",
            "sk-v",
            "--opencode-bin",
            opencode_bin,
            "--workdir",
            str(workdir),
            "--ledger",
            str(ledger),
            *options,
            "go",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while len(upstream.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(upstream.requests) == 2
    return cli


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_sigterm_and_sighup_stop_opencode_keep_the_ledger_and_exit_128_plus_the_signal(
    signum: signal.Signals, upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    upstream.script(tool_turn(workdir, "a"), Reply(text="slow " * 100, chunk_delay=0.5))
    cli = _cli_run(upstream, workdir, opencode_bin, ledger)
    cli.send_signal(signum)
    _, stderr = cli.communicate(timeout=90)  # from the signal; generous for a machine running a second suite
    assert cli.returncode == 128 + signum, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr
    db = sqlite3.connect(ledger)
    assert db.execute("SELECT stop_reason FROM runs").fetchone() == ("interrupted",)
    assert db.execute("SELECT count(*) FROM requests WHERE status_code = 200").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM requests").fetchone() == (2,)  # the one in flight too
    assert _processes_with(str(workdir)) == [] or all(
        Path(f"/proc/{pid}/cwd").resolve() != workdir.resolve() for pid in _processes_with(str(workdir))
    )


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(entry.partition("=")[::2] for entry in entries if "=" in entry)


def _tagged(tag: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if tag in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0"):
                found.append(int(pid))
        except OSError:
            continue
    return found


# Under bubblewrap the kernel ends the run's pid namespace when the gateway dies (die-with-parent):
# 5 s from the kill. Unconfined, the watchdog must notice the gateway's pipe close and kill by tag.
@pytest.mark.parametrize(("sandbox", "bound_s"), [("bwrap", 5), ("none", 30)])
def test_sigkill_of_the_gateway_leaves_no_process_no_token_and_an_abandoned_run(
    sandbox: str, bound_s: float, upstream: ScriptedUpstream, workdir: Path, opencode_bin: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    marker = f"orphan-check-{os.getpid()}-{time.monotonic_ns()}"
    upstream.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "bash",
                    {
                        "command": f"(sleep 300; echo {marker}) > /dev/null 2>&1 & echo started",
                        "description": "start a background job",
                    },
                )
            ]
        ),
        Reply(text="slow " * 100, chunk_delay=0.5),
    )
    cli = _cli_run(upstream, workdir, opencode_bin, ledger, "--sandbox", sandbox)
    job = _processes_with(marker)
    assert job, "the agent's background job runs"
    job_environ = _environ(job[0])
    tag = f"{TAG_VARIABLE}={job_environ[TAG_VARIABLE]}"
    opencode = [pid for pid in _tagged(tag) if opencode_bin.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert opencode, "OpenCode carries the run's tag too"
    private = Path(job_environ["XDG_CONFIG_HOME"]).parent
    assert (private / "token").exists()
    cli.kill()
    cli.wait(timeout=30)
    killed = time.monotonic()
    while _tagged(tag) and time.monotonic() < killed + bound_s:
        time.sleep(0.1)
    assert _tagged(tag) == [], f"OpenCode or a process it started outlived the gateway by {bound_s} s"
    while private.exists() and time.monotonic() < killed + 30:
        time.sleep(0.2)
    assert not private.exists(), "the token was left behind"
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "opencode_gateway",
            "report",
            "--by",
            "outcome",
            "--ledger",
            str(ledger),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    groups = {group["key"]: group for group in json.loads(report.stdout)["groups"]}
    assert set(groups) == {"abandoned"} and groups["abandoned"]["requests"] >= 1, report


def test_a_period_budget_refuses_the_second_run_of_the_day_for_the_same_ticket(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    capped = settings.replace(budgets={"ticket": {"per": "day", "max_cost": 0.001}})
    upstream.script(Reply(text="first", usage=usage(1000, 50, cost=0.0012)))  # $0.0012: the day's cap is spent
    first = run("Hi", api_base=upstream.url, workdir=workdir, metadata={"ticket": "ENG-5"}, settings=capped, **MODEL)
    assert first.ok and first.cost == pytest.approx(0.0012)
    upstream.script(Reply(text="second", usage=usage(10, 5, cost=0.0001)))
    second = run(
        "Hi again", api_base=upstream.url, workdir=workdir, metadata={"ticket": "ENG-5"}, settings=capped, **MODEL
    )
    assert second.stop_reason == "budget_exceeded" and isinstance(second.error, BudgetExceeded)
    assert "day budget of ticket=ENG-5 exceeded since" in str(second.error)
    assert "max_cost is $0.001 and ticket=ENG-5 cost $0.001200" in str(second.error)
    assert upstream.requests == []  # the second run's call never left the endpoint
    upstream.script(Reply(text="other", usage=usage(10, 5, cost=0.0001)))
    other = run("Hi", api_base=upstream.url, workdir=workdir, metadata={"ticket": "ENG-6"}, settings=capped, **MODEL)
    assert other.ok  # another ticket has its own day


def test_ctrl_c_on_a_batch_says_interrupted_without_a_traceback(
    upstream: ScriptedUpstream, opencode_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs going, their requests streaming: it printed ~250 lines of tracebacks before
    "interrupted" (uvicorn's "Exception in ASGI application" per cancelled request, and a gather's
    exception never retrieved)."""
    monkeypatch.setattr(upstream, "fallback", lambda body: Reply(text="slow " * 100, chunk_delay=0.5))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "go"}) + "\n" for i in range(4)))
    cli = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SIGNALS_AS_IN_A_TERMINAL,
            sys.executable,
            "-m",
            "opencode_gateway",
            "batch",
            str(tasks),
            "-m",
            "openai/gpt-4o-mini",
            "--api-base",
            upstream.url,
            "--api-key",
            "sk-x",
            "--concurrency",
            "2",
            "--opencode-bin",
            opencode_bin,
            "--ledger",
            str(tmp_path / "ledger.db"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")},
    )
    deadline = time.monotonic() + 60
    while len(upstream.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=90)
    assert cli.returncode == 130, stderr
    assert "Traceback" not in stderr and "never retrieved" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == "opencode-gateway: interrupted"


@pytest.fixture
def small_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir on a tmpfs of its own, 1 MiB: a disk that fills (root mounts it)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "small-data"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True, timeout=30)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, timeout=30)


def _fill(folder: Path) -> None:
    """Write until the disk is full (unbuffered: each write that fits is kept)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for _ in range(4096):  # 1 MiB in 4 KiB writes, with room to spare
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def _run_with_data_dir(
    upstream: ScriptedUpstream, workdir: Path, data_dir: Path, settings: Settings, tmp_path: Path
) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "opencode_gateway", "run", "-m", "openai/gpt-4o-mini", "--api-base", upstream.url,
         "--api-key", "sk-x", "--workdir", str(workdir), "--opencode-bin", str(settings.opencode_bin),
         "--ledger", str(tmp_path / "ledger.db"), "Answer"],
        env={**os.environ, "OPENCODE_GATEWAY_HOME": str(data_dir)}, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_a_data_dir_that_cannot_be_written_is_refused_before_opencode_starts(
    how: str, upstream: ScriptedUpstream, workdir: Path, settings: Settings, small_data_dir: Path, tmp_path: Path
) -> None:
    if how == "full":
        _fill(small_data_dir)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_data_dir)], check=True, timeout=30)
    upstream.script(Reply(text="never", usage=usage(100, 5)))
    result = _run_with_data_dir(upstream, workdir, small_data_dir, settings, tmp_path)
    assert result.returncode == 2, result.stderr
    reason = "No space left on device" if how == "full" else "Read-only file system"
    assert result.stderr.strip() == (
        f"opencode-gateway: error: the data dir {small_data_dir} cannot be written ({reason}): free space there, "
        "or give another (data_dir in the settings, or $OPENCODE_GATEWAY_HOME)"
    )
    assert upstream.requests == []  # no model call was paid for


def test_a_disk_that_fills_during_the_run_loses_the_kept_session_not_the_answer(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, small_data_dir: Path, tmp_path: Path
) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        _fill(small_data_dir)  # while OpenCode waits for the answer: the session cannot be kept after it
        return Reply(text="the answer survives", usage=usage(100, 5))

    upstream.script(answer)
    result = _run_with_data_dir(upstream, workdir, small_data_dir, settings, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "the answer survives"
    [lost] = [line for line in result.stderr.splitlines() if "could not be kept" in line]
    assert f"could not be kept under {small_data_dir} (No space left on device): --session cannot" in lost
    assert not (small_data_dir / "sessions").exists() or not any((small_data_dir / "sessions").rglob("*.db"))
    [status] = sqlite3.connect(tmp_path / "ledger.db").execute("SELECT stop_reason FROM runs").fetchone()
    assert status == "done"
