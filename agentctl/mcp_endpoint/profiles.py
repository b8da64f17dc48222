"""Tool profiles of the built-in MCP server: which tools one server lists. All profiles share one server.

`apply_profile` (agentctl.mcp_endpoint.tools) makes the server's tool list equal to one of these sets.
"""

from __future__ import annotations

# Tool names (stable: agents, prompts and reports refer to them).
GET_TASK = "get_task"
LIST_TASKS = "list_tasks"
CREATE_TASK = "create_task"
UPDATE_TASK = "update_task"
SET_TASK_TITLE = "set_task_title"
POST_TASK_MESSAGE = "post_task_message"
ASK_USER = "ask_user"
CREATE_TASK_PLAN = "create_task_plan"
GET_TASK_PLAN = "get_task_plan"
UPDATE_TASK_PLAN = "update_task_plan"
COMPLETE_PLAN_STEP = "complete_plan_step"
LIST_AGENTS = "list_agents"
LIST_MCP_SERVERS = "list_mcp_servers"
DESCRIBE_EXECUTION = "describe_execution"

TASK_TOOLS: frozenset[str] = frozenset(
    {
        GET_TASK,
        LIST_TASKS,
        CREATE_TASK,
        UPDATE_TASK,
        POST_TASK_MESSAGE,
        ASK_USER,
        CREATE_TASK_PLAN,
        GET_TASK_PLAN,
        UPDATE_TASK_PLAN,
        COMPLETE_PLAN_STEP,
    }
)
CONFIG_TOOLS: frozenset[str] = frozenset({LIST_AGENTS, LIST_MCP_SERVERS, DESCRIBE_EXECUTION})

PROFILES: dict[str, frozenset[str]] = {
    # An agent working on a task.
    "task": TASK_TOOLS,
    # The same, and it may rename its task.
    "task-title": TASK_TOOLS | {SET_TASK_TITLE},
    # Read-only: what is configured and who this execution is.
    "config": CONFIG_TOOLS,
    # An outside assistant: read the configuration and hand work over as a new task.
    "external": CONFIG_TOOLS | {CREATE_TASK},
}
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)
DEFAULT_PROFILE = "task"
ALL_TOOLS: frozenset[str] = frozenset().union(*PROFILES.values())
