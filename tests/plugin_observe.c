/*
 * plugin_observe.c - the workflows of the metrics and log tests
 * (test_metrics.c, test_logs.c), loaded into a real cairn-worker with
 * `--plugin plugin_observe.so`. Each ends a run one way, so that what a
 * worker counts and logs about it can be checked from outside:
 *
 *   o.ok     step "work" returns {"ok": true}; the run completes.
 *   o.fail   step "boom" fails for good ("boom: on purpose"); so does the run.
 *   o.retry  returns retryable ("not yet") without a durable call: with
 *            attempts left the run starts over, then fails for good.
 *   o.wait   awaits signal "go" (no timeout): a run to cancel.
 *   o.crash  step "boom" aborts the worker process: a poison run.
 *
 * Nothing here touches a database or keeps state between calls.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "cairn.h"

static int ok_fn(cairn_ctx *ctx, void *arg, cJSON **result)
{
	*result = cJSON_CreateObject();
	if (!*result || !cJSON_AddTrueToObject(*result, "ok"))
		return cairn_retryable(ctx, "work: out of memory");
	return CAIRN_OK;
}

static int wf_ok(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *r;
	CAIRN_TRY(cairn_step(ctx, "work", ok_fn, NULL, &r));
	*output = cJSON_Duplicate(r, 1);
	return *output ? CAIRN_OK : cairn_retryable(ctx, "ok: out of memory");
}

static int boom_fn(cairn_ctx *ctx, void *arg, cJSON **result)
{
	return cairn_fail(ctx, "boom: on purpose");
}

static int wf_fail(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *r;
	return cairn_step(ctx, "boom", boom_fn, NULL, &r);
}

static int wf_retry(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	return cairn_retryable(ctx, "not yet");
}

static int wf_wait(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *p;
	CAIRN_TRY(cairn_await_signal(ctx, "go", -1, &p));
	*output = cJSON_CreateNull();
	return CAIRN_OK;
}

static int crash_fn(cairn_ctx *ctx, void *arg, cJSON **result)
{
	abort();
}

static int wf_crash(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *r;
	return cairn_step(ctx, "boom", crash_fn, NULL, &r);
}

int cairn_plugin_init(cairn_worker *w)
{
	static const struct {
		const char *name;
		cairn_workflow_fn fn;
	} flows[] = {{"o.ok", wf_ok},
	             {"o.fail", wf_fail},
	             {"o.retry", wf_retry},
	             {"o.wait", wf_wait},
	             {"o.crash", wf_crash}};
	for (size_t i = 0; i < sizeof flows / sizeof flows[0]; i++)
		if (cairn_workflow_register(w, flows[i].name, flows[i].fn, NULL) != CAIRN_OK)
			return 1;
	return 0;
}
