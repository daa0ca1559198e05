/*
 * test_sdk_python.c - workflows written in Python (sdk/python), end to end:
 * real Python processes serving the workflows of sdk/python/tests/flows.py
 * (or the py.order example), each starting its own cairn-worker engine
 * (docs/protocol.md), on a database of their own per test. The guarantees
 * are the C workflows' (test_exec.c), checked through the SDK: a journaled
 * step never runs again, a kill -9 of either process loses no run, a
 * workflow that kills its process fails as poison alone.
 *
 * Every step body in flows.py appends "RUN STEP ATTEMPT PID TIME" to the file
 * named by CAIRN_TEST_SIDE, so a test counts how often a body ran. Every
 * wait is a condition polled with a deadline.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

typedef struct env {
	const char *db;
	PGconn *c;
	cairn_client *cl;
	char side[64];    /* the step bodies' record (CAIRN_TEST_SIDE) */
	char variant[64]; /* t.nondet's code: "old" or "new" (CAIRN_TEST_VARIANT) */
} env;

typedef struct py {
	pid_t pid;
	int port; /* its engine's HTTP port */
	char log[64];
} py;

/* No per-test .timeout (see test_exec.c): tests/run.sh's --timeout bounds
 * each test. */
TestSuite(sdk_python, .fini = tlive_kill);

static const char *top(void)
{
	const char *t = getenv("CAIRN_SRC_DIR");
	cr_assert(t, "CAIRN_SRC_DIR is not set (tests/run.sh sets it)");
	return t;
}

static const char *flows_py(void)
{
	static char path[1100];
	snprintf(path, sizeof path, "%s/sdk/python/tests/flows.py", top());
	return path;
}

static void setup(env *e)
{
	e->db = tdb_new_migrated_shards(16);
	e->c = tdb_connect(e->db);
	int rc = cairn_client_open(e->db, &e->cl);
	cr_assert_eq(rc, CAIRN_OK, "client: %s", e->cl ? cairn_client_errmsg(e->cl) : "no memory");
	tlog_file(e->side);
	tlog_file(e->variant);
	FILE *f = fopen(e->variant, "w");
	cr_assert(f);
	fputs("old", f);
	fclose(f);
}

static void teardown(env *e)
{
	cairn_client_free(e->cl);
	PQfinish(e->c);
	unlink(e->side);
	unlink(e->variant);
}

/* Starts `python3 script` with stdout and stderr to a new p->log, the
 * engine found through CAIRN_WORKER_BIN (this build's), quick polls and
 * takeovers, 4 lanes, and the NULL-ended "NAME=value" settings. Returns at
 * once. */
static void py_spawn(env *e, py *p, const char *script, ...)
{
	const char *extra[16];
	int n = 0;
	va_list ap;
	va_start(ap, script);
	const char *s;
	while ((s = va_arg(ap, const char *)) && n < 15)
		extra[n++] = s;
	va_end(ap);
	if (p->log[0])
		unlink(p->log);
	tlog_file(p->log);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the test */
		FILE *f = freopen(p->log, "a", stderr);
		(void)f;
		dup2(2, 1);
		setenv("DATABASE_URL", e->db, 1);
		setenv("CAIRN_WORKER_BIN", tbin("cairn-worker"), 1);
		setenv("CAIRN_LOG_LEVEL", "info", 1);
		setenv("CAIRN_POLL_INTERVAL", "100ms", 1);
		setenv("CAIRN_HEARTBEAT_INTERVAL", "200ms", 1);
		setenv("CAIRN_REBALANCE_INTERVAL", "200ms", 1);
		setenv("CAIRN_RUNNER_TTL", "2s", 1);
		setenv("CAIRN_SHUTDOWN_TIMEOUT", "10s", 1);
		setenv("CAIRN_CONCURRENCY", "4", 1);
		setenv("CAIRN_TEST_SIDE", e->side, 1);
		setenv("CAIRN_TEST_VARIANT", e->variant, 1);
		unsetenv("CAIRN_HTTP_ADDR");
		unsetenv("CAIRN_SHARD_GROUPS");
		unsetenv("CAIRN_HTTP_TOKEN");
		for (int i = 0; i < n; i++)
			putenv((char *)extra[i]);
		execlp("python3", "python3", script, (char *)NULL);
		_exit(127);
	}
	tlive_del(p->pid);
	tlive_add(pid);
	p->pid = pid;
	p->port = 0;
}

/* The port of the last complete "cairn-worker started" line of the log
 * (an engine started again logs another), 0 if there is none. */
static int last_port(const char *log)
{
	char *text = tfile_read(log);
	int port = 0;
	for (const char *at = text; (at = strstr(at, "cairn-worker started")); at++) {
		const char *eol = strchr(at, '\n'), *k = strstr(at, "http_port=");
		if (eol && k && k < eol)
			port = atoi(k + strlen("http_port="));
	}
	free(text);
	return port;
}

static int alive(pid_t pid)
{
	siginfo_t si = {0};
	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

static void dump_log(const py *p)
{
	char *text = tfile_read(p->log);
	fprintf(stderr, "--- log of python %d (%s):\n%s\n---\n", (int)p->pid, p->log, text);
	free(text);
}

/* Waits until the Python process's engine answers /readyz. */
static void py_ready(py *p)
{
	int64_t until = tnow_ms() + 60000;
	while (!(p->port = last_port(p->log)) && alive(p->pid) && tnow_ms() < until) {
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (!p->port)
		dump_log(p);
	cr_assert(p->port, "the Python process's engine never started");
	cr_assert(thttp_wait(p->port, "/readyz", 200, 30000), "the engine never became ready");
}

static void py_start(env *e, py *p)
{
	py_spawn(e, p, flows_py(), NULL);
	py_ready(p);
}

/* SIGTERM: the process must drain its engine and exit 0 (its status). */
static void py_stop(py *p)
{
	int rc = tworker_stop(p->pid, SIGTERM, 30000);
	tlive_del(p->pid);
	if (rc != 0)
		dump_log(p);
	cr_assert_eq(rc, 0, "python exited %d after SIGTERM", rc);
	unlink(p->log);
	p->log[0] = '\0';
}

static void py_kill(py *p)
{
	int rc = tworker_stop(p->pid, SIGKILL, 5000);
	tlive_del(p->pid);
	cr_assert_eq(rc, 128 + SIGKILL, "kill -9: exit %d", rc);
}

/* A file of /proc as a string (the caller frees); "" when it is gone. */
static char *proc_read(const char *path)
{
	FILE *f = fopen(path, "r");
	char *s = calloc(1, 4096);
	if (f) {
		size_t n = fread(s, 1, 4095, f);
		s[n] = '\0';
		fclose(f);
	}
	return s;
}

/* The pid of the process's engine (its child), 0 if it has none. */
static pid_t engine_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
	char *text = proc_read(path);
	pid_t child = (pid_t)atoi(text);
	free(text);
	return child;
}

static int64_t enqueue(env *e, const char *workflow, const char *input)
{
	cairn_enqueue_opts o = {.input = input, .group = "python"};
	cairn_enqueued r;
	int rc = cairn_enqueue(e->cl, workflow, &o, &r);
	cr_assert_eq(rc, CAIRN_OK, "enqueue %s: %s", workflow, cairn_client_errmsg(e->cl));
	cairn_enqueued_clear(&r); /* a warning, before the workflow is served */
	return r.id;
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

static cairn_run *completed(env *e, int64_t id, int64_t timeout_ms)
{
	cairn_run *r = finished(e, id, timeout_ms);
	cr_assert_str_eq(r->status, "completed", "run %" PRId64 " %s: %s", id, r->status,
	                 r->error ? r->error : "");
	return r;
}

static const cairn_step_info *step_named(const cairn_run *r, const char *name)
{
	for (size_t i = 0; i < r->nsteps; i++)
		if (strcmp(r->steps[i].name, name) == 0)
			return &r->steps[i];
	cr_assert_fail("run %" PRId64 " has no journal entry \"%s\"", r->id, name);
	return NULL;
}

#define num(e, ...)                        tdb_intf((e)->c, __VA_ARGS__)
#define wait_num(e, want, timeout_ms, ...) tdb_wait_at_leastf((e)->c, want, timeout_ms, __VA_ARGS__)

/* How many times the body of step `step` of run `run` ran (lines of the
 * side file), and the times it started (up to max of them, in order). */
static int side_times(env *e, int64_t run, const char *step, double *times, int max)
{
	char *text = tfile_read(e->side), prefix[160];
	snprintf(prefix, sizeof prefix, "%" PRId64 " %s ", run, step);
	int n = 0;
	for (char *line = text; line && *line;) {
		char *eol = strchr(line, '\n');
		if (!eol)
			break; /* a line still being written */
		*eol = '\0';
		if (strncmp(line, prefix, strlen(prefix)) == 0) {
			if (times && n < max)
				times[n] = strtod(strrchr(line, ' ') + 1, NULL);
			n++;
		}
		line = eol + 1;
	}
	free(text);
	return n;
}

static int side_count(env *e, int64_t run, const char *step)
{
	return side_times(e, run, step, NULL, 0);
}

typedef struct side_want {
	env *e;
	const int64_t *runs;
	int n;
	const char *step;
} side_want;

static int every_run_ran(void *arg)
{
	side_want *w = arg;
	for (int i = 0; i < w->n; i++)
		if (side_count(w->e, w->runs[i], w->step) < 1)
			return 0;
	return 1;
}

/* Waits until the body of step ran for each of the n runs. */
static void wait_side(env *e, const int64_t *runs, int n, const char *step)
{
	side_want w = {e, runs, n, step};
	cr_assert(twait(every_run_ran, &w, 30000), "step %s never ran for every run", step);
}

static cJSON *output_of(const cairn_run *r)
{
	cJSON *out = cJSON_Parse(r->output ? r->output : "");
	cr_assert(out, "run %" PRId64 ": output is not JSON: %s", r->id,
	          r->output ? r->output : "(null)");
	return out;
}

static const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Runs argv (argv[0] found on PATH through /usr/bin/env) with env set; its
 * exit code, and its output and errors in *out (the caller frees). */
static int run_env(const char *const *argv, const char *const *environ_, char **out)
{
	const char *args[16] = {"/usr/bin/env"};
	int n = 1;
	for (int i = 0; argv[i] && n < 15; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	char *o = NULL, *err = NULL;
	int rc = trun(args, environ_, &o, &err);
	size_t lo = strlen(o), le = strlen(err);
	*out = malloc(lo + le + 2);
	memcpy(*out, o, lo);
	(*out)[lo] = '\n';
	memcpy(*out + lo + 1, err, le + 1);
	free(o);
	free(err);
	return rc;
}

/* ------------------------------------------------------- the example */

static int run_waits_for_approval(void *arg)
{
	env *e = ((void **)arg)[0];
	int64_t id = *(int64_t *)((void **)arg)[1];
	return num(e,
	           "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	           " AND name = 'approval' AND status = 'waiting'",
	           id) == 1;
}

/*
 * The contract: `python3 sdk/python/examples/order.py` with only
 * DATABASE_URL set (and PATH, to find python3) serves py.order, starting
 * the repository's bin/cairn-worker by itself; a run enqueued with the
 * CLI and approved with `cairn signal` returns item, charge_id, tracking
 * and approved_by; SIGTERM drains it and it exits 0.
 */
Test(sdk_python, the_order_example_charges_sleeps_waits_for_approval_and_ships)
{
	env e;
	setup(&e);
	char bin[1100], script[1100];
	snprintf(bin, sizeof bin, "%s/bin/cairn-worker", top());
	cr_assert(access(bin, X_OK) == 0, "%s is missing: build the repository with make", bin);
	snprintf(script, sizeof script, "%s/sdk/python/examples/order.py", top());
	py p = {0};
	tlog_file(p.log);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		FILE *f = freopen(p.log, "a", stderr);
		(void)f;
		dup2(2, 1);
		char *path = getenv("PATH"), *url = strdup(e.db);
		clearenv();
		setenv("PATH", path ? path : "/usr/bin:/bin", 1);
		setenv("DATABASE_URL", url, 1);
		execlp("python3", "python3", script, (char *)NULL);
		_exit(127);
	}
	tlive_add(pid);
	p.pid = pid;
	py_ready(&p);

	char *out, *err;
	int rc = tcli(e.db, &out, &err, "enqueue", "py.order", "--group", "python", "--input",
	              "{\"item\": \"book\", \"amount\": 12}", NULL);
	cr_assert_eq(rc, 0, "cairn enqueue: %s", err);
	int64_t id = strtoll(out, NULL, 10);
	free(out);
	free(err);
	void *arg[2] = {&e, &id};
	cr_assert(twait(run_waits_for_approval, arg, 30000),
	          "run %" PRId64 " never waited for approval", id);
	char ids[32];
	snprintf(ids, sizeof ids, "%" PRId64, id);
	rc =
	    tcli(e.db, &out, &err, "signal", ids, "approval", "--input", "{\"by\": \"ann\"}", NULL);
	cr_assert_eq(rc, 0, "cairn signal: %s", err);
	free(out);
	free(err);
	rc = tcli(e.db, &out, &err, "result", ids, "--wait", "--timeout", "30s", NULL);
	cr_assert_eq(rc, 0, "cairn result: %s %s", out, err);
	cJSON *o = cJSON_Parse(out);
	cr_assert(o, "%s", out);
	cr_assert_str_eq(jstr(o, "item"), "book", "%s", out);
	cr_assert(jstr(o, "charge_id") && strncmp(jstr(o, "charge_id"), "ch_", 3) == 0, "%s", out);
	cr_assert(jstr(o, "tracking") && strncmp(jstr(o, "tracking"), "TRK-", 4) == 0, "%s", out);
	cr_assert_str_eq(jstr(o, "approved_by"), "ann", "%s", out);
	cJSON_Delete(o);
	free(out);
	free(err);
	cairn_run *r = completed(&e, id, 1000);
	cr_assert_eq(step_named(r, "charge")->attempts, 1);
	cr_assert_str_eq(step_named(r, "sleep")->status, "completed");
	cairn_run_free(r);
	py_stop(&p);
	teardown(&e);
}

/* ------------------------------------------------------------- replay */

Test(sdk_python, a_journaled_step_never_runs_again_across_replays)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t ids[5];
	for (int i = 0; i < 5; i++)
		ids[i] = enqueue(&e, "t.replay", NULL);
	for (int i = 0; i < 5; i++) {
		cairn_run *r = completed(&e, ids[i], 30000);
		cJSON *o = output_of(r);
		char want[64];
		snprintf(want, sizeof want, "c-%" PRId64, ids[i]);
		cr_assert_str_eq(jstr(o, "c"), want, "%s", r->output);
		cJSON_Delete(o);
		/* Three executions (two durable sleeps end two), each step once. */
		for (const char *const *s = (const char *const[]){"a", "b", "c", NULL}; *s; s++) {
			cr_assert_eq(side_count(&e, ids[i], *s), 1,
			             "run %" PRId64 ": step %s ran %d times", ids[i], *s,
			             side_count(&e, ids[i], *s));
			cr_assert_eq(step_named(r, *s)->attempts, 1);
		}
		cairn_run_free(r);
	}
	py_stop(&p);
	teardown(&e);
}

static void write_variant(env *e, const char *v)
{
	FILE *f = fopen(e->variant, "w");
	cr_assert(f);
	fputs(v, f);
	fclose(f);
}

/*
 * t.nondet's first durable call is step "one" in the old code and "uno"
 * in the new. A run that journaled "one" and replays under the new code
 * fails with the engine's non-determinism error naming both; one whose new
 * code is behind ctx.patched keeps the old path, and a run started under
 * the new code takes the new one.
 */
Test(sdk_python, a_workflow_whose_durable_calls_changed_fails_with_the_nondeterminism_error)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t runs[2];
	runs[0] = enqueue(&e, "t.nondet", "{\"s\": 1.5}");
	runs[1] = enqueue(&e, "t.nondet", "{\"s\": 1.5, \"guard\": true}");
	wait_side(&e, runs, 2, "one");
	write_variant(&e, "new"); /* the deploy, while both sleep */
	int64_t fresh = enqueue(&e, "t.nondet", "{\"s\": 0, \"guard\": true}");

	cairn_run *r = finished(&e, runs[0], 30000);
	cr_assert_str_eq(r->status, "failed", "%s", r->status);
	cr_assert(strstr(r->error, "non-determinism at journal position 0: the journal has step "
	                           "\"one\" but the workflow now calls step \"uno\""),
	          "%s", r->error);
	cairn_run_free(r);
	r = completed(&e, runs[1], 30000);
	cr_assert_str_eq(r->output, "\"old path\"");
	cairn_run_free(r);
	r = completed(&e, fresh, 30000);
	cr_assert_str_eq(r->output, "\"new path\"");
	cairn_run_free(r);
	cr_assert_eq(side_count(&e, runs[0], "uno"), 0, "the changed step ran");
	py_stop(&p);
	teardown(&e);
}

/* ------------------------------------------------------------ crashes */

/* n runs of t.slow whose slow step (ms) is running in every one of them. */
static void slow_runs_mid_step(env *e, int64_t *ids, int n, const char *input)
{
	for (int i = 0; i < n; i++)
		ids[i] = enqueue(e, "t.slow", input);
	wait_side(e, ids, n, "slow");
}

/* Every run completes, and the steps journaled before the kill (before) or
 * after it (after) ran once; the cut-off one (slow) ran again. */
static void every_run_completes_once(env *e, const int64_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		cairn_run *r = completed(e, ids[i], 60000);
		cairn_run_free(r);
		cr_assert_eq(side_count(e, ids[i], "before"), 1,
		             "run %" PRId64 ": before ran %d times", ids[i],
		             side_count(e, ids[i], "before"));
		cr_assert_eq(side_count(e, ids[i], "after"), 1,
		             "run %" PRId64 ": after ran %d times", ids[i],
		             side_count(e, ids[i], "after"));
		cr_assert_geq(side_count(e, ids[i], "slow"), 2,
		              "run %" PRId64 ": the cut-off step did not run again", ids[i]);
	}
}

/* 1 once pid (not our child) has exited: no such process, or a zombie. */
static int gone_within(pid_t pid, int64_t ms)
{
	int64_t until = tnow_ms() + ms;
	while (tnow_ms() < until) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
		char *st = proc_read(path);
		const char *paren = strrchr(st, ')');
		int zombie = paren && paren[1] == ' ' && paren[2] == 'Z';
		free(st);
		if (kill(pid, 0) != 0 || zombie)
			return 1;
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return 0;
}

Test(sdk_python, kill_9_of_the_python_process_mid_step_loses_no_run_and_repeats_no_journaled_step)
{
	env e;
	setup(&e);
	py a = {0}, b = {0};
	py_start(&e, &a);
	pid_t engine = engine_of(a.pid);
	cr_assert(engine > 0, "no engine under python %d", (int)a.pid);
	int64_t ids[4];
	slow_runs_mid_step(&e, ids, 4, "{\"ms\": 1500}");
	py_kill(&a);
	/* The engine sees its control lane close and exits by itself. */
	cr_assert(gone_within(engine, 10000), "the engine outlived its Python process");
	py_start(&e, &b);
	every_run_completes_once(&e, ids, 4);
	unlink(a.log);
	py_stop(&b);
	teardown(&e);
}

Test(sdk_python, kill_9_of_the_engine_mid_step_loses_no_run_and_repeats_no_journaled_step)
{
	env e;
	setup(&e);
	py a = {0};
	py_start(&e, &a);
	pid_t engine = engine_of(a.pid);
	cr_assert(engine > 0, "no engine under python %d", (int)a.pid);
	int64_t ids[4];
	slow_runs_mid_step(&e, ids, 4, "{\"ms\": 1500}");
	cr_assert_eq(kill(engine, SIGKILL), 0);
	/* The same Python process starts a new engine, which takes the runs
	 * over once the dead one's lease has run out. */
	int64_t until = tnow_ms() + 20000;
	pid_t next = 0;
	while (tnow_ms() < until && ((next = engine_of(a.pid)) == 0 || next == engine)) {
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	cr_assert(next && next != engine, "no new engine was started");
	every_run_completes_once(&e, ids, 4);
	cr_assert(alive(a.pid), "the Python process died with its engine");
	char *log = tfile_read(a.log);
	cr_assert(strstr(log, "the engine exited with status 137"), "%s", log);
	free(log);
	py_stop(&a);
	teardown(&e);
}

/*
 * t.crash ends its Python process (os._exit in step "boom", after step
 * "before" was journaled) every time it runs. Started
 * again after each death, the fleet fails it as poison after the third
 * (CAIRN_POISON_AFTER), while the runs that were executing beside it
 * complete.
 */
Test(sdk_python, a_workflow_that_crashes_its_python_process_fails_as_poison_alone)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t inn[3];
	slow_runs_mid_step(&e, inn, 3, "{\"ms\": 2000}");
	int64_t bad = enqueue(&e, "t.crash", NULL);
	int crashes = 0;
	const char *failed_sql =
	    "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = 'failed'";
	while (num(&e, failed_sql, bad) == 0) {
		cr_assert_lt(crashes, 10, "the run kept crashing: it never failed as poison");
		int64_t until = tnow_ms() + 30000;
		while (alive(p.pid) && num(&e, failed_sql, bad) == 0 && tnow_ms() < until) {
			struct timespec ts = {0, 20 * 1000000L};
			nanosleep(&ts, NULL);
		}
		if (num(&e, failed_sql, bad) == 0) {
			cr_assert(!alive(p.pid),
			          "the Python process neither crashed nor failed the run");
			cr_assert_eq(tworker_stop(p.pid, 0, 5000), 7, "python did not exit 7");
			tlive_del(p.pid);
			crashes++;
			py_spawn(&e, &p, flows_py(), NULL);
		}
	}
	cairn_run *r = finished(&e, bad, 1000);
	cr_assert(strstr(r->error, "the worker stopped 3 times while running this run"), "%s",
	          r->error);
	cr_assert(strstr(r->error, "last durable step: before"), "%s", r->error);
	cairn_run_free(r);
	cr_assert_eq(crashes, 3, "%d crashes before the run failed (CAIRN_POISON_AFTER is 3)",
	             crashes);
	cr_assert_eq(side_count(&e, bad, "before"), 1, "its journaled step ran again");
	for (int i = 0; i < 3; i++) {
		r = completed(&e, inn[i], 60000);
		cairn_run_free(r);
		cr_assert_eq(side_count(&e, inn[i], "before"), 1);
		cr_assert_eq(side_count(&e, inn[i], "after"), 1);
	}
	py_ready(&p);
	py_stop(&p);
	teardown(&e);
}

/*
 * SIGTERM to the Python process while a step runs: the engine drains, the
 * step finishes and is journaled, the process exits 0; the next process
 * completes the run without running that step again.
 */
Test(sdk_python, sigterm_lets_a_running_step_finish_and_the_next_process_completes_the_run)
{
	env e;
	setup(&e);
	py a = {0}, b = {0};
	py_start(&e, &a);
	int64_t id;
	slow_runs_mid_step(&e, &id, 1, "{\"ms\": 1500}");
	py_stop(&a); /* exit 0 after the drain */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                 " AND name = 'slow' AND status = 'completed'",
	                 id),
	             1, "the drain did not journal the running step");
	py_start(&e, &b);
	cairn_run *r = completed(&e, id, 30000);
	cairn_run_free(r);
	for (const char *const *s = (const char *const[]){"before", "slow", "after", NULL}; *s; s++)
		cr_assert_eq(side_count(&e, id, *s), 1, "step %s ran %d times", *s,
		             side_count(&e, id, *s));
	py_stop(&b);
	teardown(&e);
}

/* The PIDs of the processes whose step bodies ran, from the side file:
 * how many distinct ones (at most 8). */
static int side_pids(env *e)
{
	char *text = tfile_read(e->side);
	long pids[8];
	int n = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		long pid = 0;
		if (sscanf(line, "%*s %*s %*s %ld", &pid) != 1)
			continue;
		int seen = 0;
		for (int i = 0; i < n; i++)
			seen |= pids[i] == pid;
		if (!seen && n < 8)
			pids[n++] = pid;
	}
	free(text);
	return n;
}

/* Two Python processes and a C worker on one database: the Python runs
 * spread over both Python processes, each step once, and a C run beside
 * them completes on the C worker. */
Test(sdk_python, two_python_processes_and_a_c_worker_share_one_database)
{
	env e;
	setup(&e);
	py a = {0}, b = {0};
	py_start(&e, &a);
	py_start(&e, &b);
	pid_t c = tworker_start(e.db, NULL, NULL, "CAIRN_HEARTBEAT_INTERVAL=200ms",
	                        "CAIRN_REBALANCE_INTERVAL=200ms", "CAIRN_RUNNER_TTL=2s", NULL);
	tlive_add(c);
	/* Both own shards of group python before the runs come. */
	cr_assert(
	    wait_num(&e, 2, 30000,
	             "SELECT count(DISTINCT owner) FROM cairn.shard_leases WHERE shard_group = "
	             "'python' AND owner IS NOT NULL"),
	    "the two Python processes never shared the shards");
	int64_t ids[16];
	for (int i = 0; i < 16; i++)
		ids[i] = enqueue(&e, "t.replay", NULL);
	cairn_enqueue_opts o = {.input = "{\"c\": 1}"};
	cairn_enqueued cr;
	cr_assert_eq(cairn_enqueue(e.cl, "noop", &o, &cr), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	for (int i = 0; i < 16; i++) {
		cairn_run *r = completed(&e, ids[i], 30000);
		cairn_run_free(r);
		cr_assert_eq(side_count(&e, ids[i], "a") + side_count(&e, ids[i], "c"), 2);
	}
	cairn_run *r = completed(&e, cr.id, 30000);
	cr_assert_str_eq(r->output, "{\"c\": 1}");
	cairn_run_free(r);
	cr_assert_eq(side_pids(&e), 2, "the runs did not spread over both Python processes");
	cr_assert_eq(tworker_stop(c, SIGTERM, 20000), 0);
	tlive_del(c);
	py_stop(&a);
	py_stop(&b);
	teardown(&e);
}

/* ------------------------------------------------------- cancellation */

Test(sdk_python, cancel_ends_a_run_waiting_for_a_signal_and_a_step_polling_should_stop)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t waiting = enqueue(&e, "t.wait", NULL), polling = enqueue(&e, "t.poll", NULL);
	cr_assert(wait_num(&e, 1, 30000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND name = 'go' AND status = 'waiting'",
	                   waiting),
	          "the run never waited for its signal");
	wait_side(&e, &polling, 1, "poll");
	cr_assert_eq(cairn_cancel(e.cl, waiting), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_cancel(e.cl, polling), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cairn_run *r = finished(&e, waiting, 20000);
	cr_assert_str_eq(r->status, "cancelled");
	cairn_run_free(r);
	r = finished(&e, polling, 20000);
	cr_assert_str_eq(r->status, "cancelled", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	cr_assert_eq(side_count(&e, polling, "gave-up"), 1, "the step never saw should_stop");
	py_stop(&p);
	teardown(&e);
}

/* ------------------------------------------------------------- timers */

Test(sdk_python, a_durable_sleep_survives_a_restart_of_every_process)
{
	env e;
	setup(&e);
	py a = {0}, b = {0};
	py_start(&e, &a);
	int64_t id = enqueue(&e, "t.nap", "{\"s\": 3}");
	cr_assert(wait_num(&e, 1, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                   " AND status = 'sleeping'",
	                   id),
	          "the run never slept");
	pid_t engine = engine_of(a.pid);
	py_kill(&a);
	cr_assert(gone_within(engine, 10000), "the engine outlived its Python process");
	/* Nothing of the first pair is left; the sleep is still due. */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                 " AND status = 'sleeping'",
	                 id),
	             1, "the run was no longer sleeping when its processes died");
	py_start(&e, &b);
	cairn_run *r = completed(&e, id, 30000);
	cairn_run_free(r);
	int64_t took = num(&e,
	                   "SELECT (extract(epoch FROM finished_at - started_at) * 1000)::bigint "
	                   "FROM cairn.runs WHERE id = %" PRId64,
	                   id);
	cr_assert_geq(took, 3000, "the run finished %" PRId64 " ms after it started", took);
	cr_assert_eq(side_count(&e, id, "a"), 1);
	cr_assert_eq(side_count(&e, id, "b"), 1);
	unlink(a.log);
	py_stop(&b);
	teardown(&e);
}

/* ------------------------------------------------------------ signals */

Test(sdk_python, a_signal_sent_before_the_wait_is_returned_and_an_unsent_one_times_out)
{
	env e;
	setup(&e);
	/* Enqueued and signalled before any worker runs it: the signal is
	 * buffered, and the wait (after a step and a sleep) takes it. */
	int64_t id = enqueue(&e, "t.late", NULL);
	cr_assert_eq(cairn_signal(e.cl, id, "go", "{\"n\": 7}"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	int64_t lonely = enqueue(&e, "t.wait", "{\"timeout\": 0.3}");
	py p = {0};
	py_start(&e, &p);
	cairn_run *r = completed(&e, id, 30000);
	cr_assert_str_eq(r->output, "{\"n\": 7}");
	cr_assert_eq(step_named(r, "a")->attempts, 1);
	cairn_run_free(r);
	r = completed(&e, lonely, 30000);
	cr_assert_str_eq(r->output, "{\"timed_out\": true}");
	cairn_run_free(r);
	py_stop(&p);
	teardown(&e);
}

/* ------------------------------------------------------------ retries */

Test(sdk_python, a_step_that_fails_twice_is_retried_with_backoff_and_fail_is_not_retried)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t id = enqueue(&e, "t.flaky", NULL), again = enqueue(&e, "t.retry_run", NULL);
	cairn_run *r = completed(&e, id, 30000);
	cJSON *o = output_of(r);
	cr_assert_str_eq(jstr(o, "flaky"), "ok on attempt 3", "%s", r->output);
	cr_assert(jstr(o, "declined") && strstr(jstr(o, "declined"), "card declined"), "%s",
	          r->output);
	cJSON_Delete(o);
	cr_assert_eq(step_named(r, "flaky")->attempts, 3);
	cairn_run_free(r);
	/* The waits: 0.3 s, then 0.6 s, each within 10 % jitter. */
	double t[3];
	cr_assert_eq(side_times(&e, id, "flaky", t, 3), 3);
	cr_assert_geq(t[1] - t[0], 0.27, "first backoff %.3f s", t[1] - t[0]);
	cr_assert_geq(t[2] - t[1], 0.54, "second backoff %.3f s", t[2] - t[1]);
	cr_assert_eq(side_count(&e, id, "declined"), 1, "cairn.Fail was retried");
	/* cairn.Retry from the workflow: the run's second attempt completes it,
	 * replaying the step its first attempt journaled. */
	r = completed(&e, again, 30000);
	cr_assert_str_eq(r->output, "{\"attempt\": 2}");
	cr_assert_eq(r->attempt, 2);
	cairn_run_free(r);
	cr_assert_eq(side_count(&e, again, "a"), 1);
	py_stop(&p);
	teardown(&e);
}

Test(sdk_python, a_step_past_its_timeout_sees_should_stop_and_its_late_result_is_discarded)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t id = enqueue(&e, "t.timeout", NULL);
	cairn_run *r = completed(&e, id, 30000);
	cr_assert_str_eq(r->output, "{\"result\": \"on time\"}");
	cr_assert_eq(step_named(r, "slow")->attempts, 2);
	cairn_run_free(r);
	cr_assert_eq(side_count(&e, id, "saw-stop"), 1, "should_stop never turned true");
	py_stop(&p);
	teardown(&e);
}

/* ---------------------------------------------------------- composing */

Test(sdk_python, a_child_run_its_result_and_the_other_composing_calls)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t before = (int64_t)time(NULL) * 1000;
	int64_t id = enqueue(&e, "t.parent", NULL);
	cairn_run *r = completed(&e, id, 30000);
	int64_t after = (int64_t)time(NULL) * 1000 + 1000;
	cJSON *o = output_of(r);
	cr_assert_eq(cJSON_GetObjectItem(o, "y")->valuedouble, 49, "%s", r->output);
	const cJSON *got = cJSON_GetObjectItem(o, "got");
	cr_assert(got && cJSON_GetObjectItem(got, "from") &&
	              (int64_t)cJSON_GetObjectItem(got, "from")->valuedouble == id,
	          "%s", r->output);
	cr_assert(jstr(o, "failed") && strstr(jstr(o, "failed"), "ValueError: boom"), "%s",
	          r->output);
	int64_t now = (int64_t)cJSON_GetObjectItem(o, "now_ms")->valuedouble;
	cr_assert(now >= before && now <= after,
	          "now %" PRId64 " not in [%" PRId64 ", %" PRId64 "]", now, before, after);
	cr_assert(jstr(o, "random") && strlen(jstr(o, "random")) > 0, "%s", r->output);
	int64_t other = (int64_t)cJSON_GetObjectItem(o, "other")->valuedouble;
	cJSON_Delete(o);
	cairn_run_free(r);
	r = completed(&e, other, 30000);
	cr_assert_str_eq(r->output, "{\"y\": 9}");
	cairn_run_free(r);
	char *out, *err, ids[32];
	snprintf(ids, sizeof ids, "%" PRId64, id);
	int rc = tcli(e.db, &out, &err, "event", ids, "stage", NULL);
	cr_assert_eq(rc, 0, "cairn event: %s", err);
	cr_assert(strstr(out, "\"done\""), "%s", out);
	free(out);
	free(err);
	/* Children ran in the parent's group, as runs of their own. */
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64, id), 3);
	py_stop(&p);
	teardown(&e);
}

/* ctx.traceparent (protocol version 3): the run's trace context outside a
 * step, the step attempt's inside, both in the trace the client's
 * traceparent named. */
Test(sdk_python, ctx_traceparent_is_the_runs_and_in_a_step_the_attempts_in_the_callers_trace)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	cairn_enqueue_opts o = {.group = "python",
	                        .traceparent =
	                            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"};
	cairn_enqueued en;
	cr_assert_eq(cairn_enqueue(e.cl, "t.trace", &o, &en), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cairn_enqueued_clear(&en);
	cairn_run *r = completed(&e, en.id, 30000);
	cJSON *out = output_of(r);
	const char *run = jstr(out, "run"), *step = jstr(out, "step");
	cr_assert(run && step, "%s", r->output);
	cr_assert_eq(strlen(run), 55, "%s", run);
	cr_assert(strncmp(run, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36) == 0, "%s", run);
	cr_assert(strncmp(step, run, 36) == 0, "one trace: %s, %s", run, step);
	cr_assert(strcmp(run + 36, "00f067aa0ba902b7-01") != 0 && strcmp(step + 36, run + 36) != 0,
	          "the run's span, then the step's: %s, %s", run, step);
	cJSON_Delete(out);
	cairn_run_free(r);
	py_stop(&p);
	teardown(&e);
}

/* A workflow that returns ctx.continue_as_new(input) ends, completed, and
 * its successor runs with that input (protocol version 2): the chain goes
 * on to its end, and `cairn result` of its first run prints the last's. */
Test(sdk_python, a_workflow_that_continues_as_new_hands_on_and_cairn_result_follows_the_chain)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t id = enqueue(&e, "t.chain", "{\"n\": 0, \"until\": 3}");
	cairn_run *r = completed(&e, id, 30000);
	cr_assert_null(r->output, "the first run continued: it has no output of its own");
	cr_assert_gt(r->continued_to, 0);
	cairn_run_free(r);
	char ids[32], *out = NULL, *err = NULL;
	snprintf(ids, sizeof ids, "%" PRId64, id);
	cr_assert_eq(tcli(e.db, &out, &err, "result", ids, NULL), 0, "%s", err);
	cr_assert_str_eq(out, "{\"n\": 3}\n");
	free(out);
	free(err);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE chain_id = %" PRId64, id), 3);
	py_stop(&p);
	teardown(&e);
}

Test(sdk_python, a_wait_for_many_children_is_one_durable_call_with_results_in_order)
{
	env e;
	setup(&e);
	py p = {0};
	py_start(&e, &p);
	int64_t id = enqueue(&e, "t.fanout", "{\"n\": 40, \"bad\": 1}");
	cairn_run *r = completed(&e, id, 60000);
	cJSON *o = output_of(r);
	cr_assert_eq(cJSON_GetObjectItem(o, "sum")->valuedouble, 20540, "%s", r->output);
	cr_assert_geq(cJSON_GetObjectItem(o, "first")->valuedouble, 1, "%s", r->output);
	cr_assert(jstr(o, "failed") && strstr(jstr(o, "failed"), "ValueError: boom"), "%s",
	          r->output);
	cJSON_Delete(o);
	cairn_run_free(r);
	/* Its waits are journaled as such, one entry each. */
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                 " AND kind = 'children'",
	                 id),
	             3);
	py_stop(&p);
	teardown(&e);
}

/* ----------------------------------------------------------- clients */

Test(sdk_python, the_client_calls_enqueue_signal_cancel_and_read_runs_over_http)
{
	env e;
	setup(&e);
	py p = {0};
	const char *token = "CAIRN_HTTP_TOKEN=py-sdk-test-token-0123456789";
	py_spawn(&e, &p, flows_py(), token, NULL);
	py_ready(&p);
	char url[64];
	snprintf(url, sizeof url, "CAIRN_URL=http://127.0.0.1:%d", p.port);
	const char *argv[] = {"python3", flows_py(), "client", NULL};
	const char *envs[] = {url, token, NULL};
	char *out;
	int rc = run_env(argv, envs, &out);
	cr_assert_eq(rc, 0, "the client script exited %d:\n%s", rc, out);
	cr_assert(strstr(out, "client ok"), "%s", out);
	free(out);
	py_stop(&p);
	teardown(&e);
}

/* --------------------------------------------------------- packaging */

Test(sdk_python, pip_installs_the_package_offline_into_a_fresh_venv_that_serves_a_workflow)
{
	env e;
	setup(&e);
	char dir[] = "/tmp/cairn-venv.XXXXXX", sdk[1100], cmd[4096];
	cr_assert(mkdtemp(dir));
	snprintf(sdk, sizeof sdk, "%s/sdk/python", top());
	/* --no-index: nothing may come from the network; the build backend is
	 * in the package, and requires nothing. */
	snprintf(
	    cmd, sizeof cmd,
	    "set -e; python3 -m venv '%s/v'; '%s/v/bin/pip' install --no-index --no-cache-dir "
	    "--disable-pip-version-check --quiet '%s'; "
	    "'%s/v/bin/python' -c 'import cairn, sys; print(cairn.__file__, cairn.__version__)'",
	    dir, dir, sdk, dir);
	const char *sh[] = {"sh", "-c", cmd, NULL};
	char *out;
	int rc = run_env(sh, NULL, &out);
	cr_assert_eq(rc, 0, "venv and pip install failed:\n%s", out);
	char where[1200];
	snprintf(where, sizeof where, "%s/v/lib/", dir);
	cr_assert(strstr(out, where) && strstr(out, "site-packages/cairn/__init__.py"),
	          "cairn is not imported from the venv:\n%s", out);
	free(out);

	/* The installed package serves flows.py (told not to use the tree). */
	char python[1200];
	snprintf(python, sizeof python, "%s/v/bin/python", dir);
	py p = {0};
	tlog_file(p.log);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		FILE *f = freopen(p.log, "a", stderr);
		(void)f;
		dup2(2, 1);
		setenv("DATABASE_URL", e.db, 1);
		setenv("CAIRN_WORKER_BIN", tbin("cairn-worker"), 1);
		setenv("CAIRN_TEST_INSTALLED", "1", 1);
		setenv("CAIRN_TEST_SIDE", e.side, 1);
		setenv("CAIRN_TEST_VARIANT", e.variant, 1);
		setenv("CAIRN_CONCURRENCY", "2", 1);
		unsetenv("CAIRN_HTTP_ADDR");
		unsetenv("CAIRN_SHARD_GROUPS");
		execl(python, python, flows_py(), (char *)NULL);
		_exit(127);
	}
	tlive_add(pid);
	p.pid = pid;
	py_ready(&p);
	char *log = tfile_read(p.log);
	cr_assert(strstr(log, "flows: serving with the SDK in /tmp/cairn-venv."), "%s", log);
	free(log);
	int64_t id = enqueue(&e, "t.square", "{\"x\": 12}");
	cairn_run *r = completed(&e, id, 30000);
	cr_assert_str_eq(r->output, "{\"y\": 144}");
	cairn_run_free(r);
	py_stop(&p);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	const char *rm[] = {"sh", "-c", cmd, NULL};
	run_env(rm, NULL, &out);
	free(out);
	teardown(&e);
}

Test(sdk_python, the_sdks_unittest_suite_passes)
{
	char tests[1100];
	snprintf(tests, sizeof tests, "%s/sdk/python/tests", top());
	const char *argv[] = {"python3", "-B", "-m", "unittest", "discover", "-s", tests, NULL};
	char *out;
	int rc = run_env(argv, NULL, &out);
	cr_assert_eq(rc, 0, "python3 -m unittest exited %d:\n%s", rc, out);
	cr_assert(strstr(out, "\nOK"), "%s", out);
	free(out);
}

/* An engine that exits before it is ready (a bad setting) ends the Python
 * process with its status, its message on standard error. */
Test(sdk_python, a_bad_setting_ends_the_python_process_with_the_engines_status)
{
	env e;
	setup(&e);
	py p = {0};
	py_spawn(&e, &p, flows_py(), "CAIRN_POLL_INTERVAL=soon", NULL);
	int rc = tworker_stop(p.pid, 0, 30000);
	tlive_del(p.pid);
	char *log = tfile_take(p.log);
	cr_assert_eq(rc, 2, "python exited %d:\n%s", rc, log);
	cr_assert(strstr(log, "CAIRN_POLL_INTERVAL"), "%s", log);
	free(log);
	teardown(&e);
}
