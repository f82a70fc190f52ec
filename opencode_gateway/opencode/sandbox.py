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
import os
import shlex
import shutil
import stat
import subprocess
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SettingsError
from .gitguard import GitControl
from .seccomp import filter_fd

__all__ = [
    "EMPTY_DIRS",
    "SANDBOX_KINDS",
    "SANDBOX_NETWORKS",
    "SYSTEM_DIRS",
    "Sandbox",
    "SandboxConfig",
    "probe",
    "resolve_sandbox",
]

SANDBOX_KINDS = ("auto", "bwrap", "none")
SANDBOX_NETWORKS = ("endpoint", "host")
INSTALL_HINT = "install it with `apt-get install bubblewrap socat` (Debian packages bubblewrap and socat)"


@functools.cache
@dataclass(frozen=True)
class SandboxConfig:
    """How a user asked runs to be confined (config/settings.py composes it from the settings)."""

    kind: str = "auto"  # "auto" (bwrap when it works here), "bwrap" or "none"
    network: str = "endpoint"  # "endpoint": only the run's endpoint is reachable; "host"
    allow_write: tuple[str, ...] = ()  # paths the sandboxed run may write besides its workdir
    allow_read: tuple[str, ...] = ()  # paths hidden by the sandbox (the real HOME, /tmp) to show

    def check(self) -> None:
        """Raise SettingsError naming what is wrong and how to fix it."""
        if self.kind not in SANDBOX_KINDS:
            raise SettingsError(f"sandbox {self.kind!r} is not known: use {', '.join(SANDBOX_KINDS)}")
        if self.network not in SANDBOX_NETWORKS:
            raise SettingsError(f"sandbox_network {self.network!r} is not known: use {', '.join(SANDBOX_NETWORKS)}")
        for path in (*self.allow_write, *self.allow_read):
            if not Path(path).is_absolute() or not Path(path).exists():
                raise SettingsError(f"sandbox path {path!r} must be an absolute path that exists")

    def check_ledger(self, ledger: Path | None, *, workdir: Path, data_dir: Path, confinement: str) -> None:
        """Refuse a SQLite ledger whose folder the run would see. While it writes, SQLite keeps
        live pages in files it makes beside the ledger (-wal, -shm, -journal), after any mount
        made at the start could hide them: an agent that sees them reads other runs' tickets,
        and one that truncates -shm kills the gateway (SIGBUS) with the run's rows. A sandbox
        hides the data dir whole; unconfined, the workdir is the one folder refused (the agent
        can reach the rest of the user's files anyway: docs/isolation.md)."""
        if ledger is None:
            return
        folder = ledger.resolve().parent
        if confinement == "bwrap":
            if _within(folder, [data_dir.resolve()]):
                return
            shown = [workdir, *map(Path, (*SYSTEM_DIRS, *self.allow_write, *self.allow_read))]
        else:
            shown = [workdir]
        seen = [path.resolve() for path in shown if _within(folder, [path.resolve()])]
        if seen:
            raise SettingsError(
                f"the ledger {ledger} is in {seen[0]}, which this run's agent can see: SQLite keeps "
                "live rows in files beside it (-wal, -shm, -journal) that the agent could read or "
                "truncate; put the ledger elsewhere (--ledger PATH outside the workdir, the data dir, "
                "or a team ledger postgresql://...)"
            )

    def sandbox(self, secrets: tuple[Path, ...]) -> Sandbox:
        """The confinement of one run, hiding `secrets` (the gateway's files) wherever they are."""
        return Sandbox(self.network, tuple(map(Path, self.allow_write)), tuple(map(Path, self.allow_read)), secrets)


def probe() -> str | None:
    """Why bubblewrap cannot confine a run on this machine, or None when it can (asked once per
    process: a namespace the kernel or a container refuses fails here, not mid-run). A sandbox
    that would keep a capability (or run without the seccomp filter) cannot confine a run."""
    for tool in ("bwrap", "socat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        fd = filter_fd()
    except OSError as exc:
        return f"the seccomp filter cannot be built here ({exc})"
    try:
        result = subprocess.run(
            [
                "bwrap",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--size",  # the sandbox's own /tmp is sized (bubblewrap 0.7 and later)
                "1048576",
                "--tmpfs",
                "/tmp",
                "--unshare-pid",
                "--unshare-net",
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--seccomp",
                str(fd),
                "cat",
                "/proc/self/status",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            pass_fds=(fd,),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run ({exc})"
    finally:
        os.close(fd)
    if result.returncode != 0:
        return f"bwrap cannot create namespaces here: {result.stderr.strip().splitlines()[-1:] or ['(no message)']}"
    status = dict(line.split(":\t", 1) for line in result.stdout.splitlines() if ":\t" in line)
    if status.get("CapEff", "").strip("0\n ") or status.get("Seccomp", "").strip() != "2":
        return (
            f"bwrap leaves the sandbox capabilities (CapEff {status.get('CapEff', '?').strip()}) or no seccomp filter"
        )
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


# The host's folders a sandbox shows, read-only: the system's programs, libraries and settings.
# Nothing else of the host is there (an allowlist, not a list of what to hide): no HOME, /root,
# /tmp, /var, /srv, /mnt, /media, no other user's files, and wherever the gateway keeps a key, its
# settings, its ledger or its data dir, unless the run shows a folder on purpose (its workdir, a
# --sandbox-allow-read/-write path), and even then those files are hidden in it (`secrets`).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Folders of their own the sandbox gets empty (programs expect to write temp files there), each a
# tmpfs of at most this many bytes: what they hold is the machine's memory, and an agent could
# otherwise fill half of it (a tmpfs's default). A build that needs more writes in its workdir.
EMPTY_DIRS: Mapping[str, int] = types.MappingProxyType(
    {"/tmp": 1 << 30, "/var/tmp": 256 << 20, "/run": 16 << 20, "/dev/shm": 256 << 20}
)


def _visible_root_only(top: str) -> list[Path]:
    """Entries under `top` that only their owner (root) may read: as root, the agent keeps no
    capability but still owns them (/etc/shadow, /etc/ssl/private, ...), so they are hidden
    when the gateway runs as root."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            closed = not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH)
            if closed:
                found.append(Path(path))
                if name in dirs:
                    dirs.remove(name)
    return found


@functools.cache
def root_only_files() -> tuple[Path, ...]:
    """What `_visible_root_only` finds in /etc (read once per process: ~1,000 entries)."""
    return tuple(_visible_root_only("/etc")) if os.geteuid() == 0 else ()


def _within(path: Path, folders: Iterable[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


def _hide_whole(path: Path) -> list[str]:
    """A file: an unopenable node in its place; a folder: an empty read-only one."""
    return ["--tmpfs", str(path), "--remount-ro", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]


def _hiding(secret: Path, keep: Mapping[Path, str], shown: Sequence[Path]) -> list[str]:
    """bwrap options (after every bind) that hide what the `shown` folders show of `secret`, but
    the paths in `keep` below it (the folder of OpenCode's binary inside the data dir, the session
    store a run continues), which are bound again, with their option, over the emptied folder:
    nothing else of it is even listed."""
    if not secret.exists() or secret.is_symlink() or secret in keep:
        return []
    if not _within(secret, shown):  # not shown itself: only what a folder shown below it shows
        return [
            option
            for folder in shown
            if secret in folder.parents and folder not in keep
            for option in _hide_whole(folder)
        ]
    below = [path for path in keep if secret in path.parents]
    if not below:
        return _hide_whole(secret)
    options = ["--tmpfs", str(secret)]
    for path in below:
        options += [keep[path], str(path), str(path)]
    return [*options, "--remount-ro", str(secret)]


def _confined_system(seccomp_fd: int, *, new_session: bool, own_network: bool) -> list[str]:
    """bwrap and what every sandbox has: no capability, its own namespaces, the seccomp filter, the
    host's system folders read-only (root-only files in them hidden), its own /dev, /proc and
    empty folders."""
    # No capability inside, whoever runs it (as root, bwrap would keep them all otherwise);
    # bwrap also sets no_new_privs, so no setuid program gains any.
    command = ["bwrap", "--die-with-parent", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    command += ["--unshare-cgroup-try", "--seccomp", str(seccomp_fd)]
    if new_session:
        command.append("--new-session")
    if own_network:
        command.append("--unshare-net")
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            command += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            command += ["--ro-bind", folder, folder]
    for path in root_only_files():
        command += _hide_whole(path)
    # /dev is bwrap's own tmpfs, unsized (half the machine's memory): read-only, its devices still
    # work (they are binds of the host's), and /dev/shm, sized below, is where a program writes.
    command += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc"]
    for folder, size in EMPTY_DIRS.items():
        command += ["--size", str(size), "--tmpfs", folder]
    return command


@dataclass(frozen=True)
class Sandbox:
    """How one run is confined. `writable` and `readable` are the paths the run may use besides
    what every run has: the workdir, the private dir, the session store, the binary. `secrets` are
    files and folders of the gateway's (keys, settings, ledger, data dir) hidden wherever a shown
    folder would show them."""

    network: str = "endpoint"
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    secrets: tuple[Path, ...] = ()

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        private_dir: Path,
        data_home: Path,
        port: int,
        socket_path: Path | None,
        seccomp_fd: int,
        new_session: bool = True,
        git: GitControl | None = None,
        sealed: Sequence[Path] = (),
    ) -> list[str]:
        """`argv` (an `opencode run`) as bwrap runs it. `socket_path` is where the endpoint listens
        for the sandbox (network "endpoint"); `port`, where OpenCode expects it. `seccomp_fd` holds
        the filter (seccomp.py), open in the child. `new_session`: no controlling terminal inside
        (a headless run; the TUI keeps its terminal, and the filter denies TIOCSTI there). `git`:
        the workdir's git dir as it was before the run (taken now if not given). `sealed`: files in
        the private dir bound read-only over themselves (the approval plugin)."""
        binary = Path(argv[0])
        command = _confined_system(seccomp_fd, new_session=new_session, own_network=self.network == "endpoint")
        readable = (*self.readable, binary.parent, binary.resolve().parent)
        writable = (*self.writable, private_dir, data_home, workdir, *([socket_path] if socket_path else []))
        for path in readable:
            command += ["--ro-bind", str(path), str(path)]
        for path in writable:
            command += ["--bind", str(path), str(path)]
        for path in sealed:  # files inside a writable folder that nothing inside may change
            command += ["--ro-bind", str(path), str(path)]
        command += (git or GitControl.take(workdir)).sandbox_options()
        shown_folders = [*map(Path, SYSTEM_DIRS), *readable, *writable]
        keep = {
            **{path: "--ro-bind" for path in readable[-2:]},  # what OpenCode itself needs
            **{path: "--bind" for path in writable[len(self.writable) :]},
        }
        for secret in self.secrets:
            if not any(folder in secret.parents for folder in self.secrets):  # hidden with its folder
                command += _hiding(secret, keep, shown_folders)
        # The repository's OpenCode folder (or the folder of the workdir it links to): project
        # config is off, but OpenCode still imports its plugins' code, and an agent (this run's or
        # an earlier one's) can write there.
        project = (workdir / ".opencode").resolve()
        if project.is_dir() and workdir in project.parents:
            command += _hide_whole(project)
        command += ["--chdir", str(workdir), "--"]
        if self.network != "endpoint":
            return [*command, *argv]
        assert socket_path is not None
        bridge = (
            f"socat TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:{shlex.quote(str(socket_path))}"
            f" & for _ in $(seq 250); do (: </dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.02;"
            ' done; exec "$@"'
        )
        return [*command, "bash", "-c", bridge, "sandbox", *argv]
