"""What a sandbox is built from: an allowlist of the host's system folders, the run's own paths,
and nothing of the gateway's wherever it lives (the attacks themselves are in tests/e2e/security)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opencode_gateway.errors import SettingsError
from opencode_gateway.opencode.sandbox import EMPTY_DIRS, SYSTEM_DIRS, Sandbox, SandboxConfig


def _mounts(argv: list[str]) -> list[tuple[str, ...]]:
    """The mount options of a bwrap command line, in order: (option, *its paths)."""
    arity = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--tmpfs": 1, "--dev": 1, "--proc": 1}
    found, index = [], 0
    while index < len(argv) and argv[index] != "--":
        width = arity.get(argv[index])
        if width is None:
            index += 1
            continue
        found.append(tuple(argv[index : index + width + 1]))
        index += width + 1
    return found


def _wrap(tmp_path: Path, sandbox: Sandbox, binary: Path | None = None) -> list[str]:
    binary = binary or tmp_path / "bin" / "opencode"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.touch()
    for name in ("private", "data", "work"):
        (tmp_path / name).mkdir(exist_ok=True)
    return sandbox.wrap(
        [str(binary), "run"],
        workdir=tmp_path / "work",
        private_dir=tmp_path / "private",
        data_home=tmp_path / "data",
        port=4141,
        socket_path=tmp_path / "private" / "s.sock",
        seccomp_fd=7,
    )


def test_the_host_is_shown_from_an_allowlist_of_system_folders_never_whole(tmp_path: Path) -> None:
    mounts = _mounts(_wrap(tmp_path, Sandbox()))
    sources = {m[1] for m in mounts if m[0] in ("--ro-bind", "--bind")}
    assert "/" not in sources and str(Path.home()) not in sources and "/var" not in sources
    assert {folder for folder in SYSTEM_DIRS if os.path.isdir(folder) and not os.path.islink(folder)} <= sources
    assert all(("--tmpfs", folder) in mounts for folder in EMPTY_DIRS)
    assert ("--bind", str(tmp_path / "work"), str(tmp_path / "work")) in mounts


def test_the_sandboxs_own_empty_folders_are_sized_tmpfs_mounts(tmp_path: Path) -> None:
    """What they hold is the machine's memory: a tmpfs of bwrap's default could take half of it."""
    argv = _wrap(tmp_path, Sandbox())
    sized = {argv[i + 3]: int(argv[i + 1]) for i in range(len(argv) - 3) if argv[i] == "--size"}
    assert sized == dict(EMPTY_DIRS) and all(argv[argv.index(f) - 1] == "--tmpfs" for f in EMPTY_DIRS)
    assert max(EMPTY_DIRS.values()) <= 1 << 30


def test_the_gateways_files_are_hidden_inside_a_shown_folder_but_what_opencode_needs(tmp_path: Path) -> None:
    """The data dir holds OpenCode's binary and the session a run continues: the folder is
    emptied and those two bound again over it (its ledger, tokens and other sessions are not even
    listed); a key file in the workdir is an unopenable node inside."""
    data_dir = tmp_path / "work" / "data-dir"  # shown: it lies in the workdir
    binary = data_dir / "opencode" / "bin" / "opencode"
    for folder in ("serve", "sessions/ses_other", "opencode/bin"):
        (data_dir / folder).mkdir(parents=True)
    (data_dir / "ledger.db").write_text("rows")
    key = tmp_path / "work" / "key.txt"
    key.write_text("sk-secret")
    mounts = _mounts(_wrap(tmp_path, Sandbox(secrets=(data_dir, key)), binary=binary))
    assert ("--ro-bind", "/dev/null", str(key)) in mounts
    emptied = mounts.index(("--tmpfs", str(data_dir)))
    assert mounts.index(("--bind", str(tmp_path / "work"), str(tmp_path / "work"))) < emptied  # after the workdir
    assert ("--ro-bind", str(binary.parent), str(binary.parent)) in mounts[emptied:]  # bound again over it
    assert not any(str(data_dir / name) in mount for mount in mounts for name in ("serve", "sessions", "ledger.db"))


def test_a_secret_nothing_shows_adds_no_mount(tmp_path: Path) -> None:
    hidden_away = tmp_path / "elsewhere" / "key.txt"
    hidden_away.parent.mkdir()
    hidden_away.write_text("sk-secret")
    assert str(hidden_away) not in _wrap(tmp_path, Sandbox(secrets=(hidden_away,)))


def test_the_config_becomes_a_sandbox_hiding_the_gateways_files(tmp_path: Path) -> None:
    config = SandboxConfig("bwrap", "host", allow_read=(str(tmp_path),))
    config.check()
    sandbox = config.sandbox((tmp_path / "ledger.db",))
    assert (sandbox.network, sandbox.readable, sandbox.secrets) == ("host", (tmp_path,), (tmp_path / "ledger.db",))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SandboxConfig("docker"), "sandbox 'docker' is not known: use auto, bwrap, none"),
        (SandboxConfig(network="lan"), "sandbox_network 'lan' is not known: use endpoint, host"),
        (SandboxConfig(allow_write=("relative/dir",)), "must be an absolute path that exists"),
        (SandboxConfig(allow_read=("/no/such/dir",)), "must be an absolute path that exists"),
    ],
)
def test_a_bad_sandbox_config_is_refused_naming_the_fix(config: SandboxConfig, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        config.check()


@pytest.mark.parametrize("confinement", ["bwrap", "none"])
def test_a_sqlite_ledger_the_run_would_see_is_refused(confinement: str, tmp_path: Path) -> None:
    """SQLite's live files (-wal, -shm, -journal) appear beside the ledger as it runs: no mount
    made at the start hides them, so the ledger's folder must be out of the agent's sight."""
    workdir, shared, data_dir = tmp_path / "checkout", tmp_path / "shared", tmp_path / "checkout" / ".gateway"
    for folder in (workdir, shared, data_dir):
        folder.mkdir(exist_ok=True)
    config = SandboxConfig(confinement, allow_read=(str(shared),))

    def check(ledger: Path) -> None:
        config.check_ledger(ledger, workdir=workdir, data_dir=data_dir, confinement=confinement)

    for ledger in (workdir / "ledger.db", workdir / "sub" / "ledger.db"):
        with pytest.raises(SettingsError, match=f"is in {workdir}, which this run's agent can see.*-wal, -shm"):
            check(ledger)
    if confinement == "bwrap":  # what the sandbox shows besides the workdir counts too
        with pytest.raises(SettingsError, match=f"is in {shared}, which"):
            check(shared / "ledger.db")
        check(data_dir / "ledger.db")  # the data dir is hidden whole, wherever it is
    else:  # unconfined, the agent can reach the user's files anyway; only the workdir is refused
        check(shared / "ledger.db")
        with pytest.raises(SettingsError, match="which this run's agent can see"):
            check(data_dir / "ledger.db")
    check(tmp_path / "elsewhere" / "ledger.db")
    config.check_ledger(None, workdir=workdir, data_dir=data_dir, confinement=confinement)  # a team ledger
