#!/usr/bin/env python3
"""bench-citus.py reset DIR DB | report DIR DB SINGLE.json CITUS.json

The Citus part of `make bench` (scripts/bench.sh): the share of the work
each node of a tests/citus.sh cluster in DIR served, and the Citus figures
beside the single server's of the same run.

  reset   empties pg_stat_statements of database DB on every node and keeps
          each node's transaction count (DIR/xacts.json)
  report  prints, per node, the statements (pg_stat_statements calls) and
          transactions (pg_stat_database) of DB (the enqueue phases') since
          reset, and their share of the cluster's; then the enqueue and drain
          figures of SINGLE.json (the single server) and CITUS.json (the
          cluster) side by side, with each drain's per-node figures (the
          bench counts them on each node: BENCH_NODES), and adds the node
          figures of DB to CITUS.json under "nodes"
"""
import json
import os
import subprocess
import sys

NODES = ("coord", "w1", "w2")
# The figures compared, by their key in the bench's JSON.
KEYS = (
    "enqueue_p50_ms",
    "enqueue_p99_ms",
    "enqueue_x8_runs_per_s",
    "enqueue_x8_worker_runs_per_s",
    "noop_runs_per_s",
    "noop_xacts_per_run",
    "noop_statements_per_run",
    "bench3_runs_per_s",
    "bench3_xacts_per_run",
    "bench3_statements_per_run",
)


def sql(cluster, node, db, query):
    """One value of query on node's database db, as text."""
    dsn = f"host={cluster}/{node} port=5432 user=cairn dbname={db}"
    done = subprocess.run(
        ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", dsn, "-c", query],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))
    if done.returncode != 0:
        sys.exit(f"bench-citus: {node}: {done.stderr.strip()}")
    return done.stdout.strip()


def xacts(cluster, node, db):
    return int(sql(cluster, node, db,
                   "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                   "WHERE datname = current_database()"))


def reset(cluster, db):
    before = {}
    # Citus makes the extension on the worker nodes as well, and refuses it
    # made on one of them.
    sql(cluster, "coord", db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    for node in NODES:
        sql(cluster, node, db, "SELECT pg_stat_statements_reset()")
        before[node] = xacts(cluster, node, db)
    with open(os.path.join(cluster, "xacts.json"), "w", encoding="utf-8") as f:
        json.dump(before, f)


def measures(path):
    with open(path, encoding="utf-8") as f:
        return {m["key"]: m for m in json.load(f).get("measures", [])}


def report(cluster, db, single_path, citus_path):
    with open(os.path.join(cluster, "xacts.json"), encoding="utf-8") as f:
        before = json.load(f)
    nodes = {}
    for node in NODES:
        calls = sql(cluster, node, db,
                    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database "
                    "              WHERE datname = current_database())")
        nodes[node] = {"statements": int(calls),
                       "transactions": xacts(cluster, node, db) - before[node]}
    total_s = sum(n["statements"] for n in nodes.values()) or 1
    total_x = sum(n["transactions"] for n in nodes.values()) or 1
    print("\nCitus: the work each node served in the enqueue phases (database %s)" % db)
    print("%-8s %12s %7s %14s %7s" % ("node", "statements", "share", "transactions", "share"))
    for node, n in nodes.items():
        n["statement_share"] = n["statements"] / total_s
        n["transaction_share"] = n["transactions"] / total_x
        print("%-8s %12d %6.1f%% %14d %6.1f%%" % (
            node, n["statements"], 100 * n["statement_share"],
            n["transactions"], 100 * n["transaction_share"]))
    one, cit = measures(single_path), measures(citus_path)
    print("\nCitus beside the single server of this run (a drain's statements and")
    print("transactions per run: the coordinator's, then each worker node's)")
    print("%-48s %12s %12s %8s" % ("measure", "one server", "Citus", "ratio"))
    for key in [k for k in cit if k in KEYS or "_node" in k]:
        a = one.get(key, {}).get("value")
        b = cit[key]["value"]
        ratio = "%.2fx" % (b / a) if a else "-"
        print("%-48s %12s %12.4g %8s" % (cit[key]["label"],
                                           "%.4g" % a if a is not None else "-", b, ratio))
    with open(citus_path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["nodes"] = nodes
    with open(citus_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)


def main(argv):
    if len(argv) == 3 and argv[0] == "reset":
        reset(argv[1], argv[2])
    elif len(argv) == 5 and argv[0] == "report":
        report(*argv[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
