"""Executions against a scripted engine: the test plays the engine's side
of one execution lane (a socketpair) and checks every message the SDK
sends for each durable call, and what the workflow sees of each reply."""
import datetime as dt
import socket
import threading
import unittest

import _path  # noqa: F401
import cairn
from cairn._wire import Lane


class Engine:
    """The engine's end of a lane, serving one registered workflow."""

    def __init__(self, fn, max_payload=None):
        self.worker = cairn.Worker()
        self.worker.register("w", fn)
        a, b = socket.socketpair()
        b.settimeout(5)
        self.sdk, self.eng = Lane(a), Lane(b)
        if max_payload:
            self.sdk.max_payload = max_payload
        self.thread = threading.Thread(target=self.worker._serve_lane, args=(self.sdk,),
                                       daemon=True)
        self.thread.start()
        self.x = 0

    def run(self, input=None, attempt=1):
        self.x += 1
        self.eng.send({"t": "run", "x": self.x, "run": 7, "workflow": "w", "input": input,
                       "attempt": attempt})

    def expect(self, **fields):
        m = self.eng.receive()
        assert m is not None, "the SDK closed the lane"
        want = {"x": self.x, **fields}
        for k, v in want.items():
            assert m.get(k) == v, f"{k}: {m.get(k)!r} != {v!r} in {m}"
        return m

    def reply(self, **m):
        self.eng.send(m)

    def close(self):
        self.eng.close()
        self.thread.join(5)
        assert not self.thread.is_alive()


class Steps(unittest.TestCase):
    def test_a_journaled_step_returns_its_result_without_running(self):
        ran = []
        e = Engine(lambda ctx, i: ctx.step("charge", lambda: ran.append(1) or "new"))
        e.run()
        self.assertNotIn("retry", e.expect(op="step", name="charge"))
        e.reply(t="ok", value="ch_1")
        e.expect(op="return", value="ch_1")
        self.assertEqual(ran, [])
        e.close()

    def test_a_step_the_engine_runs_sends_its_result_without_waiting(self):
        seen = []

        def wf(ctx, i):
            v = ctx.step("add", lambda a, b=0: (a + b, ctx.step_attempt), 2, b=3)
            seen.append(v)
            return v
        e = Engine(wf)
        e.run()
        e.expect(op="step", name="add")
        e.reply(t="run_step", attempt=2)
        e.expect(op="step_result", value=[5, 2])
        e.expect(op="return", value=[5, 2])  # a list, as a replay returns it
        self.assertEqual(seen, [[5, 2]])
        e.close()

    def test_an_exception_in_a_step_is_a_retryable_error_and_a_stop_ends_the_execution(self):
        after = []

        def wf(ctx, i):
            try:
                ctx.step("flaky", lambda: 1 / 0)
            except Exception:  # noqa: BLE001 - must not see the stop
                after.append("caught")
            after.append("went on")
        e = Engine(wf)
        e.run()
        e.expect(op="step", name="flaky")
        e.reply(t="run_step", attempt=1)
        e.expect(op="step_error", message="ZeroDivisionError: division by zero", retryable=True)
        e.reply(t="stop", reason="suspended", message="retry at ...")
        e.run()  # the lane is free: the next execution's first message comes next
        e.expect(op="step", name="flaky")
        e.reply(t="ok", value=1)
        e.expect(op="return", value=None)
        self.assertEqual(after, ["went on"])
        e.close()

    def test_fail_is_not_retried_and_step_failed_carries_the_engines_message(self):
        def wf(ctx, i):
            def declined():
                raise cairn.Fail("card declined")
            policy = cairn.RetryPolicy(max_attempts=4)
            try:
                ctx.step("charge", declined, retry=policy)
            except cairn.StepFailed as err:
                return err.message
        e = Engine(wf)
        e.run()
        e.expect(op="step", name="charge", retry={"max_attempts": 4})
        e.reply(t="run_step", attempt=1)
        e.expect(op="step_error", message="card declined", retryable=False)
        e.reply(t="error", code="failed", message="step charge: card declined")
        e.expect(op="return", value="step charge: card declined")
        e.close()

    def test_a_step_with_a_timeout_waits_for_the_verdict_on_its_result(self):
        e = Engine(lambda ctx, i: ctx.step("slow", lambda: "late",
                                           retry=cairn.RetryPolicy(timeout=0.5)))
        e.run()
        e.expect(op="step", name="slow", retry={"timeout_ms": 500}, **{"await": True})
        e.reply(t="run_step", attempt=1)
        e.expect(op="step_result", value="late")
        e.reply(t="stop", reason="suspended", message="timed out")
        e.run()
        e.expect(op="step", name="slow")
        e.reply(t="ok", value="on time")
        e.expect(op="return", value="on time")
        e.close()

    def test_a_step_may_ask_should_stop_but_make_no_other_durable_call(self):
        def wf(ctx, i):
            def body():
                if ctx.should_stop():
                    ctx.sleep(1)
                return "never"
            return ctx.step("s", body)
        e = Engine(wf)
        e.run()
        e.expect(op="step", name="s")
        e.reply(t="run_step", attempt=1)
        e.expect(op="should_stop")
        e.reply(t="ok", value=True)
        m = e.expect(op="step_error", retryable=True)
        self.assertIn("RuntimeError: sleep inside step 's'", m["message"])
        e.reply(t="error", code="failed", message="step s: gave up")
        m = e.expect(op="fail", retryable=False)
        self.assertEqual(m["message"], "StepFailed: step s: gave up")
        e.close()

    def test_a_result_that_is_not_json_or_too_large_fails_the_step_for_good(self):
        e = Engine(lambda ctx, i: [ctx.step("set", lambda: {1}),
                                   ctx.step("big", lambda: "x" * 200)], max_payload=100)
        e.run()
        e.expect(op="step", name="set")
        e.reply(t="run_step", attempt=1)
        m = e.expect(op="step_error", retryable=False)
        self.assertIn("not a JSON value", m["message"])
        e.reply(t="ok", value=None)  # what the engine would not say; the SDK goes on
        e.expect(op="step", name="big")
        e.reply(t="run_step", attempt=1)
        m = e.expect(op="step_error", retryable=False)
        self.assertIn("202 bytes, more than the engine's max_payload of 100", m["message"])
        e.reply(t="stop", reason="failed", message="m")
        e.close()

    def test_a_step_whose_engine_went_away_unwinds_and_the_lane_closes(self):
        started, finish = threading.Event(), threading.Event()
        gone = []

        def wf(ctx, i):
            def body():
                started.set()
                finish.wait(5)
                return 1
            try:
                ctx.step("s", body)
            except cairn.EngineGone:
                gone.append(True)
                raise
        e = Engine(wf)
        e.run()
        e.expect(op="step", name="s")
        e.reply(t="run_step", attempt=1)
        started.wait(5)
        e.eng.close()
        finish.set()
        e.thread.join(5)
        self.assertFalse(e.thread.is_alive())
        self.assertEqual(gone, [True])


class Calls(unittest.TestCase):
    def test_each_durable_call_sends_the_protocols_fields(self):
        at = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)

        def wf(ctx, i):
            ctx.sleep(dt.timedelta(seconds=2), name="cool-off")
            ctx.sleep_until(at)
            sig = ctx.wait_for_signal("approval", timeout=3600)
            now = ctx.now()
            rnd = ctx.random()
            kid = ctx.start_child("square", {"x": 2}, name="k")
            out = ctx.wait_child(kid)
            ctx.send(12, "go", {"a": 1})
            other = ctx.enqueue("noop", [1])
            ctx.set_event("stage", "half")
            p = ctx.patched("v2")
            return [sig, now.isoformat(), rnd, kid, out, other, p]
        e = Engine(wf)
        e.run()
        e.expect(op="sleep", name="cool-off", ms=2000)
        e.reply(t="ok", value=None)
        e.expect(op="sleep_until", name="sleep_until", unix_ms=1893456000000)
        e.reply(t="ok", value=None)
        e.expect(op="signal", name="approval", timeout_ms=3600000)
        e.reply(t="ok", value={"by": "ann"})
        e.expect(op="now")
        e.reply(t="ok", value=1893456000123)
        e.expect(op="random")
        e.reply(t="ok", value="18446744073709551615")
        e.expect(op="child_start", name="k", workflow="square", input={"x": 2})
        e.reply(t="ok", value=99)
        e.expect(op="child_wait", child=99, timeout_ms=None)
        e.reply(t="ok", value={"y": 4})
        e.expect(op="send", name="send", run=12, signal="go", payload={"a": 1})
        e.reply(t="ok", value=None)
        e.expect(op="enqueue", name="enqueue", workflow="noop", input=[1])
        e.reply(t="ok", value=100)
        e.expect(op="set_event", key="stage", value="half")
        e.reply(t="ok", value=None)
        e.expect(op="patched", patch="v2")
        e.reply(t="ok", value=True)
        e.expect(op="return", value=[{"by": "ann"}, "2030-01-01T00:00:00.123000+00:00",
                                     2**64 - 1, 99, {"y": 4}, 100, True])
        e.close()

    def test_a_wait_for_many_children_is_one_call_with_results_in_order(self):
        def wf(ctx, i):
            some = ctx.wait_children([5, 6, 7], first=1, timeout=2)
            try:
                ctx.wait_all_children([5, 6, 7])
                failed = None
            except cairn.ChildFailed as err:
                failed = err.message
            return [[None if r is None else [r.child, r.status, r.output, r.error]
                     for r in some], failed]
        e = Engine(wf)
        e.run()
        e.expect(op="child_wait_all", children=[5, 6, 7], k=1, timeout_ms=2000)
        e.reply(t="ok", value=[None, {"status": "completed", "output": {"y": 1}, "error": None},
                               None])
        e.expect(op="child_wait_all", children=[5, 6, 7], k=None, timeout_ms=None)
        e.reply(t="ok", value=[{"status": "completed", "output": 0, "error": None},
                               {"status": "completed", "output": {"y": 1}, "error": None},
                               {"status": "failed", "output": None, "error": "x is -1"}])
        e.expect(op="return", value=[[None, [6, "completed", {"y": 1}, None], None],
                                     "child run 7 failed: x is -1"])
        e.close()

    def test_timeouts_and_errors_raise_what_a_workflow_may_handle(self):
        def wf(ctx, i):
            out = []
            for call in (lambda: ctx.wait_for_signal("s", timeout=1),
                         lambda: ctx.wait_child(5, timeout=1),
                         lambda: ctx.wait_child(6),
                         lambda: ctx.send(7, "go"),
                         lambda: ctx.set_event("bad key", 1)):
                try:
                    call()
                except cairn.CairnError as err:
                    out.append([type(err).__name__, err.message])
            return out
        e = Engine(wf)
        e.run()
        e.expect(op="signal", timeout_ms=1000)
        e.reply(t="timeout")
        e.expect(op="child_wait", child=5, timeout_ms=1000)
        e.reply(t="timeout")
        e.expect(op="child_wait", child=6)
        e.reply(t="error", code="failed", message="child run 6 failed: ValueError: boom")
        e.expect(op="send")
        e.reply(t="error", code="failed", message="run 7 does not exist")
        e.expect(op="set_event")
        e.reply(t="error", code="invalid", message="invalid event key")
        e.expect(op="return", value=[["WaitTimeout", "the wait timed out"],
                                     ["WaitTimeout", "the wait timed out"],
                                     ["ChildFailed", "child run 6 failed: ValueError: boom"],
                                     ["Failed", "run 7 does not exist"],
                                     ["InvalidArgument", "invalid event key"]])
        e.close()

    def test_a_swallowed_stop_sends_nothing_more_for_the_execution(self):
        def wf(ctx, i):
            try:
                ctx.sleep(1)
            except BaseException:  # noqa: BLE001 - a workflow that should not
                pass
            try:
                ctx.now()  # raises the same stop again, sending nothing
            except cairn.Nondeterminism:
                pass
            return "ignored"
        e = Engine(wf)
        e.run()
        e.expect(op="sleep")
        e.reply(t="stop", reason="nondeterminism", message="position 0: journal has step a")
        e.run()
        e.expect(op="sleep")  # the next message is the next execution's
        e.reply(t="ok", value=None)
        e.expect(op="now")
        e.reply(t="ok", value=0)
        e.expect(op="return", value="ignored")
        e.close()


class Breaches(unittest.TestCase):
    def test_a_reply_that_breaks_the_protocol_ends_the_lane_and_stops_the_execution(self):
        for bad in (b"not json\n", b'{"t":"run_step","attempt":1}\n'):
            seen = []

            def wf(ctx, i):
                try:
                    ctx.now()
                except cairn.EngineGone as err:
                    seen.append(err.message)
                    raise
            e = Engine(wf)
            with self.assertLogs("cairn", "ERROR") as logged:
                e.run()
                e.expect(op="now")
                e.eng.sock.sendall(bad)
                self.assertIsNone(e.eng.receive())  # the SDK closed the lane
                e.thread.join(5)
            self.assertIn("closing the lane", logged.output[0])
            self.assertFalse(e.thread.is_alive())
            self.assertEqual(len(seen), 1, seen)
            e.eng.close()


class Outcomes(unittest.TestCase):
    def test_retry_asks_for_the_run_again_and_other_exceptions_fail_it(self):
        def wf(ctx, i):
            if ctx.attempt == 1:
                raise cairn.Retry("the bank is closed")
            raise KeyError("amount")
        e = Engine(wf)
        e.run()
        e.expect(op="fail", message="Retry: the bank is closed", retryable=True)
        e.run(attempt=2)
        e.expect(op="fail", message="KeyError: 'amount'", retryable=False)
        e.close()

    def test_an_output_json_cannot_hold_fails_the_run_naming_why(self):
        e = Engine(lambda ctx, i: {"when": dt.datetime(2030, 1, 1)})
        e.run()
        m = e.expect(op="fail", retryable=False)
        self.assertIn("the workflow's output cannot be stored", m["message"])
        self.assertIn("datetime is not JSON serializable", m["message"])
        e.close()

    def test_the_context_is_dead_once_the_function_returned(self):
        kept = []
        e = Engine(lambda ctx, i: kept.append(ctx))
        e.run({"a": 1})
        e.expect(op="return", value=None)
        with self.assertRaisesRegex(RuntimeError, "execution is over"):
            kept[0].now()
        self.assertEqual((kept[0].run_id, kept[0].input, kept[0].attempt), (7, {"a": 1}, 1))
        e.close()


class ContinueAsNew(unittest.TestCase):
    def test_a_workflow_that_returns_continue_as_new_ends_with_its_message(self):
        e = Engine(lambda ctx, i: ctx.continue_as_new({"n": i["n"] + 1}))
        e.sdk.protocol = 2
        e.run({"n": 1})
        e.expect(op="continue_as_new", input={"n": 2})
        e.close()

    def test_an_engine_of_protocol_1_fails_the_run_saying_why(self):
        e = Engine(lambda ctx, i: ctx.continue_as_new(None))
        e.run()
        m = e.expect(op="fail", retryable=False)
        self.assertIn("protocol version 2", m["message"])
        e.close()


if __name__ == "__main__":
    unittest.main()
