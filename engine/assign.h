/*
 * assign.h - which runner should own each shard: a pure function of the live
 * runners (id, weight) and the shard count. Weighted rendezvous hashing: every
 * runner computes the same map from the same runner set, a joining runner
 * takes shards only from others (never moving one between two old runners),
 * and a leaving runner's shards are the only ones that move.
 */
#ifndef CAIRN_ASSIGN_H
#define CAIRN_ASSIGN_H
#include <stdint.h>

typedef struct assign_runner {
	int64_t id;
	int weight; /* > 0 */
} assign_runner;

/*
 * Fills owner[s] (s < shards) with the index into runners of the desired
 * owner of shard s of group_key's group; -1 everywhere when there are no runners.
 */
void assign_shards(const assign_runner *runners, int nrunners, uint64_t group_key, int shards,
                   int *owner);
/* The desired owner index of one shard (the same answer as assign_shards). */
int assign_shard(const assign_runner *runners, int nrunners, uint64_t group_key, int shard);
#endif
