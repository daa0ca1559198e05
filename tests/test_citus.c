/*
 * test_citus.c - the Citus cluster of the harness (tests/citus.sh: a
 * coordinator and two worker nodes; tests/run.sh exports its URL as
 * CAIRN_CITUS_URL when Citus is installed) and the behaviours of Citus that
 * the plan of docs/architecture.md ("On Citus") rests on: a statement
 * filtered by the distribution column is a router plan (one task, one
 * node); a prepared statement keeps that with a generic plan only when it
 * reads or writes one table; a notification sent by a statement on a
 * distributed table is sent on the worker node, not on the coordinator.
 * Each test works in a schema of its own in the cluster's database.
 *
 * Then cairn's own schema on the cluster: `cairn migrate --citus` run for
 * real on a database of its own (tests/citus.sh createdb), fresh or with
 * runs stored before the conversion.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "client.h"
#include "commit.h"
#include "dispatch.h"
#include "support.h"

static PGconn *citus_connect(void)
{
	const char *url = getenv("CAIRN_CITUS_URL");
	if (!url || !*url)
		cr_skip_test("CAIRN_CITUS_URL is not set: tests/run.sh starts a Citus cluster only "
		             "when Citus is installed (sh scripts/deps.sh --citus && sh "
		             "scripts/citus.sh build, which make test runs)");
	PGconn *c = PQconnectdb(url);
	cr_assert(PQstatus(c) == CONNECTION_OK, "cannot connect to %s: %s", url, PQerrorMessage(c));
	PQclear(PQexec(c, "SET client_min_messages = warning"));
	return c;
}

static void exec_ok(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
	          PQerrorMessage(c));
	PQclear(r);
}

/*
 * A schema of this test's own, with cairn's shape in small: runs and their
 * journal, distributed by the shard and colocated (each key includes the
 * shard, as Citus requires), over the cluster's worker nodes.
 */
static void make_tables(PGconn *c, char *schema, size_t n)
{
	snprintf(schema, n, "citus_test_%d", (int)getpid());
	char sql[2048];
	snprintf(
	    sql, sizeof sql,
	    "DROP SCHEMA IF EXISTS %1$s CASCADE; CREATE SCHEMA %1$s; "
	    "CREATE TABLE %1$s.runs (id bigint NOT NULL, shard int NOT NULL, "
	    "  status text NOT NULL DEFAULT 'pending', PRIMARY KEY (id, shard)); "
	    "CREATE TABLE %1$s.steps (run_id bigint NOT NULL, shard int NOT NULL, "
	    "  seq int NOT NULL, output jsonb, PRIMARY KEY (run_id, seq, shard)); "
	    "SELECT create_distributed_table('%1$s.runs', 'shard'); "
	    "SELECT create_distributed_table('%1$s.steps', 'shard', "
	    "  colocate_with => '%1$s.runs'); "
	    "ALTER TABLE %1$s.steps ADD FOREIGN KEY (run_id, shard) "
	    "  REFERENCES %1$s.runs (id, shard) ON DELETE CASCADE; "
	    "INSERT INTO %1$s.runs (id, shard) SELECT i, i %% 64 FROM generate_series(1, 640) i; "
	    "INSERT INTO %1$s.steps (run_id, shard, seq) SELECT id, shard, 0 FROM %1$s.runs",
	    schema);
	exec_ok(c, sql);
}

static void drop_tables(PGconn *c, const char *schema)
{
	char sql[256];
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", schema);
	exec_ok(c, sql);
	PQfinish(c);
}

/* The plan of EXPLAIN (COSTS OFF) prefix sql, as one text (caller frees). */
static char *explain(PGconn *c, const char *sql)
{
	char q[4096];
	snprintf(q, sizeof q, "EXPLAIN (COSTS OFF) %s", sql);
	PGresult *r = PQexec(c, q);
	cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", q, PQerrorMessage(c));
	size_t len = 1;
	for (int i = 0; i < PQntuples(r); i++)
		len += strlen(PQgetvalue(r, i, 0)) + 1;
	char *plan = calloc(1, len);
	cr_assert(plan);
	for (int i = 0; i < PQntuples(r); i++) {
		strcat(plan, PQgetvalue(r, i, 0));
		strcat(plan, "\n");
	}
	PQclear(r);
	return plan;
}

/* The distributed plan's task count (its first "Task Count: N"), or -1. */
static int task_count(const char *plan)
{
	const char *t = strstr(plan, "Task Count: ");
	return t ? atoi(t + strlen("Task Count: ")) : -1;
}

/* How many different nodes the plan's tasks name ("Node: host=..."). */
static int node_count(const char *plan)
{
	char seen[8][512];
	int n = 0;
	for (const char *p = plan; (p = strstr(p, "Node: host=")) != NULL; p++) {
		char host[512];
		if (sscanf(p, "Node: host=%511s", host) != 1)
			continue;
		int k = 0;
		while (k < n && strcmp(seen[k], host) != 0)
			k++;
		if (k == n && n < 8)
			snprintf(seen[n++], sizeof seen[0], "%s", host);
	}
	return n;
}

/* No per-test .timeout (see test_exec.c): with --jobs 2 Criterion 2.4.1's
 * runner leaks the timer of a test that sets one, and LeakSanitizer fails
 * the suite for it; tests/run.sh's --timeout bounds every test. */

Test(citus, statements_filtered_by_the_shard_column_are_router_plans_on_one_node)
{
	PGconn *c = citus_connect();
	char s[64], sql[1024];
	make_tables(c, s, sizeof s);
	/* The tables are spread over both worker nodes. */
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(DISTINCT nodename) FROM citus_shards "
	                      "WHERE table_name = '%s.runs'::regclass",
	                      s),
	             2);
	/* A run with its journal, a write of the run, a write of the journal
	 * that reads the run: each one task, on one node. */
	const char *routed[] = {
	    "SELECT r.status, st.output FROM %1$s.runs r JOIN %1$s.steps st "
	    "  ON st.shard = r.shard AND st.run_id = r.id WHERE r.shard = 7 AND r.id = 7",
	    "UPDATE %1$s.runs SET status = 'running' WHERE shard = 7 AND id = 7",
	    "WITH u AS (UPDATE %1$s.runs SET status = 'completed' WHERE shard = 7 AND id = 7 "
	    "  RETURNING id) "
	    "UPDATE %1$s.steps SET output = '1' WHERE shard = 7 AND run_id IN (SELECT id FROM u)",
	};
	for (size_t i = 0; i < sizeof routed / sizeof *routed; i++) {
		snprintf(sql, sizeof sql, routed[i], s);
		char *plan = explain(c, sql);
		cr_assert_eq(task_count(plan), 1, "%s\n%s", sql, plan);
		cr_assert_eq(node_count(plan), 1, "%s\n%s", sql, plan);
		free(plan);
	}
	/* The same read without the shard: a task per Citus shard
	 * (citus.shard_count), which is what the check above tells apart. */
	snprintf(sql, sizeof sql,
	         "SELECT r.status FROM %1$s.runs r JOIN %1$s.steps st "
	         "  ON st.shard = r.shard AND st.run_id = r.id WHERE r.id = 7",
	         s);
	char *plan = explain(c, sql);
	cr_assert_eq(task_count(plan),
	             tdb_int(c, "SELECT current_setting('citus.shard_count')::int"), "%s\n%s", sql,
	             plan);
	free(plan);
	drop_tables(c, s);
}

Test(citus, a_generic_plan_routes_by_the_shard_only_a_statement_on_one_table)
{
	PGconn *c = citus_connect();
	char s[64], sql[1024];
	make_tables(c, s, sizeof s);
	/* cairn's worker sessions plan their statements once (generic plans).
	 * Citus defers the choice of shard to execution for a statement on
	 * one table filtered by the shard ("fast path"): */
	exec_ok(c, "SET plan_cache_mode = force_generic_plan");
	snprintf(sql, sizeof sql,
	         "PREPARE one(int, bigint) AS UPDATE %s.runs SET status = 'running' "
	         "WHERE shard = $1 AND id = $2",
	         s);
	exec_ok(c, sql);
	char *plan = explain(c, "EXECUTE one(7, 7)");
	cr_assert_eq(task_count(plan), 1, "%s", plan);
	free(plan);
	/* but a join, even of colocated tables each filtered by the shard, has
	 * no generic plan: it is planned with its values at every execution. */
	snprintf(sql, sizeof sql,
	         "PREPARE two(int, bigint) AS SELECT r.status FROM %1$s.runs r JOIN %1$s.steps st "
	         "ON st.shard = r.shard AND st.run_id = r.id "
	         "WHERE r.shard = $1 AND st.shard = $1 AND r.id = $2",
	         s);
	exec_ok(c, sql);
	PGresult *r = PQexec(c, "EXPLAIN (COSTS OFF) EXECUTE two(7, 7)");
	cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
	cr_assert(strstr(PQerrorMessage(c), "could not create distributed plan"), "%s",
	          PQerrorMessage(c));
	PQclear(r);
	exec_ok(c, "SET plan_cache_mode = auto");
	drop_tables(c, s);
}

Test(citus,
     a_notification_sent_by_a_statement_on_a_distributed_table_is_not_heard_on_the_coordinator)
{
	PGconn *c = citus_connect();
	char s[64], sql[1024];
	make_tables(c, s, sizeof s);
	PGconn *listener = citus_connect();
	char channel[96];
	snprintf(channel, sizeof channel, "%s_wake", s);
	snprintf(sql, sizeof sql, "LISTEN %s", channel);
	exec_ok(listener, sql);
	/* The statement runs on the worker node that holds shard 7, and so
	 * does its pg_notify; then one sent on the coordinator alone. The
	 * coordinator delivers in commit order, so the first would come first
	 * if it were heard there. */
	snprintf(sql, sizeof sql,
	         "SELECT pg_notify('%s', 'sent on the node of the shard') FROM %s.runs "
	         "WHERE shard = 7 AND id = 7",
	         channel, s);
	exec_ok(c, sql);
	snprintf(sql, sizeof sql, "SELECT pg_notify('%s', 'sent on the coordinator')", channel);
	exec_ok(c, sql);
	char *got = tdb_next_notification(listener, 30000);
	cr_assert(got, "no notification within 30 s");
	cr_assert_str_eq(got, "sent on the coordinator");
	free(got);
	PQfinish(listener);
	drop_tables(c, s);
}

/* The tables `cairn migrate --citus` distributes by part, and those it makes
 * reference tables (engine/migrate.c, SQL_CITUS). */
static const char *const DISTRIBUTED[] = {
    "runs",         "steps",       "messages",      "signals",      "events",
    "signal_links", "child_waits", "child_awaited", "shard_leases", "run_keys"};
static const char *const REFERENCE[] = {"settings",  "runners",   "parts",
                                        "schedules", "limits",    "rates",
                                        "slots",     "workflows", "runner_workflows"};
#define NDIST (sizeof DISTRIBUTED / sizeof *DISTRIBUTED)
#define NREF  (sizeof REFERENCE / sizeof *REFERENCE)

/* A database of its own on the harness cluster (Citus and the nodes in it),
 * named for this test and process: its URL (static). */
static const char *citus_db(const char *test)
{
	static char url[512];
	char name[64];
	snprintf(name, sizeof name, "%s_%d", test, (int)getpid());
	tcitus_createdb(name, url, sizeof url);
	return url;
}

/* `cairn migrate --citus --json` on db: its "citus" object's member name. */
static int migrate_citus_json(const char *db, const char *name)
{
	char *out = NULL, *err = NULL;
	int rc = tcli(db, &out, &err, "migrate", "--citus", "--json", NULL);
	cr_assert_eq(rc, 0, "cairn migrate --citus: %s", err ? err : "");
	cJSON *j = cJSON_Parse(out);
	cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "citus"), name);
	cr_assert(cJSON_IsNumber(v), "%s", out);
	int n = v->valueint;
	cJSON_Delete(j);
	free(out);
	free(err);
	return n;
}

/* A session of db (on the coordinator) that listens for wake-ups, as the
 * relay does. */
static PGconn *wake_listener(const char *db)
{
	PGconn *l = PQconnectdb(db);
	cr_assert(PQstatus(l) == CONNECTION_OK, "%s", PQerrorMessage(l));
	exec_ok(l, "LISTEN " CAIRN_WAKE_CHANNEL);
	return l;
}

/* Database db, new, after `cairn migrate --citus` made every table
 * distributed or a reference table: a connection to it. */
static PGconn *citus_migrated(const char *db)
{
	cr_assert_eq(migrate_citus_json(db, "made_now"), (int)(NDIST + NREF));
	PGconn *c = PQconnectdb(db);
	cr_assert(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
	return c;
}

/* The part a key (or a concurrency key) puts its run in. */
static int64_t part_of_key(PGconn *c, const char *key)
{
	return tdb_intf(c, "SELECT cairn.part_of(cairn.shard_of('%s', cairn.shards_per_group()))",
	                key);
}

/* Into out: a concurrency key whose part is neither key's nor avoid's. */
static void key_elsewhere(PGconn *c, const char *key, const char *avoid, char *out, size_t n)
{
	for (int i = 0;; i++) {
		snprintf(out, n, "ck%d", i);
		if (part_of_key(c, out) != part_of_key(c, key) &&
		    (!avoid || part_of_key(c, out) != part_of_key(c, avoid)))
			return;
	}
}

/* Checks what pg_dist_partition and cairn.parts say after the conversion. */
static void check_distributed(PGconn *c)
{
	int shards = (int)tdb_int(c, "SELECT current_setting('citus.shard_count')::int");
	int64_t colocation = tdb_int(c, "SELECT colocationid FROM pg_dist_partition "
	                                "WHERE logicalrelid = 'cairn.runs'::regclass");
	for (size_t i = 0; i < NDIST; i++) {
		/* Hash-distributed by part, colocated with runs. */
		cr_assert_eq(
		    tdb_intf(c,
		             "SELECT count(*) FROM pg_dist_partition "
		             "WHERE logicalrelid = 'cairn.%s'::regclass AND partmethod = 'h' "
		             "  AND column_to_column_name(logicalrelid, partkey) = 'part' "
		             "  AND colocationid = %" PRId64,
		             DISTRIBUTED[i], colocation),
		    1, "cairn.%s is not distributed by part colocated with cairn.runs",
		    DISTRIBUTED[i]);
		/* Over both worker nodes. */
		cr_assert_eq(tdb_intf(c,
		                      "SELECT count(DISTINCT nodename) FROM citus_shards "
		                      "WHERE table_name = 'cairn.%s'::regclass",
		                      DISTRIBUTED[i]),
		             2, "cairn.%s", DISTRIBUTED[i]);
	}
	for (size_t i = 0; i < NREF; i++)
		cr_assert_eq(
		    tdb_intf(c,
		             "SELECT count(*) FROM pg_dist_partition "
		             "WHERE logicalrelid = 'cairn.%s'::regclass AND partmethod = 'n' "
		             "  AND repmodel = 't'",
		             REFERENCE[i]),
		    1, "cairn.%s is not a reference table", REFERENCE[i]);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM pg_dist_partition "
	                        "WHERE logicalrelid = 'cairn.schema_migrations'::regclass"),
	             0, "schema_migrations stays the coordinator's");
	/* One part per Citus shard, each key hashing into a Citus shard of its
	 * own, so that the parts spread over every shard. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.parts"), shards);
	cr_assert_eq(tdb_int(c, "SELECT count(DISTINCT get_shard_id_for_distribution_column("
	                        "'cairn.runs', key)) FROM cairn.parts"),
	             shards);
	/* The foreign keys to runs are there again, on (run_id, part). */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
	                        "AND confrelid = 'cairn.runs'::regclass "
	                        "AND pg_get_constraintdef(oid) LIKE 'FOREIGN KEY (run_id, part)%'"),
	             6);
}

Test(citus, migrate_citus_distributes_the_tables_of_runs_by_part_and_a_second_run_does_nothing)
{
	const char *db = citus_db("migrate_fresh");
	PGconn *c = citus_migrated(db);
	check_distributed(c);
	int64_t parts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	/* Again: what pg_dist_partition lists is not done twice. */
	cr_assert_eq(migrate_citus_json(db, "made_now"), 0);
	cr_assert_eq(migrate_citus_json(db, "distributed"), (int)NDIST);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.parts"), parts);
	check_distributed(c);
	PQfinish(c);
}

Test(citus, migrate_citus_converts_a_database_with_runs_in_place_keeping_every_row)
{
	const char *db = citus_db("migrate_convert");
	char *out = NULL, *err = NULL;
	/* A single server's schema and runs: migrations applied, nothing
	 * distributed (the coordinator's tables are plain PostgreSQL tables). */
	cr_assert_eq(tcli(db, &out, &err, "migrate", NULL), 0, "%s", err ? err : "");
	free(out);
	free(err);
	PGconn *c = PQconnectdb(db);
	cr_assert(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM pg_dist_partition"), 0);
	const int runs = 40;
	for (int i = 0; i < runs; i++) {
		char key[32];
		snprintf(key, sizeof key, "k%d", i);
		cr_assert_eq(
		    tcli(db, &out, &err, "enqueue", "noop", "--key", key, "--delay", "1h", NULL), 0,
		    "%s", err ? err : "");
		free(out);
		free(err);
		if (i % 4 == 0) { /* some with a signal waiting, and its message */
			char id[32];
			snprintf(id, sizeof id, "%" PRId64,
			         tdb_intf(c, "SELECT id FROM cairn.runs WHERE key = '%s'", key));
			cr_assert_eq(tcli(db, &out, &err, "signal", id, "go", NULL), 0, "%s",
			             err ? err : "");
			free(out);
			free(err);
		}
	}
	/* Every run's id carries its shard (migration 0025). */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE id % 65536 = shard"), runs);
	char *ids = tdb_str(c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM cairn.runs");
	int64_t signals = tdb_int(c, "SELECT count(*) FROM cairn.signals");
	int64_t messages = tdb_int(c, "SELECT count(*) FROM cairn.messages");
	cr_assert_eq(signals, runs / 4);

	cr_assert_eq(migrate_citus_json(db, "made_now"), (int)(NDIST + NREF));
	check_distributed(c);
	/* The same runs under the same ids, each in the part of its shard,
	 * their signals and messages with them. */
	char *after = tdb_str(c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM cairn.runs");
	cr_assert_str_eq(after, ids);
	/* (A join with the reference table: cairn.part_of, which reads it, is
	 * the coordinator's, and cannot run inside a statement on the shards.) */
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs r JOIN cairn.parts p "
	                      "ON p.part_no = r.shard %% %" PRId64 " AND p.key = r.part",
	                      tdb_int(c, "SELECT count(*) FROM cairn.parts")),
	             runs);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.signals"), signals);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages"), messages);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.signals g JOIN cairn.runs r "
	                        "ON r.id = g.run_id AND r.part = g.part"),
	             signals);
	/* The parts are not all in one place: the runs sit in several parts. */
	cr_assert_gt(tdb_int(c, "SELECT count(DISTINCT part) FROM cairn.runs"), 1);
	/* After: the client's enqueue (its router statement, as it sends it)
	 * of a key stored before the conversion finds it in the same part and
	 * inserts nothing; new keys go in beside the old runs. */
	exec_ok(c, "SET plan_cache_mode = force_generic_plan");
	char sql[4096];
	snprintf(sql, sizeof sql, "PREPARE enq AS %s", client_sql_enqueue_values());
	exec_ok(c, sql);
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	for (int i = 0; i < 20; i++) {
		char key[32];
		snprintf(key, sizeof key, i < 10 ? "k%d" : "new%d", i);
		int shard = (int)tdb_intf(c, "SELECT cairn.shard_of('%s', 4096)", key);
		snprintf(sql, sizeof sql,
		         "EXECUTE enq('noop', '%s', 'default', %d, '{}', 3, 0, NULL, NULL, NULL, "
		         "0, NULL, "
		         "%" PRId64 ")",
		         key, shard,
		         tdb_intf(c, "SELECT key FROM cairn.parts WHERE part_no = %d %% %" PRId64,
		                  shard, nparts));
		exec_ok(c, sql);
	}
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs"), runs + 10);
	/* Every run stored before has its key in run_keys, in the part of the
	 * key, so that an enqueue with a concurrency key (which puts a run in
	 * that key's part) finds it too. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.run_keys WHERE key LIKE 'k%'"), runs);
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	char ck[16];
	key_elsewhere(c, "k7", NULL, ck, sizeof ck);
	cairn_enqueue_opts o = {.key = "k7", .concurrency_key = ck};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(cl, "noop", &o, &r), CAIRN_OK, "%s", cairn_client_errmsg(cl));
	cr_assert(r.existed);
	cr_assert_eq(r.id, tdb_int(c, "SELECT id FROM cairn.runs WHERE key = 'k7'"));
	cairn_enqueued_clear(&r);
	cairn_client_free(cl);
	free(ids);
	free(after);
	PQfinish(c);
}

Test(citus, the_enqueue_of_a_run_without_a_concurrency_key_is_one_task_on_the_node_of_its_part)
{
	const char *db = citus_db("enqueue_router");
	PGconn *c = citus_migrated(db);
	/* As a worker's or a client's session prepares it: a generic plan. */
	exec_ok(c, "SET plan_cache_mode = force_generic_plan");
	char sql[4096];
	snprintf(sql, sizeof sql, "PREPARE enq AS %s", client_sql_enqueue_values());
	exec_ok(c, sql);
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	char nodes[2][512] = {"", ""};
	/* Shards whose parts lie on both worker nodes: each enqueue is one
	 * task, on the node of its part, and its run is stored there. */
	for (int shard = 0; shard < 64; shard++) {
		int64_t part = tdb_intf(
		    c, "SELECT key FROM cairn.parts WHERE part_no = %d %% %" PRId64, shard, nparts);
		char args[256];
		snprintf(args, sizeof args,
		         "EXECUTE enq('router', 'k%d', 'default', %d, '{}', 3, 0, NULL, NULL, "
		         "NULL, 0, NULL, "
		         "%" PRId64 ")",
		         shard, shard, part);
		char *plan = explain(c, args);
		cr_assert_eq(task_count(plan), 1, "%s\n%s", args, plan);
		cr_assert_eq(node_count(plan), 1, "%s\n%s", args, plan);
		const char *host = strstr(plan, "Node: host=");
		cr_assert(host, "%s", plan);
		char node[512];
		sscanf(host, "Node: host=%511s", node);
		for (int k = 0; k < 2; k++)
			if (!nodes[k][0] || strcmp(nodes[k], node) == 0) {
				snprintf(nodes[k], sizeof nodes[k], "%s", node);
				break;
			}
		free(plan);
		exec_ok(c, args);
		cr_assert_eq(tdb_intf(c,
		                      "SELECT count(*) FROM cairn.runs WHERE workflow = 'router' "
		                      "AND key = 'k%d' AND part = %" PRId64 " AND id %% 65536 = %d",
		                      shard, part, shard),
		             1);
	}
	cr_assert(nodes[0][0] && nodes[1][0] && strcmp(nodes[0], nodes[1]) != 0,
	          "the enqueues went to one node only: %s", nodes[0]);
	/* The same key again: nothing inserted, as on one server. */
	int64_t part0 = tdb_int(c, "SELECT key FROM cairn.parts WHERE part_no = 0");
	char again[256];
	snprintf(again, sizeof again,
	         "EXECUTE enq('router', 'k0', 'default', 0, '{}', 3, 0, NULL, NULL, NULL, 0, NULL, "
	         "%" PRId64 ")",
	         part0);
	exec_ok(c, again);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'router'"), 64);
	PQfinish(c);
}

/*
 * Growing a cluster moves Citus shards between nodes while they are
 * written (citus_rebalance_start, by logical replication). cairn's tables
 * allow it: each distributed table has a primary key (the replica identity
 * logical replication needs) and its foreign keys stay within a colocation
 * group, so a part moves with all of its tables at once.
 */
Test(citus, a_part_moves_to_another_node_with_all_of_its_tables_by_logical_replication)
{
	const char *db = citus_db("move_part");
	PGconn *c = citus_migrated(db);
	/* Runs in every part, one with a journal entry, as the enqueue and the
	 * commit write them (ids carry their shards, parts as the client
	 * computes them). */
	exec_ok(c, "SET plan_cache_mode = force_generic_plan");
	char sql[4096];
	snprintf(sql, sizeof sql, "PREPARE enq AS %s", client_sql_enqueue_values());
	exec_ok(c, sql);
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	for (int shard = 0; shard < 2 * nparts; shard++) {
		snprintf(sql, sizeof sql,
		         "EXECUTE enq('move', 'k%d', 'default', %d, '{}', 3, 0, NULL, NULL, NULL, "
		         "0, NULL, "
		         "%" PRId64 ")",
		         shard, shard,
		         tdb_intf(c, "SELECT key FROM cairn.parts WHERE part_no = %d %% %" PRId64,
		                  shard, nparts));
		exec_ok(c, sql);
	}
	int64_t run = tdb_int(c, "SELECT id FROM cairn.runs WHERE key = 'k0'");
	int64_t part = tdb_intf(c, "SELECT part FROM cairn.runs WHERE id = %" PRId64, run);
	tdb_intf(c,
	         "INSERT INTO cairn.steps (run_id, part, seq, name, kind, status, output) "
	         "VALUES (%" PRId64 ", %" PRId64 ", 0, 'a', 'step', 'completed', '1') RETURNING 1",
	         run, part);
	/* The Citus shard of the part, on one node, moves to the other. */
	char *from = tdb_str(c, "SELECT nodename FROM citus_shards WHERE shardid = "
	                        "get_shard_id_for_distribution_column('cairn.runs', "
	                        "(SELECT part FROM cairn.runs WHERE key = 'k0'))");
	char *to = tdb_str(c, "SELECT nodename FROM pg_dist_node WHERE noderole = 'primary' "
	                      "AND groupid > 0 AND nodename <> (SELECT nodename FROM citus_shards "
	                      "WHERE shardid = get_shard_id_for_distribution_column('cairn.runs', "
	                      "(SELECT part FROM cairn.runs WHERE key = 'k0'))) LIMIT 1");
	snprintf(sql, sizeof sql,
	         "SELECT citus_move_shard_placement(get_shard_id_for_distribution_column("
	         "'cairn.runs', %" PRId64 "), '%s', 5432, '%s', 5432, "
	         "shard_transfer_mode => 'force_logical')",
	         part, from, to);
	exec_ok(c, sql);
	/* Every table of the part went with it, and its rows with them. */
	cr_assert_eq(
	    tdb_intf(c,
	             "SELECT count(*) FILTER (WHERE s.nodename = '%s') FROM citus_shards s "
	             "JOIN pg_dist_shard d USING (shardid) "
	             "JOIN pg_class t ON t.oid = s.table_name "
	             "WHERE t.relnamespace = 'cairn'::regnamespace "
	             "AND d.shardminvalue IS NOT NULL "
	             "AND hashint4(%" PRId64 ") BETWEEN d.shardminvalue::int "
	             "AND d.shardmaxvalue::int",
	             to, part),
	    (int64_t)NDIST);
	char *now_on = tdb_str(c, "SELECT nodename FROM citus_shards WHERE shardid = "
	                          "get_shard_id_for_distribution_column('cairn.runs', "
	                          "(SELECT part FROM cairn.runs WHERE key = 'k0'))");
	cr_assert_str_eq(now_on, to);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'move'"),
	             2 * nparts);
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.steps WHERE part = %" PRId64
	                      " AND run_id = %" PRId64,
	                      part, run),
	             1);
	/* And the foreign key holds there: a journal entry of no run is refused. */
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.steps (run_id, part, seq, name, kind, status) "
	         "VALUES (%" PRId64 ", %" PRId64 ", 0, 'a', 'step', 'completed')",
	         run + 65536 * 1000, part);
	PGresult *r = PQexec(c, sql);
	cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
	cr_assert(strstr(PQerrorMessage(c), "foreign key"), "%s", PQerrorMessage(c));
	PQclear(r);
	free(from);
	free(to);
	free(now_on);
	PQfinish(c);
}

/* One run in each part (so on both worker nodes), enqueued as the client
 * does (ST_ENQUEUE_VALUES), in workflow wf; the number of parts. */
static int64_t run_per_part(PGconn *c, const char *wf)
{
	exec_ok(c, "SET plan_cache_mode = force_generic_plan");
	char sql[4096];
	snprintf(sql, sizeof sql, "PREPARE enq AS %s", client_sql_enqueue_values());
	exec_ok(c, sql);
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	for (int shard = 0; shard < nparts; shard++) {
		snprintf(sql, sizeof sql,
		         "EXECUTE enq('%s', 'k%d', 'default', %d, '{}', 3, 0, NULL, NULL, NULL, "
		         "0, NULL, %" PRId64 ")",
		         wf, shard, shard,
		         tdb_intf(c, "SELECT key FROM cairn.parts WHERE part_no = %d %% %" PRId64,
		                  shard, nparts));
		exec_ok(c, sql);
	}
	return nparts;
}

/*
 * The client's signal and cancel name the part of their run, from its id
 * (client_run_part), and write the signal, the message and the signal
 * link there: on Citus the foreign keys on (run_id, part) refuse a row in
 * another part, so a signal to a run whose part's key was not 0 failed.
 * Their wake-up (cairn.wake_runs, migration 0025) reads the owner in the
 * part and notifies from the coordinator, where the relay listens: the
 * statement it replaced sent its notification on the worker node.
 */
Test(citus,
     a_signal_and_a_cancel_write_in_the_part_of_their_run_and_wake_its_owner_from_the_coordinator)
{
	const char *db = citus_db("signal_cancel");
	PGconn *c = citus_migrated(db);
	int64_t nparts = run_per_part(c, "sig");
	char *ids = tdb_str(c, "SELECT string_agg(id::text, ' ' ORDER BY id) FROM cairn.runs");
	/* The parts' keys are not all 0: the part matters. */
	cr_assert_gt(tdb_int(c, "SELECT count(*) FROM cairn.parts WHERE key <> 0"), 0);
	/* An idle runner owns the shards of the runs, in their parts. */
	int64_t owner = tdb_int(c, "INSERT INTO cairn.runners (name, address, version, groups, "
	                           "lease_pid, idle) VALUES ('w', 'a', 'v', '{default}', 1, true) "
	                           "RETURNING id");
	char sql[512];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.shard_leases (shard_group, shard, part, owner) "
	         "SELECT 'default', part_no, key, %" PRId64 " FROM cairn.parts",
	         owner);
	exec_ok(c, sql);
	PGconn *listener = wake_listener(db);
	char *save = NULL;
	int n = 0;
	for (char *id = strtok_r(ids, " ", &save); id; id = strtok_r(NULL, " ", &save), n++) {
		char *out = NULL, *err = NULL, want[64];
		cr_assert_eq(tcli(db, &out, &err, "signal", id, "go", "--input", "1", NULL), 0,
		             "signal %s: %s", id, err ? err : "");
		free(out);
		free(err);
		char *got = tdb_next_notification(listener, 30000);
		snprintf(want, sizeof want, "%" PRId64 " %s", owner, id);
		cr_assert(got, "no wake-up on the coordinator for the signal to run %s", id);
		cr_assert_str_eq(got, want);
		free(got);
		/* Half the cancels as if the run were older than migration 0025
		 * (its id carries no shard): the client reads its part. */
		exec_ok(c, n < nparts / 2
		               ? "UPDATE cairn.settings SET value = '0' "
		                 "WHERE name = 'first_placed_id'"
		               : "UPDATE cairn.settings SET value = '9223372036854775807' "
		                 "WHERE name = 'first_placed_id'");
		/* Started runs get the request and a cancel message; the others
		 * end at once. */
		if (n % 2)
			tdb_intf(c,
			         "UPDATE cairn.runs SET status = 'running', attempt = 1 "
			         "WHERE id = %s RETURNING 1",
			         id);
		cr_assert_eq(tcli(db, &out, &err, "cancel", id, NULL), 0, "cancel %s: %s", id,
		             err ? err : "");
		free(out);
		free(err);
		got = tdb_next_notification(listener, 30000);
		snprintf(want, sizeof want, "%" PRId64 CAIRN_WAKE_CANCEL " %s", owner, id);
		cr_assert(got, "no wake-up on the coordinator for the cancel of run %s", id);
		cr_assert_str_eq(got, want);
		free(got);
	}
	PQfinish(listener);
	cr_assert_eq(n, nparts);
	/* The reads of cairn.wake_runs and cairn.wake (migration 0025), with
	 * the values of a run: one task each, on the node of the part. */
	int64_t run = tdb_int(c, "SELECT max(id) FROM cairn.runs");
	int64_t part = tdb_intf(c, "SELECT part FROM cairn.runs WHERE id = %" PRId64, run);
	int shard = (int)(run % 65536);
	snprintf(sql, sizeof sql,
	         "SELECT r.id, r.shard_group, r.shard FROM cairn.runs r "
	         "WHERE r.part = %" PRId64 " AND r.id = ANY ('{%" PRId64 "}'::bigint[])",
	         part, run);
	char *plan = explain(c, sql);
	cr_assert_eq(task_count(plan), 1, "%s\n%s", sql, plan);
	cr_assert_eq(node_count(plan), 1, "%s\n%s", sql, plan);
	free(plan);
	snprintf(sql, sizeof sql,
	         "SELECT l.owner FROM cairn.shard_leases l "
	         "JOIN cairn.runners w ON w.id = l.owner AND (w.idle OR false) "
	         "WHERE l.part = %" PRId64 " AND l.shard_group = 'default' AND l.shard = %d",
	         part, shard);
	plan = explain(c, sql);
	cr_assert_eq(task_count(plan), 1, "%s\n%s", sql, plan);
	cr_assert_eq(node_count(plan), 1, "%s\n%s", sql, plan);
	free(plan);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.signals g JOIN cairn.runs r "
	                        "ON r.id = g.run_id AND r.part = g.part WHERE g.name = 'go'"),
	             nparts);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE status = 'cancelled'"),
	             (nparts + 1) / 2);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE cancel_requested"), nparts);
	/* The started runs keep a signal and a cancel message each, in their
	 * parts; the cancelled ones none. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages m JOIN cairn.runs r "
	                        "ON r.id = m.run_id AND r.part = m.part"),
	             2 * (nparts / 2));
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages"), 2 * (nparts / 2));
	free(ids);
	PQfinish(c);
}

/*
 * The group commit writes every row in the part of its run: the journal,
 * messages (a sleep's timer, a child's signal to its parent), signals,
 * events and the parent's child_waits row take the part of the fence's
 * lease row (shard_leases.part), a child's signal and message its parent's
 * row's. On Citus a row in another part than its run's breaks the foreign
 * keys on (run_id, part); before, these inserts named no part and wrote 0.
 * The claim does not run on Citus yet (docs/architecture.md, "On Citus"),
 * so a real worker runs here on one server whose cairn.parts has two parts
 * (keys 0 and 7, as `cairn migrate --citus` gives keys): the runs of odd
 * shards live in part 7, and every row the commit wrote for them must say
 * so.
 */
Test(citus, the_commit_writes_steps_messages_signals_events_and_child_waits_in_their_runs_part)
{
	tflows_env e;
	tflows_setup(&e, 8);
	/* As `cairn migrate --citus` changes the parts: cairn.part_of with them
	 * (migration 0031). */
	tdb_exec(e.c, "INSERT INTO cairn.parts (part_no, key) VALUES (1, 7)");
	tdb_exec(e.c, "SELECT cairn.define_part_of()");
	/* A client that reads the two parts (the setup's read one). */
	cairn_client_free(e.cl);
	cr_assert_eq(cairn_client_open(e.db, &e.cl), CAIRN_OK);
	char plugins[1100], log[64];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(log);
	int port;
	pid_t w = tworker_start(e.db, &port, log, "CAIRN_POLL_INTERVAL=5s", plugins, NULL);
	tlive_add(w);
	cr_assert(thttp_wait(port, "/readyz", 200, 20000), "worker never ready; log in %s", log);
	/* Steps and a durable sleep; events and a signal; a child, a signal
	 * and the wait for the child. */
	static const char *const RUNS[][2] = {
	    {"t.spread", "{}"},
	    {"t.progress", "{}"},
	    {"t.parent", "{\"child\": \"t.spread\", \"input\": {}}"},
	};
	enum { EACH = 6 };
	int64_t waiting[2 * EACH];
	int nw = 0;
	for (size_t k = 0; k < sizeof RUNS / sizeof *RUNS; k++)
		for (int i = 0; i < EACH; i++) {
			/* Keys of its own, so that the runs' parts (their keys'
			 * shards) are the same at every run of the test. */
			char key[64];
			snprintf(key, sizeof key, "%s-%d", RUNS[k][0], i);
			cairn_enqueue_opts o = {.input = RUNS[k][1], .key = key};
			cairn_enqueued r;
			cr_assert_eq(cairn_enqueue(e.cl, RUNS[k][0], &o, &r), CAIRN_OK, "%s",
			             cairn_client_errmsg(e.cl));
			cairn_enqueued_clear(&r);
			if (k > 0)
				waiting[nw++] = r.id;
		}
	/* Both parts hold runs of each workflow (the parents' child_waits
	 * rows are in their parts). */
	for (size_t k = 0; k < sizeof RUNS / sizeof *RUNS; k++)
		for (int part = 0; part <= 7; part += 7)
			cr_assert_gt(tdb_intf(e.c,
			                      "SELECT count(*) FROM cairn.runs "
			                      "WHERE part = %d AND workflow = '%s'",
			                      part, RUNS[k][0]),
			             0, "no run of %s in part %d", RUNS[k][0], part);
	cr_assert(tdb_wait_at_least(e.c,
	                            "SELECT count(*) FROM cairn.runs "
	                            "WHERE workflow IN ('t.progress', 't.parent') "
	                            "AND status = 'waiting'",
	                            2 * EACH, 30000),
	          "the runs never waited for their signal; log in %s", log);
	for (int i = 0; i < nw; i++)
		cr_assert_eq(cairn_signal(e.cl, waiting[i], "go", "1"), CAIRN_OK, "%s",
		             cairn_client_errmsg(e.cl));
	cr_assert(tdb_wait_at_least(e.c,
	                            "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                            4 * EACH, 60000),
	          "the runs never all completed; log in %s", log);
	/* Every row in its run's part, rows in both parts. */
	static const char *const TABLES[] = {"steps", "messages", "signals", "events",
	                                     "child_waits"};
	for (size_t i = 0; i < sizeof TABLES / sizeof *TABLES; i++)
		cr_assert_eq(tdb_intf(e.c,
		                      "SELECT count(*) FROM cairn.%s t JOIN cairn.runs r "
		                      "ON r.id = t.run_id WHERE t.part <> r.part",
		                      TABLES[i]),
		             0, "cairn.%s has rows outside their run's part", TABLES[i]);
	static const char *const WRITTEN[] = {"steps", "signals", "events", "child_waits"};
	for (size_t i = 0; i < sizeof WRITTEN / sizeof *WRITTEN; i++)
		cr_assert_gt(
		    tdb_intf(e.c, "SELECT count(*) FROM cairn.%s WHERE part = 7", WRITTEN[i]), 0,
		    "no row of cairn.%s in part 7", WRITTEN[i]);
	/* The sleeps' timers were in part 7 too (deleted as delivered). */
	cr_assert_gt(tdb_int(e.c, "SELECT count(*) FROM cairn.steps s JOIN cairn.runs r "
	                          "ON r.id = s.run_id WHERE r.part = 7 AND s.kind = 'sleep'"),
	             0);
	int rc = tworker_stop(w, SIGTERM, 15000);
	tlive_del(w);
	cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, log);
	unlink(log);
	tflows_teardown(&e);
}

/*
 * `cairn enqueue` on a distributed database: a CLI process has no route
 * cached, and its first enqueue was ST_ENQUEUE (cairn.route in a CTE of
 * the insert), which Citus cannot plan; the client read that failure as
 * "the database has no cairn schema". With parts, the client routes first,
 * in a statement of its own, and inserts by the router statement: every
 * run lands in the part of its shard, on both nodes, and the same key
 * again is the run that exists.
 */
Test(citus, cairn_enqueue_on_a_distributed_database_stores_each_run_in_its_part)
{
	const char *db = citus_db("cli_enqueue");
	PGconn *c = citus_migrated(db);
	/* An idle runner owns every shard in its part; it hears each new run
	 * from the coordinator, where the relay listens. */
	int64_t owner = tdb_int(c, "INSERT INTO cairn.runners (name, address, version, groups, "
	                           "lease_pid, idle) VALUES ('w', 'a', 'v', '{default}', 1, true) "
	                           "RETURNING id");
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	char sql[768];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.shard_leases (shard_group, shard, part, owner) "
	         "SELECT 'default', s, p.key, %" PRId64 " "
	         "FROM generate_series(0, (SELECT value::int - 1 FROM cairn.settings "
	         "                         WHERE name = 'shards_per_group')) s "
	         "JOIN cairn.parts p ON p.part_no = s %% %" PRId64,
	         owner, nparts);
	exec_ok(c, sql);
	PGconn *listener = wake_listener(db);
	enum { N = 24 };
	int64_t first = 0;
	for (int i = 0; i < N; i++) {
		char key[32], *out = NULL, *err = NULL;
		snprintf(key, sizeof key, "k%d", i);
		int rc = tcli(db, &out, &err, "enqueue", "cli.wf", "--key", key, "--json", NULL);
		cr_assert_eq(rc, 0, "cairn enqueue --key %s: %s", key, err ? err : "");
		cJSON *j = cJSON_Parse(out);
		cJSON *id = cJSON_GetObjectItem(j, "id");
		cr_assert(cJSON_IsNumber(id), "%s", out);
		cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "existed")), "%s", out);
		if (!i)
			first = (int64_t)id->valuedouble;
		char want[64], *got = tdb_next_notification(listener, 30000);
		snprintf(want, sizeof want, "%" PRId64 " %" PRId64, owner,
		         (int64_t)id->valuedouble);
		cr_assert(got, "no wake-up on the coordinator for run %s", key);
		cr_assert_str_eq(got, want);
		free(got);
		cJSON_Delete(j);
		free(out);
		free(err);
	}
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'cli.wf'"), N);
	/* Each in the part of its shard, the shard its id carries. */
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs r JOIN cairn.parts p "
	                      "ON p.part_no = r.shard %% %" PRId64 " AND p.key = r.part "
	                      "WHERE r.workflow = 'cli.wf' AND r.id %% 65536 = r.shard",
	                      nparts),
	             N);
	/* The parts of those runs lie on both worker nodes. */
	cr_assert_eq(tdb_int(c, "WITH p AS MATERIALIZED (SELECT DISTINCT part FROM cairn.runs "
	                        "                        WHERE workflow = 'cli.wf') "
	                        "SELECT count(DISTINCT s.nodename || s.nodeport) "
	                        "FROM p, citus_shards s "
	                        "WHERE s.table_name = 'cairn.runs'::regclass "
	                        "  AND s.shardid = get_shard_id_for_distribution_column("
	                        "        'cairn.runs', p.part)"),
	             2);
	/* The same key again: the run that exists. */
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "cli.wf", "--key", "k0", "--json", NULL), 0,
	             "%s", err ? err : "");
	cJSON *j = cJSON_Parse(out);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "existed")), "%s", out);
	cr_assert_eq((int64_t)cJSON_GetObjectItem(j, "id")->valuedouble, first, "%s", out);
	cJSON_Delete(j);
	free(out);
	free(err);
	PQfinish(listener);
	PQfinish(c);
}

/* An idle runner that owns every shard of group default, each lease row in
 * the part of its shard: its id. */
static int64_t own_every_shard(PGconn *c)
{
	int64_t owner = tdb_int(c, "INSERT INTO cairn.runners (name, address, version, groups, "
	                           "lease_pid, idle) VALUES ('w', 'a', 'v', '{default}', 1, true) "
	                           "RETURNING id");
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	char sql[768];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.shard_leases (shard_group, shard, part, owner) "
	         "SELECT 'default', s, p.key, %" PRId64 " "
	         "FROM generate_series(0, (SELECT value::int - 1 FROM cairn.settings "
	         "                         WHERE name = 'shards_per_group')) s "
	         "JOIN cairn.parts p ON p.part_no = s %% %" PRId64,
	         owner, nparts);
	exec_ok(c, sql);
	return owner;
}

/* How many runs of workflow wf are in the part of their shard (the shard
 * their id carries), and over how many worker nodes those parts lie. */
static int64_t runs_in_their_part(PGconn *c, const char *wf)
{
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	return tdb_intf(c,
	                "SELECT count(*) FROM cairn.runs r JOIN cairn.parts p "
	                "ON p.part_no = r.shard %% %" PRId64 " AND p.key = r.part "
	                "WHERE r.workflow = '%s' AND r.id %% 65536 = r.shard",
	                nparts, wf);
}


/* Runs `cairn ARGS...` on db, which must exit with want: its output
 * (caller frees). */
static char *cli_out(const char *db, int want, const char *const *argv)
{
	char *out = NULL, *err = NULL;
	int rc = tcli_argv(db, &out, &err, argv);
	cr_assert_eq(rc, want, "cairn %s: exit %d, want %d: %s", argv[0], rc, want, err ? err : "");
	free(err);
	return out ? out : strdup("");
}

/* How many worker nodes hold the parts of the runs that cond (SQL, of
 * cairn.runs) selects. */
static int64_t nodes_of_runs(PGconn *c, const char *cond)
{
	return tdb_intf(c,
	                "WITH p AS MATERIALIZED (SELECT DISTINCT part FROM cairn.runs WHERE %s) "
	                "SELECT count(DISTINCT s.nodename || s.nodeport) "
	                "FROM p, citus_shards s "
	                "WHERE s.table_name = 'cairn.runs'::regclass "
	                "  AND s.shardid = get_shard_id_for_distribution_column("
	                "        'cairn.runs', p.part)",
	                cond);
}

/*
 * The SQL API's cairn.enqueue inside an application's transaction on the
 * coordinator: it routed by cairn.route, a SQL function that reads
 * cairn.workflows, which Citus refused ("parameterized queries for SQL
 * functions referencing distributed tables are not supported"); since
 * migration 0028 cairn.route is PL/pgSQL. Each run lands in the part of
 * its shard (a concurrency key's: the key's), on both nodes; its owner
 * hears of it from the coordinator when the application commits, and
 * nothing of a transaction rolled back.
 */
Test(citus, the_sql_api_enqueue_in_an_application_transaction_stores_runs_in_their_parts)
{
	const char *db = citus_db("sql_enqueue");
	PGconn *c = citus_migrated(db);
	int64_t owner = own_every_shard(c);
	/* The application's own table, on the coordinator. */
	exec_ok(c, "CREATE TABLE public.orders (id int PRIMARY KEY)");
	PGconn *listener = wake_listener(db);
	/* Rolled back: no run, no wake-up. */
	exec_ok(c, "BEGIN");
	exec_ok(c, "INSERT INTO public.orders VALUES (0)");
	exec_ok(c, "SELECT * FROM cairn.enqueue('sql.wf', '{}'::jsonb, key => 'gone')");
	exec_ok(c, "ROLLBACK");
	enum { N = 16 };
	exec_ok(c, "BEGIN");
	exec_ok(c, "INSERT INTO public.orders VALUES (1)");
	int64_t ids[N];
	for (int i = 0; i < N; i++) {
		char sql[256];
		/* Every fourth with a concurrency key: in the key's part. */
		snprintf(
		    sql, sizeof sql,
		    "SELECT id FROM cairn.enqueue('sql.wf', '{\"n\": %d}'::jsonb, key => 'k%d', "
		    "concurrency_key => %s) WHERE NOT existed",
		    i, i, i % 4 == 0 ? "'ck'" : "NULL");
		ids[i] = tdb_int(c, sql);
	}
	/* The same key again in the transaction: the run it made. */
	cr_assert_eq(tdb_int(c, "SELECT id FROM cairn.enqueue('sql.wf', '{}'::jsonb, key => 'k1') "
	                        "WHERE existed"),
	             ids[1]);
	exec_ok(c, "COMMIT");
	/* An owner is named with the first run it is woken for in a
	 * transaction (cairn.wake); the rolled back one sent nothing. */
	char want[64], *got = tdb_next_notification(listener, 30000);
	snprintf(want, sizeof want, "%" PRId64 " %" PRId64, owner, ids[0]);
	cr_assert(got, "no wake-up on the coordinator for the application's runs");
	cr_assert_str_eq(got, want);
	free(got);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE key = 'gone'"), 0);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'sql.wf'"), N);
	cr_assert_eq(runs_in_their_part(c, "sql.wf"), N);
	cr_assert_eq(nodes_of_runs(c, "workflow = 'sql.wf'"), 2);
	/* The runs of the concurrency key share its part. */
	cr_assert_eq(tdb_int(c, "SELECT count(DISTINCT part) FROM cairn.runs "
	                        "WHERE concurrency_key = 'ck'"),
	             1);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE concurrency_key = 'ck' "
	                        "AND part = (SELECT key FROM cairn.parts WHERE part_no = "
	                        "  cairn.shard_of('ck') % (SELECT count(*) FROM cairn.parts))"),
	             N / 4);
	PQfinish(listener);
	PQfinish(c);
}

/*
 * The batch (cairn_enqueue_batch) on a distributed database: new runs,
 * then the same keys again (the batch that finds existing runs), each run
 * in the part of its shard on both nodes, and the owner woken from the
 * coordinator.
 */
Test(citus, the_batch_enqueue_stores_each_run_in_its_part_and_wakes_from_the_coordinator)
{
	const char *db = citus_db("batch_enqueue");
	PGconn *c = citus_migrated(db);
	int64_t owner = own_every_shard(c);
	PGconn *listener = wake_listener(db);
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	enum { N = 40 };
	cairn_enqueue_opts o[N];
	char keys[N][16];
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof keys[i], "b%d", i);
		/* Every fifth with a concurrency key: counted in its part. */
		o[i] = (cairn_enqueue_opts){
		    .key = keys[i], .input = "{}", .concurrency_key = i % 5 ? NULL : "bk"};
	}
	cairn_enqueued out[N], again[N];
	cr_assert_eq(cairn_enqueue_batch(cl, "batch.wf", N, o, out), CAIRN_OK, "%s",
	             cairn_client_errmsg(cl));
	char *got = tdb_next_notification(listener, 30000);
	cr_assert(got, "no wake-up on the coordinator for the batch");
	char want[64];
	snprintf(want, sizeof want, "%" PRId64 " ", owner);
	cr_assert(strncmp(got, want, strlen(want)) == 0, "%s", got);
	free(got);
	cr_assert_eq(runs_in_their_part(c, "batch.wf"), N);
	cr_assert_eq(nodes_of_runs(c, "workflow = 'batch.wf'"), 2);
	cr_assert_eq(tdb_int(c, "SELECT count(DISTINCT part) FROM cairn.runs "
	                        "WHERE concurrency_key = 'bk' AND NOT held"),
	             1);
	/* Each id is the run of its key (the batch's rows back in input order). */
	for (int i = 0; i < N; i++)
		cr_assert_eq(tdb_intf(c, "SELECT id FROM cairn.runs WHERE key = '%s'", keys[i]),
		             out[i].id, "run %d", i);
	/* Again, with one new key: the existing runs, and the new one. */
	o[N - 1].key = "b-new";
	cr_assert_eq(cairn_enqueue_batch(cl, "batch.wf", N, o, again), CAIRN_OK, "%s",
	             cairn_client_errmsg(cl));
	for (int i = 0; i < N - 1; i++) {
		cr_assert(again[i].existed, "run %d", i);
		cr_assert_eq(again[i].id, out[i].id, "run %d", i);
	}
	cr_assert(!again[N - 1].existed);
	cr_assert_eq(runs_in_their_part(c, "batch.wf"), N + 1);
	cairn_client_free(cl);
	PQfinish(listener);
	PQfinish(c);
}

/*
 * The client's enqueue with a concurrency key on a distributed database:
 * the run in the part of the key's shard (every run of the key in one
 * part), its key's active runs counted there (cairn.flow_active_in,
 * migration 0028, one task on the node of the part), the run's owner
 * woken from the coordinator; a run held over its key's limit, and let go
 * by cairn.flow_release once a slot frees.
 */
Test(citus, an_enqueue_with_a_concurrency_key_stores_the_run_in_the_part_of_its_key)
{
	const char *db = citus_db("key_enqueue");
	PGconn *c = citus_migrated(db);
	int64_t owner = own_every_shard(c);
	PGconn *listener = wake_listener(db);
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	static const char *const CKEYS[] = {"alpha", "beta", "gamma", "delta"};
	enum { EACH = 3 };
	for (size_t k = 0; k < sizeof CKEYS / sizeof *CKEYS; k++)
		for (int i = 0; i < EACH; i++) {
			char key[32];
			snprintf(key, sizeof key, "%s-%d", CKEYS[k], i);
			cairn_enqueue_opts o = {.key = key, .concurrency_key = CKEYS[k]};
			cairn_enqueued r;
			cr_assert_eq(cairn_enqueue(cl, "key.wf", &o, &r), CAIRN_OK, "%s",
			             cairn_client_errmsg(cl));
			cr_assert(!r.existed && !r.held);
			char want[64], *got = tdb_next_notification(listener, 30000);
			snprintf(want, sizeof want, "%" PRId64 " %" PRId64, owner, r.id);
			cr_assert(got, "no wake-up on the coordinator for %s", key);
			cr_assert_str_eq(got, want);
			free(got);
			cairn_enqueued_clear(&r);
		}
	int64_t n = (int64_t)(EACH * (sizeof CKEYS / sizeof *CKEYS));
	cr_assert_eq(runs_in_their_part(c, "key.wf"), n);
	/* Each key's runs in the part of the key's shard. */
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs r JOIN cairn.parts p "
	                      "ON p.key = r.part AND p.part_no = cairn.shard_of(r.concurrency_key, "
	                      "  %d) %% %" PRId64 " WHERE r.workflow = 'key.wf'",
	                      (int)tdb_int(c, "SELECT value::int FROM cairn.settings "
	                                      "WHERE name = 'shards_per_group'"),
	                      tdb_int(c, "SELECT count(*) FROM cairn.parts")),
	             n);
	cr_assert_eq(nodes_of_runs(c, "workflow = 'key.wf'"), 2);
	/* The count of a key's active runs: one task on the node of its part. */
	char sql[512];
	snprintf(
	    sql, sizeof sql,
	    "SELECT count(*)::integer FROM cairn.runs WHERE part = %" PRId64 " "
	    "AND workflow = 'key.wf' AND concurrency_key = 'alpha' AND finished_at IS NULL "
	    "AND NOT held AND (status = 'running' OR (status = 'pending' AND start_at <= now()))",
	    tdb_int(c, "SELECT part FROM cairn.runs WHERE concurrency_key = 'alpha' LIMIT 1"));
	char *plan = explain(c, sql);
	cr_assert_eq(task_count(plan), 1, "%s\n%s", sql, plan);
	cr_assert_eq(node_count(plan), 1, "%s\n%s", sql, plan);
	free(plan);
	cr_assert_eq(tdb_intf(c, "SELECT cairn.flow_active_in(%" PRId64 ", 'key.wf', 'alpha')",
	                      tdb_int(c, "SELECT part FROM cairn.runs "
	                                 "WHERE concurrency_key = 'alpha' LIMIT 1")),
	             EACH);
	/* The client's insert of a run with a concurrency key, held as the
	 * count before it said (client_sql_enqueue_held), prepared as a
	 * client's session prepares it: one task on the node of the key's
	 * part, a generic plan. */
	exec_ok(c, "SET plan_cache_mode = force_generic_plan");
	char prep[4096];
	snprintf(prep, sizeof prep, "PREPARE held AS %s", client_sql_enqueue_held());
	exec_ok(c, prep);
	snprintf(sql, sizeof sql,
	         "EXECUTE held('key.wf', 'alpha-held', 'default', %" PRId64 ", '{}', 3, 0, NULL, "
	         "NULL, 'alpha', 0, NULL, %" PRId64 ", true)",
	         tdb_int(c, "SELECT shard FROM cairn.runs WHERE concurrency_key = 'alpha' LIMIT 1"),
	         tdb_int(c, "SELECT part FROM cairn.runs WHERE concurrency_key = 'alpha' LIMIT 1"));
	plan = explain(c, sql);
	cr_assert_eq(task_count(plan), 1, "%s\n%s", sql, plan);
	cr_assert_eq(node_count(plan), 1, "%s\n%s", sql, plan);
	cr_assert_null(strstr(plan, "pull to coordinator"), "%s", plan);
	free(plan);
	exec_ok(c, sql);
	exec_ok(c, "RESET plan_cache_mode");
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE key = 'alpha-held' "
	                        "AND held AND start_at IS NULL"),
	             1);
	exec_ok(c, "DELETE FROM cairn.runs WHERE key = 'alpha-held'");
	/* Over the key's limit the run is held, and the release that follows
	 * the enqueue (cairn.flow_release, migration 0028: in the key's part)
	 * runs; once a slot frees, the release lets it go. */
	exec_ok(c, "INSERT INTO cairn.limits (workflow, key_concurrency) VALUES ('held.wf', 1)");
	int64_t ids[2];
	for (int i = 0; i < 2; i++) {
		char key[16];
		snprintf(key, sizeof key, "h%d", i);
		cairn_enqueue_opts o = {.key = key, .concurrency_key = "zeta"};
		cairn_enqueued r;
		cr_assert_eq(cairn_enqueue(cl, "held.wf", &o, &r), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
		cr_assert_eq(r.held, i == 1, "run %d", i);
		ids[i] = r.id;
		cairn_enqueued_clear(&r);
	}
	tdb_intf(c,
	         "UPDATE cairn.runs SET status = 'completed', finished_at = now(), start_at = NULL "
	         "WHERE id = %" PRId64 " RETURNING 1",
	         ids[0]);
	cr_assert_eq(tdb_int(c, "SELECT cardinality(cairn.flow_release('held.wf', 'zeta'))"), 1);
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                      " AND NOT held AND start_at IS NOT NULL",
	                      ids[1]),
	             1);
	cairn_client_free(cl);
	PQfinish(listener);
	PQfinish(c);
}

/* One side of a race: a client of its own enqueues keys race-0 to race-19
 * in order, with concurrency key ckey; ids, what it was told of each. */
typedef struct key_racer {
	const char *db, *ckey;
	int64_t ids[20];
} key_racer;

static void *race_keys(void *arg)
{
	key_racer *k = arg;
	cairn_client *cl;
	if (cairn_client_open(k->db, &cl) != CAIRN_OK)
		return NULL;
	for (int i = 0; i < 20; i++) {
		char key[24];
		snprintf(key, sizeof key, "race-%d", i);
		cairn_enqueue_opts o = {.key = key, .concurrency_key = k->ckey};
		cairn_enqueued r = {0};
		if (cairn_enqueue(cl, "key.wf", &o, &r) == CAIRN_OK)
			k->ids[i] = r.id;
		cairn_enqueued_clear(&r);
	}
	cairn_client_free(cl);
	return NULL;
}

/*
 * A run lives in the part of its concurrency key when it has one, so the
 * same (workflow, key) with two concurrency keys, or with one and without,
 * would be two runs in two parts: runs' unique key includes the part.
 * cairn.run_keys (migration 0038) holds each key in the part of the key,
 * and every enqueue finds the run that holds it: the client's single and
 * batch enqueue, the SQL API's, and two clients racing with the same keys.
 */
Test(citus, a_key_names_one_run_across_parts_whatever_its_concurrency_key)
{
	const char *db = citus_db("run_keys");
	PGconn *c = citus_migrated(db);
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	char ck1[16], ck2[16];
	key_elsewhere(c, "dup", NULL, ck1, sizeof ck1);
	key_elsewhere(c, "dup", ck1, ck2, sizeof ck2);
	/* With a concurrency key first, then another, then none. */
	cairn_enqueued r;
	cairn_enqueue_opts first = {.key = "dup", .concurrency_key = ck1};
	cr_assert_eq(cairn_enqueue(cl, "key.wf", &first, &r), CAIRN_OK, "%s",
	             cairn_client_errmsg(cl));
	cr_assert(!r.existed);
	int64_t id = r.id;
	cairn_enqueued_clear(&r);
	cr_assert_eq(tdb_intf(c, "SELECT part FROM cairn.runs WHERE id = %" PRId64, id),
	             part_of_key(c, ck1));
	const char *again[] = {ck2, NULL};
	for (size_t i = 0; i < 2; i++) {
		cairn_enqueue_opts o = {.key = "dup", .concurrency_key = again[i]};
		cr_assert_eq(cairn_enqueue(cl, "key.wf", &o, &r), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
		cr_assert(r.existed, "concurrency key %s", again[i] ? again[i] : "(none)");
		cr_assert_eq(r.id, id);
		cairn_enqueued_clear(&r);
	}
	/* Without one first (the run in the key's part), then with one. */
	cairn_enqueue_opts plain = {.key = "dup.plain"};
	cr_assert_eq(cairn_enqueue(cl, "key.wf", &plain, &r), CAIRN_OK);
	int64_t plain_id = r.id;
	cairn_enqueued_clear(&r);
	char ck3[16];
	key_elsewhere(c, "dup.plain", NULL, ck3, sizeof ck3);
	cairn_enqueue_opts later = {.key = "dup.plain", .concurrency_key = ck3};
	cr_assert_eq(cairn_enqueue(cl, "key.wf", &later, &r), CAIRN_OK);
	cr_assert(r.existed);
	cr_assert_eq(r.id, plain_id);
	cairn_enqueued_clear(&r);
	/* A batch: a key that exists (with another concurrency key) and a new
	 * one; the batch goes run by run and finds the first. */
	cairn_enqueue_opts batch[] = {{.key = "dup", .concurrency_key = ck3},
	                              {.key = "dup.new", .concurrency_key = ck1}};
	cairn_enqueued out[2];
	cr_assert_eq(cairn_enqueue_batch(cl, "key.wf", 2, batch, out), CAIRN_OK, "%s",
	             cairn_client_errmsg(cl));
	cr_assert(out[0].existed);
	cr_assert_eq(out[0].id, id);
	cr_assert(!out[1].existed);
	for (int i = 0; i < 2; i++)
		cairn_enqueued_clear(&out[i]);
	/* The SQL API, inside a transaction: the key's run, and a new key
	 * whose run the client then finds without a concurrency key. */
	exec_ok(c, "BEGIN");
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT id FROM cairn.enqueue('key.wf', key => 'dup', concurrency_key => '%s') "
	         "WHERE existed",
	         ck2);
	cr_assert_eq(tdb_int(c, sql), id);
	snprintf(
	    sql, sizeof sql,
	    "SELECT id FROM cairn.enqueue('key.wf', key => 'dup.sql', concurrency_key => '%s') "
	    "WHERE NOT existed",
	    ck2);
	int64_t sql_id = tdb_int(c, sql);
	exec_ok(c, "COMMIT");
	cairn_enqueue_opts bare = {.key = "dup.sql"};
	cr_assert_eq(cairn_enqueue(cl, "key.wf", &bare, &r), CAIRN_OK);
	cr_assert(r.existed);
	cr_assert_eq(r.id, sql_id);
	cairn_enqueued_clear(&r);
	/* Two clients race on twenty keys, each with its own concurrency key
	 * (in two parts): one run per key, which both were told. */
	key_racer racers[2] = {{.db = db, .ckey = ck1}, {.db = db, .ckey = ck2}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, race_keys, &racers[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 20; i++) {
		cr_assert_gt(racers[0].ids[i], 0, "race-%d", i);
		cr_assert_eq(racers[0].ids[i], racers[1].ids[i], "race-%d", i);
	}
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE key LIKE 'race-%'"), 20);
	/* One run per key, each key in run_keys once, in the part of the key. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) - count(DISTINCT key) FROM cairn.runs "
	                        "WHERE workflow = 'key.wf'"),
	             0);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.run_keys WHERE workflow = 'key.wf'"),
	             tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'key.wf'"));
	cr_assert_eq(tdb_intf(c,
	                      "SELECT run_id FROM cairn.run_keys WHERE part = %" PRId64
	                      " AND workflow = 'key.wf' AND key = 'dup'",
	                      part_of_key(c, "dup")),
	             id);
	cairn_client_free(cl);
	PQfinish(c);
}

/*
 * cairn.children_sync (migration 0021; 0028) on the cluster: a parent in a
 * part on the second worker node waits for two children in other parts,
 * and each child's end counts its wait down. It wrote child_waits and
 * child_awaited in part 0 (which the foreign key on (run_id, part)
 * refuses for a parent elsewhere) and locked child_waits with no filter on
 * the part (which Citus refuses: "could not run distributed query with
 * FOR UPDATE/SHARE commands"); now each row is in the parent's part and
 * each statement names it.
 */
Test(citus, children_sync_writes_a_parents_wait_in_its_part_on_the_second_node)
{
	const char *db = citus_db("children_sync");
	PGconn *c = citus_migrated(db);
	/* The first part on the second node (w2), and two parts on the first. */
	int64_t pn = tdb_int(c, "SELECT p.part_no FROM cairn.parts p JOIN citus_shards s "
	                        "ON s.shardid = get_shard_id_for_distribution_column("
	                        "     'cairn.runs', p.key) "
	                        "WHERE s.table_name = 'cairn.runs'::regclass "
	                        "  AND s.nodename LIKE '%/w2' ORDER BY p.part_no LIMIT 1");
	int64_t cn[2];
	for (int i = 0; i < 2; i++)
		cn[i] =
		    tdb_intf(c,
		             "SELECT p.part_no FROM cairn.parts p JOIN citus_shards s "
		             "ON s.shardid = get_shard_id_for_distribution_column("
		             "     'cairn.runs', p.key) "
		             "WHERE s.table_name = 'cairn.runs'::regclass "
		             "  AND s.nodename LIKE '%%/w1' ORDER BY p.part_no OFFSET %d LIMIT 1",
		             i);
	int64_t parent = 900 * 65536 + pn, kid[2] = {901 * 65536 + cn[0], 902 * 65536 + cn[1]};
	int64_t ppart = tdb_intf(c, "SELECT key FROM cairn.parts WHERE part_no = %" PRId64, pn);
	char sql[1024];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, input, "
	         "  max_attempts, scheduled_at, start_at, parent_id) "
	         "SELECT x.id, p.key, 'cs', 'r' || x.id, 'default', x.s, '{}', 3, now(), now(), "
	         "  nullif(%" PRId64 ", x.id) "
	         "FROM (VALUES (%" PRId64 "::bigint, %" PRId64 "::int), (%" PRId64 ", %" PRId64
	         "), (%" PRId64 ", %" PRId64 ")) x(id, s) "
	         "JOIN cairn.parts p ON p.part_no = x.s",
	         parent, parent, pn, kid[0], cn[0], kid[1], cn[1]);
	exec_ok(c, sql);
	/* The parent suspends in a wait (seq 3) for both children. */
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM cairn.children_sync('{%" PRId64 "}', '{%" PRId64 "}', "
	         "'{3}', '{2}', '{%" PRId64 ",%" PRId64 "}', '{%" PRId64 ",%" PRId64 "}', "
	         "'{}', '{}', '{}')",
	         parent, parent, parent, parent, kid[0], kid[1]);
	cr_assert_eq(tdb_int(c, sql), 0, "the wait is not met yet");
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.child_waits WHERE run_id = %" PRId64
	                      " AND part = %" PRId64 " AND seq = 3 AND need = 2",
	                      parent, ppart),
	             1);
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.child_awaited WHERE run_id = %" PRId64
	                      " AND part = %" PRId64 " AND seq = 3",
	                      parent, ppart),
	             2);
	/* Each child ends: the first counts the wait down, the second meets
	 * it, and the parent is the run to wake. */
	for (int i = 0; i < 2; i++) {
		snprintf(
		    sql, sizeof sql,
		    "SELECT coalesce(max(w), 0) FROM cairn.children_sync('{%" PRId64 "}', '{}', "
		    "'{}', '{}', '{}', '{}', '{%" PRId64 "}', '{%" PRId64 "}', '{%" PRId64 "}') w",
		    kid[i], kid[i], kid[i], parent);
		cr_assert_eq(tdb_int(c, sql), i ? parent : 0, "end of child %d", i);
		cr_assert_eq(tdb_intf(c,
		                      "SELECT need FROM cairn.child_waits WHERE run_id = %" PRId64
		                      " AND part = %" PRId64,
		                      parent, ppart),
		             1 - i);
	}
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.child_awaited"), 0);
	cr_assert_eq(
	    tdb_intf(c, "SELECT count(*) FROM cairn.child_waits WHERE part <> %" PRId64, ppart), 0);
	PQfinish(c);
}

/*
 * A real cairn-worker on a distributed database: it claims each part it
 * owns shards in with a statement of that part (one task on the node of
 * the part), writes each part's commits with a statement fenced in that
 * part, and hears of its work from the coordinator. Runs spread over every
 * part, so over both worker nodes: steps and a durable sleep (t.spread),
 * events and a signal sent by the CLI (t.progress). Every run completes,
 * and no step ran twice: t_hits has one row per step of each run
 * (step_hit writes one each time it runs). A child is not among them yet
 * (docs/architecture.md, "On Citus").
 */
/*
 * The SQL API's signal, cancel and retry, and the wait for an event, on runs
 * of every part: each reads and locks its run in its part (cairn.run_part,
 * migration 0033), where a lock by the run's id alone was refused and
 * cairn.chain_last, an SQL function, was not planned at all.
 */
/* A notice receiver: the nodes that the remote commands Citus logs
 * (citus.log_remote_commands) were sent to, into the buf arg, each once,
 * one a line. */
static void remote_nodes(void *arg, const PGresult *r)
{
	const char *d = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL), *at, *colon;
	if (!d || strncmp(d, "on server ", 10) != 0 || !(at = strchr(d, '@')) ||
	    !(colon = strchr(at, ':')))
		return;
	buf *nodes = arg, line = BUF_INIT;
	buf_append(&line, at + 1, (size_t)(colon - at - 1));
	buf_puts(&line, "\n");
	if (!nodes->len || !strstr(buf_str(nodes), buf_str(&line)))
		buf_puts(nodes, buf_str(&line));
	buf_free(&line);
}

/* The node that holds run id's part, newline-terminated (caller frees). */
static char *node_of_run(PGconn *c, int64_t id)
{
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT nodename || E'\\n' FROM citus_shards WHERE shardid = "
	         "get_shard_id_for_distribution_column('cairn.runs', cairn.run_part(%" PRId64 "))",
	         id);
	return tdb_str(c, sql);
}

/*
 * The SQL API's calls inside an application's transaction run on the
 * coordinator (not delegated), and each of their statements is routed:
 * every remote command of a transaction that enqueues, signals or cancels
 * one run goes to the node of the run's part, and to no other (the
 * reference tables they read have a copy on the coordinator).
 */
Test(citus, the_sql_apis_signal_cancel_and_retry_and_the_event_read_find_runs_in_their_part)
{
	const char *db = citus_db("sql_api_acts");
	PGconn *c = citus_migrated(db);
	cairn_client *cl = NULL;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	enum { N = 24 };
	int64_t ids[N];
	for (int i = 0; i < N; i++) {
		cairn_enqueue_opts o = {.input = "{}", .delay_ms = 3600000};
		cairn_enqueued r;
		cr_assert_eq(cairn_enqueue(cl, "acts.wf", &o, &r), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
		ids[i] = r.id;
		cairn_enqueued_clear(&r);
	}
	cr_assert_eq(nodes_of_runs(c, "workflow = 'acts.wf'"), 2);
	buf nodes = BUF_INIT;
	PQsetNoticeReceiver(c, remote_nodes, &nodes);
	for (int i = 0; i < N; i++) {
		char *node = node_of_run(c, ids[i]);
		exec_ok(c, "SET citus.log_remote_commands = on");
		exec_ok(c, "SET client_min_messages = log");
		buf_reset(&nodes);
		exec_ok(c, "BEGIN");
		char sql[256];
		snprintf(sql, sizeof sql, "SELECT cairn.signal(%" PRId64 ", 'go', '1'::jsonb)", ids[i]);
		exec_ok(c, sql);
		cr_assert_eq(tdb_intf(c, "SELECT cairn.chain_last(%" PRId64 ")", ids[i]), ids[i]);
		snprintf(sql, sizeof sql, "SELECT cairn.cancel(%" PRId64 ")", ids[i]);
		exec_ok(c, sql);
		exec_ok(c, "COMMIT");
		cr_assert_str_eq(buf_str(&nodes), node,
		                 "run %" PRId64 ": sent to %s, its part on %s", ids[i],
		                 buf_str(&nodes), node);
		/* An enqueue in the application's transaction: the node of the
		 * new run's part alone. */
		buf_reset(&nodes);
		exec_ok(c, "BEGIN");
		snprintf(sql, sizeof sql,
		         "SELECT id FROM cairn.enqueue('acts.sql', '{}'::jsonb, key => 'e%d')", i);
		int64_t made = tdb_int(c, sql);
		exec_ok(c, "COMMIT");
		exec_ok(c, "RESET client_min_messages");
		exec_ok(c, "RESET citus.log_remote_commands");
		free(node);
		node = node_of_run(c, made);
		cr_assert_str_eq(buf_str(&nodes), node,
		                 "run %" PRId64 ": sent to %s, its part on %s", made,
		                 buf_str(&nodes), node);
		free(node);
		snprintf(sql, sizeof sql, "SELECT cairn.retry(%" PRId64 ")", ids[i]);
		exec_ok(c, sql);
	}
	/* Each run has its signal, in its part, and was cancelled (never
	 * started: at once) and then retried: pending again, its journal cut. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.signals g JOIN cairn.runs r "
	                        "ON r.id = g.run_id AND r.part = g.part "
	                        "WHERE r.workflow = 'acts.wf' AND g.name = 'go'"),
	             N);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'acts.wf' "
	                        "AND status = 'pending' AND journal_cuts = 1"),
	             N);
	/* The event wait reads the run and its events in its part. */
	char id[24];
	snprintf(id, sizeof id, "%" PRId64, ids[N - 1]);
	const char *event[] = {"event", id, "pct", NULL};
	free(cli_out(db, 3, event)); /* not found: no such event */
	cairn_client_free(cl);
	PQfinish(c);
	buf_free(&nodes);
}

/* A worker of the test flows (tflows_path) on a distributed database of
 * its own, ready. */
typedef struct citus_worker {
	const char *db;
	PGconn *c; /* to db, with t_hits made */
	pid_t pid;
	int port;
	char log[64];
} citus_worker;

/* Starts w on a new database named for test, with up to two settings
 * (NAME=VALUE, or NULL). */
static void citus_worker_start(citus_worker *w, const char *test, const char *env1,
                               const char *env2)
{
	w->db = citus_db(test);
	w->c = citus_migrated(w->db);
	exec_ok(w->c, "CREATE TABLE t_hits (run_id bigint NOT NULL, step text NOT NULL)");
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(w->log);
	w->pid = tworker_start(w->db, &w->port, w->log, plugins, env1, env2, NULL);
	tlive_add(w->pid);
	cr_assert(thttp_wait(w->port, "/readyz", 200, 30000), "worker never ready; log in %s",
	          w->log);
}

/* Stops w with SIGTERM, which it must obey; its log (caller frees) unless
 * keep_log is 0, when the log is removed. */
static char *citus_worker_stop(citus_worker *w, int keep_log)
{
	int rc = tworker_stop(w->pid, SIGTERM, 30000);
	tlive_del(w->pid);
	cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, w->log);
	char *text = keep_log ? tfile_read(w->log) : NULL;
	cr_assert(!keep_log || text, "cannot read %s", w->log);
	unlink(w->log);
	PQfinish(w->c);
	return text;
}

/* Waits until all of db's runs (c connected to it), all of them, are
 * completed; log: the worker's. */
static void wait_all_completed(PGconn *c, int64_t all, const char *log)
{
	cr_assert(tdb_wait_at_least(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                            all, 180000),
	          "the runs never all completed (%" PRId64 " of %" PRId64 "); log in %s",
	          tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"), all,
	          log);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs"), all);
}

/* Enqueues n runs of t.spread with cl. */
static void enqueue_spread(cairn_client *cl, int n)
{
	for (int i = 0; i < n; i++) {
		cairn_enqueue_opts o = {.input = "{}"};
		cairn_enqueued r;
		cr_assert_eq(cairn_enqueue(cl, "t.spread", &o, &r), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
		cairn_enqueued_clear(&r);
	}
}

/*
 * A cluster grows by a node while a worker runs (docs/deployment.md, "Past
 * one PostgreSQL: Citus"): a third worker node joins the cluster of the
 * worker's database (tests/citus.sh addnode: citus_add_node), and Citus's
 * rebalancer moves parts to it (citus_rebalance_start: each part's shards
 * copied by logical replication, then switched over under a short lock)
 * while the worker claims and commits and a client enqueues. Every run
 * completes, no step runs twice, and runs then live in parts on the three
 * nodes.
 */
Test(citus, a_cluster_grows_by_a_node_with_the_rebalancer_while_a_worker_runs)
{
	citus_worker w;
	citus_worker_start(&w, "grow", NULL, NULL);
	PGconn *c = w.c;
	cairn_client *cl = NULL;
	cr_assert_eq(cairn_client_open(w.db, &cl), CAIRN_OK);
	enum { BEFORE = 100, DURING_MAX = 400 };
	enqueue_spread(cl, BEFORE);
	cr_assert_eq(nodes_of_runs(c, "true"), 2);
	char name[64];
	snprintf(name, sizeof name, "grow_%d", (int)getpid()); /* citus_db's name */
	const char *argv[] = {
	    "/bin/sh", getenv("CAIRN_CITUS_SH"), "addnode", getenv("CAIRN_CITUS_DIR"), name, "w3",
	    NULL};
	char *err = NULL;
	cr_assert_eq(trun(argv, NULL, NULL, &err), 0, "citus.sh addnode: %s", err ? err : "");
	free(err);
	exec_ok(c, "SELECT citus_rebalance_start()");
	/* Runs enqueued while the parts move, up to DURING_MAX. */
	int64_t all = BEFORE;
	static const char *const moving = "SELECT count(*) FROM citus_rebalance_status() "
	                                  "WHERE state NOT IN ('finished', 'failed', 'cancelled')";
	while (all < BEFORE + DURING_MAX && tdb_int(c, moving) > 0) {
		enqueue_spread(cl, 1);
		all++;
	}
	cr_assert(tdb_wait_at_least(c,
	                            "SELECT count(*) FROM citus_rebalance_status() "
	                            "WHERE state IN ('finished', 'failed', 'cancelled')",
	                            1, 180000),
	          "the rebalance never ended");
	char *state = tdb_str(c, "SELECT state || ': ' || coalesce(details::text, '') "
	                         "FROM citus_rebalance_status()");
	cr_assert(strncmp(state, "finished", 8) == 0, "the rebalance ended %s", state);
	free(state);
	fprintf(stderr, "citus: %" PRId64 " runs, %" PRId64 " enqueued while parts moved\n", all,
	        all - BEFORE);
	/* And runs after it, in the parts that moved too. */
	enqueue_spread(cl, 40);
	all += 40;
	wait_all_completed(c, all, w.log);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM t_hits"), 2 * all);
	cr_assert_eq(
	    tdb_int(c, "SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM t_hits) h"),
	    2 * all);
	cr_assert_eq(nodes_of_runs(c, "true"), 3);
	cairn_client_free(cl);
	free(citus_worker_stop(&w, 0));
}

Test(citus, a_worker_drains_runs_of_every_part_with_steps_a_sleep_and_a_signal)
{
	citus_worker w;
	citus_worker_start(&w, "drain", "CAIRN_POLL_INTERVAL=5s", NULL);
	const char *db = w.db, *log = w.log;
	PGconn *c = w.c;
	cairn_client *cl = NULL;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	enum { SPREAD = 160, EACH = 40 };
	static const char *const RUNS[][2] = {
	    {"t.spread", "{}"},
	    {"t.progress", "{}"},
	};
	int64_t waiting[EACH];
	int nw = 0;
	for (size_t k = 0; k < sizeof RUNS / sizeof *RUNS; k++)
		for (int i = 0; i < (k ? EACH : SPREAD); i++) {
			cairn_enqueue_opts o = {.input = RUNS[k][1]};
			cairn_enqueued r;
			cr_assert_eq(cairn_enqueue(cl, RUNS[k][0], &o, &r), CAIRN_OK, "%s",
			             cairn_client_errmsg(cl));
			cairn_enqueued_clear(&r);
			if (k > 0)
				waiting[nw++] = r.id;
		}
	/* The runs' parts lie on both worker nodes. */
	cr_assert_eq(nodes_of_runs(c, "true"), 2);
	cr_assert(tdb_wait_at_least(c,
	                            "SELECT count(*) FROM cairn.runs "
	                            "WHERE workflow = 't.progress' AND status = 'waiting'",
	                            EACH, 120000),
	          "the runs never waited for their signal; log in %s", log);
	for (int i = 0; i < nw; i++) {
		char id[24], *out = NULL, *err = NULL;
		snprintf(id, sizeof id, "%" PRId64, waiting[i]);
		cr_assert_eq(tcli(db, &out, &err, "signal", id, "go", "--input", "1", NULL), 0,
		             "signal %s: %s", id, err ? err : "");
		free(out);
		free(err);
	}
	int64_t all = SPREAD + EACH;
	wait_all_completed(c, all, log);
	/* Each step of each t.spread run ran once: "first" and "second", around
	 * the sleep. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM t_hits"), 2 * SPREAD);
	cr_assert_eq(
	    tdb_int(c, "SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM t_hits) h"),
	    2 * SPREAD);
	/* The journal says the same: every step once, in its run's part. */
	cr_assert_eq(tdb_int(c,
	                     "SELECT count(*) FROM cairn.steps WHERE name IN ('first', 'second') "
	                     "AND attempts = 1 AND status = 'completed'"),
	             2 * SPREAD);
	/* The events of t.progress, the last value of each. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.events e JOIN cairn.runs r "
	                        "ON r.id = e.run_id AND r.part = e.part "
	                        "WHERE e.value->>'pct' = '100'"),
	             EACH);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.steps s WHERE NOT EXISTS ("
	                        "  SELECT 1 FROM cairn.runs r WHERE r.id = s.run_id "
	                        "  AND r.part = s.part)"),
	             0);
	/* Nothing is left to deliver. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages"), 0);
	/* The cluster recovers prepared transactions every second, within half
	 * the default TTL: no warning. A worker whose TTL is 1.5 s is warned
	 * (docs/deployment.md, "On Citus"). */
	char plugins[1100], log2[64];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(log2);
	int port2;
	pid_t w2 = tworker_start(db, &port2, log2, plugins, "CAIRN_RUNNER_TTL=1500ms",
	                         "CAIRN_HEARTBEAT_INTERVAL=250ms", NULL);
	tlive_add(w2);
	cr_assert(
	    tfile_wait(log2, "citus.recover_2pc_interval is over half of CAIRN_RUNNER_TTL", 30000),
	    "a worker whose TTL is 1.5 s was not warned; log in %s", log2);
	int rc = tworker_stop(w2, SIGTERM, 30000);
	tlive_del(w2);
	cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, log2);
	unlink(log2);
	cairn_client_free(cl);
	char *text = citus_worker_stop(&w, 1);
	cr_assert_null(strstr(text, "recover_2pc_interval"),
	               "a worker of the default TTL was warned about the recovery interval");
	free(text);
}

/*
 * A worker's singletons on a distributed database: the scheduler fires a
 * schedule every second; the janitor deletes the finished runs past
 * retention, part by part, and moves a run of a group no runner serves to
 * the group that serves its workflow (liveness read on the coordinator,
 * where the runners' sessions are, then the move in the run's part); the
 * backlog reads every node and counts no shard unowned; the sweep of held
 * runs runs. Their statements were each refused by Citus before (a
 * subquery per schedule or per group over a reference table, runs joined
 * to runs by chain_id, messages joined to runs by id alone): the worker's
 * log has none of their failures. Then the CLI's reads and the console's
 * counts, on runs of every part.
 */
Test(citus, the_scheduler_janitor_stranded_runs_backlog_and_reads_work_on_a_distributed_database)
{
	citus_worker w;
	citus_worker_start(&w, "singletons", "CAIRN_RETENTION=2s", "CAIRN_BACKLOG_INTERVAL=1s");
	const char *db = w.db, *log = w.log;
	PGconn *c = w.c;
	const char *sched[] = {"schedule",   "create",   "tick",      "--cron", "* * * * * *",
	                       "--workflow", "t.spread", "--overlap", "allow",  NULL};
	free(cli_out(db, 0, sched));
	/* A run of a group no runner serves: stranded until the janitor moves
	 * it. */
	const char *gone[] = {"enqueue", "t.spread", "--group", "gone", "--input", "{}", NULL};
	char *idtxt = cli_out(db, 0, gone);
	int64_t stranded = strtoll(idtxt, NULL, 10);
	free(idtxt);
	cr_assert_gt(stranded, 0);
	/* Runs with keys of their own: the janitor deletes their keys (in
	 * run_keys, in other parts) with them. */
	for (int i = 0; i < 3; i++) {
		char key[16];
		snprintf(key, sizeof key, "jk-%d", i);
		const char *keyed[] = {"enqueue", "t.spread", "--key", key, "--input", "{}", NULL};
		free(cli_out(db, 0, keyed));
	}
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.run_keys WHERE key LIKE 'jk-%'"), 3);
	/* The stranded run moved and ran: both its steps. */
	cr_assert(tdb_wait_at_leastf(
	              c, 2, 60000, "SELECT count(*) FROM t_hits WHERE run_id = %" PRId64, stranded),
	          "the stranded run never ran; log in %s", log);
	/* Twelve fires (so over ten seconds, past a sweep of held runs), of
	 * which the janitor deleted some after they finished; the fires' runs
	 * lie in many parts. */
	cr_assert(tdb_wait_at_least(c, "SELECT fires FROM cairn.schedules WHERE name = 'tick'", 12,
	                            60000),
	          "the schedule never fired twelve times; log in %s", log);
	cr_assert(tdb_wait_at_least(c,
	                            "SELECT s.fires - (SELECT count(*) FROM cairn.runs r "
	                            "  WHERE r.key LIKE 'cairn.schedule:tick:%') "
	                            "FROM cairn.schedules s WHERE s.name = 'tick'",
	                            3, 60000),
	          "the janitor never deleted finished runs; log in %s", log);
	cr_assert_gt(tdb_int(c, "SELECT count(DISTINCT run_id) FROM t_hits"), 3);
	cr_assert(tdb_wait_at_least(c,
	                            "SELECT 6 - (SELECT count(*) FROM cairn.runs WHERE key LIKE "
	                            "'jk-%') - (SELECT count(*) FROM cairn.run_keys WHERE key LIKE "
	                            "'jk-%')",
	                            6, 60000),
	          "the janitor never deleted the keyed runs and their keys; log in %s", log);
	/* The backlog was read, and no shard of the group is unowned. */
	char *body = NULL;
	cr_assert_eq(thttp(w.port, "GET", "/metrics", &body, NULL), 200);
	cr_assert_gt(tmetric_in(body, "cairn_backlog_read_timestamp_seconds", NULL), 0, "%s", body);
	cr_assert_eq(tmetric_in(body, "cairn_shards_unowned", "group=\"default\""), 0, "%s", body);
	free(body);
	/* The CLI's reads: a run delayed an hour, in its part, and the others. */
	const char *later[] = {"enqueue", "t.spread", "--delay", "1h", "--input", "{}", NULL};
	char *later_id = cli_out(db, 0, later);
	later_id[strcspn(later_id, "\n")] = '\0';
	const char *status[] = {"status", later_id, NULL};
	char *out = cli_out(db, 0, status);
	cr_assert(strstr(out, "pending"), "%s", out);
	free(out);
	const char *result[] = {"result", later_id, NULL};
	free(cli_out(db, 4, result)); /* not finished */
	const char *list[] = {"list", "--workflow", "t.spread", "--json", NULL};
	out = cli_out(db, 0, list);
	cr_assert(strstr(out, later_id), "%s", out);
	free(out);
	const char *runners[] = {"runners", "--json", NULL};
	out = cli_out(db, 0, runners);
	cJSON *rs = cJSON_Parse(out);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(rs, 0), "live")), "%s", out);
	cJSON_Delete(rs);
	free(out);
	const char *schedules[] = {"schedule", "list", "--json", NULL};
	out = cli_out(db, 0, schedules);
	cr_assert(strstr(out, "tick"), "%s", out);
	free(out);
	cairn_client *cl = NULL;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	int64_t counts[CAIRN_RUN_STATUSES];
	cairn_list_filter key = {.key = "nothing-has-this-key"};
	cr_assert_eq(cairn_run_counts(cl, &key, counts), CAIRN_OK, "%s", cairn_client_errmsg(cl));
	cairn_list_filter all = {0};
	cr_assert_eq(cairn_run_counts(cl, &all, counts), CAIRN_OK, "%s", cairn_client_errmsg(cl));
	cr_assert_geq(counts[0], 1); /* pending: the delayed run, and a fire not yet run */
	cairn_client_free(cl);
	free(later_id);
	char *text = citus_worker_stop(&w, 1);
	static const char *const FAILED[] = {
	    "janitor failed",          "scheduler failed",
	    "cannot read the backlog", "letting held runs go failed",
	    "singleton failed",        "failed to move stranded"};
	for (size_t i = 0; i < sizeof FAILED / sizeof *FAILED; i++)
		cr_assert(!strstr(text, FAILED[i]), "the worker's log says \"%s\"\n%s", FAILED[i],
		          text);
	free(text);
}

/*
 * Children and continue-as-new on a distributed database, run by a real
 * worker: parents each start three children (whose keys put them in other
 * parts, on both nodes) and wait for all of them; loops continue as new
 * five times. The commit that starts or ends a child calls
 * cairn.children_sync from a CTE of its own, which Citus runs on the
 * coordinator (in the commit's join with the parents' runs it was pushed
 * to the node of the part, where its own distributed statements were
 * refused: "cannot execute a distributed query from a query on a shard");
 * a successor's id is taken from the coordinator's sequence by the
 * executor (a nextval in the commit ran on the node, whose sequence is not
 * the coordinator's: "bigint out of range"). Every parent completes with
 * its children's outputs, every step runs once, and `cairn result` of a
 * loop's first run follows the chain to its last.
 */
Test(citus, children_and_continue_as_new_run_on_a_distributed_database)
{
	citus_worker w;
	citus_worker_start(&w, "children", NULL, NULL);
	const char *db = w.db, *log = w.log;
	PGconn *c = w.c;
	enum { PARENTS = 8, KIDS = 3, LOOPS = 8, LINKS = 6 };
	cairn_client *cl = NULL;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	int64_t loops[LOOPS];
	for (int i = 0; i < PARENTS + LOOPS; i++) {
		cairn_enqueue_opts o = {
		    .input = i < PARENTS ? "{\"mode\": \"all\", \"children\": ["
		                           "{\"workflow\": \"t.spread\", \"input\": {}}, "
		                           "{\"workflow\": \"t.spread\", \"input\": {}}, "
		                           "{\"workflow\": \"t.spread\", \"input\": {}}]}"
		                         : "{\"n\": 0, \"until\": 5, \"sleep_ms\": 10}"};
		cairn_enqueued r;
		cr_assert_eq(cairn_enqueue(cl, i < PARENTS ? "t.many" : "t.loop", &o, &r), CAIRN_OK,
		             "%s", cairn_client_errmsg(cl));
		if (i >= PARENTS)
			loops[i - PARENTS] = r.id;
		cairn_enqueued_clear(&r);
	}
	int64_t all = PARENTS * (1 + KIDS) + LOOPS * LINKS;
	wait_all_completed(c, all, log);
	/* The children lie in parts on both nodes. */
	cr_assert_eq(nodes_of_runs(c, "parent_id IS NOT NULL"), 2);
	/* Each parent has its children's outputs, and each child's steps ran
	 * once. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 't.many' "
	                        "AND output->>'rc' = 'ok' "
	                        "AND jsonb_array_length(output->'results') = 3"),
	             PARENTS, "log in %s", log);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM t_hits"), 2 * PARENTS * KIDS);
	cr_assert_eq(
	    tdb_int(c, "SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM t_hits) h"),
	    2 * PARENTS * KIDS);
	/* Each loop is a chain of six runs, each in its first run's part. */
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs r JOIN cairn.runs f "
	                        "ON f.id = r.chain_id AND f.part = r.part "
	                        "WHERE r.workflow = 't.loop'"),
	             LOOPS * (LINKS - 1));
	for (int i = 0; i < LOOPS; i++) {
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, loops[i]);
		const char *result[] = {"result", id, NULL};
		char *out = cli_out(db, 0, result);
		cr_assert(strstr(out, "\"n\": 5") || strstr(out, "\"n\":5"), "run %s: %s", id, out);
		free(out);
	}
	cairn_client_free(cl);
	char *text = citus_worker_stop(&w, 1);
	cr_assert(!strstr(text, "commit failed"), "a commit failed:\n%s", text);
	free(text);
}

/* EXPLAIN (COSTS OFF) EXECUTE of prepared statement name with args: the
 * plan as one text (caller frees), or NULL with the error in why. */
static char *explain_execute(PGconn *c, const char *name, const char *args, char *why, size_t n)
{
	char q[8192];
	snprintf(q, sizeof q, "EXPLAIN (COSTS OFF) EXECUTE %s(%s)", name, args);
	PGresult *r = PQexec(c, q);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		snprintf(why, n, "%s", PQerrorMessage(c));
		PQclear(r);
		return NULL;
	}
	buf plan = BUF_INIT;
	for (int i = 0; i < PQntuples(r); i++) {
		buf_puts(&plan, PQgetvalue(r, i, 0));
		buf_puts(&plan, "\n");
	}
	PQclear(r);
	return buf_detach(&plan);
}

/* A run's final commit (cr's run completed) with a step of its journal. */
static commit *final_commit(const commit_run *cr)
{
	commit *f = commit_new(cr);
	cr_assert(f);
	f->outcome = COMMIT_FINISH;
	f->status = RUN_COMPLETED;
	f->attempt = 1;
	jrow row = {.seq = 0,
	            .name = "s",
	            .kind = KIND_STEP,
	            .status = STEP_COMPLETED,
	            .output = "1",
	            .attempts = 1,
	            .started_ms = 1,
	            .finished_ms = 2};
	cr_assert_eq(commit_add_row(f, &row), 0);
	return f;
}

/* The values of f's statement of one part (part), as the committer sends
 * them: the slots', the part's key, then the parents' parts if it tells
 * any; the last value is the caller's to free. Their number. */
static int commit_args(PGconn *c, commit *f, int64_t part, commit_params *p,
                       const char *values[COMMIT_NSLOTS + 2])
{
	cr_assert_eq(commit_encode(&f, 1, NULL, NULL, p), 0);
	unsigned parts = commit_parts(p);
	int nv = commit_values(p, parts, values);
	char key[24];
	snprintf(key, sizeof key, "%" PRId64, part);
	values[nv++] = strdup(key);
	if (commit_tells_parents(parts)) {
		db_settings st;
		buf err = BUF_INIT;
		cr_assert_eq(db_read_settings(c, &st, &err), 0, "%s", buf_str(&err));
		buf_free(&err);
		pgarr parents = PGARR_INIT;
		commit_parent_parts(&f, 1, &st, &parents);
		values[nv++] = strdup(pgarr_str(&parents));
		pgarr_free(&parents);
	}
	return nv;
}

/* EXPLAIN (COSTS OFF) of the statement of one part of p with values: the
 * plan as one text (caller frees). */
static char *explain_commit(PGconn *c, commit_params *p, const char *const *values, int nv)
{
	buf text = BUF_INIT, err = BUF_INIT, ex = BUF_INIT;
	cr_assert_eq(commit_statement_part(commit_parts(p), 1, &text, &err), 0, "%s",
	             buf_str(&err));
	buf_puts(&ex, "EXPLAIN (COSTS OFF) ");
	buf_puts(&ex, buf_str(&text));
	PGresult *r = PQexecParams(c, buf_str(&ex), nv, NULL, values, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
	buf lines = BUF_INIT;
	for (int i = 0; i < PQntuples(r); i++) {
		buf_puts(&lines, PQgetvalue(r, i, 0));
		buf_puts(&lines, "\n");
	}
	PQclear(r);
	buf_free(&text);
	buf_free(&ex);
	buf_free(&err);
	return buf_detach(&lines);
}

static void prepare_ok(PGconn *c, const char *name, const char *sql)
{
	PGresult *r = PQprepare(c, name, sql, 0, NULL);
	cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "PREPARE %s: %s\n%s", name,
	             PQerrorMessage(c), sql);
	PQclear(r);
}

/*
 * The worker's statements on a distributed database, as its sessions run
 * them. Each claim is of one part: planned with its values, it is one task
 * on the node of the part, and so are what is due in a part (read before a
 * claim of several) and, with limits, a part's keys and its mark (the
 * fleet-wide limits between them read and write reference tables only, on
 * the coordinator). With a generic plan (what the worker's sessions
 * use on one server) Citus cannot plan it at all, as any statement that
 * joins tables ("could not create distributed plan"): on Citus the poll and
 * commit sessions plan with values. A commit of one part takes its fence
 * first (one task, FOR SHARE on the node of the part), then its statement,
 * whose every task runs on that node (Citus makes each write in a CTE a
 * subplan of its own), each write sent whole, reading the fence's rows on
 * the node: run for real, it finishes the run and writes its journal in
 * its part. As a child's end, it also tells the parent in the parent's
 * part: those subplans go to the shards of the two parts, not to every
 * shard.
 * A client's signal and cancel are each one call of a function of the
 * part (cairn.signal_in, cairn.cancel_in), sent whole to its node.
 */
Test(citus, the_claims_and_the_commit_of_a_part_run_on_the_node_of_the_part)
{
	const char *db = citus_db("worker_plans");
	PGconn *c = citus_migrated(db);
	PQclear(PQexec(c, "SET client_min_messages = warning"));
	run_per_part(c, "plans");
	exec_ok(c, "SET plan_cache_mode = auto");
	int64_t owner =
	    tdb_int(c, "INSERT INTO cairn.runners (name, address, version, groups, "
	               "lease_pid) VALUES ('w', 'a', 'v', '{default}', 1) RETURNING id");
	char sql[1024];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.shard_leases (shard_group, shard, part, owner) "
	         "SELECT 'default', r.shard, r.part, %" PRId64 " FROM cairn.runs r",
	         owner);
	exec_ok(c, sql);
	/* Parts on each node: the runs of the first and the last part. */
	int64_t nparts = tdb_int(c, "SELECT count(*) FROM cairn.parts");
	for (int k = 0; k < 2; k++) {
		int64_t run = tdb_intf(c,
		                       "SELECT r.id FROM cairn.runs r JOIN cairn.parts p "
		                       "ON p.key = r.part WHERE p.part_no = %" PRId64,
		                       k ? nparts - 1 : 0);
		int64_t part = tdb_intf(c, "SELECT part FROM cairn.runs WHERE id = %" PRId64, run);
		int shard =
		    (int)tdb_intf(c, "SELECT shard FROM cairn.runs WHERE id = %" PRId64, run);
		char args[1024], why[1024], name[32];
		/* The claims of all that is due and of named runs; what is due
		 * in the part; with limits, the part's keys (of all that is due
		 * and of named runs) and its mark. Their parameters: the
		 * claim's, then those of dispatch.h. */
		static const char *const std =
		    "%" PRId64 ", '{}', 10, 1000000, 100, 5, 4, 'f', '{}', '{}', '{}'";
		for (int which = DISPATCH_CLAIM_MARK; which >= (int)DISPATCH_CLAIM_PART; which--) {
			buf text = BUF_INIT;
			dispatch_claim_part_sql(which, 256, &text);
			snprintf(name, sizeof name, "claim_%d_%d", k, which);
			prepare_ok(c, name, buf_str(&text));
			buf_free(&text);
			int n = snprintf(args, sizeof args, std, owner);
			switch (which) {
			case DISPATCH_CLAIM_PART:
				snprintf(args + n, sizeof args - (size_t)n,
				         ", %" PRId64 ", 16384, now(), 0", part);
				break;
			case DISPATCH_CLAIM_PART_NAMED:
				snprintf(args + n, sizeof args - (size_t)n,
				         ", '{%" PRId64 "}', %" PRId64 ", 16384, now()", run, part);
				break;
			case DISPATCH_CLAIM_PEEK:
				snprintf(args, sizeof args, "%" PRId64 ", '{}', 10, %" PRId64, owner,
				         part);
				break;
			default:
				snprintf(args + n, sizeof args - (size_t)n,
				         ", '{%" PRId64 "}', %" PRId64 ", 16384, now(), %s, -1", run,
				         part,
				         which == DISPATCH_CLAIM_MARK
				             ? "'[{\"run_id\": 1, \"ids\": [0], \"slot\": true, "
				               "\"gok\": true, \"start\": true}]'"
				             : "''");
			}
			char *plan = explain_execute(c, name, args, why, sizeof why);
			cr_assert(plan, "%s", why);
			cr_assert_eq(task_count(plan), 1, "%s", plan);
			cr_assert_eq(node_count(plan), 1, "%s", plan);
			cr_assert_null(strstr(plan, "Distributed Subplan"), "%s", plan);
			free(plan);
		}
		/* A generic plan: none. */
		exec_ok(c, "SET plan_cache_mode = force_generic_plan");
		char *plan = explain_execute(c, name, args, why, sizeof why);
		cr_assert_null(plan, "%s", plan);
		cr_assert(strstr(why, "could not create distributed plan"), "%s", why);
		exec_ok(c, "SET plan_cache_mode = auto");
		/* A signal and a cancel: each one call, sent whole to the node
		 * of the part. */
		const struct {
			const char *name, *sql, *args, *scan;
		} calls[] = {{"signal", client_sql_signal(), "'go', '1', 100, NULL, ",
		              "Function Scan on signal_in"},
		             {"cancel", client_sql_cancel(), "", "Function Scan on cancel_in"}};
		for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
			snprintf(name, sizeof name, "%s_%d", calls[i].name, k);
			prepare_ok(c, name, calls[i].sql);
			snprintf(args, sizeof args, "%" PRId64 ", %s%" PRId64, run, calls[i].args,
			         part);
			plan = explain_execute(c, name, args, why, sizeof why);
			cr_assert(plan, "%s", why);
			cr_assert_eq(task_count(plan), 1, "%s", plan);
			cr_assert_eq(node_count(plan), 1, "%s", plan);
			cr_assert(strstr(plan, calls[i].scan), "%s", plan);
			free(plan);
		}
		/* The poller's reads of its runs in flight and of the keys of
		 * runs that ended: one task, on the node of their part. */
		for (int which = DISPATCH_CANCELLED; which <= DISPATCH_FLOW_KEYS; which++) {
			buf text = BUF_INIT;
			dispatch_runs_part_sql(which, &text);
			snprintf(name, sizeof name, "runs_%d_%d", k, which);
			prepare_ok(c, name, buf_str(&text));
			buf_free(&text);
			snprintf(args, sizeof args, "'{%" PRId64 "}', '{%" PRId64 "}'", run, part);
			plan = explain_execute(c, name, args, why, sizeof why);
			cr_assert(plan, "%s", why);
			cr_assert_eq(task_count(plan), 1, "%s", plan);
			cr_assert_eq(node_count(plan), 1, "%s", plan);
			free(plan);
		}
		/* The fence of the part: one task. */
		snprintf(name, sizeof name, "fence_%d", k);
		prepare_ok(c, name, commit_sql_fence_part());
		snprintf(args, sizeof args, "%" PRId64 ", '{default}', '{%d}'", part, shard);
		plan = explain_execute(c, name, args, why, sizeof why);
		cr_assert(plan, "%s", why);
		cr_assert_eq(task_count(plan), 1, "%s", plan);
		cr_assert_eq(node_count(plan), 1, "%s", plan);
		free(plan);
		/* The run's final commit with a step of its journal: every task on
		 * the node of the part. */
		int64_t epoch =
		    tdb_intf(c,
		             "SELECT epoch FROM cairn.shard_leases WHERE part = %" PRId64
		             " AND shard_group = 'default' AND shard = %d",
		             part, shard);
		commit_run cr = {.id = run,
		                 .group = "default",
		                 .shard = shard,
		                 .owner = owner,
		                 .epoch = epoch,
		                 .attempt = 1};
		/* As a child whose parent is the run of the other end's part,
		 * it tells its parent: the subplans that write the parent's
		 * signal and message go to the shards of the two parts (those
		 * the statement names), not to every shard; every other is one
		 * task. */
		cr.parent = tdb_intf(c,
		                     "SELECT r.id FROM cairn.runs r JOIN cairn.parts p "
		                     "ON p.key = r.part WHERE p.part_no = %" PRId64,
		                     k ? 0 : nparts - 1);
		commit *f = final_commit(&cr);
		commit_params p;
		const char *values[COMMIT_NSLOTS + 2];
		int nv = commit_args(c, f, part, &p, values);
		cr_assert(commit_tells_parents(commit_parts(&p)));
		char *lines = explain_commit(c, &p, values, nv);
		int told = 0;
		for (const char *t = strstr(lines, "Task Count: "); t;
		     t = strstr(t + 1, "Task Count: ")) {
			int tasks = atoi(t + strlen("Task Count: "));
			cr_assert(tasks == 1 || tasks == 2, "%s", lines);
			told += tasks == 2;
		}
		cr_assert_eq(told, 2, "the signal and the message of the parent:\n%s", lines);
		free(lines);
		free((char *)values[nv - 1]);
		commit_params_free(&p);
		commit_free(f);
		cr.parent = 0;
		f = final_commit(&cr);
		nv = commit_args(c, f, part, &p, values);
		lines = explain_commit(c, &p, values, nv);
		/* Every task of every subplan on the node of the part, each write
		 * sent whole to it: no rows pulled to the coordinator (whose
		 * source, the fence's rows, Citus copied to every node, so that
		 * every such commit was a two-phase commit over every node). */
		cr_assert_eq(node_count(lines), 1, "%s", lines);
		cr_assert_null(strstr(lines, "pull to coordinator"), "%s", lines);
		for (const char *t = strstr(lines, "Task Count: "); t;
		     t = strstr(t + 1, "Task Count: "))
			cr_assert_eq(atoi(t + strlen("Task Count: ")), 1, "%s", lines);
		free(lines);
		unsigned parts = commit_parts(&p);
		buf text = BUF_INIT, err = BUF_INIT;
		cr_assert_eq(commit_statement_part(parts, 1, &text, &err), 0, "%s", buf_str(&err));
		snprintf(name, sizeof name, "commit_%d", k);
		prepare_ok(c, name, buf_str(&text));
		buf_free(&text);
		buf_free(&err);
		const char *key = values[nv - 1];
		exec_ok(c, "BEGIN");
		const char *fv[] = {key, values[1], values[2]};
		PGresult *r = PQexecParams(c, commit_sql_fence_part(), 3, NULL, fv, NULL, NULL, 0);
		cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
		cr_assert_eq(PQntuples(r), 1);
		PQclear(r);
		r = PQexecPrepared(c, name, nv, values, NULL, NULL, 0);
		cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
		cr_assert_eq(PQntuples(r), 1, "the fence let the commit through");
		PQclear(r);
		exec_ok(c, "COMMIT");
		free((char *)key);
		commit_params_free(&p);
		commit_free(f);
		cr_assert_eq(tdb_intf(c,
		                      "SELECT count(*) FROM cairn.runs r JOIN cairn.steps s "
		                      "ON s.run_id = r.id AND s.part = r.part "
		                      "WHERE r.id = %" PRId64 " AND r.status = 'completed' "
		                      "AND r.finished_at IS NOT NULL",
		                      run),
		             1);
	}
	PQfinish(c);
}
