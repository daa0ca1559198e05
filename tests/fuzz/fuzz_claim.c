/*
 * fuzz_claim.c - the decoding of a claimed row (claimrow.h), whose columns
 * are text that whoever can write to the cairn schema controls: one line of
 * the input per column, in CLAIM_* order, "\N" (as in COPY) or a missing
 * line for SQL NULL. Against a runner that owns shard s of group "default"
 * with epoch s + 1 (shard 5 being released) and shard 3 of "billing" with
 * epoch 7. Any row is either refused or a job that a run can execute: its
 * lease is one the runner holds, it has messages, every count is in its
 * column's range and its two clocks can be subtracted.
 */
#include <assert.h>

#include "cairn.h"
#include "claimrow.h"
#include "fuzz.h"

#define CLAIM_SHARDS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	char *const groups[] = {"default", "billing"};
	shardmap *map;
	if (!s || shardmap_new(groups, 2, &map) < 0 || shardmap_set_shards(map, CLAIM_SHARDS) < 0) {
		free(s);
		return 0;
	}
	for (int i = 0; i < CLAIM_SHARDS; i++)
		shardmap_acquired(map, 0, i, i + 1);
	shardmap_releasing(map, 0, 5);
	shardmap_acquired(map, 1, 3, 7);
	const char *v[CLAIM_NCOLS + 1] = {0}; /* and whatever follows the last column */
	int n = fuzz_lines(s, v, CLAIM_NCOLS + 1);
	for (int c = 0; c < n; c++)
		if (strcmp(v[c], "\\N") == 0)
			v[c] = NULL;
	claimrow_env env = {
	    .map = map, .owner = 11, .mono_at_load = 5000, .max_journal_bytes = 1 << 20};
	job *j = (job *)1; /* not NULL: a refusal must clear it */
	int rc = claimrow_decode(&env, v, &j);
	assert(rc == 0 || rc == -CAIRN_EINVAL || rc == -CAIRN_ESTATE || rc == -CAIRN_ENOMEM);
	assert((rc == 0) == (j != NULL));
	if (j) {
		assert(j->run_id >= 1 && j->owner == env.owner && j->mono_at_load == 5000);
		assert(j->epoch >= 1 && shardmap_epoch(map, j->group, j->shard) == j->epoch);
		assert(strcmp(j->group_name, v[CLAIM_GROUP]) == 0);
		assert(j->nmsgs >= 1 && j->msgs);
		for (int k = 0; k < j->nmsgs; k++)
			assert(j->msgs[k] >= 0);
		assert((unsigned)j->status < RUN_STATUS_COUNT);
		assert(j->attempt >= 0 && j->max_attempts >= 1 && j->claims >= 0);
		assert(j->marked == 0 || j->marked == 1);
		assert(j->queued_seq >= 0 && (j->queued_seq == 0 || j->marked));
		assert(j->cancel_requested == 0 || j->cancel_requested == 1);
		assert(strcmp(j->workflow, v[CLAIM_WORKFLOW]) == 0 &&
		       strcmp(j->input, v[CLAIM_INPUT]) == 0);
		assert(!j->journal == !v[CLAIM_JOURNAL] && !j->signals == !v[CLAIM_SIGNALS] &&
		       !j->last_step == !v[CLAIM_LAST_STEP]);
		/* the age the executor gives a run of an unknown workflow */
		int64_t age = j->db_now_ms - j->scheduled_ms;
		(void)age;
		job_free(j);
	}
	assert(claimrow_next_due_ms(v) >= -1);
	shardmap_free(map);
	free(s);
	return 0;
}
