"""The ops' limits and argument checks: how long a title, a message or a plan may be, how many entries a
list may hold, and the one wording for an argument outside them.

One table for both sides of the op contract: the built-in tools declare these bounds in their input
schemas (agentctl/mcp_endpoint/tools.py), and every backend checks them again, since a backend is also
called by what does not go through those schemas. Messages name the field, never the value.
"""

from __future__ import annotations

from typing import Any

from agentctl.backend.base import TASK_STATUSES, BackendError

MAX_TITLE = 200
MAX_TEXT = 20_000
MAX_QUESTION = 2_000
MAX_OPTIONS = 10
MAX_OPTION = 200
MAX_STEPS = 50
MAX_STEP = 500
MAX_SUMMARY = 4_000
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 200
RECENT = 20  # messages and questions task.get returns, newest last


def text_arg(args: dict[str, Any], key: str, *, limit: int, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None:
        if required:
            raise BackendError(f"'{key}' is required")
        return None
    if not isinstance(value, str):
        raise BackendError(f"'{key}' must be a string")
    value = value.strip()
    if required and not value:
        raise BackendError(f"'{key}' must not be empty")
    if len(value) > limit:
        raise BackendError(f"'{key}' is longer than {limit} characters")
    return value


def status_arg(args: dict[str, Any]) -> str | None:
    value: str | None = args.get("status")
    if value is None:
        return None
    if value not in TASK_STATUSES:
        raise BackendError("'status' must be one of: " + ", ".join(TASK_STATUSES))
    return value


def str_list_arg(args: dict[str, Any], key: str, *, max_items: int, limit: int, required: bool) -> list[str] | None:
    value = args.get(key)
    if value is None:
        if required:
            raise BackendError(f"'{key}' is required")
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BackendError(f"'{key}' must be a list of strings")
    items = [v.strip() for v in value]
    if any(not v for v in items):
        raise BackendError(f"'{key}' must not contain empty entries")
    if len(items) > max_items:
        raise BackendError(f"'{key}' has more than {max_items} entries")
    if any(len(v) > limit for v in items):
        raise BackendError(f"an entry of '{key}' is longer than {limit} characters")
    return items


def list_limit_arg(args: dict[str, Any]) -> int:
    limit = args.get("limit", DEFAULT_LIST_LIMIT)
    if limit is None:
        limit = DEFAULT_LIST_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise BackendError(f"'limit' must be an integer from 1 to {MAX_LIST_LIMIT}")
    return limit


def step_arg(args: dict[str, Any]) -> int:
    step = args.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise BackendError("'step' must be a step number, starting at 1")
    return step
