"""A model string as users write it, parsed once (ModelRoute), and what a gateway's answers mean."""

from __future__ import annotations

from opencode_gateway.domain import ModelRoute
from opencode_gateway.litellm_gateway.protocol import gateway_base, is_budget_error


def test_a_gateway_group_goes_to_the_gateway_by_its_group_name() -> None:
    route = ModelRoute.of("litellm_proxy/team-coder")
    assert (route.mode, route.group, route.upstream_model) == ("gateway", "team-coder", "team-coder")


def test_any_other_model_string_goes_through_litellm_as_written() -> None:
    route = ModelRoute.of("anthropic/claude-sonnet-4-5")
    assert (route.mode, route.group, route.upstream_model) == ("sdk", None, "anthropic/claude-sonnet-4-5")


def test_the_bare_prefix_names_no_group() -> None:
    route = ModelRoute.of("litellm_proxy/")
    assert route.mode == "gateway" and not route.group


def test_a_per_model_setting_is_found_as_written_first_then_by_group() -> None:
    route = ModelRoute.of("litellm_proxy/claude-coder")
    assert route.setting({"claude-coder": "markers"}) == "markers"
    assert route.setting({"litellm_proxy/claude-coder": "off", "claude-coder": "markers"}) == "off"
    assert route.setting({"other": "key"}) is None
    assert ModelRoute.of("openai/gpt-4o").setting({"gpt-4o": "key"}) is None  # no bare-name guess in SDK mode


def test_a_gateway_url_is_taken_with_or_without_v1() -> None:
    assert gateway_base("http://127.0.0.1:4000/v1/") == gateway_base("http://127.0.0.1:4000") == "http://127.0.0.1:4000"


def test_a_spent_budget_is_recognised_in_the_gateways_error() -> None:
    assert is_budget_error(b'{"error": {"message": "Budget has been exceeded! Current cost: 5"}}')
    assert not is_budget_error(b'{"error": {"message": "invalid key"}}')
