/*
 * metrics.h - the worker's counters and gauges, as atomics any thread may
 * bump without a lock; the status page (status.c) renders them for
 * Prometheus, with the helpers below. Owned by the worker; every module
 * that counts something gets a pointer to it.
 *
 * Run outcomes and steps are counted per workflow, in slots: each workflow
 * registered gets one as it registers (metrics_flow_add), up to
 * CAIRN_METRICS_MAX_WORKFLOWS; the workflows past that, and runs of a
 * workflow not registered here, count in the slot "other". So the label's
 * values are bounded, and counting takes no lock, lookup or allocation:
 * the executor already holds its workflow's definition, which holds its
 * slot.
 */
#ifndef CAIRN_METRICS_H
#define CAIRN_METRICS_H
#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"

#define METRICS_STEP_BUCKETS 12
/* Upper bounds (seconds) of the step-duration histogram's buckets. */
extern const double METRICS_STEP_BOUNDS_S[METRICS_STEP_BUCKETS];

/* The label value of the workflows that have no slot of their own. */
#define METRICS_OTHER "other"

/* What happens to runs, counted per workflow: the counter's name
 * (cairn_runs_NAME_total) and its help. */
/* clang-format off */
#define METRICS_RUN_EVENTS(X)                                                                   \
	X(STARTED, "started", "Run executions started.")                                        \
	X(COMPLETED, "completed", "Runs that completed (counted once their end is written).")   \
	X(FAILED, "failed", "Runs that failed for good: their error, poison, an unknown "       \
	                    "workflow, or results the database refused (once written).")        \
	X(CANCELLED, "cancelled", "Runs whose cancellation a worker carried out (once "         \
	                          "written); runs cancelled before they started end without one.") \
	X(RETRIED, "retried", "Run attempts that failed and start over from the top (the "      \
	                      "workflow returned CAIRN_ERETRY with attempts left).")              \
	X(POISONED, "poisoned", "Runs failed as poison: their workers stopped "                 \
	                        "CAIRN_POISON_AFTER times while running them (also counted "     \
	                        "as failed).")
/* clang-format on */

#define METRICS_RUN_EVENT_ENUM(id, name, help) METRICS_RUNS_##id,
enum metrics_run_event { METRICS_RUN_EVENTS(METRICS_RUN_EVENT_ENUM) METRICS_RUN_NEVENTS };
#undef METRICS_RUN_EVENT_ENUM

/* One workflow's slot. */
typedef struct metrics_flow {
	char name[129]; /* NAME_MAX_BYTES + 1 (parse.h) */
	_Atomic uint64_t runs[METRICS_RUN_NEVENTS];
	_Atomic uint64_t step_failures; /* step attempts that failed (retried or not) */
	/* Steps per bucket (not cumulative: one add per step), the last one
	 * past every bound; their sum. */
	_Atomic uint64_t step_buckets[METRICS_STEP_BUCKETS + 1];
	_Atomic uint64_t step_sum_us;
} metrics_flow;

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
	_Atomic uint64_t runs_pushed;       /* runs an enqueue handed over, started with no claim */
	_Atomic uint64_t runs_pushed_stale; /* hand-overs a claim had ended first: not started */
	_Atomic uint64_t claims_given_back; /* runs claimed that did not execute here (unclaim) */
	_Atomic uint64_t lease_losses;
	/* Backends that held shards this worker wants and are no live runner's
	 * lease backend (outsiders, lease.c): those it terminated, and the
	 * wanted shards held by those it may not terminate at the last look. */
	_Atomic uint64_t outsiders_terminated;
	_Atomic int shards_held_by_outsiders;
	_Atomic uint64_t singleton_restarts;
	_Atomic uint64_t health_checks;
	_Atomic uint64_t runs_locked;     /* executions left alone: encrypted with a key we lack */
	_Atomic uint64_t steps_timed_out; /* attempts that ran past their step's timeout */
	_Atomic uint64_t schedule_fires;  /* runs the scheduler started */
	_Atomic uint64_t flow_held_back;  /* due runs a claim left for a limit (cairn limit) */
	_Atomic uint64_t flow_released;   /* held runs let go when their key had a free slot */
	/* Journal entries executions replayed (answered from the journal). */
	_Atomic uint64_t replayed_entries;
	_Atomic int queue_depth;
	/* 1 while the poller claims with limits (cairn.limits has rows). */
	_Atomic int claim_limits;
	/* The per-workflow slots: written only while workflows register
	 * (before the worker runs, one thread), read by any thread after. */
	metrics_flow *flows;
	int nflows, maxflows;
	metrics_flow other;
	/* Journals (jcache.h): claims of a run that loaded only the entries
	 * after those cached here, and claims that loaded a run's whole
	 * journal; the cache's runs and bytes after the last claim. */
	_Atomic uint64_t journal_cache_hits, journal_loads;
	_Atomic int journal_cache_runs;
	_Atomic int64_t journal_cache_bytes;
	_Atomic uint64_t runs_continued; /* runs that continued as new (cairn_continue_as_new) */
	/* The span exporter (trace.h): spans sent, spans dropped because the
	 * queue was full or their export failed, failed exports, and the
	 * queue's length and capacity (0: tracing is off). */
	_Atomic uint64_t otel_spans_exported, otel_spans_dropped_full, otel_spans_dropped_failed;
	_Atomic uint64_t otel_export_failures;
	_Atomic uint64_t otel_export_retries;
	_Atomic int otel_queue_length, otel_queue_capacity;
} metrics;

/* Room for max workflows' slots (CAIRN_METRICS_MAX_WORKFLOWS): 0 or
 * -CAIRN_ENOMEM. A metrics without it (zeroed) counts everything in
 * "other". */
int metrics_init(metrics *m, int max);
void metrics_free(metrics *m);
/* The slot of workflow name, registering now: a new one while there is
 * room, else "other". Never NULL. Only while workflows register. */
metrics_flow *metrics_flow_add(metrics *m, const char *name);
/* The slot of the workflows without one of their own. */
metrics_flow *metrics_other(metrics *m);

/* Counts one event of a run of f's workflow. */
static inline void metrics_run(metrics_flow *f, enum metrics_run_event e)
{
	atomic_fetch_add_explicit(&f->runs[e], 1, memory_order_relaxed);
}
/* Counts one executed step of f's workflow that took us microseconds. */
void metrics_observe_step(metrics_flow *f, int64_t us);
/* Counts one failed step attempt of f's workflow. */
static inline void metrics_step_failed(metrics_flow *f)
{
	atomic_fetch_add_explicit(&f->step_failures, 1, memory_order_relaxed);
}

/* ------------------------------------------- Prometheus text format 0.0.4 */

/* "# HELP name help" and "# TYPE name type". */
void metrics_family(buf *b, const char *name, const char *type, const char *help);
/* A family of one sample: HELP, TYPE and "name{labels} value" (labels
 * "" or "{a=\"b\"}"). */
void metrics_sample(buf *b, const char *name, const char *type, const char *help,
                    const char *labels, double value);
/* s as the value of a label (backslash, quote and newline escaped), cut to fit out. */
const char *metrics_label(const char *s, char out[256]);
/* The per-workflow families: cairn_runs_*_total, cairn_step_failures_total
 * and the cairn_step_duration_seconds histogram, each with a series per
 * slot (every registered workflow that has one, and "other"). */
void metrics_render_flows(const metrics *m, buf *b);
#endif
