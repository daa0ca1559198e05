/*
 * test_api.c - the front doors other languages use: the SQL functions of
 * migration 0011 (cairn.enqueue and friends, inside the caller's
 * transaction), the role cairn_client, the worker's HTTP API under /v1/,
 * the one shard function the C client, SQL and HTTP share, and the keys
 * the C client and SQL make for runs without one. Workers poll once an hour
 * here, so a run that starts was woken.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "clock.h"
#include "hash.h"
#include "pgarr.h"
#include "support.h"

#define SHARDS   64
#define DEADLINE 20000 /* ms; the poll interval is an hour */
#define TOKEN    "api-test-token-0123456789"
#define BEARER   "Bearer " TOKEN

static const char *db;
static PGconn *conn;
static char log_path[64];
static int port;

static void setup(void)
{
	db = tdb_new_migrated_shards(SHARDS);
	conn = tdb_connect(db);
	tlog_file(log_path);
}

static void teardown(void)
{
	PQfinish(conn);
}

static void dump_log(void)
{
	char *l = tfile_read(log_path);
	fprintf(stderr, "--- worker\n%s\n", l ? l : "");
	free(l);
}

static pid_t worker(void)
{
	return tworker_start(db, &port, log_path, "CAIRN_POLL_INTERVAL=1h",
	                     "CAIRN_HTTP_TOKEN=" TOKEN, NULL);
}

/* Every shard has an owner: a wake-up can reach it. */
static int all_owned(void *arg)
{
	(void)arg;
	return tdb_int(conn, "SELECT count(*) FROM cairn.shard_leases WHERE owner IS NOT NULL") ==
	       SHARDS;
}

static void worker_owns_all(void)
{
	tcheck(dump_log, twait(all_owned, NULL, DEADLINE), "the worker never took every shard");
}

/* Runs sql on c and expects it to fail; returns the error message (caller frees). */
static char *sql_error(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	cr_assert(PQresultStatus(r) == PGRES_FATAL_ERROR, "expected %s to fail", sql);
	char *msg = strdup(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
	PQclear(r);
	return msg;
}

/* ------------------------------------------------------------- SQL */

/* No per-suite .timeout (Criterion 2.4.1 leaks with it, see test_exec.c). */
TestSuite(sql, .init = setup, .fini = teardown);

Test(sql, a_rolled_back_enqueue_leaves_no_run_and_wakes_no_worker_a_committed_one_completes)
{
	pid_t w = worker();
	worker_owns_all();
	tdb_exec(conn, "CREATE TABLE orders (id serial PRIMARY KEY, item text, run_id bigint)");
	PGconn *listener = tdb_connect(db);
	tdb_exec(listener, "LISTEN cairn_wake");

	tdb_exec(conn, "BEGIN");
	tdb_exec(conn, "INSERT INTO orders (item, run_id) SELECT 'book', id FROM "
	               "cairn.enqueue('noop', '{\"item\": \"book\"}', key => 'order-1')");
	tdb_exec(conn, "ROLLBACK");
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 0);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM orders"), 0);

	/* Notifications come in commit order: the first one after the rollback
	 * must be the committed run's, so the rolled-back one sent none. */
	tdb_exec(conn, "BEGIN");
	tdb_exec(conn, "INSERT INTO orders (item, run_id) SELECT 'lamp', id FROM "
	               "cairn.enqueue('noop', '{\"item\": \"lamp\"}', key => 'order-2')");
	tdb_exec(conn, "COMMIT");
	int64_t id = tdb_int(conn, "SELECT run_id FROM orders WHERE item = 'lamp'");
	cr_assert_gt(id, 0);
	char *note = tdb_next_notification(listener, DEADLINE);
	cr_assert(note, "the committed enqueue sent no wake-up");
	int64_t owner = tdb_intf(conn,
	                         "SELECT l.owner FROM cairn.runs r JOIN cairn.shard_leases l "
	                         "ON l.part = r.part AND l.shard_group = r.shard_group "
	                         "AND l.shard = r.shard WHERE r.id = %" PRId64,
	                         id);
	char want[64];
	snprintf(want, sizeof want, "%" PRId64 " %" PRId64, owner, id);
	cr_assert_str_eq(note, want, "the first wake-up after the rollback is \"%s\"", note);
	free(note);
	tcheck(dump_log,
	       tdb_wait_at_leastf(conn, 1, DEADLINE,
	                          "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                          " AND status = 'completed'",
	                          id),
	       "the committed run never completed");
	char *out = tdb_str(conn, "SELECT (cairn.run(run_id)).output::text FROM orders");
	cr_assert_str_eq(out, "{\"item\": \"lamp\"}");
	free(out);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 1);
	PQfinish(listener);
	tworker_stop(w, SIGTERM, 20000);
}

Test(sql, one_statement_enqueueing_200_runs_wakes_its_owner_twice_at_most_and_all_complete)
{
	pid_t w = worker();
	worker_owns_all();
	PGconn *listener = tdb_connect(db);
	tdb_exec(listener, "LISTEN cairn_wake");
	tdb_exec(conn, "SELECT count((cairn.enqueue('noop', to_jsonb(g), key => 'many-' || g)).id) "
	               "FROM generate_series(1, 200) g");
	tcheck(dump_log,
	       tdb_wait_at_least(conn, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                         200, DEADLINE),
	       "not every run completed");
	int wakes = 0;
	for (char *note; (note = tdb_next_notification(listener, 0)); wakes++)
		free(note);
	cr_assert(wakes >= 1 && wakes <= 2, "%d wake-ups for one owner", wakes);
	PQfinish(listener);
	tworker_stop(w, SIGTERM, 20000);
}

Test(sql, enqueue_is_idempotent_by_key_and_names_the_argument_the_value_and_what_is_accepted)
{
	int64_t a = tdb_int(conn, "SELECT id FROM cairn.enqueue('noop', key => 'k')");
	cr_assert_eq(tdb_int(conn, "SELECT id FROM cairn.enqueue('noop', '{\"x\":1}', 'k')"), a);
	cr_assert_eq(tdb_int(conn, "SELECT existed::int FROM cairn.enqueue('noop', key => 'k')"),
	             1);
	cr_assert_eq(tdb_int(conn, "SELECT existed::int FROM cairn.enqueue('noop')"), 0);
	static const struct {
		const char *sql, *says;
	} bad[] = {
	    {"SELECT cairn.enqueue('no pe')",
	     "invalid workflow \"no pe\": character 3 (0x20) is not accepted; expected letters, "
	     "digits and _ - . :"},
	    {"SELECT cairn.enqueue('')", "workflow must not be empty"},
	    {"SELECT cairn.enqueue('noop', key => '')", "key must not be empty"},
	    {"SELECT cairn.enqueue('noop', key => E'a\\x01b')",
	     "invalid key \"a\\x01b\": character 2 is a control character (0x01)"},
	    {"SELECT cairn.enqueue('noop', key => repeat('k', 513))", "at most 512 are accepted"},
	    {"SELECT cairn.enqueue('noop', max_attempts => 0)",
	     "invalid max_attempts 0: expected an integer from 1 to 1000"},
	    {"SELECT cairn.enqueue('noop', delay => '-1s')",
	     "invalid delay -00:00:01: expected an interval of 0 or more"},
	    {"SELECT cairn.enqueue('noop', delay => '1s', run_at => now())",
	     "cannot be used together: set at most one of them"},
	    {"SELECT cairn.enqueue('noop', shard_group => 'a/b')", "invalid group \"a/b\""},
	    {"SELECT cairn.enqueue('noop', (repeat('[', 70) || repeat(']', 70))::jsonb)",
	     "input is nested more than 64 levels deep"},
	    {"SELECT cairn.enqueue('noop', '\"cairn:enc:k1:abc\"')",
	     "reserved for encrypted values"},
	    {"SELECT cairn.enqueue('noop', to_jsonb(repeat('x', 1048577)))",
	     "larger than the maximum of 1048576 bytes"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *msg = sql_error(conn, bad[i].sql);
		cr_assert(strstr(msg, bad[i].says), "%s says \"%s\", not \"%s\"", bad[i].sql, msg,
		          bad[i].says);
		free(msg);
	}
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 2, "a bad call wrote a row");
}

/* Routing by workflow (migration 0020): no worker has served anything in
 * this database, so every workflow is unserved. */
Test(sql, enqueue_warns_of_a_workflow_never_served_refuses_it_when_required_and_old_calls_work)
{
	char *w = tdb_str(conn, "SELECT warning FROM cairn.enqueue('ghost', '{\"a\": 1}')");
	cr_assert(w && strstr(w, "no worker has ever served workflow \"ghost\"") &&
	              strstr(w, "group \"default\""),
	          "%s", w ? w : "(null)");
	free(w);
	/* The calls of before 0020: positionally with a group, by name, the
	 * composite's id. */
	int64_t a = tdb_int(conn, "SELECT id FROM cairn.enqueue('ghost', '{}'::jsonb, 'k1', NULL, "
	                          "NULL, NULL, 'other', NULL, 0)");
	cr_assert_gt(a, 0);
	char *g = tdb_str(conn, "SELECT shard_group FROM cairn.run_view WHERE key = 'k1'");
	cr_assert_str_eq(g, "other", "a group named is kept");
	free(g);
	cr_assert_gt(tdb_int(conn, "SELECT (cairn.enqueue('ghost', key => 'k2')).id"), 0);
	cr_assert_null(tdb_str(conn, "SELECT warning FROM cairn.enqueue('ghost', key => 'k2')"),
	               "an existing run has no warning");
	/* Once a worker has served it (a row as lease.c writes it), no warning,
	 * and a run without a group goes to its group: in a session of its own,
	 * since a session keeps its last route for a second, and a moment
	 * later in this one. */
	tdb_exec(conn, "INSERT INTO cairn.workflows (workflow, shard_group, runtime, live_until) "
	               "VALUES ('ghost', 'python', 'python 3.11.2', now() + interval '1 minute')");
	PGconn *fresh = tdb_connect(db);
	cr_assert_null(tdb_str(fresh, "SELECT warning FROM cairn.enqueue('ghost', key => 'k3')"));
	PQfinish(fresh);
	g = tdb_str(conn, "SELECT shard_group FROM cairn.run_view WHERE key = 'k3'");
	cr_assert_str_eq(g, "python");
	free(g);
	cr_assert(tdb_wait_at_least(conn,
	                            "SELECT count(*) FROM cairn.enqueue('ghost') "
	                            "WHERE warning IS NULL",
	                            1, 5000),
	          "this session never followed the new route");
	int64_t before = tdb_int(conn, "SELECT count(*) FROM cairn.runs");
	PGresult *r = PQexec(conn, "SELECT cairn.enqueue('typo', require_served => true)");
	cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
	cr_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "P0002");
	cr_assert(strstr(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY),
	                 "no worker has ever served workflow \"typo\": refused (require_served)"),
	          "%s", PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
	PQclear(r);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), before, "a refusal wrote");
	cr_assert_gt(tdb_int(conn, "SELECT id FROM cairn.enqueue('ghost', require_served => true)"),
	             0, "a served workflow passes");
}

Test(sql, signal_cancel_retry_and_run_change_runs_and_refuse_what_cannot_be_done)
{
	int64_t id = tdb_int(conn, "SELECT id FROM cairn.enqueue('noop', delay => '1h')");
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT cairn.signal(%" PRId64 ", 'go', '{\"n\": 1}')", id);
	tdb_exec(conn, sql);
	cr_assert_eq(
	    tdb_intf(conn, "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64, id), 1);
	snprintf(sql, sizeof sql, "SELECT cairn.signal(%" PRId64 ", 'bad name', 'null')", id);
	char *msg = sql_error(conn, sql);
	cr_assert(strstr(msg, "invalid signal name \"bad name\""), "%s", msg);
	free(msg);
	snprintf(sql, sizeof sql, "SELECT cairn.retry(%" PRId64 ")", id);
	msg = sql_error(conn, sql);
	cr_assert(strstr(msg, "it is pending, only failed or cancelled runs can be retried"), "%s",
	          msg);
	free(msg);
	snprintf(sql, sizeof sql, "SELECT cairn.cancel(%" PRId64 ")", id);
	tdb_exec(conn, sql);
	char *st = tdb_str(conn, "SELECT status FROM cairn.run_view");
	cr_assert_str_eq(st, "cancelled");
	free(st);
	msg = sql_error(conn, sql);
	cr_assert(strstr(msg, "it has already finished"), "%s", msg);
	free(msg);
	snprintf(sql, sizeof sql, "SELECT cairn.retry(%" PRId64 ")", id);
	tdb_exec(conn, sql);
	st = tdb_str(conn, "SELECT status FROM cairn.run_view");
	cr_assert_str_eq(st, "pending");
	free(st);
	msg = sql_error(conn, "SELECT cairn.run(999999)");
	cr_assert_str_eq(msg, "run 999999 not found");
	free(msg);
}

/*
 * jsonb refuses \u0000 itself, but as the caller's argument is converted,
 * before any function runs: its message named no argument. Bytes that are
 * not UTF-8 never reach a function: PostgreSQL refuses the statement.
 */
Test(sql, a_json_argument_jsonb_cannot_take_is_refused_naming_the_argument)
{
	int64_t id = tdb_int(conn, "SELECT id FROM cairn.enqueue('noop', delay => '1h')");
	char sig[3][160];
	snprintf(sig[0], sizeof sig[0],
	         "SELECT cairn.signal(%" PRId64 ", 'go', '{\"a\": \"\\u0000\"}')", id);
	snprintf(sig[1], sizeof sig[1], "SELECT cairn.signal(%" PRId64 ", 'go', '{\"a\": }')", id);
	snprintf(sig[2], sizeof sig[2], "SELECT cairn.signal(%" PRId64 ", 'go', E'\"\\xff\"')", id);
	const struct {
		const char *sql, *says;
	} bad[] = {
	    {"SELECT cairn.enqueue('noop', '\"a\\u0000b\"')",
	     "input holds a character jsonb cannot store (\\u0000 cannot be converted to text): "
	     "cairn accepts no NUL character"},
	    {"SELECT cairn.enqueue('noop', input => '[\"\\u0000\"]', key => 'k')", "input holds"},
	    {"SELECT cairn.enqueue('noop', '{\"a\": \"x\ny\"}')",
	     "input is not valid JSON: Character with value 0x0a must be escaped"},
	    {"SELECT cairn.enqueue('noop', '{bad')", "input is not valid JSON: Token \"bad\""},
	    {sig[0], "signal payload holds a character jsonb cannot store (\\u0000"},
	    {sig[1], "signal payload is not valid JSON"},
	    {sig[2], "invalid byte sequence for encoding \"UTF8\": 0xff"},
	    {"SELECT cairn.enqueue('noop', E'\"\\xff\\xfe\"')",
	     "invalid byte sequence for encoding \"UTF8\": 0xff"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		PGresult *r = PQexec(conn, bad[i].sql);
		cr_assert(PQresultStatus(r) == PGRES_FATAL_ERROR, "expected %s to fail",
		          bad[i].sql);
		const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
		cr_assert(strstr(msg, bad[i].says), "%s says \"%s\", not \"%s\"", bad[i].sql, msg,
		          bad[i].says);
		/* A cairn argument error, as the other bad arguments. */
		if (i < 6)
			cr_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "22023", "%s",
			                 bad[i].sql);
		PQclear(r);
	}
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 1, "a bad call wrote a run");
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.signals"), 0,
	             "a bad call wrote a signal");
	/* Text, jsonb, NULL and no argument at all are taken as before. */
	tdb_exec(conn,
	         "SELECT cairn.enqueue('noop', '{\"a\": \"\\\\u0000 as text\"}', key => 't')");
	tdb_exec(conn, "SELECT cairn.enqueue('noop', jsonb_build_object('a', 1), key => 'j')");
	tdb_exec(conn, "SELECT cairn.enqueue('noop', NULL, key => 'n')");
	char *in = tdb_str(conn, "SELECT input::text FROM cairn.runs WHERE key = 't'");
	cr_assert_str_eq(in, "{\"a\": \"\\\\u0000 as text\"}");
	free(in);
	in = tdb_str(conn, "SELECT input::text FROM cairn.runs WHERE key = 'n'");
	cr_assert_str_eq(in, "null");
	free(in);
	const char *p[] = {"noop", "{\"from\": \"a parameter\"}"};
	PGresult *r = PQexecParams(conn, "SELECT id FROM cairn.enqueue($1, $2, key => 'p')", 2,
	                           NULL, p, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
	PQclear(r);
	p[1] = "\"\\u0000\"";
	r = PQexecParams(conn, "SELECT id FROM cairn.enqueue($1, $2, key => 'q')", 2, NULL, p, NULL,
	                 NULL, 0);
	cr_assert(strstr(PQresultErrorMessage(r), "input holds"), "%s", PQresultErrorMessage(r));
	PQclear(r);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 5);
}

Test(sql, a_login_role_granted_cairn_client_enqueues_but_cannot_touch_the_tables)
{
	char role[96], sql[512];
	snprintf(role, sizeof role, "client_%s", PQdb(conn));
	snprintf(sql, sizeof sql,
	         "CREATE ROLE %s LOGIN IN ROLE cairn_client; GRANT CONNECT ON DATABASE %s TO %s",
	         role, PQdb(conn), role);
	tdb_exec(conn, sql);
	char url[2200];
	snprintf(url, sizeof url, "%s user=%s", db, role);
	PGconn *app = tdb_connect(url);
	int64_t id = tdb_int(app, "SELECT id FROM cairn.enqueue('noop', '{\"a\": 1}')");
	cr_assert_gt(id, 0);
	cr_assert_eq(tdb_int(app, "SELECT count(*) FROM cairn.run_view"), 1);
	/* Called on its own (on Citus a function in a statement over runs runs on
	 * the worker nodes, where cairn.run is not). */
	char sql_run[96];
	snprintf(sql_run, sizeof sql_run, "SELECT (cairn.run(%" PRId64 ")).status", id);
	char *st = tdb_str(app, sql_run);
	cr_assert_str_eq(st, "pending");
	free(st);
	/* The view's columns of runs, also in the table (migration 0036: Citus
	 * reads the shards behind the view with the role's rights); no other. */
	cr_assert_eq(tdb_int(app, "SELECT count(*) FROM cairn.runs WHERE status = 'pending'"), 1);
	static const char *const denied[] = {
	    "SELECT claims FROM cairn.runs",
	    "SELECT * FROM cairn.runs",
	    "UPDATE cairn.runs SET status = 'completed'",
	    "DELETE FROM cairn.messages",
	    "SELECT count(*) FROM cairn.settings",
	    "SELECT cairn.wake('default', 0, 1, true)",
	};
	for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
		char *msg = sql_error(app, denied[i]);
		cr_assert(strstr(msg, "permission denied"), "%s: %s", denied[i], msg);
		free(msg);
	}
	PQfinish(app);
	snprintf(sql, sizeof sql,
	         "REVOKE CONNECT ON DATABASE %s FROM %s; DROP OWNED BY %s; DROP ROLE %s",
	         PQdb(conn), role, role, role);
	tdb_exec(conn, sql);
}

/* ------------------------------------------------------------ shards */

/* The keys of the test: 100,000 on one server; on Citus, where each of
 * cairn.enqueue's calls is a distributed transaction (minutes for 100,000
 * under a loaded run), 5,000, which still land in every part and both
 * nodes: the hashing is the same code, what Citus adds is where each path
 * stores the run. */
static int nkeys(void)
{
	return tdb_on_citus() ? 5000 : 100000;
}

/* Key i: ASCII, Cyrillic, CJK, an emoji and an accent in turn. */
static void key_of(int i, char out[64])
{
	static const char *const forms[] = {"order-%d", "ключ-%d", "鍵%d", "🔑%d", "é%dà"};
	snprintf(out, 64, forms[i % 5], i);
}

/* Every run of workflow lies in the shard hash_shard gives its key. */
static void shards_agree(const char *workflow)
{
	const char *p[] = {workflow};
	PGresult *r = PQexecParams(conn, "SELECT key, shard FROM cairn.runs WHERE workflow = $1", 1,
	                           NULL, p, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
	cr_assert_eq(PQntuples(r), nkeys(), "%s: %d runs", workflow, PQntuples(r));
	for (int i = 0; i < PQntuples(r); i++) {
		const char *key = PQgetvalue(r, i, 0);
		int shard = atoi(PQgetvalue(r, i, 1));
		cr_assert_eq(shard, hash_shard(key, SHARDS),
		             "%s placed \"%s\" in shard %d, C in %d", workflow, key, shard,
		             hash_shard(key, SHARDS));
	}
	PQclear(r);
}

TestSuite(shards, .init = setup, .fini = teardown);

Test(shards, c_sql_and_http_place_every_key_in_the_same_shard)
{
	const int nk = nkeys();
	pid_t w = worker();
	pgarr keys = PGARR_INIT;
	char key[64];
	for (int i = 0; i < nk; i++) {
		key_of(i, key);
		pgarr_add(&keys, key);
	}
	cr_assert(!keys.b.oom);
	/* SQL: the function itself, and through cairn.enqueue. */
	const char *p[] = {pgarr_str(&keys)};
	PGresult *r = PQexecParams(conn,
	                           "SELECT cairn.shard_of(k, 64) FROM unnest($1::text[]) "
	                           "WITH ORDINALITY AS t(k, i) ORDER BY i",
	                           1, NULL, p, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
	cr_assert_eq(PQntuples(r), nk);
	for (int i = 0; i < nk; i++) {
		key_of(i, key);
		cr_assert_eq(atoi(PQgetvalue(r, i, 0)), hash_shard(key, SHARDS),
		             "cairn.shard_of(\"%s\") is %s, hash_shard %d", key,
		             PQgetvalue(r, i, 0), hash_shard(key, SHARDS));
	}
	PQclear(r);
	r = PQexecParams(
	    conn,
	    "SELECT count((cairn.enqueue('via_sql', key => k, shard_group => 'api')).id) "
	    "FROM unnest($1::text[]) k",
	    1, NULL, p, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
	PQclear(r);
	pgarr_free(&keys);
	shards_agree("via_sql");

	/* C: the client's batch. */
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	cairn_enqueue_opts *opts = calloc(nk, sizeof *opts);
	cairn_enqueued *out = calloc(nk, sizeof *out);
	char(*names)[64] = calloc(nk, 64);
	for (int i = 0; i < nk; i++) {
		key_of(i, names[i]);
		opts[i] = (cairn_enqueue_opts){.key = names[i], .group = "api"};
	}
	cr_assert_eq(cairn_enqueue_batch(c, "via_c", nk, opts, out), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cairn_client_free(c);
	shards_agree("via_c");

	/* HTTP: POST /v1/runs, 1000 runs a request. */
	for (int at = 0; at < nk; at += 1000) {
		cJSON *list = cJSON_CreateArray();
		for (int i = at; i < at + 1000; i++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "workflow", "via_http");
			cJSON_AddStringToObject(o, "key", names[i]);
			cJSON_AddStringToObject(o, "group", "api");
			cJSON_AddItemToArray(list, o);
		}
		char *body = cJSON_PrintUnformatted(list), *reply;
		cJSON_Delete(list);
		long st = thttp_send(port, "POST", "/v1/runs", BEARER, body, &reply, NULL);
		tcheck(dump_log, st == 200, "POST /v1/runs: %ld %s", st, reply);
		free(reply);
		free(body);
	}
	shards_agree("via_http");
	free(opts);
	free(out);
	free(names);
	tworker_stop(w, SIGTERM, 20000);
}

/* --------------------------------------------------------------- keys */

TestSuite(keys, .init = setup, .fini = teardown);

/* Returns once the wall clock has moved to its next millisecond. */
static void next_ms(void)
{
	for (int64_t t = clock_unix_ms(); clock_unix_ms() == t;)
		;
}

/* A UUIDv7 as 32 hex digits: 48 bits of Unix ms, version 7, variant 10. */
#define UUIDV7_HEX "'^[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$'"

/* The C client (one run, and a batch) and cairn.enqueue give a run without
 * a key a UUIDv7: its time is the enqueue's, and a key made in a later
 * millisecond sorts after the ones before it. */
Test(keys, a_run_without_a_key_gets_a_uuidv7_so_later_keys_sort_after_earlier_ones)
{
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueue_opts o[3] = {{.input = "{}"}, {.input = "{}"}, {.input = "{}"}};
	cairn_enqueued e[3];
	enum { ROUNDS = 3, RUNS = ROUNDS * 5 };
	for (int round = 0; round < ROUNDS; round++) {
		next_ms();
		cr_assert_eq(cairn_enqueue(c, "keys", &o[0], &e[0]), CAIRN_OK, "%s",
		             cairn_client_errmsg(c));
		cairn_enqueued_clear(&e[0]);
		next_ms();
		cr_assert_eq(cairn_enqueue_batch(c, "keys", 3, o, e), CAIRN_OK, "%s",
		             cairn_client_errmsg(c));
		for (int i = 0; i < 3; i++)
			cairn_enqueued_clear(&e[i]);
		next_ms();
		tdb_exec(conn, "SELECT cairn.enqueue('keys')");
	}
	cairn_client_free(c);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs WHERE key ~ " UUIDV7_HEX), RUNS,
	             "a generated key is not a UUIDv7 in hex");
	cr_assert_eq(
	    tdb_int(conn, "SELECT count(*) FROM cairn.runs WHERE abs(('x' || lpad(left(key, 12), "
	                  "16, '0'))::bit(64)::bigint - extract(epoch FROM created_at) * 1000) "
	                  "< 60000"),
	    RUNS, "a generated key's time is not its run's");
	/* In the order of the enqueues (run ids), each of the 9 calls in a
	 * millisecond of its own: the times never go back, and 9 at least. */
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM (SELECT left(key, 12) AS t, "
	                           "lag(left(key, 12)) OVER (ORDER BY id) AS before "
	                           "FROM cairn.runs) x WHERE t < before"),
	             0, "a key made later sorts before an earlier one");
	cr_assert_geq(tdb_int(conn, "SELECT count(DISTINCT left(key, 12)) FROM cairn.runs"),
	              3 * ROUNDS);
}

/* ------------------------------------------------------------ HTTP */

TestSuite(http_api, .init = setup, .fini = teardown);

/* The number field name of a JSON reply, or -1. */
static int64_t json_int(const char *body, const char *name)
{
	cJSON *o = cJSON_Parse(body);
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	int64_t n = cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
	cJSON_Delete(o);
	return n;
}

/* Method path with body as the test's bearer; the status, the reply in *out. */
static long api(const char *method, const char *path, const char *body, char **out)
{
	return thttp_send(port, method, path, BEARER, body, out, NULL);
}

Test(http_api, the_api_is_off_without_a_token_and_refuses_a_request_without_it)
{
	int p0;
	pid_t w = tworker_start(db, &p0, log_path, "CAIRN_POLL_INTERVAL=1h", NULL);
	char *body;
	cr_assert_eq(
	    thttp_send(p0, "POST", "/v1/runs", NULL, "{\"workflow\": \"noop\"}", &body, NULL), 403);
	cr_assert(strstr(body, "\"error\":\"the HTTP API (/v1) is off: it needs CAIRN_HTTP_TOKEN"),
	          "%s", body);
	free(body);
	tworker_stop(w, SIGTERM, 20000);
	w = worker();
	cr_assert_eq(
	    thttp_send(port, "POST", "/v1/runs", NULL, "{\"workflow\": \"noop\"}", &body, NULL),
	    401);
	free(body);
	cr_assert_eq(thttp_send(port, "POST", "/v1/runs", "Bearer wrong",
	                        "{\"workflow\": \"noop\"}", &body, NULL),
	             401);
	free(body);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 0);
	tworker_stop(w, SIGTERM, 20000);
}

Test(http_api, post_runs_with_the_token_creates_a_run_whose_get_with_wait_returns_its_output)
{
	pid_t w = worker();
	worker_owns_all();
	char *body;
	long st = api("POST", "/v1/runs",
	              "{\"workflow\": \"noop\", \"key\": \"o-1\", \"input\": {\"big\": "
	              "12345678901234567890}}",
	              &body);
	tcheck(dump_log, st == 201, "POST /v1/runs: %ld %s", st, body);
	int64_t id = json_int(body, "id");
	free(body);
	char path[64];
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "?wait=30s", id);
	st = api("GET", path, NULL, &body);
	tcheck(dump_log, st == 200, "GET %s: %ld %s", path, st, body);
	cr_assert(strstr(body, "\"status\":\"completed\""), "%s", body);
	/* The input is kept exact (noop's cJSON output is a double's). */
	cr_assert(strstr(body, "\"input\":{\"big\": 12345678901234567890}"), "%s", body);
	cr_assert(strstr(body, "\"output\":{\"big\": 1234567890123456"), "%s", body);
	free(body);
	st = api("POST", "/v1/runs", "{\"workflow\": \"noop\", \"key\": \"o-1\"}", &body);
	cr_assert_eq(st, 200, "%s", body);
	cr_assert(strstr(body, "\"existed\":true"), "%s", body);
	cr_assert_eq(json_int(body, "id"), id);
	free(body);
	tworker_stop(w, SIGTERM, 20000);
}

Test(http_api, a_run_of_a_workflow_never_served_comes_with_a_warning_and_require_served_refuses_it)
{
	pid_t w = worker();
	worker_owns_all();
	char *body;
	long st = api("POST", "/v1/runs", "{\"workflow\": \"ghost\"}", &body);
	tcheck(dump_log, st == 201, "POST /v1/runs: %ld %s", st, body);
	cr_assert(strstr(body, "\"warning\":\"no worker has ever served workflow \\\"ghost\\\""),
	          "%s", body);
	free(body);
	st = api("POST", "/v1/runs", "{\"workflow\": \"noop\"}", &body);
	cr_assert_eq(st, 201, "%s", body);
	cr_assert_null(strstr(body, "warning"), "the worker serves noop: %s", body);
	free(body);
	st = api("POST", "/v1/runs", "[{\"workflow\": \"ghost\"}, {\"workflow\": \"ghost\"}]",
	         &body);
	cr_assert_eq(st, 200, "%s", body);
	cr_assert(strstr(body, "\"warning\":\"no worker has ever served workflow"), "%s", body);
	free(body);
	int64_t before = tdb_int(conn, "SELECT count(*) FROM cairn.runs");
	st = api("POST", "/v1/runs", "{\"workflow\": \"typo\", \"require_served\": true}", &body);
	cr_assert_eq(st, 404, "%s", body);
	cr_assert(strstr(body, "workflow \\\"typo\\\"") && strstr(body, "refused"), "%s", body);
	free(body);
	st =
	    api("POST", "/v1/runs", "{\"workflow\": \"noop\", \"require_served\": \"yes\"}", &body);
	cr_assert_eq(st, 400, "%s", body);
	cr_assert(strstr(body, "require_served is a JSON string"), "%s", body);
	free(body);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), before, "a refusal wrote");
	st = api("POST", "/v1/runs", "{\"workflow\": \"noop\", \"require_served\": true}", &body);
	cr_assert_eq(st, 201, "%s", body);
	free(body);
	tworker_stop(w, SIGTERM, 20000);
}

Test(http_api, bad_requests_get_json_errors_naming_the_field_and_write_nothing)
{
	pid_t w = worker();
	static const struct {
		const char *method, *path, *body;
		long status;
		const char *says;
	} bad[] = {
	    {"POST", "/v1/runs", "{\"workflow\": \"no pe\"}", 400,
	     "invalid workflow \\\"no pe\\\""},
	    {"POST", "/v1/runs", "{\"input\": 1}", 400, "workflow is missing"},
	    {"POST", "/v1/runs", "{\"workflow\": \"noop\", \"dealy\": \"1s\"}", 400,
	     "unknown field dealy"},
	    {"POST", "/v1/runs", "{\"workflow\": \"noop\", \"delay\": \"soon\"}", 400,
	     "invalid delay"},
	    {"POST", "/v1/runs", "{\"workflow\": 7}", 400, "workflow is a JSON number"},
	    {"POST", "/v1/runs", "{\"workflow\": \"noop\", \"max_attempts\": 0}", 400,
	     "invalid max_attempts"},
	    {"POST", "/v1/runs", "{not json", 400, "the body is not valid JSON"},
	    {"POST", "/v1/runs", "[{\"workflow\": \"a\"}, {\"workflow\": \"b\"}]", 400,
	     "runs[1]: its workflow is \\\"b\\\", not \\\"a\\\""},
	    {"GET", "/v1/runs", NULL, 405, "use POST"},
	    {"GET", "/v1/runs/1?wait=2h", NULL, 400, "invalid wait"},
	    {"GET", "/v1/runs/999999", NULL, 404, "run 999999 not found"},
	    {"GET", "/v1/nothing", NULL, 404, "not found"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *body;
		long st = api(bad[i].method, bad[i].path, bad[i].body, &body);
		cr_assert_eq(st, bad[i].status, "%s %s %s: %ld %s", bad[i].method, bad[i].path,
		             bad[i].body, st, body);
		cr_assert(strncmp(body, "{\"error\":", 9) == 0 && strstr(body, bad[i].says),
		          "%s %s %s: %s (wanted %s)", bad[i].method, bad[i].path, bad[i].body, body,
		          bad[i].says);
		free(body);
	}
	size_t n = 2 * 1024 * 1024;
	char *huge = malloc(n + 64);
	snprintf(huge, 64, "{\"workflow\": \"noop\", \"input\": \"");
	size_t at = strlen(huge);
	memset(huge + at, 'x', n);
	strcpy(huge + at + n, "\"}");
	char *body;
	cr_assert_eq(api("POST", "/v1/runs", huge, &body), 413, "%s", body);
	free(body);
	free(huge);
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 0);
	tworker_stop(w, SIGTERM, 20000);
}

/*
 * Before, PostgreSQL refused such a body as it split it: 503, which a
 * client retries, with PostgreSQL's message; with the worker's keys a
 * signal's payload never reached PostgreSQL and was stored sealed.
 */
Test(http_api, text_that_is_not_utf8_or_holds_nul_gets_400_naming_the_field_and_writes_nothing)
{
	static const char *const keys[] = {
	    NULL, "CAIRN_ENCRYPTION_KEYS=k1=q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="};
	for (size_t k = 0; k < 2; k++) {
		pid_t w = tworker_start(db, &port, log_path, "CAIRN_POLL_INTERVAL=1h",
		                        "CAIRN_HTTP_TOKEN=" TOKEN, keys[k], NULL);
		char *body, path[96];
		long st =
		    api("POST", "/v1/runs", "{\"workflow\": \"noop\", \"group\": \"idle\"}", &body);
		cr_assert_eq(st, 201, "%s", body);
		int64_t id = json_int(body, "id");
		free(body);
		int64_t runs = tdb_int(conn, "SELECT count(*) FROM cairn.runs");
		snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/signals/go", id);
		static const char nul_body[] = "{\"workflow\": \"noop\"}\0 and more";
		static const char nul_payload[] = "\"ok\"\0 and more";
		const struct {
			const char *path, *body;
			size_t len;
			const char *says;
		} bad[] = {
		    {"/v1/runs", "{\"workflow\": \"noop\", \"input\": \"\xff\xfe\"}", 0,
		     "the body is not valid UTF-8 (0xff) at byte 32, in $.input:"},
		    {"/v1/runs", "{\"workflow\": \"noop\", \"input\": {\"a\": \"x\\u0000y\"}}", 0,
		     "the body holds \\\\u0000 (the NUL character) at byte 39, in $.input.a:"},
		    {"/v1/runs",
		     "[{\"workflow\": \"noop\"}, {\"workflow\": \"noop\", \"key\": \"k\xc3\"}]", 0,
		     "in $[1].key:"},
		    {"/v1/runs", nul_body, sizeof nul_body - 1,
		     "the body holds a NUL byte at byte 21"},
		    {path, "\"\xff\xfe\"", 0, "signal payload is not valid UTF-8 (0xff) at byte 2"},
		    {path, "{\"by\": \"\\u0000\"}", 0,
		     "signal payload holds \\\\u0000 (the NUL character) at byte 9, in $.by:"},
		    {path, nul_payload, sizeof nul_payload - 1,
		     "signal payload holds a NUL byte at byte 5"},
		};
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			size_t len = bad[i].len ? bad[i].len : strlen(bad[i].body);
			st = thttp_send_n(port, "POST", bad[i].path, BEARER, bad[i].body, len,
			                  &body, NULL);
			cr_assert_eq(st, 400, "case %zu (%s): %ld %s", i,
			             keys[k] ? "keys" : "no keys", st, body);
			cr_assert(strncmp(body, "{\"error\":", 9) == 0 && strstr(body, bad[i].says),
			          "case %zu: %s (wanted %s)", i, body, bad[i].says);
			cJSON *o = cJSON_Parse(body);
			cr_assert(o, "case %zu: the reply is not JSON: %s", i, body);
			cJSON_Delete(o);
			free(body);
		}
		cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), runs,
		             "a refused body wrote a run");
		cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.signals"), 0,
		             "a refused body wrote a signal");
		tworker_stop(w, SIGTERM, 20000);
	}
}

Test(http_api, signal_cancel_and_retry_change_the_run_and_refuse_what_cannot_be_done)
{
	pid_t w = worker();
	char *body, path[96];
	/* In a group no worker serves, and not due for an hour: nothing runs
	 * it while the test changes it (a due run of a group no worker serves
	 * is moved by the janitor to one that serves its workflow, and ran). */
	long st = api("POST", "/v1/runs",
	              "{\"workflow\": \"noop\", \"group\": \"idle\", \"delay\": \"1h\"}", &body);
	cr_assert_eq(st, 201, "%s", body);
	int64_t id = json_int(body, "id");
	free(body);
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/signals/approved", id);
	cr_assert_eq(api("POST", path, "{\"by\": \"ann\"}", &body), 202, "%s", body);
	cr_assert(strstr(body, "\"signal\":\"approved\",\"delivered\":true"), "%s", body);
	free(body);
	cr_assert_eq(tdb_intf(conn,
	                      "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64
	                      " AND payload = '{\"by\": \"ann\"}'",
	                      id),
	             1);
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/cancel", id);
	cr_assert_eq(api("POST", path, NULL, &body), 202, "%s", body);
	free(body);
	cr_assert_eq(api("POST", path, NULL, &body), 409, "%s", body);
	cr_assert(strstr(body, "it has already finished"), "%s", body);
	free(body);
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/retry", id);
	cr_assert_eq(api("POST", path, NULL, &body), 202, "%s", body);
	free(body);
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/signals/bad%%20name", id);
	cr_assert_eq(api("POST", path, "null", &body), 400, "%s", body);
	free(body);
	tworker_stop(w, SIGTERM, 20000);
}

/* ---------------------------------------------------------- examples */

TestSuite(examples, .init = setup, .fini = teardown);

/* The repository's top directory: $CAIRN_SQL_DIR is TOP/sql/migrations. */
static const char *top_dir(void)
{
	static char top[1024];
	snprintf(top, sizeof top, "%s/../..", getenv("CAIRN_SQL_DIR"));
	return top;
}

/* Runs an example (argv) as a login role granted cairn_client, against a
 * worker, LISTENing on cairn_wake meanwhile: it rolls back one order and
 * its run, commits another and waits for its result. Every wake-up sent
 * must name the committed run: the rolled-back enqueue woke nobody. */
static void run_example(const char *const *argv, const char *node_path)
{
	char role[96], sql[512];
	snprintf(role, sizeof role, "app_%s", PQdb(conn));
	snprintf(sql, sizeof sql,
	         "CREATE ROLE %s LOGIN IN ROLE cairn_client; GRANT CONNECT ON DATABASE %s TO %s; "
	         "GRANT CREATE ON SCHEMA public TO %s",
	         role, PQdb(conn), role, role);
	tdb_exec(conn, sql);
	pid_t w = worker();
	worker_owns_all();
	tdb_exec(conn, "LISTEN cairn_wake");
	char host[512], pgport[64], dbname[128], user[128], path[1100];
	snprintf(host, sizeof host, "PGHOST=%s", PQhost(conn));
	snprintf(pgport, sizeof pgport, "PGPORT=%s", PQport(conn));
	snprintf(dbname, sizeof dbname, "PGDATABASE=%s", PQdb(conn));
	snprintf(user, sizeof user, "PGUSER=%s", role);
	snprintf(path, sizeof path, "NODE_PATH=%s", node_path ? node_path : "");
	const char *env[] = {"DATABASE_URL", host, pgport, dbname, user, path, NULL};
	char *out, *err;
	int rc = trun(argv, env, &out, &err);
	tcheck(dump_log, rc == 0, "%s exited %d:\n%s\n%s", argv[1], rc, out, err);
	cr_assert(strstr(out, "rolled back: 0 orders, 0 new runs"), "%s", out);
	const char *at = strstr(out, ": run ");
	cr_assert(at && strstr(at, " completed output {"), "%s", out);
	int64_t id = strtoll(at + 6, NULL, 10);
	char tail[32];
	snprintf(tail, sizeof tail, " %" PRId64, id);
	int wakes = 0;
	for (char *note; (note = tdb_next_notification(conn, wakes ? 0 : DEADLINE)); wakes++) {
		size_t n = strlen(note), t = strlen(tail);
		cr_assert(n > t && strcmp(note + n - t, tail) == 0,
		          "a wake-up \"%s\" that is not of the committed run %" PRId64, note, id);
		free(note);
	}
	cr_assert_gt(wakes, 0, "the committed run woke nobody");
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.runs"), 1);
	free(out);
	free(err);
	tworker_stop(w, SIGTERM, 20000);
	snprintf(sql, sizeof sql, "DROP OWNED BY %s; DROP ROLE %s", role, role);
	tdb_exec(conn, "DROP TABLE shop_orders");
	tdb_exec(conn, sql);
}

Test(examples, the_python_example_rolls_back_then_commits_an_order_and_its_run)
{
	char script[1100];
	snprintf(script, sizeof script, "%s/workers/examples/python/enqueue_order.py", top_dir());
	const char *argv[] = {"/usr/bin/python3", script, NULL};
	run_example(argv, NULL);
}

Test(examples, the_node_example_rolls_back_then_commits_an_order_and_its_run)
{
	/* npm ci into the build directory, once per package-lock.json. */
	char dir[1100], cmd[4096], script[1100], modules[1200];
	snprintf(dir, sizeof dir, "%s/../node-example", getenv("CAIRN_BIN_DIR"));
	snprintf(
	    cmd, sizeof cmd,
	    "set -e; mkdir -p '%s'; cd '%s'; src='%s/workers/examples/node'; "
	    "if ! cmp -s \"$src/package-lock.json\" package-lock.json || "
	    "[ ! -d node_modules/pg ]; then cp \"$src/package.json\" \"$src/package-lock.json\" .; "
	    "npm ci --no-audit --no-fund; fi",
	    dir, dir, top_dir());
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	char *out, *err;
	int rc = trun(sh, NULL, &out, &err);
	cr_assert_eq(rc, 0, "npm ci failed:\n%s\n%s", out, err);
	free(out);
	free(err);
	snprintf(script, sizeof script, "%s/workers/examples/node/enqueue_order.js", top_dir());
	snprintf(modules, sizeof modules, "%s/node_modules", dir);
	const char *argv[] = {"/usr/bin/env", "node", script, NULL};
	run_example(argv, modules);
}

typedef struct long_poll {
	const char *path;
	long status;
	char *body;
	int64_t took_ms;
} long_poll;

static void *long_poll_main(void *arg)
{
	long_poll *p = arg;
	int64_t t0 = tnow_ms();
	p->status = api("GET", p->path, NULL, &p->body);
	p->took_ms = tnow_ms() - t0;
	return NULL;
}

Test(http_api, a_long_poll_answers_at_the_end_of_its_wait_and_blocks_no_other_request)
{
	pid_t w = worker();
	char *body;
	cr_assert_eq(api("POST", "/v1/runs", "{\"workflow\": \"noop\", \"delay\": \"1h\"}", &body),
	             201, "%s", body);
	char path[96], plain[96];
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "?wait=3s", json_int(body, "id"));
	snprintf(plain, sizeof plain, "/v1/runs/%" PRId64, json_int(body, "id"));
	free(body);
	long_poll p = {.path = path};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, long_poll_main, &p), 0);
	/* While it waits, the worker answers the others. */
	int64_t t0 = tnow_ms();
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(thttp(port, "GET", "/healthz", NULL, NULL), 200);
		cr_assert_eq(api("GET", plain, NULL, &body), 200, "%s", body);
		free(body);
	}
	int64_t others_ms = tnow_ms() - t0;
	pthread_join(t, NULL);
	cr_assert_eq(p.status, 200, "%s", p.body);
	cr_assert(strstr(p.body, "\"status\":\"pending\""), "%s", p.body);
	cr_assert(p.took_ms >= 2900, "the long poll answered after %" PRId64 " ms", p.took_ms);
	cr_assert(others_ms < p.took_ms,
	          "the other requests took %" PRId64 " ms, the poll %" PRId64, others_ms,
	          p.took_ms);
	free(p.body);
	tworker_stop(w, SIGTERM, 20000);
}
