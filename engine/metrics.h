/*
 * metrics.h - the worker's counters and gauges, as atomics any thread may
 * bump without a lock; the status page (status.c) renders them for
 * Prometheus. Owned by the worker; every module that counts something gets
 * a pointer to it.
 */
#ifndef CAIRN_METRICS_H
#define CAIRN_METRICS_H
#include <stdatomic.h>
#include <stdint.h>

#define METRICS_STEP_BUCKETS 12
/* Upper bounds (seconds) of the step-duration histogram's buckets. */
extern const double METRICS_STEP_BOUNDS_S[METRICS_STEP_BUCKETS];

typedef struct metrics {
	_Atomic uint64_t db_reconnects;
	_Atomic uint64_t detachments;
	_Atomic uint64_t rebalances;
	_Atomic uint64_t members_told;  /* membership changes the relay told this worker of */
	_Atomic uint64_t poller_busy;   /* times the poller went busy (writers stopped waking it) */
	_Atomic uint64_t idle_deferred; /* times it stayed busy: a writer held a wake lock */
	_Atomic uint64_t claims_all;    /* claims of all that is due in the shards */
	_Atomic uint64_t claims_runs;   /* claims of the runs wake-ups named */
	_Atomic uint64_t claims_new_run;    /* of those, of a new run (CLAIM_NEW in dispatch.c) */
	_Atomic uint64_t claims_given_back; /* runs claimed that did not execute here (unclaim) */
	_Atomic uint64_t lease_losses;
	/* Backends that held shards this worker wants and are no live runner's
	 * lease backend (outsiders, lease.c): those it terminated, and the
	 * wanted shards held by those it may not terminate at the last look. */
	_Atomic uint64_t outsiders_terminated;
	_Atomic int shards_held_by_outsiders;
	_Atomic uint64_t singleton_restarts;
	_Atomic uint64_t health_checks;
	_Atomic uint64_t runs_started, runs_completed, runs_failed;
	_Atomic uint64_t runs_locked;     /* executions left alone: encrypted with a key we lack */
	_Atomic uint64_t steps_timed_out; /* attempts that ran past their step's timeout */
	_Atomic uint64_t schedule_fires;  /* runs the scheduler started */
	_Atomic uint64_t flow_held_back;  /* due runs a claim left for a limit (cairn limit) */
	_Atomic uint64_t flow_released;   /* held runs let go when their key had a free slot */
	/* Journal entries executions replayed (answered from the journal). */
	_Atomic uint64_t replayed_entries;
	_Atomic uint64_t step_buckets[METRICS_STEP_BUCKETS]; /* cumulative, per bound */
	_Atomic uint64_t step_count;
	_Atomic uint64_t step_sum_us;
	_Atomic int queue_depth;
	/* 1 while the poller claims with limits (cairn.limits has rows). */
	_Atomic int claim_limits;
} metrics;

/* Counts one executed step that took us microseconds. */
void metrics_observe_step(metrics *m, int64_t us);
#endif
