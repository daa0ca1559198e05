#!/usr/bin/env python3
"""Enqueue a cairn run in the same transaction as a business write.

An order row and the run that processes it commit together or not at all:
cairn.enqueue() is an ordinary SQL function, so it takes part in the
application's transaction, and its wake-up of a worker is sent only if that
transaction commits.

    DATABASE_URL=postgresql://app@db/shop python3 enqueue_order.py

Needs psycopg 3 (Debian: python3-psycopg) and a database migrated by
`cairn migrate`, with a cairn-worker running the workflow (`noop` is built
in: its output is its input). The database user needs the role cairn_client
(GRANT cairn_client TO app) and may create the table shop_orders.
"""
import json
import os
import sys
import time

import psycopg

WORKFLOW = os.environ.get("CAIRN_EXAMPLE_WORKFLOW", "noop")


def place_order(conn, item, commit):
    """Inserts an order and enqueues its run in one transaction; returns
    (order id, run id), or None when the transaction was rolled back."""
    with conn.transaction():
        order_id = conn.execute(
            "INSERT INTO shop_orders (item) VALUES (%s) RETURNING id", (item,)
        ).fetchone()[0]
        run_id, existed = conn.execute(
            "SELECT id, existed FROM cairn.enqueue(%s, %s::jsonb, key => %s)",
            (WORKFLOW, json.dumps({"order": order_id, "item": item}), f"order-{order_id}"),
        ).fetchone()
        conn.execute("UPDATE shop_orders SET run_id = %s WHERE id = %s", (run_id, order_id))
        if not commit:
            raise psycopg.Rollback()  # leaves the transaction, undoing both writes
        return order_id, run_id
    return None


def wait_for_result(conn, run_id, timeout_s=30.0):
    """Reads the run until it has finished; returns its row as a dict."""
    deadline = time.monotonic() + timeout_s
    nap = 0.02
    while True:
        with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            run = cur.execute(
                "SELECT status, output, error FROM cairn.run(%s)", (run_id,)
            ).fetchone()
        if run["status"] in ("completed", "failed", "cancelled"):
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} is still {run['status']} after {timeout_s}s")
        time.sleep(nap)
        nap = min(nap * 1.5, 0.5)


def main():
    with psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS shop_orders "
            "(id bigserial PRIMARY KEY, item text NOT NULL, run_id bigint)"
        )
        before = conn.execute("SELECT count(*) FROM cairn.run_view").fetchone()[0]

        # Rolled back: neither the order nor its run exists.
        assert place_order(conn, "umbrella", commit=False) is None
        orders = conn.execute(
            "SELECT count(*) FROM shop_orders WHERE item = 'umbrella'"
        ).fetchone()[0]
        runs = conn.execute("SELECT count(*) FROM cairn.run_view").fetchone()[0]
        print(f"rolled back: {orders} orders, {runs - before} new runs")
        if orders or runs != before:
            sys.exit("a rolled-back transaction left an order or a run behind")

        # Committed: both exist, and a worker runs the run.
        order_id, run_id = place_order(conn, "teapot", commit=True)
        run = wait_for_result(conn, run_id)
        print(f"order {order_id}: run {run_id} {run['status']} output {json.dumps(run['output'])}")
        if run["status"] != "completed":
            sys.exit(f"run {run_id} ended {run['status']}: {run['error']}")


if __name__ == "__main__":
    main()
