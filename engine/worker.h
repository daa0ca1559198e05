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
#define STEP_BUCKETS 12

typedef struct worker_metrics {
	_Atomic uint64_t db_reconnects;
	_Atomic uint64_t detachments;
	_Atomic uint64_t rebalances;
	_Atomic uint64_t lease_losses;
	_Atomic uint64_t singleton_restarts;
	_Atomic uint64_t runs_started, runs_completed, runs_failed;
	_Atomic uint64_t step_buckets[STEP_BUCKETS]; /* cumulative counts below each bound */
	_Atomic uint64_t step_count;
	_Atomic uint64_t step_sum_us;
	_Atomic int queue_depth;
	_Atomic int shards_owned;
} worker_metrics;

extern const double WORKER_STEP_BOUNDS_S[STEP_BUCKETS];

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
	int fatal;            /* a configuration mismatch: stop and fail */
	int db_connected;
	int shards;           /* shards_per_group in effect */
	int64_t runner_id;    /* 0 until registered */
	char state[32];       /* starting, running, draining, stopped */
	char not_ready[512];  /* why /readyz is 503; "" when ready */

	worker_loop loops[WORKER_MAX_LOOPS];
	int nloops;
	worker_metrics m;

	struct MHD_Daemon *http;
	int http_port; /* the bound port */
};

int64_t worker_now_ms(void);
void worker_stamp(worker_loop *l);
/* Waits on w->cv up to ms; returns early when stopping. Caller holds w->mu. */
void worker_wait_locked(cairn_worker *w, int64_t ms);

/* http.c */
int http_start(cairn_worker *w);
void http_stop(cairn_worker *w);
#endif
