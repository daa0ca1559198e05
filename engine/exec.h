/*
 * exec.h - runs one claimed run to its next durable point (DESIGN section
 * 5). The poller (dispatch.c) hands an executor a job: the run's row, its
 * journal and its buffered signals, read by the claim. exec_job calls the
 * workflow function from the top; each durable call takes the next sequence
 * number and returns the journaled result when there is one. New results are
 * flushed through env->flush before any further step function runs, and the
 * execution ends with one final commit (commit.h) that says what becomes of
 * the run.
 *
 * Owns: the cairn_ctx of one execution, on its executor's stack. Depends on
 * nothing but its env, so replay is tested without a database.
 */
#ifndef CAIRN_EXEC_H
#define CAIRN_EXEC_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "commit.h"
#include "jcache.h"
#include "log.h"
#include "metrics.h"
#include "registry.h"
#include "state.h"
#include "trace.h"

/* One claimed run. Built by the poller; read by the executor. */
typedef struct job {
	int64_t run_id;
	int group, shard;
	const char *group_name; /* the shardmap's; outlives the job */
	int64_t owner, epoch;   /* the lease the claim was made under */
	char *workflow, *input;
	int64_t parent_id; /* the run that started it as a child, or 0 */
	run_status status;
	int attempt, max_attempts;
	_Atomic int cancel_requested;    /* also set by the poller while the run executes */
	int64_t scheduled_ms;            /* when the run was due (enqueue, delay, retry) */
	int64_t db_now_ms, mono_at_load; /* the database clock, read at claim */
	int claims;           /* executions started (marked) since the run last made progress and
	                         not handed over: each one's worker stopped */
	int marked;           /* this execution is counted (runs.claims): by its claim, or by
	                         its mark as it starts (dispatch.c, mark_started) */
	int64_t queued_seq;   /* counted by its claim while it waits in the queue, as number
	                         runs.queued_seq (0: not queued): its count void until its
	                         runner's started_upto reaches it (0018, start_queued) */
	int solo;             /* executes alone: nothing starts beside it till its end is written */
	int flow;             /* of a concurrency key or a fleet-wide limit: its end frees a slot */
	int priority;         /* runs.priority: the queue is in its order, then first in first out */
	char load_error[320]; /* why the journal or signals did not come, or "" */
	char *journal, *signals; /* JSON arrays (journal.h) or NULL */
	/* The journal's entries before seq journal_from are those of jc, the
	 * run's journal as this worker cached it (jcache.h): taken out of the
	 * cache by the poller, extended by the execution, put back when its
	 * final commit leaves the run suspended. journal_bytes: the stored
	 * size of the entries that came with the claim. */
	int journal_from, journal_cuts;
	int64_t journal_bytes;
	jcache_run *jc;
	int64_t chain_id; /* the first run of its chain: itself unless it continues one */
	/* max_pending_signals at the claim: a box that full may have left
	 * signals out, which a wait for children fetches (0: never). */
	int max_signals;
	char *last_step; /* the last durable step's name, read only when claims >= poison_after */
	int64_t *msgs;   /* claimed message ids */
	/* The step running now (exec_env.step_state; read under the poller's
	 * lock): its name ("" when none), since when and its timeout. */
	char step[129];
	int64_t step_since_mono, step_timeout_ms;
	int nmsgs;
	/* Its workflow's metrics slot (set by exec_job), or NULL. */
	metrics_flow *mx;
	/* Tracing (trace.h): the traceparent stored with the run ("": none)
	 * and when it was enqueued; set by exec_job when its spans are
	 * exported (traced): the run's trace context, and this execution's
	 * span id and start. */
	char traceparent[TRACEPARENT_LEN + 1];
	int64_t created_us;
	int traced;
	trace_ctx trace;
	uint8_t exec_span[8];
	int64_t exec_start_ns;
	struct job *next;
} job;

void job_free(job *j);
/* Sets j's load_error: its journal of bytes is over max_journal_bytes. */
void journal_too_large(job *j, int64_t bytes, int64_t max_bytes);
/* A new commit for j's run, fenced by j's lease; NULL when out of memory. */
commit *job_commit(const job *j);

/* What cairn_child_start needs from the database before it journals a new
 * child (exec_env.child_ids). */
typedef struct exec_ids {
	int64_t *ids; /* values of runs' sequence: a child's id is RUN_ID(value, its shard) */
	int nids;
	/* Children of the run that lost their journal entries: started by an
	 * execution whose entry was not committed (or cut by a retry). */
	struct exec_orphan {
		int64_t id;
		int seq;
		char *workflow;
	} * orphans;
	int norphans;
	int shards; /* shards_per_group */
} exec_ids;
void exec_ids_free(exec_ids *x);

typedef struct exec_env {
	const registry *reg;
	const logger *log;
	metrics *m;
	size_t max_payload_bytes;
	int64_t unknown_workflow_timeout_ms;
	/* CAIRN_RUNNER_TTL: how the unknown-workflow path judges the workers
	 * that serve a workflow live; 0: it does not look (no database). */
	int64_t runner_ttl_ms;
	int poison_after;      /* claims without progress before a run fails as poison */
	const seal_keys *keys; /* what sealed values open with (seal.h); NULL: none */
	const char *conninfo;  /* for the durable calls that write to other runs */
	/* Writes c (journal rows of a running execution) and waits: 0, or
	 * -CAIRN_ESTOP when it was refused (the run must stop). The caller
	 * keeps c. */
	int (*flush)(void *arg, commit *c);
	/* 1 when in-flight work must stop at its next durable point: the worker
	 * drains, or the run's shard is no longer owned with the job's epoch. */
	int (*must_stop)(void *arg, const job *j);
	/* A step of j starts (name, with its timeout, 0: none) or ends (name
	 * NULL), for /status; may be NULL. */
	void (*step_state)(void *arg, job *j, const char *name, int64_t timeout_ms);
	/* n fresh run ids for children of run, and with orphans its children
	 * that lost their journal entries (exec_ids): 0, or -CAIRN_EDB with
	 * why in err (the start is worth a retry). NULL: from the database,
	 * through the executor thread's client. */
	int (*child_ids)(const struct exec_env *env, int64_t run, int n, int orphans, exec_ids *out,
	                 buf *err);
	/* The run's unconsumed signals of children's ends with an id above
	 * after, as the claim renders signals (journal.h): 0 with *json
	 * (malloc'ed, or NULL: none), or -CAIRN_EDB. NULL: from the database. */
	int (*more_ends)(const struct exec_env *env, int64_t run, int64_t after, char **json,
	                 buf *err);
	void *arg;
	tracer *tracer; /* spans of durable calls; NULL: tracing is off */
} exec_env;

/*
 * Executes j to its next durable point and returns its final commit, or
 * NULL when out of memory (the claimed messages bring the run back, and the
 * claim counts as a stop).
 */
commit *exec_job(const exec_env *env, job *j);
/* After an execution, or its final commit, that handled entries journal
 * entries, signals or children: gives the memory freed back to the system
 * when they were many (glibc keeps freed small blocks in their arena). */
void exec_give_back_memory(int entries);
#endif
