"""Gemini CLI as an ACP agent (`gemini --acp`): how it is recognized, and its servers `filtered` in a folder it
does not trust.

Gemini CLI 0.61.0's ACP session manager merges the servers of session/new (and session/load) into its
settings and hands them to the same MCP client manager as its own servers, which starts none of them when
the session's folder is untrusted (`if (!this.cliConfig.isTrustedFolder()) return;`, for every server: the
workspace's, the user's and the client's). docs/agents.md has the measurement with the real CLI. So when the
agent is Gemini CLI and agentctl/agent/gemini_trust.py decides (with the agent's environment and command, as
Gemini would) that the session's working directory is untrusted, no server is sent and each is `filtered`
(`untrusted_folder`) with how to trust the folder. A trust file Gemini would refuse (`trusted=None`) leaves the
plan as it is: the agent's own error then says why. Nothing here writes a file. Gemini CLI reads its
trusted-folders file once per process (and caches it), so agentctl decides once too, when the agent has
answered initialize: a folder trusted while the agent runs takes effect at its next start, for both.

Gemini CLI is recognized by the name it gives in ACP initialize (`agentInfo.name` = `gemini-cli`); only when
an agent gives no name, by its command's program name (`gemini`). A wrapper script that starts Gemini CLI is
recognized by the name; another agent started through a program called `gemini` is not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from agentctl.agent import gemini_trust
from agentctl.agent.delivery import DeliveryPlan, Omitted

AGENT_NAME = "gemini-cli"  # agentInfo.name in Gemini CLI's initialize answer
PROGRAM = "gemini"


def is_gemini(agent_name: str | None, command: Sequence[str]) -> bool:
    """Whether the ACP agent is Gemini CLI: by the name it declared, else by the program it was started as."""
    if agent_name:
        return agent_name == AGENT_NAME
    return bool(command) and os.path.basename(command[0]) == PROGRAM


def trust_for(cwd: str, agent_env: Mapping[str, str], command: Sequence[str],
              environ: Mapping[str, str] | None = None) -> gemini_trust.TrustDecision:
    """Gemini's answer for a session in `cwd`: the inherited environment with the spec's env over it."""
    return gemini_trust.decide_for_agent(cwd, agent_env, list(command), environ)


def filter_untrusted(plan: DeliveryPlan, decision: gemini_trust.TrustDecision) -> None:
    """In an untrusted folder, every planned server becomes `filtered` (`untrusted_folder`): none is sent."""
    if decision.trusted is not False:
        return
    summary = gemini_trust.untrusted_summary(decision)
    plan.filtered.extend(Omitted(p.name, gemini_trust.REASON_UNTRUSTED, summary) for p in plan.delivered)
    plan.delivered.clear()
