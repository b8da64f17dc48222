"""The one interface between the built-in MCP tools and whatever answers them (the orchestrator).

A tool call becomes `Backend.call(op, identity, args, deadline=...)`. The identity is the daemon's own
(minted by the executor and the daemon); the agent never supplies it, so nothing the agent sends can
select another task or session. Two implementations: the embedded SQLite store (agentctl.backend.embedded),
which answers when the spec configures no upstream (and, in the hub, executes the calls daemons tunnel to
it), and the tool tunnel (agentctl.upstream.tunnel), which sends each task and plan call over the upstream
Unix socket and answers `config.*` locally. Both implement the op table below; the shapes are the
TypedDicts in this module, the arguments' bounds are agentctl.backend.limits.

Op, args -> result (TypedDicts below):

- task.get            {} -> TaskView
- task.list           {status?: TaskStatus, limit?: 1..200} -> TaskList
- task.create         {title, description?} -> TaskResult (the new task; its parent is the current task)
- task.update         {description?, status?} (at least one) -> TaskResult
- task.set_title      {title} -> TaskResult
- task.message        {text} -> MessageResult
- task.ask_user       {question, options?: list[str]} -> QuestionResult (pending; never waits for the answer)
- plan.create         {steps: list[str], summary?} -> PlanResult (refused when a plan exists)
- plan.get            {} -> PlanResult (plan is None when there is none)
- plan.update         {steps?, summary?} (at least one) -> PlanResult
- plan.step_complete  {step: int >= 1} -> PlanResult
- config.agents       {} -> {"agents": [...], ...}
- config.mcp          {} -> {"servers": [{name, transport, target, ...}]} (sanitized targets only)
- config.execution    {} -> {"execution": {...identity fields, ...}}

Every task.* and plan.* op acts on the identity's task (the "current task") unless it creates one.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, get_args, runtime_checkable

from typing_extensions import NotRequired, TypedDict

from agentctl.evidence.contract.report import Identity

OPS: tuple[str, ...] = (
    "task.get",
    "task.list",
    "task.create",
    "task.update",
    "task.set_title",
    "task.message",
    "task.ask_user",
    "plan.create",
    "plan.get",
    "plan.update",
    "plan.step_complete",
    "config.agents",
    "config.mcp",
    "config.execution",
)

TaskStatus = Literal["todo", "in_progress", "blocked", "review", "done", "cancelled"]
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)

# Default seconds a tool waits for the backend. Short enough that an agent never hangs on a dead
# orchestrator, long enough for a busy SQLite file or a slow upstream.
DEFAULT_DEADLINE = 10.0


class BackendError(Exception):
    """The backend could not do what was asked.

    The message is shown to the agent (as the text of an MCP tool error) and logged by the SDK at INFO,
    so it must be a plain sentence without argument values, tool results, paths or credentials.
    """


@runtime_checkable
class Backend(Protocol):
    async def call(self, op: str, identity: Identity, args: dict[str, Any], *, deadline: float) -> dict[str, Any]:
        """Run one op for `identity`; answer within `deadline` seconds or raise BackendError."""
        ...


def timeout_message(deadline: float) -> str:
    """The one wording for a backend that did not answer in time (used by backends and the tool layer)."""
    return f"the task backend did not answer within {deadline:g} s; try again later"


# ---- result shapes (the op contract; the tools declare them as output schemas) ----------------------


class TaskRecord(TypedDict):
    """A task as the agent sees it."""

    id: str
    title: str
    description: str
    status: str
    created_at: str
    updated_at: str
    is_current: bool  # true for the task this session works on
    parent_id: NotRequired[str | None]


class MessageRecord(TypedDict):
    id: int
    text: str
    created_at: str


class QuestionRecord(TypedDict):
    id: int
    question: str
    options: list[str]
    status: str  # "pending" until the user answers, then "answered"
    created_at: str
    answer: NotRequired[str | None]
    answered_at: NotRequired[str | None]


class PlanStepRecord(TypedDict):
    number: int  # 1-based, what plan.step_complete takes
    text: str
    done: bool
    completed_at: NotRequired[str | None]


class PlanRecord(TypedDict):
    summary: str
    steps: list[PlanStepRecord]
    completed_steps: int
    total_steps: int
    created_at: str
    updated_at: str


class TaskView(TypedDict):
    task: TaskRecord
    recent_messages: list[MessageRecord]  # newest last, at most 20
    questions: list[QuestionRecord]  # newest last, at most 20


class TaskList(TypedDict):
    tasks: list[TaskRecord]
    current_task_id: str


class TaskResult(TypedDict):
    task: TaskRecord


class MessageResult(TypedDict):
    message: MessageRecord


class QuestionResult(TypedDict):
    question: QuestionRecord


class PlanResult(TypedDict):
    plan: PlanRecord | None
