/*
 * test_lease.c - shard leases across real cairn-worker processes on the test
 * PostgreSQL (issue 4): every shard owned exactly once, takeover after
 * kill -9, SIGTERM and a killed lease connection, fencing of a stale epoch,
 * singletons that never overlap and back off when they crash, and the runner
 * health checker's last-healthy guard.
 *
 * Ownership is checked where it is true, in the database: one advisory lock
 * per shard in pg_locks, held by the lease backend (runners.lease_pid) of the
 * runner cairn.shard_leases names. Every wait is a deadline poll.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hash.h"
#include "support.h"

/* Membership settings that make a round trip take a few hundred ms; an idle
 * worker's drain must fit its 5s timeout (the stops below give up after 30s). */
#define FAST                                                                                       \
	"CAIRN_HEARTBEAT_INTERVAL=100ms", "CAIRN_RUNNER_TTL=2s", "CAIRN_REBALANCE_INTERVAL=100ms", \
	    "CAIRN_REBALANCE_DEBOUNCE=50ms", "CAIRN_CONCURRENCY=2", "CAIRN_SHUTDOWN_TIMEOUT=5s"

#define MAXW 4

/* The workers of one test. fini kills whatever is left with SIGKILL, so a test
 * that is not about draining does not end with a SIGTERM it depends on. */
typedef struct worker {
	pid_t pid;
	int port;
	char log[64];
} worker;

static worker ws[MAXW];
static const char *db;
static PGconn *conn;
static int nshards;
/* A port that refuses connections (tclosed_port), until fini closes it. */
static int closed_fd = -1;

static void dump_logs(void)
{
	for (int i = 0; i < MAXW; i++) {
		if (!ws[i].log[0])
			continue;
		FILE *f = fopen(ws[i].log, "r");
		if (!f)
			continue;
		fprintf(stderr, "---- worker %d (pid %d) log\n", i, (int)ws[i].pid);
		char line[2048];
		while (fgets(line, sizeof line, f))
			fputs(line, stderr);
		fclose(f);
	}
}

/* cr_assert that first prints every worker's log, so a failure explains itself. */
#define check(cond, ...)                                                                           \
	do {                                                                                       \
		int check_ok_ = (cond);                                                            \
		if (!check_ok_) {                                                                  \
			dump_logs();                                                               \
			cr_assert(check_ok_, __VA_ARGS__);                                         \
		}                                                                                  \
	} while (0)

static void teardown(void)
{
	for (int i = 0; i < MAXW; i++) {
		if (ws[i].pid > 0) {
			kill(ws[i].pid, SIGKILL);
			waitpid(ws[i].pid, NULL, 0);
		}
		if (ws[i].log[0])
			unlink(ws[i].log);
	}
	memset(ws, 0, sizeof ws);
	if (closed_fd >= 0)
		close(closed_fd);
	closed_fd = -1;
	if (conn)
		PQfinish(conn);
	conn = NULL;
}

TestSuite(lease, .fini = teardown);

static void setup(int shards)
{
	nshards = shards;
	db = tdb_new_migrated_shards(shards);
	conn = tdb_connect(db);
}

/* Starts worker i with FAST settings and up to four more (NULL ends early). */
static void start(int i, const char *a, const char *b, const char *c, const char *d)
{
	if (!ws[i].log[0])
		tlog_file(ws[i].log);
	ws[i].pid = tworker_start(db, &ws[i].port, ws[i].log, FAST, a, b, c, d, NULL);
}

static int stop(int i, int sig, int64_t timeout_ms)
{
	int rc = tworker_stop(ws[i].pid, sig, timeout_ms);
	ws[i].pid = 0;
	return rc;
}

#define qint(...) tdb_intf(conn, __VA_ARGS__)

/* The runner id worker i registered under (its name is host:pid); -1 if none. */
static int64_t runner_id(int i)
{
	return qint("SELECT id FROM cairn.runners WHERE name LIKE '%%:%d' ORDER BY id DESC LIMIT 1",
	            (int)ws[i].pid);
}

/*
 * Shards of the default group that are owned exactly once by one of the
 * runners in ids: exactly one advisory lock (classid = the group's key,
 * objsubid 2, objid = shard) in this database, held by that runner's lease
 * backend, and shard_leases naming the same runner. Also counts locks on
 * shards out of range and the distinct runners of ids that own something.
 */
static const char SQL_OWNERSHIP[] =
    "WITH l AS (SELECT objid::bigint AS shard, pid FROM pg_locks "
    "           WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
    "             AND classid = ($1::int)::oid "
    "             AND database = (SELECT oid FROM pg_database WHERE datname = "
    "current_database())), "
    "lc AS (SELECT shard, count(*) AS n, min(pid) AS pid FROM l GROUP BY shard), "
    "o AS (SELECT s.shard, r.id AS owner FROM generate_series(0, $2::int - 1) s(shard) "
    "      JOIN lc ON lc.shard = s.shard AND lc.n = 1 "
    "      JOIN cairn.shard_leases sl ON sl.shard_group = 'default' AND sl.shard = s.shard "
    "      JOIN cairn.runners r ON r.id = sl.owner AND r.lease_pid = lc.pid "
    "      WHERE r.id = ANY ($3::bigint[])) "
    "SELECT (SELECT count(*) FROM o), (SELECT count(DISTINCT owner) FROM o), "
    "       (SELECT count(*) FROM l WHERE shard < 0 OR shard >= $2::int)";

typedef struct owned_by {
	int64_t ids[MAXW];
	int n;
	/* last observation */
	int64_t good, owners, stray;
} owned_by;

static void ownership(owned_by *o)
{
	char key[16], shards[16], arr[256];
	snprintf(key, sizeof key, "%d", (int)hash_group_lock_key("default"));
	snprintf(shards, sizeof shards, "%d", nshards);
	size_t k = (size_t)snprintf(arr, sizeof arr, "{");
	for (int i = 0; i < o->n; i++)
		k += (size_t)snprintf(arr + k, sizeof arr - k, "%s%" PRId64, i ? "," : "",
		                      o->ids[i]);
	snprintf(arr + k, sizeof arr - k, "}");
	const char *p[] = {key, shards, arr};
	PGresult *r = PQexecParams(conn, SQL_OWNERSHIP, 3, NULL, p, NULL, NULL, 0);
	cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "ownership query: %s",
	          PQerrorMessage(conn));
	o->good = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	o->owners = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
	o->stray = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
	PQclear(r);
}

/* Every shard owned exactly once, by the runners of o and by each of them. */
static int fully_owned(void *arg)
{
	owned_by *o = arg;
	ownership(o);
	return o->good == nshards && o->owners == o->n && o->stray == 0;
}

typedef struct registration {
	int worker;
	int64_t id;
} registration;

static int registered(void *arg)
{
	registration *r = arg;
	return (r->id = runner_id(r->worker)) > 0;
}

/* Fills o with the runner ids of the workers listed (terminated by -1),
 * waiting for each to register. */
static void owners_of(owned_by *o, ...)
{
	memset(o, 0, sizeof *o);
	va_list ap;
	va_start(ap, o);
	for (int i; (i = va_arg(ap, int)) >= 0;) {
		registration r = {.worker = i};
		check(twait(registered, &r, 30000), "worker %d never registered", i);
		o->ids[o->n++] = r.id;
	}
	va_end(ap);
}

static void wait_fully_owned(owned_by *o, int64_t timeout_ms, const char *what)
{
	check(twait(fully_owned, o, timeout_ms),
	      "%s: %" PRId64 " of %d shards owned exactly once by %d runners (%" PRId64
	      " of them own any, %" PRId64 " stray locks)",
	      what, o->good, nshards, o->n, o->owners, o->stray);
}

static void start_three_and_wait(const char *extra)
{
	for (int i = 0; i < 3; i++)
		start(i, extra, NULL, NULL, NULL);
	for (int i = 0; i < 3; i++)
		check(thttp_wait(ws[i].port, "/readyz", 200, 20000), "worker %d never became ready",
		      i);
	owned_by o;
	owners_of(&o, 0, 1, 2, -1);
	wait_fully_owned(&o, 20000, "three workers");
}

/* ------------------------------------------------------------ ownership */

typedef struct shards_metric {
	int port;
	int64_t id;
	double metric;
	int64_t db;
} shards_metric;

static int metric_matches_db(void *arg)
{
	shards_metric *m = arg;
	m->metric = tmetric(m->port, "cairn_shards_owned");
	m->db = qint("SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64, m->id);
	return (int64_t)m->metric == m->db;
}

Test(lease, three_workers_own_every_shard_exactly_once)
{
	setup(64);
	start_three_and_wait(NULL);
	owned_by o;
	owners_of(&o, 0, 1, 2, -1);
	check(fully_owned(&o), "ownership did not hold");
	check(qint("SELECT count(*) FROM cairn.shard_leases WHERE shard_group = 'default' AND "
	           "owner IS NULL") == 0,
	      "a shard has no owner in shard_leases");
	check(qint("SELECT count(*) FROM cairn.shard_leases WHERE shard_group = 'default'") ==
	          nshards,
	      "shard_leases does not list every shard");
	/* Each worker reports what the database says it owns (the metric is
	 * published just after the acquiring statement commits). */
	int64_t sum = 0;
	for (int i = 0; i < 3; i++) {
		shards_metric m = {.port = ws[i].port, .id = o.ids[i]};
		check(twait(metric_matches_db, &m, 20000),
		      "worker %d: cairn_shards_owned %g, shard_leases %" PRId64, i, m.metric, m.db);
		sum += m.db;
	}
	check(sum == nshards, "owned shards add up to %" PRId64, sum);
}

/* ------------------------------------------------------------ takeover */

Test(lease, kill_9_of_one_of_three_leaves_every_shard_owned_by_the_other_two)
{
	/* The production shard count, so the measured takeover is realistic. */
	setup(4096);
	start_three_and_wait(NULL);
	owned_by o;
	owners_of(&o, 1, 2, -1);
	int64_t t0 = tnow_ms();
	check(stop(0, SIGKILL, 20000) == 128 + SIGKILL, "worker 0 was not killed");
	/* The takeover happened: the deadline is only the give-up bound. */
	wait_fully_owned(&o, 60000, "after kill -9");
	int64_t took = tnow_ms() - t0;
	fprintf(stderr,
	        "test_lease: kill -9 takeover: %" PRId64
	        " ms until all %d shards were owned by the two "
	        "survivors (heartbeat 100ms, rebalance 100ms, debounce 50ms)\n",
	        took, nshards);
}

Test(lease, sigterm_of_one_of_three_exits_zero_deregisters_and_hands_its_shards_over)
{
	setup(64);
	start_three_and_wait(NULL);
	int64_t gone = runner_id(0);
	owned_by o;
	owners_of(&o, 1, 2, -1);
	int64_t t0 = tnow_ms();
	check(stop(0, SIGTERM, 30000) == 0, "SIGTERM: worker did not exit 0");
	check(qint("SELECT count(*) FROM cairn.runners WHERE id = %" PRId64, gone) == 0,
	      "the stopped runner's row is still there");
	wait_fully_owned(&o, 30000, "after SIGTERM");
	fprintf(stderr, "test_lease: SIGTERM hand-over: %" PRId64 " ms\n", tnow_ms() - t0);
	check(qint("SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64, gone) == 0,
	      "shard_leases still names the stopped runner");
}

/* ------------------------------------------------------------ detachment */

/* A write to run id on (default, shard) as runner owner with epoch, fenced
 * the way the engine's commit is (a join with the lease row). */
static int fenced_touch(int shard, int64_t owner, int64_t epoch, int64_t run)
{
	static const char sql[] =
	    "UPDATE cairn.runs SET updated_at = now() WHERE id = $5 AND EXISTS (SELECT 1 FROM "
	    "cairn.shard_leases WHERE shard_group = $1 AND shard = $2 AND owner = $3 AND epoch = "
	    "$4)";
	char s[24], r[24], e[24], id[24];
	snprintf(s, sizeof s, "%d", shard);
	snprintf(r, sizeof r, "%" PRId64, owner);
	snprintf(e, sizeof e, "%" PRId64, epoch);
	snprintf(id, sizeof id, "%" PRId64, run);
	const char *p[] = {"default", s, r, e, id};
	PGresult *res = PQexecParams(conn, sql, 5, NULL, p, NULL, NULL, 0);
	cr_assert(PQresultStatus(res) == PGRES_COMMAND_OK, "fenced update: %s",
	          PQerrorMessage(conn));
	int n = atoi(PQcmdTuples(res));
	PQclear(res);
	return n;
}

typedef struct metric_above {
	int port;
	const char *name;
	double than;
} metric_above;

static int metric_is_above(void *arg)
{
	metric_above *m = arg;
	return tmetric(m->port, m->name) > m->than;
}

Test(lease, killed_lease_connection_detaches_is_fenced_out_and_reattaches_after_the_window)
{
	setup(64);
	start_three_and_wait("CAIRN_REATTACH_WINDOW=3s");
	int64_t a = runner_id(0);
	int64_t pid = qint("SELECT lease_pid FROM cairn.runners WHERE id = %" PRId64, a);
	int shard =
	    (int)qint("SELECT min(shard) FROM cairn.shard_leases WHERE owner = %" PRId64, a);
	int64_t epoch = qint(
	    "SELECT epoch FROM cairn.shard_leases WHERE shard_group = 'default' AND shard = %d",
	    shard);
	check(shard >= 0 && epoch > 0, "worker 0 owns no shard");
	int64_t run = qint("INSERT INTO cairn.runs (workflow, key, shard_group, shard) "
	                   "VALUES ('test.fence', 'k', 'default', %d) RETURNING id",
	                   shard);
	check(fenced_touch(shard, a, epoch, run) == 1, "the owner's fenced write was refused");
	double before = tmetric(ws[0].port, "cairn_detachments_total");
	check(before >= 0, "no cairn_detachments_total metric");

	int64_t t0 = tnow_ms();
	check(qint("SELECT pg_terminate_backend(%" PRId64 ")::int", pid) == 1,
	      "pg_terminate_backend failed");
	check(thttp_wait(ws[0].port, "/readyz", 503, 20000),
	      "readyz did not go 503 after the lease connection died");
	metric_above det = {ws[0].port, "cairn_detachments_total", before};
	check(twait(metric_is_above, &det, 20000), "cairn_detachments_total did not rise");

	owned_by o;
	owners_of(&o, 1, 2, -1);
	wait_fully_owned(&o, 30000, "after the lease connection was killed");
	int64_t owner = qint(
	    "SELECT owner FROM cairn.shard_leases WHERE shard_group = 'default' AND shard = %d",
	    shard);
	int64_t epoch2 = qint(
	    "SELECT epoch FROM cairn.shard_leases WHERE shard_group = 'default' AND shard = %d",
	    shard);
	check(owner != a && epoch2 > epoch, "shard %d: owner %" PRId64 " epoch %" PRId64, shard,
	      owner, epoch2);
	check(fenced_touch(shard, a, epoch, run) == 0,
	      "a write with the old owner and epoch got through");
	check(fenced_touch(shard, owner, epoch, run) == 0,
	      "a write with the old epoch got through");
	check(fenced_touch(shard, owner, epoch2, run) == 1,
	      "the new owner's fenced write was refused");

	/* Back after the re-attach window, never before it. */
	check(thttp_wait(ws[0].port, "/readyz", 200, 20000), "worker 0 never became ready again");
	int64_t back = tnow_ms() - t0;
	fprintf(stderr,
	        "test_lease: lease connection killed; ready again after %" PRId64
	        " ms (window 3s)\n",
	        back);
	check(back >= 3000, "re-attached after %" PRId64 " ms, inside the 3s window", back);
	owners_of(&o, 0, 1, 2, -1);
	wait_fully_owned(&o, 30000, "after re-attaching");
	check(tmetric(ws[0].port, "cairn_detachments_total") == before + 1,
	      "detached more than once");
}

/* ------------------------------------------------------------ singletons */

/* Settings that load tests/plugin_test.so (test.recorder, test.crasher). */
static const char *plugin_env(void)
{
	static char env[1100];
	snprintf(env, sizeof env, "CAIRN_PLUGINS=%s", tplugin_path());
	return env;
}

/* The worker whose current runner id is id; -1 if none. */
static int worker_of(int64_t id)
{
	for (int i = 0; i < MAXW; i++)
		if (ws[i].pid > 0 && runner_id(i) == id)
			return i;
	return -1;
}

typedef struct recorder_moved {
	int64_t excl[MAXW]; /* runners it must have left */
	int nexcl;
	int64_t now; /* the runner writing the newest rows */
} recorder_moved;

/* The newest rows come from a runner outside r->excl, three rows in a row. */
static int recorder_moved_on(void *arg)
{
	recorder_moved *r = arg;
	PGresult *res =
	    PQexec(conn, "SELECT runner FROM test_singleton ORDER BY t_end DESC LIMIT 3");
	int ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 3;
	for (int i = 0; ok && i < 3; i++)
		ok = strcmp(PQgetvalue(res, i, 0), PQgetvalue(res, 0, 0)) == 0;
	int64_t id = ok ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
	PQclear(res);
	for (int i = 0; ok && i < r->nexcl; i++)
		ok = id != r->excl[i];
	if (ok)
		r->now = id;
	return ok;
}

typedef struct rows_since {
	char t[64];
	int64_t n;
} rows_since;

static int rows_written_since(void *arg)
{
	rows_since *s = arg;
	return qint("SELECT count(*) FROM test_singleton WHERE t_start > '%s'", s->t) >= s->n;
}

Test(lease, singleton_never_runs_on_two_runners_across_kill_sigterm_and_join)
{
	setup(64);
	/* The plugin creates it too; here it exists before any copy runs. */
	tdb_exec(
	    conn,
	    "CREATE TABLE test_singleton (runner bigint, t_start timestamptz, t_end timestamptz)");
	start_three_and_wait(plugin_env());

	recorder_moved r = {0};
	check(twait(recorder_moved_on, &r, 30000),
	      "test.recorder never ran (is the plugin loaded?)");
	int victim = worker_of(r.now);
	check(victim >= 0, "runner %" PRId64 " is none of the workers", r.now);
	kill(ws[victim].pid, SIGKILL);
	check(stop(victim, SIGKILL, 20000) == 128 + SIGKILL, "kill -9 failed");
	r.excl[r.nexcl++] = r.now;
	check(twait(recorder_moved_on, &r, 30000), "test.recorder did not move after kill -9");

	int drained = worker_of(r.now);
	check(drained >= 0, "runner %" PRId64 " is none of the workers", r.now);
	check(stop(drained, SIGTERM, 30000) == 0,
	      "SIGTERM: the worker running test.recorder did not exit 0");
	r.excl[r.nexcl++] = r.now;
	check(twait(recorder_moved_on, &r, 30000), "test.recorder did not move after SIGTERM");

	/* A new worker joins; the singleton may move to it or stay. */
	int last = -1;
	for (int i = 0; i < 3; i++)
		if (ws[i].pid > 0)
			last = i;
	start(3, plugin_env(), NULL, NULL, NULL);
	check(thttp_wait(ws[3].port, "/readyz", 200, 20000), "the new worker never became ready");
	owned_by o;
	owners_of(&o, last, 3, -1);
	wait_fully_owned(&o, 20000, "after a worker joined");
	rows_since since = {.n = 5};
	char *t = tdb_str(conn, "SELECT clock_timestamp()::text");
	snprintf(since.t, sizeof since.t, "%s", t);
	free(t);
	check(twait(rows_written_since, &since, 30000),
	      "test.recorder stopped writing after the join");

	int64_t overlaps =
	    qint("SELECT count(*) FROM test_singleton a JOIN test_singleton b "
	         "ON a.runner <> b.runner AND a.t_start < b.t_end AND b.t_start < a.t_end");
	char *example =
	    tdb_str(conn, "SELECT format('runner %s [%s, %s] and runner %s [%s, %s]', "
	                  "a.runner, a.t_start, a.t_end, b.runner, b.t_start, b.t_end) "
	                  "FROM test_singleton a JOIN test_singleton b ON a.runner < b.runner "
	                  "AND a.t_start < b.t_end AND b.t_start < a.t_end LIMIT 1");
	check(overlaps == 0,
	      "two runners ran test.recorder at once (%" PRId64 " overlapping pairs), e.g. %s",
	      overlaps, example ? example : "");
	free(example);
	int64_t runners = qint("SELECT count(DISTINCT runner) FROM test_singleton");
	fprintf(stderr,
	        "test_lease: test.recorder rows from %" PRId64 " runners, %" PRId64
	        " rows, no overlap\n",
	        runners, qint("SELECT count(*) FROM test_singleton"));
	/* It was moved off two runners on purpose, so at least three ran it. */
	check(runners >= 3, "rows from only %" PRId64 " runners", runners);
}

static int crashed_five_times(void *arg)
{
	(void)arg;
	return qint("SELECT count(*) FROM test_crasher") >= 5;
}

Test(lease, crashing_singleton_restarts_with_doubling_backoff)
{
	setup(64);
	tdb_exec(conn, "CREATE TABLE test_crasher (runner bigint, t timestamptz)");
	start(0, plugin_env(), "CAIRN_TEST_CRASHER=1", "CAIRN_SINGLETON_BACKOFF=100ms", NULL);
	check(thttp_wait(ws[0].port, "/readyz", 200, 20000), "worker never became ready");
	check(twait(crashed_five_times, NULL, 30000),
	      "test.crasher did not run five times (is the plugin loaded?)");
	PGresult *r = PQexec(conn, "SELECT extract(epoch FROM t - lag(t) OVER (ORDER BY t)) * 1000 "
	                           "FROM test_crasher ORDER BY t LIMIT 5");
	cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 5);
	double gap[4];
	char seen[256];
	size_t k = 0;
	for (int i = 0; i < 4; i++) {
		gap[i] = strtod(PQgetvalue(r, i + 1, 0), NULL);
		k += (size_t)snprintf(seen + k, sizeof seen - k, "%s%.0f", i ? ", " : "", gap[i]);
	}
	PQclear(r);
	fprintf(stderr,
	        "test_lease: test.crasher restart gaps: %s ms (nominal 100, 200, 400, 800)\n",
	        seen);
	/* Each restart waited at least its backoff (the lower bounds double), and
	 * the worker says it chose the doubling delays. Gaps are not compared with
	 * each other: on a loaded machine a short one can carry more overhead. */
	char *log = tfile_read(ws[0].log);
	for (int i = 0; i < 4; i++) {
		double nominal = 100.0 * (1 << i);
		check(gap[i] >= 0.8 * nominal, "gap %d is %.0f ms, below 0.8 x %.0f (gaps %s)", i,
		      gap[i], nominal, seen);
		char want[64];
		snprintf(want, sizeof want, "failures=%d backoff=%dms", i + 1, 100 << i);
		check(strstr(log, want) != NULL, "the worker did not log \"%s\"", want);
	}
	free(log);
	double restarts = tmetric(ws[0].port, "cairn_singleton_restarts_total");
	check(restarts >= 4, "cairn_singleton_restarts_total is %g after 5 crashes", restarts);
}

/* ------------------------------------------------------------ health checker */

typedef struct health_watch {
	int64_t id;
	int port; /* the worker whose cairn_health_checks_total counts rounds */
	double rounds_wanted;
	double rounds;
	int ever_unhealthy;
	int64_t failures;
} health_watch;

static int marked_unhealthy(void *arg)
{
	health_watch *h = arg;
	return qint("SELECT (NOT healthy)::int FROM cairn.runners WHERE id = %" PRId64, h->id) == 1;
}

/* Until the checker has run rounds_wanted rounds; notes on the way whether
 * the runner was ever marked unhealthy, and its recorded failed probes. */
static int checker_rounds_done(void *arg)
{
	health_watch *h = arg;
	h->rounds = tmetric(h->port, "cairn_health_checks_total");
	h->ever_unhealthy |=
	    qint("SELECT (NOT healthy)::int FROM cairn.runners WHERE id = %" PRId64, h->id) == 1;
	h->failures = qint("SELECT health_failures FROM cairn.runners WHERE id = %" PRId64, h->id);
	return h->rounds >= h->rounds_wanted;
}

static void make_unreachable(int64_t id)
{
	int port = tclosed_port(&closed_fd);
	qint("WITH u AS (UPDATE cairn.runners SET address = '127.0.0.1:%d' WHERE id = %" PRId64
	     " RETURNING 1) SELECT count(*) FROM u",
	     port, id);
}

Test(lease, health_checker_marks_an_unreachable_runner_unhealthy_and_its_shards_move)
{
	setup(64);
	for (int i = 0; i < 2; i++)
		start(i, NULL, NULL, NULL, NULL);
	for (int i = 0; i < 2; i++)
		check(thttp_wait(ws[i].port, "/readyz", 200, 20000), "worker %d never became ready",
		      i);
	owned_by o;
	owners_of(&o, 0, 1, -1);
	wait_fully_owned(&o, 20000, "two workers");
	health_watch h = {.id = o.ids[1]};
	make_unreachable(h.id);
	check(twait(marked_unhealthy, &h, 20000),
	      "the unreachable runner was never marked unhealthy");
	owners_of(&o, 0, -1);
	wait_fully_owned(&o, 30000, "after the other runner was marked unhealthy");
}

Test(lease, health_checker_never_marks_the_last_healthy_runner_unhealthy)
{
	setup(64);
	start(0, NULL, NULL, NULL, NULL);
	check(thttp_wait(ws[0].port, "/readyz", 200, 20000), "worker never became ready");
	owned_by o;
	owners_of(&o, 0, -1);
	wait_fully_owned(&o, 20000, "one worker");
	/* Its own address is unreachable: every probe fails. Six rounds are
	 * twice the failures (3) after which any other runner would be marked. */
	health_watch h = {.id = o.ids[0], .port = ws[0].port};
	make_unreachable(h.id);
	double before = tmetric(ws[0].port, "cairn_health_checks_total");
	check(before >= 0, "no cairn_health_checks_total metric");
	h.rounds_wanted = before + 6;
	check(twait(checker_rounds_done, &h, 30000), "the health checker ran %g rounds, wanted %g",
	      h.rounds, h.rounds_wanted);
	check(h.failures >= 3,
	      "only %" PRId64 " failed probes recorded: the checker did not see it down",
	      h.failures);
	check(!h.ever_unhealthy, "the last healthy runner was marked unhealthy");
	check(fully_owned(&o), "the last runner lost shards");
	check(thttp(ws[0].port, "GET", "/readyz", NULL, NULL) == 200,
	      "the last runner is not ready");
}
