"""The providers from Python: Docker on the machine's engine, Daytona and Modal through the
workspace's fakes (``fake-daytona``, ``fake-modal``, built by the ``test_binaries`` fixture: their documented
wire APIs over containers of the same engine). Daytona, Modal and an attached Docker container start from the bare
Debian base image, so agentd is the one this package ships, injected; a created Docker sandbox runs
the image with agentd baked in.

Needs the Docker engine, the images (``images/build.sh``) and cargo; without them each test skips,
unless ``AGENTD_REQUIRE_DOCKER`` is set (CI), when it fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import fake_provider, need

import agentd

IMAGE = "agentd-base-debian:latest"
BAKED = "agentd-debian:latest"


def its_containers(kind: str, sandbox_id: str) -> list[str]:
    """The containers behind one sandbox: a Docker sandbox's id is its container's; the fakes label
    each container with the sandbox it stands for."""
    filters = {
        "docker": f"id={sandbox_id}",
        "daytona": f"label=dev.agentd.fake-daytona.sandbox={sandbox_id}",
        "modal": f"label=dev.agentd.fake-modal.sandbox={sandbox_id}",
    }
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", filters[kind]], check=True, capture_output=True, text=True
    )
    return listed.stdout.split()


@pytest.fixture(scope="module")
def docker() -> None:
    have = shutil.which("docker") is not None and subprocess.run(
        ["docker", "image", "inspect", IMAGE, BAKED], capture_output=True, check=False
    ).returncode == 0
    need(have, f"no Docker engine or no {IMAGE} and {BAKED} (images/build.sh)")


@pytest.fixture
def fake(test_binaries: dict[str, Path]) -> Iterator[Callable[[str], None]]:
    """Starts the fake NAME (``daytona``, ``modal``) and puts the variables it prints in the environment."""
    with contextlib.ExitStack() as running:
        yield lambda name: running.enter_context(fake_provider(name, test_binaries[f"fake-{name}"]))


MAKERS: dict[str, Callable[[], agentd.Sandbox]] = {
    "docker": lambda: agentd.DockerSandbox(BAKED),
    "daytona": lambda: agentd.DaytonaSandbox(IMAGE),
    "modal": lambda: agentd.ModalSandbox(IMAGE),
}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_provider_sandbox_works_and_close_removes_it(
    kind: str, docker: None, fake: Callable[[str], None]
) -> None:
    if kind != "docker":
        fake(kind)
    sandbox = MAKERS[kind]()
    try:
        assert its_containers(kind, sandbox.id), "no container behind the sandbox"
        result = sandbox.execute("cat /etc/debian_version && id -u")
        assert result.exit_code == 0, result
        assert sandbox.write("/work/notes.txt", "one\ntwo\n").error is None
        assert sandbox.read("/work/notes.txt", offset=1).file_data == {"content": "two", "encoding": "utf-8"}
        payload = os.urandom(8 * 1024 * 1024)
        assert sandbox.upload_files([("/work/blob.bin", payload)])[0].error is None
        assert sandbox.execute("sha256sum /work/blob.bin").output.split()[0] == hashlib.sha256(payload).hexdigest()
        [download] = sandbox.download_files(["/work/blob.bin"])
        assert download.content == payload
        offload = sandbox.execute_with_offload("seq 1 50000", "/work/out.log", max_inline_bytes=1000)
        assert offload.offloaded and offload.response.exit_code == 0
    finally:
        sandbox.close()
    assert its_containers(kind, sandbox.id) == [], "close() left the sandbox's container behind"
    with pytest.raises(agentd.SandboxClosedError):
        sandbox.execute("true")


def test_docker_image_without_agentd_gets_the_packaged_agentd_injected(docker: None) -> None:
    with agentd.DockerSandbox(IMAGE) as sandbox:
        assert sandbox.agentd_source == "injected"
        assert sandbox.execute("echo ok").output == "ok\n"
        assert its_containers("docker", sandbox.id), "no container behind the sandbox"
    assert its_containers("docker", sandbox.id) == [], "close() left the container behind"
    with agentd.DockerSandbox(BAKED) as sandbox:
        assert sandbox.agentd_source == "baked"


def test_docker_attach_injects_the_packaged_agentd(docker: None) -> None:
    container = subprocess.run(
        ["docker", "run", "-d", "--rm", "--label", "dev.agentd.python-test", IMAGE, "sleep", "infinity"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    try:
        with agentd.DockerSandbox(id=container) as sandbox:
            assert sandbox.agentd_source == "injected"
            assert sandbox.execute("echo $((6 * 7))").output == "42\n"
            assert sandbox.write("/tmp/w.txt", "w").error is None
            assert sandbox.ls("/tmp").entries is not None
        # An attached container is left running.
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", container], check=True, capture_output=True, text=True
        )
        assert state.stdout.strip() == "true"
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)


async def test_provider_sandbox_async(docker: None) -> None:
    async with agentd.DockerSandbox(BAKED) as sandbox:
        results = [await sandbox.aexecute(f"echo {i}") for i in range(3)]
        assert [r.output for r in results] == ["0\n", "1\n", "2\n"]
        assert (await sandbox.awrite("/tmp/a.txt", "x")).error is None
        assert (await sandbox.aread("/tmp/a.txt")).file_data == {"content": "x", "encoding": "utf-8"}
