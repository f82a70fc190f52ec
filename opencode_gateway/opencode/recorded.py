"""A stand-in for OpenCode, as httpx's MockTransport stands in for the network: the JSON lines a
real `opencode run --format json` printed, printed again step by step, each step after one
streamed request to the run's endpoint as OpenCode sends it (its token read from the file the
run's config names). Everything else of the run is real: the endpoint, the upstream, the account,
the ledger, the conclusion. For tests of code that runs OpenCode, without OpenCode:

    from opencode_gateway import RecordedOpenCode, run
    result = run("Say hello", model="openai/gpt-4o-mini", opencode=RecordedOpenCode.from_file("hello.jsonl"))

A recording is what `opencode run --format json` wrote to stdout, one event a line (1.18's or
2.x's).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .lines import Event, parse_line
from .process import OpenCodeProcess, ProcessExit

__all__ = ["RecordedOpenCode"]


@dataclass(frozen=True)
class RecordedOpenCode:
    """A recorded run, replayed as the run's OpenCode (the `opencode=` option): a maker of
    OpenCodeProcess, so every run given it replays the recording afresh."""

    steps: tuple[tuple[str, ...], ...]

    @classmethod
    def from_lines(cls, lines: Sequence[str]) -> RecordedOpenCode:
        """The recording cut where OpenCode made a request: at each step's start, and after each
        step's finish (an error that came without a step; OpenCode 2's last step, whose
        `step_start` its stream leaves out)."""
        steps: list[list[str]] = []
        finished = False
        for line in (line for line in lines if line.strip()):
            kind = json.loads(line)["type"]
            if kind == "step_start" or not steps or finished:
                steps.append([])
            steps[-1].append(line)
            finished = kind == "step_finish"
        return cls(tuple(tuple(step) for step in steps))

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedOpenCode:
        return cls.from_lines(Path(path).read_text(encoding="utf-8").splitlines())

    def __call__(self, argv: Sequence[str], **process: Any) -> OpenCodeProcess:
        """The replay of one run, made as the run makes OpenCode's process (env, cwd, prompt, tag)."""
        return _Replay(self.steps, argv, **process)


class _Replay(OpenCodeProcess):
    """No process: the recording's events, each step after a request to the run's endpoint."""

    def __init__(self, steps: tuple[tuple[str, ...], ...], argv: Sequence[str], **process: Any) -> None:
        super().__init__(argv, **process)
        self.steps = steps

    async def start(self) -> None:
        """Nothing to start."""

    async def run(self, on_event: Callable[[Event], None], timeout: float) -> ProcessExit:
        config = json.loads(self.env["OPENCODE_CONFIG_CONTENT"])
        options = config["provider"]["litellm"]["options"]
        token = Path(options["apiKey"].removeprefix("{file:").removesuffix("}")).read_text()
        model = config["model"].removeprefix("litellm/")
        async with httpx.AsyncClient(base_url=options["baseURL"], timeout=timeout) as client:
            for step in self.steps:
                if self._stop.is_set():
                    return ProcessExit(None, "", timed_out=False)
                await self._request(client, model, token)
                for line in step:
                    for event in parse_line(line):
                        on_event(event)
                await asyncio.sleep(0)  # the run's callbacks (a stop) run between steps
        failed = any(json.loads(line)["type"] == "error" for step in self.steps for line in step)
        return ProcessExit(1 if failed else 0, "", timed_out=False)

    async def _request(self, client: httpx.AsyncClient, model: str, token: str) -> None:
        body: dict[str, Any] = {"model": model, "stream": True, "messages": [{"role": "user", "content": self.prompt}]}
        headers = {"authorization": f"Bearer {token}"}
        async with client.stream("POST", "/chat/completions", json=body, headers=headers) as response:
            await response.aread()

    async def kill(self) -> None:
        self._stop.set()
