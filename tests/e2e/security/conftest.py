"""The attacks' settings (a run's, with the tests' Python readable in the sandbox), and a plain
user of this machine to attack as."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencode_gateway.config.settings import Settings


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The attacker's script runs on the tests' Python, which lives in a HOME the sandbox hides.
    return settings.replace(timeout=180, sandbox_allow_read=(sys.base_prefix,))


PLAIN_USER = "ocg-plain-user"


@pytest.fixture
def plain_user(opencode_bin: str) -> Iterator[tuple[str, Path, list[str]]]:
    """An unprivileged user of this machine (made once), a folder of its own under /var/tmp with a
    link to the OpenCode binary, and the command line that runs `opencode-gateway` as that user
    (Debian's Python 3.11 on this checkout and its virtualenv's packages). Skipped where the
    test cannot make one: not root, or a checkout the user cannot read."""
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root (to make the user) and Debian's python3")
    if subprocess.run(["id", PLAIN_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", PLAIN_USER], check=True, timeout=60)
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    checkout = Path(__file__).resolve().parents[3]
    python = "/usr/bin/python3"
    path = f"{site}:{checkout}"
    probe = subprocess.run(
        [
            "runuser",
            "-u",
            PLAIN_USER,
            "--",
            "env",
            f"PYTHONPATH={path}",
            python,
            "-c",
            "import opencode_gateway.runs.runner",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"the plain user cannot run this checkout: {probe.stderr.strip()[-200:]}")
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ocg-plain-") as folder:
        home = Path(folder)
        binary = home / "bin" / "opencode"
        binary.parent.mkdir()
        os.link(Path(opencode_bin).resolve(), binary)  # a hard link: no 185 MB copy
        subprocess.run(["chown", "-R", f"{PLAIN_USER}:", str(home)], check=True, timeout=60)
        home.chmod(0o700)
        command = [
            "runuser",
            "-u",
            PLAIN_USER,
            "--",
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
            f"HOME={home}",
            f"PYTHONPATH={path}",
            "LITELLM_LOCAL_MODEL_COST_MAP=True",
            python,
            "-m",
            "opencode_gateway",
        ]
        yield PLAIN_USER, home, command + ["run", "--opencode-bin", str(binary)]
