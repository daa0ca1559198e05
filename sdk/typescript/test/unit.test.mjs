// Unit tests of the SDK's pure parts: framing, messages, errors, settings.
// `node --test test/` (or `npm test`) after `make` compiled dist/.
import assert from "node:assert/strict";
import { readFileSync, mkdtempSync, writeFileSync, chmodSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "node:test";

import * as sdk from "../dist/index.js";
import { LineSplitter, decode, encode, hello, toJSON, clip, MAX_MESSAGE } from "../dist/wire.js";
import { wirePolicy } from "../dist/policy.js";
import { describe as describeError, stopError } from "../dist/errors.js";
import { engineEnv, exitStatus, findEngine, laneCount, nextBackoff } from "../dist/engine.js";
import { formatLine } from "../dist/log.js";

const buf = (s) => Buffer.from(s, "utf8");

test("a line split over many chunks comes out whole, once", () => {
  const sp = new LineSplitter();
  assert.deepEqual(sp.push(buf('{"t":"o')), []);
  assert.deepEqual(sp.push(buf('k","value":1}')), []);
  assert.equal(sp.pending, 20);
  assert.deepEqual(sp.push(buf("\n")), ['{"t":"ok","value":1}']);
  assert.equal(sp.pending, 0);
});

test("several lines in one chunk, and a chunk that ends one line and starts the next", () => {
  const sp = new LineSplitter();
  assert.deepEqual(sp.push(buf('{"a":1}\n{"b":2}\n{"c"')), ['{"a":1}', '{"b":2}']);
  assert.deepEqual(sp.push(buf(":3}\n\n")), ['{"c":3}', ""]);
});

test("a UTF-8 character cut between two chunks is decoded whole", () => {
  const line = buf('{"t":"ok","value":"café ☕ 𝄞"}\n');
  for (let cut = 1; cut < line.length; cut++) {
    const sp = new LineSplitter();
    const got = [...sp.push(line.subarray(0, cut)), ...sp.push(line.subarray(cut))];
    assert.deepEqual(got, ['{"t":"ok","value":"café ☕ 𝄞"}'], `cut at ${cut}`);
  }
  // One byte at a time.
  const sp = new LineSplitter();
  const got = [];
  for (const b of line) got.push(...sp.push(Buffer.from([b])));
  assert.deepEqual(got.map((l) => decode(l).value), ["café ☕ 𝄞"]);
});

test("the splitter copies what it keeps: a reused chunk buffer does not corrupt a line", () => {
  const sp = new LineSplitter();
  const chunk = Buffer.from('{"x":"abc');
  sp.push(chunk);
  chunk.fill(0x41);
  assert.deepEqual(sp.push(buf('def"}\n')), ['{"x":"abcdef"}']);
});

test("a line longer than max_payload + 64 KiB is refused, ended or not", () => {
  const sp = new LineSplitter(100);
  assert.throws(() => sp.push(Buffer.alloc(150, 0x61)), sdk.ProtocolError);
  const sp2 = new LineSplitter(100);
  sp2.push(Buffer.alloc(60, 0x61));
  assert.throws(() => sp2.push(Buffer.concat([Buffer.alloc(60, 0x61), buf("\n")])), /more than 120 bytes/);
  const sp3 = new LineSplitter(100);
  assert.deepEqual(sp3.push(Buffer.concat([Buffer.alloc(99, 0x61), buf("\n")])).map((l) => l.length), [99]);
});

test("encode writes compact JSON on one line, escaping newlines in strings", () => {
  const line = encode({ x: 1, op: "step_error", message: "line one\nline two\r\u2028", retryable: true });
  assert.equal(line.indexOf("\n"), line.length - 1);
  assert.equal(line, '{"x":1,"op":"step_error","message":"line one\\nline two\\r\u2028","retryable":true}\n');
  assert.deepEqual(JSON.parse(line), { x: 1, op: "step_error", message: "line one\nline two\r\u2028", retryable: true });
});

test("encode refuses what JSON cannot hold and lines the engine would refuse", () => {
  assert.throws(() => encode({ v: 10n }), sdk.InvalidArgumentError);
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => encode({ v: cyclic }), sdk.InvalidArgumentError);
  assert.throws(() => encode({ v: "x".repeat(200) }, 100), /longer than the engine takes \(100\)/);
});

test("decode takes objects with a string t and refuses anything else", () => {
  assert.deepEqual(decode('{"t":"ok","value":[1,2]}'), { t: "ok", value: [1, 2] });
  for (const bad of ["", "nope", "[1]", "null", '"t"', '{"t":1}', '{"op":"x"}'])
    assert.throws(() => decode(bad), sdk.ProtocolError, bad);
});

test("toJSON sizes values in UTF-8 bytes and reads undefined as null", () => {
  assert.deepEqual(toJSON(undefined, "v"), { text: "null", bytes: 4 });
  assert.deepEqual(toJSON("é", "v"), { text: '"é"', bytes: 4 });
  assert.deepEqual(toJSON(() => 1, "v"), { text: "null", bytes: 4 });
  assert.throws(() => toJSON({ n: 1n }, "the step's result"), /the step's result is not JSON/);
});

test("retry policies go on the wire in snake_case, and bad fields are named", () => {
  assert.equal(wirePolicy(undefined), undefined);
  assert.equal(wirePolicy({}), undefined);
  assert.deepEqual(wirePolicy({ maxAttempts: 5, initialMs: 200, multiplier: 1.5, maxMs: 9000, jitter: -1, timeoutMs: 3000 }), {
    max_attempts: 5,
    initial_ms: 200,
    multiplier: 1.5,
    max_ms: 9000,
    jitter: -1,
    timeout_ms: 3000,
  });
  assert.throws(() => wirePolicy({ initialMs: NaN }), /initialMs is NaN/);
  assert.throws(() => wirePolicy({ maxAttempts: "3" }), /maxAttempts is 3; expected a number/);
});

test("hello is the protocol's first message, as docs/protocol.md shows it", () => {
  const h = hello("cairn-typescript/0.1.0", "node 20.1.0", [
    { name: "ts.order", retry: { maxAttempts: 3, initialMs: 1000 } },
    { name: "ts.plain" },
  ]);
  assert.equal(
    encode(h),
    '{"op":"hello","protocols":[1,2,3],"sdk":"cairn-typescript/0.1.0","runtime":"node 20.1.0",' +
      '"workflows":[{"name":"ts.order","retry":{"max_attempts":3,"initial_ms":1000}},{"name":"ts.plain"}]}\n',
  );
});

test("errors are Error subclasses named for their class, carrying the message", () => {
  const e = new sdk.StepFailedError("step charge: HTTPError: 503");
  assert.ok(e instanceof Error && e instanceof sdk.CairnError && e instanceof sdk.CallFailedError);
  assert.equal(e.name, "StepFailedError");
  assert.equal(e.message, "step charge: HTTPError: 503");
  assert.equal(String(e), "StepFailedError: step charge: HTTPError: 503");
  assert.equal(new sdk.ChildFailedError("x").name, "ChildFailedError");
  const h = new sdk.HttpError("run 7 not found", 404);
  assert.equal(h.status, 404);
  assert.equal(h.name, "HttpError");
  const r = new sdk.RunFailedError("Error: boom", 7, "failed");
  assert.deepEqual([r.run, r.status, r.message], [7, "failed", "Error: boom"]);
});

test("a stop reply becomes the StoppedError of its reason", () => {
  const n = stopError("nondeterminism", "non-determinism at journal position 0");
  assert.ok(n instanceof sdk.NondeterminismError && n instanceof sdk.StoppedError);
  assert.equal(n.reason, "nondeterminism");
  assert.equal(n.message, "non-determinism at journal position 0");
  assert.ok(stopError("cancelled", "") instanceof sdk.CancelledError);
  assert.equal(stopError("cancelled", "").message, "cancelled");
  const s = stopError("suspended", "sleeping");
  assert.ok(s instanceof sdk.StoppedError && !(s instanceof sdk.CancelledError));
  assert.equal(stopError("a-later-reason", "m").reason, "a-later-reason");
});

test("a thrown value is described as Name: message", () => {
  class Declined extends Error {}
  class Named extends Error {
    constructor(m) {
      super(m);
      this.name = "PaymentError";
    }
  }
  assert.equal(describeError(new TypeError("bad input")), "TypeError: bad input");
  assert.equal(describeError(new Declined("card")), "Declined: card");
  assert.equal(describeError(new Named("503")), "PaymentError: 503");
  assert.equal(describeError(new sdk.NonRetryableError("no")), "NonRetryableError: no");
  assert.equal(describeError(new Error("")), "Error");
  assert.equal(describeError("plain text"), "plain text");
  assert.equal(describeError({ code: 7 }), 'thrown: {"code":7}');
  assert.equal(describeError(undefined), "thrown: undefined");
  assert.equal(clip("x".repeat(MAX_MESSAGE + 10)).length, MAX_MESSAGE);
});

test("the engine's environment takes the SDK's defaults where unset", () => {
  const env = engineEnv({ DATABASE_URL: "postgresql:///x", CAIRN_SHARD_GROUPS: "", PATH: "/bin", GONE: undefined });
  assert.equal(env.CAIRN_SHARD_GROUPS, "typescript");
  assert.equal(env.CAIRN_HTTP_ADDR, "127.0.0.1:0");
  assert.equal(env.CAIRN_CONCURRENCY, "16");
  assert.equal(env.DATABASE_URL, "postgresql:///x");
  assert.ok(!("GONE" in env));
  const own = engineEnv({ CAIRN_SHARD_GROUPS: "orders", CAIRN_HTTP_ADDR: "127.0.0.1:9000", CAIRN_CONCURRENCY: "4" });
  assert.deepEqual([own.CAIRN_SHARD_GROUPS, own.CAIRN_HTTP_ADDR, own.CAIRN_CONCURRENCY], ["orders", "127.0.0.1:9000", "4"]);
  assert.equal(engineEnv({ CAIRN_CONCURRENCY: "4" }, 2).CAIRN_CONCURRENCY, "2");
  assert.equal(laneCount({}), 16);
  assert.equal(laneCount({ CAIRN_CONCURRENCY: "3" }), 3);
  for (const bad of ["0", "-1", "x", "2.5", "1001"])
    assert.throws(() => laneCount({ CAIRN_CONCURRENCY: bad }), /invalid value for CAIRN_CONCURRENCY/);
});

test("the engine is CAIRN_WORKER_BIN, else bin/cairn-worker of the repository, else on PATH", () => {
  const root = mkdtempSync(join(tmpdir(), "cairn-find-"));
  const dist = join(root, "sdk", "typescript", "dist");
  mkdirSync(dist, { recursive: true });
  mkdirSync(join(root, "bin"));
  mkdirSync(join(root, "path"));
  const exe = (p) => {
    writeFileSync(p, "#!/bin/sh\n");
    chmodSync(p, 0o755);
    return p;
  };
  const onPath = exe(join(root, "path", "cairn-worker"));
  assert.equal(findEngine({ PATH: `/nonexistent:${join(root, "path")}` }, dist), onPath);
  const inRepo = exe(join(root, "bin", "cairn-worker"));
  assert.equal(findEngine({ PATH: join(root, "path") }, dist), inRepo);
  const named = exe(join(root, "named"));
  assert.equal(findEngine({ CAIRN_WORKER_BIN: named, PATH: join(root, "path") }, dist), named);
  assert.throws(() => findEngine({ CAIRN_WORKER_BIN: join(root, "bin") }, dist), /CAIRN_WORKER_BIN=.*: not an executable file/);
  // Outside a repository's sdk/typescript, bin/ next to it does not count.
  assert.throws(() => findEngine({ PATH: "/nonexistent" }, join(root, "elsewhere", "dist")), sdk.EngineNotFoundError);
});

test("exit statuses read as a shell's, and restarts back off 1 s, doubling to 30 s", () => {
  assert.equal(exitStatus(0, null), 0);
  assert.equal(exitStatus(2, null), 2);
  assert.equal(exitStatus(null, "SIGKILL"), 137);
  assert.equal(exitStatus(null, "SIGTERM"), 143);
  let wait;
  const seen = [];
  for (let i = 0; i < 7; i++) seen.push((wait = nextBackoff(wait, 5000)));
  assert.deepEqual(seen, [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  assert.equal(nextBackoff(30000, 60000), 1000, "an engine that lived a minute starts the backoff over");
});

test("log lines are logfmt like the engine's, or JSON", () => {
  const at = new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6));
  assert.equal(
    formatLine("warn", "the engine exited", { status: 1, bin: "/a b/cairn-worker" }, false, at),
    'ts=2026-01-02T03:04:05.006Z level=warn msg="the engine exited" status=1 bin="/a b/cairn-worker"\n',
  );
  assert.deepEqual(JSON.parse(formatLine("info", "m", { pid: 7 }, true, at)), {
    ts: "2026-01-02T03:04:05.006Z",
    level: "info",
    msg: "m",
    pid: "7",
  });
});

test("the SDK's version is package.json's, and the package exports what it documents", () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(sdk.VERSION, pkg.version);
  for (const name of ["Worker", "Context", "Client", "StepFailedError", "ChildFailedError", "NondeterminismError",
    "NonRetryableError", "RetryRunError", "StoppedError", "WaitTimeoutError", "HttpError"])
    assert.equal(typeof sdk[name], "function", name);
});
