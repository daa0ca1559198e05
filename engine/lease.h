/*
 * lease.h - runner registry and shard leases (DESIGN section 4), on the
 * supervisor's lease connection: register and heartbeat, compute the desired
 * shards (assign.c), release the ones no longer ours, acquire ours with
 * two-key session advisory locks and bump their fencing epoch. The lease
 * loop is the only writer of the shardmap.
 *
 * Owns: the runner id, the rebalance history (for /status) and the shardmap
 * writes. It does not own the connection (the supervisor does) and knows
 * nothing of dispatch or singletons: before it unlocks shards it calls the
 * release hook, which stops their work.
 */
#ifndef CAIRN_LEASE_H
#define CAIRN_LEASE_H
#include <libpq-fe.h>
#include <stdint.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "shardmap.h"

struct cJSON;
typedef struct lease lease;

typedef struct lease_env {
	const config *cfg;       /* ttl, weight, advertised address, shutdown timeout */
	const char *runner_name; /* host:pid */
	const logger *log;
	metrics *m;
	shardmap *map;
	/* Before shards of a group are unlocked: stop their work (queued and
	 * in-flight runs, singletons) by deadline_ms (monotonic). */
	void (*release_hook)(void *arg, int group, const int *shards, int n, int64_t deadline_ms);
	/* After every shard was forgotten (the runner row was removed). */
	void (*forget_hook)(void *arg);
	void *hook_arg;
} lease_env;

int lease_new(const lease_env *env, lease **out); /* 0 or -CAIRN_ENOMEM */
void lease_free(lease *l);

/* The runner id in cairn.runners; 0 while not registered. Any thread. */
int64_t lease_runner_id(const lease *l);
/* At least one full rebalance round since registering. */
int lease_rebalanced(const lease *l);

/* The connection to work on (the supervisor's; NULL when it is gone). */
void lease_use(lease *l, PGconn *conn);
/* After a lost connection: forget every shard (the locks died with it) and
 * the registration. */
void lease_forget(lease *l);
/* Registers (if needed) and heartbeats: 0 or -CAIRN_EDB. */
int lease_heartbeat(lease *l);
/* One rebalance round: 0 with *changed set, or -CAIRN_EDB. */
int lease_rebalance(lease *l, int *changed);
/* Releases every shard and deregisters (clean shutdown). */
void lease_release_all(lease *l);
/* Appends the last rebalance rounds that changed something, newest first. */
void lease_history(lease *l, struct cJSON *array);
#endif
