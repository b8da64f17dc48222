"""The built-in server's tools: typed MCPServer tools over the Backend, and runtime profile switching.

Every tool calls the backend with the daemon's identity; no tool takes a task, session or execution id,
so nothing the agent sends selects another task. Failures reach the agent as MCP tool errors
(`CallToolResult.isError = true` with one clear sentence), never as protocol errors and never as a
hang: the SDK turns a raised `ToolError` into exactly that.

No `from __future__ import annotations` here: the SDK reads the tools' annotations to build schemas.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar
from weakref import WeakKeyDictionary

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, TypeAdapter, ValidationError

from agentctl.backend import limits
from agentctl.backend.base import (
    DEFAULT_DEADLINE,
    Backend,
    BackendError,
    MessageResult,
    PlanResult,
    QuestionResult,
    TaskList,
    TaskResult,
    TaskStatus,
    TaskView,
    timeout_message,
)
from agentctl.evidence.contract.report import Identity
from agentctl.mcp_endpoint import profiles as P

logger = logging.getLogger(__name__)

# Extra seconds the tool layer waits beyond the deadline it hands the backend, so a backend that
# honours its deadline reports its own error first; one that does not is cut off here.
DEADLINE_GRACE = 0.5

# ---- parameter types (module level: the SDK resolves annotations against this module) ---------------

TaskTitle = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_TITLE, description="A short title, at most 200 characters."),
]
StatusFilter = Annotated[
    TaskStatus | None,
    Field(description="Only list tasks with this status. Omit to list tasks of every status."),
]
ListLimit = Annotated[
    int,
    Field(ge=1, le=limits.MAX_LIST_LIMIT, description="The most tasks to return (1-200)."),
]
NewDescription = Annotated[
    str,
    Field(max_length=limits.MAX_TEXT, description="What the task is about and what done looks like (Markdown)."),
]
OptionalDescription = Annotated[
    str | None,
    Field(max_length=limits.MAX_TEXT, description="The new description (Markdown); replaces the old one."),
]
NewStatus = Annotated[
    TaskStatus | None,
    Field(description="The new status of the task."),
]
MessageText = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_TEXT, description="The message to post (Markdown)."),
]
QuestionText = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_QUESTION, description="The question, phrased for a person."),
]
AnswerOptions = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=limits.MAX_OPTION)]] | None,
    Field(
        max_length=limits.MAX_OPTIONS,
        description="Suggested answers the user can pick from (at most 10). Omit for a free-form answer.",
    ),
]
StepText = Annotated[str, Field(min_length=1, max_length=limits.MAX_STEP)]
PlanSteps = Annotated[
    list[StepText],
    Field(min_length=1, max_length=limits.MAX_STEPS, description="The steps in order, one short sentence each."),
]
OptionalPlanSteps = Annotated[
    list[StepText] | None,
    Field(
        min_length=1,
        max_length=limits.MAX_STEPS,
        description="The complete new list of steps, in order. A step whose text is unchanged keeps its done state.",
    ),
]
PlanSummary = Annotated[
    str,
    Field(max_length=limits.MAX_SUMMARY, description="One paragraph on the approach."),
]
OptionalPlanSummary = Annotated[
    str | None,
    Field(max_length=limits.MAX_SUMMARY, description="The new summary; replaces the old one."),
]
StepNumber = Annotated[
    int,
    Field(ge=1, le=limits.MAX_STEPS, description="The step's number as shown by get_task_plan (the first step is 1)."),
]

Config = dict[str, Any]

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_IDEMPOTENT_WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

# A result shape a task tool answers with (a key of _RESULT_ADAPTERS).
_Shape = TypeVar("_Shape")

_RESULT_ADAPTERS: dict[type, TypeAdapter[Any]] = {
    t: TypeAdapter(t) for t in (TaskView, TaskList, TaskResult, MessageResult, QuestionResult, PlanResult)
}


@dataclass(frozen=True)
class _ToolDef:
    fn: Callable[..., Any]
    title: str
    annotations: ToolAnnotations


@dataclass
class _Registration:
    defs: dict[str, _ToolDef]
    active: set[str] = field(default_factory=set)
    profile: str | None = None


_REGISTRY: "WeakKeyDictionary[MCPServer[Any], _Registration]" = WeakKeyDictionary()


def register_tools(
    server: MCPServer[Any],
    backend_getter: Callable[[], Backend | None],
    identity: Identity,
    *,
    deadline: float = DEFAULT_DEADLINE,
) -> None:
    """Register every built-in tool on `server` (all of them listed until `apply_profile` narrows it).

    `backend_getter` is called on each tool call, so the backend can be swapped (embedded, upstream)
    or be missing for a while; a missing backend is a tool error, not a crash. `deadline` is the seconds
    a tool call waits for the backend.
    """
    if server in _REGISTRY:
        raise ValueError("the built-in tools are already registered on this server")
    # Tool closures may hold the registration but never the server: the registry holds servers weakly.
    registration = _Registration(defs={})

    async def answer(op: str, args: dict[str, Any]) -> Any:
        try:
            backend = backend_getter()
        except Exception as exc:
            logger.warning("task backend unavailable for %s: %s", op, type(exc).__name__)
            backend = None
        if backend is None:
            raise ToolError("the task backend is not available right now; try again later")
        try:
            result = await asyncio.wait_for(
                backend.call(op, identity, args, deadline=deadline), timeout=deadline + DEADLINE_GRACE
            )
        except BackendError as exc:
            raise ToolError(str(exc) or "the task backend refused the request") from None
        except TimeoutError:
            logger.warning("task backend op %s did not answer within %gs", op, deadline)
            raise ToolError(timeout_message(deadline)) from None
        except Exception as exc:
            # Type only: an exception's text may quote arguments or results.
            logger.error("task backend op %s failed unexpectedly: %s", op, type(exc).__name__)
            raise ToolError("the task backend failed unexpectedly; the daemon log has details") from None
        return result

    async def call_as(op: str, args: dict[str, Any], shape: type[_Shape]) -> _Shape:
        """The op's answer validated as `shape` (one of _RESULT_ADAPTERS)."""
        result = await answer(op, args)
        try:
            shaped: _Shape = _RESULT_ADAPTERS[shape].validate_python(result)
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in err["loc"]) for err in exc.errors()})
            logger.error("task backend op %s answered an unexpected shape (fields %s)", op, fields)
            raise ToolError("the task backend gave an answer this tool does not understand") from None
        return shaped

    async def call(op: str, args: dict[str, Any]) -> Config:
        """The op's answer, which must be a JSON object."""
        result = await answer(op, args)
        if not isinstance(result, dict):
            logger.error("task backend op %s answered a %s, not an object", op, type(result).__name__)
            raise ToolError("the task backend gave an answer this tool does not understand")
        return result

    def given(**kwargs: Any) -> dict[str, Any]:
        return {k: v for k, v in kwargs.items() if v is not None}

    # ---- task ----------------------------------------------------------------------------------------

    async def get_task() -> TaskView:
        """Get the task you are working on: its title, description and status, the latest messages
        posted to it, and the questions asked to the user (with answers once given)."""
        return await call_as("task.get", {}, TaskView)

    async def list_tasks(status: StatusFilter = None, limit: ListLimit = limits.DEFAULT_LIST_LIMIT) -> TaskList:
        """List tasks, most recently updated first. The task you are working on is marked
        is_current. Optionally only tasks with one status."""
        return await call_as("task.list", given(status=status, limit=limit), TaskList)

    async def create_task(title: TaskTitle, description: NewDescription = "") -> TaskResult:
        """Create a new task, for example follow-up work found along the way. It starts as 'todo',
        is linked to the task you are working on as its parent, and is not started automatically."""
        return await call_as("task.create", given(title=title, description=description), TaskResult)

    async def update_task(description: OptionalDescription = None, status: NewStatus = None) -> TaskResult:
        """Update the task you are working on: replace its description, change its status, or both.
        Give at least one. Statuses: todo, in_progress, blocked, review, done, cancelled."""
        return await call_as("task.update", given(description=description, status=status), TaskResult)

    async def set_task_title(title: TaskTitle) -> TaskResult:
        """Set the title of the task you are working on: a short summary of the work."""
        return await call_as("task.set_title", {"title": title}, TaskResult)

    async def post_task_message(text: MessageText) -> MessageResult:
        """Post a message (a progress note or a comment) to the task you are working on. The user
        reads it in the task's history. It does not ask for a reply; use ask_user for that."""
        return await call_as("task.message", {"text": text}, MessageResult)

    async def ask_user(question: QuestionText, options: AnswerOptions = None) -> QuestionResult:
        """Ask the user a question about the task you are working on. The question is recorded and
        the call returns at once with status 'pending'; it does not wait for the answer. The answer
        appears later in get_task; carry on with other work or a sensible default meanwhile."""
        return await call_as("task.ask_user", given(question=question, options=options), QuestionResult)

    async def create_task_plan(steps: PlanSteps, summary: PlanSummary = "") -> PlanResult:
        """Create the plan for the task you are working on: an ordered list of steps and an optional
        summary. A task has one plan; if it already has one, use update_task_plan instead."""
        return await call_as("plan.create", given(steps=steps, summary=summary), PlanResult)

    async def get_task_plan() -> PlanResult:
        """Get the plan of the task you are working on: the summary and each step with its number
        and whether it is done. plan is null when the task has no plan yet."""
        return await call_as("plan.get", {}, PlanResult)

    async def update_task_plan(steps: OptionalPlanSteps = None, summary: OptionalPlanSummary = None) -> PlanResult:
        """Change the plan of the task you are working on. steps replaces the whole list (steps whose
        text is unchanged stay done); summary replaces the summary. Give at least one."""
        return await call_as("plan.update", given(steps=steps, summary=summary), PlanResult)

    async def complete_plan_step(step: StepNumber) -> PlanResult:
        """Mark one step of your task's plan as done, by its number from get_task_plan (the first step
        is 1). Marking a step that is already done changes nothing. Returns the updated plan."""
        return await call_as("plan.step_complete", {"step": step}, PlanResult)

    # ---- config (read-only) --------------------------------------------------------------------------

    async def list_agents() -> Config:
        """List the configured agents and their agent profiles. Read-only."""
        return await call("config.agents", {})

    async def list_mcp_servers() -> Config:
        """List the MCP servers configured for this execution: name, transport and target (scheme,
        host and port for network servers; the command name for local ones). Read-only; URLs,
        headers and environment values are never shown."""
        return await call("config.mcp", {})

    async def describe_execution() -> Config:
        """Describe this execution: the task, session, execution and agent ids, the agent profile,
        and the tool profile in use. Read-only."""
        result = await call("config.execution", {})
        execution = result.get("execution")
        if isinstance(execution, dict) and registration.profile is not None:
            execution["tool_profile"] = registration.profile
        return result

    defs = {
        P.GET_TASK: _ToolDef(get_task, "Get the current task", _READ),
        P.LIST_TASKS: _ToolDef(list_tasks, "List tasks", _READ),
        P.CREATE_TASK: _ToolDef(create_task, "Create a task", _WRITE),
        P.UPDATE_TASK: _ToolDef(update_task, "Update the current task", _IDEMPOTENT_WRITE),
        P.SET_TASK_TITLE: _ToolDef(set_task_title, "Set the task title", _IDEMPOTENT_WRITE),
        P.POST_TASK_MESSAGE: _ToolDef(post_task_message, "Post a message to the task", _WRITE),
        P.ASK_USER: _ToolDef(ask_user, "Ask the user a question", _WRITE),
        P.CREATE_TASK_PLAN: _ToolDef(create_task_plan, "Create the task plan", _WRITE),
        P.GET_TASK_PLAN: _ToolDef(get_task_plan, "Get the task plan", _READ),
        P.UPDATE_TASK_PLAN: _ToolDef(update_task_plan, "Update the task plan", _IDEMPOTENT_WRITE),
        P.COMPLETE_PLAN_STEP: _ToolDef(complete_plan_step, "Mark a plan step done", _IDEMPOTENT_WRITE),
        P.LIST_AGENTS: _ToolDef(list_agents, "List agents", _READ),
        P.LIST_MCP_SERVERS: _ToolDef(list_mcp_servers, "List MCP servers", _READ),
        P.DESCRIBE_EXECUTION: _ToolDef(describe_execution, "Describe this execution", _READ),
    }
    assert set(defs) == P.ALL_TOOLS, "profiles.py and tools.py disagree on the tool names"
    registration.defs = defs
    for name, tool in defs.items():
        _add(server, name, tool)
        registration.active.add(name)
    _REGISTRY[server] = registration


def _add(server: MCPServer[Any], name: str, tool: _ToolDef) -> None:
    server.add_tool(
        tool.fn,
        name=name,
        title=tool.title,
        description=" ".join((tool.fn.__doc__ or "").split()),
        annotations=tool.annotations,
        structured_output=True,
    )


def apply_profile(server: MCPServer[Any], profile: str) -> int:
    """Make the server's tool list the profile's set; returns the number of tools now listed.

    Synchronous and without awaits, so no request sees a half-applied profile. Sends no notification:
    the endpoint tells legacy sessions (notifications/tools/list_changed); the next tools/list of any
    era serves the new set. A call already running keeps running.
    """
    registration = _REGISTRY.get(server)
    if registration is None:
        raise ValueError("register_tools() must run on this server before apply_profile()")
    wanted = P.PROFILES.get(profile)
    if wanted is None:
        raise ValueError(f"unknown tool profile {profile!r}; known: {', '.join(P.PROFILE_NAMES)}")
    for name in sorted(registration.active - wanted):
        server.remove_tool(name)
        registration.active.discard(name)
    for name, tool in registration.defs.items():  # registration order keeps listings stable
        if name in wanted and name not in registration.active:
            _add(server, name, tool)
            registration.active.add(name)
    registration.profile = profile
    return len(registration.active)


def current_profile(server: MCPServer[Any]) -> str | None:
    """The profile last applied to `server` (None: all tools, no profile applied yet)."""
    registration = _REGISTRY.get(server)
    return None if registration is None else registration.profile
