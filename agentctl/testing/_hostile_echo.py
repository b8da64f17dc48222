"""The reference agent's hostile-echo mode: it echoes every secret it was handed in every form an agent may
mangle one into (agentctl.testing.secret_forms), wherever an agent's words reach agentctl: its agent name and
version (ACP initialize), session notices, a session error and its stderr.

The secrets it knows: its own environment values whose variable name ends in `SECRET`, and, per session, the
delivered servers' header values (the credential after an auth scheme word) and env values. Notices rotate
through the forms, MAX_NOTICES_PER_ATTEMPT per session, so a few sessions echo every form in a kept notice.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from acp import RequestError

from agentctl.evidence.contract.report import MAX_NOTICES_PER_ATTEMPT
from agentctl.testing import _ref_mcp as M
from agentctl.testing.secret_forms import FORMS

_AUTH_SCHEMES = ("bearer", "basic", "token")


def own_secrets() -> list[str]:
    return [value for name, value in sorted(os.environ.items()) if name.endswith("SECRET") and value]


def handed_secrets(entries: list[M.ServerEntry]) -> list[str]:
    found = own_secrets()
    for entry in entries:
        for value in entry.headers.values():
            scheme, _, credential = value.partition(" ")
            found.append(credential if scheme.lower() in _AUTH_SCHEMES and credential else value)
        found += [value for value in entry.env.values() if value]
    return found


def _every_form(secrets: list[str], forms: list[str]) -> str:
    return " | ".join(f"{form}: {FORMS[form](secret)}" for secret in secrets for form in forms)


def agent_name() -> str:
    """The name the agent gives itself: every form of its own secrets (agentctl keeps a bounded, redacted name)."""
    return "hostile " + _every_form(own_secrets(), list(FORMS))


def write_stderr(secrets: list[str]) -> None:
    for form in FORMS:
        sys.stderr.write(f"hostile-echo {form}: " + " | ".join(FORMS[form](s) for s in secrets) + "\n")
    sys.stderr.flush()


def notice_frames(session_id: str, secrets: list[str], round_: int) -> list[bytes]:
    """This session's notices: the next MAX_NOTICES_PER_ATTEMPT forms, each with every secret in it."""
    names = list(FORMS)
    start = round_ * MAX_NOTICES_PER_ATTEMPT
    frames = []
    for i in range(MAX_NOTICES_PER_ATTEMPT):
        form = names[(start + i) % len(names)]
        update = {
            "sessionUpdate": "notice",
            "severity": "error",
            "title": f"{form}: {FORMS[form](secrets[0])}" if secrets else form,
            "description": "could not connect with " + " | ".join(FORMS[form](s) for s in secrets),
        }
        frame = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}
        frames.append(json.dumps(frame).encode() + b"\n")
    return frames


def refusal(entries: list[M.ServerEntry], round_: int) -> RequestError:
    """A session error quoting the secrets, starting at this round's forms (a summary keeps 256 bytes)."""
    names = list(FORMS)
    start = (round_ * MAX_NOTICES_PER_ATTEMPT) % len(names)
    forms = names[start:] + names[:start]
    secrets = handed_secrets(entries)
    data: dict[str, Any] = {"servers": [{"name": e.name, "reason": _every_form(secrets, forms[:2])} for e in entries]}
    return RequestError(-32603, "load refused: " + _every_form(secrets, forms), data)
