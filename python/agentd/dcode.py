"""agentd as a sandbox provider of Deep Agents Code (``deepagents-code``, the ``dcode`` command).

The package publishes :class:`AgentdProvider` under the entry-point group
``deepagents_code.sandbox_providers`` as ``agentd``, so ``dcode --sandbox agentd`` runs the agent's
commands and file verbs through agentd. ``AGENTD_SANDBOX`` chooses the kind, as a ``KIND:SPEC`` of
:func:`agentd.open`:

- unset or ``local``: :class:`agentd.LocalSandbox`, confined, with one writable root: the directory
  ``dcode`` was started in (``$PWD``: dcode's server process runs in a directory of its own, and
  inherits the shell's ``PWD``), which is the agent's working directory;
- ``docker:IMAGE``, ``daytona:SNAPSHOT_OR_IMAGE``, ``modal:IMAGE``: a sandbox created for the
  session and removed by :meth:`AgentdProvider.delete`; ``--sandbox-id ID`` attaches to an existing
  one of that kind instead (left running).

deepagents-code is optional: without it the provider has the same interface on plain bases, so
importing this module (or :mod:`agentd`) never needs it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass
from typing import Any, Literal

import agentd

try:
    from deepagents_code.integrations.sandbox_provider import (
        SandboxInstallHint,
        SandboxProvider,
        SandboxProviderMetadata,
    )
except ImportError:
    # The CLI's registry only reads these fields; the same ones, for use without it.
    @dataclass(frozen=True)
    class SandboxInstallHint:  # type: ignore[no-redef]
        kind: Literal["extra", "package"]
        name: str

    @dataclass(frozen=True)
    class SandboxProviderMetadata:  # type: ignore[no-redef]
        name: str
        working_dir: str
        install: SandboxInstallHint | None = None
        supports_sandbox_id: bool = True
        supports_snapshot_name: bool = False
        backend_module: str | None = None

    SandboxProvider = object  # type: ignore[assignment,misc]

#: The variable naming the kind of sandbox, a ``KIND:SPEC`` of :func:`agentd.open`.
SPEC_VARIABLE = "AGENTD_SANDBOX"

#: agentd's working directory (its workspace) in a created sandbox of each remote kind: the
#: ``WORKDIR`` of agentd's images for Docker and Modal, the sandbox user's home on Daytona.
WORKING_DIRS = {"docker": "/workspace", "daytona": "/home/daytona", "modal": "/workspace"}


def _started_in() -> str:
    """The directory the user started ``dcode`` in: the shell's ``PWD`` when it names a directory,
    else the current one."""
    pwd = os.environ.get("PWD", "")
    return pwd if os.path.isabs(pwd) and os.path.isdir(pwd) else os.getcwd()


def _kind(spec: str) -> str:
    """``docker`` of ``docker:IMAGE`` (the spec itself is checked by :func:`agentd.open`)."""
    return spec.partition(":")[0].removesuffix("-attach")


class AgentdProvider(SandboxProvider):  # type: ignore[misc,valid-type]
    """Deep Agents Code's sandbox provider ``agentd``: see the module's doc.

    ``delete`` ends the sandboxes this provider made (the CLI deletes through the provider that
    created); they are held here until then.
    """

    def __init__(self) -> None:
        self.spec = os.environ.get(SPEC_VARIABLE) or "local"
        self._made: dict[str, agentd.Sandbox] = {}
        self._lock = threading.Lock()

    @property
    def metadata(self) -> SandboxProviderMetadata:
        kind = _kind(self.spec)
        local = kind == "local"
        return SandboxProviderMetadata(
            name="agentd",
            working_dir=_started_in() if local else WORKING_DIRS.get(kind, "/workspace"),
            install=SandboxInstallHint(kind="package", name="agentd-sandbox"),
            # A local agentd belongs to the process that started it: the CLI's client cannot make
            # one for its server process to attach to.
            supports_sandbox_id=not local,
        )

    def get_or_create(self, *, sandbox_id: str | None = None, **kwargs: Any) -> agentd.Sandbox:
        """The sandbox ``sandbox_id`` names (of the configured kind), else a new one."""
        if kwargs:
            msg = f"agentd: unknown sandbox parameters {sorted(kwargs)}; the kind is set by {SPEC_VARIABLE}"
            raise TypeError(msg)
        kind = _kind(self.spec)
        if sandbox_id is not None:
            if kind == "local":
                msg = "agentd: a local sandbox cannot be attached by id; set AGENTD_SANDBOX to docker:IMAGE, …"
                raise agentd.InvalidSpecError(msg)
            return agentd.open(f"{kind}-attach:{sandbox_id}")
        sandbox = agentd.LocalSandbox([_started_in()]) if kind == "local" else agentd.open(self.spec)
        with self._lock:
            self._made[sandbox.id] = sandbox
        return sandbox

    def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:  # noqa: ARG002
        """Ends the sandbox this provider made as ``sandbox_id`` (removes a container, a Daytona
        or Modal sandbox; stops a local agentd)."""
        with self._lock:
            sandbox = self._made.pop(sandbox_id, None)
        if sandbox is None:
            msg = f"agentd: no sandbox {sandbox_id!r} made here; remove it with `agentctl sandbox rm {sandbox_id}`"
            raise LookupError(msg)
        sandbox.close()

    async def aget_or_create(self, *, sandbox_id: str | None = None, **kwargs: Any) -> agentd.Sandbox:
        return await asyncio.to_thread(self.get_or_create, sandbox_id=sandbox_id, **kwargs)

    async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        await asyncio.to_thread(self.delete, sandbox_id=sandbox_id, **kwargs)
