/*
 * worker.h - the worker's insides, shared by worker.c (lifecycle and the
 * supervisor loop) and http.c (the operator endpoint that reads this state).
 */
#ifndef CAIRN_WORKER_H
#define CAIRN_WORKER_H
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"
#include "cairn.h"
#include "config.h"
#include "log.h"

/* A loop that stamps a heartbeat; /healthz fails when one goes stale. */
typedef struct worker_loop {
	const char *name;
	int64_t interval_ms;
	_Atomic int64_t stamp_ms; /* monotonic ms of the last stamp; 0: not started */
} worker_loop;

#define WORKER_MAX_LOOPS 8
#define STEP_BUCKETS     12

typedef struct worker_metrics {
	_Atomic uint64_t db_reconnects;
	_Atomic uint64_t detachments;
	_Atomic uint64_t rebalances;
	_Atomic uint64_t lease_losses;
	_Atomic uint64_t singleton_restarts;
	_Atomic uint64_t health_checks;
	_Atomic uint64_t runs_started, runs_completed, runs_failed;
	_Atomic uint64_t step_buckets[STEP_BUCKETS]; /* cumulative counts below each bound */
	_Atomic uint64_t step_count;
	_Atomic uint64_t step_sum_us;
	_Atomic int queue_depth;
	_Atomic int shards_owned;
} worker_metrics;

extern const double WORKER_STEP_BOUNDS_S[STEP_BUCKETS];

typedef struct workflow_def {
	char name[129];
	cairn_workflow_fn fn;
	cairn_workflow_opts opts;
} workflow_def;

/* Which shards this worker owns, shared by the lease loop (writer) and the
 * dispatcher, executors and singletons (readers). */
typedef struct own_group {
	const char *name;
	int32_t lock_key;
	_Atomic int64_t *epoch; /* [shards]; 0 = not owned or being released */
	_Atomic int *busy;      /* [shards]; runs of the shard in flight here */
	int owned;
} own_group;

/* One rebalance round that changed something, for /status. */
typedef struct rebalance_rec {
	int64_t unix_ms;
	char group[64];
	int acquired, released, live_runners;
	char acquired_shards[128], released_shards[128]; /* "0-12,15", cut with "..." */
	char why[96];
} rebalance_rec;
#define REBALANCE_HISTORY 16

struct dispatch;

struct cairn_worker {
	config cfg;
	logger log;
	buf err;
	buf cfgtext;
	char name[128]; /* host:pid */
	int64_t start_mono_ms, start_unix_ms;

	pthread_mutex_t mu; /* guards the fields below and signals cv */
	pthread_cond_t cv;
	int stopping;
	int fatal; /* a configuration mismatch: stop and fail */
	int db_connected;
	int shards;          /* shards_per_group in effect */
	int64_t runner_id;   /* 0 until registered */
	char state[32];      /* starting, running, draining, stopped */
	char not_ready[512]; /* why /readyz is 503; "" when ready */

	own_group own[16]; /* set up once the shard count is known */
	int nown;
	rebalance_rec history[REBALANCE_HISTORY]; /* ring, guarded by mu */
	int nhistory;
	int wake_supervisor; /* a singleton ended: reconsider restarts now */

	workflow_def *flows;
	int nflows;
	struct cairn_singleton **singletons;
	int nsingletons;
	struct dispatch *dispatch;

	worker_loop loops[WORKER_MAX_LOOPS];
	int nloops;
	worker_metrics m;

	struct MHD_Daemon *http;
	int http_port; /* the bound port */
};

int64_t worker_now_ms(void);  /* monotonic */
int64_t worker_unix_ms(void); /* wall clock */
void worker_stamp(worker_loop *l);
/* Condition variables on the monotonic clock, and a timed wait on one. */
void worker_cond_init(pthread_cond_t *cv);
void worker_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);
/* The wait before the next reconnect after `failures` failures (jittered). */
int64_t worker_reconnect_ms(int failures);
/* Waits on w->cv up to ms; returns early when stopping. Caller holds w->mu. */
void worker_wait_locked(cairn_worker *w, int64_t ms);

/* Finds a registered workflow; NULL if none. */
const workflow_def *worker_flow(const cairn_worker *w, const char *name);
/* The epoch this worker holds for (group, shard); 0 if not owned. */
int64_t worker_epoch(cairn_worker *w, int group, int shard);
int worker_group_index(const cairn_worker *w, const char *group);
void worker_history_add(cairn_worker *w, const rebalance_rec *rec);

/* singleton.c: start, stop and restart singletons per ownership; called by
 * the supervisor after every rebalance and whenever a singleton ended. */
void singletons_sync(cairn_worker *w);
/* Stops the singletons on the given shards and waits for them (before unlock). */
void singletons_stop_shards(cairn_worker *w, int group, const int *shards, int n);
void singletons_stop_all(cairn_worker *w);
int64_t singletons_next_ms(cairn_worker *w); /* monotonic ms of the next due restart; 0 none */
void singletons_register_builtin(cairn_worker *w);
void singletons_status(cairn_worker *w, buf *json_array);
void singletons_free(cairn_worker *w);

/* dispatch.c: the poll loop, executor pool and group committer. */
int dispatch_start(cairn_worker *w);
/* Waits (up to deadline_ms, monotonic) until no run of these shards is in flight. */
int dispatch_drain_shards(cairn_worker *w, int group, const int *shards, int n,
                          int64_t deadline_ms);
/* Draining: stop claiming and tell executors to stop at their next durable
 * point; then wait while dispatch_executing() > 0 (up to a deadline); then
 * dispatch_stop_end() joins everything and flushes the committer, unless
 * runs are still executing (cut off), in which case it leaves them. */
void dispatch_stop_begin(cairn_worker *w);
int dispatch_executing(cairn_worker *w);
void dispatch_stop_end(cairn_worker *w, int *clean, int *cut);
void dispatch_status(cairn_worker *w, buf *json_array);
void dispatch_free(cairn_worker *w); /* after dispatch_stop and the supervisor */

/* http.c */
int http_start(cairn_worker *w);
void http_stop(cairn_worker *w);
#endif
