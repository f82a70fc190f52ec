"""Which values the gateway holds as secrets, and their redaction."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from opencode_gateway.credentials import (
    gateway_keys,
    held_secrets,
    is_credential,
    redact,
)

ENVIRON = {
    "OPENAI_API_KEY": "sk-openai-0123456789",
    "ANTHROPIC_AUTH_TOKEN": "ant-token-0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
    "GITHUB_TOKEN": "ghp_0123456789abcdef",
    "DB_PASSWORD": "hunter2hunter2",
    "MY_PROVIDER_KEY": "mpk-0123456789",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "SOME_TOKEN_SWITCH": "1",
    "PATH": "/usr/bin",
    "HOME": "/root",
}


def test_every_credential_variable_is_held_but_not_short_switches() -> None:
    held = held_secrets(ENVIRON, ["sk-v", None])
    assert set(held) == {
        "sk-v",
        "sk-openai-0123456789",
        "ant-token-0123456789",
        "aws-secret-0123456789",
        "ghp_0123456789abcdef",
        "hunter2hunter2",
        "mpk-0123456789",
    }


def test_the_keys_the_gateway_uses_are_the_given_ones_and_provider_credentials() -> None:
    assert set(gateway_keys(ENVIRON, ["sk-v"])) == {
        "sk-v",
        "sk-openai-0123456789",
        "ant-token-0123456789",
        "aws-secret-0123456789",
    }


def test_names_that_say_credential() -> None:
    assert all(map(is_credential, ("OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "SSH_KEY", "X_SECRET")))
    assert not any(map(is_credential, ("PATH", "LANG", "KEYBOARD_LAYOUT", "MONKEY_MODE")))


def test_redaction_replaces_each_secret_longest_first() -> None:
    text = "Incorrect API key provided: sk-openai-0123456789 (sk-openai)"
    assert redact(text, ["sk-openai", "sk-openai-0123456789"]) == "Incorrect API key provided: [REDACTED] ([REDACTED])"


@given(st.text(), st.lists(st.text(alphabet="abcdef0123456789-", min_size=4), min_size=1, max_size=4))
def test_no_secret_survives_redaction(prefix: str, secrets: list[str]) -> None:
    text = prefix + " ".join(secrets) + prefix
    redacted = redact(text, secrets)
    assert not any(secret in redacted.replace("[REDACTED]", "\0") for secret in secrets)


def test_a_collectors_headers_in_the_standard_variables_are_secrets() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic%20cGstbGYtMTIzOnNrLWxmLTQ1Ng==,x-team=a",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-honeycomb-team=hc_live_0123456789",
    }
    found = held_secrets(environ, ())
    assert "Basic cGstbGYtMTIzOnNrLWxmLTQ1Ng==" in found and "hc_live_0123456789" in found
    assert "a" not in found  # too short to be a key: redacting it would blank every "a"
