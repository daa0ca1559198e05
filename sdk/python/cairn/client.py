"""A client of cairn's HTTP API (``/v1/``, docs/sql-http.md) for Python
programs that start, signal, cancel and read runs: the standard library's
urllib, no driver.

The API is served by any ``cairn-worker`` (a Python worker's engine too)
whose ``CAIRN_HTTP_TOKEN`` is set; ``Client()`` reads the address from
``CAIRN_URL`` and the token from ``CAIRN_HTTP_TOKEN``. Each failure raises
``ClientError`` with the server's message and HTTP status.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Optional

from ._wire import Duration, dumps, to_ms
from .errors import ClientError, RunCancelled, RunFailed, WaitTimeout

FINISHED = ("completed", "failed", "cancelled")
# One long poll asks for at most this long (the API's limit is 60 s).
LONG_POLL_S = 30


@dataclass
class Enqueued:
    """What enqueueing answered: the run's ``id``; ``existed`` when a run of
    that workflow and key was there already; ``held`` when flow control
    holds it; its ``status``; the whole reply in ``raw``."""

    id: int
    existed: bool
    held: bool
    status: str
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass
class Run:
    """A run as ``GET /v1/runs/ID`` shows it (``raw`` holds every field)."""

    id: int
    workflow: str
    status: str
    key: Optional[str] = None
    group: Optional[str] = None
    attempt: int = 0
    max_attempts: int = 0
    cancel_requested: bool = False
    input: Any = None
    output: Any = None
    error: Optional[str] = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Run":
        return cls(id=int(obj["id"]), workflow=str(obj.get("workflow", "")),
                   status=str(obj.get("status", "")), key=obj.get("key"),
                   group=obj.get("group"), attempt=int(obj.get("attempt") or 0),
                   max_attempts=int(obj.get("max_attempts") or 0),
                   cancel_requested=bool(obj.get("cancel_requested")), input=obj.get("input"),
                   output=obj.get("output"), error=obj.get("error"), raw=obj)


class Client:
    """Calls the HTTP API at ``url`` (default ``CAIRN_URL``, else
    ``http://127.0.0.1:8080``) with ``token`` (default ``CAIRN_HTTP_TOKEN``).
    ``timeout`` bounds each HTTP exchange, in seconds."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        self.url = (url or os.environ.get("CAIRN_URL") or "http://127.0.0.1:8080").rstrip("/")
        self.token = token if token is not None else os.environ.get("CAIRN_HTTP_TOKEN", "")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, *, has_body: bool = False,
              timeout: Optional[float] = None) -> Any:
        data = dumps(body).encode("utf-8") if has_body else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as e:
            raise ClientError(_message(e.read(), e.reason), e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ClientError(f"{method} {self.url}{path}: {reason}") from None
        return json.loads(text) if text.strip() else None

    def enqueue(self, workflow: str, input: Any = None, *, key: Optional[str] = None,
                group: Optional[str] = None, delay: Optional[Duration] = None,
                run_at: Optional[_dt.datetime] = None, max_attempts: Optional[int] = None,
                concurrency_key: Optional[str] = None, priority: Optional[int] = None,
                **fields: Any) -> Enqueued:
        """Enqueues a run of ``workflow`` with ``input``. The same ``(workflow,
        key)`` again returns the first run (``existed``). ``delay`` (seconds
        or a timedelta) or ``run_at`` say when it starts. Other fields of
        ``POST /v1/runs`` pass through as keyword arguments."""
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if key is not None:
            body["key"] = key
        if group is not None:
            body["group"] = group
        if delay is not None:
            body["delay"] = to_ms(delay, "delay")
        if run_at is not None:
            if run_at.tzinfo is None:
                run_at = run_at.replace(tzinfo=_dt.timezone.utc)
            body["run_at"] = run_at.isoformat()
        for name, value in (("max_attempts", max_attempts), ("concurrency_key", concurrency_key),
                            ("priority", priority)):
            if value is not None:
                body[name] = value
        body.update(fields)
        r = self._call("POST", "/v1/runs", body, has_body=True)
        return Enqueued(id=int(r["id"]), existed=bool(r.get("existed")),
                        held=bool(r.get("held")), status=str(r.get("status", "")), raw=r)

    def signal(self, run: int, name: str, payload: Any = None) -> None:
        """Sends signal ``name`` with ``payload`` to ``run``."""
        self._call("POST", f"/v1/runs/{int(run)}/signals/{urllib.parse.quote(name, safe='')}",
                   payload, has_body=True)

    def cancel(self, run: int) -> None:
        """Cancels ``run``: at once if it has not started, else at its next
        durable call."""
        self._call("POST", f"/v1/runs/{int(run)}/cancel")

    def retry(self, run: int) -> None:
        """Runs a failed or cancelled ``run`` again from its journal."""
        self._call("POST", f"/v1/runs/{int(run)}/retry")

    def get(self, run: int) -> Run:
        """The run as it is now."""
        return Run.from_json(self._call("GET", f"/v1/runs/{int(run)}"))

    def wait(self, run: int, timeout: Optional[Duration] = None) -> Run:
        """The run once it has finished (completed, failed or cancelled),
        with long polls; WaitTimeout once ``timeout`` (None: never) passed."""
        deadline = None if timeout is None else time.monotonic() + to_ms(timeout, "timeout") / 1000
        while True:
            left = LONG_POLL_S if deadline is None else deadline - time.monotonic()
            poll = max(0.0, min(LONG_POLL_S, left))
            r = Run.from_json(self._call("GET", f"/v1/runs/{int(run)}?wait={int(poll * 1000)}ms",
                                         timeout=self.timeout + poll))
            if r.finished:
                return r
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"run {run} is still {r.status} after {timeout} s")

    def result(self, run: int, timeout: Optional[Duration] = None) -> Any:
        """The run's output once it completed. Raises RunFailed (with the
        run's error) or RunCancelled, or WaitTimeout."""
        r = self.wait(run, timeout)
        if r.status == "completed":
            return r.output
        if r.status == "cancelled":
            raise RunCancelled(f"run {r.id} was cancelled", r.id)
        raise RunFailed(r.error or f"run {r.id} failed", r.id)


def _message(body: bytes, reason: str) -> str:
    """The server's message in an error reply ({"error": ...})."""
    try:
        obj = json.loads(body)
        if isinstance(obj, dict) and obj.get("error"):
            return str(obj["error"])
    except ValueError:
        pass
    return body.decode("utf-8", "replace").strip() or str(reason)
