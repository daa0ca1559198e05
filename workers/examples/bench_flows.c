/*
 * bench_flows.c - the workflows `make bench` needs beyond the built-ins,
 * loaded into cairn-worker as a plugin (--plugin build/examples/bench_flows.so):
 *
 *   bench3   three journaled steps, each returning a small JSON object;
 *            returns {"steps": 3}. Measures the cost of a step's journal write.
 *
 * Build: make examples. See workers/examples/greet.c for how plugins work.
 */
#include <cjson/cJSON.h>

#include "cairn.h"

static int small_step(cairn_ctx *ctx, void *arg, cJSON **result)
{
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddNumberToObject(o, "n", (double)(int)(long)arg)) {
		cJSON_Delete(o);
		return cairn_retryable(ctx, "bench3: out of memory");
	}
	*result = o;
	return CAIRN_OK;
}

static int bench3(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	static const char *const names[] = {"one", "two", "three"};
	for (long i = 0; i < 3; i++) {
		cJSON *r;
		CAIRN_TRY(cairn_step(ctx, names[i], small_step, (void *)i, &r));
	}
	*output = cJSON_CreateObject();
	if (*output)
		cJSON_AddNumberToObject(*output, "steps", 3);
	return CAIRN_OK;
}

int cairn_plugin_init(cairn_worker *w)
{
	return cairn_workflow_register(w, "bench3", bench3, NULL);
}
