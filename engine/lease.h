/*
 * lease.h - runner registry and shard leases on the worker's dedicated lease
 * connection: register and heartbeat, compute the desired shards
 * (assign.c), release the ones no longer ours, acquire ours with two-key
 * session advisory locks and bump their fencing epoch.
 */
#ifndef CAIRN_LEASE_H
#define CAIRN_LEASE_H
#include <libpq-fe.h>
#include <stdint.h>

#include "buf.h"

struct cairn_worker;

typedef struct lease {
	struct cairn_worker *w;
	PGconn *conn;
	int64_t runner_id;
	int shards; /* the shard table itself is w->own (worker.h) */
	int64_t next_rebalance_ms;
	int rebalanced; /* at least one full round since attaching */
} lease;

/*
 * The fence every shard-scoped write carries: it only takes effect while
 * cairn.shard_leases still shows this runner with the epoch it acquired.
 * $1 group, $2 shard, $3 runner id, $4 epoch. The claim and the group commit
 * (dispatch.c) apply the same condition row by row, as a join with
 * cairn.shard_leases on (group, shard, owner, epoch).
 */
#define LEASE_FENCE                                                                                \
	"EXISTS (SELECT 1 FROM cairn.shard_leases WHERE shard_group = $1 AND shard = $2 "          \
	"AND owner = $3 AND epoch = $4)"

int lease_init(lease *l, struct cairn_worker *w, int shards);
void lease_free(lease *l);
/* After a lost connection: forget every shard (the locks died with it). */
void lease_forget(lease *l);
/* Registers (if needed) and heartbeats; 0 or -1 when the connection failed. */
int lease_heartbeat(lease *l);
/* One rebalance round; 1 if ownership changed, 0 if not, -1 on error. */
int lease_rebalance(lease *l);
/* Releases every shard and deregisters (clean shutdown). */
void lease_release_all(lease *l);
#endif
