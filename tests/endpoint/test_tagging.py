"""What OpenCode may send on: allowlisted body fields and headers, whatever else a request holds."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from opencode_gateway.endpoint.tagging import (
    FORWARDED_FIELDS,
    Tagging,
    clean_body,
    forwarded_headers,
)

NAMES = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))


@given(extra=st.dictionaries(NAMES, VALUES, max_size=20), kept=st.sets(st.sampled_from(sorted(FORWARDED_FIELDS))))
def test_only_allowlisted_fields_pass_and_every_other_is_named(extra: dict, kept: set) -> None:
    body = {**extra, **{name: 1 for name in kept}}
    cleaned, dropped = clean_body(body)
    assert set(cleaned) == kept | (set(extra) & set(FORWARDED_FIELDS))
    assert set(dropped) == set(body) - set(FORWARDED_FIELDS)


def test_routing_pricing_and_attribution_fields_never_pass() -> None:
    attacks = [
        "fallbacks",
        "input_cost_per_token",
        "output_cost_per_token",
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "timeout",
        "num_retries",
        "max_retries",
        "caching",
        "cache",
        "user",
        "metadata",
        "tags",
        "safety_identifier",
        "extra_headers",
        "extra_body",
        "mock_response",
        "custom_llm_provider",
        "litellm_metadata",
        "n",
        "model_list",
        "router_settings",
    ]
    cleaned, dropped = clean_body({name: "x" for name in attacks} | {"messages": []})
    assert cleaned == {"messages": []} and set(dropped) == set(attacks)


@given(st.dictionaries(NAMES, st.text(max_size=20), max_size=20))
def test_only_accept_and_user_agent_headers_pass(headers: dict) -> None:
    assert {name.lower() for name in forwarded_headers(headers)} <= {"accept"}


def test_credentials_and_litellm_headers_are_dropped() -> None:
    incoming = {
        "Authorization": "Bearer t",
        "x-api-key": "k",
        "x-litellm-tags": "free",
        "anthropic-beta": "x",
        "x-session-id": "ses_1",
        "User-Agent": "opencode/1.18.33",
        "accept": "text/event-stream",
    }
    assert forwarded_headers(incoming) == {"accept": "text/event-stream"}


def test_non_ascii_tags_travel_in_the_body_and_metadata_escaped_in_the_header() -> None:
    tagging = Tagging(("équipe",), {"ticket": "ENG-412", "owner": "Zoë 山田"})
    assert "x-litellm-tags" not in tagging.headers  # a header cannot carry it intact
    assert tagging.proxy_body == {"tags": ["harness", "opencode", "équipe", "ticket:ENG-412"]}
    header = tagging.headers["x-litellm-spend-logs-metadata"]
    assert header.isascii() and json.loads(header) == {"ticket": "ENG-412", "owner": "Zoë 山田"}
