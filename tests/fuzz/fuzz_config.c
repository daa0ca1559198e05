/*
 * fuzz_config.c - the worker's configuration loader on settings it did not
 * write: each line of the input is one NAME=value setting (as an embedding
 * program passes them, and as the environment does). Either the whole
 * configuration loads and describes itself, or it is refused with an error.
 */
#include <assert.h>

#include "config.h"
#include "fuzz.h"

#define MAX_LINES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	if (!s)
		return 0;
	const char *settings[MAX_LINES + 1];
	settings[fuzz_lines(s, settings, MAX_LINES)] = NULL;
	config cfg;
	buf err = BUF_INIT, text = BUF_INIT;
	if (config_load_settings(&cfg, "host=db dbname=cairn", settings, 0, &err) == 0) {
		config_describe(&cfg, &text);
		assert(strstr(buf_str(&text), "DATABASE_URL=host=db dbname=cairn"));
	} else {
		assert(buf_str(&err)[0]);
	}
	config_free(&cfg);
	buf_free(&err);
	buf_free(&text);
	free(s);
	return 0;
}
