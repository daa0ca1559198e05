// The workflows tests/test_sdk_ts.c runs: each step body appends a line
// "RUN STEP DETAIL" to the file named by CAIRN_TEST_EFFECTS when it starts,
// so the test counts how often each step's body ran. CAIRN_TEST_VARIANT
// names a file whose text changes what ts.t.changing calls (to provoke a
// non-determinism error on replay).
import { appendFileSync, readFileSync } from "node:fs";
import { ChildFailedError, NonRetryableError, RetryRunError, StepFailedError, Worker } from "../dist/index.js";

const EFFECTS = process.env.CAIRN_TEST_EFFECTS ?? "/dev/null";

function effect(ctx, step, detail = "") {
  appendFileSync(EFFECTS, `${ctx.runId} ${step} ${detail}\n`);
}

// Waits ms, or until signal aborts (then throws its reason).
function nap(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason ?? new Error("aborted"));
    });
  });
}

const worker = new Worker();

worker.workflow("ts.t.replay", async (ctx) => {
  effect(ctx, "top"); // once per execution: the function runs again after the sleep
  const a = await ctx.step("a", () => (effect(ctx, "a"), "A"));
  await ctx.sleep(300);
  const b = await ctx.step("b", () => (effect(ctx, "b"), "B"));
  return { a, b };
});

worker.workflow("ts.t.changing", async (ctx) => {
  const variant = readFileSync(process.env.CAIRN_TEST_VARIANT, "utf8").trim();
  await ctx.step(variant === "v1" ? "alpha" : "beta", () => (effect(ctx, variant), variant));
  return ctx.waitForSignal("go");
});

worker.workflow("ts.t.slow", async (ctx, input) => {
  const ms = input?.ms ?? 300;
  for (const name of ["s1", "s2", "s3"])
    await ctx.step(name, async (signal) => {
      effect(ctx, name);
      await nap(ms, signal);
      return name;
    });
  return { steps: 3 };
});

worker.workflow("ts.t.crash", async (ctx) => {
  effect(ctx, "crash");
  process.exit(70);
});

worker.workflow("ts.t.wait", async (ctx) => {
  await ctx.step("before", () => (effect(ctx, "before"), 1));
  return ctx.waitForSignal("go");
});

worker.workflow("ts.t.long", async (ctx) => {
  return ctx.step("long", async (signal) => {
    effect(ctx, "long", "started");
    try {
      await nap(600000, signal);
    } catch (err) {
      effect(ctx, "long", `aborted:${err?.name}`);
      throw err;
    }
  });
});

worker.workflow("ts.t.sleepy", async (ctx, input) => {
  const t0 = await ctx.now();
  await ctx.sleep(input.ms, { name: "nap" });
  const t1 = await ctx.now();
  await ctx.step("after", () => (effect(ctx, "after"), 1));
  return { elapsed: t1.getTime() - t0.getTime() };
});

worker.workflow("ts.t.retry", async (ctx) => {
  const flaky = await ctx.step(
    "flaky",
    (signal, attempt) => {
      effect(ctx, "flaky", `${attempt} ${Date.now()}`);
      if (attempt < 3) throw new Error(`flaky attempt ${attempt}`);
      return `ok on ${attempt}`;
    },
    { maxAttempts: 3, initialMs: 300, multiplier: 2, jitter: -1 },
  );
  let doomed;
  try {
    await ctx.step("doomed", () => {
      effect(ctx, "doomed");
      throw new NonRetryableError("card declined");
    }, { maxAttempts: 5, initialMs: 100 });
  } catch (err) {
    if (!(err instanceof StepFailedError)) throw err;
    doomed = `${err.name}: ${err.message}`;
  }
  return { flaky, doomed };
});

worker.workflow(
  "ts.t.again",
  async (ctx) => {
    await ctx.step("once", () => (effect(ctx, "once", `attempt ${ctx.attempt}`), 1));
    if (ctx.attempt < 2) throw new RetryRunError(`not yet (attempt ${ctx.attempt})`);
    return { attempt: ctx.attempt };
  },
  { retry: { initialMs: 200, jitter: -1 } },
);

worker.workflow("ts.t.timeout", async (ctx) => {
  return ctx.step(
    "slow",
    async (signal, attempt) => {
      effect(ctx, "slow", `attempt ${attempt}`);
      if (attempt === 1) {
        try {
          await nap(600000, signal);
        } catch (err) {
          effect(ctx, "slow", `aborted:${err?.name}`);
          throw err;
        }
      }
      return `done on ${attempt}`;
    },
    { timeoutMs: 500, maxAttempts: 2, initialMs: 100 },
  );
});

worker.workflow("ts.t.square", async (ctx, input) => ({ y: input.x * input.x }));

worker.workflow("ts.t.trace", async (ctx) => ({
  run: ctx.traceparent,
  step: await ctx.step("tp", async () => ctx.traceparent),
}));

worker.workflow("ts.t.failing", async () => {
  throw new Error("child says no");
});

worker.workflow("ts.t.parent", async (ctx, input) => {
  const { y } = await ctx.child("ts.t.square", { x: input.x });
  let failed;
  try {
    await ctx.child("ts.t.failing", null, { name: "bad-child" });
  } catch (err) {
    if (!(err instanceof ChildFailedError)) throw err;
    failed = err.message;
  }
  return { y, failed };
});

worker.workflow("ts.t.fanout", async (ctx, input) => {
  const ids = [];
  for (let i = 0; i < input.n; i++) ids.push(await ctx.startChild("ts.t.square", { x: i }, { name: "kid" }));
  const bad = await ctx.startChild("ts.t.failing", null, { name: "bad" });
  const first = (await ctx.waitForChildren(ids, { first: 1 })).filter((r) => r !== null).length;
  const sum = (await ctx.waitForAllChildren(ids)).reduce((s, o) => s + o.y, 0);
  const failed = (await ctx.waitForChildren([bad]))[0].error;
  return { sum, first, failed };
});

worker.workflow("ts.t.misc", async (ctx) => {
  const now = await ctx.now();
  const random = await ctx.random();
  const patched = await ctx.patched("p1");
  await ctx.setEvent("stage", { at: "misc" });
  const other = await ctx.enqueue("ts.t.square", { x: 2 });
  let sendError = null;
  try {
    await ctx.send(999999999, "nobody", null);
  } catch (err) {
    sendError = `${err.name}: ${err.message}`;
  }
  const stop = await ctx.shouldStop();
  await ctx.step("record", () => (effect(ctx, "misc", `${now.getTime()} ${random}`), 1));
  // A replay must see the same values: sleep, then compare.
  await ctx.sleep(200);
  return {
    now: now.getTime(),
    random: random.toString(),
    randomType: typeof random,
    patched,
    other,
    sendError,
    stop,
    attempt: ctx.attempt,
    workflow: ctx.workflow,
  };
});

// A step, then continues as new with n + 1 until n reaches until.
worker.workflow("ts.t.chain", async (ctx, input) => {
  await ctx.step("work", () => (effect(ctx, "work", String(input.n)), input.n));
  if (input.n >= input.until) return { n: input.n };
  return ctx.continueAsNew({ n: input.n + 1, until: input.until });
});

await worker.run();
