/* test_assign.c - shard assignment: deterministic, balanced, minimal movement. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "assign.h"

#define SHARDS 4096 /* the default shards_per_group */

static void runners_of(assign_runner *r, int n, int64_t first_id)
{
	for (int i = 0; i < n; i++)
		r[i] = (assign_runner){first_id + i, 100};
}

Test(assign, is_deterministic_and_independent_of_runner_order)
{
	assign_runner a[5], b[5];
	runners_of(a, 5, 1);
	for (int i = 0; i < 5; i++)
		b[i] = a[4 - i];
	int *oa = malloc(SHARDS * sizeof *oa), *ob = malloc(SHARDS * sizeof *ob),
	    *oc = malloc(SHARDS * sizeof *oc);
	assign_shards(a, 5, 7, SHARDS, oa);
	assign_shards(a, 5, 7, SHARDS, oc);
	assign_shards(b, 5, 7, SHARDS, ob);
	for (int s = 0; s < SHARDS; s++) {
		cr_assert_eq(oa[s], oc[s]);
		cr_assert_eq(a[oa[s]].id, b[ob[s]].id, "shard %d differs with runner order", s);
	}
	free(oa);
	free(ob);
	free(oc);
}

static void check_balance(int64_t first_id)
{
	assign_runner r[16];
	int *owner = malloc(SHARDS * sizeof *owner);
	for (int n = 2; n <= 16; n++) {
		runners_of(r, n, first_id);
		assign_shards(r, n, 1, SHARDS, owner);
		int count[16] = {0};
		for (int s = 0; s < SHARDS; s++)
			count[owner[s]]++;
		double mean = (double)SHARDS / n;
		for (int i = 0; i < n; i++)
			cr_assert_leq(count[i], 1.25 * mean,
			              "%d runners: runner %d has %d shards, mean %.1f", n, i,
			              count[i], mean);
	}
	free(owner);
}

Test(assign, no_runner_exceeds_1_25x_the_mean_with_2_to_16_runners)
{
	check_balance(1);
	check_balance(1000003); /* ids of a long-lived database */
}

Test(assign, weights_shift_shares_proportionally)
{
	assign_runner r[2] = {{1, 100}, {2, 300}};
	int *owner = malloc(SHARDS * sizeof *owner);
	assign_shards(r, 2, 1, SHARDS, owner);
	int heavy = 0;
	for (int s = 0; s < SHARDS; s++)
		heavy += owner[s] == 1;
	cr_assert(heavy > 0.70 * SHARDS && heavy < 0.80 * SHARDS, "heavy runner has %d of %d",
	          heavy, SHARDS);
	free(owner);
}

Test(assign, a_joining_runner_takes_shards_only_from_others)
{
	for (int n = 1; n < 16; n++) {
		assign_runner r[16];
		runners_of(r, n + 1, 1);
		int *before = malloc(SHARDS * sizeof *before),
		    *after = malloc(SHARDS * sizeof *after);
		assign_shards(r, n, 3, SHARDS, before);
		assign_shards(r, n + 1, 3, SHARDS, after);
		for (int s = 0; s < SHARDS; s++)
			cr_assert(after[s] == before[s] || after[s] == n,
			          "shard %d moved between old runners %d -> %d", s, before[s],
			          after[s]);
		free(before);
		free(after);
	}
}

Test(assign, a_leaving_runner_moves_only_its_own_shards)
{
	for (int n = 2; n <= 16; n++) {
		for (int leave = 0; leave < n; leave += 3) {
			assign_runner all[16], rest[16];
			runners_of(all, n, 1);
			int k = 0;
			for (int i = 0; i < n; i++)
				if (i != leave)
					rest[k++] = all[i];
			int *before = malloc(SHARDS * sizeof *before),
			    *after = malloc(SHARDS * sizeof *after);
			assign_shards(all, n, 3, SHARDS, before);
			assign_shards(rest, k, 3, SHARDS, after);
			for (int s = 0; s < SHARDS; s++)
				if (before[s] != leave)
					cr_assert_eq(all[before[s]].id, rest[after[s]].id,
					             "shard %d moved though its owner stayed", s);
			free(before);
			free(after);
		}
	}
}

Test(assign, no_runners_means_no_owner)
{
	int owner[4];
	assign_shards(NULL, 0, 1, 4, owner);
	for (int s = 0; s < 4; s++)
		cr_assert_eq(owner[s], -1);
}
