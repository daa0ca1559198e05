/*
 * shardmap.h - the shards this runner owns, per group: the fencing epoch of
 * each, whether it is being released, and how many runs of it are in flight
 * here. Only the lease loop (lease.c) changes ownership; the dispatcher,
 * executors, singletons and the status page read it, and the dispatcher
 * counts runs in and out so that a release can wait until a shard is idle.
 *
 * Owns: its arrays, one mutex and condition variable (for the idle wait).
 * Every reader is lock-free (atomics); a shard is "owned" (shardmap_epoch > 0)
 * only while it is held and not being released.
 */
#ifndef CAIRN_SHARDMAP_H
#define CAIRN_SHARDMAP_H
#include <stdint.h>

#include "buf.h"

struct cJSON;
typedef struct shardmap shardmap;

/* A map of ngroups groups (names copied) with no shards yet; 0 or -CAIRN_ENOMEM. */
int shardmap_new(char *const *groups, int ngroups, shardmap **out);
void shardmap_free(shardmap *m);
/* Sizes the map once the shard count is known (the lease loop, once);
 * 0, -CAIRN_ENOMEM, or -CAIRN_EINVAL when already sized differently. */
int shardmap_set_shards(shardmap *m, int shards);

int shardmap_shards(const shardmap *m); /* 0 until sized */
int shardmap_ngroups(const shardmap *m);
const char *shardmap_group_name(const shardmap *m, int group); /* stable for m's life */
int32_t shardmap_lock_key(const shardmap *m, int group);       /* advisory-lock key1 */
int shardmap_group_index(const shardmap *m, const char *name); /* -1 if not served */

/* The epoch this runner holds (group, shard) with; 0 if not owned or being released. */
int64_t shardmap_epoch(const shardmap *m, int group, int shard);
/* Held by this runner (locked), released or not; for the lease loop. */
int shardmap_held(const shardmap *m, int group, int shard);
/* Held and being released (between shardmap_releasing and _released). */
int shardmap_going(const shardmap *m, int group, int shard);
/* Shards held, over every group. */
int shardmap_owned(const shardmap *m);

/* Lease loop only. */
void shardmap_acquired(shardmap *m, int group, int shard, int64_t epoch);
void shardmap_releasing(shardmap *m, int group, int shard);
void shardmap_released(shardmap *m, int group, int shard);
void shardmap_forget(shardmap *m); /* every shard: the locks died with the connection */

/* Runs in flight: the dispatcher calls begin when it queues a run and end
 * when the run leaves the in-flight set. */
void shardmap_run_begin(shardmap *m, int group, int shard);
void shardmap_run_end(shardmap *m, int group, int shard);
/* Waits until no run of these shards is in flight, or until deadline_ms
 * (monotonic): 0 when idle, -CAIRN_ETIMEOUT when runs remain. */
int shardmap_wait_idle(shardmap *m, int group, const int *shards, int n, int64_t deadline_ms);

/* Appends one object per group to array: {group, owned: "0-12,15", epochs:
 * [{epoch, shards: "0-12"}], count}. */
void shardmap_status(const shardmap *m, struct cJSON *array);
/* Appends ascending shard numbers to out as ranges: "0-12,15,17-20" (after a
 * comma when out is not empty). */
void shardmap_ranges(buf *out, const int *sorted, int n);
#endif
