"""Shared fixtures: a served agentd over TCP with a token, the workspace's test servers (built
here: the fake providers, ``evil-agentd``), and helpers to skip for a missing need and to find
leftover processes."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentd

#: The agentd this package runs (the static binary in the wheel).
AGENTD = Path(agentd.__file__).with_name("bin") / "agentd"
#: The cargo workspace these tests are part of.
WORKSPACE = Path(__file__).resolve().parents[2]


def need(ready: bool, why: str) -> None:
    """Skips the test for a need this machine lacks (pytest's ``-rs`` lists why), or fails it when
    ``AGENTD_REQUIRE_DOCKER`` is set (CI)."""
    if ready:
        return
    if os.environ.get("AGENTD_REQUIRE_DOCKER"):
        pytest.fail(f"{why} (AGENTD_REQUIRE_DOCKER is set)")
    pytest.skip(why)


#: The workspace's test servers (package ``agentd-tests``) the suite runs.
TEST_BINARIES = ("fake-daytona", "fake-modal", "fake-kube", "evil-agentd")


@pytest.fixture(scope="session")
def test_binaries() -> dict[str, Path]:
    """Each of :data:`TEST_BINARIES` by name, built once per session: cargo builds them when missing
    or stale and does nothing when they are fresh. A build that fails fails the tests; only a
    missing cargo or workspace skips them."""
    cargo = shutil.which("cargo")
    need(cargo is not None, "no cargo on PATH to build " + ", ".join(TEST_BINARIES))
    need((WORKSPACE / "tests" / "Cargo.toml").is_file(), f"no agentd workspace at {WORKSPACE} to build them in")
    assert cargo is not None
    command = [cargo, "build", "-p", "agentd-tests", "--message-format=json-render-diagnostics"]
    for binary in TEST_BINARIES:
        command += ["--bin", binary]
    # Its diagnostics go to stderr (shown with a failure); stdout is one JSON message a line.
    built = subprocess.run(command, cwd=WORKSPACE, stdout=subprocess.PIPE, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed with status {built.returncode}")
    executables = {}
    for line in built.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("executable"):
            executables[message["target"]["name"]] = Path(message["executable"])
    return {binary: executables[binary] for binary in TEST_BINARIES}


@contextlib.contextmanager
def fake_provider(name: str, binary: Path, *args: str) -> Iterator[None]:
    """Runs the fake provider NAME (``daytona``, ``modal``, ``kube``) from ``binary`` (with ``args``)
    with the variables it prints (its API's address and credentials, or ``KUBECONFIG``) set in
    ``os.environ``, until the block ends; the fake removes its containers when it is terminated."""
    child = subprocess.Popen([os.fspath(binary), *args], stdout=subprocess.PIPE, text=True)
    try:
        with pytest.MonkeyPatch.context() as env:
            assert child.stdout is not None
            for _ in range({"daytona": 2, "modal": 3, "kube": 1}[name]):
                line = child.stdout.readline().strip()
                assert line.startswith("export "), f"fake-{name} printed {line!r}"
                key, _, value = line.removeprefix("export ").partition("=")
                env.setenv(key, value.strip("'\""))
            yield
    finally:
        child.terminate()
        child.wait(timeout=30)


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    """``(url, token)`` of an agentd serving TCP on a free loopback port with a fresh token."""
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="agentd-py-served-") as work:
        token_file = Path(work, "token")
        token_file.write_text(token)
        token_file.chmod(0o600)
        child = subprocess.Popen(
            [os.fspath(AGENTD), "serve", "--listen", "127.0.0.1:0", "--token-file", os.fspath(token_file)],
            cwd=work,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            prefix = "agentd listening on "
            assert line.startswith(prefix), f"agentd printed {line!r}"
            yield line[len(prefix) :].strip(), token
        finally:
            child.terminate()
            child.wait(timeout=10)


def processes_with(marker: str) -> list[int]:
    """Pids of processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found
