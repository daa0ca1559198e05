/*
 * fuzz_http.c - the routing of a request to the worker's endpoint (route.h)
 * and, for a signal link (POST /signal/TOKEN), the token (link_open, under
 * a fixed test key at a fixed time) and what the link's body goes through
 * before it is written (client_signal_once: the signal name, the payload's
 * JSON). The input is the request's method, path, Authorization header
 * ("\N": none) and the worker's CAIRN_HTTP_TOKEN ("": none) on one line
 * each, then its body. Every request gets a route, a bearer token is asked
 * for only where one is set and not given, a wake-up names at most
 * CAIRN_WAKE_RUNS runs, and a token that opens holds claims in range.
 */
#include <assert.h>
#include <strings.h>

#include "fuzz.h"
#include "link.h"
#include "parse.h"
#include "route.h"

/* The key of the link seeds (tests/fuzz/seeds/{parse,http}/link*), and a
 * time before they expire. */
static const unsigned char http_key[LINK_KEY_BYTES] = {1, 2, 3};
#define HTTP_NOW_UNIX 1764763292

static void http_signal(const char *token, const char *body)
{
	char why[512], err[PARSE_ERR_MAX];
	link_claims c;
	int rc = link_open(http_key, token, HTTP_NOW_UNIX, &c, why, sizeof why);
	assert(rc == 0 || rc == -1 || rc == -2);
	if (rc < 0) {
		assert(why[0]);
		return;
	}
	assert(c.run_id >= 1 && c.expires_unix > HTTP_NOW_UNIX);
	assert(strlen(c.signal) < sizeof c.signal && strlen(c.nonce) < sizeof c.nonce);
	parse_check_name("signal name", c.signal, err);
	const char *payload = *body ? body : "null";
	if (parse_check_json("signal payload", payload, CAIRN_DEFAULT_MAX_PAYLOAD, err) == 0)
		assert(json_depth(payload) <= JSON_MAX_DEPTH);
}

static int bearer_ok(const char *auth, const char *token)
{
	return auth && strncasecmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, token) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	if (!s)
		return 0;
	const char *f[5] = {"", "", "\\N", "", ""};
	fuzz_lines(s, f, 5);
	const char *method = f[0], *path = f[1], *token = f[3], *body = f[4];
	const char *auth = strcmp(f[2], "\\N") == 0 ? NULL : f[2];
	route rt;
	route_request(method, path, auth, token, &rt);
	assert((unsigned)rt.kind <= ROUTE_API_UNAUTHORIZED);
	int api = strncmp(path, "/v1", 3) == 0 && (path[3] == '/' || !path[3]);
	assert((rt.kind >= ROUTE_API) == api);
	if (api)
		assert((rt.kind == ROUTE_API_OFF) == !*token &&
		       (rt.kind != ROUTE_API || bearer_ok(auth, token)));
	int probe = strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0;
	int link = strncmp(path, "/signal/", 8) == 0;
	assert((rt.kind == ROUTE_SIGNAL) == link);
	int bearer = auth && strncmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, token) == 0;
	if (!*token || probe || link || bearer)
		assert(rt.kind != ROUTE_UNAUTHORIZED);
	else if (!auth)
		assert(rt.kind == (api ? ROUTE_API_UNAUTHORIZED : ROUTE_UNAUTHORIZED));
	if (rt.kind == ROUTE_WAKE || rt.kind == ROUTE_MEMBERS || rt.kind == ROUTE_BAD_POST)
		assert(strcmp(method, "POST") == 0);
	if (rt.kind >= ROUTE_HEALTHZ && rt.kind <= ROUTE_STATUS)
		assert(strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
	if (rt.kind == ROUTE_WAKE) {
		assert(strncmp(path, "/wake", 5) == 0);
		assert(rt.nruns >= 0 && rt.nruns <= CAIRN_WAKE_RUNS);
		for (int i = 0; i < rt.nruns; i++)
			assert(rt.runs[i] >= 0); /* 0 is no run: its claim finds nothing */
	}
	if (rt.kind == ROUTE_MEMBERS)
		assert(strlen(rt.arg) <= 32 &&
		       strspn(rt.arg, "0123456789abcdef") == strlen(rt.arg));
	/* A worker pokes itself with the relay's paths (status_poke): the same answer. */
	route self;
	int poked = route_poke(path, &self) == 0;
	assert(poked == (self.kind == ROUTE_WAKE || self.kind == ROUTE_MEMBERS));
	if (rt.kind == ROUTE_WAKE || rt.kind == ROUTE_MEMBERS)
		assert(poked && self.kind == rt.kind && self.nruns == rt.nruns &&
		       memcmp(self.runs, rt.runs, sizeof rt.runs) == 0);
	if (rt.kind == ROUTE_SIGNAL) {
		assert(rt.arg == path + 8);
		http_signal(rt.arg, body);
	}
	free(s);
	return 0;
}
