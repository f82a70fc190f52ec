"""The Python API end to end: the real opencode binary -> our endpoint (real uvicorn) -> the
scripted model. Events while the run goes, structured output, skills and instructions, file
changes, and stopping a run by leaving the event loop."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path

import pydantic
import pytest

from opencode_gateway import OutputInvalid, astream, run, stream
from opencode_gateway.config.settings import Settings
from opencode_gateway.events import (
    Done,
    Event,
    RequestFinished,
    StepFinish,
    StepStart,
    Text,
    TextDelta,
    ToolCall,
    ToolRequested,
    ToolResult,
)
from tests.support.scripted_upstream import Reply, ScriptedUpstream
from tests.support.scripted_upstream import ToolCall as Call

pytestmark = pytest.mark.e2e

MODEL = "openai/gpt-4o-mini"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.replace(api_key="sk-provider")


class Verdict(pydantic.BaseModel):
    tests: int
    passed: bool


def test_events_arrive_in_order_while_the_run_goes(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, generation: int
) -> None:
    tool_call_seen = threading.Event()

    def final_answer(body: dict) -> Reply:
        # The model server holds its last answer until the caller has the tool call in hand: the
        # run cannot end before the event arrived, and would end by itself if it never did.
        seen = tool_call_seen.wait(timeout=30)
        return Reply(text="Listed it." if seen else "the tool call event never arrived")

    upstream.script(
        Reply(text="Let me look.", tool_calls=[Call("bash", {"command": "echo hi", "description": "x"})]), final_answer
    )
    events: list[Event] = []
    for event in stream("List it", model=MODEL, api_base=upstream.url, workdir=workdir, settings=settings):
        events.append(event)
        if isinstance(event, ToolCall):
            tool_call_seen.set()
    done = events[-1]
    assert isinstance(done, Done) and done.result.text == "Listed it.", done.result
    kinds = [type(e) for e in events if not isinstance(e, (TextDelta, ToolRequested, RequestFinished))]
    assert kinds[:5] == [StepStart, Text, ToolCall, ToolResult, StepFinish]
    if generation == 1:
        assert kinds[5:] == [StepStart, Text, StepFinish, Done]
    else:  # 2.x's stream leaves its last step's start and finish out, mostly (facts §4)
        assert [kind for kind in kinds[5:] if kind not in (StepStart, StepFinish)] == [Text, Done]
    # The model's call of the tool, as it streamed, before OpenCode ran it.
    requested = [i for i, e in enumerate(events) if isinstance(e, ToolRequested)]
    assert [events[i].tool for i in requested] == ["bash"]  # type: ignore[attr-defined]
    assert requested[0] < events.index(next(e for e in events if isinstance(e, ToolCall)))
    # Live text comes first, piece by piece, then OpenCode's whole text of the same step.
    pieces = [
        e.text
        for e in events[: events.index(next(e for e in events if isinstance(e, Text)))]
        if isinstance(e, TextDelta)
    ]
    assert "".join(pieces) == "Let me look."
    finished = [e for e in events if isinstance(e, RequestFinished)]
    assert [e.run_tokens for e in finished] == [1050, 2100]  # the run's totals so far, per request
    assert done.result.events == tuple(e for e in events[:-1] if not isinstance(e, (TextDelta, ToolRequested)))


def _step_of_each_delta(events: list[Event]) -> list[tuple[int, int]]:
    """For each TextDelta: (how many steps had finished before it, how many tool results)."""
    seen, finished, results = [], 0, 0
    for event in events:
        if isinstance(event, StepFinish):
            finished += 1
        elif isinstance(event, ToolResult):
            results += 1
        elif isinstance(event, TextDelta):
            seen.append((finished, results))
    return seen


@pytest.mark.parametrize("attempt", range(4))
def test_no_delta_of_a_request_comes_before_the_tool_events_it_follows(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, attempt: int
) -> None:
    def bash(n: int) -> Call:
        return Call("bash", {"command": f"echo step{n}", "description": f"step {n}"})

    upstream.script(
        Reply(text="alpha", tool_calls=[bash(1)]), Reply(text="bravo", tool_calls=[bash(2)]), Reply(text="charlie")
    )
    events = list(stream("Three steps", model=MODEL, api_base=upstream.url, workdir=workdir, settings=settings))
    done = events[-1]
    assert isinstance(done, Done) and done.result.text == "charlie", done.result
    by_text = {}
    for (finished, results), delta in zip(
        _step_of_each_delta(events), [e for e in events if isinstance(e, TextDelta)], strict=False
    ):
        by_text.setdefault(delta.text, (finished, results))
    # Request k+1 carries step k's tool result: its text streams only after that result and the
    # end of step k were delivered.
    assert by_text["alpha"] == (0, 0)
    assert by_text["bravo"] == (1, 1)
    assert by_text["charlie"] == (2, 2)


def test_structured_output_is_parsed_into_the_model_class(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    upstream.script(Reply(text='All tests ran.\n```json\n{"tests": 14, "passed": true}\n```'))
    result = run(
        "Run the tests", model=MODEL, api_base=upstream.url, workdir=workdir, settings=settings, output=Verdict
    )
    assert result.ok and result.output == Verdict(tests=14, passed=True)
    assert result.to_dict()["output"] == {"tests": 14, "passed": True}
    body = upstream.requests[0]["body"]
    system = json.dumps([m for m in body["messages"] if m["role"] == "system"])
    user = json.dumps([m for m in body["messages"] if m["role"] == "user"])
    assert "Final answer format" in system and "passed" in system  # the schema, in the instructions
    assert "Run the tests" in user and "Final answer format" in user  # and the reminder, in the prompt


def test_an_answer_without_a_matching_object_raises_output_invalid(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    schema = {"type": "object", "properties": {"tests": {"type": "integer"}}, "required": ["tests"]}
    upstream.script(Reply(text='Done: {"tests": "many"}'))
    with pytest.raises(OutputInvalid, match="does not match the schema at tests: 'many' is not of type") as caught:
        run("Run the tests", model=MODEL, api_base=upstream.url, workdir=workdir, settings=settings, output=schema)
    invalid = caught.value
    assert invalid.raw_text == 'Done: {"tests": "many"}'
    assert invalid.result.stop_reason == "error" and invalid.result.error is invalid
    assert invalid.result.usage.requests == 1 and invalid.result.cost is not None  # the run is still accounted
    row = sqlite3.connect(settings.ledger_location.path).execute("SELECT stop_reason, error FROM runs").fetchone()
    assert row[0] == "error" and "does not match the schema" in row[1]

    upstream.script(Reply(text="I could not run them."))
    with pytest.raises(OutputInvalid, match="the final answer contains no JSON object"):
        run("Run the tests", model=MODEL, api_base=upstream.url, workdir=workdir, settings=settings, output=schema)


def test_skills_and_instructions_reach_opencode(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, tmp_path: Path
) -> None:
    folder = tmp_path / "my-skills" / "notes"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: release-notes\ndescription: Drafts release notes from the git log."
        "\n---\nGroup the changes by kind.\n"
    )
    (folder / "template.md").write_text("## Changes\n")
    upstream.script(Reply(tool_calls=[Call("skill", {"name": "release-notes"})]), Reply(text="Loaded."))
    result = run(
        "Draft the notes",
        model=MODEL,
        api_base=upstream.url,
        workdir=workdir,
        settings=settings,
        skills=[folder],
        instructions="Answer in French.",
        permissions="read-only",
    )
    assert result.ok, result.error
    system = json.dumps([m for m in upstream.requests[0]["body"]["messages"] if m["role"] == "system"])
    assert "release-notes" in system and "Drafts release notes from the git log." in system
    assert "Answer in French." in system
    [loaded] = [e for e in result.events if isinstance(e, ToolResult)]
    assert not loaded.is_error and "Group the changes by kind." in loaded.output and "template.md" in loaded.output
    assert not (workdir / ".opencode").exists()  # copied into the run's private dir, not the project


def test_file_changes_list_exactly_what_the_run_did(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings
) -> None:
    (workdir / "app.py").write_text("def main():\n    return 1\n")
    (workdir / "obsolete.txt").write_text("old\n")
    (workdir / "untouched.md").write_text("# readme\n")
    upstream.script(
        Reply(
            tool_calls=[
                Call(
                    "write",
                    {
                        "filePath": str(workdir / "tests" / "test_app.py"),
                        "content": "def test_main():\n    assert True\n",
                    },
                )
            ]
        ),
        Reply(tool_calls=[Call("read", {"filePath": str(workdir / "app.py")})]),
        Reply(
            tool_calls=[
                Call("edit", {"filePath": str(workdir / "app.py"), "oldString": "return 1", "newString": "return 2"})
            ]
        ),
        Reply(tool_calls=[Call("bash", {"command": "rm obsolete.txt", "description": "remove it"})]),
        Reply(text="Done."),
    )
    result = run("Tidy up", model=MODEL, api_base=upstream.url, workdir=workdir, settings=settings)
    assert result.ok, result.error
    assert [(f.path, f.change) for f in result.files] == [
        ("app.py", "modified"),
        ("obsolete.txt", "deleted"),
        ("tests/test_app.py", "created"),
    ]
    diffs = {f.path: f.diff for f in result.files}
    assert diffs["app.py"] == (
        "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def main():\n-    return 1\n+    return 2\n"
    )
    assert diffs["obsolete.txt"] == "--- a/obsolete.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n"
    assert diffs["tests/test_app.py"] == (
        "--- /dev/null\n+++ b/tests/test_app.py\n@@ -0,0 +1,2 @@\n+def test_main():\n+    assert True\n"
    )


@pytest.mark.parametrize("form", ["stream", "astream"])
def test_leaving_the_event_loop_early_stops_the_run(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, form: str
) -> None:
    upstream.script(Reply(text="slow " * 200, chunk_delay=0.2))
    options: dict = {"model": MODEL, "api_base": upstream.url, "workdir": workdir, "settings": settings}

    async def first_delta() -> str:
        async for event in astream("Talk", **options):
            if isinstance(event, TextDelta):
                return event.session_id or ""
        return ""

    session = ""
    if form == "astream":
        session = asyncio.run(asyncio.wait_for(first_delta(), 60))
    else:
        for event in stream("Talk", **options):  # leaving the loop closes the iterator, which stops the run
            if isinstance(event, TextDelta):
                session = event.session_id or ""
                break
    assert session.startswith("ses_")
    row = sqlite3.connect(settings.ledger_location.path).execute("SELECT stop_reason, error FROM runs").fetchone()
    assert row == ("interrupted", "interrupted before it ended (Ctrl-C, or its caller cancelled it)")
    assert upstream.wait_abandoned() == 1  # the model's stream was closed, not left running
