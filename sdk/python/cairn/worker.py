"""The worker: registers workflow functions, starts the engine
(``cairn-worker --sdk-fds``) and serves the runs it sends.

One thread per execution lane reads its own socket and runs the workflow
(and its steps) right there, so a durable call is one write and one read
on that thread, with no hand-off between threads. The main thread waits for
the engine, forwards SIGTERM and SIGINT to it, and starts a new engine when
one dies (docs/protocol.md, "When one side dies").
"""
from __future__ import annotations

import logging
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Optional, TypeVar

from . import errors
from ._wire import PROTOCOLS, Lane, RetryPolicy, hello
from .context import Context, ContinueAsNew
from .errors import EngineNotFound, ProtocolError, Retry, Stopped

__version__ = "0.1.0"
SDK = f"cairn-python/{__version__}"

log = logging.getLogger("cairn")

WorkflowFn = Callable[[Context, Any], Any]
F = TypeVar("F", bound=WorkflowFn)

# The engine's environment defaults (docs/protocol.md, "Starting the engine").
ENGINE_DEFAULTS = {
    "CAIRN_SHARD_GROUPS": "python",
    "CAIRN_HTTP_ADDR": "127.0.0.1:0",
    "CAIRN_CONCURRENCY": "16",
}
# Restarts of an engine that died: 1 s, doubling up to 30 s while each one
# dies within a minute of starting.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
BACKOFF_RESET_AFTER_S = 60.0


@dataclass(frozen=True)
class _Workflow:
    name: str
    fn: WorkflowFn
    retry: Optional[RetryPolicy]


def find_engine(environ: Mapping[str, str] = os.environ) -> str:
    """The ``cairn-worker`` to start: ``CAIRN_WORKER_BIN``, else
    ``bin/cairn-worker`` of the repository this package sits in, else
    ``cairn-worker`` on ``PATH``. Raises EngineNotFound."""
    explicit = environ.get("CAIRN_WORKER_BIN")
    if explicit:
        if os.access(explicit, os.X_OK) and not os.path.isdir(explicit):
            return explicit
        raise EngineNotFound(f"CAIRN_WORKER_BIN={explicit}: not an executable file")
    here = Path(__file__).resolve().parent  # .../sdk/python/cairn
    if here.parent.name == "python" and here.parent.parent.name == "sdk":
        candidate = here.parent.parent.parent / "bin" / "cairn-worker"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("cairn-worker", path=environ.get("PATH"))
    if found:
        return found
    raise EngineNotFound("cannot find cairn-worker: set CAIRN_WORKER_BIN, build the repository "
                         "with make (bin/cairn-worker), or put cairn-worker on PATH")


def engine_env(environ: Mapping[str, str], concurrency: Optional[int] = None) -> dict[str, str]:
    """The engine's environment: ours, with the SDK's defaults where unset;
    ``concurrency`` (when given) sets CAIRN_CONCURRENCY. Raises ValueError
    for a CAIRN_CONCURRENCY that is not a positive number."""
    env = dict(environ)
    for name, value in ENGINE_DEFAULTS.items():
        if not env.get(name):
            env[name] = value
    if concurrency is not None:
        env["CAIRN_CONCURRENCY"] = str(concurrency)
    lanes(env)
    return env


def lanes(env: Mapping[str, str]) -> int:
    """The number of execution lanes: CAIRN_CONCURRENCY."""
    text = env.get("CAIRN_CONCURRENCY", ENGINE_DEFAULTS["CAIRN_CONCURRENCY"])
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f'invalid value for CAIRN_CONCURRENCY: "{text}"; expected a number of '
                         "runs executed at once, 1 or more")
    return n


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it (128 + N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode


class _Engine:
    """One ``cairn-worker --sdk-fds`` child and our ends of its lanes."""

    def __init__(self, binary: str, env: dict[str, str], n: int) -> None:
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(n + 1)]
        fds = [b.fileno() for _, b in pairs]
        try:
            # A process group of its own: a terminal's Ctrl-C reaches only
            # us, and each signal we get becomes one SIGTERM for it (the
            # terminal's as well would make two, and a second cuts a drain).
            self.proc = subprocess.Popen([binary, "--sdk-fds", ",".join(map(str, fds))],
                                         pass_fds=fds, env=env, stdin=subprocess.DEVNULL,
                                         process_group=0)
        except BaseException:
            for a, _ in pairs:
                a.close()
            raise
        finally:
            for _, b in pairs:
                b.close()
        self.control = Lane(pairs[0][0])
        self.lanes = [Lane(a) for a, _ in pairs[1:]]
        self.started = time.monotonic()

    def handshake(self, greeting: dict[str, Any]) -> Optional[dict[str, Any]]:
        """Sends hello; the welcome, or None when the engine refused or
        exited first (its message is on standard error)."""
        try:
            self.control.send(greeting)
            reply = self.control.receive()
        except OSError:
            return None
        except ProtocolError as e:
            reply = {"t": "not a message", "error": str(e)}
        if reply is None:
            return None
        if reply.get("t") == "refused":
            log.error("cairn: the engine refused to serve: %s",
                      reply.get("message"))
            return None
        if reply.get("t") != "welcome" or reply.get("protocol") not in PROTOCOLS:
            self.proc.kill()
            self.proc.wait()
            self.control.close()
            raise ProtocolError(f"the engine answered hello with {reply!r}")
        max_payload = int(reply.get("max_payload") or 0) or self.control.max_payload
        for lane in [self.control, *self.lanes]:
            lane.max_payload = max_payload
            lane.protocol = int(reply["protocol"])
        return reply

    def wait(self) -> int:
        """Waits for the engine to exit; its exit status."""
        return exit_status(self.proc.wait())

    def shut(self) -> None:
        """Closes the control lane. The execution lanes saw end of file when
        the engine exited; their threads close them."""
        self.control.close()


class Worker:
    """Serves workflow functions written in Python.

    >>> worker = cairn.Worker()
    >>> @worker.workflow("py.order")
    ... def order(ctx: cairn.Context, input: dict) -> dict: ...
    >>> worker.run()

    ``run()`` starts the engine (``cairn-worker``, which holds the leases,
    the journal and the database connection), serves the runs it sends until
    SIGTERM or SIGINT, lets the engine drain, and exits with its status.
    ``concurrency`` is the number of runs executed at once (default
    CAIRN_CONCURRENCY, else 16); the engine reads every other setting from
    the environment (DATABASE_URL, CAIRN_*), as any cairn-worker does.
    """

    def __init__(self, *, concurrency: Optional[int] = None,
                 engine: Optional[str] = None) -> None:
        self._workflows: dict[str, _Workflow] = {}
        self._concurrency = concurrency
        self._engine_bin = engine
        self._engine: Optional[_Engine] = None
        self._draining = False
        self._wake = threading.Event()

    # -------------------------------------------------------- registration

    def workflow(self, name: str, *, retry: Optional[RetryPolicy] = None) -> Callable[[F], F]:
        """Registers the decorated function as workflow ``name``. It is called
        as ``fn(ctx, input)`` and returns the run's output (a JSON value).
        ``retry`` is the policy between attempts of the whole run (when the
        function raises ``cairn.Retry``); it takes no timeout."""
        if retry is not None and retry.timeout is not None:
            raise ValueError(f"workflow {name!r}: a run's retry policy takes no timeout")

        def register(fn: F) -> F:
            self.register(name, fn, retry=retry)
            return fn
        return register

    def register(self, name: str, fn: WorkflowFn, *, retry: Optional[RetryPolicy] = None) -> None:
        """Registers ``fn`` as workflow ``name`` (the decorator's plain form)."""
        if name in self._workflows:
            raise ValueError(f"workflow {name!r} is registered twice")
        self._workflows[name] = _Workflow(name, fn, retry)

    def hello(self) -> dict[str, Any]:
        """The hello message this worker sends the engine."""
        return hello({w.name: w.retry for w in self._workflows.values()}, SDK,
                     f"python {platform.python_version()}")

    # ------------------------------------------------------------- running

    def run(self) -> NoReturn:
        """``serve()``, then exits the process with its status (127 when no
        engine is found, 2 for a bad setting of the SDK's, 1 for an engine
        that does not speak the protocol)."""
        try:
            status = self.serve()
        except (errors.CairnError, ValueError) as e:
            print(f"cairn: {e}", file=sys.stderr)
            status = 127 if isinstance(e, EngineNotFound) else 2 if isinstance(e, ValueError) else 1
        sys.exit(status)

    def serve(self) -> int:
        """Starts the engine and serves its runs until SIGTERM or SIGINT (or
        an engine that exits before it is ready); returns the engine's exit
        status (0 when the stop came while a dead engine waited to be
        started again). Signals are handled only when called from the main
        thread; each SIGTERM or SIGINT is sent on to the engine as a
        SIGTERM (a second one cuts its drain short, as for cairn-worker)."""
        if not self._workflows:
            raise ValueError("no workflow registered: decorate a function with worker.workflow()")
        greeting = self.hello()
        env = engine_env(os.environ, self._concurrency)
        n = lanes(env)
        binary = self._engine_bin or find_engine(env)
        restore = self._install_signals()
        try:
            return self._supervise(binary, env, n, greeting)
        finally:
            restore()

    def stop(self) -> None:
        """Asks the engine to drain (as SIGTERM does); ``serve()`` returns
        once it has exited. Safe from any thread and from signal handlers."""
        self._draining = True
        self._wake.set()
        engine = self._engine
        if engine is not None and engine.proc.returncode is None:
            try:
                engine.proc.send_signal(signal.SIGTERM)
            except (ProcessLookupError, OSError):
                pass

    def _install_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {s: signal.signal(s, lambda *_: self.stop()) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, handler in old.items():
                signal.signal(s, handler)
        return restore

    def _supervise(self, binary: str, env: dict[str, str], n: int,
                   greeting: dict[str, Any]) -> int:
        backoff = BACKOFF_FIRST_S
        status = 0
        while not self._draining:
            engine = self._engine = _Engine(binary, env, n)
            if self._draining:  # a signal came while it started
                self.stop()
            if engine.handshake(greeting) is None:
                status = engine.wait()
                engine.shut()
                log.error("cairn: the engine exited with status %d before it was ready", status)
                return status
            for i, lane in enumerate(engine.lanes):
                threading.Thread(target=self._serve_lane, args=(lane,), daemon=True,
                                 name=f"cairn-lane-{i + 1}").start()
            status = engine.wait()
            engine.shut()
            if self._draining:
                break
            lived = time.monotonic() - engine.started
            if lived >= BACKOFF_RESET_AFTER_S:
                backoff = BACKOFF_FIRST_S
            log.warning("cairn: the engine exited with status %d after %.1f s; starting a new "
                        "one in %.0f s", status, lived, backoff)
            if self._wake.wait(backoff):
                status = 0  # stopped while no engine ran: nothing to drain
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        self._engine = None
        return status

    # ---------------------------------------------------------- executions

    def _serve_lane(self, lane: Lane) -> None:
        """One execution lane: runs each execution the engine sends, on this
        thread, until the engine closes the lane."""
        try:
            while True:
                msg = lane.receive()
                if msg is None:
                    break
                if msg.get("t") != "run":
                    raise ProtocolError(f"expected a run on an execution lane, got {msg!r}")
                self._execute(lane, msg)
        except ProtocolError as e:
            log.error("cairn: %s; closing the lane", e)
        except (OSError, ValueError):
            pass  # the engine is gone
        finally:
            lane.close()

    def _execute(self, lane: Lane, msg: dict[str, Any]) -> None:
        name = str(msg.get("workflow"))
        ctx = Context(lane, int(msg["x"]), int(msg.get("run", 0)), name, msg.get("input"),
                      int(msg.get("attempt", 1)), msg.get("traceparent"))
        wf = self._workflows.get(name)
        outcome: dict[str, Any]
        try:
            if wf is None:
                raise LookupError(f"workflow {name!r} is not served by this process")
            value = wf.fn(ctx, ctx.input)
            outcome = {"op": "return", "value": value}
            if isinstance(value, ContinueAsNew):
                outcome = value.outcome(lane.protocol)
        except Stopped:
            return
        except Retry as e:
            outcome = {"op": "fail", "message": errors.describe(e), "retryable": True}
        except BaseException as e:  # noqa: BLE001 - any failure is the run's
            log.debug("workflow %s run %s failed", name, ctx.run_id, exc_info=True)
            outcome = {"op": "fail", "message": errors.describe(e), "retryable": False}
        finally:
            ctx._over = True
        if ctx._stopped is not None:
            return  # the function swallowed its stop: nothing more for x
        outcome["x"] = ctx._x
        try:
            lane.send(outcome)
        except errors.InvalidArgument as e:  # an output JSON cannot hold, or too large
            lane.send({"x": ctx._x, "op": "fail", "retryable": False,
                       "message": f"the workflow's output cannot be stored: {e}"})
