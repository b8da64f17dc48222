"""Find every reason code agentctl's source can emit, by reading it (ast), not by trusting a list.

A reason code is any string that reaches a reason position:

- a keyword argument `reason_code=`, `code=` or `last_error=`, or a `"reason_code"` key of a dict literal;
- a positional argument in the place of a parameter named `reason_code` or `code` of a function or class
  defined in agentctl (found by name: `summarize`, `AgentError`, `Omitted`, `drop`, `ProtocolError`, ...);
- an assignment to a name `reason_code` or to an attribute `.reason_code` / `.last_error`;
- a module constant named `REASON_*`.

The value is followed to its strings: literals, module constants (imported and read), the branches of
`a if c else b` and `a or b`, a dict constant's `.get(key, default)`, and assignments to a local name in the
same function. A parameter or an attribute named like a reason (`exc.reason_code`, `exc.code`) is a pass-
through: the code was checked where it was made. A call to a function listed in PRODUCERS is expanded by
calling it with every input it can get. Anything else cannot be read and is reported as such, so a new
emitter written in a way this scan cannot follow fails the test instead of escaping it.

`summarize(...).summary` uses summarize for its text only: its code is never emitted, so it is skipped.
Callees from outside agentctl (`os.strerror(code)`) and parameters annotated `int` (exit codes) are not
reason positions.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[2] / "agentctl"
REASON_PARAMS = frozenset({"reason_code", "code", "unavailable_reason"})
REASON_KEYWORDS = frozenset({"reason_code", "code", "last_error", "unavailable_reason"})
REASON_ATTRS = frozenset({"reason_code", "last_error"})
# Attributes holding a code received from elsewhere (an upstream error frame): checked where it was made.
PASS_THROUGH_ATTRS = frozenset({"reason_code", "code", "last_error", "unavailable_reason", "superseded_reason", "_fatal_code"})


def _transport_codes(fn: Callable[[str], str]) -> list[str]:
    return [fn(transport) for transport in ("http", "sse", "stdio")]


# Functions that compute a reason code, and how to list every code they can return.
PRODUCERS: dict[str, Callable[[Callable[..., str]], list[str]]] = {
    "agentctl.agent.passthrough.base.unsupported": _transport_codes,
    "agentctl.evidence.sanitize.redact": lambda _: [],  # redacts a code made (and checked) elsewhere
    # The code of a refusal aiohttp raised, by HTTP status.
    "agentctl.http_answers.status_reason": lambda fn: [fn(status) for status in (400, 404, 405, 413, 500)],
}
# The reason registry itself is the list under test, not an emitter.
SKIPPED_MODULES = frozenset({"agentctl.evidence.reasons"})


@dataclass
class Scan:
    codes: dict[str, list[str]] = field(default_factory=dict)  # code -> where it is emitted
    unreadable: list[str] = field(default_factory=list)  # places whose code cannot be told

    def add(self, code: str, where: str) -> None:
        self.codes.setdefault(code, []).append(where)


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _reason_param_positions(trees: dict[Path, ast.Module]) -> dict[str, set[int] | None]:
    """Callable name -> positions of its parameters named like a reason code, for callees that cannot be
    resolved to an object (a nested function). None when definitions of that name disagree."""
    positions: dict[str, set[int] | None] = {}

    def note(name: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> None:
        args = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if method and args and args[0] in ("self", "cls"):
            args = args[1:]
        found = {i for i, arg in enumerate(args) if arg in REASON_PARAMS}
        if name in positions and positions[name] != found:
            positions[name] = None
        elif name not in positions:
            positions[name] = found

    for tree in trees.values():
        methods: set[ast.AST] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods.add(item)
                        note(node.name if item.name == "__init__" else item.name, item, method=True)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node not in methods:
                note(node.name, node, method=False)
    return positions


def _signature_positions(target: Any, bound: bool, package: str) -> set[int] | None:
    """Positions of a callee's reason parameters; only the package's own callees have them (a `code` of
    os.strerror or types.FunctionType is not ours), and a parameter annotated int is an exit code."""
    if not str(getattr(target, "__module__", "")).startswith(package):
        return set()
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if bound and params and params[0].name in ("self", "cls"):
        params = params[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return {i for i, p in enumerate(positional) if p.name in REASON_PARAMS and p.annotation not in (int, "int")}


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Reader:
    """Follows one module's expressions to the strings they can hold."""

    def __init__(self, module: Any, tree: ast.Module, scan: Scan, where: str) -> None:
        self.module = module
        self.package = module.__name__.split(".", 1)[0]
        self.scan = scan
        self.where = where
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.ClassDef):
                return node
        return None

    def callee(self, call: ast.Call) -> tuple[Any, bool]:
        """The object a call invokes, when it can be told from the module (and whether it is bound)."""
        func = call.func
        if isinstance(func, ast.Name):
            target = getattr(self.module, func.id, _MISSING)
            return target, False
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in ("self", "cls"):
                cls = self.class_of(call)
                owner = getattr(self.module, cls.name, None) if cls is not None else None
                return (getattr(owner, func.attr, _MISSING) if owner is not None else _MISSING), True
            value = self._resolve_attr(func)
            return value, False
        return _MISSING, False

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def _resolve_attr(self, node: ast.Attribute) -> Any:
        base = node.value
        if isinstance(base, ast.Name):
            owner = getattr(self.module, base.id, None)
            if owner is not None:
                return getattr(owner, node.attr, _MISSING)
        return _MISSING

    def values(self, node: ast.expr, line: int, depth: int = 0) -> Iterator[str]:
        """The strings `node` can evaluate to; records what cannot be read."""
        where = f"{self.where}:{line}"
        if depth > 8:
            self.scan.unreadable.append(f"{where}: too deep to follow")
            return
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                yield node.value
            return  # an int (exit code, HTTP status) or None is not a reason code
        if isinstance(node, ast.IfExp):
            yield from self.values(node.body, line, depth + 1)
            yield from self.values(node.orelse, line, depth + 1)
            return
        if isinstance(node, ast.BoolOp):
            for operand in node.values:
                yield from self.values(operand, line, depth + 1)
            return
        if isinstance(node, ast.Attribute):
            value = self._resolve_attr(node)
            if isinstance(value, str):
                yield value
            elif value is _MISSING and node.attr in PASS_THROUGH_ATTRS:
                return
            elif value is _MISSING or not isinstance(value, (int, type(None))):
                self.scan.unreadable.append(f"{where}: {ast.unparse(node)}")
            return
        if isinstance(node, ast.Name):
            yield from self._name(node, line, depth)
            return
        if isinstance(node, ast.Call):
            yield from self._call(node, line, depth)
            return
        self.scan.unreadable.append(f"{where}: {ast.unparse(node)}")

    def _name(self, node: ast.Name, line: int, depth: int) -> Iterator[str]:
        fn = self.function_of(node)
        if fn is not None:
            params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
            if node.id in params:
                return  # a pass-through: checked where the caller made it
            assigned = [
                sub.value
                for sub in ast.walk(fn)
                if isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None
                and any(isinstance(t, ast.Name) and t.id == node.id
                        for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]))
            ]
            if assigned:
                for value in assigned:
                    yield from self.values(value, line, depth + 1)
                return
        value = getattr(self.module, node.id, _MISSING)
        if isinstance(value, str):
            yield value
        elif value is _MISSING or not isinstance(value, (int, type(None))):
            self.scan.unreadable.append(f"{self.where}:{line}: {node.id}")

    def _call(self, node: ast.Call, line: int, depth: int) -> Iterator[str]:
        func = node.func
        # dict_constant.get(key, default)
        if isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Name):
            table = getattr(self.module, func.value.id, None)
            if isinstance(table, dict):
                yield from (v for v in table.values() if isinstance(v, str))
                if len(node.args) > 1:
                    yield from self.values(node.args[1], line, depth + 1)
                return
        target = None
        if isinstance(func, ast.Name):
            target = getattr(self.module, func.id, None)
        elif isinstance(func, ast.Attribute):
            value = self._resolve_attr(func)
            target = None if value is _MISSING else value
        qualified = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
        expand = PRODUCERS.get(qualified)
        if expand is not None and target is not None:
            yield from expand(target)
            return
        self.scan.unreadable.append(f"{self.where}:{line}: {ast.unparse(node)} (list it in PRODUCERS)")


_MISSING = object()


def scan_package(root: Path = PACKAGE) -> Scan:
    """Scan every module of the package at `root` (importable: constants are read from the modules)."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(root.rglob("*.py"))}
    positions = _reason_param_positions(trees)
    scan = Scan()
    for path, tree in trees.items():
        name = _module_name(path, root)
        if name in SKIPPED_MODULES:
            continue
        module = importlib.import_module(name)
        where = str(path.relative_to(root.parent))
        reader = _Reader(module, tree, scan, where)
        for node in ast.walk(tree):
            for expr in _reason_expressions(node, positions, reader):
                for code in reader.values(expr, getattr(expr, "lineno", node.lineno)):
                    scan.add(code, f"{where}:{getattr(expr, 'lineno', 0)}")
    return scan


def _reason_expressions(
    node: ast.AST, positions: dict[str, set[int] | None], reader: _Reader
) -> Iterator[ast.expr]:
    if isinstance(node, ast.Call):
        parent = reader.parents.get(node)
        name = _callee_name(node.func)
        if isinstance(parent, ast.Attribute) and parent.attr == "summary" and parent.value is node:
            return  # summarize(...).summary: used for its redacted text only, its code is never emitted
        for keyword in node.keywords:
            if keyword.arg in REASON_KEYWORDS:
                yield keyword.value
        target, bound = reader.callee(node)
        found = _signature_positions(target, bound, reader.package) if callable(target) else None
        if found is None and target is _MISSING:
            found = positions.get(name or "") or set()
        for index in found or ():
            if index < len(node.args) and not isinstance(node.args[index], ast.Starred):
                yield node.args[index]
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and key.value == "reason_code":
                yield value
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and target.id.startswith("REASON_") and reader.function_of(node) is None:
                yield node.value
            elif (isinstance(target, ast.Name) and target.id == "reason_code") or (
                isinstance(target, ast.Attribute) and target.attr in REASON_ATTRS
            ):
                yield node.value
