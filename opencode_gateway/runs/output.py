"""Structured output: the run's answer as one JSON object that matches a schema.

OpenCode has no response-format switch for a whole agent run, and its final message is free text.
So the model is told twice (in the run's system instructions and at the end of the prompt) to end
with one JSON object matching the schema, and the last JSON object of the final text is parsed and
validated: against the JSON schema with jsonschema, or by the pydantic model itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SettingsError

__all__ = ["OutputSpec", "last_json_object"]


@dataclass(frozen=True)
class OutputSpec:
    schema: Mapping[str, Any]
    model: Any = None  # the pydantic model class, when one was given

    @classmethod
    def of(cls, output: Any) -> OutputSpec:
        """From a JSON schema (a dict) or a pydantic model class; SettingsError for anything else."""
        if isinstance(output, Mapping):
            from jsonschema import SchemaError, validators

            schema = dict(output)
            try:
                validators.validator_for(schema).check_schema(schema)
            except SchemaError as exc:
                raise SettingsError(f"output is not a valid JSON schema: {exc.message}") from None
            return cls(schema=schema)
        from pydantic import BaseModel

        if isinstance(output, type) and issubclass(output, BaseModel):
            return cls(schema=output.model_json_schema(), model=output)
        raise SettingsError(f"output must be a JSON schema (a dict) or a pydantic model class, not {output!r}")

    def instructions(self) -> str:
        schema = json.dumps(self.schema, indent=2)
        return (
            "# Final answer format\n\nWhen the task is done, end your final message with exactly one JSON "
            "object that matches this JSON schema. Put nothing after it. It is read by a program, so it "
            f"must be valid JSON and match the schema exactly.\n\n```json\n{schema}\n```\n"
        )

    def prompt_suffix(self) -> str:
        return (
            "\n\nEnd your final answer with one JSON object that matches the JSON schema in your "
            'instructions ("Final answer format").'
        )

    def parse(self, text: str) -> tuple[Any, str | None]:
        """(the validated value, None), or (None, what is wrong with the answer)."""
        found = last_json_object(text)
        if found is None:
            return None, "the final answer contains no JSON object"
        if self.model is not None:
            from pydantic import ValidationError

            try:
                return self.model.model_validate(found), None
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
                return None, f"the answer's JSON object does not match {self.model.__name__}: {problems}"
        from jsonschema import validators
        from jsonschema.exceptions import best_match

        schema = dict(self.schema)
        error = best_match(validators.validator_for(schema)(schema).iter_errors(found))
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "(root)"
            return None, f"the answer's JSON object does not match the schema at {where}: {error.message}"
        return found, None


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last top-level JSON object in `text` (in a code fence or not); objects nested inside
    another one are part of it, not candidates of their own."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    position = text.find("{")
    while position >= 0:
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            found = value
        position = text.find("{", end)
    return found
