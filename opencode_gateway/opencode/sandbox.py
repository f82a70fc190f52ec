"""Confinement for OpenCode and everything it starts: bubblewrap.

The agent is untrusted. Unconfined, a bash command of its reads the gateway's environment and argv
from /proc, the user's files, and reaches any host. Under bwrap it gets its own pid namespace and
/proc (no host process is visible; `--die-with-parent`: nothing outlives the gateway), the host
filesystem read-only with the real HOME and /tmp replaced by empty ones, and writes only to the
workdir, OpenCode's private dirs and what the user allows. With `network="endpoint"` it also gets a
network namespace of its own, where the only thing reachable is the run's endpoint: the gateway
serves it on a unix socket in the private dir, and socat inside the sandbox listens on the
endpoint's loopback port and connects there (so OpenCode's config is the same as unconfined).
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SettingsError

__all__ = ["SANDBOX_KINDS", "SANDBOX_NETWORKS", "Sandbox", "probe", "resolve_sandbox"]

SANDBOX_KINDS = ("auto", "bwrap", "none")
SANDBOX_NETWORKS = ("endpoint", "host")
INSTALL_HINT = "install it with `apt-get install bubblewrap socat` (Debian packages bubblewrap and socat)"


@functools.cache
def probe() -> str | None:
    """Why bubblewrap cannot confine a run on this machine, or None when it can (asked once per
    process: a namespace the kernel or a container refuses fails here, not mid-run)."""
    for tool in ("bwrap", "socat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        result = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                 "--unshare-pid", "--unshare-net", "--die-with-parent", "true"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run ({exc})"
    if result.returncode != 0:
        return f"bwrap cannot create namespaces here: {result.stderr.strip().splitlines()[-1:] or ['(no message)']}"
    return None


def resolve_sandbox(kind: str, warnings: list[str]) -> str:
    """The sandbox a run gets: "bwrap" or "none". `auto` falls back to none with a warning saying
    how to get confinement; `bwrap` that cannot work is a SettingsError (exit 2)."""
    if kind not in SANDBOX_KINDS:
        raise SettingsError(f"sandbox {kind!r} is not known: use one of {', '.join(SANDBOX_KINDS)}")
    if kind == "none":
        return "none"
    problem = probe()
    if problem is None:
        return "bwrap"
    if kind == "bwrap":
        raise SettingsError(f"--sandbox bwrap cannot confine this run: {problem}; {INSTALL_HINT}")
    warnings.append(f"the run is not sandboxed: {problem}; {INSTALL_HINT} (or pass --sandbox none to say so)")
    return "none"


@dataclass(frozen=True)
class Sandbox:
    """How one run is confined. `writable` and `readable` are the paths the run may use besides
    what every run has: the workdir, the private dir, the session store, the binary."""

    network: str = "endpoint"
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()

    def wrap(self, argv: Sequence[str], *, workdir: Path, private_dir: Path, data_home: Path, port: int,
             socket_path: Path | None, hidden: Sequence[Path] = (), shown: Sequence[Path] = ()) -> list[str]:
        """`argv` (an `opencode run`) as bwrap runs it. `socket_path` is where the endpoint listens
        for the sandbox (network "endpoint"); `port`, where OpenCode expects it. `hidden` folders
        inside the bound ones are emptied, and then `shown` files in them shown read-only (the
        launcher shows its own token, not the other launches')."""
        home = Path.home()
        binary = Path(argv[0])
        command = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                   "--unshare-cgroup-try", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                   "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", str(home)]
        if self.network == "endpoint":
            command.append("--unshare-net")
        for path in (*self.readable, binary.parent, binary.resolve().parent):
            command += ["--ro-bind", str(path), str(path)]
        for path in (*self.writable, private_dir, data_home, workdir, *([socket_path] if socket_path else [])):
            command += ["--bind", str(path), str(path)]
        for path in hidden:
            command += ["--tmpfs", str(path)]
        for path in shown:
            command += ["--ro-bind", str(path), str(path)]
        command += ["--chdir", str(workdir), "--"]
        if self.network != "endpoint":
            return [*command, *argv]
        assert socket_path is not None
        bridge = (f"socat TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:{shlex.quote(str(socket_path))}"
                  f" & for _ in $(seq 250); do (: </dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.02;"
                  ' done; exec "$@"')
        return [*command, "bash", "-c", bridge, "sandbox", *argv]
