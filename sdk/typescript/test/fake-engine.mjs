#!/usr/bin/env node
// A stand-in for `cairn-worker --sdk-fds FIRST-LAST`, for the worker tests
// (worker.test.mjs): it plays the engine's side of docs/protocol.md from
// the script FAKE_SCENARIO names and checks every message the SDK sends.
// A check that fails exits 99 with the reason on stderr; FAKE_OUT gets one
// JSON line per event the test looks at afterwards.
import assert from "node:assert/strict";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";

const out = (event) => process.env.FAKE_OUT && appendFileSync(process.env.FAKE_OUT, JSON.stringify({ at: Date.now(), ...event }) + "\n");

class Peer {
  constructor(fd) {
    this.queue = [];
    this.waiting = [];
    this.rest = "";
    this.socket = new net.Socket({ fd, readable: true, writable: true });
    this.socket.setEncoding("utf8");
    this.socket.on("data", (text) => {
      const lines = (this.rest + text).split("\n");
      this.rest = lines.pop();
      for (const l of lines) this.push(JSON.parse(l));
    });
    this.socket.on("end", () => this.push({ eof: true }));
    this.socket.on("error", () => this.push({ eof: true }));
  }
  push(m) {
    const w = this.waiting.shift();
    if (w) w(m);
    else this.queue.push(m);
  }
  next(ms = 5000) {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    return new Promise((resolve, reject) => {
      const w = (m) => (clearTimeout(t), resolve(m));
      const t = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(w), 1);
        reject(new Error(`no message within ${ms} ms`));
      }, ms);
      this.waiting.push(w);
    });
  }
  // Resolves true if nothing comes within ms.
  async quiet(ms) {
    try {
      const m = await this.next(ms);
      throw new Error(`expected silence, got ${JSON.stringify(m)}`);
    } catch (err) {
      if (/no message within/.test(err.message)) return true;
      throw err;
    }
  }
  send(m) {
    this.socket.write(JSON.stringify(m) + "\n");
  }
  // Expects the next message to equal want (deeply), then answers it.
  async expect(want, reply) {
    const got = await this.next();
    assert.deepEqual(got, want);
    if (reply) this.send(reply);
    return got;
  }
}

const spec = process.argv[process.argv.indexOf("--sdk-fds") + 1];
const [first, last] = spec.split("-").map(Number);
const control = new Peer(first);
const lanes = [];
for (let fd = first + 1; fd <= last; fd++) lanes.push(new Peer(fd));

async function welcome(maxPayload = 1048576, protocol = 1) {
  const h = await control.next();
  out({ hello: h });
  assert.equal(h.op, "hello");
  control.send({ t: "welcome", protocol, engine: "fake", max_payload: maxPayload, lanes: lanes.length });
  return h;
}

const SCENARIOS = {
  // Every durable call, its request and its reply; how a workflow ends.
  async calls() {
    const h = await welcome();
    assert.deepEqual(h.protocols, [1, 2, 3]);
    assert.match(h.sdk, /^cairn-typescript\/\d+\.\d+\.\d+$/);
    assert.match(h.runtime, /^node \d+\.\d+\.\d+$/);
    assert.deepEqual(h.workflows, [
      { name: "w.calls" },
      { name: "w.fail" },
      { name: "w.retry", retry: { max_attempts: 2, initial_ms: 10 } },
    ]);
    const [a, b, c] = lanes;
    a.send({ t: "run", x: 1, run: 100, workflow: "w.calls", input: { n: 2 }, attempt: 1 });
    b.send({ t: "run", x: 2, run: 200, workflow: "w.fail", input: null, attempt: 1 });
    c.send({ t: "run", x: 3, run: 300, workflow: "w.retry", input: null, attempt: 2 });
    await Promise.all([
      (async () => {
        await a.expect({ x: 1, op: "step", name: "one" }, { t: "run_step", attempt: 1 });
        await a.expect({ x: 1, op: "step_result", value: 3 });
        await a.expect({ x: 1, op: "step", name: "two", retry: { max_attempts: 2, timeout_ms: 1000 }, await: true }, { t: "ok", value: "journaled" });
        await a.expect({ x: 1, op: "sleep", name: "sleep", ms: 5 }, { t: "ok", value: null });
        await a.expect({ x: 1, op: "sleep_until", name: "sleep_until", unix_ms: 1700000000000 }, { t: "ok", value: null });
        await a.expect({ x: 1, op: "signal", name: "approval", timeout_ms: 3600000 }, { t: "ok", value: { by: "ann" } });
        await a.expect({ x: 1, op: "signal", name: "never", timeout_ms: null }, { t: "timeout" });
        await a.expect({ x: 1, op: "now" }, { t: "ok", value: 1700000000123 });
        await a.expect({ x: 1, op: "random" }, { t: "ok", value: "18446744073709551615" });
        await a.expect({ x: 1, op: "child_start", name: "child", workflow: "w.child", input: { k: 1 } }, { t: "ok", value: 101 });
        await a.expect({ x: 1, op: "child_wait", child: 101, timeout_ms: 10 }, { t: "error", code: "failed", message: "child run 101 failed: Error: x" });
        await a.expect({ x: 1, op: "send", name: "poke-it", run: 101, signal: "poke", payload: { p: 1 } }, { t: "error", code: "invalid", message: "bad signal" });
        await a.expect({ x: 1, op: "enqueue", name: "enqueue", workflow: "w.other", input: null }, { t: "ok", value: 102 });
        await a.expect({ x: 1, op: "set_event", key: "stage", value: "half" }, { t: "ok", value: null });
        await a.expect({ x: 1, op: "patched", patch: "p1" }, { t: "ok", value: true });
        await a.expect({ x: 1, op: "should_stop" }, { t: "ok", value: false });
        const end = await a.next();
        out({ end });
      })(),
      b.expect({ x: 2, op: "fail", message: "TypeError: bad input", retryable: false }),
      c.expect({ x: 3, op: "fail", message: "RetryRunError: again (attempt 2)", retryable: true }),
    ]);
  },

  // A wait for many children: one request, its results in order.
  async children() {
    await welcome();
    const [a] = lanes;
    a.send({ t: "run", x: 1, run: 100, workflow: "w.children", input: null, attempt: 1 });
    await a.expect({ x: 1, op: "child_wait_all", children: [5, 6, 7], k: 1, timeout_ms: 2000 }, { t: "ok", value: [null, { status: "completed", output: { y: 1 }, error: null }, null] });
    await a.expect(
      { x: 1, op: "child_wait_all", children: [5, 6, 7] },
      {
        t: "ok",
        value: [
          { status: "completed", output: 0, error: null },
          { status: "completed", output: { y: 1 }, error: null },
          { status: "failed", output: null, error: "x is -1" },
        ],
      },
    );
    out({ end: await a.next() });
  },

  // After a stop the SDK sends nothing more for the execution, whatever
  // its code does, and the lane serves the next run.
  async stop() {
    await welcome();
    const [a, b] = lanes;
    a.send({ t: "run", x: 1, run: 100, workflow: "w.swallow", input: null, attempt: 1 });
    b.send({ t: "run", x: 2, run: 200, workflow: "w.nondet", input: null, attempt: 1 });
    await Promise.all([
      (async () => {
        await a.expect({ x: 1, op: "sleep", name: "sleep", ms: 1000 }, { t: "stop", reason: "suspended", message: "sleeping" });
        await a.quiet(300);
        a.send({ t: "run", x: 3, run: 100, workflow: "w.quick", input: 5, attempt: 1 });
        await a.expect({ x: 3, op: "return", value: 6 });
      })(),
      (async () => {
        await b.expect({ x: 2, op: "step", name: "a" }, { t: "stop", reason: "nondeterminism", message: "non-determinism at journal position 0" });
        await b.quiet(300);
      })(),
    ]);
  },

  // Steps: made in order, no durable call inside one but should_stop, the
  // timeout, a result too large, the stop poll.
  async steps() {
    await welcome(4096);
    const [a, b, c] = lanes;
    a.send({ t: "run", x: 1, run: 1, workflow: "w.order", input: null, attempt: 1 });
    b.send({ t: "run", x: 2, run: 2, workflow: "w.nested", input: null, attempt: 1 });
    c.send({ t: "run", x: 3, run: 3, workflow: "w.poll", input: null, attempt: 1 });
    await Promise.all([
      (async () => {
        await a.expect({ x: 1, op: "step", name: "a" }, { t: "run_step", attempt: 1 });
        await a.expect({ x: 1, op: "step_result", value: "A" });
        await a.expect({ x: 1, op: "step", name: "b" }, { t: "ok", value: "B" });
        await a.expect({ x: 1, op: "return", value: ["A", "B"] });
        a.send({ t: "run", x: 4, run: 4, workflow: "w.timeout", input: null, attempt: 1 });
        await a.expect({ x: 4, op: "step", name: "t", retry: { max_attempts: 1, timeout_ms: 150 }, await: true }, { t: "run_step", attempt: 1 });
        const t0 = Date.now();
        const err = await a.next();
        out({ timeoutAfter: Date.now() - t0 });
        assert.deepEqual(err, { x: 4, op: "step_error", message: "StepTimeoutError: the step timed out after 150 ms", retryable: true });
        a.send({ t: "error", code: "failed", message: "step t: timed out after 150 ms" });
        await a.expect({ x: 4, op: "return", value: "StepFailedError: step t: timed out after 150 ms" });
        a.send({ t: "run", x: 5, run: 5, workflow: "w.big", input: null, attempt: 1 });
        await a.expect({ x: 5, op: "step", name: "big" }, { t: "run_step", attempt: 1 });
        await a.expect(
          { x: 5, op: "step_error", message: "InvalidArgumentError: the step's result is 5002 bytes, more than the engine takes (CAIRN_MAX_PAYLOAD, 4096)", retryable: false },
          { t: "error", code: "failed", message: "step big: too big" },
        );
        await a.expect({ x: 5, op: "fail", message: "InvalidArgumentError: the workflow's output is 6002 bytes, more than the engine takes (CAIRN_MAX_PAYLOAD, 4096)", retryable: false });
      })(),
      (async () => {
        await b.expect({ x: 2, op: "step", name: "outer" }, { t: "run_step", attempt: 3 });
        await b.expect({ x: 2, op: "should_stop" }, { t: "ok", value: false });
        await b.expect({ x: 2, op: "step_result", value: { inner: "a step function may make no durable call but shouldStop()", stop: false, attempt: 3 } });
        await b.expect({ x: 2, op: "return", value: null });
      })(),
      (async () => {
        await c.expect({ x: 3, op: "step", name: "wait" }, { t: "run_step", attempt: 1 });
        await c.expect({ x: 3, op: "should_stop" }, { t: "ok", value: false });
        await c.expect({ x: 3, op: "should_stop" }, { t: "ok", value: true });
        await c.expect({ x: 3, op: "step_error", message: "StoppedError: the run is cancelled or handed over", retryable: true }, { t: "stop", reason: "cancelled", message: "cancelled" });
        await c.quiet(200);
      })(),
    ]);
  },

  // Continue as new (protocol 2): the end message with the successor's
  // input; an engine of protocol 1 gets a failure saying why.
  async continues() {
    await welcome(1048576, Number(process.env.FAKE_PROTOCOL ?? 2));
    lanes[0].send({ t: "run", x: 1, run: 1, workflow: "w.next", input: { n: 1 }, attempt: 1 });
    const end = await lanes[0].next();
    out({ end });
  },

  // Exits before welcome: the SDK exits with this status.
  async early() {
    process.exit(7);
  },

  async refused() {
    await control.next();
    control.send({ t: "refused", message: 'workflow "bad name": invalid' });
    await new Promise((r) => setTimeout(r, 50));
    process.exit(2);
  },

  // The first engine dies in the middle of a step; the SDK starts another
  // after a second, and a SIGTERM then drains it.
  async restart() {
    const count = process.env.FAKE_OUT + ".count";
    const n = existsSync(count) ? Number(readFileSync(count, "utf8")) + 1 : 1;
    writeFileSync(count, String(n));
    out({ start: n });
    await welcome();
    if (n === 1) {
      lanes[0].send({ t: "run", x: 1, run: 1, workflow: "w.long", input: null, attempt: 1 });
      await lanes[0].expect({ x: 1, op: "step", name: "long" }, { t: "run_step", attempt: 1 });
      process.exit(1);
    }
    instance = n;
    await new Promise(() => undefined);
  },
};

// At the end of a scenario the fake engine asks the SDK process to stop
// (SIGTERM), as an operator would, and exits 0 when the SDK forwards it, or
// 99 after a failed check.
let status = 0;
let instance = 1;
process.on("SIGTERM", () => {
  out({ sigterm: instance });
  process.exit(status);
});
SCENARIOS[process.env.FAKE_SCENARIO]().then(
  () => process.kill(process.ppid, "SIGTERM"),
  (err) => {
    process.stderr.write(`fake engine (${process.env.FAKE_SCENARIO}): ${err.stack}\n`);
    status = 99;
    process.kill(process.ppid, "SIGTERM");
  },
);
