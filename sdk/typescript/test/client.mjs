// The client calls against a real HTTP API (tests/test_sdk_ts.c starts a
// worker with CAIRN_HTTP_TOKEN, and flows.mjs serving ts.t.wait): enqueue,
// signal, get, result, cancel, retry, and the server's errors as HttpError.
// Prints "client: ok" when every check held.
import assert from "node:assert/strict";
import { Client, HttpError, RunFailedError, WaitTimeoutError } from "../dist/index.js";

const client = new Client(); // CAIRN_URL, CAIRN_HTTP_TOKEN
const group = "typescript";

const first = await client.enqueue("ts.t.wait", { n: 1 }, { group, key: "client-1" });
assert.equal(first.existed, false);
assert.equal(typeof first.id, "number");
const again = await client.enqueue("ts.t.wait", { n: 1 }, { group, key: "client-1" });
assert.deepEqual([again.id, again.existed], [first.id, true]);

await assert.rejects(client.result(first.id, { timeoutMs: 300 }), WaitTimeoutError);
await client.signal(first.id, "go", { v: 2 });
assert.deepEqual(await client.result(first.id, { timeoutMs: 30000 }), { v: 2 });
const run = await client.get(first.id);
assert.equal(run.status, "completed");
assert.equal(run.workflow, "ts.t.wait");
assert.equal(run.group, group);
assert.deepEqual(run.input, { n: 1 });

const second = await client.enqueue("ts.t.wait", null, { group });
await client.cancel(second.id);
const cancelled = await client.wait(second.id, { timeoutMs: 30000 });
assert.equal(cancelled.status, "cancelled");
const err = await client.result(second.id).catch((e) => e);
assert.ok(err instanceof RunFailedError, String(err));
assert.equal(err.status, "cancelled");
await client.retry(second.id);
await client.signal(second.id, "go", "again");
assert.equal(await client.result(second.id, { timeoutMs: 30000 }), "again");

const missing = await client.get(99999999).catch((e) => e);
assert.ok(missing instanceof HttpError, String(missing));
assert.equal(missing.status, 404);
assert.equal(missing.message, "run 99999999 not found");
const bad = await client.enqueue("no pe", null).catch((e) => e);
assert.equal(bad.status, 400);
assert.match(bad.message, /no pe/);
const done = await client.cancel(first.id).catch((e) => e);
assert.equal(done.status, 409);
assert.match(done.message, /already finished/);
const intruder = new Client({ token: "wrong-token-0123456789" });
assert.equal((await intruder.get(first.id).catch((e) => e)).status, 401);
const nobody = new Client({ url: "http://127.0.0.1:1" });
const refused = await nobody.get(1).catch((e) => e);
assert.ok(refused instanceof HttpError && refused.status === 0, String(refused));
console.log("client: ok");
