/*
 * plugin_chaos.c - the workload of `make chaos` (tests/chaos.c), loaded into
 * real cairn-worker processes with --plugin. One workflow:
 *
 *   chaos   {"nap_ms": N, "work_ms": M, "poison": bool}
 *           step "a", durable sleep "nap" (N ms), step "b", await the signal
 *           "go" (the driver sends it, sometimes before the await: buffered),
 *           step "c"; output {"ok": true}.
 *
 * Every execution of a step first records itself in chaos_effects, a table
 * outside the journal, on a connection of its own, and only then does its
 * "work" (sleeps up to M ms, so kills land inside steps too):
 *
 *   INSERT INTO chaos_effects (run_id, step, pid, journaled)
 *   SELECT $1, $2, $3, count(*) FROM cairn.steps
 *    WHERE run_id = $1 AND name = $2 AND status = 'completed'
 *
 * journaled is the number of completed journal rows of this very step that
 * were committed when the execution started, and started_at (the column's
 * default, clock_timestamp()) is when it started by the server's clock. The
 * driver compares both with the journal: an execution that started after
 * the step's result was journaled is a broken promise; one whose result was
 * never journaled may run again (at least once) and is not.
 *
 * With "poison": true, step "a" records its effect and then abort()s the
 * worker, on every execution: the engine has to give up on the run.
 *
 * Database access: one libpq connection per executor thread (the worker's
 * DATABASE_URL), reopened after a failure, closed when the thread ends.
 * Built without libcairn: cairn_* resolve against the worker.
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

/* How long one step attempt keeps trying to record its effect (the database
 * may be restarting) before it returns a retryable failure. */
#define EFFECT_TRY_MS 4000
#define EFFECT_GAP_MS 100

/* This thread's connection; NULL if unreachable. */
static PGconn *conn(void)
{
	return conn_named("chaos-effects");
}

/* A failed statement on a connection that still looks fine (a restarted
 * server is noticed only by the next statement) is dropped as well. */
static void conn_drop(void)
{
	PGconn *c = pthread_getspecific(conn_key);
	PQfinish(c);
	pthread_setspecific(conn_key, NULL);
}

static const char SQL_EFFECT[] = "INSERT INTO chaos_effects (run_id, step, pid, journaled) "
                                 "SELECT $1, $2, $3, count(*) FROM cairn.steps "
                                 " WHERE run_id = $1 AND name = $2 AND status = 'completed'";

static int effect(cairn_ctx *ctx, const char *step)
{
	char id[24], pid[16];
	snprintf(id, sizeof id, "%" PRId64, cairn_ctx_run_id(ctx));
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	const char *p[] = {id, step, pid};
	for (int waited = 0;; waited += EFFECT_GAP_MS) {
		PGconn *c = conn();
		if (c) {
			PGresult *r = PQexecParams(c, SQL_EFFECT, 3, NULL, p, NULL, NULL, 0);
			int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
			PQclear(r);
			if (ok)
				return CAIRN_OK;
			conn_drop();
		}
		if (waited >= EFFECT_TRY_MS || cairn_should_stop(ctx))
			return cairn_retryable(ctx, "%s: cannot record the effect", step);
		nap_ms(EFFECT_GAP_MS);
	}
}

typedef struct step_arg {
	const char *name;
	int64_t work_ms;
	int poison;
} step_arg;

static int step_fn(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const step_arg *a = arg;
	CAIRN_TRY(effect(ctx, a->name));
	if (a->poison)
		abort();
	if (a->work_ms > 0)
		nap_ms((long)a->work_ms);
	*result = cJSON_CreateString(a->name);
	return CAIRN_OK;
}

static int64_t int_field(const cJSON *in, const char *name, int64_t dflt)
{
	const cJSON *v = cJSON_IsObject(in) ? cJSON_GetObjectItemCaseSensitive(in, name) : NULL;
	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* Many attempts, short waits: a step must outlast a database restart (the
 * workload's own failures must not look like lost runs). */
static const cairn_retry_policy POLICY = {
    .max_attempts = 100, .initial_ms = 200, .multiplier = 2.0, .max_ms = 2000, .jitter = 0.2};

static int wf_chaos(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t nap = int_field(input, "nap_ms", 100);
	int64_t work = int_field(input, "work_ms", 0);
	const cJSON *pz =
	    cJSON_IsObject(input) ? cJSON_GetObjectItemCaseSensitive(input, "poison") : NULL;
	step_arg a = {"a", work, cJSON_IsTrue(pz)}, b = {"b", work, 0}, c = {"c", work, 0};
	CAIRN_TRY(cairn_step_retry(ctx, "a", &POLICY, step_fn, &a, NULL));
	CAIRN_TRY(cairn_sleep(ctx, "nap", nap));
	CAIRN_TRY(cairn_step_retry(ctx, "b", &POLICY, step_fn, &b, NULL));
	cJSON *go = NULL;
	CAIRN_TRY(cairn_await_signal(ctx, "go", -1, &go));
	CAIRN_TRY(cairn_step_retry(ctx, "c", &POLICY, step_fn, &c, NULL));
	*output = cJSON_CreateObject();
	cJSON_AddBoolToObject(*output, "ok", 1);
	return CAIRN_OK;
}

int cairn_plugin_init(cairn_worker *w)
{
	return cairn_workflow_register(w, "chaos", wf_chaos, NULL) == CAIRN_OK ? 0 : 1;
}
