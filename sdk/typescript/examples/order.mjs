// The order workflow in TypeScript's SDK, as plain JavaScript: charge, wait
// a second, wait for a person's approval (up to an hour), ship.
//
//     make && DATABASE_URL=postgresql://... node sdk/typescript/examples/order.mjs
//     cairn enqueue ts.order --input '{"item": "book", "amount": 12}'
//     cairn signal RUN approval '{"by": "ann"}'
//     cairn result RUN    # {"item":"book","charge_id":"ch_...","tracking":"TRK-...","approved_by":"ann"}
//
// It serves ts.order until SIGTERM or Ctrl-C (then drains), starting
// cairn-worker (bin/cairn-worker of this repository, or on PATH) beside it.
// In a project of your own: npm install cairn-sdk, and import from "cairn-sdk".
import { randomUUID } from "node:crypto";
import { NonRetryableError, Worker } from "../dist/index.js";

// Stand-ins for a payment provider and a carrier.
async function charge(item, amount, signal) {
  if (!(amount > 0)) throw new NonRetryableError(`amount must be positive, not ${amount}`);
  signal.throwIfAborted?.();
  return `ch_${randomUUID().slice(0, 8)}`;
}
async function ship(item) {
  return `TRK-${randomUUID().slice(0, 6).toUpperCase()}`;
}

const worker = new Worker();

worker.workflow("ts.order", async (ctx, { item, amount }) => {
  // Retried on failure: up to 5 attempts, 1 s then 2 s, 4 s ... apart.
  const chargeId = await ctx.step("charge", (signal) => charge(item, amount, signal), {
    maxAttempts: 5,
    initialMs: 1000,
  });
  await ctx.sleep(1000);
  const approval = await ctx.waitForSignal("approval", { timeoutMs: 60 * 60 * 1000 });
  const tracking = await ctx.step("ship", () => ship(item));
  return { item, charge_id: chargeId, tracking, approved_by: approval.by };
});

await worker.run();
