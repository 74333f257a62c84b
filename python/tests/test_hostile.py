"""The package against an agentd that lies (``evil-agentd``, the workspace's test server, built by
the ``test_binaries`` fixture): every wait ends at its deadline, a download stops at its announced size, a 2 GiB answer
costs bounded memory, and nothing is left on disk."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentd

@pytest.fixture
def evil(request: pytest.FixtureRequest, test_binaries: dict[str, Path]) -> Iterator[str]:
    """The url of an ``evil-agentd`` in the mode the test names (``@pytest.mark.parametrize``)."""
    child = subprocess.Popen(
        [os.fspath(test_binaries["evil-agentd"]), request.param], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        child.terminate()
        child.wait(timeout=10)


def timed(call) -> tuple[BaseException | object, float]:  # noqa: ANN001
    started = time.monotonic()
    try:
        out: BaseException | object = call()
    except Exception as err:  # noqa: BLE001
        out = err
    return out, time.monotonic() - started


@pytest.mark.parametrize("evil", ["no-upgrade", "no-hello"], indirect=True)
def test_a_server_that_never_says_hello_fails_the_connect_at_its_deadline(evil: str) -> None:
    out, took = timed(lambda: agentd.AgentdSandbox(evil, connect_deadline=1))
    assert isinstance(out, agentd.errors.TimeoutError), out
    assert isinstance(out, TimeoutError)
    assert "no answer within 1s" in str(out)
    assert took < 6, took


@pytest.mark.parametrize("evil", ["mute"], indirect=True)
def test_a_server_that_never_answers_fails_each_call_at_its_deadline(evil: str) -> None:
    sandbox = agentd.AgentdSandbox(evil, exec_margin=1, silence_deadline=1)
    out, took = timed(lambda: sandbox.execute("true", timeout=1))
    assert isinstance(out, TimeoutError) and 2 <= took < 7, (out, took)
    for call in (lambda: sandbox.ls("/"), lambda: sandbox.download_files(["/x"]), lambda: sandbox.upload_files([("/x", b"1")])):
        out, took = timed(call)
        assert isinstance(out, TimeoutError) and took < 6, (out, took)
    sandbox.close()


@pytest.mark.parametrize("evil", ["endless-download", "chunk-first"], indirect=True)
def test_a_lying_download_is_an_error_and_leaves_no_file(evil: str, tmp_path: Path) -> None:
    sandbox = agentd.AgentdSandbox(evil, silence_deadline=5)
    out, took = timed(lambda: sandbox.download_file("/x", tmp_path / "out"))
    assert isinstance(out, agentd.errors.ProtocolError) and took < 15, (out, took)
    assert list(tmp_path.iterdir()) == []
    sandbox.close()
    # A new link: the lying server is still busy with the first download on the old one.
    sandbox = agentd.AgentdSandbox(evil, silence_deadline=5)
    out, _ = timed(lambda: sandbox.download_files(["/x"]))
    assert isinstance(out, agentd.errors.ProtocolError), out
    sandbox.close()


def test_bad_deadlines_are_refused() -> None:
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="silence_deadline"):
            agentd.AgentdSandbox("ws://127.0.0.1:9", silence_deadline=bad)


@pytest.mark.parametrize("evil", ["huge-download"], indirect=True)
def test_a_2_gib_answer_costs_bounded_memory(evil: str, tmp_path: Path) -> None:
    # In a child interpreter, so that its peak RSS is its own: download_files refuses a file it
    # would have to hold (file_too_large, at once); download_file streams it to disk, where the
    # lying digest refuses it at the end and nothing stays.
    script = textwrap.dedent(
        f"""
        import sys, time, agentd
        sandbox = agentd.AgentdSandbox({evil!r})
        started = time.monotonic()
        [answer] = sandbox.download_files(["/x"])
        assert (answer.content, answer.error) == (None, "file_too_large"), answer
        assert time.monotonic() - started < 5
        try:
            sandbox.download_file("/x", {os.fspath(tmp_path / "out")!r})
        except agentd.errors.ProtocolError as err:
            assert "sha256 mismatch" in str(err), err
        else:
            raise AssertionError("a wrong digest was accepted")
        # VmHWM, not ru_maxrss: a process that exec'd keeps, as its ru_maxrss, the RSS of the
        # process it was forked from (here pytest's, 129 MiB late in the suite).
        print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")))
        """
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stdout.strip())
    print(f"python download of 2 GiB: peak RSS {peak_kib // 1024} MiB (children before: {before // 1024} MiB)")
    assert peak_kib < 128 * 1024, peak_kib
    assert list(tmp_path.iterdir()) == []
