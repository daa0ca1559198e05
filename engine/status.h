/*
 * status.h - the worker's HTTP endpoint (status.c): the operator pages
 * (/healthz, /readyz, /metrics, /status), the wake relay's POSTs, the signal
 * links and the /v1 API. It reads the modules through their read functions
 * and the worker's own state through status_env, never the worker itself.
 *
 * Owns nothing: the env and everything it points to are the worker's, and
 * must outlive the HTTP endpoint and the relay (which pokes through it).
 */
#ifndef CAIRN_STATUS_H
#define CAIRN_STATUS_H
#include <pthread.h>
#include <stdint.h>

#include "backlog.h"
#include "config.h"
#include "dispatch.h"
#include "http.h"
#include "lease.h"
#include "metrics.h"
#include "shardmap.h"
#include "singleton.h"
#include "watchdog.h"

struct api;

/* The worker's own state, as the endpoint reports it. The strings are the
 * worker's and valid while status_env.mu is held. */
typedef struct status_view {
	const char *state; /* "starting", "running", "draining", "stopped" */
	const char
	    *not_ready; /* why the worker is not ready; "" when nothing of its own keeps it */
	int stopping;
	int db_connected;
} status_view;

typedef struct status_env {
	/* The bearer token and the signal links' keys; the advertised address
	 * and config_describe are read under mu (the worker rewrites the
	 * address once it has bound its port). */
	const config *cfg;
	const char *runner_name; /* host:pid */
	int64_t start_mono_ms;   /* when the worker started, for the uptime */
	metrics *m;
	watchdog *dog;
	shardmap *map;
	lease *lease;
	dispatch *dispatch;
	singletons *singletons;
	backlog *backlog; /* cairn.backlog's last read, while it runs here */
	struct api *api;  /* the /v1 API; its client pool also delivers signal links */
	/* The worker's lock: guards what view reads and the advertised address. */
	pthread_mutex_t *mu;
	/* The worker's state now; called with mu held. */
	void (*view)(void *arg, status_view *v);
	/* The relay said the live runners changed (their fingerprint). Any thread. */
	void (*members_changed)(void *arg, const char *fingerprint);
	void *arg;
} status_env;

/* The handler of the worker's HTTP endpoint (an http_handler; arg is a
 * status_env). */
void status_handle(void *env, const http_request *q, http_reply *r);
/* Whether /readyz answers 200 now. Any thread. */
int status_ready(const status_env *e);
/* What a POST to path tells this worker: 0, or -1 for a path that is not
 * one of the wake relay's. */
int status_poke(const status_env *e, const char *path);
#endif
