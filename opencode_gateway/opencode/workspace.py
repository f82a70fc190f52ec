"""OpenCode's side of a run or a launch: what it is given to read, and how it is started.

A workspace is a private folder (0700): the token file, OpenCode's own HOME and XDG config, cache
and state dirs, the skills and instructions of the run, and the generated opencode.json; beside it
the data home (XDG_DATA_HOME), where OpenCode keeps its sessions. A headless run gets a fresh
temporary folder, removed after the run, and a data home kept per session; the TUI's launcher
keeps one under the data dir across launches. Either way OpenCode is started from `command()`:
with the allowlisted environment, and under bwrap when the run is sandboxed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..accounting.pricing import Price
from . import config as oc_config
from .agent import AgentConfig
from .generation import DEFAULT, Generation
from .gitguard import GitControl
from .sandbox import SandboxConfig
from .seccomp import filter_fd
from .skills import Skill, install_skills, skills_dir

__all__ = ["Workspace"]


@dataclass(frozen=True)
class Workspace:
    private: Path  # 0700: the token, OpenCode's HOME and XDG dirs, skills, instructions, opencode.json
    data_home: Path  # XDG_DATA_HOME: OpenCode's sessions
    generation: Generation = DEFAULT  # of the OpenCode it is for: its config and environment differ

    def prepare(self) -> None:
        """Make the private dirs (0700) and the data home."""
        oc_config.make_private_dirs(self.private)
        self.data_home.mkdir(mode=0o700, parents=True, exist_ok=True)

    def write_token(self, token: str) -> Path:
        """A 0600 file OpenCode's config reads its API key from (`{file:...}`), never its environment;
        never written over another."""
        path = self.private / "token"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(token)
        return path

    def add_skills(self, skills: Sequence[Skill]) -> list[str]:
        """Copy `skills` into OpenCode's config dir; the folders OpenCode may then read them in."""
        install_skills(skills, self.private / "config")
        return [str(skills_dir(self.private / "config"))] if skills else []

    @property
    def plugin(self) -> Path:
        """Where the run's approval plugin is (sealed read-only in the sandbox): a file for 1.18,
        a folder (its package) for 2.x."""
        return self.private / ("approve.js" if self.generation.number == 1 else "approve")

    def add_plugin(self, source: str) -> str:
        """The run's approval plugin, read-only, as OpenCode's config names it (1.18: a file://
        URL; 2.x: the package's folder)."""
        if self.generation.number == 1:
            self.plugin.write_text(source, encoding="utf-8")
            self.plugin.chmod(0o444)
            return self.plugin.as_uri()
        self.plugin.mkdir(mode=0o700)
        (self.plugin / "package.json").write_text(
            json.dumps({"name": "opencode-gateway-approvals", "main": "index.js", "type": "module"})
        )
        (self.plugin / "index.js").write_text(source, encoding="utf-8")
        for path in (self.plugin / "package.json", self.plugin / "index.js", self.plugin):
            path.chmod(0o555 if path.is_dir() else 0o444)
        return str(self.plugin)

    def add_instructions(self, parts: Sequence[str]) -> list[str]:
        """The run's extra instructions as one file; the files for the config's `instructions`.
        OpenCode 2 reads no `instructions`, but it reads its global AGENTS.md (the project's is
        off): there they go, in the private config dir."""
        if not parts:
            return []
        text = "\n\n".join(parts) + "\n"
        if self.generation.number == 2:
            (self.private / "config" / "opencode" / "AGENTS.md").write_text(text, encoding="utf-8")
            return []
        path = self.private / "instructions.md"
        path.write_text(text, encoding="utf-8")
        return [str(path)]

    def config(
        self,
        agent: AgentConfig,
        pricing: Mapping[str, Price],
        *,
        base_url: str,
        token_file: Path,
        instructions: Sequence[str] = (),
        readable_dirs: Sequence[str] = (),
        plugins: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The isolated opencode.json (also written to the private dir, for a person to read)."""
        config = oc_config.build_config(
            model=agent.model,
            base_url=base_url,
            api_key_ref=f"{{file:{token_file}}}",
            small_model=agent.small_model,
            permissions=agent.permissions,
            agent=agent.agent,
            disable_tools=agent.disable_tools,
            user_config=agent.opencode_config,
            instructions=instructions,
            readable_dirs=readable_dirs,
            mcp=agent.mcp,
            known=oc_config.known_models(pricing, agent.model, agent.small_model),
            plugins=plugins,
            generation=self.generation,
        )
        (self.private / "opencode.json").write_text(json.dumps(config, indent=2) + "\n")
        return config

    def environment(
        self, environ: Mapping[str, str], passed: Mapping[str, str], config: Mapping[str, Any], workdir: Path
    ) -> dict[str, str]:
        """OpenCode's environment: an allowlist of `environ` (see opencode/config.py), the variables
        `passed` on purpose, its private dirs, the config as content."""
        env = oc_config.build_env(
            environ, private_dir=self.private, data_dir=self.data_home, config=config, passed=passed
        )
        env["PWD"] = str(workdir)  # OpenCode takes its project directory from $PWD, not the real cwd
        return env

    def confine(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        sandbox: SandboxConfig,
        secrets: tuple[Path, ...],
        *,
        workdir: Path,
        port: int,
        socket_path: Path | None,
        new_session: bool = True,
        git: GitControl | None = None,
    ) -> tuple[list[str], dict[str, str], int]:
        """`argv` and `env` as bubblewrap runs them (opencode/sandbox.py), and the descriptor of
        the seccomp filter, which the child must inherit (the caller closes it after the start):
        the sandbox sees the workdir and this workspace, and reaches the endpoint through
        `socket_path`. The gateway's files (`secrets`: settings and key files, the data dir, the
        ledger) are hidden wherever they are."""
        fd = filter_fd()
        confined = sandbox.sandbox(secrets).wrap(
            argv,
            workdir=workdir,
            private_dir=self.private,
            data_home=self.data_home,
            port=port,
            socket_path=socket_path,
            seccomp_fd=fd,
            new_session=new_session,
            git=git,
            sealed=[self.plugin] if self.plugin.exists() else [],
        )
        return confined, {**env, "TMPDIR": "/tmp"}, fd  # the sandbox's own, empty /tmp
