"""Structured output: the last JSON object of the answer, validated against a schema or a model."""

from __future__ import annotations

import pydantic
import pytest

from opencode_gateway.errors import SettingsError
from opencode_gateway.runs.output import OutputSpec, last_json_object

SCHEMA = {
    "type": "object",
    "properties": {"tests": {"type": "integer"}, "ok": {"type": "boolean"}},
    "required": ["tests", "ok"],
}


class Verdict(pydantic.BaseModel):
    tests: int
    ok: bool


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Done.\n```json\n{"a": 1}\n```\n', {"a": 1}),
        ('First {"a": 1} then {"b": 2}.', {"b": 2}),
        ('{"outer": {"inner": 1}}', {"outer": {"inner": 1}}),  # not the nested object
        ('{"a": 1} and a stray { brace', {"a": 1}),
        ("a list [1, 2] is not an object", None),
        ("no JSON here", None),
        ('{"broken": ', None),
    ],
)
def test_the_last_top_level_object_is_found(text: str, expected: object) -> None:
    assert last_json_object(text) == expected


def test_a_json_schema_validates_the_answer() -> None:
    spec = OutputSpec.of(SCHEMA)
    assert spec.parse('All green. {"tests": 12, "ok": true}') == ({"tests": 12, "ok": True}, None)
    value, problem = spec.parse('{"tests": "twelve", "ok": true}')
    assert (
        value is None
        and problem == "the answer's JSON object does not match the schema at tests: 'twelve' is not of type 'integer'"
    )
    assert spec.parse("I could not finish.") == (None, "the final answer contains no JSON object")


def test_a_pydantic_model_validates_and_builds_the_answer() -> None:
    spec = OutputSpec.of(Verdict)
    assert spec.schema["required"] == ["tests", "ok"]
    assert spec.parse('{"tests": 3, "ok": false}') == (Verdict(tests=3, ok=False), None)
    value, problem = spec.parse('{"tests": 3}')
    assert value is None and problem == "the answer's JSON object does not match Verdict: ok: Field required"


def test_the_model_is_told_the_schema_in_instructions_and_prompt() -> None:
    spec = OutputSpec.of(SCHEMA)
    assert '"required": [\n    "tests",\n    "ok"\n  ]' in spec.instructions()
    assert "Final answer format" in spec.instructions() and "Final answer format" in spec.prompt_suffix()


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"type": "no-such-type"}, "output is not a valid JSON schema"),
        ("a string", "must be a JSON schema .a dict. or a pydantic model class"),
        (Verdict(tests=1, ok=True), "must be a JSON schema"),  # an instance, not the class
    ],
)
def test_anything_else_is_refused(output: object, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        OutputSpec.of(output)
