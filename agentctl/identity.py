"""Execution identity: the daemon-minted instance id, opaque attempt and connection ids, per-attempt bearer tokens."""

from __future__ import annotations

import hmac
import secrets
import uuid


def new_instance_id() -> str:
    return "inst_" + uuid.uuid4().hex


def new_execution_id() -> str:
    return "exec_" + uuid.uuid4().hex


def new_attempt_id() -> str:
    return "att_" + secrets.token_hex(8)


def new_connection_id() -> str:
    return "conn_" + secrets.token_hex(8)


def new_token() -> str:
    return secrets.token_urlsafe(32)


class TokenRegistry:
    """Maps bearer tokens to the attempt that minted them. Memory only: tokens are never persisted.

    Lookup compares against every known token with hmac.compare_digest so the time taken does not
    depend on which token (if any) matched.
    """

    def __init__(self) -> None:
        self._tokens: list[tuple[bytes, str]] = []

    def mint(self, attempt_id: str) -> str:
        token = new_token()
        self._tokens.append((token.encode(), attempt_id))
        return token

    def forget(self, attempt_id: str) -> None:
        self._tokens = [(t, a) for (t, a) in self._tokens if a != attempt_id]

    def attempt_for(self, presented: str | None) -> str | None:
        if not presented:
            return None
        candidate = presented.encode()
        found: str | None = None
        for token, attempt_id in self._tokens:
            if hmac.compare_digest(token, candidate):
                found = attempt_id
        return found

    def token_of(self, attempt_id: str) -> str | None:
        for token, owner in self._tokens:
            if owner == attempt_id:
                return token.decode()
        return None

    def attempt_ids(self) -> set[str]:
        return {attempt_id for _, attempt_id in self._tokens}

    def all_tokens(self) -> list[str]:
        """Every live token, for redaction lists only."""
        return [token.decode() for token, _ in self._tokens]
