"""OpenCode wired to a running `opencode-gateway serve`: the TUI, or any OpenCode command.

The launched OpenCode gets the same isolation as a headless run (its config as content, project
config off, private HOME and XDG dirs, no credentials in its environment), except that its dirs
are kept under the data dir (`tui/`), so interactive sessions persist from one launch to the next.
It knows only the server's loopback URL and a token of its own, minted by the server for this
launch (the server's admin token never reaches it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from .opencode import config as oc_config
from .opencode.binary import find_opencode
from .opencode.sandbox import Sandbox, resolve_sandbox
from .serve import Launch, ServerState, mint_launch, server_socket
from .settings import Settings

__all__ = ["launch_env", "run_opencode", "shell_exports"]


def launch_env(settings: Settings, server: ServerState, *, workdir: Path,
               inherited: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of an OpenCode launched against `server`, on `settings.model`, with a token
    the server minted for this launch's attribution and budget (written to a 0600 file)."""
    settings = settings.validated()
    model = settings.model or ""
    private = settings.data_dir / "tui"
    oc_config.make_private_dirs(private)
    (private / "data").mkdir(mode=0o700, exist_ok=True)
    launch = Launch(settings.metadata, settings.tags, str(workdir), settings.budget)
    token_file = private / "launches" / launch.launch_id
    token_file.parent.mkdir(mode=0o700, exist_ok=True)
    descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(mint_launch(server, launch))
    config = oc_config.build_config(
        model=model, base_url=server.url + "/v1", api_key_ref=f"{{file:{token_file}}}",
        permissions=settings.permissions, disable_tools=settings.disable_tools, user_config=settings.opencode_config,
    )
    env = oc_config.build_env(inherited, private_dir=private, data_dir=private / "data", config=config,
                              passed=settings.passed_env())
    env["PWD"] = str(workdir)  # OpenCode takes its project directory from $PWD
    return env


def run_opencode(settings: Settings, server: ServerState, arguments: Sequence[str],
                 env: Mapping[str, str]) -> NoReturn:
    """Become OpenCode (the TUI owns the terminal; nothing of ours is left to clean up), in the
    sandbox `settings.sandbox` comes to: under bwrap it reaches the server through the server's
    unix socket, bridged to the port its config names."""
    binary = find_opencode(settings.opencode_bin, settings.data_dir)
    notes: list[str] = []
    if resolve_sandbox(settings.sandbox, notes) == "none":
        for note in notes:
            print(f"opencode-gateway: warning: {note}", file=sys.stderr)
        os.execve(binary, [binary, *arguments], dict(env))
    private = settings.data_dir / "tui"
    socket_path = server_socket(settings.data_dir) if settings.sandbox_network == "endpoint" else None
    token_ref = json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"][oc_config.PROVIDER_ID]["options"]["apiKey"]
    argv = Sandbox(settings.sandbox_network, tuple(map(Path, settings.sandbox_allow_write)),
                   tuple(map(Path, settings.sandbox_allow_read))).wrap(
        [binary, *arguments], workdir=Path(env["PWD"]), private_dir=private, data_home=private / "data",
        port=urlsplit(server.url).port or 80, socket_path=socket_path,
        hidden=[private / "launches"], shown=[Path(token_ref.removeprefix("{file:").removesuffix("}"))])
    os.execvpe(argv[0], argv, {**env, "TMPDIR": "/tmp"})


def shell_exports(env: Mapping[str, str], inherited: Mapping[str, str] = os.environ) -> str:
    """Shell lines that turn `inherited` into `env`: exports of what differs, unsets of what goes."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())
             if inherited.get(name) != value]
    lines += [f"unset {name}" for name in sorted(inherited) if name not in env]
    return "\n".join(lines) + "\n"
