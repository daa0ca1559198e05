/*
 * route.c - the worker endpoint's routing (see route.h).
 */
#include "route.h"

#include <sodium.h>
#include <string.h>
#include <strings.h>

#include "parse.h"

static int bad_post(route *out)
{
	memset(out, 0, sizeof *out);
	out->kind = ROUTE_BAD_POST;
	return -1;
}

int route_poke(const char *path, route *out)
{
	static const char wake[] = "/wake", cancel[] = "/cancel", members[] = "/members/";
	memset(out, 0, sizeof *out);
	if (strncmp(path, wake, sizeof wake - 1) == 0) {
		const char *p = path + sizeof wake - 1;
		int is_cancel = strncmp(p, cancel, sizeof cancel - 1) == 0;
		if (is_cancel)
			p += sizeof cancel - 1;
		int n = *p == '/' ? parse_id_list(p + 1, out->runs, CAIRN_WAKE_RUNS) : *p ? -1 : 0;
		if (n < 0)
			return bad_post(out);
		out->kind = ROUTE_WAKE;
		out->cancel = is_cancel;
		out->nruns = n;
		return 0;
	}
	if (strncmp(path, members, sizeof members - 1) != 0)
		return bad_post(out);
	const char *fp = path + sizeof members - 1; /* only now known to be inside path */
	size_t len = strlen(fp);
	if (len > 32 || strspn(fp, "0123456789abcdef") != len)
		return bad_post(out);
	out->kind = ROUTE_MEMBERS;
	out->arg = fp;
	return 0;
}

/* Whether authorization is "Bearer TOKEN" with the configured token
 * (compared in constant time), or no token is configured. */
static int authorized(const char *authorization, const char *token)
{
	static const char bearer[] = "Bearer ";
	if (!*token)
		return 1;
	const char *a = authorization;
	if (!a || strncasecmp(a, bearer, sizeof bearer - 1) != 0)
		return 0;
	a += sizeof bearer - 1;
	size_t n = strlen(token);
	return strlen(a) == n && sodium_memcmp(a, token, n) == 0;
}

void route_request(const char *method, const char *path, const char *authorization,
                   const char *http_token, route *out)
{
	static const char link[] = "/signal/";
	static const struct {
		const char *path;
		route_kind kind;
	} pages[] = {{"/healthz", ROUTE_HEALTHZ},
	             {"/readyz", ROUTE_READYZ},
	             {"/metrics", ROUTE_METRICS},
	             {"/status", ROUTE_STATUS}};
	memset(out, 0, sizeof *out);
	route_kind page = ROUTE_NOT_FOUND;
	for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++)
		if (strcmp(path, pages[i].path) == 0)
			page = pages[i].kind;
	if (strncmp(path, "/v1", 3) == 0 && (path[3] == '/' || !path[3])) {
		out->kind = !*http_token                             ? ROUTE_API_OFF
		            : !authorized(authorization, http_token) ? ROUTE_API_UNAUTHORIZED
		                                                     : ROUTE_API;
		out->arg = path + 3;
	} else if (strncmp(path, link, sizeof link - 1) == 0) {
		out->kind = ROUTE_SIGNAL;
		out->arg = path + sizeof link - 1;
	} else if (page != ROUTE_HEALTHZ && page != ROUTE_READYZ &&
	           !authorized(authorization, http_token)) {
		out->kind = ROUTE_UNAUTHORIZED;
	} else if (strcmp(method, "POST") == 0) {
		route_poke(path, out);
	} else if (strcmp(method, "HEAD") != 0 && strcmp(method, "GET") != 0) {
		out->kind = ROUTE_BAD_METHOD;
	} else {
		out->kind = page;
	}
}
