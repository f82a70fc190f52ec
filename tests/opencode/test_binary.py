"""Which opencode runs: the lookup order, and the version check that refuses anything else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opencode_gateway.errors import OpenCodeNotFound, SettingsError
from opencode_gateway.opencode.binary import find_opencode, install_opencode, pinned_binary
from opencode_gateway.opencode.generation import GENERATIONS, generation_of


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENCODE_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))


def fake(path: Path, version: str) -> Path:
    """A program that answers --version like OpenCode does, and counts how often it was asked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho asked >> {path}.calls\necho {version}\n")
    path.chmod(0o755)
    return path


def calls(path: Path) -> int:
    return len(Path(f"{path}.calls").read_text().splitlines()) if Path(f"{path}.calls").exists() else 0


def supported(version: str) -> bool:
    return generation_of(version) is not None


def test_supported_versions_are_1_18_and_2_1() -> None:
    assert supported("1.18.33") and supported("1.18.0") and supported("1.18.40-beta.1")
    assert supported("2.1.2") and supported("opencode v2.1.2")
    assert not supported("1.17.9") and not supported("1.19.0") and not supported("2.2.0")
    assert not supported("--version") and not supported("")


def test_the_lookup_order_is_flag_then_env_then_pinned_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    on_path = fake(tmp_path / "path" / "opencode", "1.18.1")
    assert find_opencode(None, data).path == str(on_path)
    second = fake(pinned_binary(data, GENERATIONS[1]), "opencode v2.1.2")
    assert find_opencode(None, data).path == str(second)
    pinned = fake(pinned_binary(data), "1.18.33")
    assert find_opencode(None, data).path == str(pinned)  # of the pinned installs, the default generation's
    from_env = fake(tmp_path / "env" / "opencode", "1.18.2")
    monkeypatch.setenv("OPENCODE_BIN", str(from_env))
    assert find_opencode(None, data).path == str(from_env)
    flag = fake(tmp_path / "flag" / "opencode", "1.18.3")
    assert find_opencode(str(flag), data).path == str(flag)


def test_a_program_that_is_not_opencode_is_refused_naming_binary_version_range_and_fix(tmp_path: Path) -> None:
    with pytest.raises(OpenCodeNotFound) as caught:
        find_opencode("/bin/echo", tmp_path)
    message = str(caught.value)
    assert (
        message.startswith("/bin/echo is not a supported OpenCode: `--version` gave ") and "1.18.x or 2.1.x" in message
    )
    assert "opencode-gateway install-opencode" in message
    assert isinstance(caught.value, SettingsError)  # found before OpenCode starts: exit 2


def test_an_unsupported_version_is_refused(tmp_path: Path) -> None:
    old = fake(tmp_path / "old" / "opencode", "1.17.4")
    with pytest.raises(OpenCodeNotFound, match=r"gave version '1.17.4', opencode-gateway supports 1.18.x or 2.1.x"):
        find_opencode(str(old), tmp_path)


def test_nothing_found_names_the_install_command(tmp_path: Path) -> None:
    with pytest.raises(OpenCodeNotFound, match="no opencode found .*opencode-gateway install-opencode"):
        find_opencode(None, tmp_path / "data")


def test_the_version_is_asked_once_per_binary_until_the_file_changes(tmp_path: Path) -> None:
    binary = fake(tmp_path / "oc" / "opencode", "1.18.33")
    for _ in range(3):
        find_opencode(str(binary), tmp_path)
    assert calls(binary) == 1
    stat = binary.stat()
    os.utime(binary, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # replaced by an upgrade
    find_opencode(str(binary), tmp_path)
    assert calls(binary) == 2


def test_install_refuses_a_version_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(OpenCodeNotFound, match="'latest' is not an OpenCode version this installs: 1.18.x"):
        install_opencode(tmp_path, "latest")
    with pytest.raises(OpenCodeNotFound, match=r"'1.17.0' is not .*2.1.x \(e.g. 2.1.2\)"):
        install_opencode(tmp_path, "1.17.0")


def test_each_generation_is_installed_in_a_folder_of_its_own(tmp_path: Path) -> None:
    first, second = (
        fake(pinned_binary(tmp_path), "1.18.33"),
        fake(pinned_binary(tmp_path, GENERATIONS[1]), "opencode v2.1.2"),
    )
    assert first != second and second.parts[-4] == "opencode2"
    assert install_opencode(tmp_path, "1.18.33") == first  # both there: npm (not on this PATH) not needed
    assert install_opencode(tmp_path, "2.1.2") == second


def test_a_2x_binary_is_found_and_told_apart_by_its_version(tmp_path: Path) -> None:
    """OpenCode 2's installer replaces 1.x: whoever has it runs it."""
    second = fake(tmp_path / "v2" / "opencode", "opencode v2.1.2")
    found = find_opencode(str(second), tmp_path)
    assert (found.path, found.version, found.generation.number) == (str(second), "2.1.2", 2)
    assert not found.generation.tool_hook  # its approvals are held at the endpoint
    find_opencode(str(second), tmp_path)
    assert calls(second) == 1  # cached like any supported version


def test_install_is_a_no_op_when_the_pinned_version_is_there(tmp_path: Path) -> None:
    binary = fake(pinned_binary(tmp_path), "1.18.33")
    assert install_opencode(tmp_path, "1.18.33") == binary  # npm is not on this PATH: it was not needed
