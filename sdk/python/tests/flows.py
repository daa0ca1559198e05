#!/usr/bin/env python3
"""The workflows tests/test_sdk_python.c runs through the Python SDK.

Every step body appends a line "RUN STEP ATTEMPT PID UNIX_TIME" to the file
named by CAIRN_TEST_SIDE, so the test can count how often a body ran.
CAIRN_TEST_VARIANT names a file whose text picks t.nondet's code.

    python3 flows.py           serve the workflows (until SIGTERM)
    python3 flows.py client    exercise cairn.Client against CAIRN_URL
"""
import os
import sys
import time

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(SDK_DIR, "cairn", "__init__.py")) and \
        os.environ.get("CAIRN_TEST_INSTALLED") != "1":
    sys.path.insert(0, SDK_DIR)

import cairn  # noqa: E402

worker = cairn.Worker()


def record(ctx: cairn.Context, step: str) -> None:
    """Appends one line for a step body that runs (O_APPEND: one write)."""
    line = f"{ctx.run_id} {step} {ctx.step_attempt} {os.getpid()} {time.time():.3f}\n"
    fd = os.open(os.environ["CAIRN_TEST_SIDE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def body(ctx: cairn.Context, step: str, value=None, seconds: float = 0):
    """A step body: records itself, sleeps a while (not durably), returns."""
    record(ctx, step)
    time.sleep(seconds)
    return value if value is not None else f"{step}-{ctx.run_id}"


@worker.workflow("t.replay")
def replay(ctx: cairn.Context, input: dict) -> dict:
    """Three steps with durable sleeps between them: each sleep ends the
    execution, so the later steps come after replays of the earlier."""
    a = ctx.step("a", body, ctx, "a")
    ctx.sleep(0.2, name="nap1")
    b = ctx.step("b", body, ctx, "b")
    ctx.sleep(0.2, name="nap2")
    c = ctx.step("c", body, ctx, "c")
    return {"a": a, "b": b, "c": c}


@worker.workflow("t.slow")
def slow(ctx: cairn.Context, input: dict) -> dict:
    """before, a slow step (input "ms"), after."""
    ctx.step("before", body, ctx, "before")
    ctx.step("slow", body, ctx, "slow", seconds=(input or {}).get("ms", 1000) / 1000)
    ctx.step("after", body, ctx, "after")
    return {"done": ctx.run_id}


@worker.workflow("t.nap")
def nap(ctx: cairn.Context, input: dict) -> dict:
    """A step, a durable sleep of input "s" seconds, a step."""
    ctx.step("a", body, ctx, "a")
    ctx.sleep(input["s"], name="nap")
    ctx.step("b", body, ctx, "b")
    return {"slept": input["s"]}


@worker.workflow("t.nondet")
def nondet(ctx: cairn.Context, input: dict) -> str:
    """Its first durable call depends on a file: "old" code calls step one,
    "new" code step uno; with input "guard" the new code is behind
    ctx.patched("uno"), so runs that journaled step one keep that path."""
    with open(os.environ["CAIRN_TEST_VARIANT"]) as f:
        new = f.read().strip() == "new"
    if new and (not input.get("guard") or ctx.patched("uno")):
        path = ctx.step("uno", body, ctx, "uno", "new path")
    else:
        path = ctx.step("one", body, ctx, "one", "old path")
    ctx.sleep(input.get("s", 1), name="nap")
    return path


@worker.workflow("t.crash")
def crash(ctx: cairn.Context, input: dict) -> None:
    """Ends its Python process every time, after a journaled step (the
    engine commits a step's result before the next step runs)."""
    ctx.step("before", body, ctx, "before")
    ctx.step("boom", os._exit, 7)


@worker.workflow("t.wait")
def wait(ctx: cairn.Context, input: dict):
    """The payload of signal go (input "timeout" seconds: WaitTimeout)."""
    try:
        return ctx.wait_for_signal("go", timeout=(input or {}).get("timeout"))
    except cairn.WaitTimeout:
        return {"timed_out": True}


@worker.workflow("t.late")
def late(ctx: cairn.Context, input: dict):
    """Waits for signal go only after a step and a durable sleep."""
    ctx.step("a", body, ctx, "a")
    ctx.sleep(0.5)
    return ctx.wait_for_signal("go", timeout=30)


@worker.workflow("t.poll")
def poll(ctx: cairn.Context, input: dict) -> str:
    """A long step that polls should_stop and gives up when it is true."""
    def long_step() -> str:
        record(ctx, "poll")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ctx.should_stop():
                record(ctx, "gave-up")
                raise RuntimeError("stopped")
            time.sleep(0.05)
        return "never stopped"
    return ctx.step("poll", long_step)


@worker.workflow("t.flaky")
def flaky(ctx: cairn.Context, input: dict) -> dict:
    """A step that fails its first two attempts; a step that fails for
    good (cairn.Fail: not retried), caught as StepFailed."""
    def flaky_step() -> str:
        record(ctx, "flaky")
        if ctx.step_attempt < 3:
            raise ConnectionError(f"attempt {ctx.step_attempt} failed")
        return f"ok on attempt {ctx.step_attempt}"
    policy = cairn.RetryPolicy(max_attempts=5, initial_backoff=0.3, multiplier=2, jitter=0.1)
    got = ctx.step("flaky", flaky_step, retry=policy)

    def declined() -> None:
        record(ctx, "declined")
        raise cairn.Fail("card declined")
    try:
        ctx.step("declined", declined, retry=policy)
        error = None
    except cairn.StepFailed as e:
        error = e.message
    return {"flaky": got, "declined": error}


@worker.workflow("t.retry_run")
def retry_run(ctx: cairn.Context, input: dict) -> dict:
    """Raises cairn.Retry on its first attempt: the run is retried."""
    ctx.step("a", body, ctx, "a")
    if ctx.attempt == 1:
        raise cairn.Retry("not yet")
    return {"attempt": ctx.attempt}


@worker.workflow("t.timeout")
def timeout(ctx: cairn.Context, input: dict) -> dict:
    """Attempt 1 overruns its 0.4 s timeout (it waits for should_stop),
    attempt 2 is on time; the late result is discarded."""
    def step() -> str:
        record(ctx, "slow")
        if ctx.step_attempt == 1:
            deadline = time.monotonic() + 10
            while not ctx.should_stop() and time.monotonic() < deadline:
                time.sleep(0.02)
            record(ctx, "saw-stop" if ctx.should_stop() else "no-stop")
            return "late"
        return "on time"
    policy = cairn.RetryPolicy(max_attempts=3, initial_backoff=0.1, timeout=0.4)
    return {"result": ctx.step("slow", step, retry=policy)}


@worker.workflow("t.square")
def square(ctx: cairn.Context, input: dict) -> dict:
    return {"y": ctx.step("square", lambda: input["x"] * input["x"])}


@worker.workflow("t.trace")
def trace(ctx: cairn.Context, input: dict) -> dict:
    return {"run": ctx.traceparent, "step": ctx.step("tp", lambda: ctx.traceparent)}


@worker.workflow("t.boom")
def boom(ctx: cairn.Context, input: dict) -> None:
    raise ValueError("boom")


@worker.workflow("t.parent")
def parent(ctx: cairn.Context, input: dict) -> dict:
    """Children, send, enqueue, an event, now and random."""
    y = ctx.run_child("t.square", {"x": 7}, name="square")["y"]
    waiter = ctx.start_child("t.wait", None, name="waiter")
    ctx.send(waiter, "go", {"from": ctx.run_id})
    got = ctx.wait_child(waiter, timeout=30)
    try:
        ctx.run_child("t.boom", None, name="boom")
        failed = None
    except cairn.ChildFailed as e:
        failed = e.message
    other = ctx.enqueue("t.square", {"x": 3}, name="other")
    ctx.set_event("stage", "done")
    now = ctx.now()
    return {"y": y, "got": got, "failed": failed, "other": other,
            "now_ms": round(now.timestamp() * 1000), "random": str(ctx.random())}


@worker.workflow("t.chain")
def chain(ctx: cairn.Context, input: dict):
    """A step, then continues as new with n + 1 until n reaches until."""
    n, until = input["n"], input["until"]
    ctx.step("work", body, ctx, f"work{n}")
    if n >= until:
        return {"n": n}
    return ctx.continue_as_new({"n": n + 1, "until": until})


@worker.workflow("t.fanout")
def fanout(ctx: cairn.Context, input: dict) -> dict:
    """{"n": N} children of t.square and the sum of their squares: one wait
    for any, then one for all, each woken once; {"bad": K} adds a child
    that fails, reported not raised by wait_children."""
    ids = [ctx.start_child("t.square", {"x": i}, name="kid") for i in range(input["n"])]
    bad = ctx.start_child("t.boom", None, name="bad") if "bad" in input else None
    first = [r for r in ctx.wait_children(ids, first=1) if r is not None]
    total = sum(o["y"] for o in ctx.wait_all_children(ids))
    failed = None
    if bad is not None:
        failed = ctx.wait_children([bad])[0].error
    return {"sum": total, "first": len(first), "failed": failed}


def client() -> None:
    """The client calls against a worker's HTTP API (CAIRN_URL,
    CAIRN_HTTP_TOKEN); prints one line per check."""
    c = cairn.Client()
    r = c.enqueue("t.wait", None, group="python", key="client-1")
    again = c.enqueue("t.wait", None, group="python", key="client-1")
    assert again.existed and again.id == r.id, again
    c.signal(r.id, "go", {"by": "client"})
    assert c.result(r.id, timeout=30) == {"by": "client"}
    print("enqueue signal result ok")
    run = c.get(r.id)
    assert run.status == "completed" and run.workflow == "t.wait", run
    print("get ok")
    r2 = c.enqueue("t.wait", None, group="python")
    c.cancel(r2.id)
    try:
        c.result(r2.id, timeout=30)
        raise AssertionError("a cancelled run had a result")
    except cairn.RunCancelled:
        print("cancel ok")
    r3 = c.enqueue("t.boom", None, group="python")
    try:
        c.result(r3.id, timeout=30)
        raise AssertionError("a failed run had a result")
    except cairn.RunFailed as e:
        assert "ValueError: boom" in e.message, e.message
        print(f"failed ok: {e.message}")
    try:
        c.signal(999999, "go")
        raise AssertionError("a signal to no run was accepted")
    except cairn.ClientError as e:
        assert e.status == 404, (e.status, e.message)
        print(f"404 ok: {e.message}")
    try:
        c.enqueue("no such name!", None, group="python")
        raise AssertionError("a bad workflow name was accepted")
    except cairn.ClientError as e:
        assert e.status == 400, (e.status, e.message)
        print(f"400 ok: {e.message}")
    try:
        cairn.Client(token="wrong").get(r.id)
        raise AssertionError("a wrong token was accepted")
    except cairn.ClientError as e:
        assert e.status == 401, (e.status, e.message)
        print(f"401 ok: {e.message}")
    try:
        c.wait(c.enqueue("t.wait", None, group="python").id, timeout=0.3)
        raise AssertionError("a wait did not time out")
    except cairn.WaitTimeout:
        print("wait timeout ok")
    first = c.enqueue("t.chain", {"n": 0, "until": 2}, group="python").id
    assert c.result(first, timeout=30) == {"n": 2}
    assert c.get(first).raw.get("continued_to"), c.get(first).raw
    print("chain ok")
    print("client ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        client()
    else:
        print(f"flows: serving with the SDK in {os.path.dirname(cairn.__file__)}", flush=True)
        worker.run()
