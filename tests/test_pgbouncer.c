/* test_pgbouncer.c - cairn through a real PgBouncer (Debian's pgbouncer,
 * started by the test itself): session pooling works for workers and
 * clients; transaction pooling makes cairn-worker refuse at start, while the
 * CLI and the client API keep working through it. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

static tpgbouncer pgb;
static pid_t worker_pid;
static char worker_log[64];

static void fini(void)
{
	if (worker_pid > 0)
		tworker_stop(worker_pid, SIGKILL, 5000);
	worker_pid = 0;
	tpgbouncer_stop(&pgb);
}

TestSuite(pgbouncer, .fini = fini);

static void show_log(void)
{
	char *text = worker_log[0] ? tfile_read(worker_log) : NULL;
	fprintf(stderr, "worker log:\n%s\n", text ? text : "");
	free(text);
}

/* A worker with the test workflows on url, ready (attached, shards taken). */
static void worker_start(const char *url)
{
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(worker_log);
	int port;
	worker_pid = tworker_start(
	    url, &port, worker_log, "CAIRN_POLL_INTERVAL=100ms", "CAIRN_HEARTBEAT_INTERVAL=200ms",
	    "CAIRN_REBALANCE_INTERVAL=200ms", "CAIRN_RUNNER_TTL=2s", plugins, NULL);
	tcheck(show_log, thttp_wait(port, "/readyz", 200, 20000), "worker never became ready");
}

static void worker_stop(void)
{
	int rc = tworker_stop(worker_pid, SIGTERM, 15000);
	worker_pid = 0;
	tcheck(show_log, rc == 0, "worker exit %d after SIGTERM", rc);
	unlink(worker_log);
}

static int64_t cli_id(const char *url, const char *const *argv)
{
	char *out, *err;
	int rc = tcli_argv(url, &out, &err, argv);
	cr_assert_eq(rc, 0, "cairn %s: exit %d: %s", argv[0], rc, err);
	int64_t id = strtoll(out, NULL, 10);
	cr_assert_gt(id, 0, "cairn %s printed %s", argv[0], out);
	free(out);
	free(err);
	return id;
}

Test(pgbouncer, session_pooling_worker_completes_a_run_the_cli_enqueues_and_waits_for)
{
	const char *db = tdb_new_migrated_shards(64);
	const char *url = tpgbouncer_start(&pgb, "session", db);
	worker_start(url);
	char *out, *err;
	int rc = tcli(url, &out, &err, "enqueue", "noop", "--input", "{\"through\": \"session\"}",
	              "--wait", "--timeout", "30s", NULL);
	tcheck(show_log, rc == 0, "enqueue --wait: exit %d: %s", rc, err);
	cr_assert(strstr(out, "\"through\"") && strstr(out, "\"session\""),
	          "enqueue --wait printed %s", out);
	free(out);
	free(err);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"), 1);
	PQfinish(c);
	worker_stop();
}

/* A worker through pooling `mode` exits 1 at start, its log naming each of
 * `says` (NULL-terminated) and pool_mode = session, and leaves no runner and
 * no owned shard; returns a connection to its database for more checks. */
static PGconn *refuses_at_start(const char *mode, const char *const *says)
{
	const char *db = tdb_new_migrated_shards(64);
	const char *url = tpgbouncer_start(&pgb, mode, db);
	tlog_file(worker_log);
	worker_pid = tworker_spawn(url, worker_log, NULL);
	int rc = tworker_stop(worker_pid, 0, 30000);
	worker_pid = 0;
	char *text = tfile_read(worker_log);
	cr_assert_eq(rc, 1, "exit %d; log:\n%s", rc, text);
	for (; *says; says++)
		cr_assert(strstr(text, *says), "%s", text);
	cr_assert(strstr(text, "pool_mode = session"), "%s", text);
	cr_assert(!strstr(text, "cairn-worker started"), "%s", text);
	free(text);
	unlink(worker_log);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runners"), 0);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.shard_leases WHERE owner IS NOT NULL"),
	             0);
	return c;
}

Test(pgbouncer, transaction_pooling_worker_refuses_at_start_naming_the_problem_and_takes_no_shard)
{
	static const char *const says[] = {"pooler in transaction (or statement) pooling mode",
	                                   "needs a session-pooled or direct connection", NULL};
	PQfinish(refuses_at_start("transaction", says));
}

/* `cairn status RUN --json` says the run's status is want. */
static int status_is(const char *url, int64_t id, const char *want)
{
	char ref[24], *out, *err;
	snprintf(ref, sizeof ref, "%" PRId64, id);
	int rc = tcli(url, &out, &err, "status", ref, "--json", NULL);
	cr_assert_eq(rc, 0, "status %s: exit %d: %s", ref, rc, err);
	cJSON *j = cJSON_Parse(out);
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
	int ok = cJSON_IsString(st) && strcmp(st->valuestring, want) == 0;
	if (!ok)
		fprintf(stderr, "status %s: want %s: %s\n", ref, want, out);
	cJSON_Delete(j);
	free(out);
	free(err);
	return ok;
}

Test(pgbouncer, transaction_pooling_cli_migrates_enqueues_signals_cancels_and_waits)
{
	const char *db = tdb_new();
	const char *url = tpgbouncer_start(&pgb, "transaction", db);
	char *out, *err;
	int rc = tcli(url, &out, &err, "migrate", "--shards", "64", NULL);
	cr_assert_eq(rc, 0, "migrate through transaction pooling: exit %d: %s", rc, err);
	free(out);
	free(err);
	worker_start(db); /* the worker connects directly */

	/* enqueue --wait polls through the pooler and returns the output. */
	rc = tcli(url, &out, &err, "enqueue", "noop", "--input", "{\"through\": \"transaction\"}",
	          "--wait", "--timeout", "30s", NULL);
	tcheck(show_log, rc == 0, "enqueue --wait: exit %d: %s", rc, err);
	cr_assert(strstr(out, "\"transaction\""), "enqueue --wait printed %s", out);
	free(out);
	free(err);

	/* A run waiting for a signal: signal it, then result --wait. */
	const char *enq[] = {"enqueue", "t.await", "--key", "sig", "--input", "{\"name\": \"go\"}",
	                     NULL};
	int64_t id = cli_id(url, enq);
	char ref[24];
	snprintf(ref, sizeof ref, "%" PRId64, id);
	rc = tcli(url, &out, &err, "signal", ref, "go", "--input", "{\"n\": 7}", NULL);
	cr_assert_eq(rc, 0, "signal: exit %d: %s", rc, err);
	free(out);
	free(err);
	rc = tcli(url, &out, &err, "result", ref, "--wait", "--timeout", "30s", NULL);
	tcheck(show_log, rc == 0, "result --wait: exit %d: %s", rc, err);
	cr_assert(strstr(out, "\"n\"") && strstr(out, "7"), "result printed %s", out);
	free(out);
	free(err);
	cr_assert(status_is(url, id, "completed"));

	/* A run that has not started (due in an hour): cancel, then status. */
	const char *late[] = {"enqueue", "noop", "--key", "late", "--delay", "1h", NULL};
	id = cli_id(url, late);
	snprintf(ref, sizeof ref, "%" PRId64, id);
	rc = tcli(url, &out, &err, "cancel", ref, NULL);
	cr_assert_eq(rc, 0, "cancel: exit %d: %s", rc, err);
	free(out);
	free(err);
	cr_assert(status_is(url, id, "cancelled"));
	rc = tcli(url, &out, &err, "result", ref, "--wait", "--timeout", "10s", NULL);
	cr_assert_eq(rc, 1, "result of a cancelled run: exit %d: %s", rc, err);
	free(out);
	free(err);
	worker_stop();
}

Test(pgbouncer, transaction_pooling_client_api_enqueues_signals_cancels_and_waits)
{
	const char *db = tdb_new_migrated_shards(64);
	const char *url = tpgbouncer_start(&pgb, "transaction", db);
	worker_start(db);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(url, &c), CAIRN_OK, "%s", cairn_client_errmsg(c));

	cairn_enqueued e;
	cairn_enqueue_opts o = {.input = "{\"api\": 1}"};
	cr_assert_eq(cairn_enqueue(c, "noop", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueued_clear(&e);
	int rc = cairn_run_wait(c, e.id, 30000);
	tcheck(show_log, rc == CAIRN_OK, "run_wait: %s", cairn_client_errmsg(c));
	cairn_run *r;
	cr_assert_eq(cairn_run_get(c, e.id, &r), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_str_eq(r->status, "completed");
	cr_assert(strstr(r->output, "\"api\""), "%s", r->output);
	cairn_run_free(r);

	o = (cairn_enqueue_opts){.key = "sig", .input = "{\"name\": \"go\"}"};
	cr_assert_eq(cairn_enqueue(c, "t.await", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueued_clear(&e);
	cr_assert_eq(cairn_signal(c, e.id, "go", "{\"n\": 8}"), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	rc = cairn_run_wait(c, e.id, 30000);
	tcheck(show_log, rc == CAIRN_OK, "run_wait: %s", cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_get(c, e.id, &r), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_str_eq(r->status, "completed");
	cr_assert(strstr(r->output, "8"), "%s", r->output);
	cairn_run_free(r);

	o = (cairn_enqueue_opts){.key = "late", .delay_ms = 3600000};
	cr_assert_eq(cairn_enqueue(c, "noop", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueued_clear(&e);
	cr_assert_eq(cairn_cancel(c, e.id), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_wait(c, e.id, 10000), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_get(c, e.id, &r), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_str_eq(r->status, "cancelled");
	cairn_run_free(r);

	/* A wait that times out says so. */
	o = (cairn_enqueue_opts){.key = "never", .input = "{\"name\": \"nobody\"}"};
	cr_assert_eq(cairn_enqueue(c, "t.await", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueued_clear(&e);
	cr_assert_eq(cairn_run_wait(c, e.id, 300), CAIRN_ETIMEOUT, "%s", cairn_client_errmsg(c));
	cairn_client_free(c);
	worker_stop();
}

Test(pgbouncer, transaction_pooling_worker_started_while_unreachable_refuses_to_attach_later)
{
	const char *db = tdb_new_migrated_shards(64);
	const char *url = tpgbouncer_start(&pgb, "transaction", db);
	PGconn *c = tdb_connect(db);
	char *name = tdb_str(c, "SELECT current_database()");
	char cmd[160];
	/* The pooler refuses new clients of the database: the start's check
	 * cannot connect and is left to the supervisor. */
	snprintf(cmd, sizeof cmd, "DISABLE %s", name);
	tpgbouncer_admin(&pgb, cmd);
	tlog_file(worker_log);
	int port;
	worker_pid = tworker_start(url, &port, worker_log, "CAIRN_HEARTBEAT_INTERVAL=200ms", NULL);
	tcheck(show_log, tfile_wait(worker_log, "database unreachable", 20000),
	       "the worker never found the database unreachable");
	snprintf(cmd, sizeof cmd, "ENABLE %s", name);
	tpgbouncer_admin(&pgb, cmd);
	tcheck(show_log, tfile_wait(worker_log, "refusing to attach", 20000),
	       "the worker never refused the transaction pooler");
	char *body = NULL;
	long st = thttp(port, "GET", "/readyz", &body, NULL);
	cr_assert_eq(st, 503, "/readyz %ld", st);
	cr_assert(strstr(body, "refusing to attach") && strstr(body, "pool_mode = session"), "%s",
	          body);
	free(body);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runners"), 0);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.shard_leases WHERE owner IS NOT NULL"),
	             0);
	free(name);
	PQfinish(c);
	worker_stop();
}

/* Statement pooling refuses BEGIN: the check must read that as a pooler in
 * statement mode, not as a check it could not make (the worker then started
 * and its advisory locks stayed on pooled server sessions after it exited). */
Test(pgbouncer, statement_pooling_worker_refuses_at_start_naming_the_mode_and_takes_no_shard)
{
	static const char *const says[] = {"pooler in statement pooling mode", NULL};
	PGconn *c = refuses_at_start("statement", says);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
	                        "database = (SELECT oid FROM pg_database WHERE datname = "
	                        "current_database())"),
	             0);
	PQfinish(c);
}
