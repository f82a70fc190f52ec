"""A run, start to end, with OpenCode replaced by a recording of its real output (the public
stand-in RecordedOpenCode, given as `opencode=`; no OpenCode needed) and everything else real: the endpoint on uvicorn, the scripted model behind it as a
gateway, the account, the ledger, the conclusion. The real OpenCode runs in tests/e2e/test_runner.py."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import RecordedOpenCode, RunResult, Settings, arun
from tests.support.replay import replaying
from tests.support.scripted_upstream import Reply, ScriptedUpstream, usage

GATEWAY = "litellm_proxy/gpt-4o-mini"


@pytest.fixture
def settings(data_dir: Path, tmp_path: Path) -> Settings:
    """A run's settings without an opencode binary: the stand-in replaces it."""
    return Settings(data_dir=data_dir, timeout=120, ledger=tmp_path / "ledger.db", opencode_bin="/nonexistent/opencode")


def _run(
    upstream: ScriptedUpstream, settings: Settings, workdir: Path, sample: str | RecordedOpenCode, **options: Any
) -> RunResult:
    """A run with OpenCode's recording `sample` (a sample's name, or the stand-in itself)."""
    return asyncio.run(
        arun(
            "Say hello",
            model=GATEWAY,
            api_base=upstream.url,
            api_key="sk-virtual",
            workdir=workdir,
            settings=settings.replace(sandbox="none"),
            opencode=replaying(sample) if isinstance(sample, str) else sample,
            **options,
        )
    )


def test_a_replayed_turn_is_priced_recorded_and_answered(
    upstream: ScriptedUpstream, settings: Settings, workdir: Path
) -> None:
    upstream.script(Reply(text="Hello from fake upstream", usage=usage(1000, 5, cost=0.00123)))
    result = _run(upstream, settings, workdir, "text", metadata={"ticket": "ENG-412"})
    assert result.ok and result.text == "Hello from fake upstream"
    assert (result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (1, 1000, 5)
    assert result.cost == 0.00123 and result.requests[0].cost.source == "reported"
    [sent] = upstream.requests
    assert sent["body"]["model"] == "gpt-4o-mini" and sent["body"]["stream_options"] == {"include_usage": True}
    assert sent["headers"]["authorization"] == "Bearer sk-virtual"  # the virtual key, never OpenCode's token
    assert sent["headers"]["x-litellm-tags"].startswith("harness,opencode")
    assert json.loads(sent["headers"]["x-litellm-spend-logs-metadata"])["ticket"] == "ENG-412"
    row = (
        sqlite3.connect(settings.ledger_location.path)
        .execute("SELECT stop_reason, requests, cost FROM runs")
        .fetchone()
    )
    assert row == ("done", 1, 0.00123)


def test_a_request_opencode_would_retry_for_minutes_ends_the_run(
    upstream: ScriptedUpstream, settings: Settings, workdir: Path
) -> None:
    """A 500 after the endpoint's own retries: OpenCode would retry it six times over ~70 s; the
    run is stopped at once, with the upstream's error."""
    upstream.script(*[Reply(status=500, error="overloaded")] * 3)
    result = _run(upstream, settings, workdir, "tool_bash")
    assert result.stop_reason == "error" and "overloaded" in str(result.error)
    assert result.usage.requests == 1  # the replay's second step never ran


def test_a_budget_refuses_the_call_over_it_and_stops_opencode(
    upstream: ScriptedUpstream, settings: Settings, workdir: Path
) -> None:
    upstream.script(Reply(text="first", usage=usage(1000, 5)))
    result = _run(upstream, settings, workdir, "tool_bash", max_requests=1)
    assert result.stop_reason == "budget_exceeded" and "max_requests" in str(result.error)
    assert len(upstream.requests) == 1  # the refused call never left the endpoint
    assert [r.cost.source for r in result.requests] == ["litellm", "refused"]


def test_with_a_small_model_a_request_goes_to_the_model_it_names_and_any_other_to_the_runs() -> None:
    from opencode_gateway.accounting.run import RunAccount
    from opencode_gateway.endpoint.tagging import Tagging
    from opencode_gateway.runs.assembly import router, targets

    settings = Settings(model="openai/gpt-4o-mini", small_model="openai/gpt-4.1-nano").validated()
    chosen = router("t", targets(settings, Tagging(), RunAccount()), settings)
    assert chosen.route({}, "openai/gpt-4.1-nano", "title").upstream.model == "openai/gpt-4.1-nano"
    for other in ("openai/gpt-4o-mini", "anthropic/claude-opus-4", None, 42):
        assert chosen.route({}, other, "main").model == "openai/gpt-4o-mini"  # the agent cannot pick a model of its own
    alone = Settings(model="openai/gpt-4o-mini").validated()
    single = router("t", targets(alone, Tagging(), RunAccount()), alone)
    assert single.choose is None and single.route({}, "openai/gpt-4.1-nano", "title").model == "openai/gpt-4o-mini"
    assert single.authorized("t") and not single.authorized("other") and single.models() == ["openai/gpt-4o-mini"]


def test_a_purposes_route_takes_its_calls_whatever_model_they_name() -> None:
    from opencode_gateway.accounting.run import RunAccount
    from opencode_gateway.endpoint.tagging import Tagging
    from opencode_gateway.runs.assembly import router, targets

    settings = Settings(
        model="openai/gpt-4o-mini",
        small_model="openai/gpt-4.1-nano",
        routes={"compaction": "openai/gpt-4.1", "title": "openai/gpt-4o"},
    ).validated()
    route = router("t", targets(settings, Tagging(), RunAccount()), settings).route
    assert route({}, "openai/gpt-4o-mini", "compaction").model == "openai/gpt-4.1"
    assert route({}, "openai/gpt-4.1-nano", "title").model == "openai/gpt-4o"
    assert route({}, "openai/gpt-4.1-nano", "summary").model == "openai/gpt-4.1-nano"  # no route: as OpenCode sent it
    assert route({}, "openai/gpt-4.1", "main").model == "openai/gpt-4o-mini"  # a route is no model to pick


def test_a_stand_in_that_is_no_maker_of_opencode_is_refused_before_anything_runs(
    settings: Settings, workdir: Path
) -> None:
    from opencode_gateway.api import check
    from opencode_gateway.errors import SettingsError

    with pytest.raises(SettingsError, match="opencode must be a stand-in such as RecordedOpenCode, not str"):
        check("Say hello", model="openai/gpt-4o-mini", api_key="sk", workdir=workdir, settings=settings, opencode="x")


def test_a_recording_is_cut_into_steps_where_opencode_made_a_request() -> None:
    lines = [
        '{"type": "step_start", "sessionID": "s"}',
        '{"type": "text", "sessionID": "s", "part": {"text": "hi"}}',
        '{"type": "step_finish", "sessionID": "s"}',
        '{"type": "error", "sessionID": "s", "error": {"name": "APIError"}}',  # a request with no step
        "",
    ]
    assert [len(step) for step in RecordedOpenCode.from_lines(lines).steps] == [3, 1]


def test_a_run_that_made_no_request_cost_zero_in_its_result_its_row_and_the_report(
    upstream: ScriptedUpstream, settings: Settings, workdir: Path
) -> None:
    from opencode_gateway.accounting.report import build_report

    result = _run(upstream, settings, workdir, RecordedOpenCode.from_lines([]))
    assert result.usage.requests == 0 and result.cost == 0.0 and upstream.requests == []
    row = sqlite3.connect(settings.ledger_location.path).execute("SELECT requests, cost FROM runs").fetchone()
    assert row == (0, 0.0)
    assert build_report(settings.ledger_location, by="run").total.cost == 0.0


@pytest.mark.parametrize(
    ("sample", "requests"), [("tool_shell", 2), ("tool_parallel", 2), ("text_slow_no_step_finish", 1)]
)
def test_an_opencode_2_recording_replays_one_request_a_step_though_its_last_step_has_no_start(
    upstream: ScriptedUpstream, settings: Settings, workdir: Path, sample: str, requests: int
) -> None:
    """OpenCode 2's stream leaves out its last step's step_start (../shared/facts/opencode2.md §4):
    a step still begins after each step_finish."""
    recording = RecordedOpenCode.from_file(Path(__file__).parent / "data" / "opencode2-samples" / f"{sample}.jsonl")
    upstream.script(*[Reply(text="ok", usage=usage(100, 5))] * requests)
    result = _run(upstream, settings, workdir, recording)
    assert result.ok, result.error
    assert len(upstream.requests) == requests == len(recording.steps)
    tools = {(e.tool, e.native_tool) for e in result.events if type(e).__name__ == "ToolCall"}
    assert tools == (set() if sample.startswith("text") else {("bash", "shell")})
    assert result.text
