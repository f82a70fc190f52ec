"""litellm is imported once, lazily, and a caller never gets it half-imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A stand-in litellm that takes a while to import, as the real one does (~2.4 s): a run imports it
# in a thread while OpenCode starts, and the first request may ask for it meanwhile.
SLOW_LITELLM = """
import time
time.sleep(1.0)
suppress_debug_info = False
def acompletion():
    return "called"
"""

RACE = """
import sys, threading, time
from opencode_gateway import _litellm
warm = threading.Thread(target=_litellm.load)
warm.start()
while "litellm" not in sys.modules:  # the warm-up's import is under way
    time.sleep(0.001)
module = _litellm.load()
print(module.acompletion(), module.suppress_debug_info)
warm.join()
"""


def test_a_load_during_the_warm_up_import_waits_for_it(tmp_path: Path) -> None:
    (tmp_path / "litellm.py").write_text(SLOW_LITELLM)
    result = subprocess.run(
        [sys.executable, "-c", RACE],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parent.parent}", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "called"


def test_a_litellm_the_host_imported_first_keeps_its_settings(tmp_path: Path) -> None:
    (tmp_path / "litellm.py").write_text("suppress_debug_info = False\n")
    host = (
        "import litellm; from opencode_gateway import _litellm; "
        "assert _litellm.load() is litellm; print(litellm.suppress_debug_info)"
    )
    result = subprocess.run(
        [sys.executable, "-c", host],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parent.parent}", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
