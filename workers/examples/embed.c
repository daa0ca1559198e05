/*
 * embed.c - a program of your own that is a cairn worker: it links libcairn
 * (shared or static), registers its own workflow, `shout`, and runs the
 * worker until SIGTERM or SIGINT drains it. `shout` takes {"text": "hi"} and
 * returns {"shouted": "HI!"}, made in one journaled step.
 *
 * Built against an installed cairn through pkg-config:
 *
 *     cc -std=c17 -o embed embed.c $(pkg-config --cflags --libs cairn libcjson)
 *     cc -std=c17 -o embed embed.c $(pkg-config --cflags --libs cairn-static libcjson)
 *     DATABASE_URL=... ./embed            # settings as for cairn-worker
 *     cairn enqueue shout --input '{"text": "hi"}' --wait
 *
 * Its settings come from the environment (DATABASE_URL, CAIRN_HTTP_ADDR and
 * the rest that `cairn-worker --help` lists), validated as the daemon does.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"

#define SHOUT_TEXT_MAX 200

static int shout_step(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const char *text = arg;
	char s[SHOUT_TEXT_MAX + 2];
	size_t n = strlen(text);
	for (size_t i = 0; i < n; i++)
		s[i] = (char)toupper((unsigned char)text[i]);
	s[n] = '!';
	s[n + 1] = '\0';
	*result = cJSON_CreateString(s);
	return *result ? CAIRN_OK : cairn_retryable(ctx, "shout: out of memory");
}

static int shout(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(input, "text");
	if (!cJSON_IsString(text) || strlen(text->valuestring) > SHOUT_TEXT_MAX)
		return cairn_fail(ctx,
		                  "shout: \"text\" must be a string of at most %d bytes, as in "
		                  "{\"text\": \"hi\"}",
		                  SHOUT_TEXT_MAX);
	cJSON *shouted;
	CAIRN_TRY(cairn_step(ctx, "shout", shout_step, text->valuestring, &shouted));
	cJSON *out = cJSON_CreateObject();
	if (!out || !cJSON_AddItemToObject(out, "shouted", cJSON_Duplicate(shouted, 1))) {
		cJSON_Delete(out);
		return cairn_retryable(ctx, "shout: out of memory");
	}
	*output = out;
	return CAIRN_OK;
}

int main(void)
{
	cairn_worker_settings ws = {.from_environment = 1};
	cairn_worker *w;
	int rc = cairn_worker_new_with(&ws, &w);
	if (rc == CAIRN_OK)
		rc = cairn_workflow_register(w, "shout", shout, NULL);
	if (rc != CAIRN_OK) {
		fprintf(stderr, "embed: %s: %s\n", cairn_strstatus(rc),
		        w ? cairn_worker_errmsg(w) : "out of memory");
		cairn_worker_free(w);
		return 2;
	}
	rc = cairn_worker_run(w);
	if (rc != CAIRN_OK)
		fprintf(stderr, "embed: %s\n", cairn_worker_errmsg(w));
	/* After a cut-off drain or a second signal threads may still run. */
	if (rc == CAIRN_ETIMEOUT || rc == CAIRN_EINTR)
		_exit(1);
	cairn_worker_free(w);
	return rc == CAIRN_OK ? 0 : 1;
}
