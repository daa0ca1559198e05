"""The wire format of the worker protocol (docs/protocol.md): one compact
JSON object per line, and the conversions between Python values and the
protocol's fields (durations and times in milliseconds, retry policies).

Pure functions and one small class, ``Lane``, which owns a connected socket
and reads and writes whole messages on it. Nothing here knows about
workflows; ``context.py`` and ``worker.py`` build on it.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import socket
from dataclasses import dataclass
from typing import Any, Optional, Union

from .errors import InvalidArgument, ProtocolError

PROTOCOL = 1
# The versions this SDK speaks: 2 adds continue_as_new (docs/protocol.md).
PROTOCOLS = (1, 2, 3)
# Lines may be max_payload + 64 KiB long; until `welcome` says otherwise the
# engine's default max_payload is assumed.
DEFAULT_MAX_PAYLOAD = 1 << 20
LINE_SLACK = 64 << 10

Duration = Union[int, float, _dt.timedelta]
Instant = Union[int, float, _dt.datetime]


def dumps(value: Any) -> str:
    """Compact JSON text: no NaN or infinity (not JSON), UTF-8 kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(msg: dict[str, Any]) -> bytes:
    """One message as a protocol line (UTF-8, ended by a newline). JSON text
    never holds a raw newline: json.dumps escapes those in strings.
    Raises TypeError or ValueError for a value JSON cannot hold (a set, NaN,
    a lone surrogate)."""
    return dumps(msg).encode("utf-8") + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """The message a line holds; ProtocolError if it is not a JSON object."""
    try:
        msg = json.loads(line)
    except ValueError as e:  # UnicodeDecodeError is a ValueError too
        raise ProtocolError(f"the engine sent a line that is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"the engine sent {type(msg).__name__} where an object belongs")
    return msg


def to_ms(value: Duration, what: str) -> int:
    """A duration (seconds as a number, or a timedelta) in whole milliseconds,
    rounded up so that a positive duration never becomes zero."""
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what} must be seconds (a number) or a timedelta, not {type(value).__name__}")
    if math.isnan(seconds) or seconds < 0 or math.isinf(seconds):
        raise ValueError(f"{what} must be a finite duration of 0 s or more, not {value!r}")
    return math.ceil(seconds * 1000 - 1e-6)


def to_unix_ms(when: Instant, what: str = "when") -> int:
    """A point in time (an aware datetime, a naive one taken as UTC, or Unix
    seconds as a number) as Unix milliseconds."""
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
        return round(when.timestamp() * 1000)
    if isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when):
        return round(when * 1000)
    raise TypeError(f"{what} must be a datetime or Unix seconds, not {when!r}")


def from_unix_ms(ms: int) -> _dt.datetime:
    """Unix milliseconds as an aware UTC datetime."""
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)


@dataclass(frozen=True)
class RetryPolicy:
    """How a step (or, given to ``workflow()``, the whole run) is retried.

    Exponential backoff with jitter: attempt n waits ``initial_backoff *
    multiplier**(n-1)``, at most ``max_backoff``, drawn from ±``jitter`` of
    that. ``timeout`` bounds each attempt of a step (steps only). Durations
    are seconds or timedeltas; a field left ``None`` takes the engine's
    default (3 attempts, 1 s, 2.0, 60 s, 0.2, no timeout). As in C's
    cairn_retry_policy, the engine also takes a zero (and a multiplier
    below 1) as its default; ``jitter=-1`` means none.
    """

    max_attempts: Optional[int] = None
    initial_backoff: Optional[Duration] = None
    multiplier: Optional[float] = None
    max_backoff: Optional[Duration] = None
    jitter: Optional[float] = None
    timeout: Optional[Duration] = None

    def to_wire(self) -> dict[str, Any]:
        """The policy as the protocol's object (only the fields set)."""
        out: dict[str, Any] = {}
        if self.max_attempts is not None:
            if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool):
                raise TypeError(f"max_attempts must be an int, not {self.max_attempts!r}")
            if self.max_attempts < 1:
                raise ValueError(f"max_attempts must be 1 or more, not {self.max_attempts}")
            out["max_attempts"] = self.max_attempts
        if self.initial_backoff is not None:
            out["initial_ms"] = to_ms(self.initial_backoff, "initial_backoff")
        if self.multiplier is not None:
            out["multiplier"] = _number(self.multiplier, "multiplier")
        if self.max_backoff is not None:
            out["max_ms"] = to_ms(self.max_backoff, "max_backoff")
        if self.jitter is not None:
            out["jitter"] = _number(self.jitter, "jitter")
        if self.timeout is not None:
            out["timeout_ms"] = to_ms(self.timeout, "timeout")
        return out


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{what} must be a finite number, not {value!r}")
    return float(value)


def hello(workflows: dict[str, Optional[RetryPolicy]], sdk: str, runtime: str) -> dict[str, Any]:
    """The control lane's first message: the workflows served, with their
    run-level retry policies (which take no timeout)."""
    listed = []
    for name, policy in workflows.items():
        entry: dict[str, Any] = {"name": name}
        if policy is not None:
            if policy.timeout is not None:
                raise ValueError(f"workflow {name!r}: a run's retry policy takes no timeout")
            entry["retry"] = policy.to_wire()
        listed.append(entry)
    return {"op": "hello", "protocols": list(PROTOCOLS), "sdk": sdk, "runtime": runtime,
            "workflows": listed}


class Lane:
    """One end of a connected stream socket speaking the protocol.

    A lane is read and written by one thread at a time (its execution's);
    ``request`` is one exchange. ``max_line`` bounds lines both ways, so a
    message the engine would refuse (and end the connection for) is refused
    here instead with InvalidArgument.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb", buffering=65536)
        self.max_payload = DEFAULT_MAX_PAYLOAD
        self.protocol = PROTOCOL  # the version welcome chose

    @property
    def max_line(self) -> int:
        return self.max_payload + LINE_SLACK

    def send(self, msg: dict[str, Any]) -> None:
        """Writes one message. InvalidArgument when it is too long or holds
        something JSON cannot; OSError when the engine is gone."""
        try:
            data = encode(msg)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"not a JSON value: {e}") from None
        if len(data) > self.max_line:
            raise InvalidArgument(
                f"a message of {len(data)} bytes is more than the engine takes "
                f"(max_payload {self.max_payload} bytes)")
        self.sock.sendall(data)

    def receive(self) -> Optional[dict[str, Any]]:
        """The next message, or None at end of file (the engine is gone)."""
        line = self._reader.readline(self.max_line + 1)
        if not line:
            return None
        if not line.endswith(b"\n"):
            if len(line) > self.max_line:
                raise ProtocolError(f"the engine sent a line longer than {self.max_line} bytes")
            return None  # cut off by the end of the connection
        return decode(line)

    def close(self) -> None:
        """Closes the socket (reads blocked in another thread return EOF)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.close()
        self.sock.close()
