"""Path permissions: deepagents' ``FilesystemPermission`` rules as agentd's profile rules.

The same rules deepagents' middleware applies to an agent's file tools: given to
``LocalSandbox(permissions=rules)``, agentd checks its file verbs by them (deepagents' error strings;
read-denied paths left out of ``ls``, ``glob``, ``grep``) and the kernel (landlock) holds every
command to them, so ``execute("sed -i … src/x")`` is refused where ``edit_file`` is. Each rule is
``{"operations": ["read" | "write", …], "paths": ["/absolute/glob/**", …], "mode": "allow" |
"deny"}``, the first rule that matches an operation and path deciding; the globs are deepagents'
dialect, matched against the sandbox's own paths. (deepagents 0.7.32's middleware takes rules for
a backend that runs commands only when they all fall under a ``CompositeBackend`` route: for the
sandbox itself, agentd is what enforces them.)

:func:`permission_rules` takes what ``create_deep_agent(permissions=…)`` takes
(``deepagents.FilesystemPermission`` objects), plain dicts of the same shape and agentd's command-line
form ``MODE:OPERATIONS:PATH`` (``deny:write:/ws/src/**``, as ``agentctl --permission``), and gives
agentd's dicts. deepagents' ``mode="interrupt"`` (ask a person first) has no meaning for a kernel:
it becomes ``interrupt`` (``"deny"`` by default, failing closed; ``"allow"`` leaves the asking to
the middleware alone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = ["permission_rules"]

_OPERATIONS = ("read", "write")
_MODES = ("allow", "deny", "interrupt")
_FIELDS = {"operations", "paths", "mode"}


def permission_rules(
    permissions: Iterable[Any], *, interrupt: Literal["deny", "allow"] = "deny"
) -> list[dict[str, Any]]:
    """agentd's rules (``{"operations", "paths", "mode"}`` dicts, in order) for ``permissions``:
    ``deepagents.FilesystemPermission`` objects (anything with ``operations``, ``paths`` and
    ``mode`` attributes), dicts of that shape (``mode`` defaults to ``"allow"``) or
    ``MODE:OPERATIONS:PATH`` strings.

    ``interrupt`` is what a rule with deepagents' ``mode="interrupt"`` becomes for agentd:
    ``"deny"`` (the default: the kernel cannot ask a person, so it refuses) or ``"allow"``.

    Raises ``ValueError`` naming the rule (its position and text) when one is malformed: an
    unknown operation or mode, no operation or path, a path that is not absolute or holds a
    ``..`` or ``~`` segment or a NUL.
    """
    if interrupt not in ("deny", "allow"):
        msg = f'interrupt must be "deny" or "allow" (what a rule with mode="interrupt" becomes), got {interrupt!r}'
        raise ValueError(msg)
    if isinstance(permissions, (str, bytes, Mapping)):
        msg = f"permissions must be a list of rules, got {type(permissions).__name__} {permissions!r}"
        raise ValueError(msg)
    rules = []
    for index, rule in enumerate(permissions):
        try:
            operations, paths, mode = _fields(rule)
            operations = _operations(operations)
            paths = _paths(paths)
        except ValueError as why:
            msg = f"permissions[{index}] {rule!r}: {why}"
            raise ValueError(msg) from None
        rules.append({"operations": operations, "paths": paths, "mode": interrupt if mode == "interrupt" else mode})
    return rules


def _fields(rule: Any) -> tuple[Any, Any, str]:
    """``(operations, paths, mode)`` of one rule in any of the accepted forms."""
    if isinstance(rule, str):
        return _parse(rule)
    if isinstance(rule, Mapping):
        unknown = set(rule) - _FIELDS
        if unknown:
            msg = f"unknown field(s) {sorted(map(str, unknown))}; a rule has operations, paths and mode"
            raise ValueError(msg)
        missing = {"operations", "paths"} - set(rule)
        if missing:
            msg = f"missing field(s) {sorted(missing)}"
            raise ValueError(msg)
        operations, paths, mode = rule["operations"], rule["paths"], rule.get("mode", "allow")
    elif all(hasattr(rule, name) for name in _FIELDS):
        operations, paths, mode = rule.operations, rule.paths, rule.mode
    else:
        msg = (
            f"a rule is a deepagents FilesystemPermission, a dict with operations, paths and mode, "
            f"or a MODE:OPERATIONS:PATH string, not {type(rule).__name__}"
        )
        raise ValueError(msg)
    if mode not in _MODES:
        msg = f'mode {mode!r} is not "allow", "deny" or "interrupt"'
        raise ValueError(msg)
    return operations, paths, mode


def _parse(text: str) -> tuple[list[str], list[str], str]:
    """agentd's command-line form: ``MODE:OPERATIONS:PATH``, one path (it may hold ``:``)."""
    parts = text.split(":", 2)
    if len(parts) != 3:  # noqa: PLR2004
        msg = "expected MODE:OPERATIONS:PATH, e.g. deny:write:/ws/src/**"
        raise ValueError(msg)
    mode, operations, path = parts
    if mode not in _MODES:
        msg = f'mode {mode!r} is not "allow", "deny" or "interrupt"'
        raise ValueError(msg)
    return operations.split(","), [path], mode


def _operations(operations: Any) -> list[str]:
    if isinstance(operations, str) or not isinstance(operations, Iterable):
        msg = f'operations must be a list (["read"], ["read", "write"]), got {operations!r}'
        raise ValueError(msg)
    operations = list(operations)
    if not operations:
        msg = 'a rule needs at least one operation ("read", "write")'
        raise ValueError(msg)
    for operation in operations:
        if operation not in _OPERATIONS:
            msg = f'operation {operation!r} is not "read" or "write"'
            raise ValueError(msg)
    return operations


def _paths(paths: Any) -> list[str]:
    if isinstance(paths, str) or not isinstance(paths, Iterable):
        msg = f'paths must be a list of absolute globs (["/ws/src/**"]), got {paths!r}'
        raise ValueError(msg)
    paths = list(paths)
    if not paths:
        msg = "a rule needs at least one path"
        raise ValueError(msg)
    for path in paths:
        _check_path(path)
    return paths


def _check_path(path: Any) -> None:
    """deepagents' checks (``FilesystemPermission.__post_init__``) and agentd's (no NUL)."""
    if not isinstance(path, str):
        msg = f"a path is a string, got {path!r}"
        raise ValueError(msg)  # noqa: TRY004  (the caller turns each into one ValueError naming the rule)
    if not path.startswith("/"):
        msg = f"Permission path must start with '/': {path!r}"
        raise ValueError(msg)
    if "\0" in path:
        msg = f"Permission path must not contain a NUL byte: {path!r}"
        raise ValueError(msg)
    segments = re.split(r"[/\\]", path)
    for segment in ("..", "~"):
        if segment in segments:
            msg = f"Permission path must not contain {segment!r}: {path!r}"
            raise ValueError(msg)
