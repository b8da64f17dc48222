"""Which ACP `authenticate` method agentctl sends, if any: a pure rule over what the agent advertised, the spec's
`[agent] auth_method`, and the names (never the values) of the agent's non-blank environment variables.

Real adapters refuse `session/new` or `session/load` with "Authentication required" until the client sends
`authenticate {methodId}` with one of the `authMethods` they advertised at initialize, even when their API key
variable is set: they read the key from their own environment at that call. agentctl sends only the method id;
the credential stays in the agent's environment and never passes through agentctl.

The rule, in order:
1. `auth_method = "none"`: never authenticate.
2. `auth_method = ID`: send ID when the agent advertised it; otherwise send nothing and say so (`not_advertised`).
3. Unset: the first advertised method (in the agent's order) whose credential variable is set (non-blank) in the
   agent's environment. A method's variables are the ones an `env_var` method lists (every required one must
   be set), else those of its id in CREDENTIAL_VARS, else those of the provider it declares in
   `_meta["api-key"].provider` (so a renamed id still matches; any one of them is enough). None matches: send nothing (an
   agent that needs no authentication, or one logged in through its own files, is left alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Literal

# Method id -> the variables the agent reads the credential from, as the adapters' shipped code does:
# @agentclientprotocol/codex-acp 2.6.0 (dist/index.js, CodexAuthMethod.ts: "api-key" reads CODEX_API_KEY, then
# OPENAI_API_KEY), @zed-industries/codex-acp 0.16.0 ("openai-api-key"), @google/gemini-cli 0.61.0
# (acpRpcDispatcher.ts: "gemini-api-key" = AuthType.USE_GEMINI, which reads GEMINI_API_KEY).
CREDENTIAL_VARS: Mapping[str, tuple[str, ...]] = {
    "api-key": ("CODEX_API_KEY", "OPENAI_API_KEY"),
    "openai-api-key": ("OPENAI_API_KEY",),
    "codex-api-key": ("CODEX_API_KEY",),
    "gemini-api-key": ("GEMINI_API_KEY",),
}
# `_meta: {"api-key": {"provider": P}}` on an advertised method (both adapters above declare it).
PROVIDER_VARS: Mapping[str, tuple[str, ...]] = {
    "openai": ("CODEX_API_KEY", "OPENAI_API_KEY"),
    "google": ("GEMINI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
}
NONE = "none"

Choice = Literal["spec", "credential"]


@dataclass(frozen=True)
class AdvertisedMethod:
    id: str
    provider: str | None = None  # from `_meta["api-key"].provider`, when the agent declared one
    required_vars: tuple[str, ...] = ()  # an ACP `env_var` method's required variables


@dataclass(frozen=True)
class AuthDecision:
    method_id: str | None  # what to send; None: send nothing
    chosen_by: Choice | None = None
    variable: str | None = None  # the variable whose presence chose it (a name, never a value)
    not_advertised: bool = False  # the spec named a method the agent did not advertise
    variables: tuple[str, ...] = ()  # where the chosen method's credential lives (names): registered as secrets


def credential_vars(method: AdvertisedMethod) -> tuple[str, ...]:
    """Any one of these set selects the method (an `env_var` method is matched on all of its own instead)."""
    if method.required_vars:
        return method.required_vars
    if method.id in CREDENTIAL_VARS:
        return CREDENTIAL_VARS[method.id]
    return PROVIDER_VARS.get(method.provider or "", ())


def decide(advertised: Sequence[AdvertisedMethod], configured: str | None, present: Set[str]) -> AuthDecision:
    """The method to authenticate with. `present`: names of the agent's environment variables whose value is
    not blank."""
    if configured == NONE:
        return AuthDecision(None)
    if configured is not None:
        for method in advertised:
            if method.id == configured:
                return AuthDecision(configured, "spec", variables=credential_vars(method))
        return AuthDecision(None, "spec", not_advertised=True)
    for method in advertised:
        names = credential_vars(method)
        if method.required_vars:
            if all(var in present for var in names):
                return AuthDecision(method.id, "credential", names[0], variables=names)
            continue
        for var in names:
            if var in present:
                return AuthDecision(method.id, "credential", var, variables=names)
    return AuthDecision(None)


def advertised_methods(raw: Sequence[Any] | None) -> list[AdvertisedMethod]:
    """The SDK's `authMethods` (models or dicts) as id and declared provider; entries without an id are skipped."""
    out: list[AdvertisedMethod] = []
    for item in raw or ():
        data = item.model_dump(by_alias=True) if hasattr(item, "model_dump") else item
        if not isinstance(data, dict):
            continue
        method_id = data.get("id") or data.get("methodId")
        if not isinstance(method_id, str) or not method_id:
            continue
        meta = data.get("_meta") or data.get("field_meta")
        api_key = meta.get("api-key") if isinstance(meta, dict) else None
        provider = api_key.get("provider") if isinstance(api_key, dict) else None
        required = tuple(v["name"] for v in data.get("vars") or () if isinstance(v, dict)
                         and isinstance(v.get("name"), str) and not v.get("optional"))
        out.append(AdvertisedMethod(method_id, provider if isinstance(provider, str) else None, required))
    return out


def present_names(env: Mapping[str, str]) -> frozenset[str]:
    """The names of `env`'s variables with a non-blank value (the adapters trim a key before using it)."""
    return frozenset(name for name, value in env.items() if value.strip())
