"""Path permissions from Python: deepagents' ``FilesystemPermission`` rules given to
``LocalSandbox(permissions=…)`` hold agentd's file verbs (deepagents' middleware strings, denied
paths left out of listings) and every command (landlock), and :func:`agentd.permission_rules` turns
what ``create_deep_agent(permissions=…)`` takes into agentd's rules. Last, deepagents'
``CompositeBackend`` with such a sandbox as its default and a ``StateBackend`` route, through the
standard verbs."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deepagents import FilesystemPermission
from deepagents.backends import CompositeBackend, StateBackend
from deepagents.middleware.filesystem import FilesystemState
from langgraph.graph import END, START, StateGraph

import agentd

# -- the converter --------------------------------------------------------------------------------


def test_deepagents_rules_and_dicts_become_agentd_rules() -> None:
    rules = [
        FilesystemPermission(operations=["write"], paths=["/ws/src/**"], mode="deny"),
        FilesystemPermission(operations=["read", "write"], paths=["/ws/**", "/data/*.csv"]),
        {"operations": ["read"], "paths": ["/ws/.env"], "mode": "deny"},
        {"operations": ["write"], "paths": ["/ws/out/**"]},
        "deny:read,write:/ws/a:b/{x,y}/**",
    ]
    assert agentd.permission_rules(rules) == [
        {"operations": ["write"], "paths": ["/ws/src/**"], "mode": "deny"},
        {"operations": ["read", "write"], "paths": ["/ws/**", "/data/*.csv"], "mode": "allow"},
        {"operations": ["read"], "paths": ["/ws/.env"], "mode": "deny"},
        {"operations": ["write"], "paths": ["/ws/out/**"], "mode": "allow"},
        {"operations": ["read", "write"], "paths": ["/ws/a:b/{x,y}/**"], "mode": "deny"},
    ]
    assert agentd.permission_rules([]) == []
    # Its output is its input's fixed point: a converted list may be given again (LocalSandbox does).
    assert agentd.permission_rules(agentd.permission_rules(rules)) == agentd.permission_rules(rules)


def test_interrupt_fails_closed_unless_told_otherwise() -> None:
    ask = [
        FilesystemPermission(operations=["write"], paths=["/ws/deploy/**"], mode="interrupt"),
        {"operations": ["read"], "paths": ["/ws/keys/**"], "mode": "interrupt"},
        "interrupt:read,write:/ws/a:b/**",
    ]
    assert [rule["mode"] for rule in agentd.permission_rules(ask)] == ["deny", "deny", "deny"]
    assert [rule["mode"] for rule in agentd.permission_rules(ask, interrupt="deny")] == ["deny", "deny", "deny"]
    assert agentd.permission_rules(ask, interrupt="allow") == [
        {"operations": ["write"], "paths": ["/ws/deploy/**"], "mode": "allow"},
        {"operations": ["read"], "paths": ["/ws/keys/**"], "mode": "allow"},
        {"operations": ["read", "write"], "paths": ["/ws/a:b/**"], "mode": "allow"},
    ]
    with pytest.raises(ValueError, match="interrupt must be"):
        agentd.permission_rules(ask, interrupt="ask")  # type: ignore[arg-type]
    # Checked even when no rule asks.
    with pytest.raises(ValueError, match="interrupt must be"):
        agentd.permission_rules([], interrupt="interrupt")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({"operations": ["write"], "paths": ["ws/**"], "mode": "deny"}, "must start with '/'"),
        ({"operations": ["write"], "paths": ["/ws/../etc"]}, "must not contain '..'"),
        ({"operations": ["write"], "paths": ["/ws\\..\\etc"]}, "must not contain '..'"),
        ({"operations": ["read"], "paths": ["/~/x"]}, "must not contain '~'"),
        ({"operations": ["read"], "paths": ["/a\0b"]}, "NUL"),
        # wcmatch (deepagents' matcher) expands it; agentd refuses it rather than match less.
        ({"operations": ["write"], "paths": ["/ws/{1..3}/**"], "mode": "deny"}, "brace sequence"),
        ({"operations": ["exec"], "paths": ["/ws"]}, "operation 'exec' is not"),
        ({"operations": [], "paths": ["/ws"]}, "at least one operation"),
        ({"operations": ["read"], "paths": []}, "at least one path"),
        ({"operations": "read", "paths": ["/ws"]}, "operations must be a list"),
        ({"operations": ["read"], "paths": "/ws/**"}, "paths must be a list"),
        ({"operations": ["read"], "paths": None}, "paths: unexpected type"),
        ({"operations": ["read"], "paths": [7]}, "paths[0]: unexpected type"),
        ({"operations": ["read", 7], "paths": ["/ws"]}, "operations[1]: unexpected type"),
        ({"operations": ["read"], "paths": ["/ws"], "mode": "block"}, 'mode \'block\' is not "allow" or "deny"'),
        ({"operations": ["read"], "paths": ["/ws"], "mode": 1}, "mode: unexpected type"),
        ({"operations": ["read"], "paths": ["/ws"], "modes": "deny"}, "unknown field `modes`"),
        ({"paths": ["/ws"]}, "missing field"),
        ("deny:write", "expected MODE:OPERATIONS:PATH"),
        ("block:write:/x", "mode 'block' is not"),
        ("deny:exec:/x", "operation 'exec' is not"),
        ("deny:read,:/x", "operation '' is not"),
        ("deny:write:x", "must start with '/'"),
        ("interrupt:write:x", "must start with '/'"),
        (b"deny:write:/x", "a rule is a deepagents FilesystemPermission"),
        (("deny", ["write"], ["/x"]), "a rule is a deepagents FilesystemPermission"),
    ],
)
def test_a_malformed_rule_is_a_value_error_naming_it(rule: Any, says: str) -> None:
    good = {"operations": ["read"], "paths": ["/ok/**"]}
    with pytest.raises(ValueError, match="permissions\\[1\\]") as raised:
        agentd.permission_rules([good, rule])
    assert says in str(raised.value)
    assert repr(rule) in str(raised.value)


def test_agentds_parser_reads_one_rule() -> None:
    """The native parser ``permission_rules`` calls for each rule: agentd's own (a profile's, a
    request's, ``agentctl --permission``'s), with what is wrong and not which rule (the caller says)."""
    assert agentd._agentd.permission_rule("deny:read,write:/a:b") == {
        "operations": ["read", "write"],
        "paths": ["/a:b"],
        "mode": "deny",
    }
    assert agentd._agentd.permission_rule({"operations": ["read"], "paths": ["/x"]}) == {
        "operations": ["read"],
        "paths": ["/x"],
        "mode": "allow",
    }
    with pytest.raises(ValueError, match="^operation 'exec' is not \"read\" or \"write\"$"):
        agentd._agentd.permission_rule("deny:exec:/x")
    # deepagents' third mode is the Python layer's to map: agentd says why it refuses it.
    with pytest.raises(ValueError, match="^mode 'interrupt' .*ask a person first"):
        agentd._agentd.permission_rule({"operations": ["read"], "paths": ["/x"], "mode": "interrupt"})


def test_a_single_rule_is_not_a_list_of_rules() -> None:
    for not_a_list in ("deny:write:/x", {"operations": ["read"], "paths": ["/x"]}):
        with pytest.raises(ValueError, match="must be a list of rules"):
            agentd.permission_rules(not_a_list)  # type: ignore[arg-type]


def test_local_sandbox_refuses_bad_rules_before_starting() -> None:
    with pytest.raises(ValueError, match=r"permissions\[0\].*must start with '/'"):
        agentd.LocalSandbox(permissions=[{"operations": ["read"], "paths": ["rel/**"]}])
    # The native layer checks what it is given too (the .pyi's dicts), by agentd's own rules.
    with pytest.raises(ValueError, match=r"permissions\[0\]"):
        agentd._agentd.Sandbox.local(None, True, None, None, None, [{"operations": ["exec"], "paths": ["/x"]}])
    with pytest.raises(ValueError, match=r"permissions\[0\].*must not contain '\.\.'"):
        agentd._agentd.Sandbox.local(None, True, None, None, None, [{"operations": ["read"], "paths": ["/a/../b"]}])
    # A str is a sequence to Python: "/" is not read as the list ["/"].
    with pytest.raises(ValueError, match=r"permissions\[1\] .*paths must be a list"):
        agentd._agentd.Sandbox.local(None, True, None, None, None, ["deny:read:/x", {"operations": ["read"], "paths": "/"}])
    # agentd enforces them through its profile: an unconfined sandbox has none.
    with pytest.raises(agentd.StartError, match="confined"):
        agentd.LocalSandbox(confined=False, permissions=["deny:write:/x/**"])


# -- a sandbox that holds them ----------------------------------------------------------------------


def need_landlock(sandbox: agentd.LocalSandbox) -> None:
    """Skips without landlock (agentd's hello says which ABI it found), or fails when
    ``AGENTD_REQUIRE_LANDLOCK`` is set (CI)."""
    report = sandbox.enforcement()
    assert report is not None, "the embedded default runs under a profile"
    if report["landlock_abi"] >= 3:  # noqa: PLR2004  (write rules are full from ABI 3)
        return
    why = f"landlock ABI {report['landlock_abi']}: write rules are not fully enforced here"
    if os.environ.get("AGENTD_REQUIRE_LANDLOCK"):
        pytest.fail(f"{why} (AGENTD_REQUIRE_LANDLOCK is set)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    """A directory the sandbox user can reach (pytest's own is root's, mode 0700) with ``src/x``
    and ``secret/key`` (both denied below), and ``other/``: all there before the sandbox starts,
    so each rule's subtree exists when agentd resolves it."""
    base = Path(tempfile.mkdtemp(prefix="agentd-py-permissions-"))
    base.chmod(0o755)
    for name in ("src", "other", "secret"):
        (base / name).mkdir()
    (base / "src" / "x").write_text("original needle\n")
    (base / "secret" / "key").write_text("hunter2 needle\n")
    (base / "notes.txt").write_text("a needle in the open\n")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def rules(tree: Path) -> list[FilesystemPermission]:
    return [
        FilesystemPermission(operations=["write"], paths=[f"{tree}/src/**"], mode="deny"),
        FilesystemPermission(operations=["read", "write"], paths=[f"{tree}/secret/**"], mode="deny"),
    ]


@pytest.fixture(scope="module")
def guarded(tree: Path, rules: list[FilesystemPermission]) -> Iterator[agentd.LocalSandbox]:
    with agentd.LocalSandbox(writable_roots=[tree], permissions=rules) as sandbox:
        yield sandbox


def test_commands_cannot_write_a_denied_subtree(tree: Path, guarded: agentd.LocalSandbox) -> None:
    need_landlock(guarded)
    for command in (f"sed -i s/original/changed/ {tree}/src/x", f"echo changed > {tree}/src/x", "echo new > src/y"):
        result = guarded.execute(f"cd {tree} && {command}")
        assert result.exit_code != 0, f"{command}: {result.output}"
    assert (tree / "src" / "x").read_text() == "original needle\n"
    assert not (tree / "src" / "y").exists()
    # The rest of the writable root is writable, and src stays readable.
    ok = guarded.execute(f"cd {tree} && echo ok > other/y && cat other/y src/x")
    assert (ok.output, ok.exit_code) == ("ok\noriginal needle\n", 0)
    assert (tree / "other" / "y").read_text() == "ok\n"


def test_commands_cannot_read_a_read_denied_subtree(tree: Path, guarded: agentd.LocalSandbox) -> None:
    need_landlock(guarded)
    result = guarded.execute(f"cat {tree}/secret/key")
    assert result.exit_code != 0
    assert "hunter2" not in result.output
    assert guarded.execute(f"cat {tree}/notes.txt").output == "a needle in the open\n"


def test_the_hello_reports_each_rule(tree: Path, guarded: agentd.LocalSandbox) -> None:
    need_landlock(guarded)
    report = guarded.enforcement()
    assert report is not None
    levels = {rule["rule"]: rule["level"] for rule in report["permissions"]}
    assert levels == {f"deny:write:{tree}/src/**": "full", f"deny:read,write:{tree}/secret/**": "full"}


def test_the_file_verbs_answer_with_deepagents_strings(tree: Path, guarded: agentd.LocalSandbox) -> None:
    denied = f"{tree}/src/new.py"
    assert guarded.write(denied, "x").error == f"Error: permission denied for write on {denied}"
    assert not Path(denied).exists()
    edited = guarded.edit(f"{tree}/src/x", "original", "changed")
    assert edited.error == f"Error: permission denied for write on {tree}/src/x"
    assert (tree / "src" / "x").read_text() == "original needle\n"
    secret = f"{tree}/secret/key"
    assert guarded.read(secret).error == f"Error: permission denied for read on {secret}"
    [download] = guarded.download_files([secret])
    assert (download.content, download.error) == (None, "permission_denied")
    [upload] = guarded.upload_files([(f"{tree}/src/up", b"x")])
    assert upload.error == "permission_denied"
    assert not (tree / "src" / "up").exists()
    # What they allow still works.
    assert guarded.read(f"{tree}/src/x").file_data["content"] == "original needle"
    assert guarded.write(f"{tree}/other/z", "z\n").error is None
    assert (tree / "other" / "z").read_text() == "z\n"


def test_listings_and_matches_leave_read_denied_paths_out(tree: Path, guarded: agentd.LocalSandbox) -> None:
    listed = {entry["path"] for entry in guarded.ls(str(tree)).entries or []}
    assert f"{tree}/src" in listed
    assert f"{tree}/notes.txt" in listed
    # As deepagents' middleware filters: `secret/**` names what is beneath `secret`, not the
    # directory itself, which stays listed, empty.
    assert f"{tree}/secret" in listed
    assert guarded.ls(f"{tree}/secret").entries == []
    globbed = {match["path"] for match in guarded.glob("**/*", str(tree)).matches or []}
    assert f"{tree}/src/x" in globbed
    assert not [path for path in globbed if "/secret/" in path], globbed
    found = {match["path"] for match in guarded.grep("needle", str(tree)).matches or []}
    assert found == {f"{tree}/src/x", f"{tree}/notes.txt"}


# -- deepagents' CompositeBackend over it -------------------------------------------------------------


def in_graph(work: Any) -> Any:
    """What ``work()`` returns, run inside a one-node LangGraph graph over deepagents'
    ``FilesystemState``: ``StateBackend`` reads and writes the graph's ``files`` channel, so it works
    only there (read-your-writes within the node)."""
    box: dict[str, Any] = {}

    def node(_state: FilesystemState) -> dict[str, Any]:
        box["result"] = work()
        return {}

    graph = StateGraph(FilesystemState)
    graph.add_node("work", node)
    graph.add_edge(START, "work")
    graph.add_edge("work", END)
    graph.compile().invoke({"messages": [], "files": {}})
    return box["result"]


def test_composite_backend_with_an_agentd_default_and_a_state_route(
    tree: Path, guarded: agentd.LocalSandbox
) -> None:
    composite = CompositeBackend(default=guarded, routes={"/state/": StateBackend()})
    ws = f"{tree}/other"

    def work() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for base in (ws, "/state"):
            seen[base] = {
                "write": composite.write(f"{base}/a.txt", "alpha\nbeta needle\n").error,
                "edit": composite.edit(f"{base}/a.txt", "alpha", "ALPHA").error,
                "read": composite.read(f"{base}/a.txt").file_data["content"],
                "ls": sorted(entry["path"] for entry in composite.ls(f"{base}/").entries or []),
                "glob": [match["path"] for match in composite.glob("*.txt", f"{base}/").matches or []],
                "grep": [(m["path"], m["line"], m["text"]) for m in composite.grep("needle", f"{base}/").matches or []],
            }
        seen["denied"] = composite.write(f"{tree}/src/z", "z").error
        seen["execute"] = composite.execute(f"cat {ws}/a.txt /state/a.txt")
        seen["root"] = sorted(entry["path"] for entry in composite.ls("/").entries or [])
        return seen

    seen = in_graph(work)
    for base in (ws, "/state"):
        got = seen[base]
        assert (got["write"], got["edit"]) == (None, None), (base, got)
        # The contract's read (BaseSandbox's) leaves the last line's newline out; StateBackend keeps it.
        assert got["read"] == {ws: "ALPHA\nbeta needle", "/state": "ALPHA\nbeta needle\n"}[base]
        assert f"{base}/a.txt" in got["ls"], (base, got["ls"])
        assert f"{base}/a.txt" in [path.replace("//", "/") for path in got["glob"]], (base, got["glob"])
        assert got["grep"] == [(f"{base}/a.txt", 2, "beta needle")], base
    assert seen["denied"] == f"Error: permission denied for write on {tree}/src/z"
    # `execute` runs on the default: it sees the sandbox's file, not the route's.
    assert seen["execute"].output.startswith("ALPHA\nbeta needle\n")
    assert "No such file" in seen["execute"].output
    assert seen["execute"].exit_code != 0
    assert not (tree / "src" / "z").exists()
    assert "/state/" in seen["root"]
    assert (tree / "other" / "a.txt").read_text() == "ALPHA\nbeta needle\n"


def test_deepagents_leaves_a_sandboxs_rules_to_agentd(tree: Path, guarded: agentd.LocalSandbox) -> None:
    """What the docs say of deepagents 0.7.32: its middleware refuses rules for a backend that runs
    commands, unless each falls under a ``CompositeBackend`` route; the sandbox's rules are agentd's
    to enforce. (If this starts failing, deepagents changed and the docs need another look.)"""
    from deepagents.middleware.filesystem import FilesystemMiddleware  # noqa: PLC0415

    sandbox_rules = [FilesystemPermission(operations=["write"], paths=[f"{tree}/src/**"], mode="deny")]
    with pytest.raises(NotImplementedError, match="SandboxBackendProtocol"):
        FilesystemMiddleware(backend=guarded, permissions=sandbox_rules)
    composite = CompositeBackend(default=guarded, routes={"/state/": StateBackend()})
    route_rules = [FilesystemPermission(operations=["write"], paths=["/state/locked/**"], mode="deny")]
    FilesystemMiddleware(backend=composite, permissions=route_rules)
