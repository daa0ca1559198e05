/*
 * test_lease.c - shard leases across real cairn-worker processes on the test
 * PostgreSQL (issue 4): every shard owned exactly once, takeover after
 * kill -9, SIGTERM and a killed lease connection, fencing of a stale epoch,
 * singletons that never overlap (their own fence locks keep a new owner's copy
 * waiting while a detached runner's copy still runs), that cannot block the
 * supervisor when they ignore their cancel flag, and back off when they
 * crash; the runner health checker's policy (a live runner that does not
 * answer keeps its shards, one that answers 503 three times loses them, never
 * the last healthy one), workers listening on every interface, and shard
 * locks squatted by a session that is no runner's (reported, ended where
 * the worker's role may, taken back once gone).
 *
 * Ownership is checked where it is true, in the database: one advisory lock
 * per shard in pg_locks, held by the lease backend (runners.lease_pid) of the
 * runner cairn.shard_leases names. Every wait is a deadline poll.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "assign.h"
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

/* A stand-in /healthz: answers 503 to its first fail_first probes (GET
 * /healthz), 200 after, and counts only those; anything else (the relay's
 * POSTs) gets 204 and is not counted. */
typedef struct fake_http {
	int fd, port;
	pthread_t thread;
	int fail_first;
	_Atomic int served, stop;
} fake_http;
static fake_http *fake;
static void fake_http_stop(void);
static void drop_roles(void);

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
#define check(cond, ...) tcheck(dump_logs, cond, __VA_ARGS__)

/* No worker took a runner's lease backend for an outsider: handovers
 * between live runners (shards still held by their old owner) are no
 * outsider's doing. */
static void no_outsider_seen(void)
{
	for (int i = 0; i < MAXW; i++) {
		char *text = ws[i].log[0] ? tfile_read(ws[i].log) : NULL;
		int seen = text && strstr(text, "not a live runner's lease backend");
		free(text);
		check(!seen, "worker %d saw an outsider where there was none", i);
	}
}

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
	fake_http_stop();
	drop_roles();
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

/* Each shard's owner in shard_leases is the one the assignment wants for
 * the runners of o (with their weights): the rebalancing has converged, not
 * merely passed through a state where everyone owns something. */
static int as_assigned(const owned_by *o)
{
	assign_runner rs[MAXW];
	char arr[256];
	size_t k = (size_t)snprintf(arr, sizeof arr, "{");
	for (int i = 0; i < o->n; i++)
		k += (size_t)snprintf(arr + k, sizeof arr - k, "%s%" PRId64, i ? "," : "",
		                      o->ids[i]);
	snprintf(arr + k, sizeof arr - k, "}");
	const char *p[] = {arr};
	PGresult *r =
	    PQexecParams(conn,
	                 "SELECT id, weight FROM cairn.runners WHERE id = ANY ($1::bigint[]) "
	                 "ORDER BY id",
	                 1, NULL, p, NULL, NULL, 0);
	int n = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 0;
	for (int i = 0; i < n && i < MAXW; i++)
		rs[i] = (assign_runner){strtoll(PQgetvalue(r, i, 0), NULL, 10),
		                        atoi(PQgetvalue(r, i, 1))};
	PQclear(r);
	if (n != o->n)
		return 0;
	int want[4096];
	assign_shards(rs, n, (uint64_t)(uint32_t)hash_group_lock_key("default"), nshards, want);
	r = PQexec(conn,
	           "SELECT shard, owner FROM cairn.shard_leases WHERE shard_group = 'default'");
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == nshards;
	for (int i = 0; ok && i < PQntuples(r); i++) {
		int shard = atoi(PQgetvalue(r, i, 0));
		ok = shard >= 0 && shard < nshards && want[shard] >= 0 &&
		     rs[want[shard]].id == strtoll(PQgetvalue(r, i, 1), NULL, 10);
	}
	PQclear(r);
	return ok;
}

/* Every shard owned exactly once, by the runners of o and by each of them,
 * as the assignment wants. */
static int fully_owned(void *arg)
{
	owned_by *o = arg;
	ownership(o);
	return o->good == nshards && o->owners == o->n && o->stray == 0 && as_assigned(o);
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
	no_outsider_seen();
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
	no_outsider_seen();
}

/* With the default timers (heartbeat 1 s, rebalance every 30 s): nobody
 * rebalances on a timer, the oldest runners notice the crash on their next
 * heartbeat and tell the others on cairn_members. Killing the oldest kills a
 * watcher: the other one notices. */
Test(lease, kill_9_with_default_timers_is_noticed_by_a_heartbeat_not_a_rebalance_timer)
{
	setup(4096);
	for (int i = 0; i < 3; i++) {
		start(i, "CAIRN_HEARTBEAT_INTERVAL=1s", "CAIRN_RUNNER_TTL=10s",
		      "CAIRN_REBALANCE_INTERVAL=30s", "CAIRN_REBALANCE_DEBOUNCE=250ms");
		registration r = {.worker = i};
		check(twait(registered, &r, 30000), "worker %d never registered", i);
	}
	owned_by all;
	owners_of(&all, 0, 1, 2, -1);
	wait_fully_owned(&all, 30000, "three workers");
	owned_by o;
	owners_of(&o, 1, 2, -1);
	int64_t t0 = tnow_ms();
	check(stop(0, SIGKILL, 20000) == 128 + SIGKILL, "worker 0 was not killed");
	/* The give-up bound is under the 30 s rebalance timer. */
	wait_fully_owned(&o, 15000, "after kill -9 of the oldest runner");
	fprintf(stderr,
	        "test_lease: kill -9 takeover with default timers: %" PRId64
	        " ms until all %d shards were owned by the two survivors\n",
	        tnow_ms() - t0, nshards);
}

typedef struct claimed {
	int port;
	double before;
} claimed;

static int claimed_again(void *arg)
{
	claimed *c = arg;
	return tmetric(c->port, "cairn_claims_total{of=\"shards\"}") > c->before;
}

/* A fleet that is starting sends a membership notification for each runner
 * that joins, and by the time the relay reads them most are stale. The relay
 * tells the runners the membership as it reads it, once: a stale fingerprint
 * reaches no runner, which would rebalance for nothing and notify again. */
Test(lease, stale_membership_notifications_reach_no_runner)
{
	setup(64);
	start_three_and_wait(NULL);
	double told[3];
	claimed c[3];
	for (int i = 0; i < 3; i++) {
		told[i] = tmetric(ws[i].port, "cairn_members_told_total");
		c[i] = (claimed){ws[i].port, tmetric(ws[i].port, "cairn_claims_total{of=\"shards\"}")};
		check(told[i] >= 0 && c[i].before >= 0, "worker %d: no metrics", i);
	}
	/* Then a wake-up of every runner, in the same transaction: the relay
	 * reads notifications in order, so a runner that claimed for it was told
	 * whatever the relay made of the stale ones. */
	tdb_exec(conn, "SELECT pg_notify('cairn_members', md5(i::text)) FROM generate_series(1, 50) i "
	               "UNION ALL SELECT pg_notify('cairn_wake', id::text) FROM cairn.runners");
	for (int i = 0; i < 3; i++) {
		check(twait(claimed_again, &c[i], 10000), "worker %d never claimed", i);
		double now = tmetric(ws[i].port, "cairn_members_told_total");
		check(now == told[i], "worker %d was told of %g membership changes", i,
		      now - told[i]);
	}
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
	no_outsider_seen();
}

/* ------------------------------------------------------------ detachment */

/* A write to run id on (default, shard) as runner owner with epoch, fenced
 * the way the engine's commit is (a join with the lease row), the run and
 * the lease row read in the shard's part, as the engine's are. */
static int fenced_touch(int shard, int64_t owner, int64_t epoch, int64_t run)
{
	static const char sql[] =
	    "UPDATE cairn.runs SET updated_at = now() WHERE id = $5 AND part = cairn.part_of($2) "
	    "AND EXISTS (SELECT 1 FROM cairn.shard_leases WHERE part = cairn.part_of($2) "
	    "AND shard_group = $1 AND shard = $2 AND owner = $3 AND epoch = $4)";
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
	int64_t run = qint("INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard) "
	                   "VALUES (cairn.new_run_id(%d), cairn.part_of(%d), 'test.fence', 'k', "
	                   "'default', %d) RETURNING id",
	                   shard, shard, shard);
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

/* ------------------------------------------------------------ fenced singletons */

/* The shard test.recorder hashes to. */
static int shard_of_singleton(const char *name)
{
	return hash_shard(name, nshards);
}

typedef struct owner_is {
	int shard;
	int64_t id;
} owner_is;

static int shard_owned_by(void *arg)
{
	owner_is *o = arg;
	return qint("SELECT count(*) FROM cairn.shard_leases WHERE shard_group = 'default' AND "
	            "shard = %d AND owner = %" PRId64,
	            o->shard, o->id) == 1;
}

static int64_t overlapping_pairs(void)
{
	return qint("SELECT count(*) FROM test_singleton a JOIN test_singleton b "
	            "ON a.runner <> b.runner AND a.t_start < b.t_end AND b.t_start < a.t_end");
}

/*
 * The lease backend of the runner running test.recorder is terminated. That
 * runner detaches, but its copy keeps running (it lingers after its cancel
 * until the test releases it), while the other runner takes the shard at
 * once. The singleton's own fence lock keeps the new owner's copy waiting
 * until the old copy has returned: the recorded intervals never overlap.
 */
Test(lease, singleton_fence_keeps_the_new_owner_waiting_while_a_detached_runner_still_runs_it)
{
	setup(64);
	tdb_exec(
	    conn,
	    "CREATE TABLE test_singleton (runner bigint, t_start timestamptz, t_end timestamptz)");
	tdb_exec(conn, "CREATE TABLE test_recorder_release (t timestamptz)");
	/* Detached runners stay detached for the test; a cancelled copy may take
	 * 10 s to return before it would count as a zombie. */
	for (int i = 0; i < 2; i++)
		start(i, plugin_env(), "CAIRN_TEST_RECORDER_LINGER=1", "CAIRN_REATTACH_WINDOW=60s",
		      "CAIRN_SHUTDOWN_TIMEOUT=30s");
	for (int i = 0; i < 2; i++)
		check(thttp_wait(ws[i].port, "/readyz", 200, 20000), "worker %d never became ready",
		      i);
	owned_by o;
	owners_of(&o, 0, 1, -1);
	wait_fully_owned(&o, 20000, "two workers");

	recorder_moved r = {0};
	check(twait(recorder_moved_on, &r, 30000),
	      "test.recorder never ran (is the plugin loaded?)");
	int victim = worker_of(r.now), other = 1 - victim;
	check(victim >= 0, "runner %" PRId64 " is none of the workers", r.now);
	int64_t other_id = runner_id(other);
	int64_t lease_pid = qint("SELECT lease_pid FROM cairn.runners WHERE id = %" PRId64, r.now);
	char *killed_at = tdb_str(conn, "SELECT clock_timestamp()::text");
	check(qint("SELECT pg_terminate_backend(%" PRId64 ")::int", lease_pid) == 1,
	      "pg_terminate_backend failed");

	/* The other runner owns the shard and tried to start its copy... */
	owner_is oi = {.shard = shard_of_singleton("test.recorder"), .id = other_id};
	check(twait(shard_owned_by, &oi, 30000),
	      "the other runner never took test.recorder's shard %d", oi.shard);
	check(tfile_wait(ws[other].log, "singleton waiting for its fence", 30000),
	      "the new owner never tried to start test.recorder");
	/* ... while the detached runner's copy still writes. */
	check(tdb_wait_at_leastf(conn, 5, 30000,
	                         "SELECT count(*) FROM test_singleton WHERE runner = %" PRId64
	                         " AND t_start > '%s'",
	                         r.now, killed_at),
	      "the detached runner's copy stopped writing");
	check(qint("SELECT count(*) FROM test_singleton WHERE runner = %" PRId64, other_id) == 0,
	      "the new owner's copy started while the old copy ran");
	free(killed_at);

	/* The old copy returns; the new owner's copy starts only then. */
	tdb_exec(conn, "INSERT INTO test_recorder_release VALUES (now())");
	r.excl[r.nexcl++] = r.now;
	check(twait(recorder_moved_on, &r, 30000), "test.recorder did not move to the new owner");
	check(r.now == other_id, "test.recorder moved to runner %" PRId64 ", not %" PRId64, r.now,
	      other_id);
	int64_t overlaps = overlapping_pairs();
	check(overlaps == 0,
	      "two runners ran test.recorder at once (%" PRId64 " overlapping pairs)", overlaps);
}

static const char SQL_RECORDER_FENCE_PID[] =
    "SELECT coalesce(max(pid), 0) FROM pg_stat_activity "
    "WHERE application_name = 'cairn-worker singleton test.recorder'";

/* A fence connection of test.recorder other than *arg's backend. */
static int new_fence(void *arg)
{
	int64_t *pid = arg;
	int64_t now = tdb_int(conn, SQL_RECORDER_FENCE_PID);
	return now > 0 && now != *pid;
}

/* The fence connection of test.recorder is terminated: the copy is
 * cancelled (its fence lock is gone) and started again behind a new fence. */
Test(lease, singleton_whose_fence_connection_dies_is_cancelled_and_restarted_behind_a_new_fence)
{
	setup(16);
	start(0, plugin_env(), "CAIRN_SINGLETON_BACKOFF=100ms", NULL, NULL);
	check(thttp_wait(ws[0].port, "/readyz", 200, 20000), "worker never became ready");
	recorder_moved r = {0};
	check(twait(recorder_moved_on, &r, 30000),
	      "test.recorder never ran (is the plugin loaded?)");
	int64_t pid = tdb_int(conn, SQL_RECORDER_FENCE_PID);
	check(pid > 0, "no fence connection for test.recorder in pg_stat_activity");
	check(qint("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
	           "AND granted AND pid = %" PRId64,
	           pid) == 1,
	      "the fence connection holds no advisory lock");
	check(qint("SELECT pg_terminate_backend(%" PRId64 ")::int", pid) == 1,
	      "pg_terminate_backend failed");
	check(tfile_wait(ws[0].log, "fence connection was lost", 20000),
	      "the worker did not notice the lost fence");
	check(tfile_wait(ws[0].log, "singleton stopped: its fence connection was lost", 20000),
	      "test.recorder was not stopped after its fence was lost");
	check(twait(new_fence, &pid, 20000), "no new fence connection after the old one died");
	rows_since since = {.n = 5};
	char *t = tdb_str(conn, "SELECT clock_timestamp()::text");
	snprintf(since.t, sizeof since.t, "%s", t);
	free(t);
	check(twait(rows_written_since, &since, 30000), "test.recorder did not run again");
}

/* The first n in [8, 512] for which, with runners 1 and 2 of equal weight,
 * the desired owner of name's shard is runner 2. */
static int shards_moving_to_runner_2(const char *name)
{
	assign_runner rs[2] = {{1, 100}, {2, 100}};
	uint64_t key = (uint64_t)(uint32_t)hash_group_lock_key("default");
	for (int n = 8; n <= 512; n++)
		if (assign_shard(rs, 2, key, hash_shard(name, n)) == 1)
			return n;
	return -1;
}

typedef struct heartbeat_after {
	int64_t id, after_ms;
} heartbeat_after;

static int heartbeat_advanced(void *arg)
{
	heartbeat_after *h = arg;
	return qint("SELECT ((extract(epoch FROM heartbeat_at) * 1000)::bigint >= %" PRId64
	            ")::int FROM cairn.runners WHERE id = %" PRId64,
	            h->after_ms, h->id) == 1;
}

/*
 * test.stubborn ignores its cancel flag. When a second runner joins and
 * takes its shard, the first runner still releases the shard, stops waiting
 * after the bound (CAIRN_SHUTDOWN_TIMEOUT=1s here), logs a zombie and closes
 * its fence, so the new owner runs it; and the first runner keeps
 * heartbeating and owning its shards well past the runner TTL.
 */
Test(lease, singleton_ignoring_its_cancel_flag_blocks_neither_heartbeats_nor_shard_releases)
{
	int n = shards_moving_to_runner_2("test.stubborn");
	cr_assert(n > 0, "no shard count moves test.stubborn to a second runner");
	setup(n);
	tdb_exec(conn, "CREATE TABLE test_stubborn (runner bigint, t timestamptz)");
	start(0, plugin_env(), "CAIRN_TEST_STUBBORN=1", "CAIRN_SHUTDOWN_TIMEOUT=1s", NULL);
	check(thttp_wait(ws[0].port, "/readyz", 200, 20000), "worker 0 never became ready");
	owned_by o;
	owners_of(&o, 0, -1);
	/* A fresh database numbers runners from 1; the shard count relies on it. */
	check(o.ids[0] == 1, "the first runner has id %" PRId64, o.ids[0]);
	check(tdb_wait_at_leastf(conn, 3, 30000,
	                         "SELECT count(*) FROM test_stubborn WHERE runner = 1"),
	      "test.stubborn never ran on the first runner");

	start(1, plugin_env(), "CAIRN_TEST_STUBBORN=1", "CAIRN_SHUTDOWN_TIMEOUT=1s", NULL);
	owners_of(&o, 0, 1, -1);
	check(o.ids[1] == 2, "the second runner has id %" PRId64, o.ids[1]);
	/* The shard was released although the singleton on it never returned. */
	wait_fully_owned(&o, 30000, "after the second runner joined");
	owner_is oi = {.shard = shard_of_singleton("test.stubborn"), .id = 2};
	check(shard_owned_by(&oi), "test.stubborn's shard %d is not the second runner's", oi.shard);
	check(tfile_wait(ws[0].log, "singleton ignored its cancel flag", 30000),
	      "the first runner did not give up waiting for test.stubborn");
	/* Its fence was closed, so the new owner runs it... */
	check(tdb_wait_at_leastf(conn, 3, 30000,
	                         "SELECT count(*) FROM test_stubborn WHERE runner = 2"),
	      "test.stubborn never ran on the new owner: the zombie's fence was not released");
	/* ... while the zombie still runs (the documented limit). */
	check(tdb_wait_at_leastf(conn, 3, 30000,
	                         "SELECT count(*) FROM test_stubborn WHERE runner = 1 AND t > "
	                         "(SELECT min(t) FROM test_stubborn WHERE runner = 2)"),
	      "the stubborn copy stopped: this test did not exercise a zombie");
	char *body = NULL;
	check(thttp(ws[0].port, "GET", "/status", &body, NULL) == 200 && body &&
	          strstr(body, "\"zombie\":true"),
	      "/status does not show the zombie: %s", body ? body : "");
	free(body);

	/* Heartbeats go on for twice the TTL (2 s) and nothing else moves. */
	heartbeat_after hb = {.id = 1};
	hb.after_ms = qint("SELECT (extract(epoch FROM heartbeat_at) * 1000)::bigint FROM "
	                   "cairn.runners WHERE id = 1") +
	              4000;
	check(twait(heartbeat_advanced, &hb, 30000), "the first runner stopped heartbeating");
	check(qint("SELECT cairn.runner_live(r, 2000)::int FROM cairn.runners r WHERE id = 1") == 1,
	      "the first runner is not live");
	check(fully_owned(&o), "ownership changed after the zombie: %" PRId64 " of %d shards",
	      o.good, nshards);
	check(thttp(ws[0].port, "GET", "/readyz", NULL, NULL) == 200,
	      "the first runner is not ready");

	/* A drain is not held up by the zombie either: it releases, deregisters,
	 * and says a singleton still runs (the daemon exits 0 without freeing). */
	check(stop(0, SIGTERM, 30000) == 0, "SIGTERM: the worker with a zombie did not exit 0");
	check(tfile_wait(ws[0].log, "a singleton ignored its cancel flag and still runs", 1000),
	      "the drain did not report the zombie");
	check(qint("SELECT count(*) FROM cairn.runners WHERE id = 1") == 0,
	      "the drained runner's row is still there");
}

/* ------------------------------------------------------------ health checker */

static void *fake_http_main(void *arg)
{
	fake_http *f = arg;
	while (!atomic_load(&f->stop)) {
		struct pollfd p = {.fd = f->fd, .events = POLLIN};
		if (poll(&p, 1, 50) <= 0)
			continue;
		int c = accept(f->fd, NULL, NULL);
		if (c < 0)
			continue;
		struct timeval tv = {1, 0};
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		char req[2048] = "";
		size_t got = 0;
		for (ssize_t r; got < sizeof req - 1 &&
		                (r = recv(c, req + got, sizeof req - 1 - got, 0)) > 0;) {
			got += (size_t)r;
			req[got] = '\0';
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		const char *resp = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
		if (strncmp(req, "GET /healthz ", 13) == 0)
			resp = atomic_fetch_add(&f->served, 1) < f->fail_first
			           ? "HTTP/1.1 503 Service Unavailable\r\n"
			             "Content-Length: 0\r\nConnection: close\r\n\r\n"
			           : "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
			             "Connection: close\r\n\r\nok\n";
		ssize_t w = send(c, resp, strlen(resp), MSG_NOSIGNAL);
		(void)w;
		close(c);
	}
	return NULL;
}

/* Starts the stand-in on a free port of 127.0.0.1; teardown stops it. */
static fake_http *fake_http_start(int fail_first)
{
	static fake_http f;
	memset(&f, 0, sizeof f);
	f.fail_first = fail_first;
	f.fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(f.fd >= 0 && bind(f.fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	          listen(f.fd, 16) == 0 && getsockname(f.fd, (struct sockaddr *)&a, &len) == 0);
	f.port = ntohs(a.sin_port);
	cr_assert(pthread_create(&f.thread, NULL, fake_http_main, &f) == 0);
	fake = &f;
	return fake;
}

static void fake_http_stop(void)
{
	if (!fake)
		return;
	atomic_store(&fake->stop, 1);
	pthread_join(fake->thread, NULL);
	close(fake->fd);
	fake = NULL;
}

static void set_address(int64_t id, const char *addr)
{
	qint("WITH u AS (UPDATE cairn.runners SET address = '%s' WHERE id = %" PRId64
	     " RETURNING 1) SELECT count(*) FROM u",
	     addr, id);
}

static void make_unreachable(int64_t id)
{
	char a[32];
	snprintf(a, sizeof a, "127.0.0.1:%d", tclosed_port(&closed_fd));
	set_address(id, a);
}

/* Points runner id's address at the stand-in. */
static void answer_with(int64_t id, fake_http *f)
{
	char a[32];
	snprintf(a, sizeof a, "127.0.0.1:%d", f->port);
	set_address(id, a);
}

typedef struct health_watch {
	int64_t id;
	int ports[MAXW]; /* the workers whose cairn_health_checks_total count rounds */
	int nports;
	double rounds_wanted;
	double rounds;
	int ever_unhealthy;
	int64_t failures;
	fake_http *fake; /* when set: wait for requests_wanted requests instead */
	int requests_wanted;
} health_watch;

static int marked_unhealthy(void *arg)
{
	health_watch *h = arg;
	return qint("SELECT (NOT healthy)::int FROM cairn.runners WHERE id = %" PRId64, h->id) == 1;
}

static double health_rounds(health_watch *h)
{
	double sum = 0;
	for (int i = 0; i < h->nports; i++) {
		double m = tmetric(h->ports[i], "cairn_health_checks_total");
		sum += m > 0 ? m : 0;
	}
	return sum;
}

/* Until the checker has run rounds_wanted rounds (or the stand-in served
 * requests_wanted requests); notes on the way whether the runner was ever
 * marked unhealthy, and its recorded failed probes. */
static int checker_rounds_done(void *arg)
{
	health_watch *h = arg;
	h->rounds = health_rounds(h);
	h->ever_unhealthy |=
	    qint("SELECT (NOT healthy)::int FROM cairn.runners WHERE id = %" PRId64, h->id) == 1;
	h->failures = qint("SELECT health_failures FROM cairn.runners WHERE id = %" PRId64, h->id);
	if (h->fake)
		return atomic_load(&h->fake->served) >= h->requests_wanted;
	return h->rounds >= h->rounds_wanted;
}

/* owner:epoch of every shard: unchanged exactly when no shard moved. */
static char *lease_snapshot(void)
{
	return tdb_str(conn,
	               "SELECT string_agg(shard || ':' || owner || ':' || epoch, ',' ORDER BY "
	               "shard) FROM cairn.shard_leases WHERE shard_group = 'default'");
}

struct probe_failure {
	int64_t id;
	int failures;
	const char *reason;
};

/* Some worker logged a failed probe of runner id with this failure count and reason. */
static int probe_failure_logged(void *arg)
{
	const struct probe_failure *pf = arg;
	char want[160];
	snprintf(want, sizeof want, "msg=\"runner health probe failed\" runner_id=%" PRId64,
	         pf->id);
	char count[32];
	snprintf(count, sizeof count, "failures=%d ", pf->failures);
	int found = 0;
	for (int i = 0; i < MAXW && !found; i++) {
		if (!ws[i].log[0])
			continue;
		char *text = tfile_read(ws[i].log);
		for (char *line = text; line && *line && !found;) {
			char *eol = strchr(line, '\n');
			if (eol)
				*eol = '\0';
			found =
			    strstr(line, want) && strstr(line, count) && strstr(line, pf->reason);
			line = eol ? eol + 1 : NULL;
		}
		free(text);
	}
	return found;
}

/* probe_failure_logged within 10 s: the checker logs a probe after the
 * statement that counted it (and may mark the runner unhealthy) commits. */
static int logged_probe_failure(int64_t id, int failures, const char *reason)
{
	struct probe_failure pf = {id, failures, reason};
	return twait(probe_failure_logged, &pf, 10000);
}

static void start_two_and_wait(owned_by *o)
{
	for (int i = 0; i < 2; i++)
		start(i, NULL, NULL, NULL, NULL);
	for (int i = 0; i < 2; i++)
		check(thttp_wait(ws[i].port, "/readyz", 200, 20000), "worker %d never became ready",
		      i);
	owners_of(o, 0, 1, -1);
	wait_fully_owned(o, 20000, "two workers");
}

Test(lease, health_checker_marks_a_runner_answering_503_unhealthy_and_its_shards_move)
{
	setup(64);
	owned_by o;
	start_two_and_wait(&o);
	health_watch h = {.id = o.ids[1]};
	answer_with(h.id, fake_http_start(INT_MAX));
	check(twait(marked_unhealthy, &h, 20000),
	      "the runner answering 503 was never marked unhealthy");
	check(logged_probe_failure(h.id, 3, "answered 503"), "no third failed probe logged");
	owners_of(&o, 0, -1);
	wait_fully_owned(&o, 30000, "after the other runner was marked unhealthy");
}

Test(lease, health_checker_single_failed_probe_changes_nothing)
{
	setup(64);
	owned_by o;
	start_two_and_wait(&o);
	char *before = lease_snapshot();
	/* One 503, then 200s: wait for three more answers after the failure. */
	health_watch h = {.id = o.ids[1], .requests_wanted = 4};
	h.fake = fake_http_start(1);
	answer_with(h.id, h.fake);
	check(twait(checker_rounds_done, &h, 30000), "the checker probed %d times, wanted %d",
	      atomic_load(&h.fake->served), h.requests_wanted);
	check(logged_probe_failure(h.id, 1, "answered 503"),
	      "the failed probe was not counted and logged");
	check(!h.ever_unhealthy, "one failed probe marked the runner unhealthy");
	check(h.failures == 0, "the failure count is %" PRId64 " after successful probes",
	      h.failures);
	char *after = lease_snapshot();
	check(before && after && strcmp(before, after) == 0,
	      "shards moved after one failed probe:\n before %s\n after  %s", before, after);
	free(before);
	free(after);
	check(fully_owned(&o), "ownership changed after one failed probe");
}

Test(lease, health_checker_keeps_a_live_runner_that_does_not_answer_and_its_shards)
{
	setup(64);
	owned_by o;
	start_two_and_wait(&o);
	char *before = lease_snapshot();
	/* Its lease and heartbeat are fine; only its advertised address is wrong.
	 * Six rounds are twice the failures (3) after which a runner answering
	 * 503 would be marked. */
	health_watch h = {.id = o.ids[1], .ports = {ws[0].port, ws[1].port}, .nports = 2};
	make_unreachable(h.id);
	h.rounds_wanted = health_rounds(&h) + 6;
	check(twait(checker_rounds_done, &h, 30000), "the health checker ran %g rounds, wanted %g",
	      h.rounds, h.rounds_wanted);
	check(h.failures >= 3,
	      "only %" PRId64 " failed probes recorded: the checker did not see it down",
	      h.failures);
	check(logged_probe_failure(h.id, 3, "no answer"), "the third failed probe was not logged");
	check(!h.ever_unhealthy, "a live runner that does not answer was marked unhealthy");
	char *after = lease_snapshot();
	check(before && after && strcmp(before, after) == 0,
	      "shards moved off a live runner:\n before %s\n after  %s", before, after);
	free(before);
	free(after);
	int kept = 0;
	for (int i = 0; i < 2 && !kept; i++) {
		char *text = tfile_read(ws[i].log);
		kept = text && strstr(text, "kept healthy with its shards");
		free(text);
	}
	check(kept, "the checker did not explain why it kept the runner");
}

Test(lease, health_checker_never_marks_the_last_healthy_runner_unhealthy)
{
	setup(64);
	start(0, NULL, NULL, NULL, NULL);
	check(thttp_wait(ws[0].port, "/readyz", 200, 20000), "worker never became ready");
	owned_by o;
	owners_of(&o, 0, -1);
	wait_fully_owned(&o, 20000, "one worker");
	/* Its address answers 503: every probe fails. Six rounds are twice the
	 * failures (3) after which any other runner would be marked. */
	health_watch h = {.id = o.ids[0], .ports = {ws[0].port}, .nports = 1};
	answer_with(h.id, fake_http_start(INT_MAX));
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

/* The form docs/configuration.md gives (CAIRN_ADVERTISE_ADDR): listen on
 * every interface, advertise an address other runners can call. Both stay
 * healthy and share the shards. */
Test(lease, workers_listening_on_every_interface_with_an_advertised_address_share_the_shards)
{
	setup(64);
	for (int i = 0; i < 2; i++)
		start(i, "CAIRN_HTTP_ADDR=0.0.0.0:0", "CAIRN_ADVERTISE_ADDR=127.0.0.1:0", NULL,
		      NULL);
	for (int i = 0; i < 2; i++)
		check(thttp_wait(ws[i].port, "/readyz", 200, 20000), "worker %d never became ready",
		      i);
	owned_by o;
	owners_of(&o, 0, 1, -1);
	wait_fully_owned(&o, 20000, "two workers on 0.0.0.0");
	for (int i = 0; i < 2; i++) {
		char want[32];
		snprintf(want, sizeof want, "127.0.0.1:%d", ws[i].port);
		char *addr = tdb_str(conn, "SELECT string_agg(address, ',') FROM cairn.runners");
		check(addr && strstr(addr, want), "runner addresses %s lack %s", addr ? addr : "",
		      want);
		free(addr);
	}
	health_watch h = {.id = o.ids[0], .ports = {ws[0].port, ws[1].port}, .nports = 2};
	h.rounds_wanted = health_rounds(&h) + 6;
	check(twait(checker_rounds_done, &h, 30000), "the health checker ran %g rounds, wanted %g",
	      h.rounds, h.rounds_wanted);
	check(qint("SELECT count(*) FROM cairn.runners WHERE healthy AND health_failures = 0") == 2,
	      "a runner failed its health checks");
	check(fully_owned(&o), "ownership changed");
}

/* ------------------------------------------------------------ outsiders */

/*
 * Issue 37, item 2: any login may take the shard locks first. A squatter
 * (a login role granted only cairn_client) holds every shard lock of group
 * default; the worker must say so within one lease TTL (a log line naming
 * the squatter's pid, user and application_name, a metric, /readyz 503 with
 * the reason), `cairn shards` must show who holds the shards, and the runs
 * must complete once the squatter is gone: ended by the worker if its role
 * may, else closed here.
 */
#define TTL_MS   2000 /* FAST's CAIRN_RUNNER_TTL */
#define SQUAT_AS "squatter-test"
#define NRUNS    8

/* Login roles made by a test (cluster-wide): dropped at its end. */
static char roles[2][96];
static PGconn *squatter; /* closed by the test, or at its end */

static void drop_roles(void)
{
	if (squatter)
		PQfinish(squatter);
	squatter = NULL;
	for (int i = 0; i < 2; i++) {
		if (!roles[i][0] || !conn)
			continue;
		char sql[512];
		snprintf(sql, sizeof sql, "DROP OWNED BY %s; DROP ROLE %s", roles[i], roles[i]);
		PQclear(PQexec(conn, sql));
		roles[i][0] = '\0';
	}
}

/* Creates login role roles[i] named prefix_DATABASE (unique: the test's own
 * database) with CONNECT on it, then runs grants (with %s for the role, up
 * to four times). Returns the conninfo of db as that role in url. */
static const char *role_new(int i, const char *prefix, const char *grants, char *url, size_t n)
{
	PGconn *c = conn;
	snprintf(roles[i], sizeof roles[i], "%s_%s", prefix, PQdb(c));
	char sql[2048];
	snprintf(sql, sizeof sql, "CREATE ROLE %s LOGIN; GRANT CONNECT ON DATABASE %s TO %s",
	         roles[i], PQdb(c), roles[i]);
	tdb_exec(c, sql);
	snprintf(sql, sizeof sql, grants, roles[i], roles[i], roles[i], roles[i]);
	tdb_exec(c, sql);
	snprintf(url, n, "%s user=%s", db, roles[i]);
	return url;
}

/* A session as a role granted only cairn_client that takes every shard lock
 * of group default, as the audit did. */
static PGconn *squat(void)
{
	char url[2200], sql[256];
	role_new(0, "squat", "GRANT cairn_client TO %s", url, sizeof url);
	size_t k = strlen(url);
	snprintf(url + k, sizeof url - k, " application_name=%s", SQUAT_AS);
	PGconn *s = squatter = tdb_connect(url);
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM generate_series(0, %d) s "
	         "WHERE pg_try_advisory_lock(%d, s)",
	         nshards - 1, (int)hash_group_lock_key("default"));
	cr_assert_eq(tdb_int(s, sql), nshards, "the squatter did not get every shard lock");
	/* It may enqueue, too (cairn_client): runs that wait for the shards. */
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM generate_series(1, %d) g, "
	         "cairn.enqueue('noop', '{}', 'squatted-' || g)",
	         NRUNS);
	cr_assert_eq(tdb_int(s, sql), NRUNS);
	return s;
}

/* A worker role with the table and function privileges a worker needs, not
 * a superuser, not in pg_signal_backend, not a member of the squatter's role:
 * it may not terminate the squatter's backend. */
static const char WORKER_GRANTS[] =
    "GRANT USAGE ON SCHEMA cairn TO %s; "
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cairn TO %s; "
    "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA cairn TO %s; "
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cairn TO %s";

/* A log line of path with every one of the NULL-terminated texts. */
typedef struct log_line {
	const char *path;
	const char *has[6];
} log_line;

static int log_has_line(void *arg)
{
	log_line *w = arg;
	char *text = tfile_read(w->path);
	int found = 0;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && !found;
	     line = strtok_r(NULL, "\n", &save)) {
		found = 1;
		for (int i = 0; w->has[i] && found; i++)
			found = strstr(line, w->has[i]) != NULL;
	}
	free(text);
	return found;
}

typedef struct readyz_says {
	int port;
	long status;
	const char *has[4];
	char body[1024];
} readyz_says;

static int readyz_answers(void *arg)
{
	readyz_says *r = arg;
	char *body = NULL;
	long st = thttp(r->port, "GET", "/readyz", &body, NULL);
	snprintf(r->body, sizeof r->body, "%s", body ? body : "");
	free(body);
	int ok = st == r->status;
	for (int i = 0; ok && r->has[i]; i++)
		ok = strstr(r->body, r->has[i]) != NULL;
	return ok;
}

typedef struct metric_is {
	int port;
	const char *name;
	double want, got;
} metric_is;

static int metric_equals(void *arg)
{
	metric_is *m = arg;
	return (m->got = tmetric(m->port, m->name)) == m->want;
}

/* Collapses runs of spaces (a table's padding) to one, in place. */
static void squeeze(char *s)
{
	char *o = s;
	for (const char *p = s; *p; p++)
		if (*p != ' ' || o == s || o[-1] != ' ')
			*o++ = *p;
	*o = '\0';
}

/* Waits for worker i's runner row; returns when it registered (tnow_ms). */
static int64_t registered_at(int i)
{
	registration r = {.worker = i};
	check(twait(registered, &r, 30000), "worker %d never registered", i);
	return tnow_ms();
}

static int64_t runs_completed(void)
{
	return qint("SELECT count(*) FROM cairn.runs WHERE key LIKE 'squatted-%%' "
	            "AND status = 'completed'");
}

Test(lease, squatted_shards_are_reported_within_the_ttl_by_a_worker_that_may_not_end_the_squatter)
{
	setup(16);
	PGconn *sq = squat();
	int spid = PQbackendPID(sq);
	char wurl[2200], pidtext[32], user[128];
	role_new(1, "wk", WORKER_GRANTS, wurl, sizeof wurl);
	snprintf(pidtext, sizeof pidtext, "pid=%d", spid);
	snprintf(user, sizeof user, "user=%s", roles[0]);

	tlog_file(ws[0].log);
	ws[0].pid = tworker_start(wurl, &ws[0].port, ws[0].log, FAST, NULL);
	int64_t t0 = registered_at(0);
	log_line said = {ws[0].log,
	                 {"not a live runner's lease backend", pidtext, user,
	                  "application_name=" SQUAT_AS, NULL}};
	check(twait(log_has_line, &said, TTL_MS),
	      "no log line naming the squatter (%s %s application_name=%s) within the TTL", pidtext,
	      user, SQUAT_AS);
	metric_is held = {ws[0].port, "cairn_shards_held_by_outsiders", nshards, 0};
	check(twait(metric_equals, &held, TTL_MS - (tnow_ms() - t0)),
	      "cairn_shards_held_by_outsiders is %g, not %d, one TTL after registering", held.got,
	      nshards);
	char pid_in_reason[32];
	snprintf(pid_in_reason, sizeof pid_in_reason, "pid %d", spid);
	readyz_says rz = {ws[0].port, 503, {pid_in_reason, roles[0], SQUAT_AS, NULL}, ""};
	check(twait(readyz_answers, &rz, TTL_MS - (tnow_ms() - t0)),
	      "/readyz did not answer 503 naming the squatter within the TTL: %s", rz.body);
	fprintf(stderr,
	        "test_lease: outsider reported %" PRId64 " ms after registering (TTL %d "
	        "ms); /readyz: %s",
	        tnow_ms() - t0, TTL_MS, rz.body);

	/* cairn shards names the holder of every shard. */
	char *out = NULL, *err = NULL;
	check(tcli(db, &out, &err, "shards", "--json", NULL) == 0, "cairn shards: %s", err);
	cJSON *j = cJSON_Parse(out);
	cJSON *list = cJSON_GetObjectItem(j, "shards"), *it;
	int shown = 0;
	cJSON_ArrayForEach(it, list)
	{
		cJSON *o = cJSON_GetObjectItem(it, "outsider");
		shown +=
		    cJSON_IsObject(o) &&
		    (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid")) == spid &&
		    strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "user")), roles[0]) == 0 &&
		    strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "application_name")),
		           SQUAT_AS) == 0;
	}
	check(shown == nshards,
	      "cairn shards --json shows %d of %d shards held by the squatter: %s", shown, nshards,
	      out);
	cJSON_Delete(j);
	free(out);
	free(err);
	check(tcli(db, &out, &err, "shards", NULL) == 0, "cairn shards: %s", err);
	squeeze(out);
	char line[256];
	snprintf(line, sizeof line, "default 0 - 0 outsider pid=%d user=%s application_name=%s",
	         spid, roles[0], SQUAT_AS);
	check(strstr(out, line) != NULL, "cairn shards lacks \"%s\":\n%s", line, out);
	free(out);
	free(err);

	/* The worker may not end it: the squatter is still there, the runs wait. */
	check(tdb_int(sq, "SELECT 1") == 1, "the squatter's session was ended");
	check(runs_completed() == 0, "runs completed while the squatter held every shard");

	/* Once it leaves, the worker takes the shards and the runs complete. */
	PQfinish(sq);
	squatter = NULL;
	check(tdb_wait_at_leastf(conn, NRUNS, 30000,
	                         "SELECT count(*) FROM cairn.runs WHERE key LIKE 'squatted-%%' "
	                         "AND status = 'completed'"),
	      "the runs did not complete after the squatter left (%" PRId64 " of %d)",
	      runs_completed(), NRUNS);
	held.want = 0;
	check(twait(metric_equals, &held, 10000), "cairn_shards_held_by_outsiders stays %g",
	      held.got);
	check(thttp_wait(ws[0].port, "/readyz", 200, 10000), "/readyz did not answer 200 again");
	stop(0, SIGKILL, 10000);
	drop_roles();
}

static int backend_gone(void *arg)
{
	return qint("SELECT count(*) FROM pg_stat_activity WHERE pid = %d", *(int *)arg) == 0;
}

Test(lease, a_worker_whose_role_may_terminate_a_squatter_ends_it_and_the_runs_complete)
{
	setup(16);
	PGconn *sq = squat();
	int spid = PQbackendPID(sq);
	char pidtext[32], user[128];
	snprintf(pidtext, sizeof pidtext, "pid=%d", spid);
	snprintf(user, sizeof user, "user=%s", roles[0]);
	start(0, NULL, NULL, NULL, NULL); /* as the cluster's superuser, cairn */
	int64_t t0 = registered_at(0);
	check(twait(backend_gone, &spid, TTL_MS),
	      "the squatter's backend %d is still there one "
	      "TTL after the worker registered",
	      spid);
	log_line said = {ws[0].log,
	                 {"terminated", pidtext, user, "application_name=" SQUAT_AS, NULL}};
	check(twait(log_has_line, &said, 5000),
	      "no log line saying the worker terminated the squatter (%s %s)", pidtext, user);
	fprintf(stderr, "test_lease: squatter terminated %" PRId64 " ms after registering\n",
	        tnow_ms() - t0);
	check(tdb_wait_at_leastf(conn, NRUNS, 30000,
	                         "SELECT count(*) FROM cairn.runs WHERE key LIKE 'squatted-%%' "
	                         "AND status = 'completed'"),
	      "the runs did not complete after the squatter was ended (%" PRId64 " of %d)",
	      runs_completed(), NRUNS);
	metric_is ended = {ws[0].port, "cairn_outsiders_terminated_total", 1, 0};
	check(twait(metric_equals, &ended, 5000), "cairn_outsiders_terminated_total is %g",
	      ended.got);
	check(thttp_wait(ws[0].port, "/readyz", 200, 10000), "/readyz did not answer 200");
	stop(0, SIGKILL, 10000);
	drop_roles();
}
