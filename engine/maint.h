/*
 * maint.h - the built-in singletons (DESIGN section 6): cairn.health, the
 * runner health checker, cairn.janitor, the retention janitor, and
 * cairn.relay, which forwards wake-ups to the runners.
 */
#ifndef CAIRN_MAINT_H
#define CAIRN_MAINT_H
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
	void *poke_arg;
} maint_env;

/* Registers cairn.health, cairn.janitor, cairn.scheduler and cairn.relay in the first shard group;
 * 0 or -CAIRN_ENOMEM. */
int maint_register(registry *reg, const maint_env *env, buf *err);
#endif
