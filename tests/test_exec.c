/*
 * test_exec.c - executing runs (DESIGN section 5), end to end: real
 * cairn-worker processes with the workflows of tests/plugin_flows.so, on a
 * database of their own per test, killed with SIGKILL where the point is to
 * survive a crash. Runs are driven with the C client API and the cairn CLI,
 * and every wait is a condition polled with a deadline.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

typedef tflows_env env;

static void setup(env *e)
{
	tflows_setup(e, 64);
}

static void teardown(env *e)
{
	tflows_teardown(e);
}

typedef struct wk {
	pid_t pid;
	int port;
	char log[64];
} wk;

/* No per-test .timeout: with --jobs 2, Criterion 2.4.1's runner leaks a
 * timer of a test that sets one, and LeakSanitizer fails the suite for it.
 * tests/run.sh's --timeout bounds every test instead. */
TestSuite(exec, .fini = tlive_kill);

/* Starts a worker with quick takeovers and the test plugin,
 * without waiting for it (it may crash at its first claim). extra is one
 * more NAME=value setting or NULL. */
static void wk_spawn(wk *w, const char *db, const char *extra)
{
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(w->log);
	w->pid = tworker_start(db, &w->port, w->log, "CAIRN_POLL_INTERVAL=1s",
	                       "CAIRN_HEARTBEAT_INTERVAL=200ms", "CAIRN_REBALANCE_INTERVAL=200ms",
	                       "CAIRN_RUNNER_TTL=2s", plugins, extra, NULL);
	tlive_add(w->pid);
}

/* wk_spawn, and waits until the worker is ready. */
static void wk_start(wk *w, const char *db, const char *extra)
{
	wk_spawn(w, db, extra);
	cr_assert(thttp_wait(w->port, "/readyz", 200, 20000),
	          "worker never became ready; log in %s", w->log);
}

static void wk_kill(wk *w)
{
	int rc = tworker_stop(w->pid, SIGKILL, 5000);
	tlive_del(w->pid);
	cr_assert_eq(rc, 128 + SIGKILL, "kill -9: exit %d", rc);
	unlink(w->log);
}

/* Ends a worker with a SIGTERM drain: it must exit 0 (a sanitizer report in
 * the worker, a leak in the plugin, would make it exit otherwise). */
static void wk_stop(wk *w)
{
	int rc = tworker_stop(w->pid, SIGTERM, 15000);
	tlive_del(w->pid);
	cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, w->log);
	unlink(w->log);
}

/* One line of measurements on stderr, which tests/run.sh shows. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	fprintf(stderr, "test_exec: %s\n", line);
}

static int64_t enqueue(env *e, const char *workflow, const char *input, int max_attempts)
{
	cairn_enqueue_opts o = {.input = input, .max_attempts = max_attempts};
	cairn_enqueued r;
	int rc = cairn_enqueue(e->cl, workflow, &o, &r);
	cairn_enqueued_clear(&r);
	cr_assert_eq(rc, CAIRN_OK, "enqueue %s: %s", workflow, cairn_client_errmsg(e->cl));
	return r.id;
}

/* A number the database computes with printf-style SQL, and a wait for it. */
#define num(e, ...)                        tdb_intf((e)->c, __VA_ARGS__)
#define wait_num(e, want, timeout_ms, ...) tdb_wait_at_leastf((e)->c, want, timeout_ms, __VA_ARGS__)

static void wait_status(env *e, int64_t id, const char *status, int64_t timeout_ms)
{
	int ok = wait_num(
	    e, 1, timeout_ms,
	    "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = '%s'", id, status);
	cr_assert(ok, "run %" PRId64 " never became %s", id, status);
}

/* Waits for the run to finish and loads it with its journal. */
static cairn_run *finished(env *e, int64_t id, int64_t timeout_ms)
{
	int rc = cairn_run_wait(e->cl, id, timeout_ms);
	cr_assert_eq(rc, CAIRN_OK, "run %" PRId64 " did not finish within %" PRId64 " ms (%s)", id,
	             timeout_ms, cairn_strstatus(rc));
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e->cl, id, &r), CAIRN_OK, "%s", cairn_client_errmsg(e->cl));
	return r;
}

static void set_flag(env *e, int64_t id)
{
	char sql[128];
	snprintf(sql, sizeof sql, "INSERT INTO t_flags (run_id) VALUES (%" PRId64 ")", id);
	tdb_exec(e->c, sql);
}

/* A number field of a JSON object text. */
static double jnum(const char *text, const char *name)
{
	cJSON *j = cJSON_Parse(text ? text : "");
	cr_assert(j, "not JSON: %s", text ? text : "(null)");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
	cr_assert(cJSON_IsNumber(v), "no number \"%s\" in %s", name, text);
	double d = v->valuedouble;
	cJSON_Delete(j);
	return d;
}

static const cairn_step_info *step_named(const cairn_run *r, const char *name)
{
	for (size_t i = 0; i < r->nsteps; i++)
		if (strcmp(r->steps[i].name, name) == 0)
			return &r->steps[i];
	cr_assert_fail("run %" PRId64 " has no journal entry \"%s\"", r->id, name);
	return NULL;
}

/* ------------------------------------------------------------- replay */

Test(exec, replay_returns_journaled_results_without_rerunning_the_step)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.replay", "{\"mode\": \"split\"}", 0);
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND name = 'count' AND status = 'completed'",
	                   id),
	          "step count was never journaled");
	/* "count" is journaled, so the run is now inside "block". */
	cr_assert_eq(num(&e, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id), 1);
	wk_kill(&a);

	wk_start(&b, e.db, NULL);
	set_flag(&e, id);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "count"), 1, "%s", r->output);
	cr_assert_eq(num(&e, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id), 1,
	             "step count ran again after the crash");
	cr_assert_eq(r->nsteps, 2);
	cr_assert_eq(step_named(r, "count")->attempts, 1);
	cr_assert_str_eq(step_named(r, "block")->status, "completed");
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

Test(exec, a_step_interrupted_before_its_result_is_journaled_runs_again)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.replay", "{\"mode\": \"same\"}", 0);
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, id),
	          "step count_block never ran");
	/* The step has counted and is now blocked, its result not journaled. */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                 " AND status = 'completed'",
	                 id),
	             0);
	wk_kill(&a);

	wk_start(&b, e.db, NULL);
	cr_assert(wait_num(&e, 2, 20000, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id),
	          "the interrupted step was not run again");
	set_flag(&e, id);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "count"), 2, "%s", r->output);
	cr_assert_eq(num(&e, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id), 2);
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

/* Waits until the worker's log contains text. */
static int wait_log(wk *w, const char *text, int64_t timeout_ms)
{
	return tfile_wait(w->log, text, timeout_ms);
}

/* Enqueues a t.replay whose one step, deaf to cairn_should_stop, waits for
 * the run's flag; returns once the step runs. */
static int64_t enqueue_blocked(env *e)
{
	int64_t id = enqueue(e, "t.replay", "{\"mode\": \"same\", \"deaf\": true}", 0);
	cr_assert(wait_num(e, 1, 20000,
	                   "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, id),
	          "step count_block never ran");
	return id;
}

/*
 * Fencing in the engine itself: worker X is frozen (SIGSTOP) while it runs a
 * step, its lease connection is terminated so Y takes the shard (epoch + 1)
 * and completes the run; when X wakes up and finishes its stale execution,
 * its commit is refused by the fence and the run keeps Y's result. The step
 * is deaf to cairn_should_stop: a step that gave up when X noticed its lost
 * lease (or, with the two workers just started, when X began handing the
 * shard to Y) would never reach the fence.
 */
Test(exec, a_worker_that_lost_its_lease_cannot_write_the_run_it_was_executing)
{
	env e;
	setup(&e);
	wk w[2];
	wk_start(&w[0], e.db, NULL);
	wk_start(&w[1], e.db, NULL);
	int64_t id = enqueue_blocked(&e);
	/* Which worker is executing it: the owner of the run's shard. A shard's
	 * lease is in the part of its runs, so the joins name the part too (Citus
	 * joins distributed tables only on their distribution column). */
	int64_t owner_pid =
	    num(&e,
	        "SELECT split_part(r.name, ':', 2)::bigint FROM cairn.runs u "
	        "JOIN cairn.shard_leases l ON l.shard_group = u.shard_group AND l.shard = u.shard "
	        "AND l.part = u.part JOIN cairn.runners r ON r.id = l.owner WHERE u.id = %" PRId64,
	        id);
	int x = w[0].pid == (pid_t)owner_pid ? 0 : 1, y = 1 - x;
	cr_assert_eq(w[x].pid, (pid_t)owner_pid, "no worker owns the run's shard");
	int64_t epoch =
	    num(&e,
	        "SELECT l.epoch FROM cairn.runs u JOIN cairn.shard_leases l "
	        "ON l.shard_group = u.shard_group AND l.shard = u.shard AND l.part = u.part "
	        "WHERE u.id = %" PRId64,
	        id);
	cr_assert_eq(kill(w[x].pid, SIGSTOP), 0);
	num(&e,
	    "SELECT count(pg_terminate_backend(lease_pid)) FROM cairn.runners WHERE name LIKE "
	    "'%%:%d'",
	    (int)w[x].pid);
	/* Y takes the shard with a new epoch and runs the step again. */
	cr_assert(
	    wait_num(
	        &e, epoch + 1, 20000,
	        "SELECT l.epoch FROM cairn.runs u JOIN cairn.shard_leases l ON l.shard_group = "
	        "u.shard_group AND l.shard = u.shard AND l.part = u.part "
	        "JOIN cairn.runners r ON r.id = l.owner "
	        "WHERE u.id = %" PRId64 " AND r.name LIKE '%%:%d'",
	        id, (int)w[y].pid),
	    "the other worker never took the shard");
	cr_assert(wait_num(&e, 2, 20000, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id),
	          "the new owner never ran the step");
	set_flag(&e, id);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "count"), 2, "%s", r->output);
	cairn_run_free(r);
	/* X wakes up inside its stale execution and tries to write it. */
	cr_assert_eq(kill(w[x].pid, SIGCONT), 0);
	cr_assert(wait_log(&w[x], "refused by the fence", 20000),
	          "the stale write was not refused");
	r = finished(&e, id, 1000);
	cr_assert_str_eq(r->status, "completed");
	cr_assert_eq(jnum(r->output, "count"), 2, "the stale worker overwrote the result: %s",
	             r->output);
	cr_assert_eq(r->nsteps, 1);
	cr_assert_str_eq(r->steps[0].output, "2", "the journal kept a stale result");
	cairn_run_free(r);
	wk_kill(&w[x]);
	wk_stop(&w[y]);
	teardown(&e);
}

/* The run's count of executions since its last progress (runs.claims). */
static int64_t claims_of(env *e, int64_t id)
{
	return num(e, "SELECT claims FROM cairn.runs WHERE id = %" PRId64, id);
}

/*
 * An execution whose end the fence refused ended in its worker: it did not
 * stop it, so it gives its count back (CAIRN_POISON_AFTER counts stops).
 * Worker X is frozen in a step while its lease connection is cut and the
 * shard moves on (a new epoch, and no owner: as after another worker took
 * it and left); X then stays detached (a long re-attach window), so nothing
 * runs the run again while its count is read.
 */
Test(exec, an_execution_the_fence_refused_gives_its_count_back)
{
	env e;
	setup(&e);
	wk x;
	wk_start(&x, e.db, "CAIRN_REATTACH_WINDOW=10m");
	int64_t id = enqueue_blocked(&e);
	cr_assert_eq(claims_of(&e, id), 1, "the execution was not counted");
	cr_assert_eq(kill(x.pid, SIGSTOP), 0);
	num(&e,
	    "SELECT count(pg_terminate_backend(lease_pid)) FROM cairn.runners WHERE name LIKE "
	    "'%%:%d'",
	    (int)x.pid);
	num(&e,
	    "WITH u AS (UPDATE cairn.shard_leases l SET owner = NULL, epoch = l.epoch + 1 "
	    "FROM cairn.runs r "
	    "WHERE r.id = %" PRId64 " AND l.shard_group = r.shard_group AND l.shard = r.shard "
	    "AND l.part = r.part RETURNING 1) SELECT count(*) FROM u",
	    id);
	set_flag(&e, id);
	cr_assert_eq(kill(x.pid, SIGCONT), 0);
	cr_assert(wait_log(&x, "refused by the fence", 20000), "the stale write was not refused");
	cr_assert_eq(claims_of(&e, id), 0, "the refused execution still counts as a stop");
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                 " AND finished_at IS NULL",
	                 id),
	             1, "the refused write finished the run");
	wk_kill(&x);
	teardown(&e);
}

/*
 * A final write lost with the commit connection wrote nothing, not even the
 * count of its execution given back: the worker gives it back as soon as
 * the database answers, before the run is claimed again. The run's row is
 * locked, so its final write waits, and the test cuts that connection. With
 * CAIRN_POISON_AFTER=1, a count left behind would fail the run as poison at
 * its next claim; given back, the run executes again and completes.
 */
Test(exec, a_final_write_lost_with_its_connection_does_not_count_as_a_stop)
{
	env e;
	setup(&e);
	wk x;
	wk_start(&x, e.db, "CAIRN_POISON_AFTER=1");
	int64_t id = enqueue_blocked(&e);
	PGconn *lock = tdb_connect(e.db);
	/* In its part: Citus locks a row FOR UPDATE only by the distribution
	 * column's value. */
	char sql[192];
	snprintf(sql, sizeof sql,
	         "SELECT id FROM cairn.runs WHERE id = %" PRId64 " AND part = %" PRId64
	         " FOR UPDATE",
	         id, tdb_run_part(e.c, id));
	tdb_exec(lock, "BEGIN");
	tdb_exec(lock, sql);
	set_flag(&e, id);
	cr_assert(wait_num(&e, 1, 20000, "%s", tdb_commit_waiting()),
	          "the final write never waited for the row");
	cr_assert_eq(num(&e, "%s", tdb_commit_waiting_terminate()), 1);
	tdb_exec(lock, "ROLLBACK");
	PQfinish(lock);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	cr_assert_eq(num(&e, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id), 2,
	             "the lost write held the step's result: the step runs again");
	wk_stop(&x);
	teardown(&e);
}

/* ------------------------------------------------------------- results */

Test(exec, cli_waits_for_results_and_exits_by_outcome)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	char *out, *err;
	cr_assert_eq(tcli(e.db, &out, &err, "enqueue", "noop", "--input", "{\"a\": 1}", "--wait",
	                  "--timeout", "20s", NULL),
	             0, "%s", err);
	cr_assert(strstr(out, "\"a\""), "enqueue --wait printed %s", out);
	free(out);
	free(err);
	/* A run that sleeps longer than the wait: exit 4. */
	int64_t id = enqueue(&e, "sleep", "{\"ms\": 600000}", 0);
	char ref[32];
	snprintf(ref, sizeof ref, "%" PRId64, id);
	cr_assert_eq(tcli(e.db, NULL, &err, "result", ref, "--wait", "--timeout", "1s", NULL), 4,
	             "%s", err);
	free(err);
	/* A failed run: exit 1 with its error. */
	id = enqueue(&e, "http", "{}", 0);
	snprintf(ref, sizeof ref, "%" PRId64, id);
	cr_assert_eq(tcli(e.db, &out, &err, "result", ref, "--wait", "--timeout", "20s", NULL), 1);
	cr_assert(strstr(err, "url"), "%s", err);
	free(out);
	free(err);
	wk_stop(&a);
	teardown(&e);
}

/* --------------------------------------------------------------- drain */

Test(exec, sigterm_lets_a_running_step_finish_and_journals_it_before_exiting)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "CAIRN_SHUTDOWN_TIMEOUT=60s");
	/* The step runs until the test sets the run's flag, so it is certainly
	 * still in flight when the drain begins. */
	int64_t id = enqueue(&e, "t.stubborn", "{\"until_flag\": true}", 0);
	cr_assert(
	    wait_num(&e, 1, 20000, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id),
	    "step work never started");
	int64_t t0 = tnow_ms();
	cr_assert_eq(kill(a.pid, SIGTERM), 0);
	cr_assert(wait_log(&a, "msg=\"draining\"", 20000), "the worker never began to drain");
	set_flag(&e, id); /* now the step can finish */
	int rc = tworker_stop(a.pid, 0, 30000);
	tlive_del(a.pid);
	char *log = tfile_take(a.log);
	cr_assert_eq(rc, 0, "exit %d:\n%s", rc, log);
	cr_assert(strstr(log, "finished_cleanly=1 cut_off=0"), "%s", log);
	report("drain with a step in flight (released once draining) took %" PRId64 " ms",
	       tnow_ms() - t0);
	free(log);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                 " AND name = 'work' AND status = 'completed'",
	                 id),
	             1, "the finished step was not journaled before the worker exited");
	cr_assert_eq(num(&e, "SELECT count(*) FROM t_counter WHERE run_id = %" PRId64, id), 0,
	             "the run went on past its durable point while draining");
	wk_start(&b, e.db, NULL);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(step_named(r, "work")->attempts, 1, "the journaled step ran again");
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

Test(exec, sigterm_cuts_off_a_step_past_the_shutdown_timeout_and_a_second_signal_exits_at_once)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "CAIRN_SHUTDOWN_TIMEOUT=1s");
	/* The step never ends on its own (its flag is never set): only the
	 * shutdown timeout can end the drain. */
	int64_t id = enqueue(&e, "t.stubborn", "{\"until_flag\": true}", 0);
	cr_assert(
	    wait_num(&e, 1, 20000, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id),
	    "step work never started");
	int64_t t0 = tnow_ms();
	int rc = tworker_stop(a.pid, SIGTERM, 60000);
	tlive_del(a.pid);
	char *log = tfile_take(a.log);
	cr_assert_eq(rc, 0, "exit %d:\n%s", rc, log);
	cr_assert(strstr(log, "cut_off=1"), "%s", log);
	report("drain cut off at a 1 s shutdown timeout: exited after %" PRId64 " ms",
	       tnow_ms() - t0);
	free(log);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                 " AND name = 'work' AND status = 'completed'",
	                 id),
	             0, "the step that was cut off is journaled as completed");

	/* The run is still there; the next worker takes it, and a second
	 * SIGTERM during its drain exits at once. */
	wk_start(&b, e.db, "CAIRN_SHUTDOWN_TIMEOUT=60s");
	cr_assert(
	    wait_num(&e, 2, 20000, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id),
	    "the second worker never started the step");
	cr_assert_eq(kill(b.pid, SIGTERM), 0);
	cr_assert(wait_log(&b, "msg=\"draining\"", 20000), "the worker never began to drain");
	/* Its drain could only end by the step finishing (it never does) or by
	 * the 60 s timeout (exit 0): exit 1 is the second signal's doing. */
	t0 = tnow_ms();
	rc = tworker_stop(b.pid, SIGTERM, 30000);
	tlive_del(b.pid);
	log = tfile_take(b.log);
	cr_assert_eq(rc, 1, "exit %d after a second SIGTERM:\n%s", rc, log);
	cr_assert(strstr(log, "second signal"), "%s", log);
	report("second SIGTERM during a drain: exited after %" PRId64 " ms", tnow_ms() - t0);
	free(log);
	teardown(&e);
}

/* -------------------------------------------------------------- sleep */

Test(exec, durable_sleep_survives_the_death_of_every_worker)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "sleep", "{\"ms\": 3000}", 0);
	/* The sleep is journaled (a row that stays, so the wait cannot miss it). */
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND kind = 'sleep'",
	                   id),
	          "the sleep was never journaled");
	wk_kill(&a); /* no worker is left */
	/* The kill came while it slept (3 s is the margin for the few ms between
	 * the journal row showing up and the kill). */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                 " AND status = 'sleeping'",
	                 id),
	             1, "the run was no longer sleeping when its worker died");

	wk_start(&b, e.db, NULL);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "slept_ms"), 3000, "%s", r->output);
	int64_t took = num(&e,
	                   "SELECT (extract(epoch FROM finished_at - started_at) * 1000)::bigint "
	                   "FROM cairn.runs WHERE id = %" PRId64,
	                   id);
	report("durable sleep of 3000 ms across a kill -9: finished_at - started_at = %" PRId64
	       " ms",
	       took);
	cr_assert_geq(took, 3000);
	cr_assert_str_eq(step_named(r, "sleep")->status, "completed");
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

/* ------------------------------------------------------------ signals */

Test(exec, a_signal_sent_before_the_await_is_buffered_and_received)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	/* The run stops in step "gate", before its await, until the flag is set. */
	int64_t id = enqueue(&e, "t.await",
	                     "{\"gate\": true, \"name\": \"hello\", \"timeout_ms\": 30000}", 0);
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, id),
	          "step gate never ran");
	cr_assert_eq(cairn_signal(e.cl, id, "hello", "{\"n\": 7}"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	/* Sent while the run is held before the await: buffered, not consumed, and
	 * no await is journaled yet. */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64
	                 " AND consumed_by_seq IS NULL",
	                 id),
	             1, "the signal is not buffered");
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                 " AND kind = 'signal'",
	                 id),
	             0, "the await began before the gate was opened");
	set_flag(&e, id); /* now the run goes on to its await */
	cairn_run *r = finished(&e, id, 20000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cJSON *out = cJSON_Parse(r->output);
	cr_assert(out);
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(out, "timed_out")), "%s", r->output);
	cJSON *p = cJSON_GetObjectItem(out, "payload");
	cr_assert(p && cJSON_GetObjectItem(p, "n") && cJSON_GetObjectItem(p, "n")->valuedouble == 7,
	          "%s", r->output);
	cJSON_Delete(out);
	/* The journal agrees: the gate (seq 0) began before the signal was sent,
	 * the await (seq 1) after it, and the await consumed it. (Journal times
	 * are whole milliseconds, so the signal's time is compared truncated.) */
	cr_assert_eq(step_named(r, "gate")->attempts, 1);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.signals g "
	                 "JOIN cairn.steps s0 ON s0.run_id = g.run_id AND s0.part = g.part "
	                 "AND s0.seq = 0 AND s0.name = 'gate' "
	                 "JOIN cairn.steps s ON s.run_id = g.run_id AND s.part = g.part "
	                 "AND s.seq = 1 AND s.kind = 'signal' WHERE g.run_id = %" PRId64
	                 " AND s0.started_at <= g.created_at "
	                 "AND date_trunc('milliseconds', g.created_at) <= s.started_at "
	                 "AND g.consumed_by_seq = 1",
	                 id),
	             1);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, await_timeout_returns_etimeout_to_the_workflow)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.await", "{\"name\": \"never\", \"timeout_ms\": 300}", 0);
	cairn_run *r = finished(&e, id, 20000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cJSON *out = cJSON_Parse(r->output);
	cr_assert(out && cJSON_IsTrue(cJSON_GetObjectItem(out, "timed_out")), "%s", r->output);
	cJSON_Delete(out);
	const cairn_step_info *s = step_named(r, "never");
	cr_assert_str_eq(s->kind, "signal");
	cr_assert_str_eq(s->status, "timed_out");
	/* The engine sets the deadline (the step's wake_at) on its database-
	 * anchored clock, while the step's started_at/finished_at are the worker's
	 * wall clock: finished - started can come out a few ms under the timeout
	 * on a loaded machine. What it promises: the deadline is at least 300 ms
	 * after the run began, and the timeout did not fire before the deadline
	 * (1 ms of slack each for whole-millisecond rounding). */
	report("await timeout 300 ms: journaled started..finished %" PRId64 " ms",
	       s->finished_unix_ms - s->started_unix_ms);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps s JOIN cairn.runs r "
	                 "ON r.id = s.run_id AND r.part = s.part WHERE s.run_id = %" PRId64
	                 " AND s.name = 'never' "
	                 "AND s.wake_at >= r.started_at + interval '299 ms' "
	                 "AND s.finished_at >= s.wake_at - interval '1 ms'",
	                 r->id),
	             1, "the await timed out before its deadline, or the deadline came early");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

/* ------------------------------------------------------------- cancel */

static void cancel_promptly(env *e, int64_t id, const char *what)
{
	int64_t t0 = tnow_ms();
	cr_assert_eq(cairn_cancel(e->cl, id), CAIRN_OK, "%s", cairn_client_errmsg(e->cl));
	/* The give-up bound is far below what would end the run otherwise (a
	 * 10-minute sleep, an approval that never comes). */
	cairn_run *r = finished(e, id, 60000);
	int64_t took = tnow_ms() - t0;
	report("cancel while %s: the run ended %s after %" PRId64 " ms", what, r->status, took);
	cr_assert_str_eq(r->status, "cancelled", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
}

Test(exec, cancel_while_sleeping_or_awaiting_a_signal_ends_the_run_cancelled_promptly)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t sleeper = enqueue(&e, "sleep", "{\"ms\": 600000}", 0);
	int64_t waiter = enqueue(&e, "order", "{\"item\": \"book\", \"amount\": 12}", 0);
	wait_status(&e, sleeper, "sleeping", 20000);
	wait_status(&e, waiter, "waiting", 20000);
	cancel_promptly(&e, sleeper, "sleeping 10 minutes");
	cancel_promptly(&e, waiter, "waiting for approval");
	/* Nothing is left to wake them. */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.messages WHERE run_id IN (%" PRId64
	                 ", %" PRId64 ")",
	                 sleeper, waiter),
	             0);
	wk_stop(&a);
	teardown(&e);
}

/* ------------------------------------------------------------ retries */

/*
 * One attempt of the run (--max-attempts 1), so only the step's own retry
 * policy is at work here; what the run does with a step that used up its
 * attempts is the next test's subject.
 */
/*
 * A step's result and a run's output that are not UTF-8: before, the
 * database refused the commit ("cannot store the run's results"), and with
 * encryption on, where it never sees them, they were stored sealed and the
 * run completed. Now the step fails, once, saying why, and nothing of the
 * value is stored, whether the worker has keys or not.
 */
Test(exec, a_result_or_output_that_is_not_utf8_fails_the_run_naming_it_with_and_without_keys)
{
	static const char *const keys[] = {NULL, "k1=q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="};
	for (size_t k = 0; k < 2; k++) {
		env e;
		setup(&e);
		char setting[128];
		snprintf(setting, sizeof setting, "CAIRN_ENCRYPTION_KEYS=%s",
		         keys[k] ? keys[k] : "");
		if (keys[k])
			cr_assert_eq(cairn_client_set_keys(e.cl, keys[k]), CAIRN_OK);
		wk a;
		wk_start(&a, e.db, setting);
		int64_t id = enqueue(&e, "t.badutf8", NULL, 0);
		cairn_run *r = finished(&e, id, 20000);
		cr_assert_str_eq(r->status, "failed", "%s", keys[k] ? "with keys" : "without keys");
		cr_assert(r->error && strstr(r->error, "step bad: result is not valid UTF-8 (0xff) "
		                                       "at byte 2: JSON text must be UTF-8"),
		          "%s", r->error ? r->error : "(no error)");
		cr_assert_eq(step_named(r, "bad")->attempts, 1);
		cairn_run_free(r);
		cr_assert_eq(num(&e, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id), 1,
		             "the step ran again");
		cr_assert_eq(num(&e,
		                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
		                 " AND (status <> 'failed' OR output IS NOT NULL)",
		                 id),
		             0, "the result was stored");
		id = enqueue(&e, "t.badutf8", "{\"output\": 1}", 0);
		r = finished(&e, id, 20000);
		cr_assert_str_eq(r->status, "failed");
		cr_assert(r->error &&
		              strstr(r->error, "workflow output is not valid UTF-8 (0xc3) at "
		                               "byte 13, in $.name: JSON text must be UTF-8"),
		          "%s", r->error ? r->error : "(no error)");
		cairn_run_free(r);
		cr_assert_eq(num(&e,
		                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
		                 " AND output IS NULL",
		                 id),
		             1, "the output was stored");
		cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.messages"), 0);
		wk_stop(&a);
		teardown(&e);
	}
}

Test(exec, cancel_reaches_a_long_step_that_polls_cairn_should_stop)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.replay", "{\"mode\": \"same\"}", 0);
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, id),
	          "step count_block never ran");
	int64_t t0 = tnow_ms();
	cr_assert_eq(cairn_cancel(e.cl, id), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cairn_run *r = finished(&e, id, 60000);
	int64_t took = tnow_ms() - t0;
	cr_assert_str_eq(r->status, "cancelled", "%s: %s", r->status, r->error ? r->error : "");
	report("cancel reached a blocked step and ended the run in %" PRId64 " ms", took);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, step_retries_with_backoff_then_fails_and_cairn_retry_completes_it)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.flaky", "{\"attempts\": 3, \"initial_ms\": 100}", 1);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "failed", "%s", r->status);
	cr_assert(r->error && strstr(r->error, "flaky: not yet"), "%s", r->error ? r->error : "");
	const cairn_step_info *s = step_named(r, "flaky");
	cr_assert_str_eq(s->status, "failed");
	cr_assert_eq(s->attempts, 3, "journal shows %d attempts", s->attempts);
	int64_t execs = num(&e, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id);
	cr_assert_eq(execs, 3,
	             "the step ran %" PRId64 " times for a policy of 3 attempts; error: %s", execs,
	             r->error);
	/* The waits between attempts: at least 100 ms, then 200 ms (no jitter). */
	int64_t gap1 =
	    num(&e,
	        "SELECT (extract(epoch FROM at - lag(at) OVER (ORDER BY at)) * 1000)::bigint "
	        "FROM t_attempts WHERE run_id = %" PRId64 " ORDER BY at OFFSET 1 LIMIT 1",
	        id);
	int64_t gap2 =
	    num(&e,
	        "SELECT (extract(epoch FROM at - lag(at) OVER (ORDER BY at)) * 1000)::bigint "
	        "FROM t_attempts WHERE run_id = %" PRId64 " ORDER BY at OFFSET 2 LIMIT 1",
	        id);
	report("step retry gaps: %" PRId64 " ms (backoff 100), %" PRId64 " ms (backoff 200)", gap1,
	       gap2);
	cr_assert_geq(gap1, 100);
	cr_assert_geq(gap2, 200);
	cairn_run_free(r);

	set_flag(&e, id);
	char ref[24], *err = NULL;
	snprintf(ref, sizeof ref, "%" PRId64, id);
	int rc = tcli(e.db, NULL, &err, "retry", ref, NULL);
	cr_assert_eq(rc, 0, "cairn retry: %s", err);
	free(err);
	r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "executions"), 4, "%s", r->output);
	cr_assert_str_eq(step_named(r, "flaky")->status, "completed");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

/*
 * cairn.h: cairn_step "returns CAIRN_EFAIL when the attempts are used up
 * (the error is journaled and becomes the run's)"; DESIGN 5: a failing step
 * is retried up to its max_attempts, then the run fails for good. So a run
 * with the default 3 attempts whose step policy allows 3 attempts executes
 * the step 3 times, not 3 x 3.
 */
Test(exec, a_step_that_used_up_its_attempts_fails_the_run_without_running_again)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.flaky", "{\"attempts\": 3, \"initial_ms\": 100}", 0);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "failed", "%s", r->status);
	int64_t execs = num(&e, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id);
	report("step policy 3 attempts, run max_attempts 3: the step ran %" PRId64
	       " times, the run took %d attempts; error: %s",
	       execs, r->attempt, r->error ? r->error : "(null)");
	cr_assert_eq(execs, 3,
	             "the step ran %" PRId64
	             " times for a policy of 3 attempts (run attempt %d); error: %s",
	             execs, r->attempt, r->error ? r->error : "(null)");
	cr_assert_eq(r->attempt, 1, "the run was re-driven after its step had failed for good");
	cairn_run_free(r);
	/* One log line says so, with what an operator looks for. */
	char line[160];
	snprintf(line, sizeof line,
	         "msg=\"run failed\" run=%" PRId64 " workflow=t.flaky attempt=1 error=", id);
	cr_assert(wait_log(&a, line, 5000), "no \"%s\" in %s", line, a.log);
	wk_stop(&a);
	teardown(&e);
}

/* --------------------------------------------------- non-determinism */

Test(exec, a_replay_that_calls_a_different_step_fails_naming_both)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.nondet", NULL, 0);
	wait_status(&e, id, "waiting", 20000);
	set_flag(&e, id); /* the next replay names its first step "beta" */
	cr_assert_eq(cairn_signal(e.cl, id, "go", NULL), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cairn_run *r = finished(&e, id, 20000);
	cr_assert_str_eq(r->status, "failed", "%s", r->status);
	cr_assert(r->error && strstr(r->error, "non-determinism") &&
	              strstr(r->error, "\"alpha\"") && strstr(r->error, "\"beta\""),
	          "%s", r->error ? r->error : "(null)");
	report("non-determinism error: %s", r->error);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

/* ------------------------------------------------- concurrent signals */

#define SENDERS    4
#define PER_SENDER 5

typedef struct sender {
	const char *db;
	int64_t run;
	int k;
	int failed;
} sender;

static void *send_signals(void *arg)
{
	sender *s = arg;
	cairn_client *c;
	if (cairn_client_open(s->db, &c) != CAIRN_OK) {
		s->failed = 1;
		cairn_client_free(c);
		return NULL;
	}
	for (int i = 0; i < PER_SENDER; i++) {
		char p[64];
		snprintf(p, sizeof p, "{\"t\": %d, \"i\": %d}", s->k, i);
		if (cairn_signal(c, s->run, "s", p) != CAIRN_OK)
			s->failed = 1;
	}
	cairn_client_free(c);
	return NULL;
}

Test(exec, concurrent_signals_are_each_consumed_once_in_order_one_execution_at_a_time)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int n = SENDERS * PER_SENDER;
	char in[32];
	snprintf(in, sizeof in, "{\"n\": %d}", n);
	int64_t id = enqueue(&e, "t.signals", in, 0);
	wait_status(&e, id, "waiting", 20000);
	pthread_t th[SENDERS];
	sender s[SENDERS];
	for (int k = 0; k < SENDERS; k++) {
		s[k] = (sender){e.db, id, k, 0};
		pthread_create(&th[k], NULL, send_signals, &s[k]);
	}
	for (int k = 0; k < SENDERS; k++) {
		pthread_join(th[k], NULL);
		cr_assert(!s[k].failed, "sender %d failed", k);
	}
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");

	cJSON *got = cJSON_Parse(r->output);
	cr_assert(cJSON_IsArray(got) && cJSON_GetArraySize(got) == n, "%s", r->output);
	/* Exactly once each, and each sender's signals in the order it sent them. */
	int seen[SENDERS][PER_SENDER] = {{0}}, last[SENDERS];
	for (int k = 0; k < SENDERS; k++)
		last[k] = -1;
	cJSON *p;
	cJSON_ArrayForEach(p, got)
	{
		int t = (int)cJSON_GetObjectItem(p, "t")->valuedouble;
		int i = (int)cJSON_GetObjectItem(p, "i")->valuedouble;
		cr_assert(t >= 0 && t < SENDERS && i >= 0 && i < PER_SENDER);
		seen[t][i]++;
		cr_assert_gt(i, last[t], "sender %d: payload %d came after %d: %s", t, i, last[t],
		             r->output);
		last[t] = i;
	}
	for (int k = 0; k < SENDERS; k++)
		for (int i = 0; i < PER_SENDER; i++)
			cr_assert_eq(seen[k][i], 1, "payload (%d, %d) received %d times", k, i,
			             seen[k][i]);
	/* Each signal row is marked with the journal position that consumed it.
	 * (Not compared with the id order: ids of concurrent senders are drawn
	 * before their commits, so a later id can become visible first.) */
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT json_agg(payload ORDER BY consumed_by_seq)::text FROM cairn.signals WHERE "
	         "run_id = %" PRId64,
	         id);
	char *sent = tdb_str(e.c, sql);
	cJSON *want = cJSON_Parse(sent);
	cr_assert(cJSON_Compare(got, want, 1), "received %s, consumed %s", r->output, sent);
	cJSON_Delete(want);
	free(sent);
	cJSON_Delete(got);
	cr_assert_eq(
	    num(&e,
	        "SELECT count(DISTINCT consumed_by_seq) FROM cairn.signals WHERE run_id = %" PRId64,
	        id),
	    n);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64
	                 " AND consumed_by_seq IS NULL",
	                 id),
	             0);

	/* No two executions of the run overlapped in time. */
	int64_t execs = num(&e, "SELECT count(*) FROM t_exec WHERE run_id = %" PRId64, id);
	int64_t overlaps = num(
	    &e,
	    "SELECT count(*) FROM t_exec x JOIN t_exec y ON x.id < y.id AND x.run_id = "
	    "y.run_id AND x.t_enter < y.t_exit AND y.t_enter < x.t_exit WHERE x.run_id = %" PRId64,
	    id);
	report("%d concurrent signals: %" PRId64 " executions of the run, %" PRId64 " overlapping",
	       n, execs, overlaps);
	cr_assert_geq(execs, 2);
	cr_assert_eq(overlaps, 0);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

/* ------------------------------------------------------ many + a kill */

#define SPREAD_RUNS 1000

/* A backlog is claimed in batches: with its queue full, the poller claims
 * again once half of the queue has run, not for each run that ends (every
 * claim walks past the runs in flight). */
Test(exec, a_backlog_is_claimed_in_batches_not_once_per_finished_run)
{
	enum { RUNS = 1000 };
	env e;
	setup(&e);
	cairn_enqueue_opts *o = calloc(RUNS, sizeof *o);
	cairn_enqueued *ids = calloc(RUNS, sizeof *ids);
	for (int i = 0; i < RUNS; i++)
		o[i].input = "{\"ms\": 10}";
	cr_assert_eq(cairn_enqueue_batch(e.cl, "t.hold", RUNS, o, ids), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	free(o);
	free(ids);
	wk w;
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	/* No fallback polls: only the claims the drain asks for count. */
	w.pid = tworker_start(e.db, &w.port, tlog_file(w.log), "CAIRN_POLL_INTERVAL=1h",
	                      "CAIRN_POLL_BATCH=64", plugins, NULL);
	tlive_add(w.pid);
	cr_assert(tdb_wait_at_least(e.c,
	                            "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                            RUNS, 120000),
	          "the backlog did not drain");
	double claims = tmetric(w.port, "cairn_claims_total{of=\"shards\"}");
	fprintf(stderr, "exec: %d runs of 10 ms at concurrency 16 took %.0f claims\n", RUNS,
	        claims);
	/* A queue of 64 refilled at half: a claim per 32 runs, and at the end,
	 * when nothing is left but runs in flight, one per run that ends (its
	 * messages may have come while it ran). Before: one per run or two. */
	cr_assert(claims > 0 && claims <= RUNS / 6, "%d runs took %.0f claims", RUNS, claims);
	wk_stop(&w);
	teardown(&e);
}

Test(exec, a_thousand_runs_on_three_workers_survive_a_kill_and_are_journaled_once)
{
	env e;
	setup(&e);
	wk w[3];
	for (int i = 0; i < 3; i++)
		wk_start(&w[i], e.db, NULL);
	/* Wait until the three share the shards. */
	cr_assert(wait_num(&e, 3, 20000,
	                   "SELECT count(DISTINCT owner) FROM cairn.shard_leases "
	                   "WHERE owner IS NOT NULL"),
	          "the shards were never spread over three workers");

	cairn_enqueue_opts *o = calloc(SPREAD_RUNS, sizeof *o);
	cairn_enqueued *ids = calloc(SPREAD_RUNS, sizeof *ids);
	int rc = cairn_enqueue_batch(e.cl, "t.spread", SPREAD_RUNS, o, ids);
	cr_assert_eq(rc, CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	free(o);
	free(ids);
	int64_t t0 = tnow_ms();

	const char *done = "SELECT count(*) FROM cairn.runs WHERE status = 'completed'";
	cr_assert(tdb_wait_at_least(e.c, done, SPREAD_RUNS * 3 / 10, 60000),
	          "runs are not completing");
	int64_t at_kill = tdb_int(e.c, done);
	int64_t owned =
	    num(&e,
	        "SELECT count(*) FROM cairn.shard_leases l JOIN cairn.runners r ON r.id = "
	        "l.owner WHERE r.address LIKE '%%:%d'",
	        w[1].port);
	wk_kill(&w[1]);
	cr_assert(tdb_wait_at_least(e.c, done, SPREAD_RUNS, 120000),
	          "only %" PRId64 " of %d runs completed", tdb_int(e.c, done), SPREAD_RUNS);
	int64_t took = tnow_ms() - t0;

	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE status <> 'completed'"), 0);
	/* Exactly once in the journal: first, nap, second, each once per run. */
	int64_t once =
	    num(&e, "SELECT count(*) FROM (SELECT run_id FROM cairn.steps GROUP BY run_id "
	            "HAVING count(*) = 3 AND count(DISTINCT name) = 3 "
	            "AND bool_and(status = 'completed') AND bool_and(name IN ('first', 'nap', "
	            "'second'))) x");
	cr_assert_eq(once, SPREAD_RUNS);
	/* At least once in effect. The runs are read once, in a MATERIALIZED CTE:
	 * Citus joins no distributed table with a local one such as t_hits. */
	cr_assert_eq(
	    num(&e, "WITH r AS MATERIALIZED (SELECT id FROM cairn.runs) SELECT count(*) FROM r "
	            "WHERE (SELECT count(DISTINCT step) FROM t_hits h WHERE h.run_id = r.id) <> 2"),
	    0);
	int64_t hits = num(&e, "SELECT count(*) FROM t_hits");
	int64_t twice = num(&e, "SELECT count(*) FROM (SELECT 1 FROM t_hits GROUP BY run_id, step "
	                        "HAVING count(*) > 1) x");
	report("%d runs on 3 workers, one killed (it owned %" PRId64 " of 64 shards) after %" PRId64
	       " had completed: all completed in %" PRId64 " ms; steps executed %" PRId64
	       " times for %d journaled (%" PRId64 " re-executions, in %" PRId64 " run steps)",
	       SPREAD_RUNS, owned, at_kill, took, hits, 2 * SPREAD_RUNS, hits - 2 * SPREAD_RUNS,
	       twice);
	wk_stop(&w[0]);
	wk_stop(&w[2]);
	teardown(&e);
}

/* --------------------------------------------------------- bad input */

Test(exec, a_workflow_nobody_registered_fails_after_the_timeout_naming_it)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, "CAIRN_UNKNOWN_WORKFLOW_TIMEOUT=2s");
	int64_t id = enqueue(&e, "t.nobody", NULL, 0);
	cairn_run *r = finished(&e, id, 20000);
	cr_assert_str_eq(r->status, "failed", "%s", r->status);
	cr_assert(
	    r->error &&
	        strstr(r->error, "no live worker serves workflow \"t.nobody\" (never served)") &&
	        strstr(r->error, "CAIRN_UNKNOWN_WORKFLOW_TIMEOUT (2000 ms)"),
	    "%s", r->error ? r->error : "(null)");
	int64_t age = r->finished_unix_ms - r->created_unix_ms;
	report("unknown workflow failed %" PRId64 " ms after it was enqueued (timeout 2000 ms)",
	       age);
	cr_assert_geq(age, 2000);
	cairn_run_free(r);
	char line[160];
	snprintf(line, sizeof line,
	         "msg=\"run failed\" run=%" PRId64
	         " workflow=t.nobody attempt=1 error=\"no live worker serves",
	         id);
	cr_assert(wait_log(&a, line, 5000), "no \"%s\" in %s", line, a.log);
	wk_stop(&a);
	teardown(&e);
}

static int alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0;
}

Test(exec,
     bad_input_to_builtin_workflows_fails_the_run_naming_the_field_and_the_worker_stays_healthy)
{
	static const struct {
		const char *workflow, *input, *names;
	} bad[] = {
	    {"http", "{}", "\"url\" is missing"},
	    {"http", "{\"url\": \"file:///etc/passwd\"}", "\"url\" must be an http:// or https://"},
	    {"http", "{\"url\": \"ftp://x\"}", "\"url\" must be an http:// or https://"},
	    {"http", "{\"url\": \"http://127.0.0.1/\", \"method\": \"BREW\"}", "\"method\""},
	    {"sleep", "{\"ms\": -1}", "\"ms\" must be an integer"},
	    {"sleep", "{\"ms\": \"x\"}", "\"ms\" must be an integer"},
	    {"sleep", "null", "input must be an object"},
	    {"order", "{\"amount\": 0}", "\"item\""},
	    {"order", "{\"item\": \"book\", \"amount\": 0}",
	     "\"amount\" must be a number greater than 0"},
	};
	size_t nbad = sizeof bad / sizeof bad[0];
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t ids[16];
	for (size_t i = 0; i < nbad; i++)
		ids[i] = enqueue(&e, bad[i].workflow, bad[i].input, 0);
	for (size_t i = 0; i < nbad; i++) {
		cairn_run *r = finished(&e, ids[i], 20000);
		cr_assert_str_eq(r->status, "failed", "%s %s: %s", bad[i].workflow, bad[i].input,
		                 r->status);
		cr_assert(r->error && strstr(r->error, bad[i].names), "%s %s: %s", bad[i].workflow,
		          bad[i].input, r->error ? r->error : "(null)");
		cr_assert_eq(r->attempt, 1, "%s %s: bad input was retried (attempt %d)",
		             bad[i].workflow, bad[i].input, r->attempt);
		cairn_run_free(r);
	}
	cr_assert(alive(a.pid), "the worker died; log in %s", a.log);
	cr_assert_eq(thttp(a.port, "GET", "/healthz", NULL, NULL), 200);
	int64_t id = enqueue(&e, "noop", "{\"still\": \"here\"}", 0);
	cairn_run *r = finished(&e, id, 20000);
	cr_assert_str_eq(r->status, "completed");
	cr_assert(strstr(r->output, "\"still\""), "%s", r->output);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, http_builtin_gets_the_workers_healthz_and_retries_a_closed_port)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, "CAIRN_HTTP_ALLOW=127.0.0.1"); /* loopback is refused by default */
	char in[256];
	snprintf(in, sizeof in, "{\"url\": \"http://127.0.0.1:%d/healthz\", \"timeout_ms\": 5000}",
	         a.port);
	int64_t ok = enqueue(&e, "http", in, 0);
	/* A port held by a socket that never listens: refused for the whole test. */
	int closed_fd;
	snprintf(in, sizeof in,
	         "{\"url\": \"http://127.0.0.1:%d/\", \"timeout_ms\": 500, \"max_attempts\": 2}",
	         tclosed_port(&closed_fd));
	int64_t closed = enqueue(&e, "http", in, 1);

	cairn_run *r = finished(&e, ok, 20000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "status"), 200, "%s", r->output);
	cr_assert(strstr(r->output, "\"body\":\"ok\\n\"") ||
	              strstr(r->output, "\"body\": \"ok\\n\""),
	          "%s", r->output);
	cairn_run_free(r);

	r = finished(&e, closed, 20000);
	cr_assert_str_eq(r->status, "failed", "%s", r->status);
	const cairn_step_info *s = step_named(r, "request");
	report("http to a closed port: %d attempts, error: %s", s->attempts, r->error);
	cr_assert_eq(s->attempts, 2, "journal shows %d attempts", s->attempts);
	cr_assert(strstr(r->error, "http: GET http://127.0.0.1:"), "%s", r->error);
	cairn_run_free(r);
	close(closed_fd);
	wk_stop(&a);
	teardown(&e);
}

/* ---------------------------------------------------- faults (issue 10) */

/* Waits until the worker process has exited on its own; 1 if it did. */
static int exited_within(pid_t pid, int64_t timeout_ms)
{
	int64_t until = tnow_ms() + timeout_ms;
	while (tnow_ms() < until) {
		if (!alive(pid))
			return 1;
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return 0;
}

#define RUN_FAILED_SQL                                                                             \
	"SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = 'failed'"

/* Until run id has failed, starts a worker each time the one before died
 * (w->pid: the one running, or 0); returns how many died. The last one is
 * left running in w. */
static int workers_until_failed(env *e, int64_t id, wk *w)
{
	int crashes = 0;
	while (num(e, RUN_FAILED_SQL, id) == 0) {
		cr_assert_lt(crashes, 10, "the run kept crashing workers: never failed as poison");
		if (!w->pid)
			wk_spawn(w, e->db, NULL);
		int64_t until = tnow_ms() + 30000;
		while (alive(w->pid) && num(e, RUN_FAILED_SQL, id) == 0 && tnow_ms() < until) {
			struct timespec ts = {0, 20 * 1000000L};
			nanosleep(&ts, NULL);
		}
		if (num(e, RUN_FAILED_SQL, id) == 0) {
			cr_assert(exited_within(w->pid, 1000),
			          "the worker neither crashed nor failed the run");
			tlive_del(w->pid);
			unlink(w->log);
			w->pid = 0;
			crashes++;
		}
	}
	return crashes;
}

Test(exec, a_run_that_crashes_its_worker_fails_as_poison_and_cairn_retry_re_drives_it)
{
	env e;
	setup(&e);
	int64_t id = enqueue(&e, "t.crash", NULL, 0);
	wk w = {0};
	/* Each worker that claims the run dies; the one after the third stop
	 * fails the run instead of running it. */
	int crashes = workers_until_failed(&e, id, &w);
	report("poison run: %d workers crashed before it failed", crashes);
	cr_assert_eq(crashes, 3, "%d crashes before the run failed (CAIRN_POISON_AFTER is 3)",
	             crashes);
	cairn_run *r = finished(&e, id, 1000);
	cr_assert(strstr(r->error, "the worker stopped 3 times while running this run"), "%s",
	          r->error);
	cr_assert(strstr(r->error, "last durable step: before"), "%s", r->error);
	cairn_run_free(r);

	/* Fixed (the flag), re-driven: the worker that failed it now completes it. */
	set_flag(&e, id);
	cr_assert_eq(cairn_retry(e.cl, id), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(step_named(r, "before")->attempts, 1, "a journaled step ran again");
	cairn_run_free(r);
	wk_stop(&w);
	teardown(&e);
}

/*
 * A crash stops every run executing beside the culprit, and counts against
 * each; from then on a run that stopped its worker runs alone, so the
 * culprit's next crashes are its own. Run inn's step (3 s) is executing
 * when the poison run crashes the first worker; on the next workers both
 * have stopped once, and each runs alone: inn completes on its second
 * execution, and the culprit fails after its third crash. (Run beside the
 * culprit again, inn would be stopped again: a third execution, and a
 * second count towards CAIRN_POISON_AFTER.)
 */
Test(exec, after_a_crash_the_runs_it_stopped_run_alone_and_the_culprit_takes_them_down_once_at_most)
{
	env e;
	setup(&e);
	wk w = {0};
	wk_spawn(&w, e.db, NULL);
	int64_t inn = enqueue(&e, "t.stubborn", "{\"ms\": 3000}", 0);
	cr_assert(
	    wait_num(&e, 1, 20000, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, inn),
	    "the innocent run's step never started");
	int64_t bad = enqueue(&e, "t.crash", NULL, 0);
	int crashes = workers_until_failed(&e, bad, &w);
	cairn_run *r = finished(&e, inn, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	int64_t execs = num(&e, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, inn);
	report("innocent run: %" PRId64 " executions; poison run: %d crashes", execs, crashes);
	cr_assert_eq(execs, 2,
	             "the innocent run executed %" PRId64 " times: 2 expected (the one the first "
	             "crash stopped, then one alone)",
	             execs);
	cr_assert_eq(crashes, 3, "%d crashes before the poison run failed", crashes);
	wk_stop(&w);
	teardown(&e);
}

/* A t.replay run of priority 10 (a claim gives it the executor before the
 * runs due with it) whose deaf step will wait for its flag. */
static int64_t enqueue_blocking_first(env *e)
{
	cairn_enqueue_opts o = {.input = "{\"mode\": \"same\", \"deaf\": true}", .priority = 10};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(e->cl, "t.replay", &o, &r), CAIRN_OK, "%s",
	             cairn_client_errmsg(e->cl));
	cairn_enqueued_clear(&r);
	return r.id;
}

static void wait_blocked(env *e, int64_t id)
{
	cr_assert(wait_num(e, 1, 20000,
	                   "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, id),
	          "step count_block never ran");
}

/*
 * A claim counts the runs that wait in the worker's queue too (migration
 * 0018), and such a count holds only once the worker has written, before
 * the run starts, that it did: a run that crashes its worker after waiting
 * in the queue is counted like one that started at once. At concurrency 1
 * a blocked run of higher priority takes the executor, so the crashing run
 * waits in the queue each time; then the blocked run is let go.
 */
Test(exec, a_run_that_crashes_its_worker_after_waiting_in_the_queue_fails_as_poison)
{
	env e;
	setup(&e);
	int64_t bad = enqueue(&e, "t.crash", NULL, 0);
	int crashes = 0;
	while (num(&e, RUN_FAILED_SQL, bad) == 0) {
		cr_assert_lt(crashes, 10, "the run kept crashing workers: never failed as poison");
		/* Both due as the worker starts: its first claim takes them
		 * together, the blocked run first. */
		int64_t blk = enqueue_blocking_first(&e);
		wk w;
		wk_spawn(&w, e.db, "CAIRN_CONCURRENCY=1");
		wait_blocked(&e, blk);
		if (crashes == 0)
			cr_assert_eq(num(&e,
			                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
			                 " AND queued_by IS NOT NULL",
			                 bad),
			             1, "the crashing run did not wait in the queue counted");
		set_flag(&e, blk);
		int64_t until = tnow_ms() + 30000;
		while (alive(w.pid) && num(&e, RUN_FAILED_SQL, bad) == 0 && tnow_ms() < until) {
			struct timespec ts = {0, 20 * 1000000L};
			nanosleep(&ts, NULL);
		}
		if (num(&e, RUN_FAILED_SQL, bad) == 0) {
			cr_assert(exited_within(w.pid, 1000),
			          "the worker neither crashed nor failed the run");
			tlive_del(w.pid);
			unlink(w.log);
			crashes++;
		} else {
			wk_stop(&w);
		}
	}
	report("a run that waited in the queue: %d crashes before it failed as poison", crashes);
	cr_assert_eq(crashes, 3, "%d crashes before the poison run failed", crashes);
	teardown(&e);
}

/*
 * The runs that only waited in the queue of a worker that crashed are not
 * counted against: the next worker, with CAIRN_POISON_AFTER=1, fails the
 * run that was executing as poison and completes the five that waited.
 */
Test(exec, runs_that_only_waited_in_the_queue_of_a_crashed_worker_are_not_counted)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "CAIRN_CONCURRENCY=1");
	int64_t blk = enqueue_blocking_first(&e);
	wait_blocked(&e, blk);
	int64_t waiting[5];
	for (int i = 0; i < 5; i++)
		waiting[i] = enqueue(&e, "noop", "{}", 0);
	cr_assert(wait_num(&e, 5, 20000,
	                   "SELECT count(*) FROM cairn.runs WHERE id BETWEEN %" PRId64
	                   " AND %" PRId64 " AND queued_by IS NOT NULL AND claims = 1",
	                   waiting[0], waiting[4]),
	          "the five runs were not claimed into the queue");
	wk_kill(&a);
	wk_start(&b, e.db, "CAIRN_POISON_AFTER=1");
	cairn_run *r = finished(&e, blk, 30000);
	cr_assert_str_eq(r->status, "failed", "the executing run was not counted: %s", r->status);
	cairn_run_free(r);
	for (int i = 0; i < 5; i++) {
		r = finished(&e, waiting[i], 30000);
		cr_assert_str_eq(r->status, "completed", "run %d that only waited: %s: %s", i,
		                 r->status, r->error ? r->error : "");
		cairn_run_free(r);
	}
	wk_stop(&b);
	teardown(&e);
}

Test(exec, a_step_interrupted_by_a_drain_spends_no_attempt_and_completes_on_the_next_worker)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL);
	int64_t id =
	    enqueue(&e, "t.polite", NULL, 1); /* one attempt for the run, one for the step */
	cr_assert(
	    wait_num(&e, 1, 20000, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id),
	    "step work never started");
	wk_stop(&a);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                 " AND finished_at IS NULL",
	                 id),
	             1, "the drain ended the run");
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64, id), 0,
	             "the interrupted attempt was journaled as a failure");
	set_flag(&e, id);
	wk_start(&b, e.db, NULL);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert_eq(step_named(r, "work")->attempts, 1);
	cr_assert_eq(num(&e, "SELECT count(*) FROM t_attempts WHERE run_id = %" PRId64, id), 2);
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

/* JSON nested n levels deep: [[[...1...]]]. */
static char *deep_json(int n)
{
	char *s = malloc((size_t)n * 2 + 2);
	memset(s, '[', (size_t)n);
	s[n] = '1';
	memset(s + n + 1, ']', (size_t)n);
	s[2 * n + 1] = '\0';
	return s;
}

Test(exec, a_too_deep_payload_is_refused_at_input_and_a_deep_signal_nobody_awaits_is_harmless)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.await", "{\"name\": \"approval\", \"timeout_ms\": 60000}", 0);
	char idtxt[24], *out = NULL, *err = NULL, *deep = deep_json(999);
	snprintf(idtxt, sizeof idtxt, "%" PRId64, id);
	int rc = tcli(e.db, &out, &err, "signal", idtxt, "other", "--input", deep, NULL);
	cr_assert_eq(rc, 2, "exit %d: %s", rc, err ? err : "");
	cr_assert(strstr(err, "nested 999 levels deep: at most 64 are accepted"), "%s", err);
	free(out);
	free(err);
	/* Written behind the client's back: the run never awaits it, so it never
	 * parses it. In the run's part, as the engine writes a run's rows. */
	char *sql = malloc(strlen(deep) + 200);
	sprintf(sql,
	        "INSERT INTO cairn.signals (run_id, part, name, payload) VALUES (%" PRId64
	        ", %" PRId64 ", 'other', '%s')",
	        id, tdb_run_part(e.c, id), deep);
	tdb_exec(e.c, sql);
	free(sql);
	free(deep);
	cr_assert_eq(cairn_signal(e.cl, id, "other", "1"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_signal(e.cl, id, "approval", "true"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, signals_beyond_the_pending_cap_are_refused_naming_the_limit)
{
	env e;
	setup(&e);
	tdb_exec(e.c, "UPDATE cairn.settings SET value = '3' WHERE name = 'max_pending_signals'");
	int64_t id = enqueue(&e, "t.await", "{\"name\": \"never\", \"timeout_ms\": 600000}", 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cairn_signal(e.cl, id, "s", "1"), CAIRN_OK, "%s",
		             cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_signal(e.cl, id, "s", "1"), CAIRN_ESTATE);
	cr_assert(strstr(cairn_client_errmsg(e.cl),
	                 "it holds 3 unconsumed signals; the limit (max_pending_signals in "
	                 "cairn.settings) is 3"),
	          "%s", cairn_client_errmsg(e.cl));
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64, id), 3);
	teardown(&e);
}

Test(exec, a_run_over_the_journal_cap_fails_alone_and_the_others_complete)
{
	env e;
	setup(&e);
	tdb_exec(e.c, "UPDATE cairn.settings SET value = '20000' WHERE name = 'max_journal_bytes'");
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t big = enqueue(&e, "t.big", "{\"bytes\": 60000}", 0);
	int64_t small = enqueue(&e, "t.big", "{\"bytes\": 100}", 0);
	cairn_run *r = finished(&e, big, 30000);
	cr_assert_str_eq(r->status, "failed");
	cr_assert(strstr(r->error, "cannot load the run: its journal is "), "%s", r->error);
	cr_assert(strstr(r->error, "the limit (max_journal_bytes in cairn.settings) is 20000"),
	          "%s", r->error);
	cairn_run_free(r);
	r = finished(&e, small, 30000);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

/* -------------------------------------------------------- composition */

/* How many executions the worker started (cairn_runs_started_total). */
static double started(const wk *w)
{
	return tmetric(w->port, "cairn_runs_started_total");
}

Test(exec, a_fanout_sums_its_children_with_at_most_one_wake_of_the_parent_per_child)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	double before = started(&a);
	int64_t id = enqueue(&e, "fanout", "{\"n\": 20}", 0);
	cairn_run *r = finished(&e, id, 60000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "sum"), 2470, "0^2 + ... + 19^2: %s", r->output);
	cr_assert_eq(r->nchildren, 20);
	for (size_t i = 0; i < r->nchildren; i++)
		cr_assert_str_eq(r->children[i].status, "completed");
	cairn_run_free(r);
	/* The parent ran once to start them, then at most once per child. */
	double execs = started(&a) - before - 20;
	report("fanout of 20: %.0f executions of the parent", execs);
	cr_assert_leq(execs, 21, "%.0f executions of the parent", execs);
	char *v;
	cr_assert_eq(cairn_event_get(e.cl, id, "progress", 0, NULL, &v), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cr_assert_eq(jnum(v, "done"), 20, "%s", v);
	free(v);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, a_child_started_again_after_its_journal_entry_was_lost_is_the_same_child)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.parent", "{\"child\": \"noop\", \"input\": {\"a\": 1}}", 0);
	wait_status(&e, id, "waiting", 20000);
	/* As if the worker had died after the child's INSERT and before the
	 * journal entry that records it. */
	char sql[160];
	snprintf(sql, sizeof sql, "DELETE FROM cairn.steps WHERE run_id = %" PRId64 " AND seq = 0",
	         id);
	tdb_exec(e.c, sql);
	cr_assert_eq(cairn_signal(e.cl, id, "go", NULL), CAIRN_OK);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(r->nchildren, 1, "the replay started a second child");
	cr_assert_eq(jnum(r->output, "child"), (double)r->children[0].id, "%s", r->output);
	cr_assert(strstr(r->output, "\"output\": {\"a\": 1}"), "%s", r->output);
	cr_assert_eq(
	    num(&e, "SELECT parent_id FROM cairn.runs WHERE id = %" PRId64, r->children[0].id), id);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, a_failed_child_is_an_error_its_parent_handles)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.parent", "{\"child\": \"square\", \"input\": {\"x\": -1}}", 0);
	wait_status(&e, id, "waiting", 20000);
	cr_assert_eq(cairn_signal(e.cl, id, "go", NULL), CAIRN_OK);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert(strstr(r->output, "\"failed\""), "%s", r->output);
	cr_assert_str_eq(r->children[0].status, "failed");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, a_cancelled_parent_cancels_its_unfinished_children)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id =
	    enqueue(&e, "t.parent", "{\"child\": \"sleep\", \"input\": {\"ms\": 3600000}}", 0);
	wait_status(&e, id, "waiting", 20000);
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	                   " AND status = 'sleeping'",
	                   id),
	          "the child never went to sleep");
	cr_assert_eq(cairn_cancel(e.cl, id), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	                   " AND status = 'cancelled'",
	                   id),
	          "the child was not cancelled with its parent");
	cairn_run *r = finished(&e, id, 1000);
	cr_assert_str_eq(r->status, "cancelled");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, a_signal_sent_from_a_workflow_arrives_once_even_when_the_send_is_replayed)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t to = enqueue(&e, "t.signals", "{\"n\": 1}", 0);
	char in[160];
	snprintf(in, sizeof in,
	         "{\"to\": %" PRId64 ", \"signal\": \"s\", \"payload\": {\"v\": 7}, "
	         "\"then_wait\": true}",
	         to);
	int64_t id = enqueue(&e, "t.send", in, 0);
	wait_status(&e, id, "waiting", 20000);
	/* As if the sender's worker had died between the send and its entry. */
	char sql[160];
	snprintf(sql, sizeof sql, "DELETE FROM cairn.steps WHERE run_id = %" PRId64 " AND seq = 0",
	         id);
	tdb_exec(e.c, sql);
	cr_assert_eq(cairn_signal(e.cl, id, "go", NULL), CAIRN_OK);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	int64_t spawned = (int64_t)jnum(r->output, "spawned");
	cairn_run_free(r);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64, to), 1,
	             "the replayed send delivered the signal twice");
	r = finished(&e, to, 30000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert(strstr(r->output, "{\"v\": 7}"), "%s", r->output);
	cairn_run_free(r);
	r = finished(&e, spawned, 30000);
	cr_assert_str_eq(r->workflow, "noop");
	cr_assert_eq(r->parent_id, 0, "an enqueued run is no child");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, an_event_is_read_as_it_changes_woken_by_notification)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.progress", NULL, 0);
	char *v;
	cr_assert_eq(cairn_event_get(e.cl, id, "progress", 20000, NULL, &v), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cr_assert_eq(jnum(v, "pct"), 50, "%s", v);
	free(v);
	cr_assert_eq(cairn_event_get(e.cl, id, "nothing", 0, NULL, &v), CAIRN_ENOTFOUND);
	cr_assert_eq(cairn_signal(e.cl, id, "go", NULL), CAIRN_OK);
	int64_t t0 = tnow_ms();
	cr_assert_eq(cairn_event_get(e.cl, id, "progress", 20000, "{\"pct\": 50}", &v), CAIRN_OK,
	             "%s", cairn_client_errmsg(e.cl));
	report("event change seen after %" PRId64 " ms", tnow_ms() - t0);
	cr_assert_eq(jnum(v, "pct"), 100, "%s", v);
	free(v);
	char ref[32], *out = NULL, *err = NULL;
	snprintf(ref, sizeof ref, "%" PRId64, id);
	cr_assert_eq(tcli(e.db, &out, &err, "event", ref, "progress", NULL), 0, "%s", err);
	cr_assert_str_eq(out, "{\"pct\": 100}\n");
	free(out);
	free(err);
	cr_assert_eq(tcli(e.db, &out, &err, "event", ref, "nothing", NULL), 3);
	free(out);
	free(err);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, a_fanout_survives_kill_9_of_its_worker_with_every_child_started_once)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "fanout", "{\"n\": 30}", 0);
	cr_assert(wait_num(&e, 5, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	                   " AND status = 'completed'",
	                   id),
	          "the children never ran");
	wk_kill(&a);
	wk_start(&b, e.db, NULL);
	cairn_run *r = finished(&e, id, 60000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "sum"), 8555, "0^2 + ... + 29^2: %s", r->output);
	cr_assert_eq(r->nchildren, 30);
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

/* ------------------------------------------------------ step timeouts */

Test(exec, a_step_past_its_timeout_is_discarded_and_counts_as_a_timed_out_attempt)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.slow", "{\"ms\": 300, \"timeout\": 100, \"attempts\": 2}", 1);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "failed");
	cr_assert(strstr(r->error, "timed out after") && strstr(r->error, "its timeout is 100 ms"),
	          "%s", r->error);
	cr_assert_eq(step_named(r, "slow")->attempts, 2);
	cr_assert_eq(num(&e, "SELECT n FROM t_counter WHERE run_id = %" PRId64, id), 2);
	cr_assert_geq(tmetric(a.port, "cairn_steps_timed_out_total"), 2);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, a_step_sees_should_stop_at_its_timeout)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t t0 = tnow_ms();
	int64_t id =
	    enqueue(&e, "t.slow", "{\"ms\": 20000, \"timeout\": 200, \"polite\": true}", 1);
	cairn_run *r = finished(&e, id, 15000);
	cr_assert_str_eq(r->status, "failed");
	cr_assert(strstr(r->error, "timed out after"), "%s", r->error);
	cr_assert_lt(tnow_ms() - t0, 10000, "the step did not stop at its deadline");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

static int status_shows_overdue(void *arg)
{
	const wk *w = arg;
	char *body = NULL;
	long st = thttp(w->port, "GET", "/status", &body, NULL);
	int yes = st == 200 && body && strstr(body, "\"step_overdue\":true") &&
	          strstr(body, "\"step\":\"slow\"");
	free(body);
	return yes;
}

Test(exec, a_step_that_runs_past_its_timeout_is_shown_on_status_and_in_metrics)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "t.slow", "{\"ms\": 4000, \"timeout\": 100}", 1);
	cr_assert(twait(status_shows_overdue, &a, 10000), "/status never showed the step overdue");
	cr_assert_geq(tmetric(a.port, "cairn_steps_overdue"), 1);
	cr_assert_geq(tmetric(a.port, "cairn_step_longest_running_seconds"), 0.1);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "failed");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

/* ------------------------------------------------------ versioned code */

Test(exec, a_patched_deploy_keeps_old_runs_on_the_old_path_and_records_each_runs_version)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "CAIRN_CODE_VERSION=v1");
	int64_t old = enqueue(&e, "t.versioned", NULL, 1);
	int64_t bare = enqueue(&e, "t.versioned", "{\"unguarded\": true}", 1);
	wait_status(&e, old, "waiting", 20000);
	wait_status(&e, bare, "waiting", 20000);
	wk_stop(&a);
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(b.log);
	b.pid = tworker_start(e.db, &b.port, b.log, "CAIRN_POLL_INTERVAL=100ms", plugins,
	                      "CAIRN_CODE_VERSION=v2", "T_PATCHED=1", NULL);
	tlive_add(b.pid);
	int64_t fresh = enqueue(&e, "t.versioned", NULL, 1);
	wait_status(&e, fresh, "waiting", 20000);
	int64_t ids[] = {old, bare, fresh};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cairn_signal(e.cl, ids[i], "go", NULL), CAIRN_OK);
	cairn_run *r = finished(&e, old, 30000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert(strstr(r->output, "\"old\""), "a run from before the patch: %s", r->output);
	cr_assert_str_eq(r->code_version, "v1");
	cairn_run_free(r);
	r = finished(&e, fresh, 30000);
	cr_assert(strstr(r->output, "\"new\""), "%s", r->output);
	cr_assert_str_eq(r->code_version, "v2");
	cr_assert_str_eq(step_named(r, "split-a")->kind, "patch");
	cairn_run_free(r);
	r = finished(&e, bare, 30000);
	cr_assert_str_eq(r->status, "failed");
	cr_assert(strstr(r->error, "the journal has step \"a\" but the workflow now calls step "
	                           "\"a1\"") &&
	              strstr(r->error, "cairn_patched"),
	          "%s", r->error);
	cairn_run_free(r);
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(e.db, &out, &err, "list", "--code-version", "v1", "--json", NULL), 0,
	             "%s", err);
	cJSON *arr = cJSON_Parse(out);
	cr_assert_eq(cJSON_GetArraySize(arr), 2, "%s", out);
	cJSON_Delete(arr);
	free(out);
	free(err);
	wk_stop(&b);
	teardown(&e);
}

/* ---------------------------------------------------- transactional steps */

Test(exec, a_transactional_step_commits_its_rows_with_its_journal_entry_under_kill_9)
{
	enum { RUNS = 40 };
	env e;
	setup(&e);
	wk a, b, c;
	wk_start(&a, e.db, NULL);
	cairn_enqueue_opts o[RUNS];
	cairn_enqueued ids[RUNS];
	for (int i = 0; i < RUNS; i++)
		o[i] = (cairn_enqueue_opts){.input = "{\"ms\": 40}"};
	cr_assert_eq(cairn_enqueue_batch(e.cl, "t.tx", RUNS, o, ids), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	const char *journaled = "SELECT count(*) FROM cairn.steps WHERE name = 'tx'";
	/* Killed twice, each time with transactions open (16 executors, each
	 * holding one 40 ms). */
	cr_assert(tdb_wait_at_least(e.c, journaled, RUNS / 4, 30000), "no tx step committed");
	int64_t first = tdb_int(e.c, journaled);
	wk_kill(&a);
	wk_start(&b, e.db, NULL);
	cr_assert(tdb_wait_at_least(e.c, journaled, first + RUNS / 4, 30000),
	          "no tx step committed after the first kill");
	int64_t second = tdb_int(e.c, journaled);
	wk_kill(&b);
	wk_start(&c, e.db, NULL);
	cr_assert(
	    wait_num(&e, RUNS, 60000, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"),
	    "the runs did not all complete");
	cr_assert_eq(num(&e, "SELECT count(*) FROM t_hits"), RUNS,
	             "the rows the step inserted differ from the runs");
	cr_assert_eq(num(&e, "SELECT count(DISTINCT run_id) FROM t_hits"), RUNS);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.steps WHERE name = 'tx' AND "
	                     "status = 'completed'"),
	             RUNS);
	report("tx steps: %" PRId64 " and %" PRId64 " journaled at the two kills; %d rows for %d "
	       "runs",
	       first, second, RUNS, RUNS);
	wk_stop(&c);
	teardown(&e);
}

/* ------------------------------------------------------------ examples */

Test(exec, the_checkout_example_pays_in_a_child_run_and_ships_after_its_approval)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	int64_t id = enqueue(&e, "checkout", "{\"item\": \"book\", \"amount\": 12}", 0);
	wait_status(&e, id, "waiting", 20000);
	cr_assert_eq(cairn_signal(e.cl, id, "approval", "{\"approved\": true, \"by\": \"ann\"}"),
	             CAIRN_OK);
	cairn_run *r = finished(&e, id, 30000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(r->nchildren, 1);
	cr_assert_str_eq(r->children[0].workflow, "payment");
	cr_assert_eq(jnum(r->output, "payment_run"), (double)r->children[0].id, "%s", r->output);
	cr_assert(strstr(r->output, "\"charge_id\""), "%s", r->output);
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, the_report_example_counts_runs_in_a_transactional_step_and_publishes_them)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL);
	cairn_run *r = finished(&e, enqueue(&e, "noop", NULL, 0), 20000);
	cairn_run_free(r);
	int64_t id = enqueue(&e, "report", NULL, 0);
	r = finished(&e, id, 20000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "completed"), 1, "%s", r->output);
	cairn_run_free(r);
	char *v;
	cr_assert_eq(cairn_event_get(e.cl, id, "report", 0, NULL, &v), CAIRN_OK);
	cr_assert_eq(jnum(v, "running"), 1, "the report run itself: %s", v);
	free(v);
	wk_stop(&a);
	teardown(&e);
}

Test(exec, signals_sent_from_workflows_arrive_once_each_through_kill_9_of_their_worker)
{
	enum { N = 24 };
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL);
	int64_t to[N];
	for (int i = 0; i < N; i++)
		to[i] = enqueue(&e, "t.signals", "{\"n\": 1}", 0);
	for (int i = 0; i < N; i++) {
		char in[128];
		snprintf(in, sizeof in, "{\"to\": %" PRId64 ", \"signal\": \"s\", \"payload\": %d}",
		         to[i], i);
		enqueue(&e, "t.send", in, 0);
	}
	cr_assert(wait_num(&e, N / 4, 30000,
	                   "SELECT count(*) FROM cairn.steps WHERE name = 'tell' AND "
	                   "status = 'completed'"),
	          "no send was journaled");
	wk_kill(&a);
	wk_start(&b, e.db, NULL);
	/* N targets, N senders and the N noop runs the senders enqueue. */
	cr_assert(wait_num(&e, 3 * N, 60000,
	                   "SELECT count(*) FROM cairn.runs WHERE status = 'completed'"),
	          "the runs did not all complete");
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.signals"), N,
	             "a signal was sent twice (or not at all)");
	cr_assert_eq(num(&e, "SELECT count(DISTINCT run_id) FROM cairn.signals"), N);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE workflow = 'noop'"), N,
	             "an enqueue_from happened twice");
	wk_stop(&b);
	teardown(&e);
}
