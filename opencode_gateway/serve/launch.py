"""OpenCode wired to a running `opencode-gateway serve`: the TUI, or any OpenCode command.

The launched OpenCode gets the same isolation as a headless run (its config as content, project
config off, private HOME and XDG dirs, no credentials in its environment), except that its dirs
are kept under the data dir (`tui/<launch id>/`) after it exits. Each launch has its own: nothing
writable is shared between launches.
It knows only the server's loopback URL and a token of its own, minted by the server for this
launch (the server's admin token never reaches it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..accounting.budget import Budget
from ..config.attribution import check_attribution
from ..config.settings import RunSettings, Settings
from ..domain import Purpose
from ..errors import SettingsError
from ..opencode import config as oc_config
from ..opencode.binary import find_opencode
from ..opencode.generation import Generation
from ..opencode.gitguard import GitControl
from ..opencode.process import tui_argv
from ..opencode.purpose import routed_model
from ..opencode.sandbox import resolve_sandbox
from ..opencode.workspace import Workspace
from ..runs.wiring import opencode_env

__all__ = [
    "Launch",
    "ServerState",
    "launch_env",
    "mint_launch",
    "run_opencode",
    "server_socket",
    "server_token",
    "shell_exports",
]


@dataclass(frozen=True)
class Launch:
    """What one launch of OpenCode is allowed: its model (and small model), which every request of
    its token goes to whatever the request names; its attribution; and a budget that all its
    sessions spend together."""

    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tags: tuple[str, ...] = ()
    workdir: str | None = None
    budget: Budget = Budget()
    model: str = ""
    small_model: str | None = None
    launch_id: str = field(default_factory=lambda: "launch_" + uuid.uuid4().hex[:12])

    def to_request(self) -> dict[str, Any]:
        budget = {
            k: v
            for k, v in (
                ("max_cost", self.budget.max_cost),
                ("max_requests", self.budget.max_requests),
                ("max_tokens", self.budget.max_tokens),
                ("max_turns", self.budget.max_turns),
            )
            if v is not None
        }
        return {
            "metadata": dict(self.metadata),
            "tags": list(self.tags),
            "workdir": self.workdir,
            "budget": budget,
            "model": self.model,
            "small_model": self.small_model,
        }

    @classmethod
    def from_request(cls, data: Any, tag_metadata_keys: tuple[str, ...]) -> Launch:
        """A launch as a launcher asked for it, checked as the command line checks its flags."""
        if not isinstance(data, dict) or set(data) - {"metadata", "tags", "workdir", "budget", "model", "small_model"}:
            raise SettingsError("a launch is {model, small_model, metadata, tags, workdir, budget}")
        metadata, tags, workdir = data.get("metadata") or {}, data.get("tags") or [], data.get("workdir")
        if not isinstance(metadata, dict) or not isinstance(tags, list) or not isinstance(workdir, (str, type(None))):
            raise SettingsError("a launch's metadata is an object, its tags a list, its workdir a path")
        model, small_model = data.get("model"), data.get("small_model")
        if not isinstance(model, str) or not model.strip() or not isinstance(small_model, (str, type(None))):
            raise SettingsError(
                "a launch names its model (and may name a small model): every request of the launch "
                'goes to one of them, e.g. {"model": "litellm_proxy/team-a"}'
            )
        check_attribution(tags, metadata, tag_metadata_keys)
        budget = Budget.from_setting("budget", data.get("budget") or {})
        return cls(MappingProxyType(dict(metadata)), tuple(tags), workdir, budget, model, small_model or None)

    def route(self, requested: Any, purpose: Purpose, routes: Mapping[str, str]) -> str:
        """The model a request of this launch goes to (`routes`: the server's per purpose)."""
        return routed_model(requested, purpose, model=self.model, small_model=self.small_model, routes=routes)


def _paths(data_dir: Path) -> tuple[Path, Path]:
    folder = data_dir / "serve"
    return folder / "token", folder / "server.json"


def server_socket(data_dir: Path) -> Path:
    """Where the server also listens for sandboxed launches: a folder holding nothing else, so
    binding it into a sandbox shows no other file of the server's."""
    folder = data_dir / "serve-socket"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder / "endpoint.sock"


def login_url(data_dir: Path) -> str:
    """A new one-time login URL of the running server's dashboard (asked with its admin token)."""
    server = ServerState.read(data_dir)
    token = Path(server.token_file).read_text().strip()
    try:
        response = httpx.post(server.url + "/login-codes", headers={"authorization": f"Bearer {token}"}, timeout=5.0)
        return str(response.raise_for_status().json()["login_url"])
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise SettingsError(
            f"the server at {server.url} gave no login URL ({exc}): is it this data dir's server? ({data_dir})"
        ) from None


def server_token(data_dir: Path) -> Path:
    """The server's stable token file: made once (0600), the same for every start."""
    token_file, _ = _paths(data_dir)
    token_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(uuid.uuid4().hex + uuid.uuid4().hex)
    token_file.chmod(0o600)
    return token_file


@dataclass(frozen=True)
class ServerState:
    """Where a running server is, as its state file says, and the gateway it forwards
    `litellm_proxy/` models to (a URL, no secret): a launcher asks no one to repeat it."""

    url: str
    pid: int
    token_file: str
    gateway: str | None = None

    def write(self, data_dir: Path) -> None:
        _, state_file = _paths(data_dir)
        state_file.write_text(json.dumps(dataclasses.asdict(self)))

    @staticmethod
    def clear(data_dir: Path) -> None:
        """The server stopped: no launcher may find it any more."""
        _paths(data_dir)[1].unlink(missing_ok=True)

    @classmethod
    def read(cls, data_dir: Path) -> ServerState:
        """The running server's state; SettingsError says how to start one when none answers."""
        _, state_file = _paths(data_dir)
        hint = f"start one with `opencode-gateway serve` (it keeps its state in {state_file.parent})"
        try:
            data = json.loads(state_file.read_text())
            gateway = str(data["gateway"]) if data.get("gateway") else None
            state = cls(str(data["url"]), int(data["pid"]), str(data["token_file"]), gateway)
        except (OSError, ValueError, KeyError, TypeError):
            raise SettingsError(f"no opencode-gateway server is running: {hint}") from None
        try:
            healthy = httpx.get(state.url + "/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            healthy = False
        if not healthy:
            raise SettingsError(f"the opencode-gateway server at {state.url} does not answer: {hint}")
        return state


def mint_launch(server: ServerState, launch: Launch) -> str:
    """Ask the running server for `launch`'s own token (the launcher's side of `POST /launches`)."""
    admin = Path(server.token_file).read_text().strip()
    try:
        response = httpx.post(
            server.url + "/launches",
            json=launch.to_request(),
            headers={"authorization": f"Bearer {admin}"},
            timeout=10.0,
        )
    except httpx.HTTPError as exc:
        raise SettingsError(f"the opencode-gateway server at {server.url} does not answer ({exc})") from None
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}"
        raise SettingsError(f"the opencode-gateway server refused the launch: {message}")
    return str(response.json()["token"])


def _workspace(settings: Settings, launch_id: str, generation: Generation) -> Workspace:
    """A launch's own workspace, kept under the data dir (`tui/<launch id>/`): its private dirs and
    its session store are shared with no other launch, so one launch's agent can neither read
    another's conversation nor plant anything another will load."""
    private = settings.data_dir / "tui" / launch_id
    return Workspace(private, private / "data", generation)


def launch_env(settings: RunSettings, server: ServerState, *, workdir: Path) -> dict[str, str]:
    """The environment of an OpenCode launched against `server`, on `settings.model`, with a token
    the server minted for this launch's model, attribution and budget (a 0600 file)."""
    launch = Launch(
        settings.metadata,
        settings.tags,
        str(workdir),
        settings.budget_for(settings.model),
        settings.model,
        settings.small_model,
    )
    workspace = _workspace(
        settings, launch.launch_id, find_opencode(settings.opencode_bin, settings.data_dir).generation
    )
    workspace.prepare()
    return opencode_env(
        settings, workspace, endpoint_url=server.url, token=mint_launch(server, launch), workdir=workdir
    )


def run_opencode(settings: RunSettings, server: ServerState, arguments: Sequence[str], env: Mapping[str, str]) -> int:
    """Run OpenCode (the TUI shares the terminal) until it exits, in the sandbox `settings.sandbox`
    comes to: under bwrap it reaches the server through the server's unix socket, bridged to the
    port its config names, sees its own launch's workspace only, and git's control files of the
    folder are put back afterwards (opencode/gitguard.py). Unconfined, this process becomes
    OpenCode. Returns OpenCode's exit code."""
    found = find_opencode(settings.opencode_bin, settings.data_dir)
    argv = tui_argv(found, arguments)
    notes: list[str] = []
    confinement = resolve_sandbox(settings.sandbox, notes)
    settings.sandbox_config.check_ledger(
        settings.ledger_location.path, workdir=Path(env["PWD"]), data_dir=settings.data_dir, confinement=confinement
    )
    if confinement == "none":
        for note in notes:
            print(f"opencode-gateway: warning: {note}", file=sys.stderr)
        os.execve(argv[0], argv, dict(env))
    token_ref = json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"][oc_config.PROVIDER_ID]["options"]["apiKey"]
    private = Path(token_ref.removeprefix("{file:").removesuffix("}")).parent  # the launch's workspace
    workdir = Path(env["PWD"])
    git = GitControl.take(workdir)
    argv, confined_env, seccomp = Workspace(private, private / "data", found.generation).confine(
        argv,
        env,
        settings.sandbox_config,
        settings.gateway_files,
        workdir=workdir,
        port=urlsplit(server.url).port or 80,
        socket_path=server_socket(settings.data_dir) if settings.sandbox_network == "endpoint" else None,
        new_session=False,
        git=git,
    )
    process = subprocess.Popen(argv, env=confined_env, pass_fds=(seccomp,))
    os.close(seccomp)
    try:
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:  # the terminal's Ctrl-C reached OpenCode too: it ends, and then we do
                continue
    finally:
        for warning in git.restore(private.name):
            print(f"opencode-gateway: warning: {warning}", file=sys.stderr)


def shell_exports(env: Mapping[str, str], inherited: Mapping[str, str] = os.environ) -> str:
    """Shell lines that turn `inherited` into `env`: exports of what differs, unsets of what goes."""
    lines = [
        f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items()) if inherited.get(name) != value
    ]
    lines += [f"unset {name}" for name in sorted(inherited) if name not in env]
    return "\n".join(lines) + "\n"
