"""cairn: durable workflows in Python, executed by cairn's engine.

Write a workflow as a plain function that gets a ``Context``; each durable
call on it (``ctx.step``, ``ctx.sleep``, ``ctx.wait_for_signal`` ...) is
journaled by the engine, so a run survives crashes, restarts and deploys
and never repeats a step whose result was journaled::

    import cairn

    worker = cairn.Worker()

    @worker.workflow("py.hello")
    def hello(ctx: cairn.Context, input: dict) -> dict:
        greeting = ctx.step("greet", lambda: f"hello, {input['name']}")
        ctx.sleep(1)
        return {"greeting": greeting}

    worker.run()   # starts cairn-worker beside it; SIGTERM drains

``cairn.Client`` starts, signals, cancels and reads runs over the HTTP API.
The protocol between this package and the engine is docs/protocol.md.
"""
from ._wire import RetryPolicy
from .client import Client, Enqueued, Run
from .context import ChildResult, Context, ContinueAsNew
from .errors import (CairnError, Cancelled, ChildFailed, ClientError, EngineFailed, EngineGone,
                     EngineNotFound, Fail, Failed, Handover, InvalidArgument, Nondeterminism,
                     ProtocolError, Retry, RunCancelled, RunFailed, StepFailed, Stopped,
                     Suspended, WaitTimeout)
from .worker import SDK, Worker, __version__

__all__ = [
    "Worker", "Context", "ContinueAsNew", "ChildResult", "RetryPolicy", "Client", "Enqueued", "Run",
    "SDK", "__version__",
    "CairnError", "Failed", "StepFailed", "ChildFailed", "InvalidArgument", "WaitTimeout",
    "ProtocolError", "EngineNotFound", "ClientError", "RunFailed", "RunCancelled",
    "Fail", "Retry", "Stopped", "Suspended", "Cancelled", "Handover", "Nondeterminism",
    "EngineFailed", "EngineGone",
]
