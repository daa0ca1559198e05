/*
 * dispatch.h - moves runs from cairn.messages to the executors and back
 * (DESIGN section 5): one poller thread claims the due messages of the
 * shards this runner owns; CAIRN_CONCURRENCY executor threads run them
 * (exec.h); their writes go through the group committer (commit.h), which
 * dispatch starts and stops.
 *
 * Owns: the poller and executor threads, the poller's connection, the job
 * queue, the in-flight set and the committer. A run is in flight from its
 * claim until its final commit is written, and is never claimed twice at
 * once; every in-flight run is counted in the shardmap, so that a release
 * can wait for its shards to be idle.
 */
#ifndef CAIRN_DISPATCH_H
#define CAIRN_DISPATCH_H
#include "config.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "registry.h"
#include "shardmap.h"
#include "trace.h"
#include "watchdog.h"

struct cJSON;
typedef struct dispatch dispatch;

typedef struct dispatch_env {
	const config *cfg; /* database, poll interval and batch, concurrency, limits */
	const logger *log;
	metrics *m;
	tracer *tracer;      /* spans of executions and runs; NULL: tracing is off */
	shardmap *map;       /* read, and runs counted in and out */
	const registry *reg; /* the workflows */
	const lease *lease;  /* the runner id claims are made under */
	watch *loop;         /* the poller's heartbeat */
	watch *commit_loop;  /* the committer's heartbeat */
	watch *mark_loop;    /* the marker's heartbeat */
} dispatch_env;

/* Starts the committer, the executors and the poller; 0 or -CAIRN_ENOMEM
 * (nothing left running). */
int dispatch_start(const dispatch_env *env, dispatch **out);
/* Whether the poller is connected and a claim there has answered (its
 * statements are prepared and planned): a worker is ready only then. */
int dispatch_claiming(dispatch *d);
/* Makes the poller claim now (the shards got work); with cancel, also look
 * for cancelled runs in flight. Any thread. */
void dispatch_wake(dispatch *d, int cancel);
/* The lease loop took (or gave up) shards: claim now, and stay busy until
 * the poller may go idle (see poller_main). Any thread. */
void dispatch_shards_taken(dispatch *d);
/* The same for a wake-up that names the runs that got work (n > 0): the
 * poller claims only theirs, unless it claims all that is due anyway, or
 * more runs were named than it keeps (CAIRN_WAKE_RUNS). */
void dispatch_wake_runs(dispatch *d, int cancel, const int64_t *runs, int n);
/* A run an enqueue handed to this runner (migration 0030, client.c's
 * ST_ENQUEUE_PUSH): the poller reads it and starts it, without a claim, if
 * the hand-over still stands, or claims it by id. 1 if kept, 0 if not (no
 * dispatch, or CAIRN_WAKE_RUNS runs wait already): then wake the runner
 * for it as for any run. Any thread. */
int dispatch_push(dispatch *d, int64_t run);
/* Drops the queued (not yet started) runs of shards of this group that are
 * no longer owned; their messages stay for the next owner. */
void dispatch_drop_queued(dispatch *d, int group);
/*
 * Draining: dispatch_stop_begin stops claiming and tells executors to stop
 * at their next durable point; the caller waits while dispatch_executing()
 * > 0 (up to its deadline); then dispatch_stop_end joins everything and
 * flushes the committer, unless runs are still executing (cut off), in
 * which case it leaves them running and says so in *cut.
 */
void dispatch_stop_begin(dispatch *d);
int dispatch_executing(dispatch *d);
void dispatch_stop_end(dispatch *d, int *clean, int *cut);
/* Executors waiting for a run. */
int dispatch_executors_idle(dispatch *d);
/* Appends the in-flight runs (at most 100) to array. */
void dispatch_status(dispatch *d, struct cJSON *array);
/* Sets, in object, each workflow with runs in flight under its limits
 * (cairn limit) to how many: the slots this worker holds. */
void dispatch_flow(dispatch *d, struct cJSON *object);
/* Of the steps running now: how long the longest has run, and how many
 * have run past their timeout. */
void dispatch_steps(dispatch *d, int64_t *longest_ms, int *overdue);
void dispatch_free(dispatch *d); /* after dispatch_stop_end reported no cut-off */
/* The statements of a claim of one part (a database with parts: Citus)
 * as the poller prepares them, with poll batch bound, appended to out
 * (tests/test_citus.c explains them): the claim of all that is due or of
 * named runs (their parameters are the claim's, then the part's key, the
 * claim's number and its time), what is due in the part, and with limits
 * the part's keys and its mark (seventeen parameters, dispatch.c). */
typedef enum {
	DISPATCH_CLAIM_PART,
	DISPATCH_CLAIM_PART_NAMED,
	DISPATCH_CLAIM_PEEK,
	DISPATCH_CLAIM_KEYS,
	DISPATCH_CLAIM_KEYS_NAMED,
	DISPATCH_CLAIM_MARK
} dispatch_claim_sql;
void dispatch_claim_part_sql(dispatch_claim_sql which, int bound, struct buf *out);
/* The poller's reads of its runs in flight or ended, with parts,
 * appended to out: which runs were cancelled and the keys of runs that
 * ended ($1 the runs, $2 their parts). */
typedef enum { DISPATCH_CANCELLED, DISPATCH_FLOW_KEYS } dispatch_runs_sql;
void dispatch_runs_part_sql(dispatch_runs_sql which, struct buf *out);
#endif
