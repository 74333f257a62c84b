"""agentd as Deep Agents Code's sandbox provider (``dcode --sandbox agentd``), found as the CLI finds
it, through the ``deepagents_code.sandbox_providers`` entry point, and driven through the
provider's own interface the way the CLI drives it: ``get_or_create(sandbox_id=…)``, then
``delete(sandbox_id=…)`` on the same provider. deepagents-code is not installed here: its releases
for this suite's Python pin an older deepagents than the suite's, and later ones need Python 3.12
or newer. Without it the provider gives the same fields on plain classes.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_providers import BAKED, docker, its_containers  # noqa: F401  (docker: the fixture)

import agentd
from agentd.dcode import SPEC_VARIABLE, AgentdProvider


def provider() -> AgentdProvider:
    """A provider made as the CLI's registry makes one: its entry point, loaded and called."""
    (entry,) = [
        entry
        for entry in importlib.metadata.entry_points(group="deepagents_code.sandbox_providers")
        if entry.name == "agentd"
    ]
    return entry.load()()


@pytest.fixture
def project(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory ``dcode`` was started in, under ``/tmp`` so the sandbox user can reach it
    (pytest's own ``tmp_path`` is beneath a 0700 directory). As in dcode's server process, the
    current directory is another one and ``PWD`` names the project."""
    monkeypatch.delenv(SPEC_VARIABLE, raising=False)
    with tempfile.TemporaryDirectory(prefix="agentd-dcode-") as directory:
        monkeypatch.setenv("PWD", directory)
        monkeypatch.chdir(Path(directory).parent)
        yield Path(directory)


def test_local_sandbox_through_the_entry_point(project: Path) -> None:
    made = provider()
    about = made.metadata
    assert (about.name, about.working_dir, about.supports_sandbox_id) == ("agentd", os.fspath(project), False)
    assert (about.install.kind, about.install.name) == ("package", "agentd-sandbox")

    sandbox = made.get_or_create(sandbox_id=None)
    assert isinstance(sandbox, agentd.LocalSandbox)
    pid = sandbox.pid
    # The working directory the CLI tells the agent is writable; the rest stays confined.
    result = sandbox.execute(f"echo hi > {about.working_dir}/made && cat {about.working_dir}/made")
    assert (result.output, result.exit_code) == ("hi\n", 0)
    assert sandbox.execute(f"touch {project}-outside").exit_code != 0
    assert not Path(f"{project}-outside").exists()

    made.delete(sandbox_id=sandbox.id)
    assert sandbox.closed
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    with pytest.raises(LookupError, match="agentctl sandbox rm"):
        made.delete(sandbox_id=sandbox.id)
    with pytest.raises(agentd.InvalidSpecError, match="cannot be attached"):
        made.get_or_create(sandbox_id=sandbox.id)
    with pytest.raises(TypeError, match="unknown sandbox parameters"):
        made.get_or_create(sandbox_id=None, snapshot="x")


async def test_async_twins_as_the_cli_client_uses_them(project: Path) -> None:  # noqa: ARG001
    made = provider()
    sandbox = await made.aget_or_create()
    assert (await sandbox.aexecute("echo $((6 * 7))")).output == "42\n"
    await made.adelete(sandbox_id=sandbox.id)
    assert sandbox.closed


def test_a_bad_spec_says_which_forms_there_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPEC_VARIABLE, "podman:alpine")
    with pytest.raises(agentd.InvalidSpecError, match="docker:IMAGE"):
        provider().get_or_create()


def test_docker_sandbox_created_attached_and_deleted(docker: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv(SPEC_VARIABLE, f"docker:{BAKED}")
    made = provider()
    about = made.metadata
    assert (about.working_dir, about.supports_sandbox_id) == ("/workspace", True)
    sandbox = made.get_or_create(sandbox_id=None)
    try:
        assert sandbox.execute("pwd").output == f"{about.working_dir}\n"
        # What the CLI's server process does with the id its client made: attach, from another
        # provider; closing that copy leaves the container running.
        with provider().get_or_create(sandbox_id=sandbox.id) as attached:
            assert attached.execute("echo attached").output == "attached\n"
        assert its_containers("docker", sandbox.id)
    finally:
        made.delete(sandbox_id=sandbox.id)
    assert its_containers("docker", sandbox.id) == []
