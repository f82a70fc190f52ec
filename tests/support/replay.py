"""The recorded runs of a real `opencode run --format json` (tests/data/opencode-samples),
replayed by the package's public stand-in for OpenCode (RecordedOpenCode)."""

from __future__ import annotations

from pathlib import Path

from opencode_gateway import RecordedOpenCode

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "opencode-samples"

__all__ = ["SAMPLES", "replaying"]


def replaying(sample: str) -> RecordedOpenCode:
    """The stand-in that replays `sample` (the `opencode=` option of a run)."""
    return RecordedOpenCode.from_file(SAMPLES / f"{sample}.jsonl")
