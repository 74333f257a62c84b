"""A sandbox belongs to the process that made it.

A child made by fork (``os.fork``, multiprocessing's ``fork`` start method) inherits a copy: dropping
it must not end the parent's sandbox, using it must raise ``InheritedSandboxError`` at once (the
runtime threads that would answer live only in the parent), and the child can make its own. And a
``with`` block ends its sandbox however it ends, by an exception or Ctrl-C too.

Every fork here is robust: the child always leaves through ``os._exit`` (never through pytest's
teardown), and the parent gives it a deadline, then kills it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import os
import select
import signal
import time
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentd

# Python 3.12+ warns that forking a process with threads may deadlock the child; these tests fork
# such a process on purpose, to show that it does not.
pytestmark = pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")

#: How long a child may take; a child that uses an inherited sandbox without the owner check hangs.
CHILD_DEADLINE = 30.0

#: How fast a call on an inherited sandbox must raise.
RAISE_WITHIN = 1.0


def in_child(body: Callable[[], Any]) -> Any:
    """Runs ``body`` in a child made by ``os.fork`` and returns what it returned (through a pipe,
    as JSON); a child that raised, hung or died fails the test."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            try:
                report = {"value": body()}
            except BaseException:  # noqa: BLE001 - everything goes back to the parent
                report = {"error": traceback.format_exc()}
            with os.fdopen(write_fd, "w") as out:
                json.dump(report, out)
        finally:
            os._exit(0)
    os.close(write_fd)
    deadline = time.monotonic() + CHILD_DEADLINE
    try:
        text = read_until(read_fd, deadline)
    finally:
        os.close(read_fd)
        reap(pid, deadline)
    if text is None:
        pytest.fail(f"the child did not finish within {CHILD_DEADLINE} s")
    if not text:
        pytest.fail("the child died without a report")
    report = json.loads(text)
    if "error" in report:
        pytest.fail(f"the child raised:\n{report['error']}")
    return report["value"]


def read_until(fd: int, deadline: float) -> str | None:
    """Everything until end of file, or ``None`` at the deadline."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks).decode()
        chunks.append(chunk)


def reap(pid: int, deadline: float) -> None:
    """Waits for ``pid`` until ``deadline``, then kills it."""
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (agentd after a SIGTERM, not yet reaped) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # The state follows the command name, which is in parentheses and may hold spaces.
    return not stat.rpartition(")")[2].lstrip().startswith("Z")


def assert_alive(sandbox: agentd.LocalSandbox, pid: int, workspace: Path) -> None:
    """The parent's sandbox as it was: same agentd, same workspace, and it answers."""
    assert running(pid), "the parent's agentd is gone"
    assert sandbox.pid == pid
    assert (workspace / "mine.txt").read_text() == "parent\n", "the parent's workspace is gone"
    assert sandbox.execute("cat mine.txt").output == "parent\n"
    assert sandbox.read(f"{workspace}/mine.txt").file_data is not None


def new_parent() -> tuple[list[agentd.LocalSandbox], int, Path]:
    """A sandbox held only by a list (no local names that a child's frames would keep alive),
    its agentd's pid and its workspace, which holds ``mine.txt``."""
    holder = [agentd.LocalSandbox()]
    workspace = holder[0].workspace
    holder[0].write(f"{workspace}/mine.txt", "parent\n")
    return holder, holder[0].pid, workspace


def test_a_child_that_drops_its_copy_leaves_the_parents_sandbox_alone() -> None:
    holder, pid, workspace = new_parent()
    copy = weakref.ref(holder[0])

    def drop_copy() -> bool:
        holder.clear()
        gc.collect()
        return copy() is None

    assert in_child(drop_copy), "the child still held its copy: the test dropped nothing"
    assert_alive(holder[0], pid, workspace)
    holder[0].close()
    assert gone(pid)
    assert not workspace.exists()


#: The sandbox a multiprocessing child inherits (with the fork start method nothing is pickled).
INHERITED: list[agentd.LocalSandbox] = []


def collect_inherited() -> None:
    copy = weakref.ref(INHERITED[0])
    INHERITED.clear()
    gc.collect()
    # The exit code says whether the copy was collected, hence dropped, in the child.
    os._exit(0 if copy() is None else 3)


def test_a_multiprocessing_child_that_collects_its_copy_leaves_the_parents_sandbox_alone() -> None:
    holder, pid, workspace = new_parent()
    # The module's list is the only holder, so the child's `clear` drops its last reference.
    INHERITED.append(holder.pop())
    try:
        child = multiprocessing.get_context("fork").Process(target=collect_inherited)
        child.start()
        child.join(CHILD_DEADLINE)
        if child.exitcode is None:
            child.kill()
            child.join()
        assert child.exitcode == 0, f"the child ended with {child.exitcode} (3: its copy was not collected)"
        assert_alive(INHERITED[0], pid, workspace)
        INHERITED[0].close()
    finally:
        INHERITED.clear()


def test_a_childs_calls_on_an_inherited_sandbox_raise_at_once() -> None:
    holder, pid, workspace = new_parent()
    parent = os.getpid()

    def use_copy() -> dict[str, Any]:
        sandbox = holder[0]
        calls: dict[str, Callable[[], object]] = {
            "execute": lambda: sandbox.execute("echo child > child.txt"),
            "ls": lambda: sandbox.ls(str(workspace)),
            "read": lambda: sandbox.read(f"{workspace}/mine.txt"),
            "write": lambda: sandbox.write(f"{workspace}/mine.txt", "child\n"),
            "download_files": lambda: sandbox.download_files([f"{workspace}/mine.txt"]),
            "upload_files": lambda: sandbox.upload_files([(f"{workspace}/mine.txt", b"child\n")]),
            "closed": lambda: sandbox.closed,
            "aexecute": lambda: asyncio.run(sandbox.aexecute("echo child")),
            "aread": lambda: asyncio.run(sandbox.aread(f"{workspace}/mine.txt")),
        }
        outcomes = {}
        for name, call in calls.items():
            started = time.monotonic()
            try:
                call()
                raised = None
            except agentd.InheritedSandboxError as error:
                raised = str(error)
            outcomes[name] = (raised, time.monotonic() - started)
        # Closing the copy, also by leaving a `with` block, does nothing: the sandbox is the parent's.
        started = time.monotonic()
        sandbox.close()
        with sandbox:
            pass
        asyncio.run(sandbox.aclose())
        outcomes["close"] = (None, time.monotonic() - started)
        return outcomes

    outcomes = in_child(use_copy)
    for name, (raised, seconds) in outcomes.items():
        assert seconds < RAISE_WITHIN, f"{name} took {seconds:.3f} s in the child"
        if name == "close":
            continue
        assert raised is not None, f"{name} did not raise InheritedSandboxError"
        assert f"belongs to process {parent}" in raised, raised
        assert "make a new sandbox" in raised, raised
    assert_alive(holder[0], pid, workspace)
    assert not (workspace / "child.txt").exists()
    assert not holder[0].closed
    holder[0].close()


def test_a_child_makes_its_own_sandbox_and_its_exit_ends_only_that_one() -> None:
    holder, pid, workspace = new_parent()

    def own_sandbox() -> dict[str, Any]:
        # The runtime's threads stayed in the parent: this sandbox runs on the child's own runtime.
        closed = agentd.LocalSandbox()
        with closed:
            closed_agentd, closed_workspace = closed.pid, str(closed.workspace)
            sync = closed.execute("echo child").output
            awaited = asyncio.run(closed.aexecute("echo awaited")).output
        # One the child never closes: collected at its end, as the process exit would.
        dropped = agentd.LocalSandbox()
        dropped_agentd, dropped_workspace = dropped.pid, str(dropped.workspace)
        assert dropped.execute("true").exit_code == 0
        del dropped
        gc.collect()
        # The inherited one still refuses: having a runtime of its own does not make it the child's.
        try:
            holder[0].execute("true")
            inherited = "answered"
        except agentd.InheritedSandboxError:
            inherited = "refused"
        return {
            "outputs": [sync, awaited],
            "inherited": inherited,
            "agentds": [closed_agentd, dropped_agentd],
            "workspaces": [closed_workspace, dropped_workspace],
        }

    report = in_child(own_sandbox)
    assert report["outputs"] == ["child\n", "awaited\n"]
    assert report["inherited"] == "refused"
    for child_agentd, child_workspace in zip(report["agentds"], report["workspaces"], strict=True):
        assert child_agentd != pid
        assert gone(child_agentd), "the child's own agentd outlived it"
        assert not Path(child_workspace).exists(), "the child's own workspace outlived it"
    assert_alive(holder[0], pid, workspace)
    holder[0].close()


async def test_the_parents_coroutines_still_run_after_a_child_used_its_own_runtime() -> None:
    holder, pid, workspace = new_parent()

    def child_runtime() -> str:
        with agentd.LocalSandbox() as own:
            return asyncio.run(own.aexecute("echo child")).output

    assert in_child(child_runtime) == "child\n"
    assert (await holder[0].aexecute("cat mine.txt")).output == "parent\n"
    assert running(pid)
    await holder[0].aclose()
    assert not workspace.exists()


def test_a_with_block_ended_by_an_exception_ends_its_sandbox() -> None:
    with pytest.raises(RuntimeError, match="inside the block"), agentd.LocalSandbox() as sandbox:
        pid, workspace = sandbox.pid, sandbox.workspace
        assert sandbox.execute("true").exit_code == 0
        raise RuntimeError("inside the block")  # noqa: EM101, TRY003
    assert gone(pid), "agentd outlived the block"
    assert not workspace.exists(), "the workspace outlived the block"


def test_a_with_block_ended_by_ctrl_c_ends_its_sandbox() -> None:
    with pytest.raises(KeyboardInterrupt), agentd.LocalSandbox() as sandbox:
        pid, workspace = sandbox.pid, sandbox.workspace
        assert sandbox.execute("true").exit_code == 0
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # the handler raises KeyboardInterrupt here
    assert gone(pid), "agentd outlived the block"
    assert not workspace.exists(), "the workspace outlived the block"


async def test_an_async_with_block_ended_by_an_exception_ends_its_sandbox() -> None:
    with pytest.raises(RuntimeError, match="inside the block"):
        async with agentd.LocalSandbox() as sandbox:
            pid, workspace = sandbox.pid, sandbox.workspace
            assert (await sandbox.aexecute("true")).exit_code == 0
            raise RuntimeError("inside the block")  # noqa: EM101, TRY003
    assert gone(pid), "agentd outlived the block"
    assert not workspace.exists(), "the workspace outlived the block"
