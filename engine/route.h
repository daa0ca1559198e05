/*
 * route.h - what a request to the worker's HTTP endpoint asks for (status.c
 * answers it): the page or action, its arguments parsed from the path, and
 * whether it carries the bearer token CAIRN_HTTP_TOKEN asks for. Every page
 * but /healthz and /readyz (which probes call without credentials) and the
 * signal links (their token is their credential) needs that token when it
 * is set: /status, /metrics and the relay's POSTs (the relay sends it; every
 * worker of a fleet has the same token). The /v1 API always needs it: it is
 * off while no token is set. Pure: no worker, no I/O, so any
 * request is fuzzed (tests/fuzz/fuzz_http.c).
 */
#ifndef CAIRN_ROUTE_H
#define CAIRN_ROUTE_H
#include <stdint.h>

#include "client.h"

typedef enum route_kind {
	ROUTE_NOT_FOUND,        /* a GET or HEAD of no page */
	ROUTE_HEALTHZ,          /* GET or HEAD of each page */
	ROUTE_READYZ,           /* ... */
	ROUTE_METRICS,          /* ... */
	ROUTE_STATUS,           /* ... */
	ROUTE_WAKE,             /* POST /wake[/cancel][/RUN,RUN,...] (the wake relay) */
	ROUTE_MEMBERS,          /* POST /members/FINGERPRINT (the wake relay) */
	ROUTE_SIGNAL,           /* /signal/TOKEN, any method (a signal link) */
	ROUTE_UNAUTHORIZED,     /* the bearer token is needed and missing or wrong */
	ROUTE_BAD_POST,         /* a POST that is none of the relay's */
	ROUTE_BAD_METHOD,       /* not GET, HEAD or POST */
	ROUTE_API,              /* /v1/..., any method, with the bearer token (api.h) */
	ROUTE_API_OFF,          /* /v1/... while no CAIRN_HTTP_TOKEN is set */
	ROUTE_API_UNAUTHORIZED, /* /v1/... without the right bearer token */
} route_kind;

typedef struct route {
	route_kind kind;
	const char *arg; /* the token (SIGNAL), fingerprint (MEMBERS) or what follows /v1 (API) */
	int cancel;      /* WAKE: a run in flight may have been cancelled */
	int64_t runs[CAIRN_WAKE_RUNS]; /* WAKE: the runs that got work; none: every due run */
	int nruns;
} route;

/* What method on path asks for, given its Authorization header (NULL:
 * none) and the configured bearer token ("": none needed). */
void route_request(const char *method, const char *path, const char *authorization,
                   const char *http_token, route *out);
/* A POST to path from the wake relay: 0 (ROUTE_WAKE or ROUTE_MEMBERS), or
 * -1 (ROUTE_BAD_POST) for a path that is not one of the relay's. */
int route_poke(const char *path, route *out);
#endif
