/*
 * lease.h - runner registry and shard leases (DESIGN section 4), on the
 * supervisor's lease connection: register and heartbeat, compute the desired
 * shards (assign.c), release the ones no longer ours, acquire ours with
 * two-key session advisory locks and bump their fencing epoch. The lease
 * loop is the only writer of the shardmap.
 *
 * Also records what the runner serves (routing by workflow, migration
 * 0020): its workflows and their runtimes, per group, with its runner row,
 * kept fresh in cairn.workflows while it lives, and warns when the live
 * runners of one of its groups serve different workflows.
 *
 * Owns: the runner id, the rebalance history (for /status), what it knows
 * of outsiders holding its shards' locks (for /readyz) and the shardmap
 * writes. It does not own the connection (the supervisor does) and knows
 * nothing of dispatch or singletons: before it unlocks shards it calls the
 * release hook, which stops their work.
 */
#ifndef CAIRN_LEASE_H
#define CAIRN_LEASE_H
#include <libpq-fe.h>
#include <stdint.h>

#include "buf.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "registry.h"
#include "shardmap.h"

struct cJSON;
typedef struct lease lease;

typedef struct lease_env {
	const config *cfg;       /* ttl, weight, advertised address, shutdown timeout */
	const char *runner_name; /* host:pid */
	const logger *log;
	metrics *m;
	shardmap *map;
	const registry *reg; /* the workflows it records that it serves (routing) */
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
/* Registers if needed, then beats (and watches the membership, see
 * lease.c): 0 with *members_changed, or -CAIRN_EDB. */
int lease_heartbeat(lease *l, int *members_changed);
/* Records the live runners' fingerprint heard on cairn_members; whether it
 * differs from the one seen before. Any thread. */
int lease_members_seen(lease *l, const char *fingerprint);
/* How long until the next heartbeat: CAIRN_HEARTBEAT_INTERVAL for the two
 * oldest of several live runners, a third of the TTL for the others. */
int64_t lease_beat_interval(const lease *l);
/* The wanted shards held, at the last look, by backends that are not a
 * live runner's lease backend and that this runner's role may not
 * terminate (see lease.c, outsiders); when any, appends why to reason (for
 * /readyz). Supervisor thread. */
int lease_outsiders(const lease *l, buf *reason);
/* The last rebalance wanted shards that were still held by another runner. */
int lease_pending(const lease *l);
/* One rebalance round: 0 with *changed set, or -CAIRN_EDB. */
int lease_rebalance(lease *l, int *changed);
/* Releases every shard and deregisters (clean shutdown). */
void lease_release_all(lease *l);
/* Appends the last rebalance rounds that changed something, newest first. */
void lease_history(lease *l, struct cJSON *array);
#endif
