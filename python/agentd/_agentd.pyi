"""The native module (Rust, ``agentd-host``): what the classes of :mod:`agentd` are built on."""

from collections.abc import Awaitable, Iterable, Mapping
from pathlib import Path
from typing import Any

__version__: str

def set_bundled_agentd(path: str) -> bool:
    """Names the static agentd shipped in the wheel; the first call wins."""

def permission_rule(rule: str | Mapping[str, Any]) -> dict[str, Any]:
    """One path permission rule, a ``{"operations", "paths", "mode"}`` dict or a
    ``MODE:OPERATIONS:PATH`` string, read and checked by agentd's own parser: its dict (``mode``
    filled in), or ``ValueError`` saying what is wrong (``agentd.permission_rules`` names the rule)."""

_Execute = tuple[str, int | None, bool]

class Sandbox:
    """One sandbox over agentd's link; every blocking call releases the GIL, every ``a``-method
    returns an awaitable run on the process's tokio runtime. In a child made by ``fork``, calls on
    a sandbox the parent made raise ``agentd.errors.InheritedSandboxError`` and ``close`` does
    nothing."""

    @staticmethod
    def local(
        writable_roots: list[str] | None = None,
        confined: bool = True,
        connect_deadline: float | None = None,
        exec_margin: float | None = None,
        silence_deadline: float | None = None,
        permissions: list[dict[str, Any]] | None = None,
        env_allowlist: list[str] | None = None,
    ) -> Sandbox:
        """``permissions``: ``[{"operations": ["read" | "write", …], "paths": ["/abs/glob", …],
        "mode": "allow" | "deny"}, …]`` (``agentd.permission_rules`` makes them), first match wins;
        a malformed one raises ``ValueError``."""
    @staticmethod
    def connect(
        url: str,
        token: str | None = None,
        connect_deadline: float | None = None,
        exec_margin: float | None = None,
        silence_deadline: float | None = None,
    ) -> Sandbox: ...
    @staticmethod
    def open(spec: str) -> Sandbox: ...
    @property
    def id(self) -> str: ...
    @property
    def agentd_source(self) -> str | None: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def workspace(self) -> Path | None: ...
    @property
    def closed(self) -> bool: ...
    def execute(self, command: str, timeout: float | None = None) -> _Execute:
        """``(output, exit_code, truncated)``."""
    def aexecute(self, command: str, timeout: float | None = None) -> Awaitable[_Execute]: ...
    def execute_with_offload(
        self,
        command: str,
        capture_path: str,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: float | None = None,
    ) -> tuple[bool, _Execute, bool]:
        """``(offloaded, (output, exit_code, truncated), preview_has_truncation_marker)``."""
    def aexecute_with_offload(
        self,
        command: str,
        capture_path: str,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: float | None = None,
    ) -> Awaitable[tuple[bool, _Execute, bool]]: ...
    def upload_files(self, files: Iterable[tuple[str, bytes]]) -> list[tuple[str, str | None]]:
        """``[(path, error)]``, in order."""
    def aupload_files(self, files: Iterable[tuple[str, bytes]]) -> Awaitable[list[tuple[str, str | None]]]: ...
    def download_files(self, paths: list[str]) -> list[tuple[str, bytes | None, str | None]]:
        """``[(path, content, error)]``, in order."""
    def adownload_files(self, paths: list[str]) -> Awaitable[list[tuple[str, bytes | None, str | None]]]: ...
    def download_file(self, path: str, local_path: str) -> str | None:
        """Saves ``path`` as ``local_path``, streamed; the per-file error or ``None``."""
    def adownload_file(self, path: str, local_path: str) -> Awaitable[str | None]: ...
    def fs(self, request: dict[str, Any]) -> dict[str, Any]:
        """One file verb (``{"verb": "read", "path": …}``); the dict of its result type."""
    def afs(self, request: dict[str, Any]) -> Awaitable[dict[str, Any]]: ...
    def enforcement(self) -> dict[str, Any] | None:
        """The hello's profile report (``None``: no profile); ``permissions`` rule by rule."""
    def aenforcement(self) -> Awaitable[dict[str, Any] | None]: ...
    def close(self) -> None:
        """Ends the sandbox; in a forked child, does nothing to one the parent made."""
    def aclose(self) -> Awaitable[None]: ...
