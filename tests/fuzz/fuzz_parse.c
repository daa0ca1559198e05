/*
 * fuzz_parse.c - the parsers of settings, CLI arguments and payloads:
 * durations, sizes, timestamps, integers, names, keys, JSON validation,
 * depth and characters (\u0000, NUL bytes, UTF-8), UTF-8 checks, the id
 * lists of the relay's paths, the token of a signal link's path (POST
 * /signal/TOKEN) and the http built-in's allow list. Each must return an
 * answer (a value or an error) for any text, and an accepted value must be
 * in range.
 */
#include <assert.h>
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "link.h"
#include "netpolicy.h"
#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	if (!s)
		return 0;
	char err[PARSE_ERR_MAX];
	int64_t v;
	size_t z;
	if (parse_duration_ms(s, &v, err) == 0)
		assert(v >= 0);
	parse_size_bytes(s, &z, err);
	parse_timestamp_ms(s, &v, err);
	if (parse_int(s, -5, 5, &v, err) == 0)
		assert(v >= -5 && v <= 5);
	parse_check_name("name", s, err);
	parse_check_key(s, err);
	if (parse_check_json("input", s, 4096, err) == 0)
		assert(json_depth(s) <= JSON_MAX_DEPTH);
	/* The whole input, NUL bytes and all, as an HTTP body: what is taken
	 * holds no NUL byte, is UTF-8, and cJSON prints it back as text that
	 * passes the same check (no \u0000 it would have cut short). */
	if (parse_check_json_n("body", s, size, 4096, err) == 0) {
		assert(!memchr(s, 0, size) && utf8_valid(s));
		cJSON *j = cJSON_Parse(s);
		char *back = j ? cJSON_PrintUnformatted(j) : NULL;
		assert(!j || !back || json_check_text("body", back, strlen(back), err) == 0);
		cJSON_free(back);
		cJSON_Delete(j);
	} else {
		assert(err[0]);
	}
	if (utf8_valid(s)) {
		buf b = BUF_INIT;
		utf8_clean(s, &b);
		assert(strcmp(buf_str(&b), s) == 0);
		buf_free(&b);
	}
	int64_t ids[16];
	int n = parse_id_list(s, ids, 16);
	for (int i = 0; i < n; i++)
		assert(ids[i] >= 0);
	static const unsigned char key[LINK_KEY_BYTES] = {1, 2, 3};
	link_claims c;
	if (link_open(key, s, 0, &c, err, sizeof err) == 0)
		assert(c.run_id >= 1);
	netpolicy *p;
	if (netpolicy_parse(s, &p, err, sizeof err) == 0) {
		netpolicy_allows_host(p, s);
		netpolicy_free(p);
	}
	free(s);
	return 0;
}
