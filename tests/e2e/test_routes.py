"""Where OpenCode's background calls go, with the real OpenCode: the generated config gives it the
model's window (LiteLLM's map), so it compacts a conversation before the provider refuses it, and
a `routes:` setting sends that compaction (or a title, or a summary) to the model it names."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from opencode_gateway import run
from opencode_gateway.config.settings import Settings
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage

pytestmark = pytest.mark.e2e


def _compacting(body: dict[str, Any]) -> bool:
    """OpenCode 1.18's compaction (its own system prompt) or 2.x's (its last user message)."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    last = json.dumps(body["messages"][-1]["content"])
    return "You are a context summarization agent" in json.dumps(system) or "summarize the conversation above" in last


# A summary in OpenCode 2's template (it refuses one that is not); 1.18 takes any text.
SUMMARY = "\n".join(
    ["## Objective", "- List the files, then answer.", "## Requirements", "- (none)", "## Decisions", "- (none)"]
    + ["## Work State", "### Completed", "- Listed the files.", "### Active", "- Answer.", "### Blocked", "- (none)"]
    + ["## Next Move", "1. Answer.", "## Relevant Files", "(none)", "## Important Context", "- (none)"]
)


class Session:
    """The scripted model of a session that OpenCode compacts: the agent's turns in order (`turns`,
    the last repeated), a summary for each compaction; `seen` is what came, in order."""

    def __init__(self, *turns: Reply) -> None:
        self.turns, self.seen = turns, []

    def __call__(self, body: dict[str, Any]) -> Reply:
        if _compacting(body):
            self.seen.append("compaction")
            return Reply(text=SUMMARY, usage=usage(2000, 30))
        self.seen.append("turn")
        return self.turns[min(self.seen.count("turn"), len(self.turns)) - 1]


LIST = Reply(tool_calls=[ToolCall("bash", {"command": "ls", "description": "list"})], usage=usage(1000, 20))
DONE = Reply(text="Done.", usage=usage(3000, 5))


@pytest.mark.only_generation(
    1, "OpenCode 2's compaction offers the turn's tools: it stays a turn on the run's model (opencode/purpose.py)"
)
def test_a_long_conversation_is_compacted_on_the_route_the_settings_name(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt-4o-mini takes 128,000 input tokens: a turn that used 120,000 makes OpenCode compact
    before its next turn, and the compaction goes to gpt-4.1 (1M tokens), not to the run's model."""
    answer = Session(dataclasses.replace(LIST, usage=usage(120_000, 20)), DONE)
    monkeypatch.setattr(upstream, "fallback", answer)
    result = run(
        "List the files, then say done",
        model="openai/gpt-4o-mini",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings.replace(routes={"compaction": "openai/gpt-4.1"}),
    )
    assert result.stop_reason == "done", result.error
    assert "compaction" in answer.seen, answer.seen
    by_purpose = {r.purpose: r for r in result.requests}
    assert by_purpose["compaction"].model == "openai/gpt-4.1"
    assert by_purpose["main"].model == "openai/gpt-4o-mini"
    sent = [(r["body"]["model"], _compacting(r["body"])) for r in upstream.requests]
    assert ("gpt-4.1", True) in sent and all(model == "gpt-4o-mini" for model, compacting in sent if not compacting)


@pytest.mark.only_generation(
    1,
    "OpenCode 2's compaction offers the turn's tools: a turn to us, so no compaction record tells the recovery apart (opencode/purpose.py)",
)
def test_a_provider_that_refuses_an_overflowing_prompt_is_compacted_after_and_the_run_is_done(
    upstream: ScriptedUpstream, workdir: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose window nobody told OpenCode: the provider's 400 context_length_exceeded makes
    OpenCode compact and go on (it exits 1 all the same; the run ended as an error before)."""
    answer = Session(
        LIST,
        Reply(
            status=400,
            error="This model's maximum context length is 1000 tokens. However, "
            "your messages resulted in 5000 tokens. context_length_exceeded",
        ),
        DONE,
    )

    monkeypatch.setattr(upstream, "fallback", answer)
    prices = {"openai/in-house-model": {"input_cost_per_million": 1.0, "output_cost_per_million": 2.0}}
    result = run(
        "List the files, then say done",
        model="openai/in-house-model",
        api_base=upstream.url,
        api_key="sk-x",
        workdir=workdir,
        settings=settings.replace(pricing=prices),
    )
    assert answer.seen == ["turn", "turn", "compaction", "turn"]
    assert (result.stop_reason, result.error, result.text) == ("done", None, "Done.")
    assert any("OpenCode compacted it" in warning for warning in result.warnings)
