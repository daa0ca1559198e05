/*
 * maint.h - the built-in singletons (DESIGN section 6): cairn.health, the
 * runner health checker, cairn.janitor, the retention janitor,
 * cairn.relay, which forwards wake-ups to the runners, cairn.scheduler, and
 * cairn.backlog (backlog.h), which reads the database's backlog for
 * /metrics.
 */
#ifndef CAIRN_MAINT_H
#define CAIRN_MAINT_H
#include "backlog.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "registry.h"

/* What the built-ins read; must outlive the worker's run. */
typedef struct maint_env {
	const config *cfg; /* runner TTL, heartbeat interval, retention, backoff */
	const logger *log;
	metrics *m;
	/* The relay's way to this worker itself: if runner is this worker's
	 * runner id, tells it what a POST of path would and returns 1 (no HTTP
	 * hop); else 0. */
	int (*poke_self)(void *arg, int64_t runner, const char *path);
	/* The same for a run an enqueue handed to runner (dispatch_push): 1
	 * if this worker took it, else 0 and the run is woken as any other. */
	int (*push_self)(void *arg, int64_t runner, int64_t run);
	void *poke_arg;
	backlog *backlog; /* cairn.backlog's result; NULL: not registered */
} maint_env;

/* Registers cairn.health, cairn.janitor, cairn.scheduler, cairn.relay and
 * cairn.backlog in the first shard group; 0 or -CAIRN_ENOMEM. */
int maint_register(registry *reg, const maint_env *env, buf *err);
#endif
