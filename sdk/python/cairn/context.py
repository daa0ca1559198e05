"""The context a workflow function gets: one method per durable call of the
protocol (docs/protocol.md, "Durable calls").

Each method is one request on the execution's lane and one reply. The
engine decides everything (journaled result, run the step now, stop); this
module only turns replies into return values and exceptions. After a stop
the execution sends nothing more: every later call raises the same stop.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Optional, Sequence, TypeVar

from . import errors
from ._wire import Duration, Instant, Lane, RetryPolicy, dumps, from_unix_ms, to_ms, to_unix_ms
from .errors import (ChildFailed, EngineGone, Failed, InvalidArgument, ProtocolError, StepFailed,
                     Stopped, WaitTimeout)

T = TypeVar("T")
log = logging.getLogger("cairn")


class ContinueAsNew:
    """What ``ctx.continue_as_new(input)`` returns, for the workflow to
    return: the run ends, and its successor starts with ``input`` and a
    fresh journal."""

    def __init__(self, input: Any) -> None:
        self.input = input

    def outcome(self, protocol: int) -> dict[str, Any]:
        """The message that ends the execution (protocol version 2), or a
        failure of the run when the engine speaks only version 1."""
        if protocol < 2:
            return {"op": "fail", "retryable": False,
                    "message": "continue_as_new needs protocol version 2; the engine speaks "
                               f"{protocol}: use a newer cairn-worker"}
        return {"op": "continue_as_new", "input": self.input}


@dataclass(frozen=True)
class ChildResult:
    """One child's end in a wait for many (``Context.wait_children``):
    ``status`` is ``"completed"``, ``"failed"`` or ``"cancelled"``;
    ``output`` its output when it completed, ``error`` why it did not."""
    child: int
    status: str
    output: Any = None
    error: Optional[str] = None


class Context:
    """A workflow's handle on its run, for one execution.

    Attributes: ``run_id`` (the run's id), ``workflow`` (its name),
    ``input`` (its input, as the function also gets it), ``attempt`` (1 for
    the run's first attempt, 2 after a workflow-level retry, ...),
    ``traceparent`` (the W3C trace context of where the run is: in a step
    function its attempt's OpenTelemetry span, elsewhere the run's; None
    from an engine older than protocol version 3).

    Durable calls are journaled: when the run resumes (after a sleep, a
    signal, a crash) the function runs again from the top and each call
    already in the journal returns its recorded result at once. So make the
    same calls in the same order every time: branch on inputs and on what
    durable calls returned, never on the wall clock or ``random`` (use
    ``now`` and ``random`` here). Names follow the rules of step names
    (1 to 128 bytes of ``[A-Za-z0-9_.:-]``).
    """

    def __init__(self, lane: Lane, x: int, run_id: int, workflow: str, input: Any,
                 attempt: int, traceparent: Optional[str] = None) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.input = input
        self.attempt = attempt
        self._lane = lane
        self._x = x
        self._lock = threading.Lock()
        self._stopped: Optional[Stopped] = None
        self._step: Optional[str] = None  # the step whose function is running
        self._over = False  # the function has returned: the context is dead
        self.step_attempt = 0  # the attempt of the step whose function runs
        self._run_tp = traceparent  # the run span's trace context
        self._step_tp: Optional[str] = None  # the running step attempt's

    @property
    def traceparent(self) -> Optional[str]:
        """The W3C ``traceparent`` of where the run is now: inside a step
        function, the OpenTelemetry span of its attempt; elsewhere, the
        run's span. The same in every replay; pass it on to the services a
        step calls (``{"traceparent": ctx.traceparent}``)."""
        return self._step_tp if self._step is not None else self._run_tp

    # ------------------------------------------------------------ plumbing

    def _exchange(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Sends a request and returns its reply; raises the stop for a
        ``stop`` reply (and for every call after one)."""
        with self._lock:
            if self._stopped is not None:
                raise self._stopped
            if self._over:
                raise RuntimeError("this context's execution is over; a durable call must "
                                   "come from the workflow function while it runs")
            msg["x"] = self._x
            self._send(msg)
            return self._reply()

    def _send(self, msg: dict[str, Any]) -> None:
        """Writes a message of this execution. InvalidArgument (too large, not
        JSON) leaves the execution as it was; a closed lane stops it."""
        try:
            self._lane.send(msg)
        except OSError:
            self._stopped = EngineGone("the connection to the engine is closed")
            raise self._stopped from None

    def _reply(self) -> dict[str, Any]:
        try:
            reply = self._lane.receive()
        except ProtocolError as e:
            self._broken(str(e))
        except OSError:
            reply = None
        if reply is None:
            self._stopped = EngineGone("the connection to the engine is closed")
            raise self._stopped
        if reply.get("t") == "stop":
            self._stopped = errors.stop_for(str(reply.get("reason")), str(reply.get("message", "")))
            raise self._stopped
        return reply

    def _call(self, msg: dict[str, Any], failed: type[Failed] = Failed) -> Any:
        """A durable call other than a step: the ``ok`` value, or raises."""
        if self._step is not None:
            raise RuntimeError(f"{msg['op']} inside step {self._step!r}: a step's function may "
                               "call should_stop() but no other durable call")
        return self._value(self._exchange(msg), failed)

    def _value(self, reply: dict[str, Any], failed: type[Failed]) -> Any:
        t = reply.get("t")
        if t == "ok":
            return reply.get("value")
        if t == "error":
            message = str(reply.get("message", ""))
            if reply.get("code") == "invalid":
                raise InvalidArgument(message)
            raise failed(message)
        if t == "timeout":
            raise WaitTimeout("the wait timed out")
        self._broken(f"the engine answered {dumps(reply)[:200]}, which the protocol does not allow "
                     "here")

    def _broken(self, why: str) -> NoReturn:
        """The engine broke the protocol: this lane ends (the engine sees it
        close and exits; the runs resume under the next engine), and the
        execution stops."""
        log.error("cairn: %s; closing the lane", why)
        try:
            self._lane.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._stopped = EngineGone(why)
        raise self._stopped

    # -------------------------------------------------------------- steps

    def step(self, name: str, fn: Callable[..., T], *args: Any,
             retry: Optional[RetryPolicy] = None, **kwargs: Any) -> T:
        """Runs ``fn(*args, **kwargs)`` once and journals its result (a JSON
        value) under ``name``; returns it, now and on every replay.

        Any exception ``fn`` raises is retried per ``retry`` (default: 3
        attempts, 1 s backoff doubling, no timeout), the run suspending
        durably between attempts; ``cairn.Fail`` is not retried. Raises
        ``StepFailed`` with the last error once the step failed for good.
        With ``retry.timeout``, a result that comes after the timeout is
        discarded and the attempt counts as timed out; ``should_stop()``
        turns true at the deadline, so a long step should poll it.
        The value returned is the JSON round trip of what ``fn`` returned
        (a tuple comes back a list), as a replay will return it.
        """
        msg: dict[str, Any] = {"op": "step", "name": name}
        awaited = False
        if retry is not None:
            msg["retry"] = retry.to_wire()
            awaited = "timeout_ms" in msg["retry"]
            if awaited:
                msg["await"] = True
        if self._step is not None:
            raise RuntimeError(f"step {name!r} inside step {self._step!r}")
        reply = self._exchange(msg)
        if reply.get("t") != "run_step":
            return self._value(reply, StepFailed)
        return self._run_step(name, fn, args, kwargs, awaited, int(reply.get("attempt", 1)),
                              reply.get("traceparent"))

    def _run_step(self, name: str, fn: Callable[..., T], args: tuple, kwargs: dict,
                  awaited: bool, attempt: int, traceparent: Optional[str] = None) -> T:
        self._step, self.step_attempt, self._step_tp = name, attempt, traceparent
        try:
            value = fn(*args, **kwargs)
        except Stopped:
            raise
        except BaseException as e:  # noqa: BLE001 - every failure is the step's
            return self._step_error(errors.describe(e), not isinstance(e, errors.Fail))
        finally:
            self._step = self._step_tp = None
        try:
            text = dumps(value)
            size = len(text.encode("utf-8"))
        except (TypeError, ValueError) as e:  # a set, NaN, a lone surrogate
            return self._step_error(f"{type(e).__name__}: the step's result is not a JSON "
                                    f"value: {e}", False)
        if size > self._lane.max_payload:
            return self._step_error(f"the step's result is {size} bytes, more than the "
                                    f"engine's max_payload of {self._lane.max_payload}", False)
        result = json.loads(text)
        with self._lock:
            if self._stopped is not None:
                raise self._stopped
            self._send({"x": self._x, "op": "step_result", "value": result})
            if not awaited:
                return result  # type: ignore[no-any-return]
            return self._value(self._reply(), StepFailed)

    def _step_error(self, message: str, retryable: bool) -> Any:
        """Reports a failed attempt; the reply is an error or a stop."""
        with self._lock:
            if self._stopped is not None:
                raise self._stopped
            self._send({"x": self._x, "op": "step_error", "message": message,
                        "retryable": retryable})
            return self._value(self._reply(), StepFailed)

    # ------------------------------------------------------------- timers

    def sleep(self, duration: Duration, *, name: str = "sleep") -> None:
        """Sleeps durably for ``duration`` (seconds or a timedelta): the run
        suspends, frees its lane, and resumes when it is due, on whichever
        worker then owns it."""
        self._call({"op": "sleep", "name": name, "ms": to_ms(duration, "duration")})

    def sleep_until(self, when: Instant, *, name: str = "sleep_until") -> None:
        """Sleeps durably until ``when`` (a datetime, naive taken as UTC, or
        Unix seconds)."""
        self._call({"op": "sleep_until", "name": name, "unix_ms": to_unix_ms(when)})

    # ------------------------------------------------------------ signals

    def wait_for_signal(self, name: str, timeout: Optional[Duration] = None) -> Any:
        """Returns the payload of the signal ``name`` (one sent before the
        call is buffered; signals of a name are consumed in the order they
        were sent). The run suspends until it comes. Raises ``WaitTimeout``
        once ``timeout`` (seconds or a timedelta; None: never) has passed
        since the first call."""
        ms = None if timeout is None else to_ms(timeout, "timeout")
        return self._call({"op": "signal", "name": name, "timeout_ms": ms})

    # ------------------------------------------------- journaled values

    def now(self) -> _dt.datetime:
        """The wall clock (an aware UTC datetime), journaled: a replay gets
        the same time."""
        return from_unix_ms(int(self._call({"op": "now"})))

    def random(self) -> int:
        """A random 64-bit number (0 to 2**64 - 1), journaled."""
        return int(self._call({"op": "random"}))

    # ---------------------------------------------------------- children

    def start_child(self, workflow: str, input: Any = None, *, name: str = "child") -> int:
        """Starts a child run of ``workflow`` in this run's shard group, once;
        returns its id. A parent that ends cancelled cancels its unfinished
        children; one that completes or fails leaves them running."""
        return int(self._call({"op": "child_start", "name": name, "workflow": workflow,
                               "input": input}))

    def wait_child(self, child: int, timeout: Optional[Duration] = None) -> Any:
        """Returns the output of the child run ``child`` once it completed
        (the run suspends meanwhile). Raises ``ChildFailed`` when it failed
        or was cancelled, ``WaitTimeout`` once ``timeout`` has passed."""
        ms = None if timeout is None else to_ms(timeout, "timeout")
        return self._call({"op": "child_wait", "child": child, "timeout_ms": ms}, ChildFailed)

    def wait_children(self, children: Sequence[int], *, first: Optional[int] = None,
                      timeout: Optional[Duration] = None) -> list[Optional[ChildResult]]:
        """Waits for the children ``children`` (ids this run started, none
        twice) as one durable call: all of them, or the ``first`` to end
        (1: any). The run suspends and is woken once, when the wait can be
        met. Returns, in the order given, a ``ChildResult`` for each child
        that has ended (those that ended by then, ``first`` or more) and
        None for the others; a failed child is a result, not an exception.
        Raises ``WaitTimeout`` once ``timeout`` has passed, and
        ``InvalidArgument`` for an id this run did not start."""
        ms = None if timeout is None else to_ms(timeout, "timeout")
        ids = [int(c) for c in children]
        value = self._call({"op": "child_wait_all", "children": ids, "k": first,
                            "timeout_ms": ms})
        return [None if r is None else
                ChildResult(child, str(r.get("status")), r.get("output"), r.get("error"))
                for child, r in zip(ids, value)]

    def wait_all_children(self, children: Sequence[int],
                          timeout: Optional[Duration] = None) -> list[Any]:
        """``wait_children`` of all of them: their outputs, in the order
        given. Raises ``ChildFailed`` naming the first that failed or was
        cancelled."""
        out = []
        for r in self.wait_children(children, timeout=timeout):
            assert r is not None
            if r.status != "completed":
                raise ChildFailed(f"child run {r.child} {r.status}: {r.error}")
            out.append(r.output)
        return out

    def run_child(self, workflow: str, input: Any = None, *, name: str = "child",
                  timeout: Optional[Duration] = None) -> Any:
        """``start_child`` then ``wait_child``: the child's output."""
        return self.wait_child(self.start_child(workflow, input, name=name), timeout)

    # ------------------------------------------------- other runs, events

    def send(self, run: int, signal: str, payload: Any = None, *, name: str = "send") -> None:
        """Sends ``signal`` with ``payload`` to run ``run``, once. Raises
        ``Failed`` when that run does not exist or has finished."""
        self._call({"op": "send", "name": name, "run": run, "signal": signal,
                    "payload": payload})

    def enqueue(self, workflow: str, input: Any = None, *, name: str = "enqueue") -> int:
        """Starts an independent run of ``workflow``, once; returns its id.
        Nobody waits for it or cancels it with this run."""
        return int(self._call({"op": "enqueue", "name": name, "workflow": workflow,
                               "input": input}))

    def set_event(self, key: str, value: Any) -> None:
        """Publishes ``value`` under ``key`` on this run (the latest wins):
        clients read it with ``cairn event RUN KEY``, woken as it changes."""
        self._call({"op": "set_event", "key": key, "value": value})

    # ----------------------------------------------------------- control

    def patched(self, patch: str) -> bool:
        """True when this run takes the code added under ``patch`` (it reached
        this point with the new code); False for a run whose journal was
        written before it (it keeps the old path)."""
        return bool(self._call({"op": "patched", "patch": patch}))

    def continue_as_new(self, input: Any = None) -> ContinueAsNew:
        """Return what this gives to end the run and start its successor: a
        new run of the same workflow with ``input`` and a fresh journal, in
        the run's final commit (a crash leaves the run going on or exactly
        one successor)::

            return ctx.continue_as_new({"cursor": cursor})

        A workflow that loops without end (a poller, a subscription) does so
        every so many iterations, so that its journal stays small. The run
        ends completed; ``Client.result`` and ``cairn result`` follow the
        chain to its last run, and a signal to a run that continued goes to
        the last run of its chain. A run cancelled meanwhile ends cancelled
        instead."""
        return ContinueAsNew(input)

    def should_stop(self) -> bool:
        """True once the run is cancelled, the worker drains, the run's shard
        moves or the running step is past its timeout: a long step should
        poll it and give up. The one call a step's function may make."""
        return bool(self._value(self._exchange({"op": "should_stop"}), Failed))
