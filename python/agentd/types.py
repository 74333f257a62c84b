"""The result types of the sandbox contract.

With deepagents installed (the ``deepagents`` extra of the ``agentd-sandbox`` distribution) these are deepagents' own classes, so
results from agentd are the ones deepagents' tools and middleware expect. Without it they are
dataclasses of the same names and fields, defined here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DeleteResult",
    "EditResult",
    "ExecuteOffloadResult",
    "ExecuteResponse",
    "FileDownloadResponse",
    "FileUploadResponse",
    "GlobResult",
    "GrepResult",
    "LsResult",
    "ReadResult",
    "WriteResult",
    "HAS_DEEPAGENTS",
]

try:
    from deepagents.backends.protocol import (
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

    HAS_DEEPAGENTS = True
except ImportError:
    HAS_DEEPAGENTS = False

    @dataclass
    class ExecuteResponse:  # type: ignore[no-redef]
        """A command's merged stdout and stderr, its exit code (``None``: unknown) and whether
        output was dropped."""

        output: str
        exit_code: int | None = None
        truncated: bool = False

    @dataclass(frozen=True)
    class ExecuteOffloadResult:  # type: ignore[no-redef]
        """``execute_with_offload``: the result, with only a preview in it when ``offloaded``."""

        offloaded: bool
        response: ExecuteResponse
        preview_has_truncation_marker: bool = False

    @dataclass
    class FileUploadResponse:  # type: ignore[no-redef]
        path: str
        error: str | None = None

    @dataclass
    class FileDownloadResponse:  # type: ignore[no-redef]
        path: str
        content: bytes | None = None
        error: str | None = None

    @dataclass
    class LsResult:  # type: ignore[no-redef]
        error: str | None = None
        entries: list[dict[str, Any]] | None = None

    @dataclass
    class ReadResult:  # type: ignore[no-redef]
        error: str | None = None
        file_data: dict[str, Any] | None = None
        total_lines: int | None = None
        start_line: int | None = None
        end_line: int | None = None
        next_offset: int | None = None
        no_lines_requested: bool = False

    @dataclass
    class WriteResult:  # type: ignore[no-redef]
        error: str | None = None
        path: str | None = None

    @dataclass
    class EditResult:  # type: ignore[no-redef]
        error: str | None = None
        path: str | None = None
        occurrences: int | None = None

    @dataclass
    class DeleteResult:  # type: ignore[no-redef]
        error: str | None = None
        path: str | None = None

    @dataclass
    class GrepResult:  # type: ignore[no-redef]
        error: str | None = None
        matches: list[dict[str, Any]] | None = None
        truncated: bool = False

    @dataclass
    class GlobResult:  # type: ignore[no-redef]
        error: str | None = None
        matches: list[dict[str, Any]] | None = None
        truncated: bool = False
        truncation_reason: str | None = None
