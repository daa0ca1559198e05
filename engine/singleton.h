/*
 * singleton.h - the singleton supervisor (docs/architecture.md section 6):
 * runs each registered singleton in its own thread while this runner owns
 * the shard its name hashes to, and restarts one that failed after backoff *
 * 2^min(failures-1, 10).
 *
 * Fencing. Shard ownership says which runner should run a singleton; it does
 * not by itself stop two runners running it at once: a runner that lost its
 * lease connection keeps running its singletons until its supervisor notices,
 * while the new owner has the shard already. So each singleton is fenced by
 * a lock of its own: before its thread starts, the supervisor opens a
 * dedicated connection (the fence) and takes the session advisory lock
 * pg_try_advisory_lock(hash_singleton_lock_key(group, name)) on it (the
 * one-bigint form, a lock space apart from the shard locks). If another
 * runner holds it, the start is retried every fence_retry_ms. The lock is
 * given up only after the thread has returned, so a new owner cannot start
 * its copy while the old one still runs, whether or not the old runner has
 * noticed that it lost the shard. If the fence connection dies (the server
 * dropped the lock), cairn_singleton_cancelled() is true at once (it looks at
 * the fence socket) and the supervisor sets the cancel flag on its next round.
 *
 * Stopping never blocks the supervisor: a stop sets the cancel flag and the
 * supervisor reaps the thread when it has returned (it wakes the supervisor).
 * A singleton that has not returned stop_timeout_ms after its cancel is a
 * zombie: it is logged, its thread detached and its fence closed, so another
 * runner can start it; it is never started again in this process while its
 * thread runs. The limit: a zombie still runs, so it may overlap with the
 * copy another runner then starts. Fencing holds for singletons that return
 * within stop_timeout_ms of their cancel; one that ignores its flag is
 * reported, and cairn_worker_run returns CAIRN_ETIMEOUT when one is left at
 * shutdown. Another limit: a fence connection cut without a TCP reset (a
 * partition) is noticed only when TCP gives up on it; the server may drop the
 * lock first.
 *
 * Owns: the singleton threads, their cairn_singleton handles and their fence
 * connections. Every function here runs on the supervisor thread, except
 * singletons_status (any thread) and the cairn_singleton_* calls of the
 * singletons themselves.
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
	const char *conninfo; /* for cairn_singleton_conninfo and the fences */
	const logger *log;
	metrics *m;
	int64_t stop_timeout_ms; /* a cancelled singleton still running then is a zombie */
	int64_t fence_retry_ms;  /* retry a fence held elsewhere this often */
	/* A singleton returned: the supervisor should call singletons_sync soon. */
	void (*wake)(void *arg);
	void *wake_arg;
} singletons_env;

int singletons_new(const singletons_env *env, singletons **out); /* 0 or -CAIRN_ENOMEM */
/* Starts (behind their fences), stops and restarts singletons per ownership,
 * checks the fences, reaps returned threads and declares zombies; after every
 * rebalance and whenever a singleton ended. Never waits for a thread. */
void singletons_sync(singletons *s);
/* Cancels the singletons on these shards; they are reaped by a later sync
 * (their fences keep them from running twice meanwhile). */
void singletons_stop_shards(singletons *s, int group, const int *shards, int n);
/* Cancels every singleton and waits for each up to stop_timeout_ms after its
 * cancel; closes every fence. Returns how many threads are still running
 * (zombies). */
int singletons_stop_all(singletons *s);
/* Monotonic ms of the next due restart, fence retry or stop deadline; 0 for none. */
int64_t singletons_next_ms(singletons *s);
/* Appends the running singletons (zombies marked) to array. */
void singletons_status(singletons *s, struct cJSON *array);
/* After singletons_stop_all; leaks the handles instead if a zombie still runs. */
void singletons_free(singletons *s);
#endif
