/*
 * test_sdk_ts.c - the TypeScript SDK (sdk/typescript) end to end: real node
 * processes serving the workflows of sdk/typescript/test/flows.mjs (and the
 * order example), each starting its own cairn-worker as the SDK does, on a
 * database of its own per test; killed with SIGKILL where the point is to
 * survive a crash. Each step body of flows.mjs appends "RUN STEP ..." to the
 * file CAIRN_TEST_EFFECTS names when it starts, so a test counts how often a
 * step ran. Also: npm pack, an offline install type-checked by tsc, and the
 * SDK's own node --test suite. Every wait is a condition with a deadline.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

enum { SHARDS = 4, DEADLINE = 60000 };

extern char **environ;

/* No per-test .timeout (see test_exec.c): tests/run.sh bounds each test. */
TestSuite(sdk_ts, .fini = tlive_kill);

/* The repository (tests/run.sh exports it). */
static const char *top(void)
{
	const char *t = getenv("CAIRN_SRC_DIR");
	cr_assert(t && *t, "CAIRN_SRC_DIR is not set: run the tests with tests/run.sh");
	return t;
}

/* The test's database, its effects file and its variant file. */
typedef struct env {
	const char *db;
	PGconn *c;
	char effects[64];
	char variant[64];
} env;

static void setup(env *e)
{
	e->db = tdb_new_migrated_shards(SHARDS);
	e->c = tdb_connect(e->db);
	tlog_file(e->effects);
	tlog_file(e->variant);
}

static void teardown(env *e)
{
	PQfinish(e->c);
	unlink(e->effects);
	unlink(e->variant);
}

/* A node process: its pid and its log (its engine's log lines too). */
typedef struct sdkp {
	pid_t pid;
	char log[64];
} sdkp;

/* The log shown when a check fails. */
static const char *shown_log;

static void dump_log(void)
{
	if (!shown_log)
		return;
	char *text = tfile_read(shown_log);
	fprintf(stderr, "---- node log %s ----\n%s\n----\n", shown_log, text);
	free(text);
}

/* Unsets every CAIRN_* variable of this (child) process. */
static void unset_cairn_env(void)
{
	for (;;) {
		char name[256] = "";
		for (char **v = environ; *v; v++)
			if (strncmp(*v, "CAIRN_", 6) == 0) {
				snprintf(name, sizeof name, "%.*s", (int)(strcspn(*v, "=")), *v);
				break;
			}
		if (!name[0])
			return;
		unsetenv(name);
	}
}

/*
 * Starts `node SCRIPT` (a path under the repository) with DATABASE_URL=db.
 * The child only calls async-signal-safe-enough libc (no Criterion: an
 * assertion in a forked child would hang it).
 * With e (the flows), it also gets the sanitizer build's engine
 * (CAIRN_WORKER_BIN), quick polls and takeovers, 4 lanes, the effects and
 * variant files, and the NULL-terminated "NAME=value" settings of extra;
 * without, nothing else: no CAIRN_* variable at all, as a user runs an
 * example. Returns at once.
 */
static void node_spawn(sdkp *p, env *e, const char *script, const char *const *extra)
{
	char path[1100], bin[1100];
	snprintf(path, sizeof path, "%s/%s", top(), script);
	snprintf(bin, sizeof bin, "%s", tbin("cairn-worker"));
	tlog_file(p->log);
	shown_log = p->log;
	p->pid = fork();
	cr_assert(p->pid >= 0);
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(p->log, O_WRONLY | O_APPEND);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		unset_cairn_env();
		setenv("DATABASE_URL", e->db, 1);
		if (extra) {
			char effects[96], variant[96];
			snprintf(effects, sizeof effects, "CAIRN_TEST_EFFECTS=%s", e->effects);
			snprintf(variant, sizeof variant, "CAIRN_TEST_VARIANT=%s", e->variant);
			putenv(effects);
			putenv(variant);
			setenv("CAIRN_WORKER_BIN", bin, 1);
			setenv("CAIRN_POLL_INTERVAL", "100ms", 1);
			setenv("CAIRN_HEARTBEAT_INTERVAL", "200ms", 1);
			setenv("CAIRN_REBALANCE_INTERVAL", "200ms", 1);
			setenv("CAIRN_RUNNER_TTL", "2s", 1);
			setenv("CAIRN_SHUTDOWN_TIMEOUT", "10s", 1);
			setenv("CAIRN_CONCURRENCY", "4", 1);
			for (int i = 0; extra[i]; i++)
				putenv((char *)extra[i]);
		}
		execlp("node", "node", path, (char *)NULL);
		_exit(127);
	}
	tlive_add(p->pid);
}

/* node_spawn, then waits until its engine is ready (welcome). */
static void node_start(sdkp *p, env *e, const char *script, const char *const *extra)
{
	node_spawn(p, e, script, extra);
	tcheck(dump_log, tfile_wait(p->log, "msg=\"engine ready\"", 30000),
	       "%s: no engine became ready within 30 s", script);
}

/* The flows with no settings beyond the tests'. */
static const char *const FLOWS_ENV[] = {NULL};
#define FLOWS "sdk/typescript/test/flows.mjs"

/* Sends sig to the node process and waits for its exit status. */
static int node_stop(sdkp *p, int sig)
{
	int rc = tworker_stop(p->pid, sig, 20000);
	tlive_del(p->pid);
	return rc;
}

/* The pid of the engine p started last (its "engine ready" log line). */
static pid_t engine_pid(const sdkp *p)
{
	char *text = tfile_read(p->log);
	const char *key = "msg=\"engine ready\" component=sdk pid=", *at = NULL;
	for (const char *s = text; (s = strstr(s, key)); s++)
		at = s;
	pid_t pid = at ? (pid_t)strtol(at + strlen(key), NULL, 10) : 0;
	free(text);
	cr_assert_gt(pid, 0, "no engine pid in %s", p->log);
	return pid;
}

/* 1 once the process is gone (or a zombie nobody reaped yet). */
static int proc_gone(void *arg)
{
	pid_t pid = *(pid_t *)arg;
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z';
}

static int64_t enqueue(env *e, const char *workflow, const char *input)
{
	char *out = NULL, *err = NULL;
	int rc = tcli(e->db, &out, &err, "enqueue", workflow, "--group", "typescript", "--input",
	              input ? input : "null", NULL);
	cr_assert_eq(rc, 0, "enqueue %s: %s", workflow, err);
	int64_t id = strtoll(out, NULL, 10);
	free(out);
	free(err);
	return id;
}

static void cli_ok(env *e, const char *what, const char *a, const char *b, const char *c,
                   const char *d)
{
	char *out = NULL, *err = NULL;
	int rc = tcli(e->db, &out, &err, what, a, b, c, d, NULL);
	cr_assert_eq(rc, 0, "cairn %s %s %s: %s%s", what, a, b ? b : "", out, err);
	free(out);
	free(err);
}

static char *idstr(int64_t id)
{
	static char s[4][24];
	static int k;
	char *p = s[k++ % 4];
	snprintf(p, sizeof s[0], "%" PRId64, id);
	return p;
}

static int status_is(env *e, int64_t id, const char *status, int64_t timeout_ms)
{
	return tdb_wait_at_leastf(
	    e->c, 1, timeout_ms,
	    "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = '%s'", id, status);
}

/* The run's status, output (JSON text) and error once it has finished. */
typedef struct outcome {
	char *status, *output, *error;
} outcome;

static outcome finished(env *e, int64_t id, int64_t timeout_ms)
{
	int done = tdb_wait_at_leastf(e->c, 1, timeout_ms,
	                              "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                              " AND status IN ('completed', 'failed', 'cancelled')",
	                              id);
	tcheck(dump_log, done, "run %" PRId64 " did not finish within %" PRId64 " ms", id,
	       timeout_ms);
	char sql[160];
	outcome o;
	snprintf(sql, sizeof sql, "SELECT status FROM cairn.runs WHERE id = %" PRId64, id);
	o.status = tdb_str(e->c, sql);
	snprintf(sql, sizeof sql, "SELECT output::text FROM cairn.runs WHERE id = %" PRId64, id);
	o.output = tdb_str(e->c, sql);
	snprintf(sql, sizeof sql, "SELECT error FROM cairn.runs WHERE id = %" PRId64, id);
	o.error = tdb_str(e->c, sql);
	return o;
}

static void outcome_free(outcome *o)
{
	free(o->status);
	free(o->output);
	free(o->error);
}

/* finished(), which must be completed; its output parsed (caller deletes). */
static cJSON *completed(env *e, int64_t id)
{
	outcome o = finished(e, id, DEADLINE);
	tcheck(dump_log, strcmp(o.status, "completed") == 0, "run %" PRId64 " %s: %s", id, o.status,
	       o.error ? o.error : "");
	cJSON *j = cJSON_Parse(o.output ? o.output : "null");
	cr_assert(j, "output not JSON: %s", o.output);
	outcome_free(&o);
	return j;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsString(v), "no string \"%s\" in the output", k);
	return v->valuestring;
}

static double jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsNumber(v), "no number \"%s\" in the output", k);
	return v->valuedouble;
}

/* How many lines of the effects file start with "RUN STEP " (and, when
 * detail is given, go on with it). */
static int effects(env *e, int64_t run, const char *step, const char *detail)
{
	char *text = tfile_read(e->effects), prefix[256];
	snprintf(prefix, sizeof prefix, "%" PRId64 " %s %s", run, step, detail ? detail : "");
	int n = 0;
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (strncmp(line, prefix, strlen(prefix)) == 0)
			n++;
		line = nl ? nl + 1 : NULL;
	}
	free(text);
	return n;
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
	fprintf(stderr, "test_sdk_ts: %s\n", line);
}

/* ------------------------------------------------------- the example */

Test(sdk_ts, the_order_example_charges_sleeps_waits_for_approval_ships_and_drains)
{
	env e;
	setup(&e);
	sdkp p;
	/* As a user runs it: only DATABASE_URL; the engine is the
	 * repository's bin/cairn-worker (make test builds it), else CAIRN_*. */
	char bin[1100];
	snprintf(bin, sizeof bin, "%s/bin/cairn-worker", top());
	const char *const with_bin[] = {NULL};
	node_start(&p, &e, "sdk/typescript/examples/order.mjs",
	           access(bin, X_OK) == 0 ? NULL : with_bin);
	int64_t t0 = tnow_ms();
	int64_t id = enqueue(&e, "ts.order", "{\"item\": \"book\", \"amount\": 12}");
	tcheck(dump_log, status_is(&e, id, "waiting", DEADLINE), "run never waited for approval");
	int64_t waited = tnow_ms() - t0;
	cli_ok(&e, "signal", idstr(id), "approval", "--input", "{\"by\": \"ann\"}");
	cJSON *out = completed(&e, id);
	cr_assert_str_eq(jstr(out, "item"), "book");
	cr_assert(strncmp(jstr(out, "charge_id"), "ch_", 3) == 0, "%s", jstr(out, "charge_id"));
	cr_assert(strncmp(jstr(out, "tracking"), "TRK-", 4) == 0, "%s", jstr(out, "tracking"));
	cr_assert_str_eq(jstr(out, "approved_by"), "ann");
	cJSON_Delete(out);
	cr_assert_geq(waited, 1000, "approval awaited %" PRId64 " ms after enqueue: no 1 s sleep",
	              waited);
	/* The journal: charge, the sleep, the signal, ship. */
	cr_assert_eq(tdb_intf(e.c,
	                      "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                      " AND status = 'completed' AND name IN ('charge', 'sleep', "
	                      "'approval', 'ship')",
	                      id),
	             4);
	int rc = node_stop(&p, SIGTERM);
	tcheck(dump_log, rc == 0, "order.mjs exited %d after SIGTERM", rc);
	cr_assert(tfile_wait(p.log, "msg=\"draining\"", 1000), "the engine did not drain");
	unlink(p.log);
	teardown(&e);
}

/* ------------------------------------------------------- replay */

Test(sdk_ts, a_journaled_step_never_runs_again_across_a_replay)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.replay", NULL);
	cJSON *out = completed(&e, id);
	cr_assert_str_eq(jstr(out, "a"), "A");
	cr_assert_str_eq(jstr(out, "b"), "B");
	cJSON_Delete(out);
	int executions = effects(&e, id, "top", NULL);
	cr_assert_geq(executions, 2, "the function ran %d times: no replay after the sleep",
	              executions);
	cr_assert_eq(effects(&e, id, "a", NULL), 1, "step a ran again on replay");
	cr_assert_eq(effects(&e, id, "b", NULL), 1);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, a_workflow_whose_durable_calls_changed_fails_with_the_nondeterminism_error)
{
	env e;
	setup(&e);
	FILE *f = fopen(e.variant, "w");
	fputs("v1\n", f);
	fclose(f);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.changing", NULL);
	tcheck(dump_log, status_is(&e, id, "waiting", DEADLINE), "run never waited");
	/* The code changes under the run: its replay calls step "beta". */
	f = fopen(e.variant, "w");
	fputs("v2\n", f);
	fclose(f);
	cli_ok(&e, "signal", idstr(id), "go", NULL, NULL);
	outcome o = finished(&e, id, DEADLINE);
	cr_assert_str_eq(o.status, "failed");
	cr_assert(o.error && strstr(o.error, "non-determinism") && strstr(o.error, "\"alpha\"") &&
	              strstr(o.error, "\"beta\""),
	          "%s", o.error ? o.error : "(null)");
	report("non-determinism error: %s", o.error);
	outcome_free(&o);
	cr_assert_eq(effects(&e, id, "v2", NULL), 0, "the changed step ran");
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* ------------------------------------------------------- crashes */

enum { SLOW_RUNS = 8 };

/* Kills (SIGKILL) the node process (engine 0) or its engine (1) while steps
 * of SLOW_RUNS runs are in flight; snapshots, once the killed process is
 * gone, which steps the journal holds and how often each ran; then checks
 * that every run completes and that no step journaled at the kill ran again. */
static void kill_mid_step(int engine)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t ids[SLOW_RUNS];
	for (int i = 0; i < SLOW_RUNS; i++)
		ids[i] = enqueue(&e, "ts.t.slow", "{\"ms\": 300}");
	/* Mid-step: some steps journaled, some bodies running. */
	tcheck(dump_log,
	       tdb_wait_at_leastf(e.c, 3, DEADLINE,
	                          "SELECT count(*) FROM cairn.steps WHERE name LIKE 's_' AND "
	                          "status = 'completed'"),
	       "no steps were journaled");
	pid_t victim = engine ? engine_pid(&p) : p.pid;
	kill(victim, SIGKILL);
	if (!engine) {
		waitpid(p.pid, NULL, 0);
		tlive_del(p.pid);
	}
	pid_t old_engine = engine ? victim : engine_pid(&p);
	cr_assert(twait(proc_gone, &old_engine, 20000), "the engine outlived the kill");
	int64_t journaled = tdb_int(e.c, "SELECT count(*) FROM cairn.steps WHERE name LIKE 's_' "
	                                 "AND status = 'completed'");
	/* How often each journaled step had run at the kill. */
	int before[SLOW_RUNS][3] = {{0}}, was_journaled[SLOW_RUNS][3] = {{0}};
	static const char *const names[] = {"s1", "s2", "s3"};
	for (int i = 0; i < SLOW_RUNS; i++)
		for (int s = 0; s < 3; s++) {
			was_journaled[i][s] =
			    (int)tdb_intf(e.c,
			                  "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
			                  " AND name = '%s' AND status = 'completed'",
			                  ids[i], names[s]);
			before[i][s] = effects(&e, ids[i], names[s], NULL);
		}
	int64_t t0 = tnow_ms();
	if (!engine)
		node_start(&p, &e, FLOWS, FLOWS_ENV);
	int reran = 0;
	for (int i = 0; i < SLOW_RUNS; i++) {
		cJSON *out = completed(&e, ids[i]);
		cr_assert_eq(jnum(out, "steps"), 3);
		cJSON_Delete(out);
	}
	int64_t took = tnow_ms() - t0;
	for (int i = 0; i < SLOW_RUNS; i++)
		for (int s = 0; s < 3; s++) {
			int after = effects(&e, ids[i], names[s], NULL);
			cr_assert_geq(after, 1);
			if (was_journaled[i][s])
				cr_assert_eq(after, before[i][s],
				             "run %" PRId64
				             " step %s was journaled at the kill and ran "
				             "again (%d times, %d before)",
				             ids[i], names[s], after, before[i][s]);
			else
				reran += after - 1;
		}
	if (engine) {
		pid_t now = engine_pid(&p);
		cr_assert_neq(now, old_engine, "no new engine was started");
		cr_assert(!proc_gone(&p.pid), "the node process died with its engine");
	}
	report("kill -9 of the %s with %" PRId64 " steps journaled: %d runs completed %" PRId64
	       " ms later; %d unjournaled step bodies ran again, no journaled one",
	       engine ? "engine (cairn-worker)" : "node process", journaled, SLOW_RUNS, took,
	       reran);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, kill_9_of_the_node_process_mid_step_completes_every_run_and_reruns_no_journaled_step)
{
	kill_mid_step(0);
}

Test(sdk_ts, kill_9_of_the_engine_mid_step_completes_every_run_and_reruns_no_journaled_step)
{
	kill_mid_step(1);
}

Test(sdk_ts, a_workflow_that_crashes_node_every_time_fails_as_poison_and_takes_no_other_run)
{
	env e;
	setup(&e);
	const char *const poison[] = {"CAIRN_POISON_AFTER=2", NULL};
	sdkp p;
	node_start(&p, &e, FLOWS, poison);
	int64_t others[4];
	for (int i = 0; i < 4; i++)
		others[i] = enqueue(&e, "ts.t.slow", "{\"ms\": 100}");
	int64_t bad = enqueue(&e, "ts.t.crash", NULL);
	/* A supervisor's part: start node again whenever it dies. */
	int crashes = 0;
	int64_t deadline = tnow_ms() + 90000;
	while (!status_is(&e, bad, "failed", 0) && tnow_ms() < deadline) {
		int st;
		if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
			tlive_del(p.pid);
			cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 70, "node ended %d", st);
			crashes++;
			node_start(&p, &e, FLOWS, poison);
		}
		usleep(20000);
	}
	outcome o = finished(&e, bad, 1000);
	cr_assert_str_eq(o.status, "failed");
	cr_assert(o.error && strstr(o.error, "the worker stopped 2 times"), "%s",
	          o.error ? o.error : "(null)");
	report("poison: %s (node crashed %d times)", o.error, crashes);
	outcome_free(&o);
	cr_assert_eq(effects(&e, bad, "crash", NULL), 2);
	for (int i = 0; i < 4; i++) {
		cJSON *out = completed(&e, others[i]);
		cJSON_Delete(out);
	}
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* ------------------------------------------- cancel, sleep, signals */

Test(sdk_ts, cancelling_a_run_aborts_its_running_step_and_ends_it_cancelled)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t stepping = enqueue(&e, "ts.t.long", NULL);
	int64_t waiting = enqueue(&e, "ts.t.wait", NULL);
	char want[64];
	snprintf(want, sizeof want, "%" PRId64 " long started", stepping);
	tcheck(dump_log, tfile_wait(e.effects, want, DEADLINE), "the long step never started");
	tcheck(dump_log, status_is(&e, waiting, "waiting", DEADLINE), "never waited");
	int64_t t0 = tnow_ms();
	cli_ok(&e, "cancel", idstr(stepping), NULL, NULL, NULL);
	cli_ok(&e, "cancel", idstr(waiting), NULL, NULL, NULL);
	outcome a = finished(&e, stepping, DEADLINE), b = finished(&e, waiting, DEADLINE);
	cr_assert_str_eq(a.status, "cancelled", "%s: %s", a.status, a.error ? a.error : "");
	cr_assert_str_eq(b.status, "cancelled", "%s: %s", b.status, b.error ? b.error : "");
	report("a cancelled step saw its AbortSignal and the run ended cancelled in %" PRId64 " ms",
	       tnow_ms() - t0);
	outcome_free(&a);
	outcome_free(&b);
	cr_assert_eq(effects(&e, stepping, "long", "aborted:StoppedError"), 1);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, a_durable_sleep_survives_a_restart_of_every_process)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.sleepy", "{\"ms\": 3000}");
	tcheck(dump_log, status_is(&e, id, "sleeping", DEADLINE), "never slept");
	pid_t engine = engine_pid(&p);
	cr_assert_eq(node_stop(&p, SIGKILL), 128 + SIGKILL);
	cr_assert(twait(proc_gone, &engine, 20000), "the engine outlived node");
	cr_assert(!status_is(&e, id, "completed", 0));
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	cJSON *out = completed(&e, id);
	double elapsed = jnum(out, "elapsed");
	cJSON_Delete(out);
	cr_assert_geq(elapsed, 3000, "slept %.0f ms", elapsed);
	cr_assert_eq(effects(&e, id, "after", NULL), 1);
	report("a 3 s sleep across kill -9 of node and its engine ended %.0f ms after it began",
	       elapsed);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, a_signal_sent_before_the_wait_is_received)
{
	env e;
	setup(&e);
	/* Sent before any SDK process runs: buffered until the run waits. */
	int64_t id = enqueue(&e, "ts.t.wait", NULL);
	cli_ok(&e, "signal", idstr(id), "go", "--input", "{\"v\": 1}");
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	cJSON *out = completed(&e, id);
	cr_assert_eq(jnum(out, "v"), 1);
	cJSON_Delete(out);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* ------------------------------------------------- steps' policies */

Test(sdk_ts, a_failing_step_is_retried_with_backoff_and_a_non_retryable_error_is_not)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.retry", NULL);
	cJSON *out = completed(&e, id);
	cr_assert_str_eq(jstr(out, "flaky"), "ok on 3");
	cr_assert_str_eq(jstr(out, "doomed"),
	                 "StepFailedError: step doomed: NonRetryableError: card declined");
	cJSON_Delete(out);
	/* Attempts at t0, t0 + 300 ms, then 600 ms later (no jitter). */
	char *text = tfile_read(e.effects), key[64];
	snprintf(key, sizeof key, "%" PRId64 " flaky ", id);
	int64_t at[3] = {0};
	int n = 0;
	for (const char *s = text; (s = strstr(s, key)) && n < 3; s++) {
		int attempt = 0;
		long long ms = 0;
		cr_assert_eq(sscanf(s + strlen(key), "%d %lld", &attempt, &ms), 2);
		cr_assert_eq(attempt, n + 1);
		at[n++] = ms;
	}
	free(text);
	cr_assert_eq(n, 3, "flaky ran %d times", n);
	cr_assert_geq(at[1] - at[0], 300, "first backoff %" PRId64 " ms", at[1] - at[0]);
	cr_assert_geq(at[2] - at[1], 600, "second backoff %" PRId64 " ms", at[2] - at[1]);
	cr_assert_eq(effects(&e, id, "doomed", NULL), 1, "a NonRetryableError was retried");
	report("backoffs of 300 and 600 ms measured %" PRId64 " and %" PRId64 " ms", at[1] - at[0],
	       at[2] - at[1]);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, a_step_past_its_timeout_is_aborted_and_its_next_attempt_completes)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.timeout", NULL);
	outcome o = finished(&e, id, DEADLINE);
	cr_assert_str_eq(o.status, "completed", "%s: %s", o.status, o.error ? o.error : "");
	cr_assert_str_eq(o.output, "\"done on 2\"");
	outcome_free(&o);
	cr_assert_eq(effects(&e, id, "slow", "aborted:StepTimeoutError"), 1);
	cr_assert_eq(effects(&e, id, "slow", "attempt"), 2);
	cr_assert_eq(tdb_intf(e.c,
	                      "SELECT attempts FROM cairn.steps WHERE run_id = %" PRId64
	                      " AND name = 'slow'",
	                      id),
	             2);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, a_workflow_that_throws_retry_run_error_is_retried_from_its_journal)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.again", NULL);
	cJSON *out = completed(&e, id);
	cr_assert_eq(jnum(out, "attempt"), 2);
	cJSON_Delete(out);
	cr_assert_eq(effects(&e, id, "once", NULL), 1, "the journaled step ran again on the retry");
	cr_assert_eq(tdb_intf(e.c, "SELECT attempt FROM cairn.runs WHERE id = %" PRId64, id), 2);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* ------------------------------------------------- composition */

Test(sdk_ts, a_child_run_returns_its_output_and_a_failed_child_is_an_error_the_parent_handles)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.parent", "{\"x\": 7}");
	cJSON *out = completed(&e, id);
	cr_assert_eq(jnum(out, "y"), 49);
	cr_assert(strstr(jstr(out, "failed"), "Error: child says no"), "%s", jstr(out, "failed"));
	cJSON_Delete(out);
	cr_assert_eq(
	    tdb_intf(e.c, "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64, id), 2);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* ctx.traceparent (protocol version 3): the run's trace context outside a
 * step, the step attempt's inside, both in the trace the client's
 * traceparent named. */
Test(sdk_ts, ctx_traceparent_is_the_runs_and_in_a_step_the_attempts_in_the_callers_trace)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	char *o = NULL, *err = NULL;
	int rc = tcli(e.db, &o, &err, "enqueue", "ts.t.trace", "--group", "typescript",
	              "--traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	              NULL);
	cr_assert_eq(rc, 0, "enqueue: %s", err);
	int64_t id = strtoll(o, NULL, 10);
	free(o);
	free(err);
	cJSON *out = completed(&e, id);
	const char *run = jstr(out, "run"), *step = jstr(out, "step");
	cr_assert_eq(strlen(run), 55, "%s", run);
	cr_assert(strncmp(run, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36) == 0, "%s", run);
	cr_assert(strncmp(step, run, 36) == 0, "one trace: %s, %s", run, step);
	cr_assert(strcmp(run + 36, "00f067aa0ba902b7-01") != 0 && strcmp(step + 36, run + 36) != 0,
	          "the run's span, then the step's: %s, %s", run, step);
	cJSON_Delete(out);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* A workflow that returns ctx.continueAsNew(input) ends, completed, and its
 * successor runs with that input (protocol version 2): the chain goes on to
 * its end, and `cairn result` of its first run prints the last's. */
Test(sdk_ts, a_workflow_that_continues_as_new_hands_on_and_cairn_result_follows_the_chain)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.chain", "{\"n\": 0, \"until\": 3}");
	char *out = NULL, *err = NULL;
	int rc = tcli(e.db, &out, &err, "result", idstr(id), "--wait", "--timeout", "60s", NULL);
	tcheck(dump_log, rc == 0, "cairn result: %s", err);
	cr_assert_str_eq(out, "{\"n\": 3}\n");
	free(out);
	free(err);
	cr_assert_eq(tdb_intf(e.c, "SELECT count(*) FROM cairn.runs WHERE chain_id = %" PRId64, id),
	             3);
	cr_assert_eq(effects(&e, id, "work", "0"), 1, "the first run's step ran once");
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, a_wait_for_many_children_is_one_durable_call_with_results_in_order)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.fanout", "{\"n\": 40}");
	cJSON *out = completed(&e, id);
	cr_assert_eq(jnum(out, "sum"), 20540);
	cr_assert_geq(jnum(out, "first"), 1);
	cr_assert(strstr(jstr(out, "failed"), "Error: child says no"), "%s", jstr(out, "failed"));
	cJSON_Delete(out);
	cr_assert_eq(tdb_intf(e.c,
	                      "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                      " AND kind = 'children'",
	                      id),
	             3);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

Test(sdk_ts, now_random_patched_events_enqueue_and_send_are_journaled_and_replay_the_same)
{
	env e;
	setup(&e);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	int64_t id = enqueue(&e, "ts.t.misc", NULL);
	cJSON *out = completed(&e, id);
	/* The output comes from the execution after the sleep (a replay); the
	 * effects line from the first one. */
	char line[128];
	snprintf(line, sizeof line, "%.0f %s", jnum(out, "now"), jstr(out, "random"));
	cr_assert_eq(effects(&e, id, "misc", line), 1, "now or random changed on replay: %s", line);
	cr_assert_str_eq(jstr(out, "randomType"), "bigint");
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(out, "patched")));
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(out, "stop")));
	cr_assert(strstr(jstr(out, "sendError"), "CallFailedError: ") &&
	              strstr(jstr(out, "sendError"), "not found"),
	          "%s", jstr(out, "sendError"));
	int64_t other = (int64_t)jnum(out, "other");
	cJSON_Delete(out);
	cJSON *sq = completed(&e, other);
	cr_assert_eq(jnum(sq, "y"), 4);
	cJSON_Delete(sq);
	char *ev = NULL, *err = NULL;
	cr_assert_eq(tcli(e.db, &ev, &err, "event", idstr(id), "stage", NULL), 0, "%s", err);
	cr_assert(strstr(ev, "\"at\"") && strstr(ev, "misc"), "%s", ev);
	free(ev);
	free(err);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	teardown(&e);
}

/* ------------------------------------------------- starting */

Test(sdk_ts, an_engine_that_cannot_start_ends_the_node_process_with_its_status_and_message)
{
	env e;
	setup(&e);
	const char *const bad[] = {"CAIRN_POLL_INTERVAL=soon", NULL};
	sdkp p;
	node_spawn(&p, &e, FLOWS, bad);
	int st = 0;
	int64_t deadline = tnow_ms() + 30000;
	pid_t r = 0;
	while ((r = waitpid(p.pid, &st, WNOHANG)) == 0 && tnow_ms() < deadline)
		usleep(10000);
	tlive_del(p.pid);
	tcheck(dump_log, r == p.pid && WIFEXITED(st) && WEXITSTATUS(st) == 2,
	       "node did not exit 2 (status %d)", st);
	char *log = tfile_read(p.log);
	tcheck(dump_log, strstr(log, "CAIRN_POLL_INTERVAL") && strstr(log, "soon"),
	       "the engine's message is not in the log");
	free(log);
	unlink(p.log);
	teardown(&e);
}

/* ------------------------------------------------- the client */

Test(sdk_ts, the_client_enqueues_signals_reads_cancels_and_retries_over_the_http_api)
{
	env e;
	setup(&e);
	const char *token = "sdk-ts-test-token-0123456789";
	char tok[96];
	snprintf(tok, sizeof tok, "CAIRN_HTTP_TOKEN=%s", token);
	int port;
	pid_t api = tworker_start(e.db, &port, NULL, tok, NULL);
	sdkp p;
	node_start(&p, &e, FLOWS, FLOWS_ENV);
	char url[64], script[1100];
	snprintf(url, sizeof url, "CAIRN_URL=http://127.0.0.1:%d", port);
	snprintf(script, sizeof script, "%s/sdk/typescript/test/client.mjs", top());
	const char *argv[] = {"/usr/bin/env", "node", script, NULL};
	const char *envs[] = {url, tok, NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(argv, envs, &out, &err);
	tcheck(dump_log, rc == 0 && strstr(out, "client: ok"), "client.mjs exited %d:\n%s\n%s", rc,
	       out, err);
	free(out);
	free(err);
	cr_assert_eq(node_stop(&p, SIGTERM), 0);
	cr_assert_eq(tworker_stop(api, SIGTERM, 20000), 0);
	teardown(&e);
}

/* ------------------------------------------------- the package */

Test(sdk_ts, npm_pack_gives_a_package_that_installs_offline_and_type_checks_with_tsc)
{
	/* A copy of the package, so that its prepack (tsc) does not rewrite
	 * the dist/ the other tests' node processes load. */
	char cmd[8192];
	snprintf(
	    cmd, sizeof cmd,
	    "set -e; tmp=$(mktemp -d /tmp/cairn-npm-XXXXXX); trap 'rm -rf \"$tmp\"' EXIT; "
	    "export npm_config_cache=\"$tmp/cache\" npm_config_update_notifier=false; "
	    "mkdir \"$tmp/pkg\"; cd '%s/sdk/typescript'; "
	    "cp -r package.json tsconfig.json README.md src \"$tmp/pkg/\"; cd \"$tmp/pkg\"; "
	    "npm pack --silent >\"$tmp/name\"; tgz=\"$tmp/pkg/$(tail -n 1 \"$tmp/name\")\"; "
	    "tar tzf \"$tgz\" | sort >\"$tmp/files\"; "
	    "grep -qx package/dist/index.d.ts \"$tmp/files\"; "
	    "grep -qx package/dist/index.js \"$tmp/files\"; "
	    "grep -qx package/README.md \"$tmp/files\"; "
	    "! grep -q 'src/' \"$tmp/files\"; "
	    "mkdir \"$tmp/app\"; cd \"$tmp/app\"; echo '{\"name\":\"app\",\"private\":true}' "
	    ">package.json; "
	    "npm install --offline --no-audit --no-fund --silent \"$tgz\"; "
	    "cat >tsconfig.json <<'EOF'\n"
	    "{\"compilerOptions\": {\"strict\": true, \"module\": \"commonjs\", \"target\": "
	    "\"ES2020\", \"lib\": [\"ES2020\"], \"types\": [], \"moduleResolution\": \"node\", "
	    "\"noEmitOnError\": true}, \"files\": [\"app.ts\"]}\n"
	    "EOF\n"
	    "cat >app.ts <<'EOF'\n"
	    "declare const console: { log(...args: unknown[]): void }; // no @types/node here\n"
	    "import { Client, Context, NonRetryableError, RetryPolicy, StepFailedError, Worker } "
	    "from \"cairn-sdk\";\n"
	    "interface Order { item: string; amount: number }\n"
	    "interface Shipped { item: string; tracking: string; at: Date; n: bigint }\n"
	    "const worker = new Worker({ exit: false, concurrency: 2 });\n"
	    "worker.workflow<Order, Shipped>(\"ts.typed\", async (ctx: Context, input) => {\n"
	    "  const policy: RetryPolicy = { maxAttempts: 2, timeoutMs: 1000 };\n"
	    "  const tracking = await ctx.step(\"ship\", async (signal) => {\n"
	    "    if (signal.aborted) throw new NonRetryableError(\"stopped\");\n"
	    "    return `T-${input.item}`;\n"
	    "  }, policy);\n"
	    "  const approval = await ctx.waitForSignal<{ by: string }>(\"approval\", { timeoutMs: "
	    "1000 });\n"
	    "  return { item: approval.by, tracking, at: await ctx.now(), n: await ctx.random() "
	    "};\n"
	    "});\n"
	    "const client = new Client({ url: \"http://127.0.0.1:1\", token: \"t\" });\n"
	    "console.log(typeof worker.run, typeof client.enqueue, new "
	    "StepFailedError(\"m\").name);\n"
	    "EOF\n"
	    "tsc -p .; node app.js; "
	    "node --input-type=module -e 'import { Worker } from \"cairn-sdk\"; "
	    "console.log(\"esm\", typeof Worker)'; "
	    "sed -i 's/return { item: approval.by/return { item: 42/' app.ts; "
	    "if tsc -p . >\"$tmp/bad\" 2>&1; then echo 'a type error passed tsc'; exit 1; fi; "
	    "grep -q \"Type 'number' is not assignable to type 'string'\" \"$tmp/bad\" || "
	    "{ cat \"$tmp/bad\"; exit 1; }; echo typed",
	    top());
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(sh, NULL, &out, &err);
	cr_assert_eq(rc, 0, "npm pack / install / tsc failed (%d):\n%s\n%s", rc, out, err);
	cr_assert(strstr(out, "function function StepFailedError"), "%s", out);
	cr_assert(strstr(out, "esm function"), "%s", out);
	cr_assert(strstr(out, "typed"), "%s", out);
	free(out);
	free(err);
}

Test(sdk_ts, the_sdks_node_test_suite_passes)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd,
	         "cd '%s/sdk/typescript' && node --test test/unit.test.mjs test/worker.test.mjs",
	         top());
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(sh, NULL, &out, &err);
	cr_assert_eq(rc, 0, "node --test failed (%d):\n%s\n%s", rc, out, err);
	cr_assert(strstr(out, "# fail 0"), "%s", out);
	free(out);
	free(err);
}
