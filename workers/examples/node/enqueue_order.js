// Enqueue a cairn run in the same transaction as a business write.
//
// An order row and the run that processes it commit together or not at all:
// cairn.enqueue() is an ordinary SQL function, so it takes part in the
// application's transaction, and its wake-up of a worker is sent only if
// that transaction commits.
//
//     npm ci && DATABASE_URL=postgresql://app@db/shop node enqueue_order.js
//
// Needs the `pg` package (package.json) and a database migrated by
// `cairn migrate`, with a cairn-worker running the workflow (`noop` is built
// in: its output is its input). The database user needs the role
// cairn_client (GRANT cairn_client TO app) and may create the table
// shop_orders. Without DATABASE_URL, pg reads PGHOST, PGPORT, PGDATABASE and
// PGUSER.
'use strict';
const { Client } = require('pg');

const WORKFLOW = process.env.CAIRN_EXAMPLE_WORKFLOW || 'noop';
const FINISHED = ['completed', 'failed', 'cancelled'];

// Inserts an order and enqueues its run in one transaction; returns
// { orderId, runId }, or null when the transaction was rolled back.
async function placeOrder(db, item, commit) {
  await db.query('BEGIN');
  try {
    const order = await db.query('INSERT INTO shop_orders (item) VALUES ($1) RETURNING id', [item]);
    const orderId = order.rows[0].id;
    const run = await db.query(
      'SELECT id, existed FROM cairn.enqueue($1, $2::jsonb, key => $3)',
      [WORKFLOW, JSON.stringify({ order: Number(orderId), item }), `order-${orderId}`]);
    const runId = run.rows[0].id;
    await db.query('UPDATE shop_orders SET run_id = $1 WHERE id = $2', [runId, orderId]);
    if (!commit) {
      await db.query('ROLLBACK');
      return null;
    }
    await db.query('COMMIT');
    return { orderId, runId };
  } catch (err) {
    await db.query('ROLLBACK');
    throw err;
  }
}

// Reads the run until it has finished; returns its row.
async function waitForResult(db, runId, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  let nap = 20;
  for (;;) {
    const { rows } = await db.query('SELECT status, output, error FROM cairn.run($1)', [runId]);
    if (FINISHED.includes(rows[0].status)) return rows[0];
    if (Date.now() > deadline) throw new Error(`run ${runId} is still ${rows[0].status}`);
    await new Promise((done) => setTimeout(done, nap));
    nap = Math.min(nap * 1.5, 500);
  }
}

async function count(db, sql) {
  return Number((await db.query(sql)).rows[0].count);
}

async function main() {
  const db = new Client(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {});
  await db.connect();
  try {
    await db.query('CREATE TABLE IF NOT EXISTS shop_orders ' +
                   '(id bigserial PRIMARY KEY, item text NOT NULL, run_id bigint)');
    const before = await count(db, 'SELECT count(*) FROM cairn.run_view');

    // Rolled back: neither the order nor its run exists.
    if ((await placeOrder(db, 'kettle', false)) !== null) throw new Error('not rolled back');
    const orders = await count(db, "SELECT count(*) FROM shop_orders WHERE item = 'kettle'");
    const runs = await count(db, 'SELECT count(*) FROM cairn.run_view');
    console.log(`rolled back: ${orders} orders, ${runs - before} new runs`);
    if (orders || runs !== before) throw new Error('a rolled-back transaction left an order or a run behind');

    // Committed: both exist, and a worker runs the run.
    const { orderId, runId } = await placeOrder(db, 'toaster', true);
    const run = await waitForResult(db, runId);
    console.log(`order ${orderId}: run ${runId} ${run.status} output ${JSON.stringify(run.output)}`);
    if (run.status !== 'completed') throw new Error(`run ${runId} ended ${run.status}: ${run.error}`);
  } finally {
    await db.end();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
