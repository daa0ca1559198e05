/*
 * worker.h - the worker's context: what cairn_worker holds, for worker.c
 * (lifecycle, the supervisor loop, the hooks that connect the modules).
 * No other file includes it: each module gets the narrow env it needs
 * (lease_env, dispatch_env, singletons_env, maint_env, status_env,
 * plugin_env) and never the worker.
 *
 * The worker owns every module below and frees them in cairn_worker_free.
 */
#ifndef CAIRN_WORKER_H
#define CAIRN_WORKER_H
#include <pthread.h>
#include <stdint.h>

#include "backlog.h"
#include "buf.h"
#include "cairn.h"
#include "config.h"
#include "dispatch.h"
#include "http.h"
#include "lease.h"
#include "log.h"
#include "maint.h"
#include "metrics.h"
#include "registry.h"
#include "shardmap.h"
#include "singleton.h"
#include "status.h"
#include "trace.h"
#include "watchdog.h"

#define WORKER_STATE_MAP(X)                                                                        \
	X(WORKER_STARTING, "starting")                                                             \
	X(WORKER_RUNNING, "running")                                                               \
	X(WORKER_DRAINING, "draining")                                                             \
	X(WORKER_STOPPED, "stopped")
#define WORKER_STATE_ENUM(id, name) id,
typedef enum worker_state { WORKER_STATE_MAP(WORKER_STATE_ENUM) } worker_state;
#undef WORKER_STATE_ENUM
const char *worker_state_name(worker_state s);

struct cairn_worker {
	config cfg;
	logger log;
	buf err;
	buf cfgtext;
	char name[128]; /* host:pid */
	int64_t start_mono_ms;
	int citus_checked; /* the recovery interval of Citus was looked at */

	registry *reg; /* from cairn_worker_new */
	shardmap *map; /* from cairn_worker_new */
	lease *lease;  /* from cairn_worker_run on */
	dispatch *dispatch;
	tracer *tracer; /* the span exporter; NULL: tracing is off */
	singletons *singletons;
	http_server *http;
	int http_port; /* the bound port */
	metrics m;
	backlog_env backlog_env;
	backlog *backlog; /* cairn.backlog's result, shown by /metrics */
	watchdog dog;
	maint_env maint;
	struct api *api;   /* the /v1 API; its client pool also delivers signal links */
	status_env status; /* the HTTP endpoint's, from start_modules on */

	pthread_mutex_t mu; /* guards the fields below and signals cv */
	pthread_cond_t cv;
	int stopping;
	int fatal; /* a configuration mismatch: stop and fail */
	int db_connected;
	int wake_supervisor; /* a singleton ended: reconsider restarts now */
	int members_changed; /* the relay said the live runners changed */
	worker_state state;
	char not_ready[1024]; /* why /readyz is 503; "" when ready */
};
#endif
