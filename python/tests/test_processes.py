"""Processes from Python: spawn, stdin, terminal, attach by id, kill of a tree, and the asyncio
twins. A real agentd in each test."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

import agentd


@pytest.fixture
def sandbox() -> Iterator[agentd.LocalSandbox]:
    with agentd.LocalSandbox() as sb:
        yield sb


def test_a_spawned_process_reads_its_stdin_and_its_output_is_had_again_by_id(sandbox: agentd.LocalSandbox) -> None:
    cat = sandbox.spawn("cat; exit 3", stdin=True)
    cat.write_stdin(b"one\n")
    cat.write_stdin("two\n")
    cat.close_stdin()
    result = cat.wait()
    assert (result.output, result.exit_code, result.truncated) == ("one\ntwo\n", 3, False)
    again = sandbox.attach(cat.id)
    assert again.output() == b"one\ntwo\n"
    assert again.output(4) == b"two\n"
    listed = {p["process"]: p for p in sandbox.processes()}
    assert listed[cat.id]["state"] == "exited"
    assert listed[cat.id]["exit_code"] == 3
    with pytest.raises(agentd.RefusedError, match="closed|ended"):
        cat.write_stdin("late\n")


def test_kill_ends_the_process_and_its_background_children(sandbox: agentd.LocalSandbox) -> None:
    server = sandbox.spawn("sleep 300 & echo $! > bg.pid; sleep 300")
    assert server.poll(0.3)["state"] == "running"
    assert server.kill() >= 2
    info = server.poll()
    assert (info["state"], info["cancelled"]) == ("exited", True)
    child = int((sandbox.workspace / "bg.pid").read_text())
    alive = os.path.exists(f"/proc/{child}") and " Z " not in open(f"/proc/{child}/stat").read()
    assert not alive, f"the background child {child} survived"


def test_a_terminal_has_the_size_asked_and_takes_a_resize(sandbox: agentd.LocalSandbox) -> None:
    tty = sandbox.spawn("test -t 1 && echo tty; stty size; read go; stty size", pty=(30, 90))
    tty.resize(10, 50)
    tty.write_stdin("go\n")
    out = tty.wait().output
    assert "tty" in out, out
    assert out.rstrip().endswith("10 50"), out
    assert "30 90" in sandbox.spawn("stty size", pty=(30, 90)).wait().output


def test_unknown_ids_and_processes_without_a_pipe_are_refused(sandbox: agentd.LocalSandbox) -> None:
    with pytest.raises(agentd.RefusedError, match="never existed"):
        sandbox.attach("00000000-9").output()
    quiet = sandbox.spawn("sleep 5")
    with pytest.raises(agentd.RefusedError, match="no stdin pipe"):
        quiet.write_stdin("x")
    quiet.kill()


def test_the_asyncio_twins(sandbox: agentd.LocalSandbox) -> None:
    async def main() -> None:
        echo = await sandbox.aspawn("cat", stdin=True)
        await echo.write_stdin("async\n")
        await echo.close_stdin()
        result = await echo.wait()
        assert (result.output, result.exit_code) == ("async\n", 0)
        assert await sandbox.aattach(echo.id).output() == b"async\n"
        sleeper = await sandbox.aspawn("sleep 30")
        assert (await sleeper.poll(0.1))["state"] == "running"
        await sleeper.kill()
        assert (await sleeper.poll())["state"] == "exited"
        assert any(p["process"] == sleeper.id for p in await sandbox.aprocesses())

    asyncio.run(main())
