"""The install a user makes without a clone: `python -m build` makes an sdist and a wheel (the wheel
from the sdist) that carry every file of the package, the dashboard's assets included, and the
wheel installed with pip into a fresh venv is a working CLI (its dependencies from the index)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.builders import spend_ledger

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def package_files() -> set[str]:
    """Every file of the package in this checkout that git knows (caches and builds are not)."""
    listed = subprocess.run(
        ["git", "ls-files", "opencode_gateway"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return set(listed)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deprecated" not in done.stdout + done.stderr  # nothing a future setuptools refuses
    return out


def test_the_sdist_and_the_wheel_carry_every_file_of_the_package(built: Path) -> None:
    [wheel] = built.glob("*.whl")
    [sdist] = built.glob("*.tar.gz")
    expected = package_files()
    assert {
        "opencode_gateway/dashboard/assets/page.js",
        "opencode_gateway/dashboard/vendor/uPlot.iife.min.js",
    } <= expected
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert expected <= in_wheel, sorted(expected - in_wheel)
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert expected <= in_sdist and {"pyproject.toml", "README.md"} <= in_sdist, sorted(expected - in_sdist)


@pytest.mark.only_generation(1, "the package installs the same whatever OpenCode; its doctor needs one, once")
def test_the_wheel_installed_in_a_fresh_venv_is_a_working_cli(built: Path, tmp_path: Path, opencode_bin: str) -> None:
    [wheel] = built.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", f"{wheel}[postgres]"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    cli = str(venv / "bin" / "opencode-gateway")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENCODE_GATEWAY_HOME": str(tmp_path / "home")}
    doctor = subprocess.run(
        [cli, "doctor", "--opencode-bin", opencode_bin, "--json"], capture_output=True, text=True, timeout=120, env=env
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    page, ledger = tmp_path / "spend.html", spend_ledger(tmp_path / "ledger.db")
    report = subprocess.run(
        [cli, "report", "--ledger", str(ledger), "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert report.returncode == 0 and "uPlot" in page.read_text(), report.stderr  # the assets came along
