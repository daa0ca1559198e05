/*
 * greet.c - an example workflow plugin: `greet` takes {"name": "Ada"}, builds
 * "hello, Ada" in one journaled step, reads the journaled clock, and returns
 * {"greeting": "hello, Ada", "at": <unix ms>}.
 *
 * A plugin is a shared object that exports cairn_plugin_init(), in which it
 * registers its workflows. It is not linked against libcairn: the cairn_*
 * functions it calls are resolved against the cairn-worker executable that
 * loads it. Build and load it with
 *
 *     make examples                         # -> build/examples/greet.so
 *     cc -std=c17 -fPIC -shared -Iinclude $(pkg-config --cflags libcjson) \
 *        -o greet.so workers/examples/greet.c   # or by hand
 *     cairn-worker --plugin build/examples/greet.so    # or CAIRN_PLUGINS=...
 *     cairn enqueue greet --input '{"name": "Ada"}' --wait
 *
 * The workflow function is replayed from the top whenever the run resumes,
 * so everything that must not change between replays (here the clock) comes
 * from a durable call.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

#define GREET_NAME_MAX 200

static int build_greeting(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const char *name = arg;
	size_t n = strlen("hello, ") + strlen(name) + 1;
	char *s = malloc(n);
	if (!s)
		return cairn_retryable(ctx, "greet: out of memory");
	snprintf(s, n, "hello, %s", name);
	*result = cJSON_CreateString(s);
	free(s);
	return *result ? CAIRN_OK : cairn_retryable(ctx, "greet: out of memory");
}

static int greet(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(input, "name");
	if (!cJSON_IsString(name) || !*name->valuestring ||
	    strlen(name->valuestring) > GREET_NAME_MAX)
		return cairn_fail(ctx,
		                  "greet: \"name\" must be a non-empty string of at most %d bytes, "
		                  "as in {\"name\": \"Ada\"}",
		                  GREET_NAME_MAX);
	cJSON *greeting;
	int64_t at;
	CAIRN_TRY(cairn_step(ctx, "greeting", build_greeting, name->valuestring, &greeting));
	CAIRN_TRY(cairn_now(ctx, &at));
	cJSON *out = cJSON_CreateObject();
	if (!out)
		return cairn_retryable(ctx, "greet: out of memory");
	cJSON_AddItemToObject(out, "greeting", cJSON_Duplicate(greeting, 1));
	cJSON_AddNumberToObject(out, "at", (double)at);
	*output = out;
	return CAIRN_OK;
}

int cairn_plugin_init(cairn_worker *w)
{
	return cairn_workflow_register(w, "greet", greet, NULL);
}
