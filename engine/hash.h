/* hash.h - pure hashing: shard of a key, advisory-lock keys, score mixing. */
#ifndef CAIRN_HASH_H
#define CAIRN_HASH_H
#include <stddef.h>
#include <stdint.h>

#define HASH_FNV64_OFFSET 0xcbf29ce484222325ULL
#define HASH_FNV64_PRIME  0x100000001b3ULL

/* Run ids carry their shard (migration 0025, cairn.new_run_id): a value of
 * cairn.runs_id_seq times RUN_ID_SHARDS (the most shards a group may have)
 * plus the run's shard, so that an id names its shard, hence its part. */
#define RUN_ID_SHARDS      65536
#define RUN_ID_SHARDS_SQL  "65536"
#define RUN_ID(seq, shard) ((int64_t)(seq)*RUN_ID_SHARDS + (shard))

uint64_t hash_fnv1a64(const void *data, size_t n);
/* shard = FNV-1a-64(key) mod shards_per_group. */
int hash_shard(const char *key, int shards_per_group);
/* The first key of a shard group's advisory locks (a signed 32-bit int). */
int32_t hash_group_lock_key(const char *group);
/* The key of a singleton's fence lock: FNV-1a-64 of "cairn.singleton:GROUP:NAME"
 * for the one-bigint form pg_try_advisory_lock(bigint). That form is its own
 * lock space (objsubid 1 in pg_locks), apart from the shard locks' two-int
 * form (objsubid 2), so a fence can never collide with a shard lock. */
int64_t hash_singleton_lock_key(const char *group, const char *name);
/* A well-mixed 64-bit function of x (splitmix64 finaliser). */
uint64_t hash_mix64(uint64_t x);
#endif
