/*
 * claimrow.c - decodes the poller's claimed rows into jobs (see claimrow.h).
 * Every number goes through parse_int with its column's range, so a value
 * the claim cannot write (junk, a sign where none fits, a number past its
 * type) refuses the row instead of becoming 0 or a wrapped int.
 */
#include "claimrow.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "parse.h"

/* PostgreSQL's timestamptz range (4714 BC to 294276 AD) in Unix ms: the
 * claim's times are in it, so the difference of two never overflows. */
#define TS_MIN_MS (-210866803200000LL)
#define TS_MAX_MS 9224318016000000LL

/* Column c as an integer in [min, max]: 0, or -CAIRN_EINVAL (NULL too). */
static int int_col(const char *const *v, int c, int64_t min, int64_t max, int64_t *out)
{
	char err[PARSE_ERR_MAX];
	return v[c] && parse_int(v[c], min, max, out, err) == 0 ? 0 : -CAIRN_EINVAL;
}

/* A boolean column as PostgreSQL writes it: "t" or "f". */
static int bool_col(const char *const *v, int c, int *out)
{
	if (!v[c] || (strcmp(v[c], "t") != 0 && strcmp(v[c], "f") != 0))
		return -CAIRN_EINVAL;
	*out = v[c][0] == 't';
	return 0;
}

/* A copy of column c into *out (NULL stays NULL when nullable): 0,
 * -CAIRN_EINVAL or -CAIRN_ENOMEM. */
static int str_col(const char *const *v, int c, int nullable, char **out)
{
	if (!v[c])
		return nullable ? 0 : -CAIRN_EINVAL;
	*out = strdup(v[c]);
	return *out ? 0 : -CAIRN_ENOMEM;
}

/* The claimed message ids, an array_agg of ids as text: "{0}" (the start,
 * MSG_START_ID) or "{12,13,14}". How many (at least one), -CAIRN_EINVAL or
 * -CAIRN_ENOMEM. */
static int msgs_col(const char *text, int64_t **out)
{
	size_t len = text ? strlen(text) : 0;
	if (len < 3 || text[0] != '{' || text[len - 1] != '}')
		return -CAIRN_EINVAL;
	int n = 1;
	for (size_t i = 1; i + 1 < len; i++)
		n += text[i] == ',';
	char *list = strndup(text + 1, len - 2);
	*out = calloc((size_t)n, sizeof **out);
	int k = list && *out ? parse_id_list(list, *out, n) : -CAIRN_ENOMEM;
	free(list);
	return k == -1 ? -CAIRN_EINVAL : k;
}

void claimrow_left_of(const shardmap *map, const char *const *v, claimrow_left *out)
{
	int64_t shard = 0;
	*out = (claimrow_left){.group = -1};
	if (int_col(v, CLAIM_ID, 1, INT64_MAX, &out->run_id) < 0)
		out->run_id = 0;
	if (v[CLAIM_GROUP] && int_col(v, CLAIM_SHARD, 0, INT_MAX, &shard) == 0) {
		out->group = shardmap_group_index(map, v[CLAIM_GROUP]);
		out->shard = (int)shard;
	}
	if (bool_col(v, CLAIM_MARKED, &out->marked) < 0)
		out->marked = 0;
}

int claimrow_decode(const claimrow_env *env, const char *const *v, job **out)
{
	*out = NULL;
	const shardmap *map = env->map;
	int64_t shard, epoch;
	if (!v[CLAIM_GROUP] || int_col(v, CLAIM_SHARD, 0, INT_MAX, &shard) < 0 ||
	    int_col(v, CLAIM_EPOCH, 1, INT64_MAX, &epoch) < 0)
		return -CAIRN_EINVAL;
	int group = shardmap_group_index(map, v[CLAIM_GROUP]);
	if (group < 0 || shardmap_epoch(map, group, (int)shard) != epoch)
		return -CAIRN_ESTATE;
	job *j = calloc(1, sizeof *j);
	if (!j)
		return -CAIRN_ENOMEM;
	j->group = group;
	j->group_name = shardmap_group_name(map, group);
	j->shard = (int)shard;
	j->owner = env->owner;
	j->epoch = epoch;
	j->mono_at_load = env->mono_at_load;
	int64_t attempt, max_attempts, claims, bytes, priority, jfrom, jcuts;
	int cancel, marked, flow;
	int bad = int_col(v, CLAIM_ID, 1, INT64_MAX, &j->run_id) < 0 ||
	          run_status_parse(v[CLAIM_STATUS], &j->status) < 0 ||
	          int_col(v, CLAIM_ATTEMPT, 0, INT_MAX, &attempt) < 0 ||
	          int_col(v, CLAIM_MAX_ATTEMPTS, 1, INT_MAX, &max_attempts) < 0 ||
	          bool_col(v, CLAIM_CANCEL, &cancel) < 0 ||
	          int_col(v, CLAIM_SCHEDULED, TS_MIN_MS, TS_MAX_MS, &j->scheduled_ms) < 0 ||
	          int_col(v, CLAIM_NOW, TS_MIN_MS, TS_MAX_MS, &j->db_now_ms) < 0 ||
	          bool_col(v, CLAIM_MARKED, &marked) < 0 ||
	          /* only a run its claim counted waits counted */
	          (v[CLAIM_QUEUED] &&
	           (!marked || int_col(v, CLAIM_QUEUED, 1, INT64_MAX, &j->queued_seq) < 0)) ||
	          /* a marked execution is counted in runs.claims already */
	          int_col(v, CLAIM_CLAIMS, marked, INT_MAX, &claims) < 0 ||
	          int_col(v, CLAIM_JOURNAL_BYTES, 0, INT64_MAX, &bytes) < 0 ||
	          (v[CLAIM_PARENT] && int_col(v, CLAIM_PARENT, 1, INT64_MAX, &j->parent_id) < 0) ||
	          bool_col(v, CLAIM_FLOW, &flow) < 0 ||
	          int_col(v, CLAIM_PRIORITY, -CAIRN_PRIORITY_MAX, CAIRN_PRIORITY_MAX, &priority) < 0 ||
	          int_col(v, CLAIM_JOURNAL_FROM, 0, INT_MAX, &jfrom) < 0 ||
	          int_col(v, CLAIM_JOURNAL_CUTS, 0, INT_MAX, &jcuts) < 0 ||
	          int_col(v, CLAIM_CHAIN, 1, INT64_MAX, &j->chain_id) < 0 ||
	          int_col(v, CLAIM_CREATED, INT64_MIN, INT64_MAX, &j->created_us) < 0;
	/* A traceparent is only kept here; one that does not parse makes the
	 * run the root of a trace of its own (trace_run), not a refused row. */
	if (!bad && v[CLAIM_TRACEPARENT] && strlen(v[CLAIM_TRACEPARENT]) <= TRACEPARENT_LEN)
		memcpy(j->traceparent, v[CLAIM_TRACEPARENT], strlen(v[CLAIM_TRACEPARENT]) + 1);
	int rc = bad ? -CAIRN_EINVAL : 0;
	if (!rc && (j->nmsgs = msgs_col(v[CLAIM_MSGS], &j->msgs)) < 0)
		rc = j->nmsgs;
	if (!rc)
		rc = str_col(v, CLAIM_WORKFLOW, 0, &j->workflow);
	if (!rc)
		rc = str_col(v, CLAIM_INPUT, 0, &j->input);
	if (!rc)
		rc = str_col(v, CLAIM_LAST_STEP, 1, &j->last_step);
	if (!rc)
		rc = str_col(v, CLAIM_JOURNAL, 1, &j->journal);
	if (!rc)
		rc = str_col(v, CLAIM_SIGNALS, 1, &j->signals);
	if (rc) {
		job_free(j);
		return rc;
	}
	j->attempt = (int)attempt;
	j->max_attempts = (int)max_attempts;
	j->cancel_requested = cancel;
	j->marked = marked;
	j->flow = flow;
	j->priority = (int)priority;
	j->claims = (int)claims - marked;
	j->journal_from = (int)jfrom;
	j->journal_cuts = (int)jcuts;
	j->journal_bytes = bytes;
	if (bytes > env->max_journal_bytes)
		journal_too_large(j, bytes, env->max_journal_bytes);
	*out = j;
	return 0;
}

int claimrow_held_back(const char *const *v)
{
	int64_t n;
	return int_col(v, CLAIM_BACK, 0, INT_MAX, &n) == 0 ? (int)n : 0;
}

int64_t claimrow_next_due_ms(const char *const *v)
{
	int64_t ms;
	return int_col(v, CLAIM_NEXT_DUE, 0, TS_MAX_MS - TS_MIN_MS, &ms) == 0 ? ms : -1;
}
