"""OpenCode replaced by a recording, for fast tests of the runner: the JSON lines a real
`opencode run --format json` printed (tests/data/opencode-samples), printed again step by step,
each step after a streamed request to the run's endpoint as OpenCode sends it (the token from the
file its config names). The endpoint, the upstream, the account, the ledger and the conclusion
all run for real; the end-to-end tests run the real OpenCode."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from opencode_gateway.opencode.lines import Event, parse_line
from opencode_gateway.opencode.process import OpenCodeProcess, ProcessExit

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "opencode-samples"

__all__ = ["ReplayedOpenCode", "replaying"]


def replaying(sample: str) -> Callable[..., OpenCodeProcess]:
    """A maker of OpenCode's process (runner.Parts.opencode) that replays `sample`."""
    return partial(ReplayedOpenCode, sample)


class ReplayedOpenCode(OpenCodeProcess):
    def __init__(
        self,
        sample: str,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: Path,
        prompt: str,
        tag: str,
        pass_fds: Sequence[int] = (),
    ) -> None:
        super().__init__(argv, env=env, cwd=cwd, prompt=prompt, tag=tag, pass_fds=pass_fds)
        self.steps = _steps((SAMPLES / f"{sample}.jsonl").read_text().splitlines())
        self.requests: list[int] = []  # the status of each request it made

    async def start(self) -> None:
        """Nothing to start: no process."""

    async def run(self, on_event: Callable[[Event], None], timeout: float) -> ProcessExit:
        provider = json.loads(self.env["OPENCODE_CONFIG_CONTENT"])["provider"]["litellm"]
        model = json.loads(self.env["OPENCODE_CONFIG_CONTENT"])["model"].removeprefix("litellm/")
        token = Path(provider["options"]["apiKey"].removeprefix("{file:").removesuffix("}")).read_text()
        async with httpx.AsyncClient(base_url=provider["options"]["baseURL"], timeout=30) as client:
            for step in self.steps:
                if self._stop.is_set():
                    return ProcessExit(None, "", timed_out=False)
                await self._request(client, model, token)
                for line in step:
                    for event in parse_line(line):
                        on_event(event)
                await asyncio.sleep(0)  # the runner's callbacks (a stop) run between steps
        failed = any(json.loads(line)["type"] == "error" for step in self.steps for line in step)
        return ProcessExit(1 if failed else 0, "", timed_out=False)

    async def _request(self, client: httpx.AsyncClient, model: str, token: str) -> None:
        body: dict[str, Any] = {"model": model, "stream": True, "messages": [{"role": "user", "content": self.prompt}]}
        async with client.stream(
            "POST", "/chat/completions", json=body, headers={"authorization": f"Bearer {token}"}
        ) as response:
            await response.aread()
            self.requests.append(response.status_code)

    async def kill(self) -> None:
        self._stop.set()


def _steps(lines: list[str]) -> list[list[str]]:
    """The recording cut where OpenCode made a request: at each step's start, or at an error
    that came without one."""
    steps: list[list[str]] = []
    for line in lines:
        kind = json.loads(line)["type"]
        if kind == "step_start" or not steps or (kind == "error" and steps[-1][-1].find('"step_finish"') >= 0):
            steps.append([])
        steps[-1].append(line)
    return steps
