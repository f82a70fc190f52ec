"""The `otel` settings, checked before anything starts; without the `otel` extra, traces asked
for are exit 2 naming the install. (The traces themselves, read back from a real Phoenix, are
in tests/e2e/test_traces.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from opencode_gateway.config.settings import Settings
from opencode_gateway.errors import SettingsError
from opencode_gateway.observability.traces import INSTALL, OtelConfig


def test_traces_are_asked_for_by_the_setting_or_the_standard_variables() -> None:
    assert OtelConfig.wanted(None, {}) is None
    assert OtelConfig.wanted(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == OtelConfig()
    config = OtelConfig.wanted(
        {"endpoint": "http://127.0.0.1:4318/v1/traces", "headers": {"Authorization": "Basic x"}}, {}
    )
    assert config is not None and dict(config.headers) == {"Authorization": "Basic x"} and not config.content


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"endpoint": "collector:4318"}, "is not a URL"),
        ({"protocol": "grpc"}, "is not supported: use http/protobuf"),
        ({"headres": {}}, "otel.headres: no such setting"),
        ({"headers": {"Authorization": 1}}, "must map header names to text"),
        ({"content": "yes"}, "must be true or false"),
    ],
)
def test_a_bad_otel_setting_is_refused_naming_the_fix(setting: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings(model="openai/gpt-4o-mini", otel=setting).validated()


def test_a_collectors_key_is_a_secret_of_the_run() -> None:
    settings = Settings(model="openai/gpt-4o-mini", otel={"headers": {"Authorization": "Basic c2stbGYtc2VjcmV0"}})
    assert "Basic c2stbGYtc2VjcmV0" in settings.validated().secrets


def test_without_the_extra_traces_asked_for_are_exit_2_naming_the_install(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("otel:\n  endpoint: http://127.0.0.1:4318/v1/traces\n")
    blocked = (
        "import sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('opentelemetry'): raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "for name in [m for m in sys.modules if m.startswith('opentelemetry')]: del sys.modules[name]\n"
        "from opencode_gateway.cli import entry; sys.argv[0] = 'opencode-gateway'; entry()"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocked, "run", "-m", "openai/gpt-4o-mini", "--config", str(config), "hi"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and INSTALL in result.stderr and result.stderr.count("\n") == 1, result.stderr
