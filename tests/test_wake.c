/*
 * test_wake.c - a run starts because its owner is woken, never because a poll
 * came round: every worker here polls once an hour (CAIRN_POLL_INTERVAL=1h),
 * so a skipped wake-up would leave a run waiting past every deadline below.
 * Bursts of enqueues against an idle worker, a busy one, one whose poller
 * goes busy (writers stop waking it) and idle again while enqueuers race it,
 * and one in the middle of a hand-over (the wake relay may move with its shard: a relay that
 * starts pokes every runner); an SQL API enqueue that read its owner busy and
 * commits after the owner has nothing left to claim, there or on the worker
 * that took its shard meanwhile; a wake-up that names its run, claimed by id;
 * a new run claimed by a short statement of its own, and one that a signal
 * waits for by the full claim; a durable sleep that ends when it is due; a
 * worker that learns of a delayed run from its enqueue; a batch of new
 * runs.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "support.h"

#define SHARDS   64
#define DEADLINE 20000 /* ms; the poll interval is 3,600,000 */

static const char *db;
static PGconn *conn;
static cairn_client *client;
static char log_a[64], log_b[64];

static void setup(void)
{
	db = tdb_new_migrated_shards(SHARDS);
	conn = tdb_connect(db);
	cr_assert_eq(cairn_client_open(db, &client), CAIRN_OK, "%s", cairn_client_errmsg(client));
	tlog_file(log_a);
	tlog_file(log_b);
}

static void teardown(void)
{
	cairn_client_free(client);
	PQfinish(conn);
}

/* Whether the database has more than one part: `cairn migrate --citus`
 * distributed it (CAIRN_TEST_CITUS). There an enqueue never hands its run
 * over from inside its transaction, and a run a wake-up names is claimed
 * by the claim of named runs of its part, never by the short claim of a
 * new run: both are one server's (client.c, ST_ENQUEUE_PUSH; dispatch.c,
 * claim_parts). */
static int with_parts(void)
{
	return tdb_int(conn, "SELECT count(*) FROM cairn.parts") > 1;
}

/* Skips the test on a database with parts, saying why also where
 * Criterion's log does not show a skip's reason (without --verbose). */
#define SKIP_WITH_PARTS(why)                                                                       \
	do {                                                                                       \
		if (with_parts()) {                                                                \
			fprintf(stderr, "test_wake: skipped on Citus: %s\n", why);                 \
			cr_skip_test("%s", why);                                                   \
		}                                                                                  \
	} while (0)

static void dump_logs(void)
{
	char *a = tfile_read(log_a), *b = tfile_read(log_b);
	fprintf(stderr, "--- worker a\n%s\n--- worker b\n%s\n", a ? a : "", b ? b : "");
	free(a);
	free(b);
}

static int port_a, port_b;

static pid_t worker(const char *log, const char *concurrency)
{
	return tworker_start(db, log == log_a ? &port_a : NULL, log, "CAIRN_POLL_INTERVAL=1h",
	                     concurrency, NULL);
}

/* A worker of the flows plugin, with the setting extra (or none). */
static pid_t flows_worker_with(const char *log, const char *extra)
{
	static char plugins[512];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	return tworker_start(db, log == log_a ? &port_a : &port_b, log, "CAIRN_POLL_INTERVAL=1h",
	                     "CAIRN_CONCURRENCY=4", plugins, extra, NULL);
}

static pid_t flows_worker(const char *log)
{
	return flows_worker_with(log, NULL);
}

/* The worker logging to log runs the wake relay (cairn.relay). */
static void relay_started(const char *log)
{
	tcheck(dump_logs,
	       tfile_wait(log, "msg=\"singleton started\" singleton=cairn.relay", DEADLINE),
	       "the wake relay never started");
}

/* Every shard is owned by one of `owners` distinct live runners. */
static int owned_by(int owners)
{
	return tdb_intf(conn, "SELECT count(*) FROM cairn.shard_leases l JOIN cairn.runners r "
	                      "ON r.id = l.owner") == SHARDS &&
	       tdb_intf(conn, "SELECT count(DISTINCT owner) FROM cairn.shard_leases") == owners;
}

static int one_owner(void *arg)
{
	(void)arg;
	return owned_by(1);
}

/* Worker a, with 4 executors, once it owns every shard and its wake relay
 * runs. */
static pid_t ready_worker_a(void)
{
	pid_t a = worker(log_a, "CAIRN_CONCURRENCY=4");
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	relay_started(log_a);
	return a;
}

static int two_owners(void *arg)
{
	(void)arg;
	return owned_by(2);
}

static int64_t enqueue(const char *workflow, const char *input, int64_t delay_ms)
{
	cairn_enqueue_opts o = {.input = input, .delay_ms = delay_ms};
	cairn_enqueued e;
	int rc = cairn_enqueue(client, workflow, &o, &e);
	cr_assert_eq(rc, CAIRN_OK, "enqueue %s: %s", workflow, cairn_client_errmsg(client));
	cairn_enqueued_clear(&e);
	return e.id;
}

static void burst(int n)
{
	for (int i = 0; i < n; i++)
		enqueue("noop", "{}", 0);
}

/* Waits until `want` runs have completed; reports the slowest start. */
static void all_completed(int64_t want, const char *what)
{
	int ok = tdb_wait_at_leastf(conn, want, DEADLINE,
	                            "SELECT count(*) FROM cairn.runs WHERE status = 'completed'");
	int64_t done = tdb_intf(conn, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'");
	tcheck(dump_logs, ok,
	       "%s: %" PRId64 " of %" PRId64
	       " runs completed within %d ms with a 1 h poll interval",
	       what, done, want, DEADLINE);
	fprintf(stderr, "test_wake: %s: slowest start %" PRId64 " ms after its enqueue\n", what,
	        tdb_intf(conn, "SELECT max((extract(epoch FROM started_at - created_at) * "
	                       "1000)::bigint) FROM cairn.runs"));
}

TestSuite(wake, .init = setup, .fini = teardown, .timeout = 120);

Test(wake, a_burst_against_an_idle_worker_starts_without_a_poll)
{
	pid_t a = ready_worker_a();
	burst(100);
	all_completed(100, "idle worker");
	/* Idle again: a second burst needs a second wake. */
	burst(100);
	all_completed(200, "idle worker, second burst");
	tworker_stop(a, SIGTERM, 30000);
}

/*
 * A batch of new runs (cairn_enqueue_batch) wakes the idle owner of their
 * shards: its wake-up (ST_WAKE_SHARDS) was sent 3 parameters for its 4, so
 * it failed at bind, and the runs waited for a poll.
 */
Test(wake, a_batch_of_new_runs_against_an_idle_worker_starts_without_a_poll)
{
	pid_t a = ready_worker_a();
	enum { N = 50 };
	cairn_enqueue_opts o[N];
	cairn_enqueued out[N];
	for (int round = 1; round <= 2; round++) {
		for (int i = 0; i < N; i++)
			o[i] = (cairn_enqueue_opts){.input = "{}"};
		cr_assert_eq(cairn_enqueue_batch(client, "noop", N, o, out), CAIRN_OK, "%s",
		             cairn_client_errmsg(client));
		/* Idle again after the first: the second batch needs a second
		 * wake. */
		all_completed(round * N, round == 1 ? "a batch" : "a second batch");
	}
	tworker_stop(a, SIGTERM, 30000);
}

Test(wake, a_burst_against_a_busy_worker_starts_without_a_poll)
{
	tdb_exec(conn, "CREATE TABLE t_attempts (run_id bigint NOT NULL, at timestamptz NOT NULL);"
	               "CREATE TABLE t_counter (run_id bigint PRIMARY KEY, n integer NOT NULL)");
	pid_t a = flows_worker(log_a);
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	relay_started(log_a);
	/* Two of the four executors are busy in a long step while noops come in. */
	enqueue("t.stubborn", "{\"ms\": 3000}", 0);
	enqueue("t.stubborn", "{\"ms\": 3000}", 0);
	tcheck(dump_logs, tdb_wait_at_least(conn, "SELECT count(*) FROM t_attempts", 2, DEADLINE),
	       "the long steps never started");
	for (int i = 0; i < 5; i++)
		burst(40);
	tcheck(dump_logs,
	       tdb_wait_at_least(conn,
	                         "SELECT count(*) FROM cairn.runs WHERE workflow = 'noop' "
	                         "AND status = 'completed'",
	                         200, DEADLINE),
	       "the noops enqueued while the worker was busy did not all complete");
	all_completed(202, "busy worker");
	tworker_stop(a, SIGTERM, 30000);
}

#define RACE_RUNS 8 /* per enqueuer and round */

/* One of the enqueuers racing the poller: its own client, runs one by one. */
static void *enqueuer(void *arg)
{
	cairn_client *c = NULL;
	int *failed = arg;
	if (cairn_client_open(db, &c) != CAIRN_OK) {
		*failed = 1;
	} else {
		for (int i = 0; i < RACE_RUNS && !*failed; i++) {
			cairn_enqueue_opts o = {.input = "{}"};
			cairn_enqueued e;
			*failed = cairn_enqueue(c, "noop", &o, &e) != CAIRN_OK;
			cairn_enqueued_clear(&e);
		}
	}
	cairn_client_free(c);
	return NULL;
}

/* Four enqueuers at once make the poller's claims find several runs, so it
 * goes busy and writers stop waking it; when the burst ends it goes idle
 * again, racing the last enqueues (a run missed there has no later enqueue
 * to wake the poller for it). Many short rounds: each must start every run. */
Test(wake, enqueuers_racing_a_poller_that_goes_busy_and_idle_start_without_a_poll)
{
	pid_t a = worker(log_a, "CAIRN_CONCURRENCY=8");
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	relay_started(log_a);
	enum { T = 4, ROUNDS = 40 };
	for (int round = 1; round <= ROUNDS; round++) {
		pthread_t t[T];
		int failed[T] = {0};
		for (int i = 0; i < T; i++)
			cr_assert_eq(pthread_create(&t[i], NULL, enqueuer, &failed[i]), 0);
		for (int i = 0; i < T; i++) {
			pthread_join(t[i], NULL);
			cr_assert(!failed[i], "an enqueue of round %d failed", round);
		}
		char what[32];
		snprintf(what, sizeof what, "racing round %d", round);
		all_completed((int64_t)round * T * RACE_RUNS, what);
	}
	double busy = tmetric(port_a, "cairn_poller_busy_total");
	fprintf(stderr, "test_wake: the poller went busy %.0f times\n", busy);
	cr_assert_gt(busy, 0, "the poller never went busy: the race was not exercised");
	tcheck(
	    dump_logs,
	    tdb_wait_at_least(conn, "SELECT count(*) FROM cairn.runners WHERE idle", 1, DEADLINE),
	    "the idle poller left runners.idle false: writers would not wake it");
	tworker_stop(a, SIGTERM, 30000);
}

Test(wake, a_burst_during_a_hand_over_starts_without_a_poll)
{
	pid_t a = worker(log_a, "CAIRN_CONCURRENCY=4");
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "worker a never owned every shard");
	relay_started(log_a);
	/* Worker b joins: shards move from a to b while the runs come in. */
	pid_t b = worker(log_b, "CAIRN_CONCURRENCY=4");
	int64_t n = 0, t0 = tnow_ms();
	while (!two_owners(NULL) && tnow_ms() - t0 < DEADLINE) {
		burst(10);
		n += 10;
	}
	tcheck(dump_logs, two_owners(NULL), "the shards never settled on both workers");
	burst(50);
	n += 50;
	fprintf(stderr, "test_wake: hand-over: %" PRId64 " runs enqueued while the shards moved\n",
	        n - 50);
	all_completed(n, "hand-over");
	tworker_stop(b, SIGTERM, 30000);
	tworker_stop(a, SIGTERM, 30000);
}

#define HOLD_RUNS 80

/* The keys prefix || g, g from 1 to n, with their shards, as CTE k, and
 * the join that keeps those of the shards a runner owns (any shard when it
 * is 0; two arguments, the runner twice, each a PRId64). The shards are
 * computed first, in a CTE of their own: on Citus, cairn.shard_of in a
 * statement with shard_leases would run on the nodes, where its read of
 * cairn.settings is a distributed query inside one ("cannot execute a
 * distributed query from a query on a shard"). */
#define KEYS_OF(prefix, n)                                                                         \
	"WITH k AS MATERIALIZED (SELECT g, '" prefix "' || g AS k, "                               \
	"  cairn.shard_of('" prefix "' || g) AS shard FROM generate_series(1, " n ") g) "
#define KEYS_OWNED                                                                                 \
	"JOIN cairn.shard_leases l ON l.shard_group = 'default' AND l.shard = k.shard "            \
	"WHERE (l.owner = %" PRId64 " OR %" PRId64 " = 0)"

/* Whether every t.hold run has completed. */
static int holds_ended(void *arg)
{
	(void)arg;
	return tdb_int(conn, "SELECT count(*) FROM cairn.runs WHERE workflow = 't.hold' "
	                     "AND status <> 'completed'") == 0;
}

/* Whether the t.hold runs have ended and worker a's poller, with nothing
 * left to claim, went idle or was kept from it (a writer held a wake lock). */
static int burst_over(void *arg)
{
	return holds_ended(arg) &&
	       (tdb_int(conn, "SELECT count(*) FROM cairn.runners WHERE idle") >= 1 ||
	        tmetric(port_a, "cairn_poller_idle_deferred_total") >= 1);
}

/* A worker of the flows plugin whose poller claims 2 runs at a time, so a
 * burst keeps it busy (claiming back to back) for a while. */
static pid_t holding_worker(const char *log)
{
	return flows_worker_with(log, "CAIRN_POLL_BATCH=2");
}

/* HOLD_RUNS t.hold runs of 25 ms, back to back, with keys of the shards
 * runner owns (any shard when runner is 0). */
static void hold_burst(int64_t runner)
{
	char sql[512];
	snprintf(sql, sizeof sql,
	         KEYS_OF("hold-", "10000") "SELECT string_agg(k, ' ' ORDER BY g) FROM (SELECT k.k, "
	                                   "k.g FROM k " KEYS_OWNED " ORDER BY k.g LIMIT %d) x",
	         runner, runner, HOLD_RUNS);
	char *keys = tdb_str(conn, sql);
	int n = 0;
	for (char *save = NULL, *k = strtok_r(keys, " ", &save); k;
	     k = strtok_r(NULL, " ", &save)) {
		cairn_enqueue_opts o = {.input = "{\"ms\": 25}", .key = k};
		cairn_enqueued e;
		cr_assert_eq(cairn_enqueue(client, "t.hold", &o, &e), CAIRN_OK, "%s",
		             cairn_client_errmsg(client));
		cairn_enqueued_clear(&e);
		n++;
	}
	free(keys);
	cr_assert_eq(n, HOLD_RUNS, "only %d keys of the runner's shards", n);
}

/* In the open transaction tx, once runner (0: any) is busy: a run enqueued
 * through the SQL API with a key of the shards runner owns, which must
 * have woken nobody (its owner read busy); its id. */
static int64_t sql_enqueue_unwoken(PGconn *tx, int64_t runner)
{
	tcheck(dump_logs,
	       tdb_wait_at_leastf(tx, 1, DEADLINE,
	                          "SELECT count(*) FROM cairn.runners WHERE NOT idle AND "
	                          "(id = %" PRId64 " OR %" PRId64 " = 0)",
	                          runner, runner),
	       "the poller never went busy");
	/* The key first, then the enqueue in a statement that reads no
	 * distributed table: on Citus a call in a statement over shard_leases
	 * would run on the nodes. */
	char sql[512];
	snprintf(sql, sizeof sql,
	         KEYS_OF("late-", "1000") "SELECT k.k FROM k " KEYS_OWNED " ORDER BY k.g LIMIT 1",
	         runner, runner);
	char *key = tdb_str(tx, sql);
	cr_assert(key, "no key of the runner's shards");
	const char *p[] = {key};
	PGresult *r = PQexecParams(tx, "SELECT (cairn.enqueue('noop', key => $1)).id", 1, NULL, p,
	                           NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(tx));
	int64_t id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	free(key);
	cr_assert_eq(tdb_int(tx, "SELECT (coalesce(current_setting('cairn.woken', true), '') "
	                         "<> '')::int"),
	             0,
	             "the enqueue woke the poller (it went idle first): the race was not set up");
	return id;
}

/* Commits tx; the run id must then start without a poll. */
static void committed_run_starts(PGconn *tx, int64_t id, const char *what)
{
	tdb_exec(tx, "COMMIT");
	tcheck(dump_logs,
	       tdb_wait_at_leastf(conn, 1, DEADLINE,
	                          "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                          " AND status = 'completed'",
	                          id),
	       "%s: a run enqueued through the SQL API while its owner was busy, committed "
	       "late, did not start within %d ms (poll: 1 h)",
	       what, DEADLINE);
}

/*
 * The SQL API wakes a run's owner inside the caller's transaction, so it
 * reads runners.idle before that transaction commits. Here it reads false:
 * the poller is busy with a burst (a poll batch of 2 keeps it claiming), and
 * the wake-up is skipped. The caller commits only after the burst is over,
 * when the poller has nothing left to claim and would sleep: it must not go
 * idle before that commit (it cannot take the shard's wake lock the caller
 * holds), so it claims again and the run starts.
 */
Test(wake, an_sql_enqueue_that_read_its_owner_busy_starts_after_a_late_commit_without_a_poll)
{
	pid_t a = holding_worker(log_a);
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	relay_started(log_a);
	PGconn *tx = tdb_connect(db);
	hold_burst(0);
	tdb_exec(tx, "BEGIN");
	int64_t id = sql_enqueue_unwoken(tx, 0);
	tcheck(dump_logs, twait(burst_over, NULL, DEADLINE),
	       "the burst of t.hold runs never ended");
	committed_run_starts(tx, id, "one worker");
	double deferred = tmetric(port_a, "cairn_poller_idle_deferred_total");
	fprintf(stderr, "test_wake: the poller was kept from going idle %.0f times\n", deferred);
	cr_assert_geq(deferred, 1, "the poller went idle while the enqueue was not committed");
	PQfinish(tx);
	tworker_stop(a, SIGTERM, 30000);
}

/* Worker b (runner *arg) owns every shard, and its poller has tried to go
 * idle since. */
static int b_took_all_and_tried_idle(void *arg)
{
	return tdb_intf(conn, "SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64,
	                *(int64_t *)arg) == SHARDS &&
	       tmetric(port_b, "cairn_poller_idle_deferred_total") >= 1;
}

/*
 * The same race across a hand-over: the enqueue reads the shard's owner, a,
 * busy, and skips the wake-up; a then leaves, and b, idle all along, takes
 * the shard and claims before the enqueue commits. b must not sleep on it:
 * a worker that took shards is busy until it can take their wake locks.
 */
Test(wake, an_sql_enqueue_that_read_the_old_owner_busy_starts_on_the_new_one_without_a_poll)
{
	pid_t a = holding_worker(log_a);
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "worker a never owned every shard");
	relay_started(log_a);
	int64_t ra = tdb_int(conn, "SELECT id FROM cairn.runners");
	pid_t b = holding_worker(log_b);
	tcheck(dump_logs, twait(two_owners, NULL, DEADLINE), "the shards never settled on both");
	int64_t rb = tdb_intf(conn, "SELECT id FROM cairn.runners WHERE id <> %" PRId64, ra);
	tcheck(
	    dump_logs,
	    tdb_wait_at_least(conn, "SELECT count(*) FROM cairn.runners WHERE idle", 2, DEADLINE),
	    "the workers never went idle");
	PGconn *tx = tdb_connect(db);
	hold_burst(ra); /* a is busy, b idle */
	tdb_exec(tx, "BEGIN");
	int64_t id = sql_enqueue_unwoken(tx, ra);
	tcheck(dump_logs, twait(holds_ended, NULL, DEADLINE),
	       "the burst of t.hold runs never ended");
	tworker_stop(a, SIGTERM, 30000);
	tcheck(dump_logs, twait(b_took_all_and_tried_idle, &rb, DEADLINE),
	       "worker b never took a's shards, or never tried to go idle after it did");
	committed_run_starts(tx, id, "hand-over");
	PQfinish(tx);
	tworker_stop(b, SIGTERM, 30000);
}

#define CLAIMS_OF_SHARDS  "cairn_claims_total{of=\"shards\"}"
#define CLAIMS_OF_RUNS    "cairn_claims_total{of=\"runs\"}"
#define CLAIMS_OF_NEW     "cairn_claims_new_run_total"
#define RUNS_PUSHED       "cairn_runs_pushed_total"
#define RUNS_PUSHED_STALE "cairn_runs_pushed_stale_total"

/* Worker a's claims so far: of all that is due, of named runs, of new runs;
 * and the runs enqueues handed it, which it started with no claim. */
typedef struct claims {
	double shards, runs, new_runs, pushed;
} claims;

static claims claims_of_a(void)
{
	return (claims){tmetric(port_a, CLAIMS_OF_SHARDS), tmetric(port_a, CLAIMS_OF_RUNS),
	                tmetric(port_a, CLAIMS_OF_NEW), tmetric(port_a, RUNS_PUSHED)};
}

static claims claims_since(claims c0)
{
	claims c = claims_of_a();
	return (claims){c.shards - c0.shards, c.runs - c0.runs, c.new_runs - c0.new_runs,
	                c.pushed - c0.pushed};
}

/* While the connection returned holds cairn.notify_lock (migration 0026),
 * no enqueue hands its run over from inside its transaction (migration
 * 0030): each wakes the owner after its commit, naming the run, and the
 * owner claims it by id. */
static PGconn *no_hand_over(void)
{
	PGconn *other = tdb_connect(db);
	tdb_exec(other, "SELECT pg_advisory_lock(cairn.notify_lock())");
	return other;
}

/* Every one of worker a's 4 executors waits for a run: the last run's end
 * is done with, and the next run's claim sees them idle. */
static int executors_idle(void *arg)
{
	(void)arg;
	return tmetric(port_a, "cairn_executors_idle") == 4;
}

/* Enqueues `n` noops one by one, each once the one before completed and
 * worker a's executors are idle again: the claims they cost. *done counts
 * the runs completed. */
static claims one_by_one(int n, int64_t *done, const char *what)
{
	claims c0 = claims_of_a();
	for (int i = 0; i < n; i++) {
		enqueue("noop", "{}", 0);
		all_completed(++*done, what);
		tcheck(dump_logs, twait(executors_idle, NULL, DEADLINE),
		       "%s: worker a's executors never went idle", what);
	}
	return claims_since(c0);
}

/*
 * Runs one by one until two in a row were each claimed by name alone, with
 * the short claim of a new run (with parts, by the claim of named runs of
 * the run's part: with_parts). Until then the worker's start may still be
 * claiming all that is due: the relay pokes it as it starts, and that claim
 * may take a run whose wake-up then finds it in flight; a claim that passed
 * a run in flight claims all again when the run ends (a wake-up may have
 * come for it meanwhile), and that claim may pass the next run. After two
 * clean runs nothing is left of it: a claim wanted at the end of the first
 * would have shown in the second. The runs completed.
 */
static int64_t settle_a(void)
{
	int64_t done = 0, short_claim = !with_parts();
	for (int clean = 0; clean < 2;) {
		claims c = one_by_one(1, &done, "settling");
		int named = c.runs == 1 && c.new_runs == short_claim && c.pushed == 0;
		int handed = c.runs == 0 && c.pushed == 1;
		clean = c.shards == 0 && (named || handed) ? clean + 1 : 0;
		tcheck(dump_logs, done < 20, "20 runs one by one and the claims never settled");
	}
	return done;
}

/* Once settled, every run of an idle owner that its enqueue did not hand
 * over is claimed by its wake-up, which names it: by id, never looking
 * through the owner's shards. */
Test(wake, a_wake_up_that_names_its_run_makes_the_owner_claim_that_run_by_id)
{
	pid_t a = ready_worker_a();
	int64_t done = settle_a();
	PGconn *other = no_hand_over();
	claims c = one_by_one(10, &done, "a run named by its wake-up");
	PQfinish(other);
	fprintf(stderr, "test_wake: 10 runs: %g claims of shards, %g of named runs\n", c.shards,
	        c.runs);
	tcheck(dump_logs, c.shards == 0 && c.runs == 10,
	       "10 runs named one by one: %g claims of named runs, %g of all shards", c.runs,
	       c.shards);
	tworker_stop(a, SIGTERM, 30000);
}

/* The wake-ups listener has had: each is freed. */
static int wake_ups(PGconn *listener)
{
	int n = 0;
	for (char *note; (note = tdb_next_notification(listener, 0)); n++)
		free(note);
	return n;
}

/* The worker's runner is idle (its poller sleeps; writers wake it). */
static int runner_idle(void *arg)
{
	(void)arg;
	return tdb_int(conn, "SELECT count(*) FROM cairn.runners WHERE idle") == 1;
}

/* Past client.h's CLIENT_WAKE_IN_GAP_MS (5): a client whose last enqueue
 * ended this long ago is at low load. */
#define WAKE_IN_GAP_MS 6
static int64_t last_enqueued;

static int gap_passed(void *arg)
{
	(void)arg;
	return tnow_ms() - last_enqueued >= WAKE_IN_GAP_MS;
}

/* one_by_one, each enqueue WAKE_IN_GAP_MS or more after the last ended. */
static claims apart(int n, int64_t *done, const char *what)
{
	claims c0 = claims_of_a();
	for (int i = 0; i < n; i++) {
		twait(gap_passed, NULL, DEADLINE);
		enqueue("noop", "{}", 0);
		last_enqueued = tnow_ms();
		all_completed(++*done, what);
		tcheck(dump_logs, twait(executors_idle, NULL, DEADLINE),
		       "%s: worker a's executors never went idle", what);
	}
	return claims_since(c0);
}

/* The calls of cairn.push_owner so far, once every client session has
 * ended (the test's client is closed and opened again). */
static int64_t push_owner_calls(void)
{
	cairn_client_free(client);
	int64_t calls = tdb_stat_after_sessions(
	    conn, "cairn",
	    "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
	    "WHERE funcname = 'push_owner'",
	    DEADLINE);
	cr_assert_eq(cairn_client_open(db, &client), CAIRN_OK, "%s", cairn_client_errmsg(client));
	tcheck(dump_logs, calls >= 0, "a client session did not end");
	return calls;
}

/*
 * The C client's enqueue of one run, at low load, hands the run to its
 * idle owner from inside its INSERT's transaction (migration 0030): the run
 * is inserted already claimed for that owner, the one notification names
 * the owner and the run, and the owner reads the run and starts it with no
 * claim at all: one wake-up a run, not two, and none after the commit. An
 * enqueue whose route has run out routes in the same statement and hands
 * its run over too. While another writer notifies from inside its
 * transaction (it holds cairn.notify_lock), the enqueue does not wait for
 * it: it inserts the run pending and wakes the owner after the commit,
 * naming the run, and the owner claims it by id. A run whose input would
 * not fit in a notification is handed over as any other. cairn.push_owner
 * and cairn.pushed (which clients of the release of migration 0030 call)
 * themselves: no owner while the lock is held; the owner and its lease's
 * epoch when it is free; no notification for a run the transaction did not
 * hand over, and the token is recorded in the session (cairn.woke). A
 * client that enqueues back to back does not call them (but for the first
 * enqueue of a burst).
 */
Test(wake, an_enqueue_hands_its_run_to_an_idle_owner_that_starts_it_without_a_claim)
{
	SKIP_WITH_PARTS("an enqueue hands no run over from inside its transaction (one "
	                "server's ST_ENQUEUE_PUSH): it inserts the run pending and wakes the owner "
	                "after its commit, which claims it by id (tested by "
	                "a_wake_up_that_names_its_run_makes_the_owner_claim_that_run_by_id)");
	pid_t a = ready_worker_a();
	int64_t done = settle_a();
	/* The calls of cairn.push_owner are counted (track_functions) in a
	 * client session of its own, whose first enqueue routes its workflow. */
	tdb_exec(conn, "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions = "
	               "''pl''', current_database()); END $$");
	cairn_client_free(client);
	cr_assert_eq(cairn_client_open(db, &client), CAIRN_OK, "%s", cairn_client_errmsg(client));
	one_by_one(1, &done, "routing");
	PGconn *listener = tdb_connect(db);
	tdb_exec(listener, "LISTEN cairn_wake");
	int64_t t0 = tnow_ms();
	claims c = apart(5, &done, "handed over from the enqueue's transaction");
	int64_t took = tnow_ms() - t0;
	int n = wake_ups(listener);
	tcheck(dump_logs, n == 5 && c.pushed == 5 && c.runs == 0 && c.shards == 0,
	       "5 runs one by one: %d wake-ups, %g runs handed over, %g claims of named runs, %g "
	       "of the shards",
	       n, c.pushed, c.runs, c.shards);
	tcheck(dump_logs,
	       tdb_int(conn, "SELECT count(*) FROM (SELECT * FROM cairn.runs ORDER BY id DESC "
	                     "LIMIT 5) r WHERE status = 'completed' AND attempt = 1") == 5,
	       "the 5 runs handed over did not complete in their first attempt");
	int64_t calls = push_owner_calls();
	fprintf(stderr, "test_wake: 6 enqueues called cairn.push_owner %" PRId64 " times\n", calls);
	/* Each, and the first, which routed: an enqueue whose route (cached
	 * for a second) ran out hands its run over too. */
	tcheck(dump_logs, calls == 6,
	       "the first enqueue and 5 more to an idle owner in %" PRId64
	       " ms called cairn.push_owner %" PRId64 " times",
	       took, calls);
	one_by_one(1, &done, "routing");
	burst(20);
	done += 20;
	all_completed(done, "back to back");
	/* The enqueue that routed again and the first of the burst. */
	int64_t burst_calls = push_owner_calls() - calls;
	tcheck(dump_logs, burst_calls <= 2,
	       "20 enqueues back to back called cairn.push_owner %" PRId64 " times", burst_calls);
	one_by_one(1, &done, "routing");
	wake_ups(listener);

	/* A run whose input would not fit in a notification: handed over too,
	 * since the notification names the run and the owner reads it. */
	char big[9000];
	memset(big, 'x', sizeof big);
	memcpy(big, "{\"pad\": \"", 9);
	memcpy(big + sizeof big - 3, "\"}", 3);
	c = claims_of_a();
	twait(gap_passed, NULL, DEADLINE);
	enqueue("noop", big, 0);
	last_enqueued = tnow_ms();
	all_completed(++done, "a large input handed over");
	tcheck(dump_logs, twait(executors_idle, NULL, DEADLINE), "the executors never went idle");
	c = claims_since(c);
	tcheck(dump_logs, c.pushed == 1 && c.new_runs == 0 && c.shards == 0,
	       "a run whose input does not fit in a notification: %g handed over, %g claims of "
	       "new runs, %g of the shards",
	       c.pushed, c.new_runs, c.shards);
	wake_ups(listener);

	PGconn *other = no_hand_over();
	c = apart(5, &done, "woken after the enqueue's commit");
	n = wake_ups(listener);
	tcheck(dump_logs, n == 5 && c.runs == 5 && c.pushed == 0,
	       "5 runs one by one while another writer holds the notify lock: %d wake-ups, %g "
	       "claims of named runs, %g handed over, %g of the shards",
	       n, c.runs, c.pushed, c.shards);

	int64_t owner = tdb_int(conn, "SELECT id FROM cairn.runners");
	tcheck(dump_logs, twait(runner_idle, NULL, DEADLINE), "the worker never went idle");
	tdb_exec(conn, "BEGIN");
	cr_assert_eq(tdb_int(conn, "SELECT count(*) FROM cairn.push_owner('default', 0) "
	                           "WHERE owner IS NULL AND NOT settled"),
	             1, "cairn.push_owner gave an owner while another writer held the notify lock");
	tdb_exec(conn, "COMMIT");
	tdb_exec(other, "SELECT pg_advisory_unlock(cairn.notify_lock())");
	tdb_exec(conn, "BEGIN");
	cr_assert_eq(tdb_intf(conn,
	                      "SELECT count(*) FROM cairn.push_owner('default', 0) p "
	                      "JOIN cairn.shard_leases l ON l.shard_group = 'default' "
	                      "AND l.shard = 0 AND l.owner = p.owner AND l.epoch = p.epoch "
	                      "WHERE p.owner = %" PRId64 " AND p.settled",
	                      owner),
	             1, "cairn.push_owner did not give the idle owner and its lease's epoch");
	/* Not a run this transaction handed over: nothing to notify. */
	cr_assert_eq(tdb_int(conn, "SELECT cairn.pushed(424243, 1, 'free')::int"), 1);
	tdb_exec(conn, "COMMIT");
	cr_assert_null(tdb_next_notification(listener, 200),
	               "cairn.pushed notified for a run its transaction did not hand over");
	char *woke = tdb_str(conn, "SELECT current_setting('cairn.woke')");
	cr_assert_str_eq(woke, "free", "the session's cairn.woke is \"%s\"", woke);
	free(woke);
	PQfinish(other);
	PQfinish(listener);
	tworker_stop(a, SIGTERM, 30000);
}

/*
 * A run handed over whose notification never reached its owner (the relay
 * missed it, the owner died first) is still due by its start: the owner's
 * next poll claims it, and it runs once, counted once: the hand-over's
 * count goes void when the runner it was handed to claims it. Under
 * CAIRN_POISON_AFTER=1 a second count would fail the run as poison before
 * it ran. Here the hand-over is written as the enqueue writes it, but no
 * notification is sent.
 */
Test(wake, a_run_handed_over_whose_notification_is_lost_starts_with_the_next_poll)
{
	pid_t a = tworker_start(db, &port_a, log_a, "CAIRN_POLL_INTERVAL=300ms",
	                        "CAIRN_CONCURRENCY=4", "CAIRN_POISON_AFTER=1", NULL);
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	relay_started(log_a);
	tcheck(dump_logs, twait(runner_idle, NULL, DEADLINE), "the worker never went idle");
	tdb_exec(conn, "BEGIN");
	int64_t id = tdb_int(
	    conn,
	    "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, input, "
	    "                        start_at, status, attempt, started_at, claims, queued_by) "
	    "SELECT cairn.new_run_id(0), cairn.part_of(0), 'noop', 'lost', 'default', 0, '{}', "
	    "       now(), 'running', 1, now(), 1, p.owner "
	    "FROM cairn.push_owner('default', 0) p WHERE p.owner IS NOT NULL RETURNING id");
	tdb_exec(conn, "COMMIT");
	all_completed(1, "a run handed over without its notification");
	tcheck(dump_logs,
	       tdb_intf(conn,
	                "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                " AND status = 'completed' AND attempt = 1",
	                id) == 1,
	       "the run handed over without its notification did not complete in one attempt");
	tworker_stop(a, SIGTERM, 30000);
}

/*
 * Any role may notify on cairn_wake, so a notification that says a run was
 * handed over is only a name: the worker starts the run as the database
 * has it, and only if it is handed to this worker. A forged one, for a
 * pending run, with a claim after the run (as the release of migration
 * 0030 sent) whose input the run does not have: the worker does not start
 * it, counts it stale, and claims the run by id, which then runs as stored.
 */
Test(wake, a_forged_hand_over_is_not_started_and_its_run_is_claimed_as_stored)
{
	pid_t a = ready_worker_a();
	int64_t done = settle_a(); /* the relay listens */
	tcheck(dump_logs, twait(runner_idle, NULL, DEADLINE), "the worker never went idle");
	int64_t id = tdb_int(conn, "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, "
	                           "  shard, input, start_at) VALUES (cairn.new_run_id(0), "
	                           "  cairn.part_of(0), 'noop', 'forged', 'default', 0, "
	                           "  '{\"stored\": true}', now()) RETURNING id");
	claims c = claims_of_a();
	double stale = tmetric(port_a, RUNS_PUSHED_STALE);
	/* Read, then sent by a statement that reads no table: on Citus a
	 * pg_notify in a statement over runs is sent on the node of their
	 * part, and the relay listens on the coordinator. */
	char sql[1024];
	snprintf(sql, sizeof sql,
	         "SELECT l.owner || ' ' || r.id || ' ' || "
	         "  repeat('ab', 32) || ' ' || json_build_array(r.id::text, 'default', '0', "
	         "  l.epoch::text, '{0}', 'noop', 'running', '{\"forged\": true}', '1', '3', "
	         "  'f', '0', '0', '1', '0', NULL, NULL, NULL, NULL, 't', NULL, 'f', NULL, NULL, "
	         "  NULL, NULL, '0', '0', '0', r.id::text, NULL, '0')::text "
	         "FROM cairn.runs r JOIN cairn.shard_leases l ON l.part = r.part "
	         "AND l.shard_group = 'default' AND l.shard = 0 WHERE r.id = %" PRId64,
	         id);
	char *note = tdb_str(conn, sql);
	cr_assert_not_null(note, "the forged run or its lease is not there");
	const char *np[] = {note};
	PGresult *nr =
	    PQexecParams(conn, "SELECT pg_notify('cairn_wake', $1)", 1, NULL, np, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(nr), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
	PQclear(nr);
	free(note);
	all_completed(done + 1, "a run named by a forged hand-over");
	c = claims_since(c);
	tcheck(dump_logs,
	       c.pushed == 0 && c.runs == 1 && tmetric(port_a, RUNS_PUSHED_STALE) == stale + 1,
	       "a forged hand-over: %g runs started from it, %g stale, %g claims of named runs "
	       "(%g of new ones), %g of the shards",
	       c.pushed, tmetric(port_a, RUNS_PUSHED_STALE) - stale, c.runs, c.new_runs, c.shards);
	tcheck(dump_logs,
	       tdb_intf(conn,
	                "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                " AND status = 'completed' AND input = '{\"stored\": true}'",
	                id) == 1,
	       "the run named by a forged hand-over did not run as stored");
	tworker_stop(a, SIGTERM, 30000);
}

/* Worker a started a run from a notification, or counted one stale, since
 * *arg (claims, and the stale count after them). */
static int hand_over_handled(void *arg)
{
	const double *was = arg;
	return tmetric(port_a, RUNS_PUSHED) > was[0] || tmetric(port_a, RUNS_PUSHED_STALE) > was[1];
}

/*
 * A hand-over's notification is a copy of the run as its enqueue wrote it,
 * and may come after the run was claimed and ran (a claim of all that is
 * due takes a run handed over, as it takes one a dead worker had claimed),
 * or be sent again by a session that read it: either way it must not start
 * the run again. Here a genuine notification (its MAC verifies) is sent
 * again after its run completed: the worker counts it stale and does not
 * start the run; the run's row is as its one execution left it.
 */
Test(wake, a_hand_over_notified_again_after_its_run_ran_does_not_start_it_again)
{
	SKIP_WITH_PARTS("an enqueue hands no run over (one server's ST_ENQUEUE_PUSH), so "
	                "there is no genuine hand-over's notification to send again; a forged "
	                "one is tested by "
	                "a_forged_hand_over_is_not_started_and_its_run_is_claimed_as_stored");
	pid_t a = ready_worker_a();
	int64_t done = settle_a();
	PGconn *listener = tdb_connect(db);
	tdb_exec(listener, "LISTEN cairn_wake");
	claims c = apart(1, &done, "handed over");
	tcheck(dump_logs, c.pushed == 1, "the run was not handed over (%g)", c.pushed);
	char *note = tdb_next_notification(listener, DEADLINE);
	cr_assert_not_null(note, "no notification of the hand-over");
	char row[256];
	snprintf(row, sizeof row,
	         "SELECT row(status, attempt, claims, updated_at, finished_at)::text "
	         "FROM cairn.runs WHERE id = %" PRId64,
	         tdb_int(conn, "SELECT max(id) FROM cairn.runs"));
	char *before = tdb_str(conn, row);
	c = claims_of_a();
	double was[] = {c.pushed, tmetric(port_a, RUNS_PUSHED_STALE)};
	const char *p[] = {note};
	PGresult *r = PQexecParams(conn, "SELECT pg_notify('cairn_wake', $1)", 1, NULL, p, NULL,
	                           NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
	PQclear(r);
	tcheck(dump_logs, twait(hand_over_handled, was, DEADLINE),
	       "the worker never handled the hand-over notified again");
	c = claims_since(c);
	char *after = tdb_str(conn, row);
	tcheck(dump_logs,
	       c.pushed == 0 && tmetric(port_a, RUNS_PUSHED_STALE) == was[1] + 1 &&
	           strcmp(before, after) == 0,
	       "a hand-over notified again: %g runs started from notifications; the run was %s, "
	       "is %s",
	       c.pushed, before, after);
	free(before);
	free(after);
	free(note);
	PQfinish(listener);
	tworker_stop(a, SIGTERM, 30000);
}

/*
 * The claim of a named run that is new (pending, never executed, nothing
 * journaled or waiting for it) is a short statement of its own. A run that
 * is not new when a wake-up names it goes to the claim that reads its
 * journal, messages and signals: here a due run with a signal and its
 * message waiting, written as cairn_signal writes them, before its owner is
 * woken by name (as cairn.enqueue wakes it). It gets its signal.
 */
Test(wake, a_new_run_takes_the_short_claim_and_a_run_with_a_signal_waiting_the_full_one)
{
	enum { NEW = 5 };
	pid_t a = flows_worker(log_a);
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	relay_started(log_a);
	int64_t done = settle_a();
	PGconn *other = no_hand_over();
	claims c = one_by_one(NEW, &done, "a new run");
	PQfinish(other);
	/* With parts there is no short claim of a new run (with_parts): each
	 * is claimed as a named run of its part. */
	int short_claim = !with_parts();
	tcheck(dump_logs, c.runs == NEW && c.new_runs == NEW * short_claim && c.shards == 0,
	       "%d new runs named one by one: %g claims of new runs, %g of named runs, %g of "
	       "the shards",
	       NEW, c.new_runs, c.runs, c.shards);
	claims c1 = claims_of_a();
	/* The run, its signal and its message in one transaction, each row in
	 * the run's part; its owner woken by a statement that reads no table
	 * (on Citus cairn.wake in a statement over runs would run on the node
	 * of their part, and notify there). */
	int64_t shard = tdb_int(conn, "SELECT cairn.shard_of('waited')");
	tdb_exec(conn, "BEGIN");
	int64_t id =
	    tdb_intf(conn,
	             "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
	             "  input, start_at) VALUES (cairn.new_run_id(%" PRId64
	             "), cairn.part_of(%" PRId64 "), 't.signals', 'waited', 'default', "
	             "%" PRId64 ", '{\"n\": 1}', now()) RETURNING id",
	             shard, shard, shard);
	tdb_intf(conn,
	         "INSERT INTO cairn.signals (run_id, part, name, payload) "
	         "VALUES (%" PRId64 ", cairn.part_of(%" PRId64 "), 's', '{\"v\": 7}') RETURNING 1",
	         id, shard);
	tdb_intf(conn,
	         "INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind) "
	         "VALUES (%" PRId64 ", cairn.part_of(%" PRId64 "), 'default', %" PRId64
	         ", 'signal') RETURNING 1",
	         id, shard, shard);
	tdb_exec(conn, "COMMIT");
	tdb_intf(conn, "SELECT count(cairn.wake('default', %" PRId64 "::int, %" PRId64 ", false))",
	         shard, id);
	all_completed(done + 1, "a run with a signal waiting");
	tcheck(dump_logs,
	       tdb_intf(conn,
	                "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                " AND output = '[{\"v\": 7}]'",
	                id) == 1,
	       "the run did not return its signal");
	claims s1 = claims_since(c1);
	tcheck(dump_logs, s1.new_runs == 0 && s1.runs == 1,
	       "the run with a signal waiting: %g claims of new runs, %g of named runs",
	       s1.new_runs, s1.runs);
	tworker_stop(a, SIGTERM, 30000);
}

/* On Citus: the backends on the nodes that served a session of the
 * coordinator that has ended (they flush their statistics as they exit). */
#define ORPHANS                                                                                    \
	"SELECT count(*) FROM citus_stat_activity w WHERE w.is_worker_query "                      \
	"AND w.datname = current_database() AND NOT EXISTS (SELECT 1 FROM citus_stat_activity c "  \
	"WHERE NOT c.is_worker_query AND c.global_pid = w.global_pid)"

/* Entries of the index of messages by time (messages_deliver) read so far
 * in this database, once every worker session in it has ended. On Citus
 * the index is read on the nodes, in each shard's index (messages_deliver
 * and the shard's id), whose backends that served a worker's sessions end
 * after them. */
static int64_t deliver_index_reads(void)
{
	int parts = with_parts();
	int64_t n =
	    tdb_stat_after_sessions(conn, "cairn-worker%",
	                            parts ? "SELECT 0"
	                                  : "SELECT idx_tup_read FROM pg_stat_user_indexes "
	                                    "WHERE indexrelid = 'cairn.messages_deliver'::regclass",
	                            DEADLINE);
	tcheck(dump_logs, n >= 0, "a worker session of the test database did not end");
	if (!parts)
		return n;
	tcheck(dump_logs,
	       tdb_wait_at_least(conn, "SELECT (count = 0)::int FROM (" ORPHANS ") o", 1, DEADLINE),
	       "the nodes' backends of the worker's sessions did not end");
	return tdb_int(conn, "SELECT sum(result::bigint) FROM run_command_on_all_nodes($$"
	                     "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes "
	                     "WHERE indexrelname ~ '^messages_deliver(_[0-9]+)?$'$$)");
}

/*
 * A claim of named runs finds their messages by run, whatever is due
 * elsewhere. 20,000 messages of runs of a group nobody serves are due, and
 * the statistics (taken while every message was in the future, and not
 * refreshed: autovacuum is off for cairn.messages) say almost none are: a
 * claim that looked for the named runs' due messages by time walked all of
 * them, for every run it claimed. The claims of all that is due (at the
 * worker's start) walk them by design, a few times. Every run is in the
 * shards of one part (part_no 0; on one server, every shard): on Citus a
 * claim reads the messages of its part only, and a claim of named runs
 * that walked them would read as many as on one server.
 */
Test(wake, a_claim_of_named_runs_finds_their_messages_by_run_whatever_is_due_elsewhere)
{
	enum { ELSEWHERE = 20000, RUNS = 40 };
	int64_t parts = tdb_int(conn, "SELECT count(*) FROM cairn.parts");
	cr_assert(parts >= 1 && SHARDS % parts == 0, "%" PRId64 " parts", parts);
	tdb_exec(conn, "ALTER TABLE cairn.messages SET (autovacuum_enabled = false)");
	tdb_intf(conn,
	         "WITH i AS (INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
	         "                                   input, status, attempt) "
	         "  SELECT cairn.new_run_id(s), cairn.part_of(s), 'noop', 'elsewhere-' || g, "
	         "'elsewhere', s, '{}', 'sleeping', 1 "
	         "  FROM generate_series(1, %d) g, "
	         "  LATERAL (SELECT (g %% %" PRId64 ") * %" PRId64 " AS s) x "
	         "  RETURNING 1) SELECT count(*) FROM i",
	         ELSEWHERE, SHARDS / parts, parts);
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT string_agg(k, ' ' ORDER BY g) FROM (SELECT g, 'named-' || g AS k "
	         "FROM generate_series(1, 10000) g WHERE cairn.shard_of('named-' || g) %% %" PRId64
	         " = 0 ORDER BY g LIMIT %d) x",
	         parts, RUNS);
	char *keys = tdb_str(conn, sql);
	cr_assert(keys, "no keys of the shards of part 0");
	/* A wake-up each, tomorrow, seen by ANALYZE; then a signal each, due. */
	tdb_exec(conn, "INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind, "
	               "  deliver_at) "
	               "SELECT id, part, shard_group, shard, 'wake', now() + interval '1 day' "
	               "FROM cairn.runs WHERE shard_group = 'elsewhere'");
	tdb_exec(conn, "ANALYZE cairn.messages");
	tdb_exec(conn, "INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind, "
	               "  deliver_at) "
	               "SELECT id, part, shard_group, shard, 'signal', now() - interval '1 second' "
	               "FROM cairn.runs WHERE shard_group = 'elsewhere'");
	int64_t before = deliver_index_reads();
	pid_t a = ready_worker_a();
	char *save = NULL, *key = strtok_r(keys, " ", &save);
	for (int i = 0; i < RUNS; i++, key = strtok_r(NULL, " ", &save)) {
		cr_assert(key, "only %d keys of the shards of part 0", i);
		cairn_enqueue_opts o = {.input = "{}", .key = key};
		cairn_enqueued e;
		cr_assert_eq(cairn_enqueue(client, "noop", &o, &e), CAIRN_OK, "%s",
		             cairn_client_errmsg(client));
		cairn_enqueued_clear(&e);
		tcheck(dump_logs,
		       tdb_wait_at_leastf(
		           conn, 1 + i, DEADLINE,
		           "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"),
		       "run %d did not complete within %d ms with a 1 h poll interval", i + 1,
		       DEADLINE);
	}
	free(keys);
	tworker_stop(a, SIGTERM, 30000);
	int64_t read = deliver_index_reads() - before;
	fprintf(stderr,
	        "test_wake: %d runs claimed by name read %" PRId64 " entries of messages_deliver\n",
	        RUNS, read);
	tcheck(dump_logs, read < (int64_t)ELSEWHERE * RUNS / 2,
	       "%d claims of named runs read %" PRId64
	       " entries of messages_deliver: they walked the messages due elsewhere",
	       RUNS, read);
}

Test(wake, a_durable_sleep_ends_when_due_and_a_delayed_run_starts_when_due)
{
	pid_t a = worker(log_a, "CAIRN_CONCURRENCY=4");
	tcheck(dump_logs, twait(one_owner, NULL, DEADLINE), "the worker never owned every shard");
	int64_t t0 = tnow_ms();
	enqueue("sleep", "{\"ms\": 500}", 0);
	enqueue("noop", "{}", 700);
	all_completed(2, "sleep and delayed run");
	int64_t took = tnow_ms() - t0;
	fprintf(stderr,
	        "test_wake: a 500 ms sleep and a run delayed 700 ms were done after %" PRId64
	        " ms\n",
	        took);
	tcheck(dump_logs, took >= 700, "the delayed run started early (%" PRId64 " ms)", took);
	tworker_stop(a, SIGTERM, 30000);
}

/* The worker on port runs the relay (its /status lists cairn.relay). */
static int runs_relay(int port)
{
	char *body = NULL;
	int yes = thttp(port, "GET", "/status", &body, NULL) == 200 && body &&
	          strstr(body, "\"cairn.relay\"");
	free(body);
	return yes;
}

static int ports[2];

static int relay_settled(void *arg)
{
	(void)arg;
	return owned_by(2) && runs_relay(ports[0]) != runs_relay(ports[1]);
}

/* One worker is stopped (SIGSTOP: its socket still accepts, nothing
 * answers), so the relay's pokes to it time out; the runs of the shards of
 * the worker that answers still start on their wake-ups, never at a poll. */
Test(wake, a_runner_that_does_not_answer_does_not_hold_up_the_wake_ups_of_others)
{
	pid_t w[2];
	const char *logs[2] = {log_a, log_b};
	for (int i = 0; i < 2; i++) {
		w[i] = tworker_start(db, &ports[i], logs[i], "CAIRN_POLL_INTERVAL=1h",
		                     "CAIRN_RUNNER_TTL=1h", "CAIRN_CONCURRENCY=4", NULL);
		if (i == 0)
			tcheck(dump_logs, twait(one_owner, NULL, DEADLINE),
			       "no worker owned every shard");
	}
	tcheck(dump_logs, twait(relay_settled, NULL, DEADLINE),
	       "the shards and the relay never settled on the two workers");
	int live = runs_relay(ports[0]) ? 0 : 1, frozen = 1 - live;
	int64_t live_id = tdb_intf(
	    conn, "SELECT id FROM cairn.runners WHERE address = '127.0.0.1:%d'", ports[live]);
	kill(w[frozen], SIGSTOP);
	burst(60);
	int64_t want = tdb_intf(conn,
	                        "SELECT count(*) FROM cairn.runs r JOIN cairn.shard_leases l "
	                        "ON l.part = r.part AND l.shard_group = r.shard_group "
	                        "AND l.shard = r.shard WHERE l.owner = %" PRId64,
	                        live_id);
	int ok = tdb_wait_at_leastf(conn, want, DEADLINE,
	                            "SELECT count(*) FROM cairn.runs r JOIN cairn.shard_leases l "
	                            "ON l.part = r.part AND l.shard_group = r.shard_group "
	                            "AND l.shard = r.shard WHERE l.owner = %" PRId64
	                            " AND r.status = 'completed'",
	                            live_id);
	kill(w[frozen], SIGCONT);
	tcheck(dump_logs, ok && want > 0,
	       "the %" PRId64
	       " runs of the answering worker's shards did not complete within %d ms "
	       "with a 1 h poll interval",
	       want, DEADLINE);
	fprintf(
	    stderr,
	    "test_wake: one runner frozen: slowest start of the other's %" PRId64 " runs %" PRId64
	    " ms after its enqueue\n",
	    want,
	    tdb_intf(conn,
	             "SELECT max((extract(epoch FROM r.started_at - r.created_at) * 1000)::bigint) "
	             "FROM cairn.runs r JOIN cairn.shard_leases l ON l.part = r.part "
	             "AND l.shard_group = r.shard_group AND l.shard = r.shard "
	             "WHERE l.owner = %" PRId64,
	             live_id));
	/* The frozen worker's runs start once it answers again. */
	all_completed(60, "after the thaw");
	tworker_stop(w[live], SIGTERM, 30000);
	tworker_stop(w[frozen], SIGTERM, 30000);
}
