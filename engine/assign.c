/*
 * assign.c - weighted rendezvous (highest random weight) hashing. For each
 * shard every runner draws a pseudo-random u in (0,1) from (runner, group,
 * shard) and scores weight / -ln(u); the highest score owns the shard. A
 * runner's expected share is its weight over the total, and since a score
 * depends only on its own runner, adding or removing a runner changes the
 * winner only where that runner wins or had won. Pure: no I/O, no state.
 */
#include "assign.h"

#include <math.h>

#include "hash.h"

static double score(const assign_runner *r, uint64_t group_key, int shard)
{
	uint64_t h = hash_mix64(hash_mix64((uint64_t)r->id) ^ group_key ^
	                        hash_mix64((uint64_t)shard * 0x9e3779b97f4a7c15ULL));
	/* 53 random bits -> u in (0, 1). */
	double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
	return (double)r->weight / -log(u);
}

int assign_shard(const assign_runner *runners, int nrunners, uint64_t group_key, int shard)
{
	int best = -1;
	double best_score = 0;
	for (int i = 0; i < nrunners; i++) {
		double s = score(&runners[i], group_key, shard);
		/* Ties (practically impossible) go to the lower id, so all agree. */
		if (best < 0 || s > best_score ||
		    (s == best_score && runners[i].id < runners[best].id)) {
			best = i;
			best_score = s;
		}
	}
	return best;
}

void assign_shards(const assign_runner *runners, int nrunners, uint64_t group_key, int shards,
                   int *owner)
{
	for (int s = 0; s < shards; s++)
		owner[s] = assign_shard(runners, nrunners, group_key, s);
}
