"""Which ACP `authenticate` method agentctl picks (agentctl/agent/acp_auth.py): a pure rule over what the agent
advertised, the spec's `auth_method` and the names of the agent's non-blank environment variables.

The advertised lists are the adapters' own (tests/clis/test_acp_authenticate.py runs them for real).
"""

from __future__ import annotations

import acp.schema
import pytest

from agentctl.agent.acp_auth import AdvertisedMethod, AuthDecision, advertised_methods, decide, present_names

# As advertised by @agentclientprotocol/codex-acp 2.6.0 and @google/gemini-cli 0.61.0 at initialize.
CODEX = [AdvertisedMethod("api-key", "openai"), AdvertisedMethod("chat-gpt")]
GEMINI = [AdvertisedMethod("oauth-personal"), AdvertisedMethod("gemini-api-key", "google"),
          AdvertisedMethod("vertex-ai"), AdvertisedMethod("gateway")]


@pytest.mark.parametrize(("advertised", "present", "expected"), [
    pytest.param(CODEX, {"OPENAI_API_KEY"}, ("api-key", "OPENAI_API_KEY"), id="codex_acp_with_openai_key"),
    pytest.param(CODEX, {"CODEX_API_KEY", "OPENAI_API_KEY"}, ("api-key", "CODEX_API_KEY"),
                 id="codex_reads_codex_api_key_first"),
    pytest.param([AdvertisedMethod("openai-api-key")], {"OPENAI_API_KEY"}, ("openai-api-key", "OPENAI_API_KEY"),
                 id="the_older_zed_adapters_id"),
    pytest.param(GEMINI, {"GEMINI_API_KEY"}, ("gemini-api-key", "GEMINI_API_KEY"), id="gemini_with_its_key"),
    pytest.param(GEMINI, {"OPENAI_API_KEY"}, (None, None), id="a_key_for_another_provider_picks_nothing"),
    pytest.param(CODEX, set(), (None, None), id="no_key_sends_nothing"),
    pytest.param([AdvertisedMethod("renamed-key", "openai")], {"OPENAI_API_KEY"}, ("renamed-key", "OPENAI_API_KEY"),
                 id="a_renamed_id_is_matched_by_its_declared_provider"),
    pytest.param([AdvertisedMethod("login"), AdvertisedMethod("env", required_vars=("A_KEY", "A_URL"))],
                 {"A_KEY"}, (None, None), id="an_env_var_method_needs_every_required_variable"),
    pytest.param([AdvertisedMethod("env", required_vars=("A_KEY", "A_URL"))], {"A_KEY", "A_URL"}, ("env", "A_KEY"),
                 id="an_env_var_method_with_all_its_variables"),
])
def test_unset_the_first_advertised_method_whose_credential_variable_is_set_is_picked(advertised, present, expected):
    decision = decide(advertised, None, frozenset(present))
    assert (decision.method_id, decision.variable) == expected
    assert decision.chosen_by == ("credential" if expected[0] else None)


def test_a_named_method_is_sent_only_when_advertised_and_none_never_authenticates():
    assert decide(CODEX, "chat-gpt", frozenset()) == AuthDecision("chat-gpt", "spec")
    assert decide(CODEX, "openai-api-key", frozenset({"OPENAI_API_KEY"})) == AuthDecision(
        None, "spec", not_advertised=True)
    assert decide(CODEX, "none", frozenset({"OPENAI_API_KEY"})).method_id is None
    assert decide(CODEX, "api-key", frozenset()).variables == ("CODEX_API_KEY", "OPENAI_API_KEY")


def test_a_blank_variable_is_not_a_credential_and_values_are_never_kept():
    names = present_names({"OPENAI_API_KEY": "  ", "GEMINI_API_KEY": "sk-CANARY", "HOME": "/h"})
    assert names == frozenset({"GEMINI_API_KEY", "HOME"}) and "sk-CANARY" not in repr(names)


def test_the_advertised_list_is_read_from_the_sdks_initialize_answer_whatever_the_method_type():
    resp = acp.schema.InitializeResponse.model_validate({"protocolVersion": 1, "authMethods": [
        {"id": "api-key", "name": "API Key", "_meta": {"api-key": {"provider": "openai"}}},
        {"id": "env", "name": "Env", "type": "env_var", "vars": [{"name": "X_KEY"}, {"name": "X_OPT", "optional": True}]},
        {"id": "term", "name": "Terminal", "type": "terminal"},
    ]})
    assert advertised_methods(resp.auth_methods) == [
        AdvertisedMethod("api-key", "openai"), AdvertisedMethod("env", None, ("X_KEY",)), AdvertisedMethod("term")]
    assert advertised_methods(None) == [] and advertised_methods([{"name": "no id"}, 3]) == []
