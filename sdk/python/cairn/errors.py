"""The exceptions of the cairn SDK.

Three families, by who raises them and who should catch them:

* ``CairnError`` (an ``Exception``): a durable call or a client call failed
  in a way the caller may handle. It carries the engine's (or the server's)
  message: ``StepFailed``, ``ChildFailed``, ``Failed``, ``InvalidArgument``,
  ``WaitTimeout``, ``ClientError`` and its kin.
* ``Fail`` and ``Retry``: raised by your code. ``Fail`` in a step fails the
  step at once (no retry); ``Retry`` in a workflow retries the whole run.
* ``Stopped`` (a ``BaseException``): the engine ended the execution (the
  run suspends for a sleep, was cancelled, is handed over, or its code no
  longer matches its journal). It must travel out of the workflow function,
  so it is not an ``Exception``: ``except Exception`` does not swallow it.
"""
from __future__ import annotations

__all__ = [
    "CairnError", "Failed", "StepFailed", "ChildFailed", "InvalidArgument",
    "WaitTimeout", "ProtocolError", "EngineNotFound", "ClientError",
    "RunFailed", "RunCancelled", "Fail", "Retry", "Stopped", "Suspended",
    "Cancelled", "Handover", "Nondeterminism", "EngineFailed", "EngineGone",
]


class CairnError(Exception):
    """An error the caller may handle; ``message`` is the engine's text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Failed(CairnError):
    """A durable call failed (the engine's ``error`` with code ``failed``):
    a send to a run that is gone, for example."""


class StepFailed(Failed):
    """A step used up its attempts or failed for good; the message is the
    step's last error, as journaled."""


class ChildFailed(Failed):
    """A child run failed or was cancelled; the message says which and why."""


class InvalidArgument(CairnError, ValueError):
    """The engine refused an argument (a name, a payload), or a payload is
    larger than the engine takes."""


class WaitTimeout(CairnError, TimeoutError):
    """A signal wait, a child wait or a client's wait for a result timed out."""


class ProtocolError(CairnError):
    """The engine sent something the protocol does not allow."""


class EngineNotFound(CairnError):
    """No ``cairn-worker`` executable was found to start."""


class ClientError(CairnError):
    """The HTTP API refused a request; ``status`` is the HTTP status (0 when
    the server could not be reached) and the message the server's."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class RunFailed(CairnError):
    """The run a client waited for failed; the message is the run's error."""

    def __init__(self, message: str, run: int = 0) -> None:
        super().__init__(message)
        self.run = run


class RunCancelled(CairnError):
    """The run a client waited for was cancelled."""

    def __init__(self, message: str, run: int = 0) -> None:
        super().__init__(message)
        self.run = run


class Fail(Exception):
    """Raise in a step to fail it for good, without a retry; raised from a
    workflow it fails the run with this message (and no type name)."""


class Retry(Exception):
    """Raise in a workflow to retry the whole run from its journal after the
    workflow's backoff, while the run has attempts left."""


class Stopped(BaseException):
    """The execution is over: the workflow function must unwind.

    Raised by a durable call when the engine answers ``stop``; every later
    durable call of the same execution raises it again and sends nothing.
    Do not catch it (or re-raise it): work done while unwinding, in a
    ``finally`` block say, is not durable. ``reason`` is the protocol's
    stop reason and ``message`` the engine's text.
    """

    reason = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Suspended(Stopped):
    """A sleep, a wait or a retry backoff is not over: the run resumes when
    it is due."""

    reason = "suspended"


class Cancelled(Stopped):
    """The run was cancelled: it ends cancelled."""

    reason = "cancelled"


class Handover(Stopped):
    """The worker is draining or the run's shard moved: the run resumes on
    the shard's next owner."""

    reason = "stop"


class Nondeterminism(Stopped):
    """The workflow's durable calls differ from its journal (the message
    names both): the run fails. Guard code changes with ``ctx.patched``."""

    reason = "nondeterminism"


class EngineFailed(Stopped):
    """The engine cannot go on with the run (a step result it refused, out
    of memory): the run fails with the message."""

    reason = "failed"


class EngineGone(Stopped):
    """The connection to the engine is gone (it exited or was killed): the
    run resumes from its journal under the next engine."""

    reason = "gone"


STOPS: dict[str, type[Stopped]] = {
    c.reason: c for c in (Suspended, Cancelled, Handover, Nondeterminism, EngineFailed)
}


def stop_for(reason: str, message: str) -> Stopped:
    """The exception for a ``stop`` reply; an unknown reason (a later
    protocol's) still stops the execution."""
    cls = STOPS.get(reason)
    if cls is None:
        exc = Stopped(message)
        exc.reason = reason
        return exc
    return cls(message)


def describe(exc: BaseException) -> str:
    """``"ExcType: message"`` for an exception, as a run's or a step's error;
    just the message for ``Fail``; just the type when the message is empty."""
    text = str(exc)
    if isinstance(exc, Fail) and text:
        return text
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
