"""The secret registry (agentctl.evidence.secret_registry) and the redaction it drives: every part of a
secret-bearing value, in any letter case, is gone from every summary before the summary is bounded."""

from __future__ import annotations

import base64

import pytest

from agentctl.evidence.contract.report import MAX_SUMMARY_BYTES
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.sanitize import REDACTED, bounded_text, opaque_id, redact, summarize
from agentctl.evidence.secret_registry import MIN_PART_LENGTH, SecretRegistry, value_parts
from agentctl.spec import parse_spec, secret_registry
from tests.conftest import spec_toml
from tests.evidence.fixed import IDENT

SPEC = spec_toml(
    execution_id=None,
    agent={"command": ["agent", "--acp", "--api-token=FlagV4lue9", "--model", "gpt-4o"],
           "env": {"OPENAI_KEY": "EnvS3cretValue", "PLAIN": "Bearer EnvBearer77"}},
    servers=[
        {"name": "web", "type": "http",
         "url": "https://Us3rName:P%40ssW0rd99@mcp.example.com:8443/Pa7hSegment/mcp?sig=Qu3ryValue&v=1#Fr4gment",
         "headers": {"Authorization": "Bearer HeaderTok3n", "X-Api-Key": "K3yWordOne second",
                     "Cookie": "sid=C00kieValue; theme=dark"}},
        {"name": "local", "type": "stdio", "command": "npx", "args": ["-y", "--key=StdioFl4g", "pkg@latest"],
         "env": {"DB": "postgres://DbUs3r:DbPassw0rd@db:5432/Db4name"}},
    ],
).encode()

# (what an agent's or a server's error echoes on its own, in another case) for each part form.
ECHOES = {
    "bearer credential of a header": "HEADERTOK3N",
    "bearer credential of an env value": "envbearer77",
    "first word of a header value": "k3ywordone",
    "cookie value": "c00kievalue",
    "value after = in the agent's argument": "FLAGV4LUE9",
    "value after = in a stdio server's argument": "stdiofl4g",
    "env value": "ENVS3CRETVALUE",
    "URL user": "US3RNAME",
    "URL password, decoded": "p@ssw0rd99",
    "URL password, as the URL carries it": "P%40SSW0RD99",
    "URL path segment": "pA7HsEGMENT",
    "URL query value": "qu3ryvalue",
    "URL fragment": "FR4GMENT",
    "user of a URL in an env value": "dbus3r",
    "password of a URL in an env value": "DBPASSW0RD",
    "path segment of a URL in an env value": "DB4NAME",
}


@pytest.fixture(scope="module")
def registry() -> SecretRegistry:
    return secret_registry(parse_spec(SPEC))


@pytest.mark.parametrize("form", list(ECHOES))
def test_each_part_of_a_secret_echoed_alone_in_another_case_is_redacted(registry: SecretRegistry, form: str) -> None:
    text = f"upstream said: rejected {ECHOES[form]} (try again)"
    assert summarize("x", text, registry).summary == f"upstream said: rejected {REDACTED} (try again)"
    assert redact(text, registry) == f"upstream said: rejected {REDACTED} (try again)"
    assert ECHOES[form].lower() not in (bounded_text(text, secrets=registry) or "").lower()


def test_the_credentials_inside_basic_and_digest_headers_are_parts_too() -> None:
    basic = "Basic " + base64.b64encode(b"BasicUs3r:BasicPassw0rd").decode()
    digest = 'Digest username="DigestUs3r", response="6629fae49393a05397450978507c4ef1"'
    registry = SecretRegistry([basic, digest])
    for echo in ("basicus3r", "BASICPASSW0RD", "digestus3r", "6629FAE49393A05397450978507C4EF1"):
        assert summarize("x", f"bad {echo}.", registry).summary == f"bad {REDACTED}."


def test_short_parts_and_ordinary_route_words_are_not_registered_but_short_whole_values_are() -> None:
    parts = value_parts("https://admin:pw@h/api/messages/stream?v=1&mode=events")
    assert {"admin", "pw", "api", "messages", "stream", "1", "events"} <= parts  # found...
    registry = SecretRegistry(["https://admin:pw@h/api/messages/stream?v=1&mode=events", "Bearer abcd", "wxyz"])
    values = {v.lower() for v in registry.values()}
    # ...but not registered: too short to mean anything alone, or a word every MCP URL has.
    assert not values & {"admin", "pw", "api", "messages", "stream", "1", "events", "bearer", "abcd"}
    assert {"wxyz", "bearer abcd"} <= values  # a whole value someone declared secret counts from 4 characters
    text = "the token was refused on the messages stream for admin"
    assert summarize("x", text, registry).summary == text
    assert MIN_PART_LENGTH == 6


def test_a_file_path_argument_is_one_value_its_directory_names_are_not_parts() -> None:
    # The agent's own package name must stay readable in its errors and its declared name.
    registry = SecretRegistry(["/usr/lib/node_modules/@zed-industries/claude-code-acp/dist/index.js"])
    text = "@zed-industries/claude-code-acp exited: node_modules missing"
    assert summarize("x", text, registry).summary == text
    assert bounded_text("@zed-industries/claude-code-acp", secrets=registry) == "@zed-industries/claude-code-acp"


def test_a_part_cut_by_the_summary_bound_does_not_survive_as_a_prefix(registry: SecretRegistry) -> None:
    # The echo straddles the 256-byte bound at every offset: redaction runs first, so no prefix is kept.
    for pad in range(MAX_SUMMARY_BYTES - 20, MAX_SUMMARY_BYTES + 4):
        summary = summarize("x", "p" * pad + " us3rname and more", registry).summary
        assert "us3r" not in summary.lower() and len(summary.encode()) <= MAX_SUMMARY_BYTES


def test_overlapping_secrets_leave_no_tail_behind() -> None:
    registry = SecretRegistry(["Alpha12345", "a12345Omega"])
    assert redact("x ALPHA12345OMEGA y", registry) == f"x {REDACTED} y"


def test_a_megabyte_message_is_cut_before_redaction_and_a_word_cut_in_half_is_dropped() -> None:
    secret = "CutS3cretValue"
    text = "w " * (8 * 1024 - 3) + secret + " " + "z" * 2_000_000
    summary = summarize("x", text, [secret]).summary
    assert "cuts3" not in summary.lower() and len(summary.encode()) <= MAX_SUMMARY_BYTES


def test_an_opaque_id_holding_a_part_in_another_case_is_no_id(registry: SecretRegistry) -> None:
    assert opaque_id("session-QU3RYVALUE-1", secrets=registry) is None
    assert opaque_id("session-1", secrets=registry) == "session-1"


def test_the_compiled_pattern_is_reused_until_the_registry_changes() -> None:
    registry = SecretRegistry(["FirstS3cret"])
    summarize("x", "FirstS3cret", registry)
    compiled = registry.compiled
    summarize("x", "again FirstS3cret", registry)
    assert registry.compiled is compiled
    registry.add_token("MintedT0kenValue")
    assert redact("mintedt0kenvalue", registry) == REDACTED and registry.compiled is not compiled


def test_the_ledger_redacts_every_summary_with_the_full_registry_whatever_its_producer_did() -> None:
    ledger = Ledger(IDENT, secrets=["Bearer LedgerTok3n"])
    attempt, token = ledger.begin_attempt("session_new")
    ledger.record("explicit_error", attempt, reason_code="agent_start_failed", summary="got LEDGERTOK3N back")
    ledger.update_agent(name=f"agent {token.upper()}", exit_reason=f"echo {token}")
    assert ledger.history.current.session_error.summary == f"got {REDACTED} back"
    assert ledger.history.agent.name == f"agent {REDACTED}" and ledger.history.agent.exit_reason == f"echo {REDACTED}"


def test_a_minted_token_stays_redacted_after_its_attempt_left_history() -> None:
    ledger = Ledger(IDENT)
    first, token = ledger.begin_attempt("session_new")
    for _ in range(3):
        ledger.begin_attempt("reset")
    assert ledger.tokens.attempt_for(token) is None  # no longer accepted...
    attempt = ledger.current_attempt_id
    ledger.record("explicit_error", attempt, reason_code="x", summary=f"old token {token}")
    assert ledger.history.current.session_error.summary == f"old token {REDACTED}"  # ...and still never shown
