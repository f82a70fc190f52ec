"""What an OpenCode request is for: the work itself, or one of its background calls.

OpenCode 1.18 sends, besides the agent's own turns, a title request ("You are a title generator",
skipped when the run names its title), a compaction request when the context overflows ("You are a
context summarization agent") and a session summary ("Summarize what was done in this
conversation"), each with a prompt of its own (read from OpenCode's bundled code), and none offers
the model a tool (seen for title and compaction). A request is background only when it offers no
tool and its *first system message* starts with such a prompt, or, for the summary, its last user
message is that instruction. Text the agent puts elsewhere in a request (a file it read, a tool's
output) cannot make a turn pass for a background call; and an agent that reads the run's token and
writes a request of its own with such a prompt gets at most a completion without tools, which
acts on nothing (a turn cap bounds actions) and which every budget still counts.

OpenCode 2 compacts with the turn's own system prompt and tools, asking for the summary in a last
user message of its own ("You MUST summarize the conversation above into a structured summary").
That request stays a turn: a last user message is one the agent can write (a `subagent` call
continuing a child session sends its prompt so), so it cannot tell OpenCode's compaction from the
agent's, and a turn the agent could pass for background would escape the turn cap. On 2.x a
compaction is counted as a turn and takes the run's model, whatever `routes:` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain import Purpose

__all__ = ["BACKGROUND", "request_purpose", "routed_model"]

BACKGROUND: tuple[Purpose, ...] = ("title", "summary", "compaction")  # what a `routes:` setting may send elsewhere
_SYSTEM_PROMPTS: tuple[tuple[Purpose, str], ...] = (
    ("title", "You are a title generator"),
    ("compaction", "You are a context summarization agent"),
)
_SUMMARY_INSTRUCTION = "Summarize what was done in this conversation"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(
            part.get("text", "") for part in content if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def request_purpose(body: Mapping[str, Any]) -> Purpose:
    """`main`, `title`, `summary` or `compaction`, from a Chat Completions request body."""
    if body.get("tools"):  # only a turn can act
        return "main"
    messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
    system = next((m for m in messages if m.get("role") == "system"), None)
    if system is not None:
        first = _text(system.get("content")).lstrip()
        for purpose, prompt in _SYSTEM_PROMPTS:
            if first.startswith(prompt):
                return purpose
    users = [m for m in messages if m.get("role") == "user"]
    if users and _text(users[-1].get("content")).lstrip().startswith(_SUMMARY_INSTRUCTION):
        return "summary"
    return "main"


def routed_model(
    requested: Any, purpose: Purpose, *, model: str, small_model: str | None, routes: Mapping[str, str]
) -> str:
    """The model a request goes to: its purpose's route, else the small model when the request
    names that, else the run's model (whatever else it names: a request never picks a model)."""
    if purpose in routes:
        return routes[purpose]
    return small_model if small_model is not None and requested == small_model else model
