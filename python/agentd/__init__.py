"""agentd for Python: sandboxes for AI agents, on the deepagents ``BaseSandbox`` contract.

Every sandbox here runs commands and file verbs through agentd's native requests (one websocket
link, no helper scripts), implemented once in Rust (``agentd-host``) and shared with agentctl:

- :class:`LocalSandbox`: the embedded default. Starts its own agentd (the static binary shipped in
  this package) with a temporary workspace; commands may write only there, to a private tmp and to
  ``writable_roots``.
- :class:`AgentdSandbox`: any running agentd, by URL and token.
- :class:`DockerSandbox`, :class:`DaytonaSandbox`, :class:`ModalSandbox`: a sandbox a provider makes
  (or one it already has, by ``id``), with agentd injected into it.

With deepagents installed (the ``deepagents`` extra of the ``agentd-sandbox`` distribution) each is a subclass of
``deepagents.backends.sandbox.BaseSandbox`` and returns deepagents' result types, so it can be
passed to an agent as its backend::

    import agentd

    with agentd.LocalSandbox() as sandbox:
        result = sandbox.execute("echo hello; exit 3")
        assert (result.output, result.exit_code) == ("hello\\n", 3)
        notes = f"{sandbox.workspace}/notes.txt"
        sandbox.write(notes, "one\\ntwo\\n")
        assert sandbox.read(notes, offset=1).file_data["content"] == "two"

Path permissions: deepagents' ``FilesystemPermission`` rules (what ``create_deep_agent(permissions=…)``
takes) given to ``LocalSandbox(permissions=…)`` hold agentd's file verbs (refused with deepagents'
middleware strings; read-denied paths left out of ``ls``, ``glob``, ``grep``) and, through landlock,
every command; :func:`permission_rules` (module :mod:`agentd.permissions`) turns such a list into
agentd's rules::

    from deepagents import FilesystemPermission

    rules = [FilesystemPermission(operations=["write"], paths=["/srv/proj/src/**"], mode="deny")]
    with agentd.LocalSandbox(writable_roots=["/srv/proj"], permissions=rules) as sandbox:
        assert sandbox.execute("echo x > /srv/proj/src/main.py").exit_code != 0
        assert sandbox.write("/srv/proj/src/main.py", "x").error == (
            "Error: permission denied for write on /srv/proj/src/main.py")

deepagents' own middleware (0.7.32) refuses rules for a backend that runs commands unless they all
fall under a ``CompositeBackend`` route: agentd is what holds the sandbox, ``execute`` included; give
the agent the rules about its routes.

Processes that outlive a call: :meth:`Sandbox.spawn` starts a command kept by agentd and gives a
:class:`Process` (its id, ``wait``, ``output``, ``kill``, ``write_stdin``, ``close_stdin``,
``resize``); :meth:`Sandbox.attach` finds one again by id, from this process or another one::

    with agentd.LocalSandbox() as sandbox:
        cat = sandbox.spawn("cat", stdin=True)
        cat.write_stdin(b"hi\n")
        cat.close_stdin()
        assert cat.wait().output == "hi\n"
        assert sandbox.attach(cat.id).output() == b"hi\n"

Blocking methods release the GIL; each has an ``a``-prefixed coroutine twin that runs on the
package's own tokio runtime. Failures to reach the sandbox raise :mod:`agentd.errors`; everything
the sandbox answers, failures included, is a result value.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentd import _agentd, errors
from agentd.errors import (
    AgentdError,
    AuthenticationError,
    ConnectionError,  # noqa: A004
    InheritedSandboxError,
    InvalidSpecError,
    ProtocolError,
    ProviderError,
    RefusedError,
    SandboxClosedError,
    StartError,
    TimeoutError,  # noqa: A004
)
from agentd.permissions import permission_rules
from agentd.types import (
    HAS_DEEPAGENTS,
    DeleteResult,
    EditResult,
    ExecuteOffloadResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)

__all__ = [
    "AgentdError",
    "AgentdSandbox",
    "AuthenticationError",
    "ConnectionError",
    "DaytonaSandbox",
    "DockerSandbox",
    "InheritedSandboxError",
    "InvalidSpecError",
    "AsyncProcess",
    "LocalSandbox",
    "KubernetesSandbox",
    "ModalSandbox",
    "Process",
    "ProtocolError",
    "ProviderError",
    "RefusedError",
    "Sandbox",
    "SandboxClosedError",
    "StartError",
    "TimeoutError",
    "errors",
    "open",
    "permission_rules",
]

__version__: str = _agentd.__version__

_BUNDLED = Path(__file__).with_name("bin") / "agentd"
if _BUNDLED.is_file():
    _agentd.set_bundled_agentd(os.fspath(_BUNDLED))

if HAS_DEEPAGENTS:
    from deepagents.backends.sandbox import BaseSandbox as _Base
else:
    _Base = object  # type: ignore[assignment,misc]


def _execute(answer: tuple[str, int | None, bool]) -> ExecuteResponse:
    output, exit_code, truncated = answer
    return ExecuteResponse(output=output, exit_code=exit_code, truncated=truncated)


def _offload(answer: tuple[bool, tuple[str, int | None, bool], bool]) -> ExecuteOffloadResult:
    offloaded, response, marker = answer
    return ExecuteOffloadResult(
        offloaded=offloaded, response=_execute(response), preview_has_truncation_marker=marker
    )


def _uploads(answer: list[tuple[str, str | None]]) -> list[FileUploadResponse]:
    return [FileUploadResponse(path=path, error=error) for path, error in answer]


def _downloads(answer: list[tuple[str, bytes | None, str | None]]) -> list[FileDownloadResponse]:
    return [FileDownloadResponse(path=path, content=content, error=error) for path, content, error in answer]


def _files(files: Iterable[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    return [(path, bytes(content)) for path, content in files]


class Sandbox(_Base):  # type: ignore[misc,valid-type]
    """A sandbox reached through agentd. Made by the subclasses or by :func:`open`.

    Use it as a context manager (``with`` / ``async with``: closed however the block ends, by an
    exception or Ctrl-C too) or call :meth:`close` when done.

    It belongs to the process that made it. A child made by ``fork`` (``os.fork``, multiprocessing's
    ``fork`` start method) inherits a copy it cannot use: every call there raises
    :class:`InheritedSandboxError` at once, while :meth:`close` and garbage collection of the copy do
    nothing, so the parent's sandbox, its agentd and its workspace carry on. The child makes its own.
    """

    #: deepagents' middleware may capture large ``execute`` output at the source: agentd does it
    #: natively (``execute_with_offload``), whatever the sandbox's image has.
    enable_capture_offload = True

    def __init__(self, native: _agentd.Sandbox) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r})"

    @property
    def id(self) -> str:
        """A stable identifier, unique per sandbox."""
        return self._native.id

    @property
    def agentd_source(self) -> str | None:
        """How agentd got into a sandbox a provider made or attached to: ``"baked"`` (the image had
        it) or ``"injected"`` (the wheel's agentd was copied in); ``None`` for the other kinds."""
        return self._native.agentd_source

    # -- the four required members --------------------------------------------------------------

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        """Runs ``command`` (POSIX ``sh`` text) and returns its merged output and exit code.

        ``timeout`` in seconds: ``None`` is agentd's default, ``0`` no limit. A command that runs
        out of time is killed with its whole process tree and answered with exit code 124.
        """
        return _execute(self._native.execute(command, timeout))

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:  # noqa: ASYNC109
        """Coroutine twin of :meth:`execute`."""
        return _execute(await self._native.aexecute(command, timeout))

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Writes each ``(absolute path, bytes)``, creating parent directories; one response per
        file, in order, with a per-file ``error`` (``invalid_path``, ``permission_denied``, …)."""
        return _uploads(self._native.upload_files(_files(files)))

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Coroutine twin of :meth:`upload_files`."""
        return _uploads(await self._native.aupload_files(_files(files)))

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Reads each absolute path (sha256-checked); one response per path, in order."""
        return _downloads(self._native.download_files(list(paths)))

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Coroutine twin of :meth:`download_files`."""
        return _downloads(await self._native.adownload_files(list(paths)))

    def download_file(self, path: str, local_path: str | os.PathLike[str]) -> str | None:
        """Saves the file at ``path`` as ``local_path``, streamed: any size, in bounded memory
        (:meth:`download_files` holds whole files, and answers ``file_too_large`` past 256 MiB).
        Returns the per-file error (``file_not_found``, …) or ``None`` once saved; ``local_path``
        is replaced only by a whole, checked file."""
        return self._native.download_file(path, os.fspath(local_path))

    async def adownload_file(self, path: str, local_path: str | os.PathLike[str]) -> str | None:
        """Coroutine twin of :meth:`download_file`."""
        return await self._native.adownload_file(path, os.fspath(local_path))

    # -- capture at the source ------------------------------------------------------------------

    def execute_with_offload(
        self,
        command: str,
        capture_path: str,
        *,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: float | None = None,
    ) -> ExecuteOffloadResult:
        """Runs ``command`` capturing its output at ``capture_path`` in the sandbox: returned inline
        up to ``max_inline_bytes``, else a head/tail preview with the whole output left in the
        file (capped at ``max_capture_bytes``, 10 MiB by default, without killing the command)."""
        answer = self._native.execute_with_offload(
            command, capture_path, max_inline_bytes, max_capture_bytes, timeout
        )
        return _offload(answer)

    async def aexecute_with_offload(
        self,
        command: str,
        capture_path: str,
        *,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> ExecuteOffloadResult:
        """Coroutine twin of :meth:`execute_with_offload`."""
        answer = await self._native.aexecute_with_offload(
            command, capture_path, max_inline_bytes, max_capture_bytes, timeout
        )
        return _offload(answer)

    # -- the file verbs (agentd's native `fs` request) ------------------------------------------

    def ls(self, path: str) -> LsResult:
        """One directory level, unsorted; each entry's ``path`` and ``is_dir``."""
        return LsResult(**self._native.fs({"verb": "ls", "path": path}))

    async def als(self, path: str) -> LsResult:
        """Coroutine twin of :meth:`ls`."""
        return LsResult(**await self._native.afs({"verb": "ls", "path": path}))

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Lines ``offset`` (0-based) to ``offset + limit`` of a text file, or a binary file whole
        in base64 (up to 500 KiB)."""
        return ReadResult(**self._native.fs(_read(file_path, offset, limit)))

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Coroutine twin of :meth:`read`."""
        return ReadResult(**await self._native.afs(_read(file_path, offset, limit)))

    def write(self, file_path: str, content: str) -> WriteResult:
        """Creates or overwrites a file with the exact UTF-8 bytes of ``content``, creating parent
        directories."""
        return WriteResult(**self._native.fs({"verb": "write", "path": file_path, "content": content}))

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """Coroutine twin of :meth:`write`."""
        request = {"verb": "write", "path": file_path, "content": content}
        return WriteResult(**await self._native.afs(request))

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:  # noqa: FBT001, FBT002
        """Replaces ``old_string`` (which must occur exactly once unless ``replace_all``)."""
        return EditResult(**self._native.fs(_edit(file_path, old_string, new_string, replace_all)))

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,  # noqa: FBT001, FBT002
    ) -> EditResult:
        """Coroutine twin of :meth:`edit`."""
        return EditResult(**await self._native.afs(_edit(file_path, old_string, new_string, replace_all)))

    def delete(self, file_path: str) -> DeleteResult:
        """Removes a file, a link or a directory tree (links are not followed)."""
        return DeleteResult(**self._native.fs({"verb": "delete", "path": file_path}))

    async def adelete(self, file_path: str) -> DeleteResult:
        """Coroutine twin of :meth:`delete`."""
        return DeleteResult(**await self._native.afs({"verb": "delete", "path": file_path}))

    def grep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        """Lines containing the literal ``pattern`` under ``path``, optionally only in files
        matching ``glob``."""
        return GrepResult(**self._native.fs(_grep(pattern, path, glob, max_count)))

    async def agrep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        """Coroutine twin of :meth:`grep` (gives up after 35 s, as the contract says)."""
        return GrepResult(**await self._native.afs(_grep(pattern, path, glob, max_count)))

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Files matching ``pattern`` under ``path`` (default ``/``), sorted, each as ``path`` +
        ``/`` + its path below it."""
        return GlobResult(**self._native.fs(_glob(pattern, path)))

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Coroutine twin of :meth:`glob` (gives up after 30 s, as the contract says)."""
        return GlobResult(**await self._native.afs(_glob(pattern, path)))

    # -- processes ------------------------------------------------------------------------------

    def spawn(
        self,
        command: str,
        *,
        stdin: bool = False,
        pty: tuple[int, int] | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        keep: float = 0,
    ) -> Process:
        """Starts ``command`` as a process agentd keeps: it runs on whoever is attached (this object
        may go; :meth:`attach` finds it again by :attr:`Process.id`), until it ends, is killed, or
        its ``timeout`` passes (``None``: agentd's default, ``0``: none).

        ``stdin=True`` keeps its stdin open for :meth:`Process.write_stdin`; ``pty=(rows, cols)``
        runs it under a terminal of that size. ``keep``: seconds it may run with no client attached
        before agentd ends it (``0``: no limit).
        """
        return Process(self._native, self._native.process(_spawn(command, stdin, pty, cwd, env, timeout, keep)))

    async def aspawn(
        self,
        command: str,
        *,
        stdin: bool = False,
        pty: tuple[int, int] | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        keep: float = 0,
    ) -> AsyncProcess:
        """Coroutine twin of :meth:`spawn`: gives an :class:`AsyncProcess`."""
        request = _spawn(command, stdin, pty, cwd, env, timeout, keep)
        return AsyncProcess(self._native, await self._native.aprocess(request))

    def attach(self, process_id: str) -> Process:
        """The kept process ``process_id`` (from :meth:`spawn`, ``agentctl exec --detach``, …)."""
        return Process(self._native, process_id)

    def aattach(self, process_id: str) -> AsyncProcess:
        """:meth:`attach` for asyncio code: an :class:`AsyncProcess`."""
        return AsyncProcess(self._native, process_id)

    def processes(self) -> list[dict[str, Any]]:
        """Every process agentd holds, oldest first: running ones and kept ones' results, as dicts
        (``process``, ``command``, ``state``, ``pid``, ``exit_code``, ``total_bytes``, …; see the
        protocol's ``processes``)."""
        return self._native.process({"verb": "list"})

    async def aprocesses(self) -> list[dict[str, Any]]:
        """Coroutine twin of :meth:`processes`."""
        return await self._native.aprocess({"verb": "list"})

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Ends the sandbox: stops the embedded default's agentd, removes what a provider created
        for this object (an attached sandbox is left running). Later calls raise
        :class:`SandboxClosedError`; closing twice is allowed. In a forked child, closing a sandbox
        the parent made does nothing (it is the parent's to end)."""
        self._native.close()

    async def aclose(self) -> None:
        """Coroutine twin of :meth:`close`."""
        await self._native.aclose()

    def enforcement(self) -> dict[str, Any] | None:
        """What the sandbox's agentd enforces of its profile, as its hello said (``None`` without
        a profile): ``level`` (the weakest), ``filesystem``, ``network``, ``limits``, …,
        ``permissions`` (one ``{"rule": "deny:write:/ws/src/**", "level": "full" | "partial" |
        "not_enforced", "notes": […]}`` per path rule, in order) and ``notes``."""
        return self._native.enforcement()

    async def aenforcement(self) -> dict[str, Any] | None:
        """Coroutine twin of :meth:`enforcement`."""
        return await self._native.aenforcement()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._native.closed

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _spawn(
    command: str,
    stdin: bool,  # noqa: FBT001
    pty: tuple[int, int] | None,
    cwd: str | None,
    env: dict[str, str] | None,
    timeout: float | None,
    keep: float,
) -> dict[str, Any]:
    return {
        "verb": "spawn",
        "command": command,
        "stdin": stdin,
        "pty": list(pty) if pty is not None else None,
        "cwd": cwd,
        "env": dict(env or {}),
        "timeout": timeout,
        "keep": keep,
    }


def _bytes(data: bytes | str) -> list[int]:
    return list(data.encode() if isinstance(data, str) else bytes(data))


class _Named:
    """A process by id on a sandbox's native object; holds no connection of its own."""

    def __init__(self, native: _agentd.Sandbox, process_id: str) -> None:
        self._native = native
        self._id = process_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self._id!r})"

    @property
    def id(self) -> str:
        """The process id, unique to the agentd that runs it."""
        return self._id


class Process(_Named):
    """A process agentd keeps in a sandbox, named by :attr:`id`: from :meth:`Sandbox.spawn` or
    :meth:`Sandbox.attach`. The object holds no connection of its own: it may be dropped and the
    process found again by id, also by another program (``agentctl attach ID``)."""

    def wait(self) -> ExecuteResponse:
        """Waits for its end; its output (the journal's head) and exit code, as ``execute`` gives."""
        return _execute(self._native.process({"verb": "result", "process": self._id}))

    def output(self, start: int = 0) -> bytes:
        """Waits for its end; its output from byte ``start`` on, as it was written (up to the
        journal's cap: ``wait().truncated`` says whether bytes went past it)."""
        return self._native.process({"verb": "output", "process": self._id, "start": start})

    def poll(self, timeout: float | None = None) -> dict[str, Any]:
        """Waits at most ``timeout`` seconds for its end (``None`` or ``0``: until it ends); its info
        then (``state`` is ``"running"`` or ``"exited"``)."""
        return self._native.process({"verb": "wait", "process": self._id, "timeout": timeout})

    def kill(self, signal: str | None = None) -> int:
        """Ends it and every process it started (SIGTERM, a grace, SIGKILL), or sends ``signal``
        (``"INT"``, ``"SIGHUP"``, …) once to each; returns how many there were."""
        return self._native.process({"verb": "kill", "process": self._id, "signal": signal})

    def write_stdin(self, data: bytes | str) -> None:
        """Writes ``data`` (``str``: as UTF-8) to its stdin; returns once the pipe took it all."""
        self._native.process({"verb": "write_stdin", "process": self._id, "data": _bytes(data)})

    def close_stdin(self) -> None:
        """Closes its stdin (under a terminal: types the EOF character)."""
        self._native.process({"verb": "close_stdin", "process": self._id})

    def resize(self, rows: int, cols: int) -> None:
        """Sets the size of its terminal."""
        self._native.process({"verb": "resize", "process": self._id, "rows": rows, "cols": cols})


class AsyncProcess(_Named):
    """:class:`Process` for asyncio code: the same methods, as coroutines."""

    async def wait(self) -> ExecuteResponse:
        """See :meth:`Process.wait`."""
        return _execute(await self._native.aprocess({"verb": "result", "process": self._id}))

    async def output(self, start: int = 0) -> bytes:
        """See :meth:`Process.output`."""
        return await self._native.aprocess({"verb": "output", "process": self._id, "start": start})

    async def poll(self, timeout: float | None = None) -> dict[str, Any]:  # noqa: ASYNC109
        """See :meth:`Process.poll`."""
        return await self._native.aprocess({"verb": "wait", "process": self._id, "timeout": timeout})

    async def kill(self, signal: str | None = None) -> int:
        """See :meth:`Process.kill`."""
        return await self._native.aprocess({"verb": "kill", "process": self._id, "signal": signal})

    async def write_stdin(self, data: bytes | str) -> None:
        """See :meth:`Process.write_stdin`."""
        await self._native.aprocess({"verb": "write_stdin", "process": self._id, "data": _bytes(data)})

    async def close_stdin(self) -> None:
        """See :meth:`Process.close_stdin`."""
        await self._native.aprocess({"verb": "close_stdin", "process": self._id})

    async def resize(self, rows: int, cols: int) -> None:
        """See :meth:`Process.resize`."""
        await self._native.aprocess({"verb": "resize", "process": self._id, "rows": rows, "cols": cols})


def _read(path: str, offset: int, limit: int) -> dict[str, Any]:
    return {"verb": "read", "path": path, "offset": offset, "limit": limit}


def _edit(path: str, old: str, new: str, replace_all: bool) -> dict[str, Any]:  # noqa: FBT001
    return {"verb": "edit", "path": path, "old": old, "new": new, "replace_all": replace_all}


def _grep(pattern: str, path: str | None, glob: str | None, max_count: int | None) -> dict[str, Any]:
    request: dict[str, Any] = {"verb": "grep", "pattern": pattern}
    for key, value in (("path", path), ("glob", glob), ("max_count", max_count)):
        if value is not None:
            request[key] = value
    return request


def _glob(pattern: str, path: str | None) -> dict[str, Any]:
    request: dict[str, Any] = {"verb": "glob", "pattern": pattern}
    if path is not None:
        request["path"] = path
    return request


class LocalSandbox(Sandbox):
    """The embedded default: a private agentd on a Unix socket with a temporary workspace (the
    commands' working directory), stopped with its commands' process trees on :meth:`close`.

    Commands run confined (landlock, rlimits, a pids cap, where the kernel allows; each result's
    enforcement is reported by agentd): they may read everything and write only to the workspace,
    a private ``TMPDIR`` and ``writable_roots`` (created when missing). ``confined=False`` runs them
    with only the machine's limits.

    ``permissions``: path rules, first match wins, in any form :func:`permission_rules` takes, such
    as the ``deepagents.FilesystemPermission`` list given to ``create_deep_agent(permissions=…)``
    (a rule with ``mode="interrupt"`` is a deny here; call :func:`permission_rules` with
    ``interrupt="allow"`` for the other choice). The file verbs refuse what they deny with
    deepagents' middleware errors (``Error: permission denied for write on /ws/src/x``) and leave
    read-denied paths out of ``ls``, ``glob`` and ``grep``; landlock holds every command to them
    (:meth:`enforcement` says how fully, rule by rule). They need ``confined=True``. Their globs name
    this machine's paths (the workspace is :attr:`workspace`). A denied directory that does not exist
    yet is covered from the first command after it appears, not for the command that makes it (the
    report says ``partial`` meanwhile).

    ``env_allowlist``: what of this process's environment commands get beside the minimal set
    (``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``LANG``, ``LANGUAGE``, ``LC_*``,
    ``TERM``, ``COLORTERM``, ``TZ``, ``TMPDIR``): names, or prefixes ending in ``*``. Nothing else
    reaches them (or their agentd): a name that looks like a secret (``*KEY*``, ``*SECRET*``,
    ``*TOKEN*``, ``*PASSWORD*``, ``*CREDENTIAL*``) only when named exactly, so the harness's API
    keys stay with it.
    """

    def __init__(
        self,
        writable_roots: Iterable[str | os.PathLike[str]] | None = None,
        *,
        confined: bool = True,
        connect_deadline: float | None = None,
        exec_margin: float | None = None,
        silence_deadline: float | None = None,
        permissions: Iterable[Any] | None = None,
        env_allowlist: Iterable[str] | None = None,
    ) -> None:
        roots = None if writable_roots is None else [os.fspath(root) for root in writable_roots]
        rules = None if permissions is None else permission_rules(permissions)
        names = None if env_allowlist is None else list(env_allowlist)
        native = _agentd.Sandbox.local(
            roots, confined, connect_deadline, exec_margin, silence_deadline, rules, names
        )
        super().__init__(native)

    @property
    def pid(self) -> int:
        """Process id of this sandbox's agentd."""
        return self._native.pid

    @property
    def workspace(self) -> Path:
        """The workspace directory on this machine."""
        return Path(self._native.workspace)


class AgentdSandbox(Sandbox):
    """A running agentd: ``url`` is ``ws://HOST:PORT``, ``wss://…`` or ``unix:PATH``; ``token`` the
    one it was started with (``agentd serve --token-file``). :meth:`close` only lets go of the
    link.

    Every wait on the server ends (README, "Deadlines"): ``connect_deadline`` (connect, upgrade and
    hello; default 30 s), ``exec_margin`` (after a command's own timeout; 15 s) and
    ``silence_deadline`` (a file verb's reply, a transfer's next part; 120 s), in seconds; the
    defaults come from ``AGENTD_CONNECT_DEADLINE``, ``AGENTD_EXEC_MARGIN`` and
    ``AGENTD_SILENCE_DEADLINE`` when set. Past one, the call raises ``TimeoutError``."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        connect_deadline: float | None = None,
        exec_margin: float | None = None,
        silence_deadline: float | None = None,
    ) -> None:
        super().__init__(_agentd.Sandbox.connect(url, token, connect_deadline, exec_margin, silence_deadline))


def _spec(kind: str, source: str | None, sandbox_id: str | None, *, source_required: bool) -> str:
    if source is not None and sandbox_id is not None:
        msg = f"{kind}: give what to create the sandbox from or the `id=` of an existing one, not both"
        raise InvalidSpecError(msg)
    if sandbox_id is not None:
        return f"{kind}-attach:{sandbox_id}"
    if source is None and source_required:
        msg = f"{kind}: give the image to create the sandbox from, or the `id=` of an existing one"
        raise InvalidSpecError(msg)
    return f"{kind}:{source or ''}"


class DockerSandbox(Sandbox):
    """A container from ``image`` (removed on :meth:`close`), or an existing container by ``id`` (left
    running). agentd is the image's own when its entrypoint is agentd, else the wheel's, injected
    (:attr:`agentd_source` says which). Talks to the Docker engine ``DOCKER_HOST`` names."""

    def __init__(self, image: str | None = None, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(_agentd.Sandbox.open(_spec("docker", image, id, source_required=True)))


class DaytonaSandbox(Sandbox):
    """A Daytona sandbox from a snapshot or image (``""``: Daytona's default), deleted on
    :meth:`close`, or an existing one by ``id``. Reads ``DAYTONA_API_KEY`` (and ``DAYTONA_API_URL``,
    ``DAYTONA_TARGET``) as Daytona's SDKs do."""

    def __init__(self, source: str | None = None, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(_agentd.Sandbox.open(_spec("daytona", source, id, source_required=False)))


class ModalSandbox(Sandbox):
    """A Modal sandbox from ``image``, terminated on :meth:`close`, or an existing one by ``id``.
    Reads Modal's token (``MODAL_TOKEN_ID``/``MODAL_TOKEN_SECRET`` or ``~/.modal.toml``) as Modal's
    SDKs do."""

    def __init__(self, image: str | None = None, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(_agentd.Sandbox.open(_spec("modal", image, id, source_required=True)))


class KubernetesSandbox(Sandbox):
    """A sandbox on Kubernetes: a Pod from ``image`` (deleted on :meth:`close`), a Sandbox claimed
    from the agent-sandbox warm pool ``claim`` (the claim deleted on :meth:`close`), or an existing
    claim or Pod by ``id`` (``NAMESPACE/NAME`` or ``NAME``). The cluster is the one ``kubectl``
    finds (``KUBECONFIG``, ``~/.kube/config``, in-cluster), in its context's namespace."""

    def __init__(
        self,
        image: str | None = None,
        *,
        claim: str | None = None,
        id: str | None = None,  # noqa: A002
    ) -> None:
        given = [name for name, value in (("image", image), ("claim", claim), ("id", id)) if value is not None]
        if len(given) != 1:
            msg = f"kube: give exactly one of `image`, `claim=` (a warm pool) or `id=`; got {given or 'none'}"
            raise InvalidSpecError(msg)
        if claim is not None:
            spec = f"kube-claim:{claim}"
        else:
            spec = _spec("kube", image, id, source_required=True)
        super().__init__(_agentd.Sandbox.open(spec))


def open(spec: str) -> Sandbox:  # noqa: A001
    """The sandbox a ``KIND:SPEC`` names, as ``agentctl --sandbox`` takes it: ``local``,
    ``docker:IMAGE``, ``docker-attach:ID``, ``daytona:SNAPSHOT``, ``daytona-attach:ID``,
    ``modal:IMAGE``, ``modal-attach:ID``, ``kube:IMAGE``, ``kube-claim:WARM_POOL``,
    ``kube-attach:[NAMESPACE/]NAME``."""
    return Sandbox(_agentd.Sandbox.open(spec))
