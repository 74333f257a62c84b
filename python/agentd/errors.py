"""Exceptions of the agentd package.

Only transport failures raise: the sandbox could not be asked at all (no connection, a refused
token, no answer in time, an answer this client does not understand). What the sandbox answered is
never an exception, even a failure: a missing file is ``ReadResult(error=...)``, a failing command an
``ExecuteResponse`` with its exit code.

Each class is also the matching builtin where there is one, so ``except TimeoutError`` and
``except ConnectionError`` catch agentd's too.
"""

from __future__ import annotations

import builtins

__all__ = [
    "AgentdError",
    "AuthenticationError",
    "ConnectionError",
    "InheritedSandboxError",
    "InvalidSpecError",
    "ProtocolError",
    "ProviderError",
    "RefusedError",
    "SandboxClosedError",
    "StartError",
    "TimeoutError",
]


class AgentdError(Exception):
    """Base class: the sandbox could not be asked."""


class ConnectionError(AgentdError, builtins.ConnectionError):  # noqa: A001
    """No connection to agentd, or the link closed before the answer came (agentd gone)."""


class AuthenticationError(AgentdError):
    """agentd refused the token, or a provider refused the credentials."""


class TimeoutError(AgentdError, builtins.TimeoutError):  # noqa: A001
    """No answer within the time allowed (a provider's or the link's, not a command's timeout:
    a command that runs out of time is a result with its exit code)."""


class ProtocolError(AgentdError):
    """agentd answered something this client does not understand, or a download's sha256 did not
    match."""


class RefusedError(ProtocolError):
    """agentd refused the request (its message says why)."""


class StartError(AgentdError):
    """The embedded default's agentd could not be started."""


class ProviderError(AgentdError):
    """Docker, Daytona or Modal refused or failed a request, or is not configured."""


class InvalidSpecError(AgentdError, ValueError):
    """A sandbox spec (``docker:IMAGE``, …) that does not parse."""


class SandboxClosedError(AgentdError):
    """A call on a sandbox after ``close()``."""


class InheritedSandboxError(AgentdError):
    """A call, in a process made by ``fork`` (``os.fork``, multiprocessing's ``fork`` start method),
    on a sandbox its parent made. The sandbox stays the parent's and keeps working there; the child
    makes its own. ``close()`` of the inherited copy does nothing (it does not raise)."""
