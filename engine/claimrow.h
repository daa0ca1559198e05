/*
 * claimrow.h - one row of the poller's claim (dispatch.c) decoded into a
 * job (exec.h). The row is text from the database, which whoever can write
 * to the cairn schema controls: each column is taken as the claim writes it
 * (a decimal integer in its column's range, "t" or "f", a known run status,
 * the message ids as "{1,2,3}") or the row is refused, and then the run's
 * messages bring it back to a later claim. Pure: no database, no locks, no
 * log, so any row is fuzzed (tests/fuzz/fuzz_claim.c).
 *
 * Owns: nothing; the job it returns is the caller's (job_free).
 */
#ifndef CAIRN_CLAIMROW_H
#define CAIRN_CLAIMROW_H
#include <stdint.h>

#include "exec.h"
#include "shardmap.h"

/* The claim's columns, in the order of dispatch.c's CLAIM_SELECT. */
enum {
	CLAIM_ID,
	CLAIM_GROUP,
	CLAIM_SHARD,
	CLAIM_EPOCH,
	CLAIM_MSGS,
	CLAIM_WORKFLOW,
	CLAIM_STATUS,
	CLAIM_INPUT,
	CLAIM_ATTEMPT,
	CLAIM_MAX_ATTEMPTS,
	CLAIM_CANCEL,
	CLAIM_SCHEDULED,
	CLAIM_NOW,
	CLAIM_CLAIMS,
	CLAIM_JOURNAL_BYTES,
	CLAIM_LAST_STEP, /* only for a run whose executions stopped poison_after times */
	CLAIM_JOURNAL,
	CLAIM_SIGNALS,
	CLAIM_NEXT_DUE, /* ms until the next message is due; NULL: none */
	CLAIM_MARKED,   /* the claim counted this execution (runs.claims) */
	CLAIM_PARENT,   /* the run that started it as a child; NULL: none */
	CLAIM_FLOW,     /* a run of a concurrency key or under a fleet-wide limit */
	CLAIM_PARKED,   /* of the claim: the runs it held, "{1,2}"; NULL: none */
	CLAIM_BACK,     /* of the claim: due runs its limits held back */
	CLAIM_LIMITS,   /* of the claim: cairn.limits has a row ("t"/"f") */
	CLAIM_QUEUED,   /* counted by the claim, it waits in the queue: its runs.queued_seq;
	                   NULL: it starts at once, or was not counted */
	CLAIM_PRIORITY, /* runs.priority (-1000 to 1000): its place in the worker's queue */
	/* The seq CLAIM_JOURNAL starts at: 0, or the end of what this worker's
	 * journal cache holds of the run (jcache.h). */
	CLAIM_JOURNAL_FROM,
	/* runs.journal_cuts: how many times a retry cut its journal. */
	CLAIM_JOURNAL_CUTS,
	/* The first run of its chain: itself unless it continues one. */
	CLAIM_CHAIN,
	/* runs.traceparent: the run span's parent (trace.h); NULL: none. */
	CLAIM_TRACEPARENT,
	/* runs.created_at in Unix microseconds: the run span's start. */
	CLAIM_CREATED,
	CLAIM_NCOLS
};

/* What a row is decoded against. */
typedef struct claimrow_env {
	const shardmap *map;       /* the runner's shards and their epochs */
	int64_t owner;             /* the runner id the claim was made under */
	int64_t mono_at_load;      /* monotonic ms when the claim was sent */
	int64_t max_journal_bytes; /* cairn.settings: a larger journal does not come */
} claimrow_env;

/*
 * Decodes one row (values[CLAIM_NCOLS], NULL for SQL NULL) into a new job:
 * 0 with *out; -CAIRN_ESTATE when the row is not this runner's (a group not
 * served here, a shard not owned with the row's epoch: being released);
 * -CAIRN_EINVAL when a column is not what the claim writes; -CAIRN_ENOMEM.
 * *out is NULL unless 0.
 */
int claimrow_decode(const claimrow_env *env, const char *const *values, job **out);


/* What a row claimrow_decode refused leaves to undo: its run (0: the id is
 * unreadable), where the run is (group -1: not served here) and whether
 * the claim counted its execution (runs.claims). */
typedef struct claimrow_left {
	int64_t run_id;
	int group, shard, marked;
} claimrow_left;
void claimrow_left_of(const shardmap *map, const char *const *values, claimrow_left *out);

/* The row's CLAIM_NEXT_DUE: ms until the next message is due, or -1 when
 * none is (NULL) or the value is not a number of ms in range. */
int64_t claimrow_next_due_ms(const char *const *values);

/* The row's CLAIM_BACK: how many due runs the claim's limits held back (0
 * when the value is not a count). */
int claimrow_held_back(const char *const *values);
#endif
