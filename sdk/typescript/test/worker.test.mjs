// The Worker against a scripted engine (fake-engine.mjs): what it sends
// for each durable call, how a workflow's end and a stop travel, steps'
// timeouts and limits, an engine that exits, refuses or dies. No database:
// tests/test_sdk_ts.c runs the same SDK against the real engine.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "node:test";

import {
  CancelledError,
  ChildFailedError,
  InvalidArgumentError,
  NondeterminismError,
  RetryRunError,
  StepFailedError,
  StoppedError,
  WaitTimeoutError,
  Worker,
} from "../dist/index.js";

const FAKE = new URL("./fake-engine.mjs", import.meta.url).pathname;

// A worker of the fake engine playing scenario (with extra environment);
// its events file.
function fake(scenario, lanes = 3, extra = {}) {
  const dir = mkdtempSync(join(tmpdir(), "cairn-fake-"));
  const outFile = join(dir, "events");
  const worker = new Worker({
    exit: false,
    env: {
      ...process.env,
      CAIRN_WORKER_BIN: FAKE,
      CAIRN_CONCURRENCY: String(lanes),
      CAIRN_LOG_LEVEL: "error",
      FAKE_SCENARIO: scenario,
      FAKE_OUT: outFile,
      ...extra,
    },
  });
  const events = () =>
    (existsSync(outFile) ? readFileSync(outFile, "utf8") : "")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  return { worker, events };
}

test("every durable call is one request as docs/protocol.md spells it, with its reply", async () => {
  const { worker, events } = fake("calls");
  const caught = [];
  const note = (err) => caught.push(err.constructor.name);
  worker.workflow("w.calls", async (ctx, input) => {
    assert.deepEqual([ctx.runId, ctx.workflow, ctx.attempt], [100, "w.calls", 1]);
    const a = await ctx.step("one", () => input.n + 1);
    const b = await ctx.step("two", () => {
      throw new Error("a journaled step must not run");
    }, { maxAttempts: 2, timeoutMs: 1000 });
    await ctx.sleep(5);
    await ctx.sleepUntil(new Date(1700000000000));
    const sig = await ctx.waitForSignal("approval", { timeoutMs: 3600000 });
    await ctx.waitForSignal("never").catch(note);
    const now = await ctx.now();
    const random = await ctx.random();
    const child = await ctx.startChild("w.child", { k: 1 });
    await ctx.waitForChild(child, { timeoutMs: 10 }).catch(note);
    await ctx.send(child, "poke", { p: 1 }, { name: "poke-it" }).catch(note);
    const other = await ctx.enqueue("w.other");
    await ctx.setEvent("stage", "half");
    const patched = await ctx.patched("p1");
    const stop = await ctx.shouldStop();
    return { a, b, sig, now: now.toISOString(), random: random.toString(), big: random === 2n ** 64n - 1n, child, other, patched, stop };
  });
  worker.workflow("w.fail", async () => {
    throw new TypeError("bad input");
  });
  worker.workflow("w.retry", async (ctx) => {
    throw new RetryRunError(`again (attempt ${ctx.attempt})`);
  }, { retry: { maxAttempts: 2, initialMs: 10 } });
  assert.equal(await worker.run(), 0);
  assert.deepEqual(caught, ["WaitTimeoutError", "ChildFailedError", "InvalidArgumentError"]);
  const end = events().find((e) => e.end).end;
  assert.deepEqual(end, {
    x: 1,
    op: "return",
    value: {
      a: 3,
      b: "journaled",
      sig: { by: "ann" },
      now: "2023-11-14T22:13:20.123Z",
      random: "18446744073709551615",
      big: true,
      child: 101,
      other: 102,
      patched: true,
      stop: false,
    },
  });
});

test("a wait for many children is one request, its results in order and a failed child named", async () => {
  const { worker, events } = fake("children", 1);
  worker.workflow("w.children", async (ctx) => {
    const some = await ctx.waitForChildren([5, 6, 7], { first: 1, timeoutMs: 2000 });
    let failed = null;
    try {
      await ctx.waitForAllChildren([5, 6, 7]);
    } catch (err) {
      if (!(err instanceof ChildFailedError)) throw err;
      failed = err.message;
    }
    return { some, failed };
  });
  assert.equal(await worker.run(), 0);
  const end = events().find((e) => e.end).end;
  assert.deepEqual(end, {
    x: 1,
    op: "return",
    value: { some: [null, { child: 6, status: "completed", output: { y: 1 }, error: null }, null], failed: "child run 7 failed: x is -1" },
  });
});

test("after a stop nothing more is sent for the execution, even when its code swallows the error", async () => {
  const { worker } = fake("stop", 2);
  const seen = [];
  worker.workflow("w.swallow", async (ctx) => {
    try {
      await ctx.sleep(1000);
    } catch (err) {
      seen.push(`${err.constructor.name}:${err.reason}`);
    }
    try {
      await ctx.step("after", () => seen.push("the step ran"));
    } catch (err) {
      seen.push(`again ${err.constructor.name}`);
    }
    return "dropped";
  });
  worker.workflow("w.nondet", async (ctx) => {
    try {
      await ctx.step("a", () => 1);
    } catch (err) {
      seen.push(err instanceof NondeterminismError && err instanceof StoppedError ? `nondet: ${err.message}` : String(err));
      throw new Error("wrapped");
    }
  });
  worker.workflow("w.quick", async (ctx, n) => n + 1);
  assert.equal(await worker.run(), 0);
  assert.deepEqual(seen.sort(), ["StoppedError:suspended", "again StoppedError", "nondet: non-determinism at journal position 0"]);
});

test("steps go one at a time; inside one only shouldStop; timeouts, limits and the stop poll", async () => {
  const { worker, events } = fake("steps");
  let pollReason;
  worker.workflow("w.order", async (ctx) =>
    Promise.all([
      ctx.step("a", async () => {
        await new Promise((r) => setTimeout(r, 50));
        return "A";
      }),
      ctx.step("b", () => "not run: journaled"),
    ]),
  );
  worker.workflow("w.nested", async (ctx) => {
    await ctx.step("outer", async (signal, attempt) => {
      let inner;
      await ctx.sleep(1).catch((err) => (inner = err.message));
      return { inner, stop: await ctx.shouldStop(), attempt };
    });
    return undefined;
  });
  let timeoutAbort;
  worker.workflow("w.timeout", async (ctx) => {
    try {
      await ctx.step("t", (signal) => new Promise(() => signal.addEventListener("abort", () => (timeoutAbort = signal.reason.name))), {
        timeoutMs: 150,
        maxAttempts: 1,
      });
    } catch (err) {
      assert.ok(err instanceof StepFailedError);
      return `${err.name}: ${err.message}`;
    }
  });
  worker.workflow("w.big", async (ctx) => {
    await ctx.step("big", () => "x".repeat(5000)).catch((err) => assert.ok(err instanceof StepFailedError));
    return "y".repeat(6000);
  });
  worker.workflow("w.poll", async (ctx) => {
    try {
      await ctx.step("wait", (signal) => new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason))));
    } catch (err) {
      pollReason = err instanceof CancelledError ? "cancelled" : String(err);
      return "dropped";
    }
  });
  assert.equal(await worker.run(), 0);
  assert.equal(timeoutAbort, "StepTimeoutError");
  assert.equal(pollReason, "cancelled");
  const after = events().find((e) => e.timeoutAfter !== undefined).timeoutAfter;
  assert.ok(after >= 140 && after < 2000, `the timed-out attempt was reported after ${after} ms`);
});

test("an engine that exits before welcome makes run() end with its status", async () => {
  const { worker } = fake("early");
  worker.workflow("w", async () => 1);
  assert.equal(await worker.run(), 7);
});

test("a refused hello ends run() with the engine's status 2", async () => {
  const { worker } = fake("refused");
  worker.workflow("w", async () => 1);
  assert.equal(await worker.run(), 2);
});

test("an engine that dies is started again after a second, its running step aborted; stop() drains the next", async () => {
  const { worker, events } = fake("restart", 1);
  let abortedBy;
  worker.workflow("w.long", async (ctx) =>
    ctx.step("long", (signal) => new Promise((_, reject) => signal.addEventListener("abort", () => {
      abortedBy = signal.reason;
      reject(signal.reason);
    }))),
  );
  const done = worker.run();
  const deadline = Date.now() + 10000;
  while (!events().some((e) => e.start === 2) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const starts = events().filter((e) => e.start);
  assert.equal(starts.length, 2, "the engine was not started again");
  const gap = starts[1].at - starts[0].at;
  assert.ok(gap >= 1000 && gap < 5000, `started again after ${gap} ms`);
  assert.ok(abortedBy instanceof StoppedError && abortedBy.reason === "gone", `aborted by ${abortedBy}`);
  await new Promise((r) => setTimeout(r, 200)); // let it say hello
  worker.stop();
  assert.equal(await done, 0);
  assert.ok(events().some((e) => e.sigterm === 2), "the second engine got no SIGTERM");
});

test("a workflow that returns continueAsNew ends with its message, or fails on an engine of protocol 1", async () => {
  for (const protocol of ["2", "1"]) {
    const { worker, events } = fake("continues", 3, { FAKE_PROTOCOL: protocol });
    worker.workflow("w.next", async (ctx, input) => ctx.continueAsNew({ n: input.n + 1 }));
    assert.equal(await worker.run(), 0);
    const end = events().find((e) => e.end)?.end;
    if (protocol === "2") assert.deepEqual(end, { x: 1, op: "continue_as_new", input: { n: 2 } });
    else {
      assert.equal(end.op, "fail");
      assert.match(end.message, /continueAsNew needs protocol version 2; the engine speaks 1/);
    }
  }
});
