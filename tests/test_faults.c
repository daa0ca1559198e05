/*
 * test_faults.c - what keeps a fleet from getting stuck or corrupt, checked
 * against a real PostgreSQL: the commit's fence is a lock (a commit that
 * waited for an epoch bump writes nothing), a settled journal entry is never
 * overwritten, `cairn retry` cuts the journal at its first unsettled step and
 * gives back the signals consumed after it, and the janitor spares a run
 * re-driven while it deletes.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "commit.h"
#include "support.h"

static const logger quiet = {.level = LOG_ERROR, .format = LOG_LOGFMT, .fd = 2};
static metrics counters;

static void on_final(void *arg, commit *c)
{
	commit_free(c);
}

/* A runner row; returns its id. */
static int64_t runner(PGconn *c, const char *name)
{
	return tdb_intf(c,
	                "INSERT INTO cairn.runners (name, address, version, groups, lease_pid) "
	                "VALUES ('%s', '127.0.0.1:1', '0', '{default}', 0) RETURNING id",
	                name);
}

/* A run on (default, 0) and a lease of that shard for owner at epoch 1. */
static int64_t leased_run(PGconn *c, int64_t owner)
{
	tdb_intf(c,
	         "INSERT INTO cairn.shard_leases (shard_group, shard, owner, epoch, acquired_at) "
	         "VALUES ('default', 0, %" PRId64 ", 1, now()) RETURNING epoch",
	         owner);
	return tdb_int(
	    c, "INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, status) "
	       "VALUES (cairn.new_run_id(0), 'w', 'k', 'default', 0, 'running') RETURNING id");
}

/* A journal commit of one completed step at seq 0 with this output. */
static commit *step_commit(int64_t run, int64_t owner, int64_t epoch, const char *output)
{
	commit_run cr = {.id = run, .group = "default", .shard = 0, .owner = owner, .epoch = epoch};
	commit *c = commit_new(&cr);
	jrow r = {.seq = 0,
	          .name = "a",
	          .kind = KIND_STEP,
	          .status = STEP_COMPLETED,
	          .output = (char *)output,
	          .attempts = 1,
	          .started_ms = 1};
	cr_assert_eq(commit_add_row(c, &r), 0);
	c->outcome = COMMIT_JOURNAL;
	return c;
}

typedef struct waiting_commit {
	committer *k;
	commit *c;
	int rc;
} waiting_commit;

static void *commit_thread(void *arg)
{
	waiting_commit *w = arg;
	w->rc = committer_wait(w->k, w->c);
	return NULL;
}

static committer *start_committer(const char *db)
{
	committer_env env = {.conninfo = db,
	                     .app_name = "cairn-worker commit",
	                     .log = &quiet,
	                     .m = &counters,
	                     .on_final = on_final};
	committer *k;
	cr_assert_eq(committer_start(&env, &k), 0);
	return k;
}

Test(faults, a_commit_that_waited_for_an_epoch_bump_is_fenced_out_and_writes_nothing)
{
	const char *db = tdb_new_migrated_shards(4);
	PGconn *c = tdb_connect(db), *bump = tdb_connect(db);
	int64_t x = runner(c, "x"), y = runner(c, "y");
	int64_t run = leased_run(c, x);
	/* Another runner takes the shard; its transaction is still open. */
	tdb_exec(bump, "BEGIN");
	char sql[200];
	snprintf(sql, sizeof sql,
	         "UPDATE cairn.shard_leases SET owner = %" PRId64 ", epoch = 2 WHERE shard = 0", y);
	tdb_exec(bump, sql);

	committer *k = start_committer(db);
	waiting_commit w = {.k = k, .c = step_commit(run, x, 1, "1")};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, commit_thread, &w), 0);
	/* The commit must wait for the lease row rather than read its snapshot. */
	cr_assert(tdb_wait_at_least(c, "SELECT count(*) " TDB_COMMIT_WAITING, 1, 20000),
	          "the commit did not wait for the lease row: it read a snapshot");
	tdb_exec(bump, "COMMIT");
	pthread_join(t, NULL);
	cr_assert_eq(w.rc, -CAIRN_ESTOP, "the commit passed a fence that had moved");
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64, run),
	             0);
	commit_free(w.c);
	committer_stop(k);
	committer_free(k);
	PQfinish(bump);
	PQfinish(c);
}

Test(faults, a_settled_journal_entry_is_never_overwritten)
{
	const char *db = tdb_new_migrated_shards(4);
	PGconn *c = tdb_connect(db);
	int64_t x = runner(c, "x");
	int64_t run = leased_run(c, x);
	committer *k = start_committer(db);
	commit *first = step_commit(run, x, 1, "1"), *second = step_commit(run, x, 1, "2");
	cr_assert_eq(committer_wait(k, first), 0);
	committer_wait(k, second);
	char *out = tdb_str(c, "SELECT output::text FROM cairn.steps WHERE seq = 0");
	cr_assert_str_eq(out, "1", "a completed step was overwritten");
	free(out);
	commit_free(first);
	commit_free(second);
	committer_stop(k);
	committer_free(k);
	PQfinish(c);
}

Test(faults, retry_cuts_the_journal_at_the_first_unsettled_step_and_gives_back_its_signals)
{
	const char *db = tdb_new_migrated_shards(4);
	PGconn *c = tdb_connect(db);
	int64_t run = tdb_int(
	    c, "INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, status, "
	       "attempt, finished_at, error) VALUES (cairn.new_run_id(0), 'w', 'k', 'default', 0, "
	       "'failed', 1, now(), 'b broke') RETURNING id");
	char sql[600];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.steps (run_id, seq, name, kind, status, output) VALUES "
	         "(%1$" PRId64 ", 0, 'a', 'signal', 'completed', '1'), "
	         "(%1$" PRId64 ", 1, 'b', 'step', 'failed', NULL), "
	         "(%1$" PRId64 ", 2, 'c', 'signal', 'completed', '3'); "
	         "INSERT INTO cairn.signals (run_id, name, payload, consumed_by_seq) VALUES "
	         "(%1$" PRId64 ", 'a', '1', 0), (%1$" PRId64 ", 'c', '3', 2)",
	         run);
	tdb_exec(c, sql);
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	cr_assert_eq(cairn_retry(cl, run), CAIRN_OK, "%s", cairn_client_errmsg(cl));
	/* c was decided after b failed: it goes, and its signal is pending again. */
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64, run),
	             1);
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.steps WHERE seq = 0"), 1);
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.signals WHERE name = 'c' AND "
	                         "consumed_by_seq IS NULL"),
	             1);
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.signals WHERE name = 'a' AND "
	                         "consumed_by_seq = 0"),
	             1);
	cairn_client_free(cl);
	PQfinish(c);
}

Test(faults, the_janitor_spares_a_run_that_is_retried_while_it_deletes)
{
	const char *db = tdb_new_migrated_shards(4);
	PGconn *c = tdb_connect(db), *retry = tdb_connect(db);
	int64_t run =
	    tdb_int(c, "INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, status, "
	               "attempt, finished_at) VALUES (cairn.new_run_id(0), 'w', 'k', 'default', 0, "
	               "'failed', 1, "
	               "now() - interval '1 hour') RETURNING id");
	/* `cairn retry` has the row and has not committed yet. */
	tdb_exec(retry, "BEGIN");
	char sql[200];
	snprintf(sql, sizeof sql,
	         "UPDATE cairn.runs SET status = 'pending', finished_at = NULL WHERE id = %" PRId64,
	         run);
	tdb_exec(retry, sql);
	int port;
	char log[64];
	pid_t pid = tworker_start(db, &port, tlog_file(log), "CAIRN_RETENTION=1m", NULL);
	cr_assert(
	    tdb_wait_at_least(c,
	                      "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
	                      "'cairn-worker janitor' AND wait_event_type = 'Lock'",
	                      1, 30000),
	    "the janitor never reached the run");
	tdb_exec(retry, "COMMIT");
	cr_assert(tdb_wait_at_least(
	    c,
	    "SELECT (count(*) = 0)::int FROM pg_stat_activity WHERE application_name "
	    "= 'cairn-worker janitor' AND wait_event_type = 'Lock'",
	    1, 30000));
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64, run), 1,
	             "the janitor deleted a run that was re-driven");
	cr_assert_eq(tworker_stop(pid, SIGTERM, 15000), 0);
	unlink(log);
	PQfinish(retry);
	PQfinish(c);
}
