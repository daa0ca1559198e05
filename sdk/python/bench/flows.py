#!/usr/bin/env python3
"""The workflows `make bench` runs through the Python SDK (tests/bench.c,
phase sdk), the Python twins of workers/examples/bench_flows.c and the
built-in noop:

  py.bench3  three journaled steps, each returning a small object;
             returns {"steps": 3}.
  py.stamp   takes {"i": k} and, as its first instruction, writes
             time.monotonic_ns() (CLOCK_MONOTONIC) into int64 slot k of the
             file named by $BENCH_STAMPS; returns null.
  py.noop    returns its input.

Run from the repository: python3 sdk/python/bench/flows.py
"""
import mmap
import os
import struct
import sys
import threading
import time

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(SDK_DIR, "cairn", "__init__.py")):
    sys.path.insert(0, SDK_DIR)

import cairn  # noqa: E402

worker = cairn.Worker()


def small_step(n: int) -> dict:
    return {"n": n}


@worker.workflow("py.bench3")
def bench3(ctx: cairn.Context, input: object) -> dict:
    for i, name in enumerate(("one", "two", "three")):
        ctx.step(name, small_step, i)
    return {"steps": 3}


_stamps = None
_stamps_lock = threading.Lock()


def _map_stamps():
    """The stamps file, mapped once (None without $BENCH_STAMPS)."""
    global _stamps
    with _stamps_lock:
        if _stamps is None:
            path = os.environ.get("BENCH_STAMPS")
            _stamps = False
            if path:
                with open(path, "r+b") as f:
                    _stamps = mmap.mmap(f.fileno(), 0)
        return _stamps or None


@worker.workflow("py.stamp")
def stamp(ctx: cairn.Context, input: dict) -> None:
    now = time.monotonic_ns()
    slots = _stamps or _map_stamps()
    i = (input or {}).get("i")
    if slots is not None and isinstance(i, int) and 0 <= i < len(slots) // 8:
        struct.pack_into("=q", slots, i * 8, now)
    return None


@worker.workflow("py.noop")
def noop(ctx: cairn.Context, input: object) -> object:
    return input


if __name__ == "__main__":
    worker.run()
