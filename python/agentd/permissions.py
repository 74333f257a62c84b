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

Reading and checking a rule is agentd's own parser's (``agentd_protocol::permission``, through the
native module), the one a profile's, a request's and ``agentctl --permission``'s rules go through: the
same rule is accepted, or refused in the same words, everywhere. This module keeps what is Python's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from agentd import _agentd

__all__ = ["permission_rules"]

_FIELDS = ("operations", "paths", "mode")


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
    unknown operation, mode or field, no operation or path, a path that is not absolute or holds a
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
            rules.append(_agentd.permission_rule(_wire_form(rule, interrupt)))
        except ValueError as why:
            msg = f"permissions[{index}] {rule!r}: {why}"
            raise ValueError(msg) from None
    return rules


def _wire_form(rule: Any, interrupt: str) -> str | Mapping[str, Any]:
    """``rule`` as agentd reads it (a dict or a ``MODE:OPERATIONS:PATH`` string), deepagents'
    ``interrupt`` mode replaced by ``interrupt``; the rest is checked by agentd's parser."""
    if isinstance(rule, str):
        mode, colon, rest = rule.partition(":")
        return f"{interrupt}{colon}{rest}" if mode == "interrupt" else rule
    if isinstance(rule, Mapping):
        return {**rule, "mode": interrupt} if rule.get("mode") == "interrupt" else rule
    if all(hasattr(rule, name) for name in _FIELDS):
        # deepagents' FilesystemPermission: its fields as they are (a str where a list belongs is
        # refused, not split).
        return _wire_form({name: getattr(rule, name) for name in _FIELDS}, interrupt)
    msg = (
        f"a rule is a deepagents FilesystemPermission, a dict with operations, paths and mode, "
        f"or a MODE:OPERATIONS:PATH string, not {type(rule).__name__}"
    )
    raise ValueError(msg)
