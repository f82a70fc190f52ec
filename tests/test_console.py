"""The live view of a run in a terminal: what it prints for each event (the real CLI in a
pseudo-terminal: tests/e2e/test_console.py)."""

from __future__ import annotations

import io
import sys

from opencode_gateway.console import RunView, elapsed
from opencode_gateway.events import (
    Error,
    ReasoningDelta,
    RequestFinished,
    StepStart,
    Text,
    TextDelta,
    ToolRequested,
    ToolResult,
    UpstreamRetry,
)

CLI = [sys.executable, "-m", "opencode_gateway"]


def shown(*events: object) -> str:
    out = io.StringIO()
    with RunView(out, model="openai/gpt-4o-mini") as view:
        for event in events:
            view.show(event)  # type: ignore[arg-type]
    return out.getvalue()


def test_streamed_text_is_printed_line_by_line_and_opencodes_whole_text_not_again() -> None:
    text = shown(
        StepStart("s"),
        TextDelta("s", text="Hello, "),
        TextDelta("s", text="world.\nSecond"),
        TextDelta("s", text=" line."),
        Text("s", text="Hello, world.\nSecond line."),
    )
    assert text.count("Hello, world.") == 1 and text.count("Second line.") == 1


def test_opencodes_step_start_after_the_first_words_does_not_break_the_line() -> None:
    text = shown(
        TextDelta("s", text="I'll write"),
        StepStart("s"),
        TextDelta("s", text=" the program first."),
        ToolRequested("s", tool="write"),
    )
    assert "I'll write the program first." in text


def test_text_that_did_not_stream_through_the_endpoint_is_printed_whole() -> None:
    assert "From an earlier session." in shown(StepStart("s"), Text("s", text="From an earlier session."))


def test_each_tool_call_shows_as_it_is_asked_for_and_as_it_ends() -> None:
    text = shown(
        ToolRequested("s", tool="bash"),
        ToolResult("s", call_id="1", tool="bash", title="echo hi"),
        ToolRequested("s", tool="edit"),
        ToolResult(
            "s",
            call_id="2",
            tool="edit",
            title="src/app.py",
            is_error=True,
            output="File src/app.py not found\nmore detail",
        ),
    )
    assert "→ bash" in text and "✓ bash echo hi" in text and "→ edit" in text
    assert "✗ edit src/app.py — File src/app.py not found" in text and "more detail" not in text


def test_retries_and_errors_are_said() -> None:
    text = shown(
        UpstreamRetry(None, status_code=429, attempt=2, delay_s=1.5),
        Error("s", name="APIError", message="Invalid API key"),
        ReasoningDelta("s", text="hmm"),
    )
    assert "the upstream answered 429: retry 2 in 1.5 s" in text and "✗ APIError: Invalid API key" in text
    assert "hmm" not in text  # reasoning is an activity, not the answer


def test_the_status_line_counts_requests_tokens_and_cost() -> None:
    view = RunView(io.StringIO(), model="litellm_proxy/team-a")
    view.show(RequestFinished("s", request_id="r1", status_code=200, run_tokens=1200, run_cost=0.0042))
    view.show(RequestFinished("s", request_id="r2", status_code=200, run_tokens=2500, run_cost=None))
    view.show(ToolRequested("s", tool="bash"))
    status = str(view.__rich__().text)  # type: ignore[union-attr]
    assert status.startswith("0:00 · litellm_proxy/team-a · 2 requests · 2,500 tokens · cost unknown · calling bash")
    view.show(RequestFinished("s", request_id="r3", status_code=400, cost_source="refused", run_tokens=2500))
    status = str(view.__rich__().text)  # type: ignore[union-attr]
    assert " · 2 requests (1 refused) · " in status  # a refused call never went out
    assert [elapsed(s) for s in (7, 92, 3723)] == ["0:07", "1:32", "1:02:03"]


def test_what_the_agent_writes_cannot_command_the_terminal() -> None:
    """A tool's title (the agent's command), a tool's error (a file the agent read) and the model's
    text reach a person's terminal; ESC there starts a terminal command (clear the screen, set its
    title, write the clipboard with OSC 52). Rich passes it through: it is shown, not obeyed."""
    clipboard = "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x1b\\"
    text = shown(
        ToolResult("s", call_id="1", tool="bash", title=f"echo hi{clipboard}"),
        ToolResult("s", call_id="2", tool="read", title="x", is_error=True, output="\x1b[2Jgone"),
        TextDelta("s", text="answer\x1b]0;owned\x07\n"),
        TextDelta("s", text="tail\x9b2J"),
    )
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "\\x1b]52;c;" in text and "\\x1b[2Jgone" in text and "answer\\x1b]0;owned" in text  # BEL: rich drops it
