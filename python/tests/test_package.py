"""The package's own behaviour: failure paths, transfers, the contract's strings, GIL and asyncio."""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import processes_with

import agentd
from agentd import types

@pytest.fixture
def sandbox() -> Iterator[agentd.LocalSandbox]:
    with agentd.LocalSandbox() as sb:
        yield sb


def test_results_are_deepagents_types(sandbox: agentd.LocalSandbox) -> None:
    from deepagents.backends import protocol
    from deepagents.backends.sandbox import BaseSandbox

    assert types.HAS_DEEPAGENTS
    assert isinstance(sandbox, BaseSandbox)
    result = sandbox.execute("echo hello; exit 3")
    assert result == protocol.ExecuteResponse(output="hello\n", exit_code=3, truncated=False)
    assert type(sandbox.ls("/")) is protocol.LsResult
    assert type(sandbox.read("/etc/hostname")) is protocol.ReadResult


def test_verb_errors_are_the_contracts_strings(sandbox: agentd.LocalSandbox) -> None:
    missing = f"{sandbox.workspace}/missing.txt"
    assert sandbox.read(missing).error == f"File '{missing}': file_not_found"
    assert sandbox.ls(missing).error == f"Path '{missing}': path_not_found"
    assert sandbox.read("/").error == "File '/': not_a_file"
    three = f"{sandbox.workspace}/three.txt"
    assert sandbox.write(three, "a\nb\nc").error is None
    assert sandbox.read(three, offset=3).error == f"File '{three}': Line offset 3 exceeds file length (3 lines)"
    # Relative paths: the verbs resolve them in the workspace, the transfers refuse them.
    assert sandbox.read("three.txt", limit=1).file_data == {"content": "a", "encoding": "utf-8"}
    assert sandbox.write("relative.txt", "x").error == "Failed to write file 'relative.txt': invalid_path"
    assert sandbox.download_files(["relative.txt"])[0].error == "invalid_path"
    assert sandbox.download_files([missing])[0].error == "file_not_found"
    assert sandbox.upload_files([(f"{sandbox.workspace}", b"x")])[0].error == "is_directory"


def test_wrong_token_is_an_authentication_error(served: tuple[str, str]) -> None:
    url, token = served
    with pytest.raises(agentd.AuthenticationError, match="refused the token"):
        agentd.AgentdSandbox(url, token="not-" + token)
    with pytest.raises(agentd.AuthenticationError):
        agentd.AgentdSandbox(url)
    with agentd.AgentdSandbox(url, token=token) as sandbox:
        assert sandbox.execute("echo ok").output == "ok\n"


def test_nothing_listening_is_a_connection_error(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(agentd.ConnectionError) as raised:
        agentd.AgentdSandbox(f"unix:{tmp_path}/nobody.sock")
    assert isinstance(raised.value, builtins.ConnectionError)


def test_daemon_gone_mid_call_raises_connection_error() -> None:
    marker = f"agentd-py-gone-{os.getpid()}-{time.monotonic_ns()}"
    sandbox = agentd.LocalSandbox()
    outcome: list[BaseException | object] = []

    def call() -> None:
        try:
            outcome.append(sandbox.execute(f"sleep 30 # {marker}"))
        except BaseException as error:  # noqa: BLE001
            outcome.append(error)

    worker = threading.Thread(target=call)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_with(marker), "the command never started"
        os.kill(sandbox.pid, signal.SIGKILL)
        worker.join(timeout=10)
        assert not worker.is_alive(), "the call did not return after agentd died"
        assert isinstance(outcome[0], agentd.ConnectionError), outcome
        with pytest.raises(agentd.ConnectionError):
            sandbox.execute("true")
    finally:
        # agentd killed by SIGKILL could not end its command: do it here.
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
        sandbox.close()


async def test_daemon_gone_mid_async_call_raises_connection_error() -> None:
    marker = f"agentd-py-agone-{os.getpid()}-{time.monotonic_ns()}"
    sandbox = agentd.LocalSandbox()
    try:
        call = asyncio.ensure_future(sandbox.aexecute(f"sleep 30 # {marker}"))
        for _ in range(500):
            if processes_with(marker):
                break
            await asyncio.sleep(0.02)
        os.kill(sandbox.pid, signal.SIGKILL)
        with pytest.raises(agentd.ConnectionError):
            await asyncio.wait_for(call, timeout=10)
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
        await sandbox.aclose()


def test_timeout_kills_the_whole_tree(sandbox: agentd.LocalSandbox) -> None:
    marker = f"agentd-py-timeout-{os.getpid()}-{time.monotonic_ns()}"
    started = time.monotonic()
    result = sandbox.execute(f"sh -c 'sleep 60 # {marker}' & sleep 60 # {marker}", timeout=1)
    assert time.monotonic() - started < 30
    assert result.exit_code == 124, result
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == [], "a process of the timed-out command survived"


async def test_async_timeout(sandbox: agentd.LocalSandbox) -> None:
    result = await sandbox.aexecute("sleep 60", timeout=1)
    assert result.exit_code == 124


def test_bad_timeouts_are_value_errors(sandbox: agentd.LocalSandbox) -> None:
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            sandbox.execute("true", timeout=bad)
    assert sandbox.execute("echo still here").output == "still here\n"


def test_large_transfers_keep_every_byte(sandbox: agentd.LocalSandbox) -> None:
    payload = os.urandom(64 * 1024 * 1024) + bytes(range(256))
    digest = hashlib.sha256(payload).hexdigest()
    path = f"{sandbox.workspace}/big/blob.bin"
    assert sandbox.upload_files([(path, payload)]) == [types.FileUploadResponse(path=path, error=None)]
    inside = sandbox.execute(f"sha256sum {path}")
    assert inside.output.split()[0] == digest
    [download] = sandbox.download_files([path])
    assert download.error is None
    assert download.content is not None
    assert hashlib.sha256(download.content).hexdigest() == digest


def test_a_closed_sandbox_refuses_calls_and_its_agentd_is_gone() -> None:
    sandbox = agentd.LocalSandbox()
    pid = sandbox.pid
    with sandbox:
        assert sandbox.execute("true").exit_code == 0
    assert sandbox.closed
    with pytest.raises(agentd.SandboxClosedError):
        sandbox.execute("true")
    sandbox.close()  # twice is allowed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_blocking_calls_release_the_gil(sandbox: agentd.LocalSandbox) -> None:
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        sandbox.execute("sleep 1")
    finally:
        done.set()
        counter.join()
    # Holding the GIL for the second would have left the counter at a handful of ticks.
    assert ticks > 100, ticks


async def test_async_calls_run_concurrently_on_no_new_threads(sandbox: agentd.LocalSandbox) -> None:
    await sandbox.aexecute("true")  # the runtime's threads exist from here on
    threads = threading.active_count()
    started = time.monotonic()
    results = await asyncio.gather(*(sandbox.aexecute("sleep 1; echo done") for _ in range(16)))
    elapsed = time.monotonic() - started
    assert [r.output for r in results] == ["done\n"] * 16
    assert threading.active_count() == threads, "an async call started a thread"
    # One after another they would take 16 s.
    assert elapsed < 8, elapsed


def test_async_calls_on_several_loops_at_once_keep_one_descriptor_per_loop(sandbox: agentd.LocalSandbox) -> None:
    """Each loop's calls are settled through one eventfd, however many are in flight: hundreds of
    gathered calls on two loops in two threads all get their own answers, and the process holds
    no more descriptors per call afterwards."""
    workspace = sandbox.workspace
    for i in range(4):
        assert sandbox.write(f"{workspace}/f{i}.txt", f"file {i}\n").error is None

    async def burst(tag: str) -> list[str]:
        calls = [sandbox.aexecute(f"echo {tag}-{i}") for i in range(150)]
        calls += [sandbox.aread(f"{workspace}/f{i % 4}.txt") for i in range(150)]
        answers = await asyncio.gather(*calls)
        return [a.output if isinstance(a, types.ExecuteResponse) else a.file_data["content"] for a in answers]

    def run(tag: str, into: dict[str, list[str]]) -> None:
        into[tag] = asyncio.run(burst(tag))

    asyncio.run(burst("warm"))
    before = len(os.listdir("/proc/self/fd"))
    got: dict[str, list[str]] = {}
    threads = [threading.Thread(target=run, args=(tag, got)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for tag in ("a", "b"):
        assert got[tag][:150] == [f"{tag}-{i}\n" for i in range(150)]
        assert got[tag][150:] == [f"file {i % 4}" for i in range(150)]
    # Each ended loop's eventfd may stay open until the loop is collected: a few, never 600.
    assert len(os.listdir("/proc/self/fd")) - before < 10


async def test_uploads_among_concurrent_requests_arrive_whole(sandbox: agentd.LocalSandbox) -> None:
    """An upload's chunks and the small requests sent beside it share the socket: a request may
    be written by its caller while chunks wait for the writer task, and still nothing overtakes
    what was queued before it."""
    blobs = [os.urandom(3 * 1024 * 1024 + i) for i in range(3)]
    paths = [f"{sandbox.workspace}/blob{i}" for i in range(3)]
    uploads = sandbox.aupload_files(list(zip(paths, blobs, strict=True)))
    small = [sandbox.aexecute(f"echo {i}") for i in range(60)]
    uploaded, *echoed = await asyncio.gather(uploads, *small)
    assert [u.error for u in uploaded] == [None, None, None]
    assert [e.output for e in echoed] == [f"{i}\n" for i in range(60)]
    downloaded = await sandbox.adownload_files(paths)
    assert [hashlib.sha256(d.content).hexdigest() for d in downloaded] == [
        hashlib.sha256(b).hexdigest() for b in blobs
    ]


async def test_async_file_verbs(sandbox: agentd.LocalSandbox) -> None:
    path = f"{sandbox.workspace}/a/notes.txt"
    assert (await sandbox.awrite(path, "one\ntwo\nthree\n")).path == path
    assert (await sandbox.aedit(path, "two", "2")).occurrences == 1
    page = await sandbox.aread(path, offset=1, limit=1)
    assert page.file_data == {"content": "2", "encoding": "utf-8"}
    assert (page.start_line, page.end_line, page.next_offset) == (2, 2, 2)
    assert [m["line"] for m in (await sandbox.agrep("three", f"{sandbox.workspace}/a")).matches] == [3]
    assert [m["path"] for m in (await sandbox.aglob("**/*.txt", f"{sandbox.workspace}")).matches] == [path]
    assert [e["path"] for e in (await sandbox.als(f"{sandbox.workspace}/a")).entries] == [path]
    assert (await sandbox.adelete(path)).path == path


def test_offload_leaves_big_output_in_the_capture_file(sandbox: agentd.LocalSandbox) -> None:
    capture = f"{sandbox.workspace}/out.log"
    result = sandbox.execute_with_offload("seq 1 100000", capture, max_inline_bytes=1000)
    assert result.offloaded
    assert result.response.exit_code == 0
    assert len(result.response.output) < 20000
    [download] = sandbox.download_files([capture])
    assert download.content == "".join(f"{i}\n" for i in range(1, 100001)).encode()


def test_specs_that_do_not_parse_are_value_errors() -> None:
    with pytest.raises(agentd.InvalidSpecError) as raised:
        agentd.open("nowhere:thing")
    assert isinstance(raised.value, ValueError)
    with pytest.raises(agentd.InvalidSpecError):
        agentd.DockerSandbox()
    with pytest.raises(agentd.InvalidSpecError):
        agentd.DockerSandbox("image", id="abc")


def landlock_enabled() -> bool:
    """Whether the kernel enforces landlock: its ABI version, asked as agentd asks it."""
    import ctypes

    landlock_create_ruleset = 444  # x86_64
    version = ctypes.CDLL(None, use_errno=True).syscall(landlock_create_ruleset, None, 0, 1)
    return version >= 1


def test_writable_roots_are_the_only_places_commands_write() -> None:
    if not landlock_enabled():
        if os.environ.get("AGENTD_REQUIRE_LANDLOCK"):
            pytest.fail("landlock is not enabled (AGENTD_REQUIRE_LANDLOCK is set)")
        pytest.skip("landlock is not enabled in this kernel")
    # Beneath a directory the sandbox user can search (pytest's own is root's, mode 0700).
    base = tempfile.mkdtemp(prefix="agentd-roots-")
    os.chmod(base, 0o755)
    allowed, outside = f"{base}/allowed/deeper", f"{base}/outside"
    os.mkdir(outside)
    with agentd.LocalSandbox(writable_roots=[allowed]) as sandbox:
        assert os.path.isdir(allowed), "a missing writable root is created"
        inside = sandbox.execute(f"echo in > {allowed}/f && cat {allowed}/f")
        assert (inside.output, inside.exit_code) == ("in\n", 0)
        escape = sandbox.execute(f"echo out > {outside}/f; ln -s {outside} {allowed}/link; echo out > {allowed}/link/g")
        assert escape.exit_code != 0
        assert "Permission denied" in escape.output, escape.output
        assert os.listdir(outside) == []
    with agentd.LocalSandbox(confined=False) as sandbox:
        assert sandbox.execute(f"echo out > {outside}/f").exit_code == 0
    shutil.rmtree(base)


def wait_gone(marker: str) -> list[int]:
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return processes_with(marker)


def test_ctrl_c_interrupts_a_blocking_call_and_kills_its_command(sandbox: agentd.LocalSandbox) -> None:
    marker = f"agentd-py-sigint-{os.getpid()}-{time.monotonic_ns()}"

    def interrupt() -> None:
        deadline = time.monotonic() + 10
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sandbox.execute(f"sleep 60 # {marker}")
    assert time.monotonic() - started < 30
    assert wait_gone(marker) == [], "the interrupted command is still running"
    assert sandbox.execute("echo still here").output == "still here\n"


async def test_cancelling_an_async_call_kills_its_command(sandbox: agentd.LocalSandbox) -> None:
    marker = f"agentd-py-cancel-{os.getpid()}-{time.monotonic_ns()}"
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sandbox.aexecute(f"sleep 60 # {marker}"), timeout=1)
    assert wait_gone(marker) == [], "the cancelled command is still running"
    assert (await sandbox.aexecute("echo still here")).output == "still here\n"


def test_a_sandbox_garbage_collected_without_close_stops_its_agentd() -> None:
    import gc

    sandbox = agentd.LocalSandbox()
    pid = sandbox.pid
    assert sandbox.execute("true").exit_code == 0
    del sandbox
    gc.collect()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_sandbox_made_on_a_thread_that_ended_still_works() -> None:
    made: list[agentd.LocalSandbox] = []
    starter = threading.Thread(target=lambda: made.append(agentd.LocalSandbox()))
    starter.start()
    starter.join()
    [sandbox] = made
    with sandbox:
        time.sleep(0.3)
        assert sandbox.execute("echo alive").output == "alive\n"
