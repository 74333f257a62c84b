"""Shared fixtures: a served agentd over TCP with a token, and helpers to find leftover processes."""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentd

#: The agentd this package runs (the static binary in the wheel).
AGENTD = Path(agentd.__file__).with_name("bin") / "agentd"


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
