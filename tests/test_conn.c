/*
 * test_conn.c - half-open connections: a worker whose connections go
 * silent without closing (tests/proxy.c freezes them, as a network
 * partition or a NAT that dropped its state would) must not keep its shards
 * or make the others wait. Real cairn-worker processes with the workflows of
 * tests/plugin_flows.so; the frozen worker reaches PostgreSQL through the
 * proxy, every other connection goes direct. Every wait is a condition
 * polled with a deadline; the measured times are printed.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "db.h"
#include "proxy.h"
#include "support.h"

#define TTL_MS 2000
#define SHARDS 16
/* The tables t.replay writes (see plugin_flows.c). */
#define REPLAY_TABLES                                                                              \
	"CREATE TABLE t_counter (run_id bigint PRIMARY KEY, n integer NOT NULL);"                  \
	"CREATE TABLE t_flags (run_id bigint NOT NULL);"

typedef struct wk {
	pid_t pid;
	int port;
	char log[64];
} wk;

static wk ws[2];
static tproxy *proxy;

static void dump_logs(void)
{
	for (int i = 0; i < 2; i++) {
		if (!ws[i].log[0])
			continue;
		char *text = tfile_read(ws[i].log);
		fprintf(stderr, "---- worker %d (pid %d) log\n%s", i, (int)ws[i].pid, text);
		free(text);
	}
}

/* cr_assert that first prints the workers' logs, so a failure explains itself. */
#define check(cond, ...) tcheck(dump_logs, cond, __VA_ARGS__)

/* Kills what a test left running; thaws the proxy first, so that nothing
 * waits on it, then stops it. */
static void fini(void)
{
	if (proxy)
		tproxy_thaw(proxy);
	for (int i = 0; i < 2; i++) {
		if (ws[i].pid > 0)
			tworker_stop(ws[i].pid, SIGKILL, 5000);
		if (ws[i].log[0])
			unlink(ws[i].log);
	}
	memset(ws, 0, sizeof ws);
	tproxy_stop(proxy);
	proxy = NULL;
}

TestSuite(conn, .fini = fini);

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	fprintf(stderr, "test_conn: %s\n", line);
}

/* Starts worker i on db (direct or through the proxy) with short leases and
 * the test workflows; extra is one more NAME=value or NULL. Waits for it to
 * be ready. */
static void start(int i, const char *db, const char *extra)
{
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(ws[i].log);
	ws[i].pid = tworker_start(db, &ws[i].port, ws[i].log, "CAIRN_HEARTBEAT_INTERVAL=200ms",
	                          "CAIRN_RUNNER_TTL=2s", "CAIRN_REBALANCE_INTERVAL=200ms",
	                          "CAIRN_REBALANCE_DEBOUNCE=50ms", "CAIRN_POLL_INTERVAL=100ms",
	                          "CAIRN_SHUTDOWN_TIMEOUT=5s", plugins, extra, NULL);
	check(thttp_wait(ws[i].port, "/readyz", 200, 20000), "worker %d never became ready", i);
}

static int64_t runner_id(PGconn *c, int i)
{
	return tdb_intf(c, "SELECT max(id) FROM cairn.runners WHERE name LIKE '%%:%d'",
	                (int)ws[i].pid);
}

typedef struct healthz_want {
	int port;
	long status;
	const char *text;
} healthz_want;

static int healthz_is(void *arg)
{
	healthz_want *h = arg;
	char *body = NULL;
	long st = thttp(h->port, "GET", "/healthz", &body, NULL);
	int ok = st == h->status && (!h->text || (body && strstr(body, h->text)));
	free(body);
	return ok;
}

/* The value libpq uses for keyword on c. */
static char *conn_option(PGconn *c, const char *keyword)
{
	char *v = NULL;
	PQconninfoOption *o = PQconninfo(c);
	for (PQconninfoOption *p = o; p && p->keyword; p++)
		if (strcmp(p->keyword, keyword) == 0 && p->val)
			v = strdup(p->val);
	PQconninfoFree(o);
	return v;
}

static void option_is(PGconn *c, const char *keyword, const char *want)
{
	char *v = conn_option(c, keyword);
	cr_assert(v && strcmp(v, want) == 0, "%s is %s, expected %s", keyword, v ? v : "unset",
	          want);
	free(v);
}

/* db_connect is the one place connections are opened (client, CLI and
 * worker alike): keepalives and a user timeout, which the URL may override;
 * db_session_limits puts the worker's timeouts (and what its flags ask
 * for) on the session. */
Test(conn, every_connection_sets_keepalives_and_a_user_timeout_that_the_url_may_override)
{
	const char *db = tdb_new();
	buf err = BUF_INIT;
	PGconn *c = db_connect(db, "test", &err);
	cr_assert(c, "%s", buf_str(&err));
	option_is(c, "keepalives", "1");
	option_is(c, "keepalives_idle", "5");
	option_is(c, "keepalives_interval", "2");
	option_is(c, "keepalives_count", "3");
	option_is(c, "tcp_user_timeout", "10000");
	const char *show = "SELECT current_setting('statement_timeout') || ' ' || "
	                   "current_setting('lock_timeout') || ' ' || "
	                   "current_setting('plan_cache_mode') || ' ' || "
	                   "current_setting('synchronous_commit')";
	cr_assert_eq(db_session_limits(c, 1500, 700, 0, &err), 0, "%s", buf_str(&err));
	char *st = tdb_str(c, show);
	cr_assert_str_eq(st, "1500ms 700ms auto on");
	free(st);
	cr_assert_eq(db_session_limits(c, 1500, 700,
	                               DB_SESSION_GENERIC_PLANS | DB_SESSION_NO_DISK_WAIT, &err),
	             0, "%s", buf_str(&err));
	st = tdb_str(c, show);
	cr_assert_str_eq(st, "1500ms 700ms force_generic_plan off");
	free(st);
	PQfinish(c);

	char url[2300];
	snprintf(url, sizeof url, "%s keepalives_idle=30 tcp_user_timeout=2500", db);
	c = db_connect(url, "test", &err);
	cr_assert(c, "%s", buf_str(&err));
	option_is(c, "keepalives_idle", "30");
	option_is(c, "tcp_user_timeout", "2500");
	option_is(c, "keepalives_count", "3");
	PQfinish(c);
	buf_free(&err);
}

/* db_prepare: the statements of a connection that starts are prepared in
 * one transaction (each PQprepare would be one), and a statement the
 * server refuses says why and leaves the connection usable. */
Test(conn, db_prepare_prepares_every_statement_in_one_transaction_and_reports_a_refused_one)
{
	const char *db = tdb_new();
	buf err = BUF_INIT;
	PGconn *c = db_connect(db, "test", &err);
	cr_assert(c, "%s", buf_str(&err));
	/* The database's transactions, this session's flushed to the count
	 * first (the read itself is one more); the fewest of three tries, as
	 * autovacuum may add its own. */
	const char *count = "SELECT xact_commit FROM pg_stat_database "
	                    "WHERE datname = current_database()";
	int64_t fewest = INT64_MAX;
	for (int t = 0; t < 3; t++) {
		char name[3][32];
		db_stmt ok[3];
		for (int i = 0; i < 3; i++) {
			snprintf(name[i], sizeof name[i], "s%d_%d", t, i);
			ok[i] = (db_stmt){name[i], "SELECT $1::int + 1"};
		}
		PQclear(PQexec(c, "SELECT pg_stat_force_next_flush()"));
		int64_t before = tdb_int(c, count);
		cr_assert_eq(db_prepare(c, ok, 3, &err), 0, "%s", buf_str(&err));
		PQclear(PQexec(c, "SELECT pg_stat_force_next_flush()"));
		int64_t took = tdb_int(c, count) - before - 2; /* the read and the flush */
		fewest = took < fewest ? took : fewest;
	}
	cr_assert_eq(fewest, 1, "preparing 3 statements took %" PRId64 " transactions", fewest);
	const char *p[] = {"41"};
	PGresult *r = PQexecPrepared(c, "s0_2", 1, p, NULL, NULL, 0);
	cr_assert_str_eq(PQgetvalue(r, 0, 0), "42");
	PQclear(r);
	const db_stmt bad[] = {{"four", "SELECT 4"}, {"five", "SELECT FROM no_such_table"}};
	cr_assert_lt(db_prepare(c, bad, 2, &err), 0);
	cr_assert(strstr(buf_str(&err), "no_such_table"), "%s", buf_str(&err));
	cr_assert_eq(db_cmd(c, &err, "SELECT 1", 0, NULL), 0, "%s", buf_str(&err));
	PQfinish(c);
	buf_free(&err);
}

/* A connection that goes silent (frozen, no TCP error) fails a statement
 * at the thread's wait limit and is closed, instead of blocking forever. */
Test(conn, a_silent_connection_fails_the_statement_at_the_wait_limit_and_is_closed)
{
	const char *db = tdb_new();
	proxy = tproxy_start(db);
	buf err = BUF_INIT;
	PGconn *c = db_connect(tproxy_conninfo(proxy), "silent", &err);
	cr_assert(c, "%s", buf_str(&err));
	db_set_wait_limit(500);
	cr_assert_eq(db_cmd(c, &err, "SELECT 1", 0, NULL), 0, "%s", buf_str(&err));
	tproxy_freeze(proxy, NULL);
	int64_t t0 = tnow_ms();
	cr_assert_lt(db_cmd(c, &err, "SELECT 1", 0, NULL), 0, "a frozen statement succeeded");
	int64_t took = tnow_ms() - t0;
	db_set_wait_limit(0);
	cr_assert(strstr(buf_str(&err), "no answer within 500 ms"), "%s", buf_str(&err));
	cr_assert(!db_ok(c), "the connection is still considered usable");
	cr_assert_geq(took, 500, "gave up after %" PRId64 " ms", took);
	report("a frozen statement gave up after %" PRId64 " ms (limit 500 ms)", took);
	PQfinish(c);
	buf_free(&err);
}

/*
 * Worker A's connections freeze while it executes runs. Worker B, past A's
 * TTL, terminates A's lease backend (which PostgreSQL would otherwise keep,
 * with its advisory locks, until its keepalives noticed) and takes every
 * shard; A gives up on its silent lease connection by itself and detaches.
 * B runs A's runs again and completes them; when A's connections thaw and
 * its stale executions finish, their writes are refused by the fence and no
 * row of those runs changes.
 */
Test(conn, a_frozen_worker_loses_its_shards_to_the_healthy_one_within_the_ttl_and_writes_nothing)
{
	const char *db = tdb_new_migrated_shards(SHARDS);
	PGconn *c = tdb_connect(db);
	tdb_exec(c, REPLAY_TABLES);
	proxy = tproxy_start(db);
	start(0, tproxy_conninfo(proxy), NULL); /* A */
	start(1, db, NULL);                     /* B */
	int64_t a = runner_id(c, 0), b = runner_id(c, 1);
	check(a > 0 && b > 0, "runners not registered");
	check(tdb_wait_at_leastf(
	          c, 1, 30000,
	          "SELECT ((SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64
	          ") > 0 AND (SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64
	          ") > 0 AND (SELECT count(*) FROM cairn.shard_leases WHERE owner IS "
	          "NOT NULL) = %d)::int",
	          a, b, SHARDS),
	      "the two workers never shared the shards");
	check(tproxy_count(proxy, "cairn-worker lease") >= 1,
	      "A's lease connection is not proxied");

	/* Runs that block in their step until flagged; wait until all execute. */
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	for (int i = 0; i < SHARDS; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		cairn_enqueue_opts o = {.key = key, .input = "{\"mode\": \"same\"}"};
		cairn_enqueued r;
		cr_assert_eq(cairn_enqueue(cl, "t.replay", &o, &r), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
		cairn_enqueued_clear(&r);
	}
	check(tdb_wait_at_leastf(c, SHARDS, 30000, "SELECT count(*) FROM t_counter WHERE n >= 1"),
	      "the runs never all started");
	char sql[512];
	snprintf(sql, sizeof sql,
	         "CREATE TABLE a_runs AS SELECT u.id FROM cairn.runs u JOIN cairn.shard_leases l "
	         "ON l.shard_group = u.shard_group AND l.shard = u.shard WHERE l.owner = %" PRId64,
	         a);
	tdb_exec(c, sql);
	int64_t na = tdb_int(c, "SELECT count(*) FROM a_runs");
	check(na >= 1, "worker A executes none of the runs");

	/* Freeze every connection of A. */
	int64_t t0 = tnow_ms();
	tproxy_freeze(proxy, NULL);
	check(tdb_wait_at_leastf(
	          c, 1, TTL_MS + 8000,
	          "SELECT ((SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64
	          ") = %d "
	          "AND (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
	          "AND pid = (SELECT lease_pid FROM cairn.runners WHERE id = %" PRId64
	          ")) = %d)::int",
	          b, SHARDS, b, SHARDS),
	      "B did not own and lock every shard within the TTL plus 8 s of the freeze");
	int64_t takeover = tnow_ms() - t0;
	check(tfile_wait(ws[1].log, "terminated the lease backend of a runner past its TTL", 1000),
	      "B did not log that it terminated A's lease backend");
	check(tfile_wait(ws[0].log, "no answer within", TTL_MS + 8000) &&
	          tfile_wait(ws[0].log, "detached", 5000),
	      "A never gave up on its silent lease connection");
	int64_t detached = tnow_ms() - t0;
	report("takeover by the healthy worker %" PRId64 " ms after the freeze (TTL %d ms); the "
	       "frozen worker detached by itself after at most %" PRId64 " ms",
	       takeover, TTL_MS, detached);

	/* B runs A's runs again (a second bump) and completes every run. */
	check(
	    tdb_wait_at_leastf(c, na, 30000,
	                       "SELECT count(*) FROM t_counter t JOIN a_runs a ON a.id = t.run_id "
	                       "WHERE t.n >= 2"),
	    "B never ran A's runs again");
	tdb_exec(c, "INSERT INTO t_flags SELECT id FROM cairn.runs");
	check(tdb_wait_at_leastf(c, SHARDS, 30000,
	                         "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"),
	      "the runs did not all complete");
	const char *same =
	    "SELECT count(*) FROM cairn.runs u JOIN a_runs a ON a.id = u.id "
	    "WHERE (u.output->>'count')::int = 2 AND (SELECT count(*) FROM cairn.steps s "
	    "WHERE s.run_id = u.id AND s.output::text = '2') = 1";
	check(tdb_int(c, same) == na, "B's results are not the ones stored");
	char *before = tdb_str(c, "SELECT string_agg(u.updated_at::text || u.status, ',' ORDER BY "
	                          "u.id) FROM cairn.runs u JOIN a_runs a ON a.id = u.id");

	/* A's connections come back: its stale executions end and are fenced. */
	tproxy_thaw(proxy);
	check(tfile_wait(ws[0].log, "refused by the fence", 30000),
	      "A's stale writes were not refused by the fence");
	check(tdb_int(c, same) == na, "A overwrote a result after losing the shard");
	char *after = tdb_str(c, "SELECT string_agg(u.updated_at::text || u.status, ',' ORDER BY "
	                         "u.id) FROM cairn.runs u JOIN a_runs a ON a.id = u.id");
	check(before && after && strcmp(before, after) == 0,
	      "a run A had lost changed after the thaw: %s -> %s", before, after);
	free(before);
	free(after);
	cairn_client_free(cl);
	PQfinish(c);
}

/*
 * Only the commit connection of a busy worker freezes: executors wait for
 * their commits, but the supervisor and the poller go on. /healthz must say
 * the committer is stuck within the statement timeout plus a few seconds,
 * must have said ok while the same workload flowed before, and must recover
 * once the connection thaws, with every run completed.
 */
Test(conn, healthz_fails_while_the_commit_connection_is_frozen_and_recovers_after)
{
	const char *db = tdb_new_migrated_shards(SHARDS);
	PGconn *c = tdb_connect(db);
	tdb_exec(c, "CREATE TABLE t_hits (run_id bigint NOT NULL, step text NOT NULL);");
	proxy = tproxy_start(db);
	start(0, tproxy_conninfo(proxy), "CAIRN_STATEMENT_TIMEOUT=2s");
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	/* A steady workload: 150 runs due one every 100 ms. */
	enum { RUNS = 150 };
	for (int i = 0; i < RUNS; i++) {
		cairn_enqueue_opts o = {.delay_ms = i * 100};
		cairn_enqueued r;
		cr_assert_eq(cairn_enqueue(cl, "t.spread", &o, &r), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
		cairn_enqueued_clear(&r);
	}
	/* Busy and healthy: /healthz says ok on every look while 20 runs finish. */
	int64_t looks = 0, bad = 0;
	while (tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'") < 20) {
		healthz_want ok = {ws[0].port, 200, "ok"};
		looks++;
		bad += !healthz_is(&ok);
		check(looks < 100000, "the workload did not progress");
	}
	check(bad == 0, "/healthz failed %" PRId64 " of %" PRId64 " times under a healthy load",
	      bad, looks);
	check(tproxy_count(proxy, "cairn-worker commit") >= 1,
	      "the commit connection is not proxied");

	int64_t t0 = tnow_ms();
	tproxy_freeze(proxy, "cairn-worker commit");
	healthz_want stuck = {ws[0].port, 503, "committer"};
	check(twait(healthz_is, &stuck, 2000 + 5000),
	      "/healthz did not report the committer stuck within the statement timeout + 5 s");
	int64_t failed = tnow_ms() - t0;
	int64_t done_frozen =
	    tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'");

	tproxy_thaw(proxy);
	int64_t t1 = tnow_ms();
	healthz_want ok = {ws[0].port, 200, "ok"};
	check(twait(healthz_is, &ok, 10000), "/healthz did not recover after the thaw");
	int64_t recovered = tnow_ms() - t1;
	check(tdb_wait_at_leastf(c, RUNS, 60000,
	                         "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"),
	      "the runs did not all complete after the thaw");
	report("healthz 503 (committer stuck) %" PRId64 " ms after freezing the commit "
	       "connection (statement timeout 2000 ms), %" PRId64 " runs completed by then; "
	       "200 again %" PRId64 " ms after the thaw",
	       failed, done_frozen, recovered);
	cairn_client_free(cl);
	PQfinish(c);
}

/*
 * A write whose connection broke can still land later: its statement goes
 * on in the server until it next reads from the connection. Here the run's
 * end waits for the lock of its shard's lease row (the test holds it) when
 * its connection is cut between worker and server. The worker ends that
 * old session before it lets the run go (to be claimed again), so the late
 * end cannot land beside the end of a second execution: the run's output
 * and its journal agree. Before, the run executed again, and once the lock
 * went, both ends landed, each with its own count.
 */
Test(conn, a_write_that_lands_after_its_connection_broke_cannot_contradict_the_journal)
{
	const char *db = tdb_new_migrated_shards(SHARDS);
	PGconn *c = tdb_connect(db);
	tdb_exec(c, REPLAY_TABLES);
	proxy = tproxy_start(db);
	start(0, tproxy_conninfo(proxy), NULL);
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	/* A first run opens the commit connection. */
	cairn_enqueue_opts o = {.input = "{}"};
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(cl, "noop", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(cl));
	cr_assert_eq(cairn_run_wait(cl, e.id, 20000), CAIRN_OK, "the first run did not finish");
	check(tproxy_count(proxy, "cairn-worker commit") >= 1,
	      "the commit connection is not proxied");
	o.input = "{\"mode\": \"same\", \"deaf\": true}";
	cr_assert_eq(cairn_enqueue(cl, "t.replay", &o, &e), CAIRN_OK, "%s",
	             cairn_client_errmsg(cl));
	check(tdb_wait_at_leastf(c, 1, 20000,
	                         "SELECT count(*) FROM t_counter WHERE run_id = %" PRId64, e.id),
	      "the step never ran");
	char sql[256];
	tdb_exec(c, "BEGIN");
	snprintf(sql, sizeof sql,
	         "SELECT 1 FROM cairn.shard_leases l JOIN cairn.runs r ON l.shard_group = "
	         "r.shard_group AND l.shard = r.shard WHERE r.id = %" PRId64 " FOR UPDATE OF l",
	         e.id);
	tdb_exec(c, sql);
	PGconn *f = tdb_connect(db);
	snprintf(sql, sizeof sql, "INSERT INTO t_flags (run_id) VALUES (%" PRId64 ")", e.id);
	tdb_exec(f, sql);
	check(tdb_wait_at_leastf(f, 1, 20000, "SELECT count(*) " TDB_COMMIT_WAITING),
	      "the run's end never waited for the lease row");
	tproxy_cut(proxy, "cairn-worker commit");
	/* Let the lock go once the run executed again, or the worker ended
	 * the old session and waits (its claim of the run is held back). */
	tdb_wait_at_leastf(f, 2, 5000, "SELECT n FROM t_counter WHERE run_id = %" PRId64, e.id);
	tdb_exec(c, "COMMIT");
	cr_assert_eq(cairn_run_wait(cl, e.id, 30000), CAIRN_OK, "the run did not finish");
	cairn_run *r;
	cr_assert_eq(cairn_run_get(cl, e.id, &r), CAIRN_OK, "%s", cairn_client_errmsg(cl));
	check(strcmp(r->status, "completed") == 0, "%s: %s", r->status, r->error ? r->error : "");
	check(r->nsteps == 1 && r->output, "%d steps", r->nsteps);
	cJSON *out = cJSON_Parse(r->output);
	const cJSON *count = cJSON_GetObjectItemCaseSensitive(out, "count");
	check(cJSON_IsNumber(count) && count->valuedouble == atof(r->steps[0].output),
	      "the run's output %s contradicts its journal (step count_block: %s)", r->output,
	      r->steps[0].output);
	report("an end cut off while it waited for a lock: the step ran %" PRId64
	       " times, output %s, journal %s",
	       tdb_intf(f, "SELECT n FROM t_counter WHERE run_id = %" PRId64, e.id), r->output,
	       r->steps[0].output);
	cJSON_Delete(out);
	cairn_run_free(r);
	cairn_client_free(cl);
	PQfinish(f);
	PQfinish(c);
}

/* A failed connect says why it failed, not why every earlier one did too
 * (a retrying loop reuses its buffer). */
Test(conn, a_failed_connect_replaces_the_error_of_the_one_before)
{
	int fd, port = tclosed_port(&fd);
	char url[128];
	snprintf(url, sizeof url, "host=127.0.0.1 port=%d dbname=x connect_timeout=2", port);
	buf err = BUF_INIT;
	for (int i = 0; i < 3; i++) {
		PGconn *c = db_connect(url, "cairn-test", &err);
		cr_assert_null(c);
	}
	const char *s = buf_str(&err);
	cr_assert(strstr(s, "cannot connect to the database: ") == s, "%s", s);
	cr_assert_null(strstr(s + 1, "cannot connect to the database"), "repeated: %s", s);
	buf_free(&err);
	close(fd);
}
