/*
 * singleton.h - the singleton supervisor (DESIGN section 6): runs each
 * registered singleton in its own thread while this runner owns the shard
 * its name hashes to, stops it (cancel flag, then join) before that shard is
 * unlocked, and restarts one that failed after backoff * 2^min(failures-1,
 * 10).
 *
 * Owns: the singleton threads and their cairn_singleton handles. Every
 * function here runs on the supervisor thread, except singletons_status
 * (any thread) and the cairn_singleton_* calls of the singletons themselves.
 */
#ifndef CAIRN_SINGLETON_H
#define CAIRN_SINGLETON_H
#include <stdint.h>

#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "registry.h"
#include "shardmap.h"

struct cJSON;
typedef struct singletons singletons;

typedef struct singletons_env {
	const registry *reg;  /* the definitions; complete before singletons_new */
	const shardmap *map;  /* who owns which shard */
	const lease *lease;   /* the runner id, for cairn_singleton_runner_id */
	const char *conninfo; /* for cairn_singleton_conninfo */
	const logger *log;
	metrics *m;
	/* A singleton returned: the supervisor should call singletons_sync soon. */
	void (*wake)(void *arg);
	void *wake_arg;
} singletons_env;

int singletons_new(const singletons_env *env, singletons **out); /* 0 or -CAIRN_ENOMEM */
/* Starts, stops and restarts singletons per ownership; after every rebalance
 * and whenever a singleton ended. */
void singletons_sync(singletons *s);
/* Stops the singletons on these shards and waits for them (before unlock). */
void singletons_stop_shards(singletons *s, int group, const int *shards, int n);
void singletons_stop_all(singletons *s);
/* Monotonic ms of the next due restart; 0 for none. */
int64_t singletons_next_ms(singletons *s);
/* Appends the running singletons to array. */
void singletons_status(singletons *s, struct cJSON *array);
void singletons_free(singletons *s); /* after singletons_stop_all */
#endif
