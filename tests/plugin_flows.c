/*
 * plugin_flows.c - the workflows of the execution tests (test_exec.c), loaded
 * into a real cairn-worker with `--plugin plugin_flows.so` (CAIRN_PLUGINS).
 * Each one exists to make one engine promise observable from outside:
 *
 *   t.replay   {"mode": "split"}: step "count" bumps t_counter, then step
 *              "block" waits for a row in t_flags; {"mode": "same"}: one step
 *              "count_block" bumps and then waits (with {"deaf": true} deaf
 *              to cairn_should_stop). Shows which steps re-run after a crash
 *              (t_counter counts executions of the bump).
 *   t.await    with {"gate": true} first step "gate", which bumps t_counter
 *              (the run is now before its await) and waits for a row in
 *              t_flags; then awaits signal name with timeout_ms;
 *              {"timed_out": bool, "payload": ...}.
 *   t.flaky    step "flaky" with the policy {attempts, initial_ms}, no jitter;
 *              every execution writes a row to t_attempts, and it is retryable
 *              until t_flags has a row for the run.
 *   t.nondet   reads t_flags inside the workflow function (deliberately not
 *              durable) to name its first step "alpha" or "beta", then awaits
 *              "go".
 *   t.signals  awaits signal "s" n times and returns the payloads in order;
 *              every execution of the function writes its [enter, exit)
 *              interval to t_exec, so overlapping executions are visible.
 *   t.spread   step "first", durable sleep "nap" (50 ms), step "second"; both
 *              steps write (run, step) to t_hits, which has no unique
 *              constraint, so re-executions show up as extra rows.
 *   t.badutf8  step "bad" bumps t_counter and returns a string that is not
 *              UTF-8, which PostgreSQL refuses to store; with {"output": 1}
 *              the step returns "fine" and the run's output is such a string.
 *   t.crash    step "before", then step "boom", which aborts the worker
 *              process unless t_flags has a row for the run: a poison run.
 *   t.polite   step "work" (max_attempts 1) writes t_attempts, then waits for
 *              a t_flags row and gives up (retryable) when cairn_should_stop
 *              says the worker is stopping: a step a deploy interrupts.
 *   t.big      step "big" returns a string of {"bytes": N} bytes (letters
 *              that do not compress), then a durable sleep "nap" (50 ms).
 *   t.parent   child_start "kid" ({"child": workflow, "input": ...}), await
 *              "go", wait for the child: {"child": id, "output"} or, for a
 *              failed child, {"child": id, "failed": ...}.
 *   t.many     starts a child per element of {"children": [{"workflow", "input"}]}
 *              (named "kid"), then waits for them as {"mode"} says: "all",
 *              "any", "first" ({"k"}), "any_all" (any, then all), "each"
 *              (cairn_child_wait of each in order), with {"timeout_ms"};
 *              {"extra": ID} adds a run it did not start to the wait. Every
 *              execution bumps t_counter (not durably: it counts how often
 *              the parent was woken). Returns {"ids", "rc", "error",
 *              "results": [{"done", "status", "output", "error"}]} and, for
 *              "any_all", "first_results" of the first wait.
 *   t.send     cairn_send "tell" ({"to", "signal", "payload"}), then
 *              cairn_enqueue_from "spawn" (noop): {"spawned": id}.
 *   t.progress events "progress" {"pct": 50}, await "go", {"pct": 100}.
 *   t.versioned step "a" on a worker without T_PATCHED, else (behind
 *              cairn_patched "split-a" unless {"unguarded": true}) steps "a1"
 *              and "a2"; then awaits "go": {"path": "old" | "new"}.
 *   t.tx       transactional step "tx" inserts (run, "tx") into t_hits and
 *              holds its transaction {"ms"}, then a durable sleep "nap".
 *   t.slow     step "slow" bumps t_counter and takes {"ms"} (with {"polite":
 *              true} it stops when cairn_should_stop says so), its policy
 *              {"timeout"} ms and {"attempts"}.
 *   t.long     {"steps": N, "every": K, "sleep_ms": S}: steps s0 .. s(N-1),
 *              each returning {"i": i}, a durable sleep of S ms after every
 *              K-th; fails if a replay hands back another value than the
 *              step journaled; {"steps": N, "sum": 0 + 1 + ... + N-1}.
 *   t.cut      80 steps, each returning the run attempt it ran in; in
 *              attempt 1, once t_flags has a row for the run, the workflow
 *              asks for a run retry at step 10 (which cuts the journal
 *              there); then a durable sleep "nap" (50 ms) and awaits "go"
 *              and "again": the attempts the 80 steps ran in.
 *   t.loop     {"n", "until", "sleep_ms"}: step "work", with {"gate": true}
 *              step "gate" (waits for a t_flags row; not in the successors),
 *              a durable sleep of sleep_ms (none at 0), then continues as new
 *              with n + 1 until n reaches until: {"n": until}.
 *   t.inbox    {"got": [...], "want": W}: awaits "msg", then continues as
 *              new with the payload added to got until it holds W: got.
 *   t.traced   tracing (test_tracing.c): step "first" returns {"tp": its
 *              cairn_ctx_traceparent}, child "kid" of t.traced_kid, step
 *              "gate" waits for a t_flags row (as t.await's), then waits for
 *              the child, sleeps "nap" 10 ms, and with {"fail": true} runs
 *              step "boom", which fails for good ("card declined"):
 *              {"tp": first's, "kid": its id, "kid_tp": the child's}.
 *   t.traced_kid  step "kidstep" returns its traceparent: {"tp": ...}.
 *   t.stubborn step "work" writes a row to t_attempts as it starts, takes
 *              {"ms": N}, or with {"until_flag": true} runs until t_flags has a
 *              row for the run, and does not check cairn_should_stop; then
 *              step "count" bumps t_counter: a step a drain must wait for (or
 *              cut off).
 *
 * Routing tests (test_routing.c) give workers different workflows and
 * runtimes: T_FLOWS="t.parent,t.spread" registers only the workflows it
 * names, and T_RUNTIME sets their runtime label (cairn_workflow_opts).
 *
 * The tables are created by the tests. Database access uses one libpq
 * connection per executor thread (DATABASE_URL of the worker process), opened
 * on first use and closed by a thread-specific-data destructor when the
 * thread ends. Built without libcairn: cairn_* resolve against the worker.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "plugin_conn.h"

#define BLOCK_POLL_MS 20
#define SPREAD_NAP_MS 50
#define SIGNALS_MAX   1000

/* ------------------------------------------------------------ database */

/* This thread's connection; NULL if the database is unreachable. */
static PGconn *conn(void)
{
	return conn_named("cairn-test-flows");
}

/*
 * Runs sql with the run id as $1 and an optional text $2; the first column
 * of the first row, if any, goes to out. 0 on success, -1 on any failure.
 */
static int q(int64_t run, const char *sql, const char *p2, char *out, size_t n)
{
	PGconn *c = conn();
	if (!c)
		return -1;
	char id[24];
	snprintf(id, sizeof id, "%" PRId64, run);
	const char *p[] = {id, p2};
	PGresult *r = PQexecParams(c, sql, p2 ? 2 : 1, NULL, p, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);
	int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
	if (ok && out && n) {
		out[0] = '\0';
		if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
			snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
	}
	PQclear(r);
	return ok ? 0 : -1;
}

/* 1 if t_flags has a row for the run, 0 if not, -1 on a database error. */
static int flag_set(int64_t run)
{
	char v[32];
	if (q(run, "SELECT count(*) FROM t_flags WHERE run_id = $1", NULL, v, sizeof v) < 0)
		return -1;
	return atoi(v) > 0;
}

static const cJSON *field(const cJSON *in, const char *name)
{
	return cJSON_IsObject(in) ? cJSON_GetObjectItemCaseSensitive(in, name) : NULL;
}

static int64_t int_field(const cJSON *in, const char *name, int64_t dflt)
{
	const cJSON *v = field(in, name);
	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* ------------------------------------------------------------ t.replay */

static int bump(cairn_ctx *ctx, int64_t *n)
{
	char v[32];
	if (q(cairn_ctx_run_id(ctx),
	      "INSERT INTO t_counter (run_id, n) VALUES ($1, 1) ON CONFLICT (run_id) "
	      "DO UPDATE SET n = t_counter.n + 1 RETURNING n",
	      NULL, v, sizeof v) < 0)
		return cairn_retryable(ctx, "count: cannot update t_counter");
	*n = strtoll(v, NULL, 10);
	return CAIRN_OK;
}

/* Waits for a row in t_flags; a stop interrupts it unless it is deaf. */
static int wait_flag(cairn_ctx *ctx, int deaf)
{
	for (;;) {
		int f = flag_set(cairn_ctx_run_id(ctx));
		if (f > 0)
			return CAIRN_OK;
		if (!deaf && cairn_should_stop(ctx))
			return cairn_retryable(ctx, "block: the run is stopping");
		nap_ms(BLOCK_POLL_MS);
	}
}

static int step_count(cairn_ctx *ctx, void *arg, cJSON **result)
{
	int64_t n;
	CAIRN_TRY(bump(ctx, &n));
	*result = cJSON_CreateNumber((double)n);
	return CAIRN_OK;
}

static int step_block(cairn_ctx *ctx, void *arg, cJSON **result)
{
	CAIRN_TRY(wait_flag(ctx, 0));
	*result = cJSON_CreateTrue();
	return CAIRN_OK;
}

static int step_count_block(cairn_ctx *ctx, void *arg, cJSON **result)
{
	int64_t n;
	CAIRN_TRY(bump(ctx, &n));
	CAIRN_TRY(wait_flag(ctx, arg != NULL));
	*result = cJSON_CreateNumber((double)n);
	return CAIRN_OK;
}

static int wf_replay(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *mode = field(input, "mode");
	int same = cJSON_IsString(mode) && strcmp(mode->valuestring, "same") == 0;
	void *deaf = cJSON_IsTrue(field(input, "deaf")) ? (void *)input : NULL;
	cJSON *count, *ok;
	if (same) {
		CAIRN_TRY(cairn_step(ctx, "count_block", step_count_block, deaf, &count));
	} else {
		CAIRN_TRY(cairn_step(ctx, "count", step_count, NULL, &count));
		CAIRN_TRY(cairn_step(ctx, "block", step_block, NULL, &ok));
	}
	*output = cJSON_CreateObject();
	cJSON_AddItemToObject(*output, "count", cJSON_Duplicate(count, 1));
	return CAIRN_OK;
}

/* ------------------------------------------------------------- t.await */

static int wf_await(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *gate = field(input, "gate");
	int64_t timeout_ms = int_field(input, "timeout_ms", -1);
	const cJSON *name = field(input, "name");
	if (!cJSON_IsString(name))
		return cairn_fail(ctx, "t.await: \"name\" must be a string");
	if (cJSON_IsTrue(gate))
		CAIRN_TRY(cairn_step(ctx, "gate", step_count_block, NULL, NULL));
	cJSON *payload = NULL;
	int rc = cairn_await_signal(ctx, name->valuestring, timeout_ms, &payload);
	if (rc != CAIRN_OK && rc != CAIRN_ETIMEOUT)
		return rc;
	*output = cJSON_CreateObject();
	cJSON_AddBoolToObject(*output, "timed_out", rc == CAIRN_ETIMEOUT);
	cJSON_AddItemToObject(*output, "payload",
	                      payload ? cJSON_Duplicate(payload, 1) : cJSON_CreateNull());
	return CAIRN_OK;
}

/* ------------------------------------------------------------- t.flaky */

static int step_flaky(cairn_ctx *ctx, void *arg, cJSON **result)
{
	int64_t run = cairn_ctx_run_id(ctx);
	char n[32];
	if (q(run, "INSERT INTO t_attempts (run_id, at) VALUES ($1, clock_timestamp())", NULL, NULL,
	      0) < 0 ||
	    q(run, "SELECT count(*) FROM t_attempts WHERE run_id = $1", NULL, n, sizeof n) < 0)
		return cairn_retryable(ctx, "flaky: cannot write t_attempts");
	int f = flag_set(run);
	if (f <= 0)
		return cairn_retryable(ctx, "flaky: not yet (execution %s)", n);
	*result = cJSON_CreateNumber((double)strtoll(n, NULL, 10));
	return CAIRN_OK;
}

static int wf_flaky(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cairn_retry_policy p = {.max_attempts = (int)int_field(input, "attempts", 3),
	                        .initial_ms = int_field(input, "initial_ms", 100),
	                        .multiplier = 2.0,
	                        .jitter = -1};
	cJSON *n;
	CAIRN_TRY(cairn_step_retry(ctx, "flaky", &p, step_flaky, NULL, &n));
	*output = cJSON_CreateObject();
	cJSON_AddItemToObject(*output, "executions", cJSON_Duplicate(n, 1));
	return CAIRN_OK;
}

/* ------------------------------------------------------------ t.nondet */

static int step_trivial(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateString(arg);
	return CAIRN_OK;
}

static int wf_nondet(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	/* Wrong on purpose: a workflow must not branch on anything that is not
	 * journaled. This is what the non-determinism check is for. */
	int f = flag_set(cairn_ctx_run_id(ctx));
	if (f < 0)
		return cairn_retryable(ctx, "t.nondet: cannot read t_flags");
	const char *name = f ? "beta" : "alpha";
	cJSON *r, *go;
	CAIRN_TRY(cairn_step(ctx, name, step_trivial, (void *)name, &r));
	CAIRN_TRY(cairn_await_signal(ctx, "go", -1, &go));
	*output = cJSON_Duplicate(r, 1);
	return CAIRN_OK;
}

/* ----------------------------------------------------------- t.signals */

static int signals_body(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t n = int_field(input, "n", 1);
	if (n < 1 || n > SIGNALS_MAX)
		return cairn_fail(ctx, "t.signals: \"n\" must be from 1 to %d", SIGNALS_MAX);
	cJSON *all = cJSON_CreateArray();
	for (int64_t i = 0; i < n; i++) {
		cJSON *p;
		int rc = cairn_await_signal(ctx, "s", -1, &p);
		if (rc != CAIRN_OK) {
			cJSON_Delete(all);
			return rc;
		}
		cJSON_AddItemToArray(all, cJSON_Duplicate(p, 1));
	}
	*output = all;
	return CAIRN_OK;
}

static int wf_signals(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char enter[64] = "";
	int64_t run = cairn_ctx_run_id(ctx);
	q(run, "SELECT clock_timestamp()::text, $1::bigint", NULL, enter, sizeof enter);
	int rc = signals_body(ctx, input, output);
	if (enter[0])
		q(run,
		  "INSERT INTO t_exec (run_id, t_enter, t_exit) "
		  "VALUES ($1, $2::timestamptz, clock_timestamp())",
		  enter, NULL, 0);
	return rc;
}

/* ------------------------------------------------------------ t.spread */

static int step_hit(cairn_ctx *ctx, void *arg, cJSON **result)
{
	if (q(cairn_ctx_run_id(ctx), "INSERT INTO t_hits (run_id, step) VALUES ($1, $2)", arg, NULL,
	      0) < 0)
		return cairn_retryable(ctx, "%s: cannot write t_hits", (const char *)arg);
	return CAIRN_OK;
}

static int wf_spread(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	CAIRN_TRY(cairn_step(ctx, "first", step_hit, "first", NULL));
	CAIRN_TRY(cairn_sleep(ctx, "nap", SPREAD_NAP_MS));
	CAIRN_TRY(cairn_step(ctx, "second", step_hit, "second", NULL));
	return CAIRN_OK;
}

/* ---------------------------------------------------------- t.stubborn */

static int step_work(cairn_ctx *ctx, void *arg, cJSON **result)
{
	/* Tell the test the step is running, then take the time. */
	int64_t run = cairn_ctx_run_id(ctx);
	if (q(run, "INSERT INTO t_attempts (run_id, at) VALUES ($1, clock_timestamp())", NULL, NULL,
	      0) < 0)
		return cairn_retryable(ctx, "work: cannot write t_attempts");
	int64_t ms = *(const int64_t *)arg;
	if (ms >= 0)
		nap_ms((long)ms);
	else /* until the flag, deaf to cairn_should_stop */
		while (flag_set(run) <= 0)
			nap_ms(BLOCK_POLL_MS);
	*result = cJSON_CreateTrue();
	return CAIRN_OK;
}

static int wf_stubborn(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t ms = cJSON_IsTrue(field(input, "until_flag")) ? -1 : int_field(input, "ms", 1000);
	CAIRN_TRY(cairn_step(ctx, "work", step_work, &ms, NULL));
	CAIRN_TRY(cairn_step(ctx, "count", step_count, NULL, NULL));
	return CAIRN_OK;
}

/* ----------------------------------------------------------- t.badutf8 */

static int step_bad(cairn_ctx *ctx, void *arg, cJSON **result)
{
	int64_t n;
	CAIRN_TRY(bump(ctx, &n));
	*result = cJSON_CreateString("\xff\xfe not UTF-8");
	return CAIRN_OK;
}

static int step_fine(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateString("fine");
	return CAIRN_OK;
}

static int wf_badutf8(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int in_output = int_field(input, "output", 0) != 0;
	CAIRN_TRY(cairn_step(ctx, "bad", in_output ? step_fine : step_bad, NULL, NULL));
	if (in_output) {
		*output = cJSON_CreateObject();
		cJSON_AddStringToObject(*output, "name", "caf\xc3");
	}
	return CAIRN_OK;
}

/* ------------------------------------------------- t.crash, t.polite, t.big */

static int step_boom(cairn_ctx *ctx, void *arg, cJSON **result)
{
	if (flag_set(cairn_ctx_run_id(ctx)) <= 0)
		abort();
	*result = cJSON_CreateTrue();
	return CAIRN_OK;
}

static int wf_crash(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	CAIRN_TRY(cairn_step(ctx, "before", step_trivial, "before", NULL));
	CAIRN_TRY(cairn_step(ctx, "boom", step_boom, NULL, NULL));
	return CAIRN_OK;
}

static int step_polite(cairn_ctx *ctx, void *arg, cJSON **result)
{
	int64_t run = cairn_ctx_run_id(ctx);
	if (q(run, "INSERT INTO t_attempts (run_id, at) VALUES ($1, clock_timestamp())", NULL, NULL,
	      0) < 0)
		return cairn_retryable(ctx, "work: cannot write t_attempts");
	while (flag_set(run) <= 0) {
		if (cairn_should_stop(ctx))
			return cairn_retryable(ctx, "work: interrupted, the worker is stopping");
		nap_ms(BLOCK_POLL_MS);
	}
	*result = cJSON_CreateTrue();
	return CAIRN_OK;
}

static int wf_polite(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cairn_retry_policy once = {.max_attempts = 1};
	CAIRN_TRY(cairn_step_retry(ctx, "work", &once, step_polite, NULL, NULL));
	return CAIRN_OK;
}

static int step_big(cairn_ctx *ctx, void *arg, cJSON **result)
{
	int64_t n = *(const int64_t *)arg;
	char *s = malloc((size_t)n + 1);
	if (!s)
		return cairn_fail(ctx, "big: out of memory");
	/* Letters that do not compress, so the stored size is the size. */
	uint32_t x = 2463534242u;
	for (int64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		s[i] = (char)('a' + x % 26);
	}
	s[n] = '\0';
	*result = cJSON_CreateString(s);
	free(s);
	return CAIRN_OK;
}

static int wf_big(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t n = int_field(input, "bytes", 10);
	CAIRN_TRY(cairn_step(ctx, "big", step_big, &n, NULL));
	CAIRN_TRY(cairn_sleep(ctx, "nap", SPREAD_NAP_MS));
	return CAIRN_OK;
}

/* ------------------------------------------------------ composition */

/* t.parent: child_start "kid" (workflow {"child": W}, input {"input": I}),
 * awaits signal "go", then waits for the child and returns
 * {"child": id, "output": its output}; a failed child's error is returned as
 * {"child": id, "failed": error} (handled, not raised). */
static int wf_parent(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *w = field(input, "child"), *in = field(input, "input");
	int64_t kid;
	cJSON *go, *out;
	CAIRN_TRY(
	    cairn_child_start(ctx, "kid", cJSON_IsString(w) ? w->valuestring : "noop", in, &kid));
	CAIRN_TRY(cairn_await_signal(ctx, "go", -1, &go));
	int rc = cairn_child_wait(ctx, kid, -1, &out);
	if (rc != CAIRN_OK && rc != CAIRN_EFAIL)
		return rc;
	*output = cJSON_CreateObject();
	cJSON_AddNumberToObject(*output, "child", (double)kid);
	if (rc == CAIRN_EFAIL)
		cJSON_AddStringToObject(*output, "failed", "see the child's error");
	else
		cJSON_AddItemToObject(*output, "output", cJSON_Duplicate(out, 1));
	return CAIRN_OK;
}

/* The results of a wait for children as JSON. */
static cJSON *results_json(const cairn_child_result *r, int n)
{
	static const char *const st[] = {
	    [CAIRN_OK] = "completed", [CAIRN_EFAIL] = "failed", [CAIRN_CANCELLED] = "cancelled"};
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddBoolToObject(o, "done", r[i].done);
		if (r[i].done) {
			cJSON_AddStringToObject(o, "status", st[r[i].status]);
			cJSON_AddItemToObject(o, "output",
			                      r[i].output ? cJSON_Duplicate(r[i].output, 1)
			                                  : cJSON_CreateNull());
			if (r[i].error)
				cJSON_AddStringToObject(o, "error", r[i].error);
		}
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

/* t.many: see the top of the file. */
static int wf_many(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t probe;
	bump(ctx, &probe); /* how often the parent executes; not durable */
	const cJSON *kids = field(input, "children"), *mode = field(input, "mode");
	const char *m = cJSON_IsString(mode) ? mode->valuestring : "all";
	int n = cJSON_GetArraySize(kids), extra = field(input, "extra") != NULL;
	int64_t *ids = calloc((size_t)n + 1, sizeof *ids);
	cairn_child_result *r = calloc((size_t)n + 1, sizeof *r),
	                   *first = calloc((size_t)n + 1, sizeof *first);
	if (!ids || !r || !first) {
		free(ids), free(r), free(first);
		return cairn_retryable(ctx, "t.many: out of memory");
	}
	int rc = CAIRN_OK, i = 0;
	const cJSON *k;
	cJSON_ArrayForEach(k, kids)
	{
		const cJSON *w = field(k, "workflow");
		if (rc == CAIRN_OK)
			rc = cairn_child_start(ctx, "kid",
			                       cJSON_IsString(w) ? w->valuestring : "noop",
			                       field(k, "input"), &ids[i]);
		i++;
	}
	if (extra)
		ids[n] = int_field(input, "extra", 0);
	int64_t timeout = int_field(input, "timeout_ms", -1);
	int all = n + extra;
	if (rc == CAIRN_OK && strcmp(m, "any_all") == 0) {
		rc = cairn_child_wait_any(ctx, ids, all, timeout, first);
		if (rc == CAIRN_OK || rc == CAIRN_EFAIL)
			rc = cairn_child_wait_all(ctx, ids, all, timeout, r);
	} else if (rc == CAIRN_OK && strcmp(m, "each") == 0) {
		for (i = 0; i < all && (rc == CAIRN_OK || rc == CAIRN_EFAIL); i++) {
			cJSON *out;
			rc = cairn_child_wait(ctx, ids[i], timeout, &out);
			r[i] =
			    (cairn_child_result){.child = ids[i],
			                         .done = rc == CAIRN_OK || rc == CAIRN_EFAIL,
			                         .status = rc == CAIRN_OK ? CAIRN_OK : CAIRN_EFAIL,
			                         .output = rc == CAIRN_OK ? out : NULL};
		}
	} else if (rc == CAIRN_OK) {
		int want = strcmp(m, "any") == 0     ? 1
		           : strcmp(m, "first") == 0 ? (int)int_field(input, "k", 1)
		                                     : all;
		rc = cairn_child_wait_first(ctx, ids, all, want, timeout, r);
	}
	if (rc != CAIRN_OK && rc != CAIRN_EFAIL && rc != CAIRN_ETIMEOUT) {
		free(ids), free(r), free(first);
		return rc;
	}
	*output = cJSON_CreateObject();
	cJSON *a = cJSON_AddArrayToObject(*output, "ids");
	for (i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)ids[i]));
	cJSON_AddStringToObject(*output, "rc",
	                        rc == CAIRN_OK      ? "ok"
	                        : rc == CAIRN_EFAIL ? "failed"
	                                            : "timeout");
	if (rc != CAIRN_OK)
		cJSON_AddStringToObject(*output, "error", cairn_ctx_error(ctx));
	cJSON_AddItemToObject(*output, "results", results_json(r, all));
	if (strcmp(m, "any_all") == 0)
		cJSON_AddItemToObject(*output, "first_results", results_json(first, all));
	free(ids);
	free(r);
	free(first);
	return CAIRN_OK;
}

/* t.send: cairn_send "tell" of signal {"signal": S} with {"payload": P} to
 * run {"to": ID}, then cairn_enqueue_from "spawn" of noop with {"from": this
 * run}; returns {"spawned": id}. With {"then_wait": true} it awaits "go"
 * in between. */
static int wf_send(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *sig = field(input, "signal");
	cJSON *go;
	CAIRN_TRY(cairn_send(ctx, "tell", int_field(input, "to", 0),
	                     cJSON_IsString(sig) ? sig->valuestring : "s",
	                     field(input, "payload")));
	if (cJSON_IsTrue(field(input, "then_wait")))
		CAIRN_TRY(cairn_await_signal(ctx, "go", -1, &go));
	cJSON *from = cJSON_CreateObject();
	cJSON_AddNumberToObject(from, "from", (double)cairn_ctx_run_id(ctx));
	int64_t id;
	int rc = cairn_enqueue_from(ctx, "spawn", "noop", from, &id);
	cJSON_Delete(from);
	CAIRN_TRY(rc);
	*output = cJSON_CreateObject();
	cJSON_AddNumberToObject(*output, "spawned", (double)id);
	return CAIRN_OK;
}

/* t.progress: publishes "progress" {"pct": 50}, awaits "go", publishes
 * {"pct": 100} and returns. */
static int wf_progress(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *half = cJSON_CreateObject(), *full = cJSON_CreateObject(), *go;
	cJSON_AddNumberToObject(half, "pct", 50);
	cJSON_AddNumberToObject(full, "pct", 100);
	int rc = cairn_set_event(ctx, "progress", half);
	if (!rc)
		rc = cairn_await_signal(ctx, "go", -1, &go);
	if (!rc)
		rc = cairn_set_event(ctx, "progress", full);
	cJSON_Delete(half);
	cJSON_Delete(full);
	return rc;
}

/* ------------------------------------------------------------ t.slow */

typedef struct slow_arg {
	int64_t ms;
	int polite;
} slow_arg;

/* Bumps t_counter, then takes ms (stopping early, when polite, once
 * cairn_should_stop says so). */
static int step_slow(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const slow_arg *a = arg;
	int64_t n;
	CAIRN_TRY(bump(ctx, &n));
	for (int64_t t = 0; t < a->ms; t += 10) {
		if (a->polite && cairn_should_stop(ctx))
			return cairn_retryable(ctx, "slow: told to stop");
		nap_ms(10);
	}
	*result = cJSON_CreateString("done");
	return CAIRN_OK;
}

/* t.slow: step "slow" of {"ms"} with {"timeout"} ms and {"attempts"}. */
static int wf_slow(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	slow_arg a = {int_field(input, "ms", 100), cJSON_IsTrue(field(input, "polite"))};
	cairn_retry_policy p = {.max_attempts = (int)int_field(input, "attempts", 1),
	                        .initial_ms = 10,
	                        .jitter = -1,
	                        .timeout_ms = int_field(input, "timeout", 0)};
	return cairn_step_retry(ctx, "slow", &p, step_slow, &a, NULL);
}

/* ---------------------------------------------------------------- t.hold */

/* One line "S|E RUN PID MONO_US" appended to path (O_APPEND: whole lines
 * from several processes). */
static void hold_mark(const char *path, char what, int64_t run)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "%c %" PRId64 " %d %" PRId64 "\n", what, run, (int)getpid(),
	        (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
	fclose(f);
}

typedef struct hold_arg {
	const char *log;
	int64_t ms;
} hold_arg;

static int step_hold(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const hold_arg *a = arg;
	hold_mark(a->log, 'S', cairn_ctx_run_id(ctx));
	nap_ms(a->ms);
	hold_mark(a->log, 'E', cairn_ctx_run_id(ctx));
	*result = cJSON_CreateString("held");
	return CAIRN_OK;
}

/* t.hold: step "hold" takes {"ms"} ms and records when it runs (S, E lines in
 * the file {"log"}); with {"sleep": N} a durable sleep of N ms follows, and
 * a second step "hold2" of the same kind. Flow-control tests read the file. */
static int wf_hold(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *log = field(input, "log");
	hold_arg a = {cJSON_IsString(log) ? log->valuestring : "/dev/null",
	              int_field(input, "ms", 100)};
	CAIRN_TRY(cairn_step(ctx, "hold", step_hold, &a, NULL));
	int64_t sleep = int_field(input, "sleep", 0);
	if (sleep) {
		CAIRN_TRY(cairn_sleep(ctx, "pause", sleep));
		CAIRN_TRY(cairn_step(ctx, "hold2", step_hold, &a, NULL));
	}
	*output = cJSON_CreateString("done");
	return CAIRN_OK;
}

/* ------------------------------------------------------------ t.traced */

static int step_traceparent(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateObject();
	cJSON_AddStringToObject(*result, "tp", cairn_ctx_traceparent(ctx));
	return CAIRN_OK;
}

static int step_declined(cairn_ctx *ctx, void *arg, cJSON **result)
{
	return cairn_fail(ctx, "card declined");
}

static int wf_traced_kid(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *r;
	CAIRN_TRY(cairn_step(ctx, "kidstep", step_traceparent, NULL, &r));
	*output = cJSON_Duplicate(r, 1); /* r is ctx's */
	return CAIRN_OK;
}

static int wf_traced(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *first, *kid_out;
	int64_t kid;
	CAIRN_TRY(cairn_step(ctx, "first", step_traceparent, NULL, &first));
	CAIRN_TRY(cairn_child_start(ctx, "kid", "t.traced_kid", NULL, &kid));
	CAIRN_TRY(cairn_step(ctx, "gate", step_block, NULL, NULL));
	CAIRN_TRY(cairn_child_wait(ctx, kid, -1, &kid_out));
	CAIRN_TRY(cairn_sleep(ctx, "nap", 10));
	if (cJSON_IsTrue(field(input, "fail"))) {
		cairn_retry_policy once = {.max_attempts = 1};
		CAIRN_TRY(cairn_step_retry(ctx, "boom", &once, step_declined, NULL, NULL));
	}
	*output = cJSON_CreateObject();
	cJSON_AddItemToObject(*output, "tp",
	                      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(first, "tp"), 1));
	cJSON_AddNumberToObject(*output, "kid", (double)kid);
	cJSON_AddItemToObject(*output, "kid_tp",
	                      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(kid_out, "tp"), 1));
	return CAIRN_OK;
}

/* -------------------------------------------------------- t.versioned */

static int step_named_ok(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateString(arg);
	return CAIRN_OK;
}

/* t.versioned: the old code (a worker without T_PATCHED in its environment)
 * runs step "a"; the new code runs steps "a1" and "a2", behind
 * cairn_patched(ctx, "split-a") unless {"unguarded": true}. Then it awaits
 * "go" and returns {"path": "old" | "new"}. */
static int wf_versioned(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int patched = getenv("T_PATCHED") &&
	              (cJSON_IsTrue(field(input, "unguarded")) || cairn_patched(ctx, "split-a"));
	if (patched) {
		CAIRN_TRY(cairn_step(ctx, "a1", step_named_ok, "a1", NULL));
		CAIRN_TRY(cairn_step(ctx, "a2", step_named_ok, "a2", NULL));
	} else {
		CAIRN_TRY(cairn_step(ctx, "a", step_named_ok, "a", NULL));
	}
	cJSON *go;
	CAIRN_TRY(cairn_await_signal(ctx, "go", -1, &go));
	*output = cJSON_CreateObject();
	cJSON_AddStringToObject(*output, "path", patched ? "new" : "old");
	return CAIRN_OK;
}

/* ---------------------------------------------------------------- t.tx */

/* Inserts (run, "tx") into t_hits in the step's transaction, then holds it
 * open for {"ms"} so that a kill lands inside it. */
static int step_tx(cairn_ctx *ctx, PGconn *c, void *arg, cJSON **result)
{
	char id[24];
	snprintf(id, sizeof id, "%" PRId64, cairn_ctx_run_id(ctx));
	const char *p[] = {id};
	PGresult *r = PQexecParams(c, "INSERT INTO t_hits (run_id, step) VALUES ($1, 'tx')", 1,
	                           NULL, p, NULL, NULL, 0);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	if (!ok)
		return cairn_retryable(ctx, "tx: %s", PQerrorMessage(c));
	nap_ms(*(const int64_t *)arg);
	*result = cJSON_CreateString("inserted");
	return CAIRN_OK;
}

/* t.tx: transactional step "tx", then a durable sleep "nap" (50 ms). */
static int wf_tx(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t ms = int_field(input, "ms", 0);
	CAIRN_TRY(cairn_tx_step(ctx, "tx", step_tx, &ms, NULL));
	CAIRN_TRY(cairn_sleep(ctx, "nap", SPREAD_NAP_MS));
	return CAIRN_OK;
}

/* --------------------------------------------- long journals, chains */

static int step_index(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateObject();
	cJSON_AddNumberToObject(*result, "i", (double)(intptr_t)arg);
	return CAIRN_OK;
}

/* t.long: a replayed value must be the one its step returned. */
static int wf_long(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t n = int_field(input, "steps", 100), every = int_field(input, "every", 10);
	int64_t ms = int_field(input, "sleep_ms", 2);
	double sum = 0;
	for (int64_t i = 0; i < n; i++) {
		char name[32];
		cJSON *v;
		snprintf(name, sizeof name, "s%" PRId64, i);
		CAIRN_TRY(cairn_step(ctx, name, step_index, (void *)(intptr_t)i, &v));
		const cJSON *got = field(v, "i");
		if (!cJSON_IsNumber(got) || got->valuedouble != (double)i)
			return cairn_fail(ctx, "step %s replayed a value of another step", name);
		sum += got->valuedouble;
		if (every > 0 && (i + 1) % every == 0) {
			snprintf(name, sizeof name, "nap%" PRId64, i);
			CAIRN_TRY(cairn_sleep(ctx, name, ms));
		}
	}
	*output = cJSON_CreateObject();
	cJSON_AddNumberToObject(*output, "steps", (double)n);
	cJSON_AddNumberToObject(*output, "sum", sum);
	return CAIRN_OK;
}

static int step_attempt(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateNumber(cairn_ctx_attempt(ctx));
	return CAIRN_OK;
}

/* t.cut: whether attempt 1 asks for a retry at step 10 is read outside the
 * journal on purpose: the retry cuts journal entries that a worker may
 * hold in its cache. */
static int wf_cut(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *ran = cJSON_CreateArray(), *v;
	int rc = CAIRN_OK;
	for (int i = 0; i < 80 && rc == CAIRN_OK; i++) {
		if (i == 10 && cairn_ctx_attempt(ctx) == 1 && flag_set(cairn_ctx_run_id(ctx)) > 0) {
			rc = cairn_retryable(ctx, "cut here");
			break;
		}
		char name[16];
		snprintf(name, sizeof name, "s%d", i);
		if ((rc = cairn_step(ctx, name, step_attempt, NULL, &v)) == CAIRN_OK)
			cJSON_AddItemToArray(ran, cJSON_Duplicate(v, 1));
	}
	if (rc == CAIRN_OK)
		rc = cairn_sleep(ctx, "nap", SPREAD_NAP_MS);
	if (rc == CAIRN_OK)
		rc = cairn_await_signal(ctx, "go", -1, &v);
	if (rc == CAIRN_OK)
		rc = cairn_await_signal(ctx, "again", -1, &v);
	if (rc != CAIRN_OK) {
		cJSON_Delete(ran);
		return rc;
	}
	*output = ran;
	return CAIRN_OK;
}

static int step_n_of(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateNumber((double)*(const int64_t *)arg);
	return CAIRN_OK;
}

/* t.loop: a workflow that lives on as a chain of runs. */
static int wf_loop(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t n = int_field(input, "n", 0), until = int_field(input, "until", 3);
	int64_t ms = int_field(input, "sleep_ms", 0);
	CAIRN_TRY(cairn_step(ctx, "work", step_n_of, &n, NULL));
	if (cJSON_IsTrue(field(input, "gate")))
		CAIRN_TRY(cairn_step(ctx, "gate", step_block, NULL, NULL));
	if (ms > 0)
		CAIRN_TRY(cairn_sleep(ctx, "nap", ms));
	if (n >= until) {
		*output = cJSON_CreateObject();
		cJSON_AddNumberToObject(*output, "n", (double)n);
		return CAIRN_OK;
	}
	cJSON *next = cJSON_Duplicate(input, 1);
	if (!cJSON_IsObject(next)) {
		cJSON_Delete(next);
		next = cJSON_CreateObject();
	}
	cJSON_DeleteItemFromObjectCaseSensitive(next, "n");
	cJSON_DeleteItemFromObjectCaseSensitive(next, "gate");
	cJSON_AddNumberToObject(next, "n", (double)(n + 1));
	int rc = cairn_continue_as_new(ctx, next);
	cJSON_Delete(next);
	return rc;
}

/* t.inbox: one message per run of the chain; the others carry over. */
static int wf_inbox(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *msg;
	CAIRN_TRY(cairn_await_signal(ctx, "msg", -1, &msg));
	cJSON *got = cJSON_Duplicate(field(input, "got"), 1);
	if (!cJSON_IsArray(got)) {
		cJSON_Delete(got);
		got = cJSON_CreateArray();
	}
	cJSON_AddItemToArray(got, cJSON_Duplicate(msg, 1));
	if (cJSON_GetArraySize(got) >= int_field(input, "want", 1)) {
		*output = got;
		return CAIRN_OK;
	}
	cJSON *next = cJSON_CreateObject();
	cJSON_AddItemToObject(next, "got", got);
	cJSON_AddNumberToObject(next, "want", (double)int_field(input, "want", 1));
	int rc = cairn_continue_as_new(ctx, next);
	cJSON_Delete(next);
	return rc;
}

/* ---------------------------------------------------------------- init */

int cairn_plugin_init(cairn_worker *w)
{
	static const struct {
		const char *name;
		cairn_workflow_fn fn;
	} flows[] = {{"t.replay", wf_replay},
	             {"t.await", wf_await},
	             {"t.flaky", wf_flaky},
	             {"t.nondet", wf_nondet},
	             {"t.signals", wf_signals},
	             {"t.spread", wf_spread},
	             {"t.stubborn", wf_stubborn},
	             {"t.badutf8", wf_badutf8},
	             {"t.crash", wf_crash},
	             {"t.polite", wf_polite},
	             {"t.big", wf_big},
	             {"t.parent", wf_parent},
	             {"t.many", wf_many},
	             {"t.send", wf_send},
	             {"t.progress", wf_progress},
	             {"t.slow", wf_slow},
	             {"t.versioned", wf_versioned},
	             {"t.tx", wf_tx},
	             {"t.hold", wf_hold},
	             {"t.long", wf_long},
	             {"t.cut", wf_cut},
	             {"t.loop", wf_loop},
	             {"t.inbox", wf_inbox},
	             {"t.traced", wf_traced},
	             {"t.traced_kid", wf_traced_kid}};
	const char *only = getenv("T_FLOWS");
	cairn_workflow_opts opts = {.runtime = getenv("T_RUNTIME")};
	for (size_t i = 0; i < sizeof flows / sizeof flows[0]; i++) {
		char item[64];
		snprintf(item, sizeof item, ",%s,", flows[i].name);
		char list[1024];
		snprintf(list, sizeof list, ",%s,", only ? only : "");
		if (only && !strstr(list, item))
			continue;
		if (cairn_workflow_register(w, flows[i].name, flows[i].fn, &opts) != CAIRN_OK)
			return 1;
	}
	return 0;
}
