"""The reference side of tests/tests/state.rs: runs scripts of file operations on deepagents'
own ``StateBackend`` and prints what each returned.

stdin: a JSON list of cases; a case is a list of operations, each ``{"verb": …, …}`` with the
fields of agentd's ``FsRequest`` (protocol/src/fs.rs), or ``{"verb": "upload", "files": [[path,
base64]]}`` / ``{"verb": "download", "paths": [path]}``. Every case starts from no files and runs in
one LangGraph node over deepagents' ``FilesystemState`` (``StateBackend`` works only there).

stdout: a JSON list, per case the list of results: the result dataclass as a dict, download content
as base64, and ``{"raised": "<type>: <message>"}`` for an operation that raised.
"""

import base64
import dataclasses
import json
import sys
from typing import Any

from deepagents.backends import StateBackend
from deepagents.middleware.filesystem import FilesystemState
from langgraph.graph import END, START, StateGraph


def run(backend: StateBackend, op: dict[str, Any]) -> Any:
    verb = op["verb"]
    if verb == "ls":
        return backend.ls(op["path"])
    if verb == "read":
        return backend.read(op["path"], op["offset"], op["limit"])
    if verb == "write":
        return backend.write(op["path"], op["content"])
    if verb == "edit":
        return backend.edit(op["path"], op["old"], op["new"], op["replace_all"])
    if verb == "glob":
        return backend.glob(op["pattern"], op.get("path"))
    if verb == "grep":
        return backend.grep(op["pattern"], op.get("path"), op.get("glob"), max_count=op.get("max_count"))
    if verb == "delete":
        return backend.delete(op["path"])
    if verb == "upload":
        return backend.upload_files([(path, base64.b64decode(data)) for path, data in op["files"]])
    if verb == "download":
        return [
            {
                "path": r.path,
                "content": None if r.content is None else base64.b64encode(r.content).decode(),
                "error": r.error,
            }
            for r in backend.download_files(op["paths"])
        ]
    msg = f"unknown verb {verb!r}"
    raise ValueError(msg)


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def case(ops: list[dict[str, Any]]) -> list[Any]:
    backend = StateBackend()
    results: list[Any] = []

    def node(_state: FilesystemState) -> dict[str, Any]:
        for op in ops:
            try:
                results.append(plain(run(backend, op)))
            except Exception as exc:  # noqa: BLE001 - a raise is a result to compare
                results.append({"raised": f"{type(exc).__name__}: {exc}"})
        return {}

    graph = StateGraph(FilesystemState)
    graph.add_node("work", node)
    graph.add_edge(START, "work")
    graph.add_edge("work", END)
    graph.compile().invoke({"messages": [], "files": {}})
    return results


json.dump([case(ops) for ops in json.load(sys.stdin)], sys.stdout)
