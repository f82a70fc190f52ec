"""OpenCode's JSON lines, recorded from real `opencode run --format json` runs, parsed into events."""

from __future__ import annotations

from pathlib import Path

from opencode_gateway.opencode.lines import (
    Error,
    Event,
    Reasoning,
    StepFinish,
    StepStart,
    Text,
    ToolCall,
    ToolResult,
    normalize_tool,
    parse_line,
)
from tests.conftest import SAMPLES


def events(name: str) -> list[Event]:
    lines = (SAMPLES / f"{name}.jsonl").read_text().splitlines()
    return [event for line in lines for event in parse_line(line)]


def test_a_text_turn_is_step_text_finish() -> None:
    parsed = events("text")
    assert [type(e) for e in parsed] == [StepStart, Text, StepFinish]
    text = parsed[1]
    assert isinstance(text, Text) and text.text == "Hello from fake upstream"
    assert all(e.session_id == "ses_dc9b87128ffek3kNbcR4ubfl5I" for e in parsed)
    finish = parsed[2]
    assert isinstance(finish, StepFinish) and finish.reason == "stop" and finish.tokens["input"] == 1000


def test_a_finished_tool_is_a_call_then_its_result() -> None:
    parsed = events("tool_read_write_edit")
    calls = [e for e in parsed if isinstance(e, ToolCall)]
    results = [e for e in parsed if isinstance(e, ToolResult)]
    assert [c.tool for c in calls] == ["read", "write", "edit", "grep", "glob"]
    assert calls[1].input == {"filePath": "/workspace/tool_files/work/new.txt", "content": "brand new\n"}
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert results[0].output.startswith("<path>/workspace/tool_files/work/hello.txt</path>")
    assert not any(r.is_error for r in results[:3])
    # This sample was recorded without `rg` on PATH: OpenCode's grep and glob then fail.
    assert [r.is_error for r in results[3:]] == [True, True]
    assert {r.output for r in results[3:]} == {"ripgrep execution failed"}
    assert parsed.index(calls[0]) + 1 == parsed.index(results[0])


def test_bash_output_is_the_tool_result() -> None:
    result = next(e for e in events("tool_bash") if isinstance(e, ToolResult))
    assert result.tool == result.native_tool == "bash"
    assert not result.is_error and result.output


def test_a_denied_call_is_an_error_result_with_opencodes_reason() -> None:
    result = next(e for e in events("tool_denied_pattern") if isinstance(e, ToolResult))
    assert result.is_error
    assert "prevents you from using this specific tool call" in result.output


def test_a_call_to_an_unavailable_tool_names_the_tool_the_model_asked_for() -> None:
    result = next(e for e in events("tool_nonexistent") if isinstance(e, ToolResult))
    assert result.native_tool == "frobnicate" and result.is_error
    assert "unavailable tool 'frobnicate'" in result.output


def test_a_removed_tool_called_anyway_is_an_error_result() -> None:
    result = next(e for e in events("tool_denied_bash_deny") if isinstance(e, ToolResult))
    assert result.native_tool == "bash" and result.is_error


def test_reasoning_is_its_own_event() -> None:
    reasoning = [e for e in events("reasoning_thinking") if isinstance(e, Reasoning)]
    assert reasoning and reasoning[0].text


def test_an_api_error_keeps_its_status_and_message() -> None:
    error = events("error_401")[0]
    assert isinstance(error, Error)
    assert (error.name, error.message, error.status_code) == ("APIError", "Invalid API key", 401)


def test_a_context_overflow_has_no_status() -> None:
    error = next(e for e in events("error_400") if isinstance(e, Error))
    assert error.name == "ContextOverflowError" and error.status_code is None


def test_tool_names_are_normalized_and_others_kept() -> None:
    assert [normalize_tool(n) for n in ("list", "webfetch", "websearch", "patch", "multiedit", "task", "mcp_x")] == [
        "ls",
        "web_search",
        "web_search",
        "edit",
        "edit",
        "task",
        "mcp_x",
    ]


def test_lines_that_are_not_events_give_nothing() -> None:
    assert parse_line("not json") == []
    assert parse_line("[1, 2]") == []
    assert parse_line('{"type": "something_new", "sessionID": "s"}') == []


def test_to_dict_carries_the_type() -> None:
    call = ToolCall("ses_1", call_id="c1", tool="ls", native_tool="list", input={"path": "."})
    assert call.to_dict() == {
        "type": "tool_call",
        "session_id": "ses_1",
        "call_id": "c1",
        "tool": "ls",
        "native_tool": "list",
        "input": {"path": "."},
    }


def test_samples_exist() -> None:
    assert len(list(Path(SAMPLES).glob("*.jsonl"))) >= 10


def test_a_tool_result_carries_when_opencode_ran_it() -> None:
    [result] = [e for e in events("tool_bash") if isinstance(e, ToolResult)]
    assert result.started_at == 1796207008.955 and result.ended_at == 1796207009.45


SAMPLES_2 = SAMPLES.parent / "opencode2-samples"  # recorded from OpenCode 2.1.2's `run --standalone --format json`


def events_2(name: str) -> list[Event]:
    lines = (SAMPLES_2 / f"{name}.jsonl").read_text().splitlines()
    return [event for line in lines for event in parse_line(line)]


def test_opencode_2_lines_parse_to_the_same_events() -> None:
    """2.x's shapes: the call id is the part's `id`, tools are renamed, and the final step of a run
    usually comes with no step_start or step_finish (the endpoint's records are the usage)."""
    parsed = events_2("tool_glob_grep")
    calls = [e for e in parsed if isinstance(e, ToolCall)]
    assert [(c.call_id, c.tool, c.native_tool) for c in calls] == [
        ("call_61901_0", "glob", "glob"),
        ("call_61902_0", "grep", "grep"),
    ]
    results = [e for e in parsed if isinstance(e, ToolResult)]
    assert [r.call_id for r in results] == [c.call_id for c in calls] and not any(r.is_error for r in results)
    assert results[0].output.endswith("a.txt")
    assert [type(e) for e in parsed][-2:] == [StepFinish, Text]  # the last step: its text alone
    [text] = events_2("text")
    assert isinstance(text, Text) and text.text and text.session_id and text.session_id.startswith("ses_")


def test_opencode_2_tools_are_normalised_to_the_names_policies_and_modes_use() -> None:
    denied = [e for e in events_2("permission_pattern_deny") if isinstance(e, ToolResult)]
    assert [(e.tool, e.native_tool, e.is_error, e.output) for e in denied] == [
        ("bash", "shell", True, "Permission denied: shell")
    ]
    assert normalize_tool("shell") == "bash" and normalize_tool("subagent") == "task"
    [missing] = [e for e in events_2("tool_nonexistent") if isinstance(e, ToolResult)]
    assert missing.native_tool == "frobnicate" and missing.is_error and "No tool named" in missing.output


def test_opencode_2_errors_keep_their_type_status_and_message() -> None:
    [auth] = events_2("error_401")
    assert isinstance(auth, Error)
    assert (auth.name, auth.status_code, auth.message) == ("provider.auth", 401, "Invalid API key")
    limited = [e for e in events_2("error_429_persistent") if isinstance(e, Error)]
    assert limited and all((e.name, e.status_code) == ("provider.rate-limit", 429) for e in limited)
    [route] = events_2("error_unknown_model")
    assert isinstance(route, Error) and route.name == "provider.no-route" and route.status_code is None
