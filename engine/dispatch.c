/*
 * dispatch.c - the poller and the executor pool (see dispatch.h):
 *
 *   poller     one thread and connection: claims the due messages of the
 *              shards this runner owns (one statement that also marks the
 *              runs running, returns their journals and says when the next
 *              message of its shards is due), never a run already in
 *              flight, at most as many as the queue has room for. It claims
 *              when woken: by the wake relay (POST /wake, after a write gave
 *              its shards work; one that names its runs is a claim of those
 *              runs alone, by id), by an executor that ended a run, by the
 *              lease loop after it took shards, or by the next due time;
 *              and, as a fallback for a lost wake-up, every
 *              CAIRN_POLL_INTERVAL. It does not LISTEN: PostgreSQL makes
 *              every listening session read every notification, so that
 *              cost would grow with the fleet (see maint.c, cairn.relay).
 *   executors  CAIRN_CONCURRENCY threads running exec_job().
 *   committer  commit.c; an executor continues after a step only once it is
 *              committed, and a run leaves the in-flight set only after its
 *              final commit.
 */
#include "dispatch.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "claimrow.h"
#include "client.h"
#include "clock.h"
#include "commit.h"
#include "db.h"
#include "exec.h"
#include "hash.h"
#include "jcache.h"
#include "pgarr.h"
#include "sqlparam.h"

#define SLOW_CLAIM_MS  20    /* a claim of one batch normally takes a few ms */
#define SOLO_WAIT_MS   10000 /* the longest a run waits to run alone, or for one to end */
#define START_AHEAD_MS 20    /* a START covers the runs due to start in this (start_queued) */

typedef struct flight {
	int64_t run_id;
	job *job; /* valid while the run is in flight */
	int64_t since_unix_ms;
} flight;

struct dispatch {
	dispatch_env env;
	exec_env exec;
	committer *commit; /* the runs' writes */
	committer *marks;  /* execution marks, not waiting for the disk */
	/* The last started_upto a START wrote (start_queued), of runner
	 * upto_runner; starting: a START is in flight (start_cv: it ended).
	 * taken: jobs executors took from the queue; taken_then and
	 * start_then_ms: that count and the time at the last START. */
	int64_t upto_runner, upto;
	int starting;
	int64_t taken, taken_then, start_then_ms;
	pthread_cond_t start_cv;
	pthread_t poller, *execs;
	int nexec, nexec_started;
	int wake_fd;

	pthread_mutex_t mu;
	pthread_cond_t job_cv;  /* queue has a job, or stop */
	pthread_cond_t turn_cv; /* an execution ended: a solo run may start, or others after it */
	int solo;               /* a run that stopped its worker before executes alone, or its end
	                           is not written yet */
	int solo_waiting;       /* such runs waiting for the others to end */
	job *qhead, *qtail;
	int qlen, qcap;
	flight *fl;
	int nfl, capfl;
	int executing;
	int idle; /* executors waiting for a job */
	int exec_stop;
	int big_claim; /* the last claim read more than DB_BUFFER_KEEP_MAX; the poller's */
	_Atomic int stopping;
	_Atomic int claiming;    /* the poller is connected and its first claim there answered */
	_Atomic int cancel_wake; /* a wake-up said a run in flight may be cancelled */
	/* What a wake-up asks of the poller (see poller_main). */
	_Atomic int claim_wanted;         /* claim now */
	_Atomic int recheck;              /* the last claim may have left due messages behind */
	_Atomic int64_t due_hint;         /* Unix ms of a message this worker just wrote; 0: none */
	/* With parts: the same of each part (part_due_hint[shard % nparts]),
	 * nparts as the poller last read it (1 before). */
	_Atomic int64_t part_due_hint[DB_PARTS_MAX];
	_Atomic int nparts;
	int refused;                      /* rows the poller's claim gave back (take_claims) */
	_Atomic int took_shards;          /* shards were taken: busy until it may go idle */
	int64_t targets[CAIRN_WAKE_RUNS]; /* runs wake-ups named, for the next claim; under mu */
	int ntargets;
	/* Runs enqueues handed to this runner (dispatch_push); under mu. */
	int64_t pushed_runs[CAIRN_WAKE_RUNS];
	int npushed;
	int can_take_pushed; /* ST_PUSHED_TAKE is prepared on the poll connection */
	pgarr ended;     /* runs of limited keys that ended: their keys' held runs may go; under mu */
	unsigned char ended_in[DB_PARTS_MAX]; /* their parts (by shard % nparts); under mu */
	int limited;     /* the last claim saw limits (cairn.limits): claim with them */
	unsigned warm;   /* claim statements run in this session (bit per name) */
	int64_t newest_claimed; /* the highest run id claimed here: a named run above it is
	                           most likely new (see claim()) */
	int cold_claim;         /* the last claim was its statement's first in the session */
	claimrow_left *going;   /* the poller's: runs claimed here whose shard was being handed
	                           over, kept out of its claims while it is (see claim()) */
	int ngoing, capgoing;
	int clean;          /* executions that reached a durable point while draining */
	db_settings limits; /* the poller's: read from cairn.settings at each connect */
	jcache *jc;         /* the journals of runs executed here lately; under mu */
};

static void wake_poller(dispatch *d)
{
	uint64_t one = 1;
	ssize_t n = write(d->wake_fd, &one, sizeof one);
	(void)n;
}

/* Wakes the poller to claim. */
static void want_claim(dispatch *d)
{
	atomic_store(&d->claim_wanted, 1);
	wake_poller(d);
}

/* A queue slot or a run in flight was freed: worth a claim only when the
 * last claim may have left due messages behind (it was limited by the
 * queue's room, or it skipped runs in flight), and then only once the
 * queue is down to half, or an executor waits for work. Every claim walks
 * past the runs in flight (their starts stay due until their final
 * commit): a claim for each freed slot paid that walk for a run or two. */
static int refill_due_locked(const dispatch *d)
{
	return d->qlen * 2 <= d->qcap || d->idle > d->qlen;
}

/* refill: refill_due_locked, read while the caller held mu. */
static void freed(dispatch *d, int refill)
{
	if (refill && atomic_load(&d->recheck))
		want_claim(d);
}

/* The earlier of *hint and at_ms (Unix ms; 0: none) into *hint. */
static void earlier_hint(_Atomic int64_t *hint, int64_t at_ms)
{
	int64_t cur = atomic_load(hint);
	while ((cur == 0 || at_ms < cur) && !atomic_compare_exchange_weak(hint, &cur, at_ms))
		;
}

/* A message this worker wrote in shard is due at at_ms (Unix ms): the
 * poller wakes for it then, without a claim before, and with parts claims
 * that shard's part (see poller_main). */
static void due_at(dispatch *d, int shard, int64_t at_ms)
{
	int nparts = atomic_load(&d->nparts);
	if (nparts > 1)
		earlier_hint(&d->part_due_hint[shard % nparts], at_ms);
	earlier_hint(&d->due_hint, at_ms);
	wake_poller(d);
}

/* Puts the journal j's execution kept (j->jc) back in the cache, as the
 * run leaves the in-flight set (so a claim that does not see the run in
 * flight sees its journal cached); what the cache lets go into *gone.
 * Holds d->mu. */
static void keep_journal_locked(dispatch *d, job *j, jcache_run **gone)
{
	if (!j->jc)
		return;
	jcache_put(d->jc, j->jc, gone);
	j->jc = NULL;
	atomic_store(&d->env.m->journal_cache_runs, jcache_count(d->jc));
	atomic_store(&d->env.m->journal_cache_bytes, (int64_t)jcache_bytes(d->jc));
}

/* The run leaves the in-flight set. settled: its final commit was written
 * and leaves nothing of the run due but what next_at_ms says (Unix ms, 0:
 * nothing); otherwise its messages may be due now, and the poller claims. */
static void job_end(dispatch *d, job *j, int settled, int64_t next_at_ms)
{
	jcache_run *gone = NULL;
	pthread_mutex_lock(&d->mu);
	keep_journal_locked(d, j, &gone);
	if (j->solo) {
		d->solo = 0; /* its end is written: the others may start */
		pthread_cond_broadcast(&d->turn_cv);
	}
	for (int i = 0; i < d->nfl; i++)
		if (d->fl[i].run_id == j->run_id) {
			d->fl[i] = d->fl[--d->nfl];
			break;
		}
	if (j->flow) {
		pgarr_add_i64(&d->ended, j->run_id);
		int nparts = atomic_load(&d->nparts);
		if (nparts > 1)
			d->ended_in[j->shard % nparts] = 1;
	}
	int refill = refill_due_locked(d);
	pthread_mutex_unlock(&d->mu);
	jcache_run_free_list(gone);
	shardmap_run_end(d->env.map, j->group, j->shard);
	int flow = j->flow, shard = j->shard;
	job_free(j);
	if (flow)
		wake_poller(d);
	if (!settled) {
		want_claim(d);
		return;
	}
	if (next_at_ms)
		due_at(d, shard, next_at_ms);
	freed(d, refill);
}

static void job_done(dispatch *d, job *j)
{
	job_end(d, j, 0, 0);
}

/* ------------------------------------------------- hooks of exec and commit */

static int exec_flush(void *arg, commit *c)
{
	return committer_wait(((dispatch *)arg)->commit, c);
}

static void exec_step_state(void *arg, job *j, const char *name, int64_t timeout_ms)
{
	dispatch *d = arg;
	pthread_mutex_lock(&d->mu);
	snprintf(j->step, sizeof j->step, "%s", name ? name : "");
	j->step_since_mono = clock_mono_ms();
	j->step_timeout_ms = timeout_ms;
	pthread_mutex_unlock(&d->mu);
}

static int exec_must_stop(void *arg, const job *j)
{
	dispatch *d = arg;
	return atomic_load(&d->stopping) ||
	       shardmap_epoch(d->env.map, j->group, j->shard) != j->epoch;
}

/* Counts an execution of j as it starts, before any code of the run runs
 * (COMMIT_MARK, on the marker: a worker crash cannot lose a committed write,
 * so it does not wait for the disk): a run its claim did not count, one that
 * runs alone. 0, or -CAIRN_ESTOP when the database refused it: the run is
 * not executed here. */
static int mark_started(dispatch *d, job *j)
{
	commit *c = job_commit(j);
	if (!c)
		return -CAIRN_ESTOP;
	c->outcome = COMMIT_MARK;
	int rc = committer_wait(d->marks, c);
	commit_free(c);
	return rc;
}

/* Whether j, queued, counts as started: its runner's started_upto, as
 * the database has it, reached its number. Holds d->mu. */
static int started_locked(const dispatch *d, const job *j)
{
	return j->owner == d->upto_runner && j->queued_seq <= d->upto;
}

/*
 * The number a START for j raises its runner's started_upto to: that of j
 * and of the queued runs of its runner that are not started and are among
 * the next w to start (the window), but none as high as that of a run
 * behind the window, which would count as started with them. The queue is
 * in priority order and the numbers in claim order: a run of a higher
 * priority, claimed later, goes ahead of runs numbered before it, and
 * when j is one (a run behind the window has a lower number) 0: j starts
 * on its own (COMMIT_START_RUN). Holds d->mu.
 */
static int64_t start_window_locked(const dispatch *d, const job *j, int w)
{
	int64_t behind = INT64_MAX;
	int k = 1;
	for (const job *q = d->qhead; q; q = q->next)
		if (q->queued_seq && q->owner == j->owner && !started_locked(d, q) && k++ >= w &&
		    q->queued_seq < behind)
			behind = q->queued_seq;
	if (j->queued_seq > behind)
		return 0;
	int64_t upto = j->queued_seq;
	k = 1;
	for (const job *q = d->qhead; q && k < w; q = q->next)
		if (q->queued_seq && q->owner == j->owner && !started_locked(d, q)) {
			if (q->queued_seq > upto && q->queued_seq < behind)
				upto = q->queued_seq;
			k++;
		}
	return upto;
}

/*
 * A queued run (counted by its claim, runs.queued_seq above its runner's
 * started_upto) starts only once started_upto reached it: until then its
 * count is void, and a run that killed its worker would never fail as
 * poison. One START raises it past the queued runs that are likely to
 * start within START_AHEAD_MS, at the pace executors took runs since the
 * last START, and at least one per executor: those then start without a
 * statement of their own. A crash leaves counted the runs executing and
 * those: as many as executors, or as many as start in START_AHEAD_MS, so
 * that the runs it makes run alone (as a run that stopped its worker does)
 * take about as long to run as the executors would have taken anyway. One
 * START at a time: an executor whose run the START in flight may cover
 * waits for it. 0 (j may start), or -CAIRN_ESTOP when the database refused
 * it: j does not start here.
 */
static int start_queued(dispatch *d, job *j)
{
	if (!j->queued_seq)
		return 0;
	pthread_mutex_lock(&d->mu);
	while (d->starting && !started_locked(d, j))
		pthread_cond_wait(&d->start_cv, &d->mu);
	if (started_locked(d, j)) {
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	int64_t now = clock_mono_ms(), took = d->taken - d->taken_then;
	int64_t ahead =
	    took * START_AHEAD_MS / (now > d->start_then_ms ? now - d->start_then_ms : 1);
	int w = ahead < d->nexec ? d->nexec : ahead > d->qcap ? d->qcap : (int)ahead;
	d->taken_then = d->taken;
	d->start_then_ms = now;
	int64_t upto = start_window_locked(d, j, w);
	d->starting = 1;
	pthread_mutex_unlock(&d->mu);
	commit *c = job_commit(j);
	int rc = -CAIRN_ESTOP;
	if (c) {
		c->outcome = upto ? COMMIT_START : COMMIT_START_RUN;
		c->upto = upto;
		rc = committer_wait(d->marks, c);
		commit_free(c);
	}
	pthread_mutex_lock(&d->mu);
	if (rc == 0 && !upto)
		j->queued_seq = 0; /* no longer numbered: started */
	if (rc == 0 && upto && (j->owner != d->upto_runner || upto > d->upto)) {
		d->upto_runner = j->owner;
		d->upto = upto;
	}
	d->starting = 0;
	pthread_cond_broadcast(&d->start_cv);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

/* Whether j waits counted in the queue and has not started: its count is
 * given back with COMMIT_UNQUEUE, not COMMIT_UNCLAIM. */
static int unstarted(dispatch *d, const job *j)
{
	pthread_mutex_lock(&d->mu);
	int u = j->queued_seq && !started_locked(d, j);
	pthread_mutex_unlock(&d->mu);
	return u;
}

/* A run that failed for good or was cancelled says so once, when its end
 * is written, with what an operator looks for. A failure's error is stored
 * sealed when keys are set: then the log says where to read it instead. */
static void log_end(const dispatch *d, const commit *c)
{
	const job *j = c->tag;
	char run[24], attempt[24];
	int failed = c->status == RUN_FAILED;
	const char *error = failed && d->env.cfg->keys ? "(sealed at rest: cairn status shows it)"
	                    : c->error                 ? c->error
	                                               : "";
	log_kv(d->env.log, failed ? LOG_WARN : LOG_INFO, failed ? "run failed" : "run cancelled",
	       "run", db_i64(run, c->run.id), "workflow", j->workflow, "attempt",
	       db_i64(attempt, c->attempt), "error", error, NULL);
}

/* Counts, per workflow, what a written final commit did to its run. */
static void count_end(const commit *c)
{
	metrics_flow *mx = ((const job *)c->tag)->mx;
	if (!mx)
		return;
	if (c->outcome == COMMIT_RETRY)
		metrics_run(mx, METRICS_RUNS_RETRIED);
	else if (c->outcome == COMMIT_FINISH)
		metrics_run(mx, c->status == RUN_COMPLETED ? METRICS_RUNS_COMPLETED
		                : c->status == RUN_FAILED  ? METRICS_RUNS_FAILED
		                                           : METRICS_RUNS_CANCELLED);
}

/* What an execution's final commit c did, as its span says it. */
static const char *outcome_name(const commit *c)
{
	if (!c->ok)
		return "refused"; /* the fence: the shard moved meanwhile */
	switch (c->outcome) {
	case COMMIT_FINISH: return run_status_name(c->status);
	case COMMIT_SUSPEND: return run_status_name(c->status); /* sleeping, waiting */
	case COMMIT_RETRY: return "retrying";
	case COMMIT_DEFER: return "deferred";
	case COMMIT_MOVE: return "moved";
	case COMMIT_DISCARD: return "discarded";
	default: return "handed_over";
	}
}

/* The spans an execution's final commit c ends (trace.h), once it is
 * written: the execution's, and the run's when the run ended. The run
 * span's id is derived from the run, so whichever worker ends the run
 * exports it once, from the run's enqueue to now. */
static void trace_end(dispatch *d, const commit *c, const job *j)
{
	int ended = c->ok && c->outcome == COMMIT_FINISH;
	int failed = ended && c->status == RUN_FAILED;
	int64_t now = trace_now_ns();
	for (int run = 0; run <= ended; run++) {
		trace_span *s = trace_span_new(run ? "run" : "execute", j->workflow, j->workflow,
		                               j->group_name, failed ? c->error : NULL);
		if (!s)
			return;
		memcpy(s->trace_id, j->trace.trace_id, 16);
		memcpy(s->span_id, run ? j->trace.run_span : j->exec_span, 8);
		memcpy(s->parent, run ? j->trace.parent : j->trace.run_span, 8);
		s->kind = run ? TRACE_RUN : TRACE_EXECUTION;
		s->start_ns = run ? j->created_us * 1000 : j->exec_start_ns;
		s->end_ns = now;
		s->run_id = j->run_id;
		s->attempt = c->attempt ? c->attempt : j->attempt;
		s->shard = j->shard;
		s->outcome = outcome_name(c);
		s->error_type = failed ? "cairn.run_failed" : NULL;
		tracer_emit(d->env.tracer, s);
	}
}

/* The committer wrote children a run started: most are in this worker's
 * shards, due now. */
static void children_due(void *arg)
{
	want_claim(arg);
}

/* The committer wrote (or gave up on) an execution's final commit. */
static void on_final(void *arg, commit *c)
{
	job *j = c->tag;
	if (j->traced)
		trace_end(arg, c, j);
	if (c->ok)
		count_end(c);
	if (c->ok && c->outcome == COMMIT_FINISH &&
	    (c->status == RUN_FAILED || c->status == RUN_CANCELLED))
		log_end(arg, c);
	/* Only a run that suspended here wakes to its journal as it was. */
	if (!c->ok || c->outcome != COMMIT_SUSPEND) {
		jcache_run_free(j->jc);
		j->jc = NULL;
	}
	int settled = 0;
	int64_t next_at = 0;
	if (c->ok)
		switch (c->outcome) {
		case COMMIT_FINISH:
			settled = 1;
			/* Its successor (cairn_continue_as_new) is due now. */
			if (c->next_input)
				next_at = clock_unix_ms();
			break;
		case COMMIT_MOVE: /* its group's owner claims it now */
		case COMMIT_DISCARD: settled = 1; break;
		case COMMIT_SUSPEND:
		case COMMIT_RETRY:
		case COMMIT_DEFER:
			settled = 1;
			next_at = c->at_ms;
			break;
		default: break; /* a hand-over: its messages stay */
		}
	/* A wait for children met as it began: the run is due again. */
	job_end(arg, j, settled && !c->woken, next_at);
	/* Freed here, on the committer's thread, after its execution gave
	 * back what it freed: a parent's final commit takes the ends of all
	 * its children. */
	int size = c->nrows + c->nsig + c->nkids + c->await.n;
	commit_free(c);
	exec_give_back_memory(size);
}

/* ------------------------------------------------------------- executors */

/* A claimed run that will not execute here: its messages stay for the next
 * owner, and a count its claim made is given back (fenced: a shard that
 * moved meanwhile keeps it, and the run counts one stop too many). */
static void give_back(dispatch *d, job *j)
{
	if (unstarted(d, j)) {
		commit *u = job_commit(j);
		if (!u) {
			job_done(d, j); /* its count stays void: it stays numbered */
			return;
		}
		u->outcome = COMMIT_UNQUEUE;
		u->tag = j;
		committer_submit_final(d->marks, u);
		return;
	}
	commit *c = j->marked ? job_commit(j) : NULL;
	if (!c) {
		job_done(d, j);
		return;
	}
	c->outcome = COMMIT_UNCLAIM;
	c->tag = j;
	committer_submit_final(d->commit, c);
}

/*
 * A run whose worker stopped while running it (runs.claims > 0) runs
 * alone until it makes progress: it waits until nothing else executes
 * here, and nothing starts beside it until its final write is done. A stop
 * counts against every run executing at the time, and the first one cannot
 * tell the culprit from the others; every further stop is the lone run's
 * own. So an innocent run reaches CAIRN_POISON_AFTER only if its worker is
 * killed from outside while it runs alone, again and again, and a culprit
 * takes innocent runs down with it once at most. Isolation waits at most
 * SOLO_WAIT_MS either way (a long step of another run, or of the solo run
 * itself, must not stall the worker): past that the run goes on beside
 * the others. Holds d->mu; returns at once when the dispatcher stops.
 * Returns whether the run executes alone.
 */
static int wait_turn_locked(dispatch *d, const job *j, int solo)
{
	int64_t deadline = clock_mono_ms() + SOLO_WAIT_MS;
	if (solo)
		d->solo_waiting++;
	for (;;) {
		int blocked = solo ? d->executing > 0 || d->solo : d->solo || d->solo_waiting > 0;
		int64_t left = deadline - clock_mono_ms();
		if (!blocked || atomic_load(&d->stopping) || left <= 0)
			break;
		clock_cond_wait_ms(&d->turn_cv, &d->mu, left);
	}
	if (!solo)
		return 0;
	d->solo_waiting--;
	if (atomic_load(&d->stopping))
		return 0; /* it will not run here */
	if (!d->solo && d->executing == 0)
		return 1;
	char id[24];
	log_kv(d->env.log, LOG_WARN,
	       "a run that stopped its workers before runs beside others: nothing else ended in "
	       "time",
	       "run", db_i64(id, j->run_id), "workflow", j->workflow, NULL);
	return 0;
}

/* An execution ended (or did not start after all). A solo run's turn ends
 * with its job (job_end), once its final write is done: a worker that
 * stops before that counts the stop against it, so nothing may run beside
 * it until then. */
static void end_turn(dispatch *d, int ran)
{
	pthread_mutex_lock(&d->mu);
	d->executing--;
	if (ran && atomic_load(&d->stopping))
		d->clean++;
	pthread_cond_broadcast(&d->turn_cv);
	pthread_mutex_unlock(&d->mu);
}

static void *executor_main(void *arg)
{
	dispatch *d = arg;
	for (;;) {
		pthread_mutex_lock(&d->mu);
		d->idle++;
		while (!d->qhead && !d->exec_stop)
			pthread_cond_wait(&d->job_cv, &d->mu);
		d->idle--;
		job *j = d->qhead;
		if (!j) {
			pthread_mutex_unlock(&d->mu);
			break;
		}
		d->qhead = j->next;
		if (!d->qhead)
			d->qtail = NULL;
		d->qlen--;
		d->taken++;
		atomic_store(&d->env.m->queue_depth, d->qlen);
		/* A run that will fail as poison runs none of its code: it need
		 * not wait for a turn alone. */
		int solo = j->claims > 0 && j->claims < d->env.cfg->poison_after;
		solo = wait_turn_locked(d, j, solo);
		int stale = exec_must_stop(d, j);
		if (!stale) {
			d->executing++;
			d->solo |= solo;
			j->solo = solo;
		}
		int refill = refill_due_locked(d);
		pthread_mutex_unlock(&d->mu);
		freed(d, refill); /* a slot in the queue */
		if (stale || start_queued(d, j) < 0 || (!j->marked && mark_started(d, j) < 0)) {
			if (!stale)
				end_turn(d, 0);
			give_back(d, j); /* not started: its messages stay for the next owner */
			continue;
		}
		commit *c = exec_job(&d->exec, j);
		end_turn(d, 1);
		if (c) {
			c->tag = j;
			committer_submit_final(d->commit, c);
		} else {
			job_done(d, j);
		}
	}
	return NULL;
}

/* ---------------------------------------------------------------- poller */

/* The ids of the runs in flight here, as an array literal, and with parts
 * their parts in in (when not NULL, by shard % nparts); how many of them
 * are among the n runs named (all of them when n is 0). */
static int inflight_ids(dispatch *d, pgarr *out, unsigned char *in, const int64_t *named, int n)
{
	int among = 0, nparts = atomic_load(&d->nparts);
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < d->nfl; i++) {
		pgarr_add_i64(out, d->fl[i].run_id);
		if (in && nparts > 1)
			in[d->fl[i].job->shard % nparts] = 1;
		int k = 0;
		while (k < n && named[k] != d->fl[i].run_id)
			k++;
		among += n == 0 || k < n;
	}
	pthread_mutex_unlock(&d->mu);
	return among;
}

/*
 * The claim: takes the due messages and starts of this runner's shards,
 * marks their runs running, and returns each run with its journal, its unconsumed
 * signals and runs.claims: how many executions started since the run last
 * made progress (each is marked as it starts, see mark_started). The journal and
 * the signals come unordered (an ordered aggregate costs a sort per run;
 * journal.c indexes steps by seq), every number as text (none passes
 * through a JSON double), and every stored JSON value as a JSON string, so
 * a deep or odd value is parsed only when a replay needs it. A run whose
 * journal is over max_journal_bytes (cairn.settings) comes without it and
 * fails alone instead of making the whole claim too large; at most
 * max_pending_signals of its oldest signals come.
 */
#define MSG_START_SQL "0::bigint"
/* A claim of one part (a database with parts, which `cairn migrate --citus`
 * made: docs/architecture.md, "On Citus") filters every table it reads by
 * the part's key (claim_text), where the claims of one server have
 * nothing. */
#define IN_PART(a) SQLPARAM_IN_PART(a)
/* Where the journal of claimed run r (its row) starts: at the end of what
 * this worker's journal cache holds of it ($9 the cached runs, $10 where
 * each ends, $11 the count of cuts each was read with; jcache.h) while
 * the run's count is still that, else at seq 0: a retry cut it since. */
#define CLAIM_JFROM                                                                                \
	"CASE WHEN ($11::int[])[array_position($9::bigint[], r.id)] = r.journal_cuts "             \
	"THEN ($10::int[])[array_position($9::bigint[], r.id)] ELSE 0 END"
_Static_assert(MSG_START_ID == 0, "the claims name a start MSG_START_ID");
/* A claimed run's count of executions since its last progress
 * (runs.claims) as a claim reads it, of the run's row r: void (0) while the
 * runner whose claim counted it as it was queued has not started it
 * (queued_seq above that runner's started_upto, migration 0018): it never
 * ran there, and that runner may have crashed. Void too for a run an
 * enqueue handed to this runner ($1: queued_by, no queued_seq) that the
 * runner has not in flight (a claim passes those by): its notification
 * never came (the relay was not listening yet, say), and the runner that
 * would have run it is the one claiming, alive. */
#define CLAIM_COUNT                                                                                \
	"CASE WHEN r.queued_by IS NOT NULL AND (r.queued_seq IS NULL AND r.queued_by = $1 "        \
	"  OR EXISTS (SELECT 1 FROM cairn.runners w "                                              \
	"             WHERE w.id = r.queued_by AND r.queued_seq > w.started_upto)) "               \
	"THEN 0 ELSE r.claims END"

/* The runs of the due messages and starts (CTE due), one row each. The ids
 * are aggregated in no particular order (nothing reads them in order): on
 * PostgreSQL 15 an ordered aggregate sorts every group on its own, which
 * took a fifth of a claim of 130 runs. */
#define CLAIM_GROUP                                                                                \
	"d AS (SELECT run_id, max(epoch) AS epoch, array_agg(id) AS ids, "                         \
	"        min(deliver_at) AS at, min(id) AS first, max(prio) AS prio "                      \
	"      FROM due GROUP BY run_id), "

/*
 * Flow control (migration 0010), over the runs of the due messages and
 * starts (CTE due, each with its priority):
 *   slot   a run of a key with a key limit executes only while the key's
 *          runs in flight here ($2) and those before it in this claim fit
 *          in key_concurrency; a start that does not fit is held (park) and
 *          let go when a slot frees, the poller calling cairn.flow_release
 *          for it after this commit;
 *   kok    a start of a key with a key rate takes one of its starts
 *          (cairn.flow_take, under the rate's row lock);
 *   wok    a start of a workflow with a rate, the same, fleet-wide.
 * A start refused by a rate is moved (push) to when the rate allows it
 * (push_at), one interval after another in claim order; the claim's next
 * due time includes those moves.
 */
#define CLAIM_FLOW_KEYS                                                                            \
	CLAIM_GROUP                                                                                \
	"fl AS (SELECT r.workflow, r.concurrency_key AS ck, count(*) AS n FROM cairn.runs r "      \
	"       WHERE " IN_PART("r") "r.id = ANY ($2::bigint[]) AND r.concurrency_key IS NOT NULL " \
	"         AND EXISTS (SELECT 1 FROM cairn.limits) GROUP BY 1, 2), "                        \
	"g AS (SELECT d.*, r.workflow, r.concurrency_key AS ck, r.status AS st, "                  \
	"        " CLAIM_COUNT " AS cl, " CLAIM_JFROM " AS jfrom, "                                \
	"        r.finished_at IS NOT NULL AS done, f.key_concurrency AS kc, f.key_rate, "         \
	"        f.key_rate_period_ms, f.rate, f.rate_period_ms, f.concurrency AS gc, "            \
	"        coalesce(fl.n, 0) AS used, "                                                      \
	"        NOT (r.finished_at IS NOT NULL) AND d.first = 0 AS start "                        \
	"      FROM d JOIN cairn.runs r ON " IN_PART("r") "r.id = d.run_id "                       \
	"      LEFT JOIN cairn.limits f ON f.workflow = r.workflow "                               \
	"      LEFT JOIN fl ON fl.workflow = r.workflow AND fl.ck = r.concurrency_key), "          \
	"s AS (SELECT g.*, done OR ck IS NULL OR kc IS NULL OR used + row_number() OVER ("         \
	"        PARTITION BY workflow, ck ORDER BY prio DESC, at, first) <= kc AS slot FROM g), "
#define CLAIM_FLOW_FLEET                                                                           \
	"gs AS (SELECT w.workflow, cairn.flow_slots(w.workflow, w.n, w.want) AS allowed "          \
	"       FROM (SELECT workflow, min(gc) AS n, count(*)::int AS want FROM s "                \
	"             WHERE slot AND NOT done AND gc IS NOT NULL GROUP BY workflow "               \
	"             ORDER BY workflow) w), "                                                     \
	"s1 AS (SELECT s.*, gs.allowed IS NULL OR row_number() OVER ( "                            \
	"         PARTITION BY s.workflow, gs.allowed IS NULL ORDER BY prio DESC, at, first) "     \
	"         <= gs.allowed AS gok "                                                           \
	"       FROM s LEFT JOIN gs ON gs.workflow = s.workflow AND s.slot AND NOT s.done), "      \
	"kr AS (SELECT w.workflow, w.ck, t.* FROM (SELECT workflow, ck, min(key_rate) AS n, "      \
	"         min(key_rate_period_ms) AS p, count(*)::int AS want FROM s1 "                    \
	"         WHERE slot AND gok AND start AND ck IS NOT NULL AND key_rate IS NOT NULL "       \
	"         GROUP BY workflow, ck ORDER BY workflow, ck) w, "                                \
	"       LATERAL cairn.flow_take(w.workflow, w.ck, w.n, w.p, w.want) t), "                  \
	"s2 AS (SELECT s1.*, kr.allowed AS kal, kr.next_at AS knext, kr.step AS kstep, "           \
	"         row_number() OVER (PARTITION BY s1.workflow, s1.ck, kr.allowed IS NULL "         \
	"                            ORDER BY prio DESC, at, first) AS krank "                     \
	"       FROM s1 LEFT JOIN kr ON kr.workflow = s1.workflow AND kr.ck = s1.ck "              \
	"         AND s1.slot AND s1.gok AND s1.start), "                                          \
	"wr AS (SELECT w.workflow, t.* FROM (SELECT workflow, min(rate) AS n, "                    \
	"         min(rate_period_ms) AS p, count(*)::int AS want FROM s2 "                        \
	"         WHERE slot AND gok AND start AND (kal IS NULL OR krank <= kal) "                 \
	"           AND rate IS NOT NULL GROUP BY workflow ORDER BY workflow) w, "                 \
	"       LATERAL cairn.flow_take(w.workflow, '', w.n, w.p, w.want) t), "                    \
	"sw AS (SELECT s2.*, wr.allowed AS wal, wr.next_at AS wnext, wr.step AS wstep, "           \
	"         row_number() OVER (PARTITION BY s2.workflow, wr.allowed IS NULL "                \
	"                            ORDER BY prio DESC, at, first) AS wrank "                     \
	"       FROM s2 LEFT JOIN wr ON wr.workflow = s2.workflow AND s2.slot AND s2.gok "         \
	"         AND s2.start AND (s2.kal IS NULL OR s2.krank <= s2.kal)), "                      \
	"s3 AS (SELECT sw.*, greatest( "                                                           \
	"         CASE WHEN kal IS NOT NULL AND krank > kal "                                      \
	"              THEN knext + (krank - kal - 1) * kstep END, "                               \
	"         CASE WHEN wal IS NOT NULL AND wrank > wal "                                      \
	"              THEN wnext + (wrank - wal - 1) * wstep END) AS push_at FROM sw), "          \
	CLAIM_FLOW_OK                                                                              \
	"take AS (INSERT INTO cairn.slots (run_id, workflow, runner_id) "                          \
	"         SELECT run_id, workflow, $1 FROM ok WHERE gc IS NOT NULL AND NOT done "          \
	"         ON CONFLICT (run_id) DO UPDATE SET runner_id = EXCLUDED.runner_id, "             \
	"           taken_at = EXCLUDED.taken_at), "
#define CLAIM_FLOW_OK                                                                              \
	"ok AS (SELECT * FROM s3 WHERE slot AND gok AND (kal IS NULL OR krank <= kal) "            \
	"         AND (wal IS NULL OR wrank <= wal)), "
#define CLAIM_FLOW_HOLD                                                                            \
	"park AS (UPDATE cairn.runs r SET held = true, start_at = NULL, updated_at = now() "       \
	"         FROM s3 WHERE " IN_PART("r") "r.id = s3.run_id AND NOT s3.slot AND s3.start "    \
	"           AND s3.st = 'pending' AND s3.ids = '{0}' RETURNING r.id), "                    \
	"push AS (UPDATE cairn.runs r SET start_at = s3.push_at "                                  \
	"         FROM s3 WHERE " IN_PART("r") "r.id = s3.run_id AND s3.slot AND s3.gok "          \
	"           AND s3.start "                                                                 \
	"           AND ((s3.kal IS NOT NULL AND s3.krank > s3.kal) "                              \
	"             OR (s3.wal IS NOT NULL AND s3.wrank > s3.wal)) "                             \
	"         RETURNING r.start_at), "                                                         \
	"fx AS (SELECT (SELECT array_agg(id)::text FROM park) AS parked, "                         \
	"         EXISTS (SELECT 1 FROM cairn.limits) AS limited, "                                \
	"         (SELECT count(*) FROM s3) - (SELECT count(*) FROM ok) AS back, "                 \
	"         (SELECT ceil(extract(epoch FROM min(start_at) - now()) * 1000)::bigint "         \
	"          FROM push) AS pushed), "
#define CLAIM_FLOW CLAIM_FLOW_KEYS CLAIM_FLOW_FLEET CLAIM_FLOW_HOLD
/* Without limits (cairn.limits is empty): every due run is admitted. A
 * claim says whether limits exist (fx.limited), and the poller's next
 * claim is the one with limits from then on: a limit holds from each
 * worker's first claim after it was set. */
#define CLAIM_FX_PLAIN                                                                             \
	"fx AS (SELECT NULL::text AS parked, EXISTS (SELECT 1 FROM cairn.limits) AS limited, "     \
	"         0::bigint AS back, NULL::bigint AS pushed), "
#define CLAIM_PLAIN                                                                                \
	CLAIM_GROUP                                                                                \
	"ok AS (SELECT d.*, " CLAIM_COUNT " AS cl, r.finished_at IS NOT NULL AS done, "            \
	"         r.concurrency_key AS ck, " CLAIM_JFROM " AS jfrom, "                             \
	"         NULL::int AS kc, NULL::int AS gc "                                               \
	"  FROM d JOIN cairn.runs r ON " IN_PART("r") "r.id = d.run_id), " CLAIM_FX_PLAIN
/* What a claimed run (r, with js.bytes: its journal's size from seq
 * jfrom on) brings to its execution: the last step it completed (only when
 * it stopped its workers before), its journal from seq jfrom on, each
 * entry with its stored size, unless over $4 bytes (none at all, without a
 * query, for a run that has no steps yet or none past jfrom), its oldest
 * $5 signals: its own, and those sent to the run it continues as new
 * while that one ended (see cont in commit.c). Then where its journal
 * starts, how many times a retry cut it, and the first run of its
 * chain. */
/* What tracing needs of run r (trace.h): its stored traceparent and its
 * enqueue time, in Unix microseconds. */
#define CLAIM_TRACE                                                                                \
	"r.traceparent AS tp, (extract(epoch FROM r.created_at) * 1000000)::bigint AS created"
#define CLAIM_RUN_DATA(jfrom)                                                                      \
	"CASE WHEN r.claims >= $6 THEN (SELECT s.name FROM cairn.steps s "                         \
	"  WHERE " IN_PART(                                                                        \
	    "s") "s.run_id = r.id "                                                                \
	         "  AND s.status IN ('completed', 'timed_out') ORDER BY s.seq DESC LIMIT 1) "      \
	         "END AS last_step, "                                                              \
	         "CASE WHEN js.bytes > 0 AND js.bytes <= $4 THEN "                                 \
	         "(SELECT json_agg(json_build_object('seq', s.seq::text, 'name', s.name, "         \
	         "   'kind', s.kind, "                                                             \
	         "   'status', s.status, 'output', s.output::text, 'error', s.error, "             \
	         "   'attempts', s.attempts::text, "                                               \
	         "   'wake_at', ((extract(epoch FROM s.wake_at) * 1000)::bigint)::text, "          \
	         "   'started_at', ((extract(epoch FROM s.started_at) * 1000)::bigint)::text, "    \
	         "   'size', pg_column_size(s.*)::text))::text "                                   \
	         " FROM cairn.steps s WHERE " IN_PART(                                             \
	             "s") "s.run_id = r.id AND s.seq >= " jfrom ") "                               \
	                  "END AS journal, "                                                       \
	                  "(SELECT json_agg(json_build_object('id', g.id::text, 'name', g.name, "  \
	                  "   'payload', g.payload::text))::text "                                 \
	                  " FROM (SELECT g.id, g.name, g.payload FROM cairn.signals g "            \
	                  "       WHERE " IN_PART(                                                 \
	                      "g") "g.run_id = ANY (ARRAY[r.id, r.continued_from]) "               \
	                           "         AND g.consumed_by_seq IS NULL ORDER BY g.id LIMIT "   \
	                           "$5) g) AS signals, " jfrom                                     \
	                           " AS jfrom, r.journal_cuts AS jcuts, coalesce(r.chain_id, "     \
	                           "r.id) AS chain, " CLAIM_TRACE
/* CLAIM_RUN_DATA of the claims of CLAIM_MARK (the admitted run: d) and of
 * SQL_CLAIM_ONE (the run as it was: o). */
#define CLAIM_RUN_DATA_D CLAIM_RUN_DATA("d.jfrom")
#define CLAIM_RUN_DATA_O CLAIM_RUN_DATA("o.jfrom")
/* The admitted runs (CTE ok): marked running, with what their executions
 * need. Each execution is counted here (mark), not by the marker: not a
 * run that will run alone or is finished, which is counted as it starts,
 * or not at all. The first $7 runs (the executors idle now) start at once;
 * the others wait in the queue, numbered in the order they wait
 * (queued_seq: this claim's number from cairn.claim_seq, times more than
 * the largest poll batch, plus the rank), and their count stays void until
 * this runner's started_upto reaches that number (see CLAIM_COUNT,
 * start_queued). Counted ones come first, those that start at once before
 * those that wait; then by priority.
 * $8: the poller goes busy (see poller_main): writers stop waking it. */
#define CLAIM_MARK_N(extra)                                                                        \
	"n AS (SELECT ok.*, " extra "ok.cl = 0 AND NOT ok.done AS mark, "                          \
	"        row_number() OVER (ORDER BY "                                                     \
	"          ok.cl > 0 OR ok.done, ok.prio DESC, ok.at, ok.first) AS rk FROM ok), "
/* The UPDATE of the admitted runs, as CTE name; now: the time it starts
 * them at. */
#define CLAIM_MARK_UPDATE(name, now)                                                               \
	name " AS (UPDATE cairn.runs r SET "                                                       \
	     "  status = CASE WHEN r.status IN ('pending', 'sleeping', 'waiting') THEN 'running' " \
	     "                ELSE r.status END, "                                                 \
	     "  attempt = CASE WHEN r.finished_at IS NULL THEN greatest(r.attempt, 1) "            \
	     "                 ELSE r.attempt END, "                                               \
	     "  started_at = CASE WHEN r.finished_at IS NULL THEN coalesce(r.started_at, " now     \
	     ") "                                                                                  \
	     "                    ELSE r.started_at END, "                                         \
	     "  claims = " CLAIM_COUNT " + d.mark::int, "                                          \
	     "  queued_by = CASE WHEN d.mark AND d.rk > $7 THEN $1::bigint END, "                  \
	     "  queued_seq = CASE WHEN d.mark AND d.rk > $7 THEN q.base + d.rk END, "              \
	     "  updated_at = now(), held = false "                                                 \
	     "FROM n d CROSS JOIN q, "                                                             \
	     "  LATERAL (SELECT coalesce(sum(pg_column_size(s.*)), 0) AS bytes "                   \
	     "           FROM cairn.steps s WHERE " IN_PART(                                       \
	         "s") "s.run_id = d.run_id "                                                       \
	              "             AND s.seq >= d.jfrom) js "                                     \
	              "WHERE " IN_PART("r") "r.id = d.run_id "
#define CLAIM_MARK                                                                                 \
	"q AS (SELECT nextval('cairn.claim_seq') * 16384 AS base), " CLAIM_MARK_N("")              \
	    CLAIM_MARK_UPDATE(                                                                     \
	        "c",                                                                               \
	        "now()") "RETURNING d.mark, r.queued_seq AS queued, d.at, d.first, d.prio, "       \
	                 "r.priority, r.id, "                                                      \
	                 "  r.shard_group AS grp, r.shard, d.epoch, "                              \
	                 "  d.ids::text AS ids, r.workflow, "                                      \
	                 "  r.status, r.input::text AS input, r.attempt, r.max_attempts, "         \
	                 "r.cancel_requested, "                                                    \
	                 "  r.parent_id, d.ck IS NOT NULL OR d.gc IS NOT NULL AS flow, "           \
	                 "  (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled, "    \
	                 "  ceil(extract(epoch FROM now()) * 1000)::bigint AS now_ms, r.claims, "  \
	                 "js.bytes, "                                                              \
	                 "  " CLAIM_RUN_DATA_D "), "                                               \
	                 "busy AS (UPDATE cairn.runners SET idle = false WHERE id = $1 AND idle "  \
	                 "AND $8::bool), "
/*
 * CLAIM_MARK of one part (a database with parts: Citus), made to be one
 * router statement, one task on the node of the part (tests/test_citus.c
 * explains it). Citus evaluates a function that is not IMMUTABLE on the
 * coordinator, so it refuses one inside CASE or COALESCE, or in RETURNING,
 * and a subquery for it (SELECT now()) makes every CTE a subplan of its own:
 * the time comes from n's target list (t_now), and the UPDATE returns plain
 * columns, from which c computes the rest. A sequence is the coordinator's
 * (nextval would run on the node): the claim's number, @base@, is taken
 * by the poller (SQL_CLAIM_BASE), with the claim's time, @now@, which the
 * claims of all its parts share, as one claim of one server has one
 * now(). Writing runners.idle (a reference table) is a statement of its
 * own (SQL_BUSY); $8 stays for the parameters' sake.
 */
#define CLAIM_MARK_PARTS                                                                           \
	"q AS (SELECT @base@::bigint AS base, $8::bool AS busy), " CLAIM_MARK_N(                   \
	    "@now@::timestamptz AS t_now, ")                                                                  \
	    CLAIM_MARK_UPDATE(                                                                     \
	        "c0",                                                                              \
	        "d.t_now") "RETURNING d.mark, d.at, d.first, d.prio, d.epoch, d.ids, d.ck, d.gc, " \
	                   "d.jfrom, "                                                             \
	                   "  js.bytes, r.*), "                                                    \
	                   "c AS (SELECT r.mark, r.queued_seq AS queued, r.at, r.first, r.prio, "  \
	                   "r.priority, r.id, "                                                    \
	                   "  r.shard_group AS grp, r.shard, r.epoch, r.ids::text AS ids, "        \
	                   "r.workflow, r.status, "                                                \
	                   "  r.input::text AS input, r.attempt, r.max_attempts, "                 \
	                   "r.cancel_requested, r.parent_id, "                                     \
	                   "  r.ck IS NOT NULL OR r.gc IS NOT NULL AS flow, "                      \
	                   "  (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled, "  \
	                   "  ceil(extract(epoch FROM now()) * 1000)::bigint AS now_ms, "          \
	                   "r.claims, js.bytes, "                                                  \
	                   "  " CLAIM_RUN_DATA(                                                    \
	                       "r.jfrom") " FROM c0 r CROSS JOIN LATERAL (SELECT r.bytes) js), "
/* One row even when nothing was claimed (its run columns NULL); its columns
 * are claimrow.h's CLAIM_*, in that order. */
#define CLAIM_SELECT                                                                               \
	"SELECT c.id, c.grp, c.shard, c.epoch, c.ids, c.workflow, c.status, c.input, c.attempt, "  \
	"  c.max_attempts, c.cancel_requested, c.scheduled, c.now_ms, c.claims, c.bytes, "         \
	"  c.last_step, c.journal, c.signals, least(next.ms, fx.pushed), c.mark, c.parent_id, "    \
	"  c.flow, fx.parked, fx.back, fx.limited, c.queued, c.priority, c.jfrom, c.jcuts, "       \
	"  c.chain, c.tp, c.created "                                                              \
	"FROM next CROSS JOIN fx LEFT JOIN c ON true "                                             \
	"ORDER BY c.mark DESC, c.queued NULLS FIRST, c.prio DESC, c.at, c.first"

/* Due messages and due starts (runs.start_at, message id 0) of this
 * runner's shards, each walked in time order. Each walk is bounded twice:
 * by CLAIM_BOUND, a constant (the poll batch, which $3 never exceeds) that
 * tells the generic plan (see claim()) that it reads few rows whatever the
 * tables hold, and by $3, which stops it at the runs wanted. A claim of one
 * part (Citus) may also stop at a priority (@floor@: claim_parts_due). */
#define CLAIM_BOUND "@POLL_BATCH@"
#define CLAIM_ALL_DUE                                                                              \
	"WITH due AS (SELECT * FROM ("                                                             \
	"  (SELECT * FROM (SELECT m.id, m.run_id, l.epoch, m.deliver_at, 0 AS prio "               \
	"   FROM cairn.messages m "                                                                \
	"   JOIN cairn.shard_leases l ON l.shard_group = m.shard_group AND l.shard = m.shard "     \
	"   WHERE " IN_PART("l") IN_PART(                                                          \
	    "m") "l.owner = $1 AND m.deliver_at <= @at@ "                                          \
	         "     AND m.run_id <> ALL ($2::bigint[]) "                                        \
	         "   ORDER BY m.deliver_at, m.id LIMIT " CLAIM_BOUND ") b LIMIT $3) "              \
	         "  UNION ALL "                                                                    \
	         "  (SELECT * FROM (SELECT " MSG_START_SQL ", r.id, l.epoch, r.start_at, 0 "       \
	         "   FROM cairn.runs r "                                                           \
	         "   JOIN cairn.shard_leases l ON l.shard_group = r.shard_group AND l.shard = "    \
	         "r.shard "                                                                        \
	         "   WHERE " IN_PART("l") IN_PART(                                                 \
	             "r") "l.owner = $1 AND r.start_at <= @at@ "                                   \
	                  "     AND r.priority = 0 "                                               \
	                  "     AND r.id <> ALL ($2::bigint[]) "                                   \
	                  "   ORDER BY r.start_at, r.id LIMIT " CLAIM_BOUND ") b LIMIT $3) "       \
	                  "  UNION ALL "                                                           \
	                  "  (SELECT * FROM (SELECT " MSG_START_SQL                                \
	                  ", r.id, l.epoch, r.start_at, r.priority "                               \
	                  "   FROM cairn.runs r "                                                  \
	                  "   JOIN cairn.shard_leases l ON l.shard_group = r.shard_group AND "     \
	                  "l.shard = r.shard "                                                     \
	                  "   WHERE " IN_PART("l") IN_PART(                                        \
	                      "r") "l.owner = $1 AND r.start_at <= @at@ "                          \
	                           "     AND r.priority <> 0 "                                     \
	                           "     AND r.id <> ALL ($2::bigint[]) "                          \
	                           "   ORDER BY r.priority DESC, r.start_at, r.id "                \
	                           "LIMIT " CLAIM_BOUND ") b LIMIT $3)) u "                        \
	                           "  @floor@ ORDER BY prio DESC, deliver_at, run_id LIMIT $3), "
/* The next message or start of this runner's shards that is not yet due,
 * in ms from now: the poller sleeps until then. */
#define CLAIM_ALL_NEXT                                                                             \
	"next AS (SELECT (extract(epoch FROM min(x.at) - @at@) * 1000)::bigint AS ms FROM ("       \
	"  (SELECT m.deliver_at AS at FROM cairn.messages m JOIN cairn.shard_leases l "            \
	"     ON l.shard_group = m.shard_group AND l.shard = m.shard "                             \
	"   WHERE " IN_PART("l")                                                                   \
	    IN_PART("m") "l.owner = $1 AND m.deliver_at > @at@ "                                   \
	                 "   ORDER BY m.deliver_at, m.id LIMIT 1) "                                \
	                 "  UNION ALL "                                                            \
	                 "  (SELECT r.start_at FROM cairn.runs r JOIN cairn.shard_leases l "       \
	                 "     ON l.shard_group = r.shard_group AND l.shard = r.shard "            \
	                 "   WHERE " IN_PART("l")                                                  \
	                     IN_PART("r") "l.owner = $1 AND r.start_at > @at@ "                    \
	                                  "   ORDER BY r.start_at, r.id LIMIT 1)) "                \
	                                  "x) "
static const char SQL_CLAIM[] = CLAIM_ALL_DUE CLAIM_FLOW CLAIM_MARK CLAIM_ALL_NEXT CLAIM_SELECT;
static const char SQL_CLAIM_PLAIN[] =
    CLAIM_ALL_DUE CLAIM_PLAIN CLAIM_MARK CLAIM_ALL_NEXT CLAIM_SELECT;

/*
 * The claim of a wake-up that named its runs ($12: a run was enqueued,
 * signalled, cancelled): only theirs, found by id, so that it costs the
 * same whatever the shards hold, and planned once (generic plan). Its next
 * due time is that of those runs alone.
 *
 * A named run's messages and start are found by run (messages_run, the
 * primary key), and only then tested for being due: the planner, trusting
 * statistics taken before a burst of due messages, otherwise walked the
 * index by time (messages_deliver, runs_start) through every message due in
 * the database for each run it claimed (test_wake: 20,000 entries a claim).
 * Hence the MATERIALIZED CTEs, and the FILTERs of the aggregates in
 * CLAIM_NEXT_OF and CLAIM_ONE: a time test there is no index condition.
 */
#define CLAIM_NAMED_DUE                                                                            \
	"WITH nm AS MATERIALIZED (SELECT m.id, m.run_id, m.shard_group, m.shard, m.deliver_at "    \
	"     FROM cairn.messages m WHERE " IN_PART(                                               \
	    "m") "m.run_id = ANY ($12::bigint[])), "                                               \
	         "nr AS MATERIALIZED (SELECT r.id, r.shard_group, r.shard, r.start_at, "           \
	         "r.priority "                                                                     \
	         "     FROM cairn.runs r WHERE " IN_PART(                                          \
	             "r") "r.id = ANY ($12::bigint[])), "                                          \
	                  "due AS (SELECT * FROM ("                                                \
	                  "  (SELECT m.id, m.run_id, l.epoch, m.deliver_at, 0 AS prio FROM nm m "  \
	                  "   JOIN cairn.shard_leases l ON l.shard_group = m.shard_group AND "     \
	                  "l.shard = m.shard "                                                     \
	                  "   WHERE " IN_PART(                                                     \
	                      "l") "l.owner = $1 AND m.deliver_at <= @at@ "                        \
	                           "     AND m.run_id <> ALL ($2::bigint[])) "                     \
	                           "  UNION ALL "                                                  \
	                           "  (SELECT " MSG_START_SQL                                      \
	                           ", r.id, l.epoch, r.start_at, r.priority FROM nr r "            \
	                           "   JOIN cairn.shard_leases l ON l.shard_group = "              \
	                           "r.shard_group AND l.shard = r.shard "                          \
	                           "   WHERE " IN_PART(                                            \
	                               "l") "l.owner = $1 AND r.start_at <= @at@ "                 \
	                                    "     AND r.id <> ALL ($2::bigint[]))) u "             \
	                                    "  ORDER BY prio DESC, deliver_at, run_id LIMIT $3), "
/* The next due time of the named runs, from their messages m and runs r:
 * those of the CTEs above for SQL_CLAIM_RUNS, read again by run for
 * SQL_CLAIM_ONE (which has no CTE). */
#define CLAIM_NEXT_OF(m, r)                                                                        \
	"next AS (SELECT (extract(epoch FROM least("                                               \
	"  (SELECT min(m.deliver_at) FILTER (WHERE m.deliver_at > @at@) FROM " m "), "             \
	"  (SELECT min(r.start_at) FILTER (WHERE r.start_at > @at@) FROM " r ")) - @at@) "         \
	"  * 1000)::bigint AS ms) "
#define CLAIM_NAMED_NEXT CLAIM_NEXT_OF("nm m", "nr r")
static const char SQL_CLAIM_RUNS[] =
    CLAIM_NAMED_DUE CLAIM_FLOW CLAIM_MARK CLAIM_NAMED_NEXT CLAIM_SELECT;
static const char SQL_CLAIM_RUNS_PLAIN[] =
    CLAIM_NAMED_DUE CLAIM_PLAIN CLAIM_MARK CLAIM_NAMED_NEXT CLAIM_SELECT;
/* The claims of one part, of all that is due ($12 the part's key, $13 the
 * claim's number, $14 its time) and of named runs ($13 to $15): what the
 * poller sends on a database with parts without limits (claim_parts). */
static const char SQL_CLAIM_PART[] =
    CLAIM_ALL_DUE CLAIM_PLAIN CLAIM_MARK_PARTS CLAIM_ALL_NEXT CLAIM_SELECT;
static const char SQL_CLAIM_RUNS_PART[] =
    CLAIM_NAMED_DUE CLAIM_PLAIN CLAIM_MARK_PARTS CLAIM_NAMED_NEXT CLAIM_SELECT;

/*
 * The claim of a wake-up that named its runs when it needs none of the
 * above (no limits, every run starts at once, the poller does not go busy):
 * the common claim at low load, where the time from an enqueue to the first
 * instruction of its run is mostly the claim's. One UPDATE of the named runs
 * of this runner's shards that have a due start or message, found by id,
 * each with its due messages, journal and signals, and the next due time of
 * those runs: one UPDATE with a few joins instead of a chain of a dozen
 * CTEs, whose executor set-up was most of the claim's cost (measured from
 * psql: 0.21 ms a claim of one run, against 0.33 ms). It ends as the
 * others do (CLAIM_NEXT_OF, CLAIM_SELECT); every run is marked (counted)
 * unless it will run alone or is finished. Whether it is comes from the row
 * as it was (o): RETURNING sees only the new one, where a run counted here
 * and one that stopped its worker once look the same. $3 bounds the runs,
 * $7 is at least their number and $8 is false: the poller sends it only
 * then.
 */
static const char SQL_CLAIM_ONE[] =
    "WITH c AS (UPDATE cairn.runs r SET "
    "  status = CASE WHEN r.status IN ('pending', 'sleeping', 'waiting') THEN 'running' "
    "                ELSE r.status END, "
    "  attempt = CASE WHEN r.finished_at IS NULL THEN greatest(r.attempt, 1) ELSE r.attempt END, "
    "  started_at = CASE WHEN r.finished_at IS NULL THEN coalesce(r.started_at, now()) "
    "                    ELSE r.started_at END, "
    "  claims = o.cl + o.mark::int, queued_by = NULL, "
    "  updated_at = now(), held = false "
    "FROM (SELECT id FROM unnest($12::bigint[]) AS t(id) LIMIT $3) t "
    "  JOIN cairn.shard_leases l ON l.owner = $1 "
    "  CROSS JOIN LATERAL (SELECT o.cl = 0 AND o.finished_at IS NULL AND $7 > 0 AS mark, o.cl, "
    "      o.jfrom "
    "    FROM (SELECT " CLAIM_COUNT " AS cl, r.finished_at, " CLAIM_JFROM " AS jfrom "
    "          FROM cairn.runs r WHERE r.id = t.id) o) o "
    "  CROSS JOIN LATERAL (SELECT array_agg(m.id) FILTER (WHERE m.deliver_at <= now()) AS ids "
    "                      FROM cairn.messages m WHERE m.run_id = t.id) mq "
    "  CROSS JOIN LATERAL (SELECT coalesce(sum(pg_column_size(s.*)), 0) AS bytes "
    "                      FROM cairn.steps s WHERE s.run_id = t.id AND s.seq >= o.jfrom) js "
    "WHERE r.id = t.id AND t.id <> ALL ($2::bigint[]) AND NOT $8::bool "
    "  AND l.shard_group = r.shard_group AND l.shard = r.shard "
    "  AND (r.start_at <= now() OR mq.ids IS NOT NULL) "
    "RETURNING o.mark, NULL::bigint AS queued, r.priority AS prio, r.priority, "
    "  r.start_at AS at, r.id AS first, r.id, r.shard_group AS grp, r.shard, l.epoch, "
    "  (CASE WHEN r.start_at <= now() THEN ARRAY[" MSG_START_SQL "] ELSE '{}' END "
    "   || coalesce(mq.ids, '{}'))::text AS ids, "
    "  r.workflow, r.status, r.input::text AS input, r.attempt, r.max_attempts, "
    "  r.cancel_requested, r.parent_id, r.concurrency_key IS NOT NULL AS flow, "
    "  (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled, "
    "  ceil(extract(epoch FROM now()) * 1000)::bigint AS now_ms, r.claims, js.bytes, "
    "  " CLAIM_RUN_DATA_O
    "), " CLAIM_FX_PLAIN CLAIM_NEXT_OF("cairn.messages m WHERE m.run_id = ANY ($12::bigint[])",
                                       "cairn.runs r WHERE r.id = ANY ($12::bigint[])")
        CLAIM_SELECT;

/*
 * The claim of a new run, where SQL_CLAIM_ONE would claim one run: a run
 * that is pending, never executed (claims 0), due by its start alone, with
 * no message, no step and no signal waiting, which is what an enqueue's
 * wake-up names. It needs none of what SQL_CLAIM_ONE reads besides the run
 * (journal, signals, messages, the next due time): a short UPDATE, which
 * does for such a run what SQL_CLAIM_ONE does and ends as it does
 * (CLAIM_FX_PLAIN, CLAIM_SELECT), with no next due time: a run it claims is
 * in flight. Its executor set-up is a fraction of SQL_CLAIM_ONE's, and at
 * low load that set-up is paid cold (the backend slept since the last run):
 * in 12 pairs of alternated bench runs, the time from an enqueue to the
 * run's first instruction (p50) was shorter in 11, by 0.28 ms at the median
 * (from -0.11 to 0.38 ms). It also takes a run an enqueue handed to this
 * runner (client.c, ST_ENQUEUE_PUSH: running, counted once, queued_by this
 * runner without a queued_seq) whose notification could not bring it
 * (take_pushed), keeping its one count. Any other run comes back as the
 * empty row, and the poller claims it with SQL_CLAIM_ONE. $1 owner, $2 the
 * runs in flight, $3 idle executors, $4 the run.
 */
static const char SQL_CLAIM_NEW[] =
    "WITH c AS (UPDATE cairn.runs r SET status = 'running', "
    "  attempt = greatest(r.attempt, 1), started_at = coalesce(r.started_at, now()), "
    "  claims = ($3 > 0)::int, queued_by = NULL, updated_at = now(), held = false "
    "FROM cairn.shard_leases l "
    "WHERE r.id = $4 AND r.id <> ALL ($2::bigint[]) AND l.owner = $1 "
    "  AND l.shard_group = r.shard_group AND l.shard = r.shard "
    "  AND (r.status = 'pending' AND r.claims = 0 "
    "       OR r.status = 'running' AND r.claims = 1 AND r.queued_by = $1 "
    "          AND r.queued_seq IS NULL) AND r.start_at <= now() "
    "  AND NOT EXISTS (SELECT 1 FROM cairn.messages m WHERE m.run_id = r.id) "
    "  AND NOT EXISTS (SELECT 1 FROM cairn.steps s WHERE s.run_id = r.id) "
    "  AND NOT EXISTS (SELECT 1 FROM cairn.signals g "
    "                  WHERE g.run_id = ANY (ARRAY[r.id, r.continued_from]) "
    "                    AND g.consumed_by_seq IS NULL) "
    "RETURNING $3 > 0 AS mark, NULL::bigint AS queued, r.priority AS prio, r.priority, "
    "  r.start_at AS at, r.id AS first, r.id, "
    "  r.shard_group AS grp, r.shard, l.epoch, (ARRAY[" MSG_START_SQL "])::text AS ids, "
    "  r.workflow, r.status, r.input::text AS input, r.attempt, r.max_attempts, "
    "  r.cancel_requested, r.parent_id, r.concurrency_key IS NOT NULL AS flow, "
    "  (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled, "
    "  ceil(extract(epoch FROM now()) * 1000)::bigint AS now_ms, r.claims, 0::bigint AS bytes, "
    "  NULL::text AS last_step, NULL::text AS journal, NULL::text AS signals, 0 AS jfrom, "
    "  r.journal_cuts AS jcuts, coalesce(r.chain_id, r.id) AS chain, " CLAIM_TRACE
    "), " CLAIM_FX_PLAIN "next AS (SELECT NULL::bigint AS ms) " CLAIM_SELECT;

/*
 * The claim with limits on a database with parts (Citus) is the statement
 * of one server cut in three, where it reads or writes tables of different
 * places (docs/architecture.md, "On Citus"):
 *   CLAIM_PART_KEYS  on the node of each part: the due runs and their key
 *                    limits (CLAIM_FLOW_KEYS: a key's runs, and those in
 *                    flight here, are all in the part of its shard), read
 *                    only, as JSON rows (s), with the next due time;
 *   CLAIM_FLEET      once, on the coordinator, over the rows of every
 *                    part: the fleet-wide limits, the slots taken and the
 *                    rates (CLAIM_FLOW_FLEET: reference tables, and
 *                    liveness from the coordinator's pg_stat_activity),
 *                    the verdict of each run as JSON (s3), by part;
 *   CLAIM_PART_MARK  on the node of each part with a run admitted, held or
 *                    pushed: those runs held and pushed (CLAIM_FLOW_HOLD)
 *                    and the admitted ones marked, as SQL_CLAIM_PART does.
 * Each commits on its own: a crash after CLAIM_FLEET leaves slots taken by
 * this runner for runs it does not have, which the flow sweep gives back
 * (SQL_FLOW_SWEEP), and a rate's start spent, which only slows the rate.
 * A part with nothing due costs CLAIM_PART_KEYS alone.
 *
 * Their parameters are the same seventeen: SQL_CLAIM_PART's eleven, then
 * $12 the named runs ('{}' for all that is due), $13 the part's key, $14
 * the claim's number, $15 its time, $16 the JSON rows of the statement
 * before, $17 the next due time (ms) CLAIM_PART_KEYS read. Each names
 * those it does not use (CTE pp), so that every parameter has a type.
 */
#define CLAIM_S_COLS                                                                               \
	"run_id bigint, epoch bigint, ids bigint[], at timestamptz, first bigint, prio int, "      \
	"workflow text, ck text, st text, cl int, jfrom int, done bool, kc int, key_rate int, "    \
	"key_rate_period_ms bigint, rate int, rate_period_ms bigint, gc int, used bigint, "        \
	"start bool, slot bool, rpart int"
#define CLAIM_S3_COLS                                                                              \
	CLAIM_S_COLS ", gok bool, kal int, knext timestamptz, kstep interval, krank bigint, "      \
	             "wal int, wnext timestamptz, wstep interval, wrank bigint, push_at timestamptz"
#define CLAIM_KEYS_PP                                                                              \
	"pp AS (SELECT $4::text, $5::text, $6::text, $7::text, $8::text, $12::text, $14::text, "   \
	"         $15::text, $16::text, $17::text), "
#define CLAIM_KEYS_SELECT                                                                          \
	"SELECT (SELECT json_agg(x) FROM (SELECT s.*, $13::int AS rpart FROM s) x)::text, next.ms " \
	"FROM next"
static const char SQL_CLAIM_PART_KEYS[] =
    CLAIM_ALL_DUE CLAIM_FLOW_KEYS CLAIM_KEYS_PP CLAIM_ALL_NEXT CLAIM_KEYS_SELECT;
static const char SQL_CLAIM_RUNS_PART_KEYS[] =
    CLAIM_NAMED_DUE CLAIM_FLOW_KEYS CLAIM_KEYS_PP CLAIM_NAMED_NEXT CLAIM_KEYS_SELECT;
/* $1 this runner, $2 the rows of CLAIM_PART_KEYS of every part, each
 * with its part (rpart), $3 how many runs the claim takes, $4 how many
 * start at once. The first $3 rows in the order of one server's claim
 * (grk) are those of the claim; then, for each part that has any: its
 * rows for its mark, the time the runs of all start at, whether its mark
 * has anything to do (a run admitted, held or pushed), how many rows it
 * has, and how many of its runs are among the first $4 admitted. */
static const char SQL_CLAIM_FLEET[] =
    "WITH s AS (SELECT * FROM (SELECT x.*, row_number() OVER ("
    "             ORDER BY prio DESC, at, first) AS grk "
    "           FROM json_to_recordset($2::json) AS x(" CLAIM_S_COLS ")) y "
    "         WHERE grk <= $3), " CLAIM_FLOW_FLEET
    "v AS (SELECT s3.*, row_number() OVER (PARTITION BY ok.run_id IS NULL "
    "        ORDER BY s3.prio DESC, s3.at, s3.first) <= $4 AND ok.run_id IS NOT NULL AS now_, "
    "        ok.run_id IS NOT NULL OR s3.push_at IS NOT NULL "
    "          OR (NOT s3.slot AND s3.start AND s3.st = 'pending' AND s3.ids = '{0}') AS work "
    "      FROM s3 LEFT JOIN ok ON ok.run_id = s3.run_id) "
    "SELECT rpart, json_agg(v)::text, now(), bool_or(work), count(*), "
    "  count(*) FILTER (WHERE now_) FROM v GROUP BY rpart";
static const char SQL_CLAIM_PART_MARK[] =
    "WITH s3 AS (SELECT * FROM json_to_recordset($16::json) AS s3(" CLAIM_S3_COLS ")), "
    "pp AS (SELECT $2::text, $3::text, $9::text, $10::text, $11::text, $12::text), "
    CLAIM_FLOW_OK CLAIM_FLOW_HOLD CLAIM_MARK_PARTS "next AS (SELECT $17::bigint AS ms) "
    CLAIM_SELECT;

/* What is due in one part ($4), of all a claim would take ($1 to $3 as
 * SQL_CLAIM's): each run with what orders it among those of other parts
 * (its priority, when it was due in Unix microseconds), then the part's
 * next due time, on every row (one row, its run NULL, when nothing is
 * due). Read with $3 = 1 from every part, the head of each, before a claim
 * of all that is due on a database with parts (claim_parts_due). */
static const char SQL_CLAIM_PEEK[] = CLAIM_ALL_DUE CLAIM_GROUP CLAIM_ALL_NEXT
    "SELECT d.run_id, d.prio, (extract(epoch FROM d.at) * 1000000)::bigint, next.ms "
    "FROM next LEFT JOIN d ON true";

/* The claim statements, prepared on every poll connection: on one server
 * the first CLAIM_ONE_SERVER, of which claim() takes the one with limits
 * or without (limited * 2) for all that is due or for named runs (+ 1), or
 * CLAIM_ONE, or CLAIM_NEW before it; with parts, the others: the claims
 * of a part (CLAIM_PART + 1 for named runs), those with limits (from
 * CLAIM_PART_KEYS) and what is due in a part (CLAIM_PEEK). */
enum {
	CLAIM_LIMITED = 2,
	CLAIM_NAMED = 1,
	CLAIM_ONE = 4,
	CLAIM_NEW = 5,
	CLAIM_ONE_SERVER = 6,
	CLAIM_PART = 6,
	CLAIM_PART_KEYS = 8,
	CLAIM_FLEET = 10,
	CLAIM_PART_MARK = 11,
	CLAIM_PEEK = 12,
	CLAIM_STATEMENTS = 13
};
/* Each claim statement, with, for those of one part, the parameters that
 * its part filters (IN_PART), its number (@base@), its time (@now@) and
 * the priority it stops at (@floor@) become. */
static const struct {
	db_stmt st;
	const char *part, *base, *now, *floor;
} CLAIM_STATEMENT[CLAIM_STATEMENTS] = {
    {{"cairn_claim_plain", SQL_CLAIM_PLAIN}, NULL, NULL, NULL, NULL},
    {{"cairn_claim_runs_plain", SQL_CLAIM_RUNS_PLAIN}, NULL, NULL, NULL, NULL},
    {{"cairn_claim", SQL_CLAIM}, NULL, NULL, NULL, NULL},
    {{"cairn_claim_runs", SQL_CLAIM_RUNS}, NULL, NULL, NULL, NULL},
    {{"cairn_claim_one", SQL_CLAIM_ONE}, NULL, NULL, NULL, NULL},
    {{"cairn_claim_new", SQL_CLAIM_NEW}, NULL, NULL, NULL, NULL},
    {{"cairn_claim_part", SQL_CLAIM_PART}, "$12::int", "$13", "$14", "WHERE u.prio >= $15::int"},
    {{"cairn_claim_runs_part", SQL_CLAIM_RUNS_PART}, "$13::int", "$14", "$15", NULL},
    {{"cairn_claim_part_keys", SQL_CLAIM_PART_KEYS}, "$13::int", NULL, NULL, NULL},
    {{"cairn_claim_runs_part_keys", SQL_CLAIM_RUNS_PART_KEYS}, "$13::int", NULL, NULL, NULL},
    {{"cairn_claim_fleet", SQL_CLAIM_FLEET}, NULL, NULL, NULL, NULL},
    {{"cairn_claim_part_mark", SQL_CLAIM_PART_MARK}, "$13::int", "$14", "$15", NULL},
    {{"cairn_claim_peek", SQL_CLAIM_PEEK}, "$4::int", NULL, NULL, NULL}};

/* The text of claim statement which as prepared: the poll batch for
 * CLAIM_BOUND, and for a claim of one part its part filters, its number,
 * its time and its floor; none on one server. */
static void claim_text(int which, const char *bound, buf *out)
{
	const char *floor = CLAIM_STATEMENT[which].floor;
	char at[32] = "now()";
	if (CLAIM_STATEMENT[which].now)
		snprintf(at, sizeof at, "%s::timestamptz", CLAIM_STATEMENT[which].now);
	const char *const subst[][2] = {{CLAIM_BOUND, bound},
	                                {"@at@", at},
	                                {"@base@", CLAIM_STATEMENT[which].base},
	                                {"@now@", CLAIM_STATEMENT[which].now},
	                                {"@floor@", floor ? floor : ""}};
	buf text = BUF_INIT, next = BUF_INIT;
	buf_puts(&text, CLAIM_STATEMENT[which].st.sql);
	for (size_t i = 0; i < sizeof subst / sizeof subst[0]; i++)
		if (subst[i][1]) {
			buf t = text;
			buf_reset(&next);
			buf_puts_replacing(&next, buf_str(&text), subst[i][0], subst[i][1]);
			text = next;
			next = t;
		}
	sqlparam_in_part(buf_str(&text), CLAIM_STATEMENT[which].part, out);
	out->oom |= text.oom | next.oom;
	buf_free(&text);
	buf_free(&next);
}

/* Row i of r as claimrow_decode takes it: NULL for SQL NULL. */
static void row_values(const PGresult *r, int i, const char *values[CLAIM_NCOLS])
{
	for (int c = 0; c < CLAIM_NCOLS; c++)
		values[c] = PQgetisnull(r, i, c) ? NULL : PQgetvalue(r, i, c);
}

/* Puts j on the queue, which is in priority order, then first in, first
 * out: behind every job of its priority or a higher one. Most often at the
 * tail (every run of priority 0, or a claim's runs, which come in priority
 * order); a run claimed later than runs of a lower priority goes ahead of
 * them (start_queued keeps their counts void). Holds d->mu. */
static void enqueue_locked(dispatch *d, job *j)
{
	job **pp = &d->qhead;
	if (d->qtail && d->qtail->priority >= j->priority)
		pp = &d->qtail->next;
	while (*pp && (*pp)->priority >= j->priority)
		pp = &(*pp)->next;
	j->next = *pp;
	*pp = j;
	if (!j->next)
		d->qtail = j;
}

/* Puts j in flight and on the queue: 0, or -CAIRN_ENOMEM (j not taken). */
static int queue_job(dispatch *d, job *j)
{
	pthread_mutex_lock(&d->mu);
	if (d->nfl == d->capfl) {
		int cap = d->capfl ? d->capfl * 2 : 64;
		flight *g = realloc(d->fl, (size_t)cap * sizeof *g);
		if (!g) {
			pthread_mutex_unlock(&d->mu);
			return -CAIRN_ENOMEM;
		}
		d->fl = g;
		d->capfl = cap;
	}
	d->fl[d->nfl++] = (flight){.run_id = j->run_id, .job = j, .since_unix_ms = clock_unix_ms()};
	shardmap_run_begin(d->env.map, j->group, j->shard);
	enqueue_locked(d, j);
	d->qlen++;
	atomic_store(&d->env.m->queue_depth, d->qlen);
	pthread_cond_signal(&d->job_cv);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

/* Runs claim statement which (n parameters p); its result, or NULL. */
/* Statement which's first run in a session plans it and loads the
 * catalog: the claim is cold. */
static void claim_warm(dispatch *d, int which)
{
	d->cold_claim |= !(d->warm & 1u << which);
	d->warm |= 1u << which;
}

static PGresult *claim_exec(dispatch *d, PGconn *conn, int which, int n, const char *const *p,
                            buf *err)
{
	claim_warm(d, which);
	return db_exec_prepared(conn, err, CLAIM_STATEMENT[which].st.name, n, p);
}

static void unclaim(dispatch *d, PGconn *conn, int64_t owner, pgarr *runs, pgarr *marked);

/* Adds to ex the runs kept out of the claims (d->going) whose shard is still
 * being handed over, and forgets the others. */
static void keep_out_going(dispatch *d, pgarr *ex)
{
	int k = 0;
	for (int i = 0; i < d->ngoing; i++)
		if (shardmap_going(d->env.map, d->going[i].group, d->going[i].shard)) {
			pgarr_add_i64(ex, d->going[i].run_id);
			d->going[k++] = d->going[i];
		}
	d->ngoing = k;
}

/*
 * A row claimrow_decode refused (or whose job could not be queued) is a run
 * claimed here that does not execute here: mostly one of a shard this
 * runner is handing over (the lease loop marks it going, then waits for
 * its runs in flight before it unlocks it, and the database names this
 * runner its owner until then). What the claim wrote that counts is undone
 * (unclaim): the execution it counted, the slot of a fleet-wide limit it
 * took (for up to FLOW_SWEEP_MS otherwise, with the limit one run short
 * everywhere). Its messages stay for the next owner, and while the shard
 * is going the run is kept out of the claims, which would take it again
 * at once.
 */
static void refuse_row(dispatch *d, const char *const *v, pgarr *refused, pgarr *marked)
{
	claimrow_left left;
	claimrow_left_of(d->env.map, v, &left);
	if (!left.run_id)
		return;
	pgarr_add_i64(refused, left.run_id);
	if (left.marked)
		pgarr_add_i64(marked, left.run_id);
	if (!shardmap_going(d->env.map, left.group, left.shard))
		return;
	if (d->ngoing == d->capgoing) {
		int cap = d->capgoing ? d->capgoing * 2 : 16;
		claimrow_left *g = realloc(d->going, (size_t)cap * sizeof *g);
		if (!g)
			return; /* claimed again, and given back again */
		d->going = g;
		d->capgoing = cap;
	}
	d->going[d->ngoing++] = left;
}

/* What a claim passes by: the runs in flight (a claim of all that is due
 * passes every one of them, a claim of named runs only those named: it
 * looks at no other run, and their messages stay due until their final
 * commit) and those of shards being handed over, into ex; the named runs
 * into want; the journals cached here into jc (runs, where each ends, the
 * count of cuts each was read with: CLAIM_JFROM). How many of the runs it
 * looks at are in flight. */
static int claim_lists(dispatch *d, pgarr *ex, pgarr *want, pgarr jc[3], const int64_t *runs,
                       int nruns)
{
	int skipped = inflight_ids(d, ex, NULL, runs, nruns);
	keep_out_going(d, ex);
	for (int i = 0; i < nruns; i++)
		pgarr_add_i64(want, runs[i]);
	pthread_mutex_lock(&d->mu);
	jcache_claim_args(d->jc, &jc[0], &jc[1], &jc[2]);
	pthread_mutex_unlock(&d->mu);
	return skipped;
}

/* Sends the claim that fits: with limits or without, of all that is due or
 * of the named runs, or CLAIM_ONE, or CLAIM_NEW before it. p holds its
 * parameters (see claim). Its result, or NULL (err); *mono is when the
 * statement read now(). */
static PGresult *send_claim(dispatch *d, PGconn *conn, const char *const *p, int start_now,
                            int go_busy, const int64_t *runs, int nruns, int64_t *mono, buf *err)
{
	/* The statement's now() is read as it starts: anchor the run's clock
	 * there too, so it never runs behind the database's. */
	*mono = clock_mono_ms();
	int named = nruns > 0;
	int which = d->limited * CLAIM_LIMITED + named * CLAIM_NAMED;
	if (named && !d->limited && !go_busy && nruns <= start_now)
		which = CLAIM_ONE;
	d->cold_claim = 0;
	PGresult *r = NULL;
	/* A run newer than every run claimed here is most likely new (run ids
	 * grow): CLAIM_NEW first. A run it does not take costs it a statement. */
	if (which == CLAIM_ONE && nruns == 1 && runs[0] > d->newest_claimed) {
		char run[24];
		const char *pn[] = {p[0], p[1], p[6], db_i64(run, runs[0])};
		if (!(r = claim_exec(d, conn, CLAIM_NEW, 4, pn, err)))
			return NULL;
		if (!PQgetisnull(r, 0, CLAIM_ID)) {
			atomic_fetch_add(&d->env.m->claims_new_run, 1);
		} else {
			PQclear(r);
			r = NULL;
			*mono = clock_mono_ms();
		}
	}
	if (!r)
		r = claim_exec(d, conn, which, named ? 12 : 11, p, err);
	return r;
}

/* The first row of a claim says what it held back for limits and parked
 * (and whether limits exist at all). */
static void read_claim_summary(dispatch *d, const char *const *v, int *skipped, buf *parked)
{
	d->limited = !v[CLAIM_LIMITS] || strcmp(v[CLAIM_LIMITS], "f") != 0;
	atomic_store(&d->env.m->claim_limits, d->limited);
	/* Held back by a limit: a run that ends may let them go. */
	int back = claimrow_held_back(v);
	*skipped += back;
	atomic_fetch_add(&d->env.m->flow_held_back, (uint64_t)back);
	/* One array of the parks of every part claimed: "{1,2}" and "{3}"
	 * make "{1,2,3}". */
	const char *more = v[CLAIM_PARKED];
	if (more && parked->len) {
		parked->data[parked->len - 1] = ',';
		more++;
	}
	if (more)
		buf_puts(parked, more);
}

/*
 * Gives job j the journal this worker cached of its run (jcache.h), taken
 * out of the cache, when the claim loaded only the entries after it (and
 * counts the hit), or drops a copy the claim did not use: cut since, or
 * not sent. -1 when the claim counted on a copy the cache no longer has:
 * the run cannot execute with half a journal, so it is given back, and
 * the next claim, which will not name it, loads its journal whole.
 */
static int attach_journal(dispatch *d, job *j)
{
	pthread_mutex_lock(&d->mu);
	jcache_run *r = jcache_take(d->jc, j->run_id);
	atomic_store(&d->env.m->journal_cache_runs, jcache_count(d->jc));
	atomic_store(&d->env.m->journal_cache_bytes, (int64_t)jcache_bytes(d->jc));
	pthread_mutex_unlock(&d->mu);
	if (j->journal_from == 0) {
		jcache_run_free(r);
		if (j->journal_bytes > 0)
			atomic_fetch_add(&d->env.m->journal_loads, 1);
		return 0;
	}
	if (!r || r->upto != j->journal_from || r->cuts != j->journal_cuts) {
		jcache_run_free(r);
		return -1;
	}
	j->jc = r;
	atomic_fetch_add(&d->env.m->journal_cache_hits, 1);
	int64_t bytes = r->db_bytes + j->journal_bytes;
	if (bytes > d->limits.max_journal_bytes && !j->load_error[0])
		journal_too_large(j, bytes, d->limits.max_journal_bytes);
	return 0;
}

/* Queues the job of a claimed row, or adds its run to those to give back
 * (refuse_row) when it cannot execute here. */
static void take_row(dispatch *d, const claimrow_env *env, const char *const *v, pgarr *refused,
                     pgarr *marked)
{
	job *j;
	if (claimrow_decode(env, v, &j) < 0) {
		refuse_row(d, v, refused, marked);
		return;
	}
	if (attach_journal(d, j) < 0) {
		job_free(j);
		refuse_row(d, v, refused, marked);
		return;
	}
	if (j->run_id > d->newest_claimed)
		d->newest_claimed = j->run_id;
	j->max_signals = d->limits.max_pending_signals;
	if (queue_job(d, j) < 0) {
		job_free(j);
		refuse_row(d, v, refused, marked);
	}
}

/* What a claim's rows are decoded against: the runner's shards, its id
 * owner, when the claim (or read) was sent (mono) and the journal bound. */
static claimrow_env claim_env(const dispatch *d, int64_t owner, int64_t mono)
{
	return (claimrow_env){.map = d->env.map,
	                      .owner = owner,
	                      .mono_at_load = mono,
	                      .max_journal_bytes = d->limits.max_journal_bytes};
}

/* Gives back the runs take_row refused (unclaim), and frees both lists. */
static void give_back_refused(dispatch *d, PGconn *conn, int64_t owner, pgarr *refused,
                              pgarr *marked)
{
	if (refused->n)
		unclaim(d, conn, owner, refused, marked);
	pgarr_free(refused);
	pgarr_free(marked);
}

/* The place of a claimed run among the rows of a claim, as one server's
 * claim returns them (CLAIM_SELECT: c.mark DESC, c.queued NULLS FIRST): 0
 * a run counted that starts at once, 1 one counted that waits in the
 * queue, 2 one not counted (it is counted as it starts: mark_started). */
static int row_class(const char *const *v)
{
	if (!v[CLAIM_MARKED] || strcmp(v[CLAIM_MARKED], "t") != 0)
		return 2;
	return v[CLAIM_QUEUED] ? 1 : 0;
}

/*
 * Takes the rows of the n claims r (freed here; NULL ones skipped): queues
 * their runs, gives back what it took for those that cannot execute here
 * (unclaim); how many runs they claimed. The runs of all are queued class
 * by class (row_class), each class claim by claim, as one server's claim
 * returns them (the rows of one claim come in that order already): an idle
 * executor takes a run as soon as it is queued, so a run that is to wait,
 * of one part's claim, queued before a run another part's claim counted to
 * start at once would start in its place, and the other wait, counted as
 * started. On Citus, test_exec's
 * a_run_that_crashes_its_worker_after_waiting_in_the_queue_fails_as_poison
 * saw the run that had crashed its worker (not counted: it runs alone)
 * start before the run of priority 10 claimed to start at once, and crash
 * the worker again. *next_due_ms: the earliest of the claims'. See claim
 * for the other out-parameters.
 */
static int take_claims(dispatch *d, PGconn *conn, PGresult **r, int n, int64_t owner, int64_t mono,
                       int64_t *next_due_ms, int *skipped, buf *parked)
{
	int got = 0;
	pgarr refused = PGARR_INIT, marked = PGARR_INIT;
	*next_due_ms = -1;
	claimrow_env env = claim_env(d, owner, mono);
	const char *v[CLAIM_NCOLS];
	for (int k = 0; k < n; k++) {
		int64_t next = -1;
		for (int i = 0; r[k] && i < PQntuples(r[k]); i++) {
			row_values(r[k], i, v);
			int64_t due = claimrow_next_due_ms(v);
			if (due >= 0)
				next = due;
			if (i == 0)
				read_claim_summary(d, v, skipped, parked);
		}
		if (next >= 0 && (*next_due_ms < 0 || next < *next_due_ms))
			*next_due_ms = next;
	}
	/* One claim's rows come class by class already: one pass. */
	int classes = n > 1 ? 3 : 1;
	for (int cls = 0; cls < classes; cls++)
		for (int k = 0; k < n; k++)
			for (int i = 0; r[k] && i < PQntuples(r[k]); i++) {
				row_values(r[k], i, v);
				/* Without a run, the row only says when to look again. */
				if (!v[CLAIM_ID] || (classes > 1 && row_class(v) != cls))
					continue;
				got++;
				take_row(d, &env, v, &refused, &marked);
			}
	d->refused += (int)refused.n;
	d->big_claim = 0;
	for (int k = 0; k < n; k++) {
		d->big_claim |= r[k] && PQresultMemorySize(r[k]) > DB_BUFFER_KEEP_MAX;
		PQclear(r[k]);
	}
	give_back_refused(d, conn, owner, &refused, &marked);
	return got;
}

/* take_claims of claim r alone. */
static int take_claimed(dispatch *d, PGconn *conn, PGresult *r, int64_t owner, int64_t mono,
                        int64_t *next_due_ms, int *skipped, buf *parked)
{
	return take_claims(d, conn, &r, 1, owner, mono, next_due_ms, skipped, parked);
}

/* Whether run is in flight here (a claim took it), and whether an executor
 * would start a run queued now. */
static void pushed_fate(dispatch *d, int64_t run, int *flying, int *at_once)
{
	pthread_mutex_lock(&d->mu);
	int i = 0;
	while (i < d->nfl && d->fl[i].run_id != run)
		i++;
	*flying = i < d->nfl;
	*at_once = !d->solo && !d->solo_waiting && d->idle > d->qlen && !atomic_load(&d->stopping);
	pthread_mutex_unlock(&d->mu);
}

/*
 * The runs handed to this runner as its own claim would return them, for
 * those whose hand-over still stands. The notification names the run only:
 * it may come late (the relay reads notifications in turn, and a claim of
 * all that is due takes a run handed over as it takes one a dead worker
 * had claimed), and anyone who may connect may notify, or send again a
 * notification it read. A run the poll took first (and may have finished
 * since), a run of a shard whose lease moved meanwhile, or a run named by
 * someone else must not start: its steps would run again. So the run is
 * read, and comes back only if it is still handed to this runner (every
 * claim of a run handed over ends the hand-over: queued_by NULL) in a
 * shard whose lease is this runner's, with that lease's epoch. A read is
 * enough: no claim of this worker takes a run it has in flight (and the
 * poller both reads and claims), and a claim elsewhere after the read (a
 * lease lost meanwhile) starts the run alongside this execution, before
 * either journaled a step, as a claim of a run whose worker seems dead
 * does: the fence keeps one execution's writes. Each run is found by its
 * key, and its lease by its key (a generic plan that joined the leases by
 * owner walked every lease of the runner: 4,096 on one worker), in the
 * run's part: on Citus a join of leases and runs that is not on the part
 * is refused ("complex joins are only supported when all distributed
 * tables are co-located and joined on their distribution columns"), and
 * a run named by a notification, which no enqueue hands over there but
 * anyone may forge, was claimed by id with a warning instead. The
 * columns are CLAIM_SELECT's, as a claim of a new run returns them: no
 * journal, no signals, its start message (id 0) and its one count; and, as
 * a claim says, whether cairn.limits has a row (a worker whose runs all
 * came handed over would otherwise claim with limits long after the last
 * one went). $1 owner, $2 the runs.
 */
static const db_stmt ST_PUSHED_TAKE = {
    "cairn_pushed_take",
    "SELECT * FROM (SELECT r.id, r.shard_group, r.shard, "
    "  (SELECT CASE WHEN l.owner = $1 THEN l.epoch END FROM cairn.shard_leases l "
    "   WHERE l.part = r.part AND l.shard_group = r.shard_group AND l.shard = r.shard) "
    "   AS epoch, "
    "  '{0}'::text, r.workflow, r.status, r.input::text, r.attempt, r.max_attempts, "
    "  r.cancel_requested, (extract(epoch FROM r.scheduled_at) * 1000)::bigint, "
    "  ceil(extract(epoch FROM now()) * 1000)::bigint, r.claims, 0, NULL::text, NULL::text, "
    "  NULL::text, NULL::bigint, true, r.parent_id, false, NULL::text, NULL::int, "
    "  EXISTS (SELECT 1 FROM cairn.limits), "
    "  NULL::bigint, r.priority, 0, r.journal_cuts, coalesce(r.chain_id, r.id), r.traceparent, "
    "  (extract(epoch FROM r.created_at) * 1000000)::bigint "
    "  FROM cairn.runs r "
    "  WHERE r.id = ANY ($2::bigint[]) AND r.status = 'running' AND r.claims = 1 "
    "    AND r.queued_by = $1 AND r.queued_seq IS NULL) x "
    "WHERE x.epoch IS NOT NULL"};

/*
 * Takes the runs enqueues handed to this runner (dispatch_push): those
 * ST_PUSHED_TAKE returns are queued as a claim's rows, to start at once;
 * one in flight here (a claim took it first) is left alone. The others are
 * claimed by id, as runs a wake-up names (SQL_CLAIM_NEW takes a run handed
 * over): one the read does not return (counted stale), one that would wait
 * in the queue (every executor busy: the enqueue found the poller idle,
 * but the queue is this poller's to fill, and it goes busy as it fills
 * it), and all of them when the read fails. One that cannot execute here
 * (its shard is being released) is given back as a claimed run is
 * (unclaim).
 */
static void take_pushed(dispatch *d, PGconn *conn)
{
	int64_t runs[CAIRN_WAKE_RUNS], again[CAIRN_WAKE_RUNS];
	pthread_mutex_lock(&d->mu);
	int n = d->npushed, nagain = 0, ngo = 0;
	memcpy(runs, d->pushed_runs, (size_t)n * sizeof *runs);
	d->npushed = 0;
	pthread_mutex_unlock(&d->mu);
	if (!n)
		return;
	pgarr go = PGARR_INIT;
	for (int i = 0; i < n; i++) {
		int flying = 0, at_once = 0;
		pushed_fate(d, runs[i], &flying, &at_once);
		if (!flying && at_once && d->can_take_pushed) {
			pgarr_add_i64(&go, runs[i]);
			runs[ngo++] = runs[i]; /* runs[0, ngo): those the read is for */
		} else if (!flying) {
			again[nagain++] = runs[i];
		}
	}
	PGresult *r = NULL;
	int64_t owner = lease_runner_id(d->env.lease), sent = clock_mono_ms();
	if (ngo) {
		char me[24];
		const char *p[] = {db_i64(me, owner), pgarr_str(&go)};
		buf err = BUF_INIT;
		r = go.b.oom ? NULL : db_exec_prepared(conn, &err, ST_PUSHED_TAKE.name, 2, p);
		if (!r) {
			log_kv(d->env.log, LOG_WARN,
			       "cannot read the runs handed over to start them; they are claimed "
			       "from the database instead",
			       "error", go.b.oom ? "out of memory" : buf_str(&err), NULL);
			memcpy(again + nagain, runs, (size_t)ngo * sizeof *runs);
			nagain += ngo;
		}
		buf_free(&err);
	}
	pgarr_free(&go);
	if (r) {
		pgarr refused = PGARR_INIT, marked = PGARR_INIT;
		claimrow_env env = claim_env(d, owner, sent);
		buf parked = BUF_INIT; /* a hand-over holds none back */
		int held = 0;
		for (int i = 0; i < PQntuples(r); i++) {
			const char *v[CLAIM_NCOLS];
			row_values(r, i, v);
			if (i == 0)
				read_claim_summary(d, v, &held, &parked);
			take_row(d, &env, v, &refused, &marked);
		}
		buf_free(&parked);
		atomic_fetch_add(&d->env.m->runs_pushed, PQntuples(r));
		atomic_fetch_add(&d->env.m->runs_pushed_stale, ngo - PQntuples(r));
		/* Those not returned are claimed by id, as any run a wake-up
		 * names: a run handed over that a claim took meanwhile is not
		 * claimed again, and a run named by a notification that was
		 * not an enqueue's is not left to the poll. */
		for (int i = 0; i < ngo; i++) {
			int back = 0;
			for (int k = 0; k < PQntuples(r) && !back; k++)
				back = db_get_i64(r, k, CLAIM_ID) == runs[i];
			if (!back)
				again[nagain++] = runs[i];
		}
		PQclear(r);
		give_back_refused(d, conn, owner, &refused, &marked);
	}
	if (nagain)
		dispatch_wake_runs(d, 0, again, nagain);
}

/*
 * Plans. Every claim runs on a generic plan, made once per session (and
 * again when the tables' statistics change: after autovacuum's ANALYZE, or
 * the poller's own after a slow claim). Planned with its values each time,
 * the claim of all that is due spent longer planning (about 3 ms, its CTEs
 * joined anew) than running; its generic plan is as good because every walk
 * of what is due is bounded by a constant (CLAIM_BOUND), so the planner never
 * expects more rows than the poll batch, however many are due.
 */
/* Claims up to limit runs, of this runner's shards or (nruns > 0) of those
 * runs only: how many runs the claim returned (at most limit), or
 * -CAIRN_EDB; *next_due_ms is the time until the next message of the
 * shards (or of those runs) is due (-1: none). Runs that cannot be queued
 * keep their messages and come back. */
/* With parts, what a claim of all that is due is of and what it says of
 * each part: only, the parts to claim (NULL: every part this runner owns
 * shards in); next, of each part claimed, when it is next due (PART_DUE,
 * PART_NOTHING or ms from the claim). */
#define PART_NOTHING (-1) /* nothing due there, now or later */
#define PART_DUE     (-2) /* something due now, or not known */
typedef struct part_scope {
	const unsigned char *only;
	int64_t next[DB_PARTS_MAX];
} part_scope;

static int claim_parts(dispatch *d, PGconn *conn, int64_t owner, int limit, int start_now,
                       int go_busy, const int64_t *runs, int nruns, int64_t *next_due_ms,
                       int *skipped, buf *parked, part_scope *scope, buf *err);

static int claim(dispatch *d, PGconn *conn, int64_t owner, int limit, int start_now, int go_busy,
                 const int64_t *runs, int nruns, int64_t *next_due_ms, int *skipped, buf *parked,
                 part_scope *scope, buf *err)
{
	if (d->limits.nparts > 1)
		return claim_parts(d, conn, owner, limit, start_now, go_busy, runs, nruns,
		                   next_due_ms, skipped, parked, scope, err);
	pgarr ex = PGARR_INIT, want = PGARR_INIT, jc[3] = {PGARR_INIT, PGARR_INIT, PGARR_INIT};
	*skipped = claim_lists(d, &ex, &want, jc, runs, nruns);
	char me[24], lim[24], jb[24], ps[24], pa[24], sn[24];
	const char *p[] = {db_i64(me, owner),
	                   pgarr_str(&ex),
	                   db_i64(lim, limit),
	                   db_i64(jb, d->limits.max_journal_bytes),
	                   db_i64(ps, d->limits.max_pending_signals),
	                   db_i64(pa, d->env.cfg->poison_after),
	                   db_i64(sn, start_now),
	                   go_busy ? "t" : "f",
	                   pgarr_str(&jc[0]),
	                   pgarr_str(&jc[1]),
	                   pgarr_str(&jc[2]),
	                   pgarr_str(&want)};
	int64_t mono;
	PGresult *r = send_claim(d, conn, p, start_now, go_busy, runs, nruns, &mono, err);
	pgarr_free(&ex);
	pgarr_free(&want);
	for (int i = 0; i < 3; i++)
		pgarr_free(&jc[i]);
	if (!r)
		return -CAIRN_EDB;
	return take_claimed(d, conn, r, owner, mono, next_due_ms, skipped, parked);
}

/*
 * The claims on a database with parts (Citus): one router statement per
 * part this runner owns shards in (or, for named runs, per part they are
 * in: the shard a run's id carries names it), each a task on the node of
 * its part, never one statement over several nodes. Together they take at
 * most limit runs, numbered as one claim's (the number of the first, from
 * cairn.claim_seq on the coordinator, SQL_CLAIM_BASE, then the count
 * claimed so far) and with one time, as one claim of one server. With
 * limits, a claim is that of each part's keys, one of the fleet-wide
 * limits for all parts together, then each part's mark (claim_set).
 */
static const char SQL_CLAIM_BASE[] = "SELECT nextval('cairn.claim_seq') * 16384, now()";
static const char SQL_BUSY[] = "UPDATE cairn.runners SET idle = false WHERE id = $1 AND idle";

/* The parts (their part_no) this runner owns a shard in, into has. */
static void owned_parts(dispatch *d, unsigned char *has)
{
	int n = d->limits.nparts, shards = shardmap_shards(d->env.map);
	for (int g = 0; g < shardmap_ngroups(d->env.map); g++)
		for (int sh = 0; sh < shards; sh++)
			if (shardmap_held(d->env.map, g, sh))
				has[sh % n] = 1;
}

/* What the claims of one round's parts share. */
typedef struct part_claim {
	int64_t owner, base;
	char now[64]; /* the claim's time, as SQL_CLAIM_BASE read it */
	int64_t at;   /* the monotonic clock before it did */
	int go_busy;
	pgarr ex, jc[3];
	int64_t next_due_ms;
	int64_t *part_next; /* part_scope's next */
	int *skipped;
	buf *parked, *err;
} part_claim;

/* The claim of one part in a round: up to limit runs of those named
 * (want), or of all that is due there (want NULL), the first start_now
 * to start at once, numbered from base. */
typedef struct part_want {
	int part;
	pgarr *want;
	int limit, start_now;
	int64_t base;
} part_want;

/* The seventeen parameters of a claim of part w (see SQL_CLAIM_PART_KEYS),
 * the JSON rows and the next due time left empty; SQL_CLAIM_PART's
 * fifteen (plain) are the first eleven, then the part, the number, the
 * time and the priority it stops at (none). */
typedef struct part_params {
	char me[24], lim[24], jb[24], ps[24], pa[24], sn[24], key[24], num[24], floor[24];
	const char *p[17], *plain[15];
} part_params;

static void part_params_of(const dispatch *d, part_claim *pc, const part_want *w,
                           part_params *t)
{
	const char *p[] = {db_i64(t->me, pc->owner),
	                   pgarr_str(&pc->ex),
	                   db_i64(t->lim, w->limit),
	                   db_i64(t->jb, d->limits.max_journal_bytes),
	                   db_i64(t->ps, d->limits.max_pending_signals),
	                   db_i64(t->pa, d->env.cfg->poison_after),
	                   db_i64(t->sn, w->start_now),
	                   pc->go_busy ? "t" : "f",
	                   pgarr_str(&pc->jc[0]),
	                   pgarr_str(&pc->jc[1]),
	                   pgarr_str(&pc->jc[2]),
	                   w->want ? pgarr_str(w->want) : "{}",
	                   db_i64(t->key, d->limits.part_keys[w->part]),
	                   db_i64(t->num, w->base),
	                   pc->now,
	                   "",
	                   ""};
	memcpy(t->p, p, sizeof p);
	memcpy(t->plain, p, 11 * sizeof *p);
	memcpy(t->plain + 11, p + 12, 3 * sizeof *p);
	t->plain[14] = db_i64(t->floor, INT_MIN);
}

static void next_due(part_claim *pc, const PGresult *r, int col)
{
	if (PQntuples(r) > 0 && !PQgetisnull(r, 0, col)) {
		int64_t due = db_get_i64(r, 0, col);
		if (pc->next_due_ms < 0 || due < pc->next_due_ms)
			pc->next_due_ms = due;
	}
}

/* Runs claim statement which m times, the i-th with params[i] (n each),
 * sent together (db_exec_prepared_each), the results into out: 0, or
 * -CAIRN_EDB when one failed. */
static int claim_each(dispatch *d, PGconn *conn, part_claim *pc, int which, int m, int n,
                      const char *const *const *params, PGresult **out)
{
	claim_warm(d, which);
	return db_exec_prepared_each(conn, pc->err, CLAIM_STATEMENT[which].st.name, m, n, params,
	                             out) < 0
	           ? -CAIRN_EDB
	           : 0;
}

/*
 * The claims with limits of the m parts of w (see SQL_CLAIM_PART_KEYS),
 * whose parameters are t: each part's keys, then the fleet-wide limits of
 * the first limit due runs of all parts in one statement on the
 * coordinator (the first start_now admitted to start at once), whose time
 * they all start at, then the mark of each part that has a run admitted,
 * held or pushed. The marks' results into out: 0, or -CAIRN_EDB. Of all
 * that is due in several parts, this takes what one server's claim would
 * (see claim_parts_due) without reading it twice.
 */
static int claim_limited(dispatch *d, PGconn *conn, part_claim *pc, const part_want *w, int m,
                         int limit, int start_now, part_params *t, const char **pv[],
                         PGresult **out)
{
	PGresult **keys = calloc((size_t)m, sizeof *keys), *f = NULL;
	if (!keys)
		return -CAIRN_EDB;
	for (int i = 0; i < m; i++)
		pv[i] = t[i].p;
	int rc = claim_each(d, conn, pc, CLAIM_PART_KEYS + (w[0].want != NULL), m, 17,
	                    (const char *const *const *)pv, keys);
	buf rows = BUF_INIT;
	buf_puts(&rows, "[");
	for (int i = 0; i < m; i++) {
		if (!keys[i])
			continue;
		next_due(pc, keys[i], 1);
		if (PQgetisnull(keys[i], 0, 0))
			continue; /* nothing due there */
		const char *a = PQgetvalue(keys[i], 0, 0); /* a JSON array: its elements */
		if (rows.len > 1)
			buf_puts(&rows, ",");
		buf_append(&rows, a + 1, strlen(a) - 2);
	}
	buf_puts(&rows, "]");
	if (rows.len > 2) {
		char me[24], lim[24], sn[24];
		const char *pf[] = {db_i64(me, pc->owner), buf_str(&rows), db_i64(lim, limit),
		                    db_i64(sn, start_now)};
		f = rows.oom ? NULL : claim_exec(d, conn, CLAIM_FLEET, 4, pf, pc->err);
		if (!f)
			rc = -CAIRN_EDB;
	}
	/* Each part with rows, by its key (SQL_CLAIM_FLEET's first column),
	 * numbered after those before it. A part whose mark has nothing to do
	 * held back every run it has due. */
	int k = 0;
	int64_t base = pc->base;
	for (int r = 0; f && r < PQntuples(f); r++) {
		int i = 0;
		while (i < m && d->limits.part_keys[w[i].part] != db_get_int(f, r, 0))
			i++;
		int n = db_get_int(f, r, 4);
		if (i == m || !keys[i] || !db_get_bool(f, r, 3)) {
			*pc->skipped += n;
			atomic_fetch_add(&d->env.m->flow_held_back, (uint64_t)n);
			continue;
		}
		t[i].p[6] = db_i64(t[i].sn, db_get_i64(f, r, 5));
		t[i].p[13] = db_i64(t[i].num, base);
		t[i].p[14] = PQgetvalue(f, r, 2);
		t[i].p[15] = PQgetvalue(f, r, 1);
		t[i].p[16] = PQgetisnull(keys[i], 0, 1) ? "-1" : PQgetvalue(keys[i], 0, 1);
		pv[k++] = t[i].p;
		base += n;
	}
	if (k && claim_each(d, conn, pc, CLAIM_PART_MARK, k, 17, (const char *const *const *)pv,
	                    out) < 0)
		rc = -CAIRN_EDB;
	PQclear(f);
	for (int i = 0; i < m; i++)
		PQclear(keys[i]);
	free(keys);
	buf_free(&rows);
	return rc;
}

/*
 * The claims of one round, of the m parts of w, sent together (one round
 * trip a statement: pipelined, each in a transaction of its own): how
 * many runs they claimed, or -CAIRN_EDB. The runs of all are queued
 * together at the end (take_claims), those of parts that failed aside: an
 * executor would otherwise start those of the first part before the next
 * part's claim, whatever their priorities.
 */
static int claim_set(dispatch *d, PGconn *conn, part_claim *pc, const part_want *w, int m,
                     int limit, int start_now)
{
	PGresult **out = calloc((size_t)m, sizeof *out);
	part_params *t = calloc((size_t)m, sizeof *t);
	const char ***pv = calloc((size_t)m, sizeof *pv);
	int rc = out && t && pv ? 0 : -CAIRN_EDB, got = 0;
	if (rc) {
		buf_reset(pc->err);
		buf_puts(pc->err, "out of memory claiming runs");
	}
	for (int i = 0; !rc && i < m; i++) {
		part_params_of(d, pc, &w[i], &t[i]);
		pv[i] = w[i].want ? t[i].p : t[i].plain;
	}
	if (!rc && d->limited)
		rc = claim_limited(d, conn, pc, w, m, limit, start_now, t, pv, out);
	else if (!rc)
		rc = claim_each(d, conn, pc, CLAIM_PART + (w[0].want != NULL), m, 15,
		                (const char *const *const *)pv, out);
	if (out) {
		int64_t due;
		got =
		    take_claims(d, conn, out, m, pc->owner, pc->at, &due, pc->skipped, pc->parked);
		if (due >= 0 && (pc->next_due_ms < 0 || due < pc->next_due_ms))
			pc->next_due_ms = due;
	}
	free(out);
	free(t);
	free(pv);
	return rc < 0 ? rc : got;
}

/* The first run a claim of all that is due in part w[i] would take
 * (SQL_CLAIM_PEEK): its priority (or, once the part was claimed down to a
 * priority, one less than that) and when it was due. */
typedef struct part_head {
	int i, due, claimed, prio;
	int64_t at_us;
} part_head;

/* Whether a goes before b: a higher priority, then the longer due. */
static int head_before(const part_head *a, const part_head *b)
{
	return a->prio != b->prio ? a->prio > b->prio : a->at_us < b->at_us;
}

/* The heads of the m parts of w, sent together: 0 or -CAIRN_EDB. */
static int part_heads(dispatch *d, PGconn *conn, part_claim *pc, const part_want *w, int m,
                      part_head *h)
{
	char me[24], (*key)[24] = calloc((size_t)m, sizeof *key);
	const char *(*p)[4] = calloc((size_t)m, sizeof *p);
	const char *const **pv = calloc((size_t)m, sizeof *pv);
	PGresult **r = calloc((size_t)m, sizeof *r);
	int rc = key && p && pv && r ? 0 : -CAIRN_EDB;
	for (int i = 0; !rc && i < m; i++) {
		p[i][0] = db_i64(me, pc->owner);
		p[i][1] = pgarr_str(&pc->ex);
		p[i][2] = "1";
		p[i][3] = db_i64(key[i], d->limits.part_keys[w[i].part]);
		pv[i] = p[i];
	}
	if (!rc)
		rc = claim_each(d, conn, pc, CLAIM_PEEK, m, 4, pv, r);
	for (int i = 0; !rc && i < m; i++) {
		next_due(pc, r[i], 3);
		int due = PQntuples(r[i]) > 0 && !PQgetisnull(r[i], 0, 0);
		if (!due)
			pc->part_next[w[i].part] = PQntuples(r[i]) > 0 && !PQgetisnull(r[i], 0, 3)
			                               ? db_get_i64(r[i], 0, 3)
			                               : PART_NOTHING;
		h[i] = (part_head){.i = i,
		                   .due = due,
		                   .prio = due ? db_get_int(r[i], 0, 1) : 0,
		                   .at_us = due ? db_get_i64(r[i], 0, 2) : 0};
	}
	for (int i = 0; r && i < m; i++)
		PQclear(r[i]);
	free(r);
	free(pv);
	free(p);
	free(key);
	return rc;
}

/*
 * A claim of all that is due in several parts takes runs in the order a
 * claim of one server would, by priority: first the head of each of the m
 * parts of w (SQL_CLAIM_PEEK of one run, the part's next due time when
 * nothing is), then claims one after the other, each of the part whose
 * head goes first (head_before) and down to the priority of the best head
 * of the others (its floor), until limit runs are claimed; the first
 * start_now start at once. A part claimed below limit has nothing left at
 * or above its floor: for the others its head is then one less, and it is
 * claimed at most once a round. The round ends early where the best head
 * left is below such a part's: what it has left is claimed next round,
 * with the heads read again (recheck). Most often every head has one
 * priority and the part with the longest due run fills the claim alone:
 * one statement a part to look, one to claim. How many runs it claimed,
 * or -CAIRN_EDB.
 */
static int claim_parts_due(dispatch *d, PGconn *conn, part_claim *pc, const part_want *w, int m,
                           int limit, int start_now)
{
	part_head *h = calloc((size_t)m, sizeof *h);
	int got = h ? 0 : -CAIRN_EDB;
	if (!got && m > 1)
		got = part_heads(d, conn, pc, w, m, h);
	else if (!got)
		h[0] = (part_head){.due = 1, .prio = INT_MAX}; /* one part: no floor */
	while (got >= 0 && got < limit) {
		part_head *best = NULL;
		int floor = INT_MIN;
		for (int i = 0; i < m; i++)
			if (h[i].due && !h[i].claimed && (!best || head_before(&h[i], best)))
				best = &h[i];
		if (!best)
			break;
		for (int i = 0; i < m; i++)
			if (h[i].due && &h[i] != best && h[i].prio > floor)
				floor = h[i].prio;
		if (best->prio < floor)
			break; /* a part claimed down to its floor may have more first */
		part_params t;
		part_want one = w[best->i];
		one.limit = limit - got;
		one.start_now = start_now > got ? start_now - got : 0;
		one.base = pc->base + got;
		part_params_of(d, pc, &one, &t);
		t.plain[14] = db_i64(t.floor, floor);
		PGresult *r = claim_exec(d, conn, CLAIM_PART, 15, t.plain, pc->err);
		if (!r) {
			got = -CAIRN_EDB;
			break;
		}
		int64_t due;
		int k = take_claimed(d, conn, r, pc->owner, pc->at, &due, pc->skipped, pc->parked);
		if (due >= 0 && (pc->next_due_ms < 0 || due < pc->next_due_ms))
			pc->next_due_ms = due;
		got += k;
		best->claimed = 1;
		best->due = floor > INT_MIN;
		best->prio = floor > INT_MIN ? floor - 1 : 0;
		/* Claimed to the end: when the part is due next. */
		if (!best->due && k < one.limit)
			pc->part_next[w[best->i].part] = due >= 0 ? due : PART_NOTHING;
	}
	for (int i = 0; got >= 0 && got < limit && i < m; i++)
		if (h[i].due && !*pc->skipped)
			*pc->skipped = 1; /* left behind by a floor: look again (recheck) */
	free(h);
	return got;
}

static int claim_parts(dispatch *d, PGconn *conn, int64_t owner, int limit, int start_now,
                       int go_busy, const int64_t *runs, int nruns, int64_t *next_due_ms,
                       int *skipped, buf *parked, part_scope *scope, buf *err)
{
	int n = d->limits.nparts;
	for (int i = 0; i < nruns; i++)
		if (runs[i] < d->limits.first_placed_id)
			nruns = 0; /* a run older than parts names no part: claim all */
	*next_due_ms = -1;
	if (go_busy) {
		char me[24];
		const char *pb[] = {db_i64(me, owner)};
		if (db_cmd(conn, err, SQL_BUSY, 1, pb) < 0)
			return -CAIRN_EDB;
	}
	int64_t at = clock_mono_ms();
	PGresult *b = db_exec(conn, err, SQL_CLAIM_BASE, 0, NULL);
	if (!b)
		return -CAIRN_EDB;
	part_claim pc = {.owner = owner,
	                 .base = db_get_i64(b, 0, 0),
	                 .at = at,
	                 .go_busy = go_busy,
	                 .ex = PGARR_INIT,
	                 .jc = {PGARR_INIT, PGARR_INIT, PGARR_INIT},
	                 .next_due_ms = -1,
	                 .part_next = scope->next,
	                 .skipped = skipped,
	                 .parked = parked,
	                 .err = err};
	snprintf(pc.now, sizeof pc.now, "%s", PQgetvalue(b, 0, 1));
	PQclear(b);
	pgarr want = PGARR_INIT, *wants = nruns ? calloc((size_t)n, sizeof *wants) : NULL;
	part_want *w = calloc((size_t)n, sizeof *w);
	*skipped = claim_lists(d, &pc.ex, &want, pc.jc, runs, nruns);
	int m = 0, got = w && (!nruns || wants) ? 0 : -CAIRN_EDB, start_now0 = start_now;
	if (!got && nruns) {
		/* The named runs, part by part (the shard each id carries names
		 * its part), at most limit in all, numbered one after the other,
		 * the first start_now of them starting at once. */
		for (int i = 0; i < nruns; i++)
			pgarr_add_i64(&wants[(runs[i] % RUN_ID_SHARDS) % n], runs[i]);
		int64_t base = pc.base;
		int left = limit;
		for (int part = 0; part < n && left > 0; part++)
			if (wants[part].n) {
				int k = wants[part].n < left ? wants[part].n : left;
				w[m++] = (part_want){.part = part,
				                     .want = &wants[part],
				                     .limit = k,
				                     .start_now = start_now < k ? start_now : k,
				                     .base = base};
				start_now -= w[m - 1].start_now;
				base += k;
				left -= k;
				got |= wants[part].b.oom ? -CAIRN_EDB : 0;
			}
	} else if (!got) {
		unsigned char has[DB_PARTS_MAX] = {0};
		owned_parts(d, has);
		for (int part = 0; part < n; part++)
			if (has[part] && (!scope->only || scope->only[part])) {
				w[m++] = (part_want){.part = part,
				                     .limit = limit,
				                     .start_now = start_now,
				                     .base = pc.base};
				scope->next[part] = PART_DUE; /* until its claim says */
			}
	}
	if (!got && m)
		got = !nruns && !d->limited
		          ? claim_parts_due(d, conn, &pc, w, m, limit, start_now)
		          : claim_set(d, conn, &pc, w, m, limit, nruns ? start_now0 : start_now);
	*next_due_ms = pc.next_due_ms;
	for (int i = 0; wants && i < n; i++)
		pgarr_free(&wants[i]);
	free(wants);
	free(w);
	pgarr_free(&pc.ex);
	pgarr_free(&want);
	for (int i = 0; i < 3; i++)
		pgarr_free(&pc.jc[i]);
	return got;
}

void dispatch_claim_part_sql(dispatch_claim_sql which, int bound, buf *out)
{
	static const int statement[] = {
	    [DISPATCH_CLAIM_PART] = CLAIM_PART,
	    [DISPATCH_CLAIM_PART_NAMED] = CLAIM_PART + CLAIM_NAMED,
	    [DISPATCH_CLAIM_PEEK] = CLAIM_PEEK,
	    [DISPATCH_CLAIM_KEYS] = CLAIM_PART_KEYS,
	    [DISPATCH_CLAIM_KEYS_NAMED] = CLAIM_PART_KEYS + CLAIM_NAMED,
	    [DISPATCH_CLAIM_MARK] = CLAIM_PART_MARK};
	char b[24];
	claim_text(statement[which], db_i64(b, bound), out);
}

/* sql with its tables filtered (IN_PART) by the parts of parameter $n
 * (an int[]), or as written when n is 0, appended to out. */
static void in_parts_text(const char *sql, int n, buf *out)
{
	char part[32];
	snprintf(part, sizeof part, "ANY ($%d::int[])", n);
	sqlparam_in_part(sql, n ? part : NULL, out);
}

/*
 * Runs sql, a statement about runs of this worker (its tables filtered
 * with IN_PART), with its n parameters p: with parts, only in the parts
 * marked in in (by part_no), whose keys are then its parameter n + 1 (p
 * has room for it), so that on Citus it is a task on each of their nodes
 * and not one on every shard; without, as written.
 */
static PGresult *exec_in_parts(dispatch *d, PGconn *conn, buf *err, const char *sql, int n,
                               const char **p, const unsigned char *in)
{
	buf text = BUF_INIT;
	pgarr keys = PGARR_INIT;
	int parts = d->limits.nparts > 1;
	if (parts) {
		for (int i = 0; i < d->limits.nparts; i++)
			if (in[i])
				pgarr_add_i64(&keys, d->limits.part_keys[i]);
		p[n] = pgarr_str(&keys);
	}
	in_parts_text(sql, parts ? n + 1 : 0, &text);
	PGresult *r = db_exec(conn, err, buf_str(&text), n + parts, p);
	pgarr_free(&keys);
	buf_free(&text);
	return r;
}

static const char SQL_CANCELLED[] = "SELECT r.id FROM cairn.runs r "
                                    "WHERE " IN_PART("r") "r.id = ANY ($1::bigint[]) "
                                                          "  AND r.cancel_requested";

/* Tells in-flight runs that were cancelled meanwhile, so that a long step
 * polling cairn_should_stop() hears of it before its next durable call. */
static void check_cancels(dispatch *d, PGconn *conn)
{
	pgarr ids = PGARR_INIT;
	unsigned char in[DB_PARTS_MAX] = {0};
	inflight_ids(d, &ids, in, NULL, 0);
	if (ids.n == 0)
		return;
	const char *p[2] = {pgarr_str(&ids)};
	PGresult *r = exec_in_parts(d, conn, NULL, SQL_CANCELLED, 1, p, in);
	pgarr_free(&ids);
	pthread_mutex_lock(&d->mu);
	for (int k = 0; r && k < PQntuples(r); k++) {
		int64_t id = db_get_i64(r, k, 0);
		for (int i = 0; i < d->nfl; i++)
			if (d->fl[i].run_id == id)
				atomic_store(&d->fl[i].job->cancel_requested, 1);
	}
	pthread_mutex_unlock(&d->mu);
	PQclear(r);
}

/*
 * Held runs (flow control, migration 0010). A claim that held runs, and a
 * run of a limited key that ended, are followed by cairn.flow_release for
 * their keys, which lets go as many held runs as the keys have free slots.
 * The sweep does it for every key of this runner's shards that holds runs,
 * every FLOW_SWEEP_MS: it makes up for a release lost to a crash between
 * a commit and the release after it.
 */
#define FLOW_SWEEP_MS 10000
/* The slots of fleet-wide limits given back (CTE gb) by
 * cairn.flow_give_back (migration 0014) with its arguments args, the runs
 * and the runners that took their slots (bigint[] each, pairwise): a limit
 * a claim found full wakes every runner, whose due runs of it may be
 * anywhere. */
#define FLOW_GIVE_BACK(args) "gb AS (SELECT count(*) AS n FROM cairn.flow_give_back(" args ")) "
/* The arguments of FLOW_GIVE_BACK for runs (bigint[]) of one runner. */
#define FLOW_OF_RUNNER(runs, runner)                                                               \
	runs ", array_fill(" runner "::bigint, ARRAY[cardinality(" runs ")])"
/* flow_release for each key of the runs keys selects (workflow,
 * concurrency_key); the count of runs let go. gb is counted so that it
 * runs. The keys are read first, in a CTE of their own: on Citus,
 * flow_release in a statement over the parts would run on their nodes,
 * and it reads the runs of its key's part. */
#define FLOW_LET_GO(keys)                                                                          \
	", k AS MATERIALIZED (" keys ") "                                                          \
	"SELECT count(*) + 0 * (SELECT n FROM gb) FROM k, "                                        \
	"  LATERAL unnest(cairn.flow_release(k.workflow, k.concurrency_key))"
/* The keys of runs $1 that have one; with parts, $2 theirs
 * (exec_in_parts): on Citus one task on each of their nodes. */
static const char SQL_FLOW_KEYS[] =
    "SELECT DISTINCT r.workflow, r.concurrency_key "
    "FROM cairn.runs r WHERE " IN_PART("r") "r.id = ANY ($1::bigint[]) "
                                            "  AND r.concurrency_key IS NOT NULL";
/* $1: runs of limited keys or workflows that ended here, $2: this runner
 * (a run handed over may hold a slot of the worker that took it since),
 * $3 and $4: the workflows and keys SQL_FLOW_KEYS read of them. It reads
 * no table, so that on Citus it runs on the coordinator: with the runs
 * read in it in their part, Citus sent it whole to the node of the part,
 * functions and all. */
static const char SQL_FLOW_RELEASE[] = "WITH " FLOW_GIVE_BACK(FLOW_OF_RUNNER("$1::bigint[]", "$2"))
    FLOW_LET_GO("SELECT * FROM unnest($3::text[], $4::text[]) AS k(workflow, concurrency_key)");
/* $1: this runner, $2: its runs in flight. Also gives back the slots of
 * this runner's runs no longer in flight and of runners gone. The backends
 * are read from pg_stat_get_activity: on Citus a statement that reads a
 * cairn table is run as SQL text with its views expanded, and
 * pg_stat_activity's read of pg_authid (for user names) is refused to a
 * worker that is not a superuser. */
static const char SQL_FLOW_SWEEP[] =
    "WITH old AS (SELECT s.run_id, s.runner_id FROM cairn.slots s "
    "  WHERE (s.runner_id = $1 AND s.run_id <> ALL ($2::bigint[])) "
    "     OR NOT EXISTS (SELECT 1 FROM cairn.runners r JOIN pg_stat_get_activity(NULL) a "
    "                    ON a.pid = r.lease_pid WHERE r.id = s.runner_id)), " FLOW_GIVE_BACK(
        "(SELECT array_agg(run_id) FROM old), (SELECT array_agg(runner_id) FROM old)")
        FLOW_LET_GO(
            "SELECT DISTINCT r.workflow, r.concurrency_key FROM cairn.runs r "
            "JOIN cairn.shard_leases l ON l.part = r.part AND l.shard_group = r.shard_group "
            "  AND l.shard = r.shard "
            "WHERE l.owner = $1 AND r.held");

void dispatch_runs_part_sql(dispatch_runs_sql which, buf *out)
{
	if (which == DISPATCH_CANCELLED)
		in_parts_text(SQL_CANCELLED, 2, out);
	else
		in_parts_text(SQL_FLOW_KEYS, 2, out);
}

/* Runs sql (n parameters p): how many held runs went, or -1. */
static int64_t flow_release(dispatch *d, PGconn *conn, const char *sql, int nparams,
                            const char *const *p, buf *err)
{
	PGresult *r = db_exec(conn, err, sql, nparams, p);
	if (!r) {
		log_kv(d->env.log, LOG_WARN, "letting held runs go failed (the sweep tries again)",
		       "error", buf_str(err), NULL);
		return -1;
	}
	int64_t n = db_get_i64(r, 0, 0);
	PQclear(r);
	if (n > 0)
		atomic_fetch_add(&d->env.m->flow_released, n);
	return n;
}

/* Gives back the slots of runs (an array literal) that ended or were
 * held here, taken by runner, and lets go the held runs of their keys,
 * read in the parts in (exec_in_parts): how many went, or -1. */
static int64_t release_runs(dispatch *d, PGconn *conn, const char *runs, int64_t runner,
                            const unsigned char *in, buf *err)
{
	const char *p[2] = {runs};
	PGresult *k = exec_in_parts(d, conn, err, SQL_FLOW_KEYS, 1, p, in);
	if (!k) {
		log_kv(d->env.log, LOG_WARN, "letting held runs go failed (the sweep tries again)",
		       "error", buf_str(err), NULL);
		return -1;
	}
	pgarr wf = PGARR_INIT, ck = PGARR_INIT;
	for (int i = 0; i < PQntuples(k); i++) {
		pgarr_add(&wf, PQgetvalue(k, i, 0));
		pgarr_add(&ck, PQgetvalue(k, i, 1));
	}
	PQclear(k);
	char me[24];
	const char *q[] = {runs, db_i64(me, runner), pgarr_str(&wf), pgarr_str(&ck)};
	int64_t n = flow_release(d, conn, SQL_FLOW_RELEASE, 4, q, err);
	pgarr_free(&wf);
	pgarr_free(&ck);
	return n;
}

/* The keys of the runs that ended since the last call: release_runs. */
static int64_t release_ended(dispatch *d, PGconn *conn, buf *err)
{
	pthread_mutex_lock(&d->mu);
	pgarr ended = d->ended;
	d->ended = (pgarr)PGARR_INIT;
	unsigned char in[DB_PARTS_MAX];
	memcpy(in, d->ended_in, sizeof in);
	memset(d->ended_in, 0, sizeof d->ended_in);
	pthread_mutex_unlock(&d->mu);
	if (!ended.n)
		return 0;
	int64_t n =
	    release_runs(d, conn, pgarr_str(&ended), lease_runner_id(d->env.lease), in, err);
	pgarr_free(&ended);
	return n;
}

/* Runs claimed here that will not execute here (refuse_row): $2, those
 * whose execution the claim counted, give the count back; $1, their slots
 * of fleet-wide limits taken by this runner $3 are given back (a worker
 * that took a run since has its own). The claim's count and this one are
 * the runner's own, so their order with the next owner's writes does not
 * matter. */
static const char SQL_UNCLAIM[] = "WITH un AS (UPDATE cairn.runs SET " GIVE_COUNT_BACK
                                  " WHERE id = ANY ($2::bigint[])), " FLOW_GIVE_BACK(
                                      FLOW_OF_RUNNER("$1::bigint[]", "$3")) "SELECT n FROM gb";

static void unclaim(dispatch *d, PGconn *conn, int64_t owner, pgarr *runs, pgarr *marked)
{
	char me[24];
	buf err = BUF_INIT;
	const char *p[] = {pgarr_str(runs), pgarr_str(marked), db_i64(me, owner)};
	if (db_cmd(conn, &err, SQL_UNCLAIM, 3, p) == 0)
		atomic_fetch_add(&d->env.m->claims_given_back, (uint64_t)runs->n);
	else
		log_kv(d->env.log, LOG_WARN,
		       "cannot give back what a claim took for runs that do not execute here (the "
		       "flow sweep gives their slots back)",
		       "error", buf_str(&err), NULL);
	buf_free(&err);
}

/* Takes the runs wake-ups named since the last claim into runs; how many. */
static int take_targets(dispatch *d, int64_t *runs)
{
	pthread_mutex_lock(&d->mu);
	int n = d->ntargets;
	memcpy(runs, d->targets, (size_t)n * sizeof *runs);
	d->ntargets = 0;
	pthread_mutex_unlock(&d->mu);
	return n;
}

/* Waits for a wake-up (from the relay, the lease loop or an executor) or
 * the timeout; whether a wake-up asked to look for cancelled runs. */
static int wait_wake(dispatch *d, int64_t ms)
{
	struct pollfd fd = {.fd = d->wake_fd, .events = POLLIN};
	if (poll(&fd, 1, (int)(ms > 0 ? ms : 0)) > 0 && (fd.revents & POLLIN)) {
		uint64_t v;
		ssize_t n = read(d->wake_fd, &v, sizeof v);
		(void)n;
	}
	return atomic_exchange(&d->cancel_wake, 0);
}

static PGconn *connect_poller(dispatch *d, buf *err)
{
	PGconn *c = db_connect(d->env.cfg->database_url, "cairn-worker poll", err);
	/* A claim need not wait for the disk: what it writes (running,
	 * started_at) only describes the run, and a crash of the database that
	 * loses it leaves the messages, which bring the run back; counting
	 * executions is the marker's. Plans: see claim(). */
	if (c && db_session_limits(c, d->env.cfg->statement_timeout_ms,
	                           d->env.cfg->statement_timeout_ms / 2,
	                           DB_SESSION_GENERIC_PLANS | DB_SESSION_NO_DISK_WAIT, err) < 0) {
		PQfinish(c);
		c = NULL;
	}
	if (!c)
		return NULL;
	if (db_read_settings(c, &d->limits, err) < 0) {
		PQfinish(c);
		return NULL;
	}
	atomic_store(&d->nparts, d->limits.nparts);
	char bound[24];
	db_i64(bound, d->env.cfg->poll_batch);
	buf sql[CLAIM_STATEMENTS] = {BUF_INIT};
	db_stmt st[CLAIM_STATEMENTS];
	int oom = 0, parts = d->limits.nparts > 1;
	int from = parts ? CLAIM_PART : 0, to = parts ? CLAIM_STATEMENTS : CLAIM_ONE_SERVER;
	for (int i = from; i < to; i++) {
		claim_text(i, bound, &sql[i]);
		st[i - from] = (db_stmt){CLAIM_STATEMENT[i].st.name, buf_str(&sql[i])};
		oom |= sql[i].oom;
	}
	/* Citus plans a statement that joins tables anew at each execution and
	 * has no generic plan for it ("could not create distributed plan"):
	 * with parts, the claims are planned with their values. */
	int rc =
	    oom     ? -CAIRN_ENOMEM
	    : parts ? db_cmd(c, err, "SELECT set_config('plan_cache_mode', 'auto', false)", 0, NULL)
	            : 0;
	if (!rc)
		rc = db_prepare(c, st, to - from, err);
	for (int i = 0; i < CLAIM_STATEMENTS; i++)
		buf_free(&sql[i]);
	if (rc) {
		if (oom) {
			buf_reset(err);
			buf_puts(err, "out of memory preparing the claims");
		}
		PQfinish(c);
		return NULL;
	}
	d->limited = 1; /* until a claim says there are none */
	d->warm = 0;
	return c;
}

/*
 * The poller claims when a claim can find something: when woken by a
 * write's wake-up (the relay's POST /wake) or by the lease loop after it
 * took shards (claim_wanted); when the next message of its shards is due
 * (each claim says when), or one this worker just wrote (due_hint: a
 * sleep, a retry's backoff); again while a claim came back full; when a
 * run ends or a queue slot frees only if the last claim may have left due
 * messages behind (recheck: it came back full, was cut short by the
 * queue's room, or skipped runs in flight, whose messages wait for them to
 * end: a claim of named runs skips only those of them in flight); and, as
 * a fallback for a lost wake-up, CAIRN_POLL_INTERVAL after the last claim
 * of all. So an idle worker with a run to do claims once for it, not again
 * when it takes it and when it ends. A backlog is claimed in batches: the
 * claims that follow a full one wait until the queue is down to half or an
 * executor has nothing to do (refill_due_locked), as each claim walks past
 * every run in flight.
 *
 * Named runs: a wake-up that names its runs (dispatch_wake_runs) is claimed
 * with SQL_CLAIM_RUNS, of those runs alone, when nothing else asks for a
 * claim of all that is due (which finds them too). Such a claim leaves the
 * fallback's time alone, only moves the next due time earlier, and only
 * ever sets recheck.
 *
 * Busy: after a claim that found BUSY_AFTER runs or more, the next claim
 * also sets runners.idle = false, and writers stop waking this runner (no
 * notification, no relay hop, no commit on PostgreSQL's notify lock). A busy
 * poller claims again as soon as it has room, until a claim finds nothing;
 * then it commits idle = true and claims once more before it sleeps. A
 * writer that saw idle = false after its commit (the C client's enqueue)
 * read it before that idle commit, so that last claim finds what it wrote.
 * A writer that reads it before its own commit (cairn.wake, inside the
 * transaction of the SQL API's calls) holds a wake lock of the run's shard
 * until it commits, and the poller goes idle only if it can take the wake
 * locks of its groups (cairn.go_idle, migration 0015): while it cannot,
 * it stays busy and claims again after IDLE_RETRY_MIN_MS, doubling up to
 * IDLE_RETRY_MAX_MS. The poller starts busy, is busy again after any
 * failure (the flag may have been left false), and after the lease loop
 * took shards (a writer may have read their previous owner).
 */
#define BUSY_AFTER 2
/*
 * A slow claim after a bulk load is the planner sorting every due message
 * because its statistics still say the table is small; autovacuum would
 * take up to a minute to notice. The pollers of a fleet see the same slow
 * claims at the same time, and an ANALYZE per poller makes every session
 * plan again (50 workers starting together ran 51 of them), so one refresh
 * a minute serves the fleet (db_analyze_unless_recent), unless the tables
 * outgrew their statistics since (grew, stats_stale: the first poller to
 * see it refreshes them, and the others then find them fresh). Without
 * that exception a worker that analyzed its empty tables as it connected,
 * and then saw a run start 10,000 children, claimed with a plan made for
 * empty tables for a minute: a second a claim, 87 s for the fan-out,
 * against 5 s with fresh statistics.
 */
#define STATS_FRESH_MS 60000

static void refresh_stats(dispatch *d, PGconn *conn, int64_t claim_ms, int grew)
{
	char ms[24];
	int rc = db_analyze_unless_recent(conn, DB_LOCK_ANALYZE_QUEUE, "cairn.messages, cairn.runs",
	                                  grew ? 0 : STATS_FRESH_MS);
	log_kv(d->env.log, LOG_INFO,
	       rc > 0    ? "slow claim: refreshed the statistics of cairn.messages and cairn.runs"
	       : rc == 0 ? "slow claim: the statistics of cairn.messages and cairn.runs were "
	                   "refreshed in the last minute"
	                 : "slow claim: did not refresh the statistics (another poller is "
	                   "refreshing them, or the database failed)",
	       "claim_ms", db_i64(ms, claim_ms), NULL);
}

/*
 * The claims' generic plans are made once per session, from the statistics
 * the session finds: of a table never analyzed (a new deployment filled by a
 * bulk enqueue before autovacuum looked at it), or one that has grown a lot
 * since, the planner walks every due run by a sequential scan and a sort,
 * at every claim (a drain of 10,000 runs into fresh tables ran 0.83 times
 * as fast without an ANALYZE before the worker started as with one). So a
 * poller that connects refreshes them first when cairn.runs or
 * cairn.messages was never analyzed or now has more than twice the pages
 * its statistics counted: what it reads is exact (the relation's size),
 * not the cumulative statistics, which lag. While it does, the lease loop
 * takes the shards it will claim from. One ANALYZE a minute serves a fleet
 * (db_analyze_unless_recent, as refresh_stats).
 */
static const char SQL_STATS_STALE[] =
    "SELECT coalesce(bool_or(c.reltuples < 0 OR CASE WHEN $1::bool "
    "  THEN pg_stat_get_live_tuples(c.oid) > 2 * greatest(c.reltuples, 0) + 1000 "
    "  ELSE pg_relation_size(c.oid) > "
    "    2 * greatest(c.relpages, 1)::bigint * current_setting('block_size')::bigint END), "
    "  false) "
    "FROM pg_class c WHERE c.oid IN ('cairn.runs'::regclass, 'cairn.messages'::regclass)";

/* Whether cairn.runs or cairn.messages outgrew its statistics: by its
 * size as a poller connects (exact, where the cumulative statistics lag a
 * bulk load just committed by up to a second); by its live rows after a
 * slow claim (rows), since a drain doubles the size of cairn.runs with the
 * dead versions of the rows it updates, and an ANALYZE for them (every
 * session then plans its statements again) stalled a drain of 20,000 runs
 * for 0.35 s without changing a plan. */
static int stats_stale(PGconn *conn, int rows)
{
	const char *p[] = {rows ? "true" : "false"};
	PGresult *r = db_exec(conn, NULL, SQL_STATS_STALE, 1, p);
	int stale = r && PQntuples(r) == 1 && db_get_bool(r, 0, 0);
	PQclear(r);
	return stale;
}

static void refresh_stale_stats(dispatch *d, PGconn *conn)
{
	if (stats_stale(conn, 0) &&
	    db_analyze_unless_recent(conn, DB_LOCK_ANALYZE_QUEUE, "cairn.messages, cairn.runs",
	                             STATS_FRESH_MS) > 0)
		log_kv(d->env.log, LOG_INFO,
		       "refreshed the statistics of cairn.messages and cairn.runs: never taken, or "
		       "the tables grew",
		       NULL);
}

static const char SQL_IDLE[] = "SELECT cairn.go_idle($1)";
#define IDLE_RETRY_MIN_MS 2  /* a writer holds a wake lock: claim again after this, */
#define IDLE_RETRY_MAX_MS 64 /* doubling up to this while it does */

/* Sets this runner idle (cairn.go_idle, migration 0015) unless a writer
 * that may have read it busy has yet to commit; then *retry_ms says when to
 * claim again (0 once idle). 1 idle, 0 still busy, -1. */
static int go_idle(dispatch *d, PGconn *conn, const char *me, int64_t *retry_ms, buf *err)
{
	const char *p[] = {me};
	PGresult *r = db_exec(conn, err, SQL_IDLE, 1, p);
	int rc = r && PQntuples(r) == 1 ? db_get_bool(r, 0, 0) : -1;
	PQclear(r);
	if (rc > 0) {
		*retry_ms = 0;
	} else if (rc == 0) {
		atomic_fetch_add(&d->env.m->idle_deferred, 1);
		*retry_ms = *retry_ms ? *retry_ms * 2 : IDLE_RETRY_MIN_MS;
		if (*retry_ms > IDLE_RETRY_MAX_MS)
			*retry_ms = IDLE_RETRY_MAX_MS;
	}
	return rc;
}

/* The poller's state from one round to the next (on its thread's stack). */
typedef struct poller {
	dispatch *d;
	PGconn *conn;
	buf err;
	buf parked; /* the runs the last claim held back for limits */
	int failures, cancel;
	int64_t next_cancel_check, next_analyze, next_sweep;
	int64_t due_at_mono, fallback_at; /* monotonic ms; -1: nothing due */
	int busy, last_n;
	int64_t idle_retry_ms; /* busy only because a writer held a wake lock: claim after */
	/* With parts: when each is due (monotonic ms, PART_DUE or
	 * PART_NOTHING), from the claims of all that is due and this worker's
	 * writes (part_due_hint). */
	int64_t part_due[DB_PARTS_MAX];
} poller;

/* One round's claim: what it is of, and what came of it. */
typedef struct poll_round {
	int64_t now;         /* monotonic ms as the round decided */
	int want;            /* claim all that is due */
	int nruns, targeted; /* else claim the nruns runs wake-ups named */
	int room, limit;     /* the queue's room, and the claim's limit */
	int rc, n;           /* what claim() returned; the runs it claimed */
	int skipped;         /* see claim() */
	int64_t next_due;    /* ms until the next message is due; -1: none */
	int again, full;     /* claim again at once; the claim of all was full */
	int some;            /* with parts: a claim of all that is due in those due alone */
	int claimed;         /* claim() ran */
	unsigned char only[DB_PARTS_MAX];
	part_scope scope;
} poll_round;

#define PART_UNSET INT64_MIN /* in part_scope's next: not claimed */

/* Connects the poller (and refreshes stale statistics): 0, or -1 after
 * waiting out the backoff (or a wake-up). */
static int poller_connect(poller *p)
{
	dispatch *d = p->d;
	if (!(p->conn = connect_poller(d, &p->err))) {
		if (p->failures == 0)
			log_kv(d->env.log, LOG_WARN, "poller cannot connect; retrying", "error",
			       buf_str(&p->err), NULL);
		p->busy = 1;
		p->cancel |= wait_wake(d, db_backoff_ms(p->failures++));
		return -1;
	}
	refresh_stale_stats(d, p->conn);
	for (int i = 0; i < DB_PARTS_MAX; i++)
		p->part_due[i] = PART_DUE; /* parts (their number) as this session read them */
	/* Without it, every run handed over is claimed by id (take_pushed). */
	d->can_take_pushed = db_prepare(p->conn, &ST_PUSHED_TAKE, 1, NULL) == 0;
	return 0;
}

/* Every FLOW_SWEEP_MS: lets go held runs whose keys have free slots. */
static void flow_sweep(poller *p)
{
	dispatch *d = p->d;
	char me[24];
	pgarr fl = PGARR_INIT;
	inflight_ids(d, &fl, NULL, NULL, 0);
	const char *pp[] = {db_i64(me, lease_runner_id(d->env.lease)), pgarr_str(&fl)};
	if (flow_release(d, p->conn, SQL_FLOW_SWEEP, 2, pp, &p->err) > 0)
		atomic_store(&d->claim_wanted, 1);
	pgarr_free(&fl);
	p->next_sweep = clock_mono_ms() + FLOW_SWEEP_MS;
}

/* Before each round: cancels of runs in flight (when woken for them, else
 * every CAIRN_POLL_INTERVAL), the held runs of keys whose runs ended, the
 * flow sweep. */
static void poller_chores(poller *p)
{
	dispatch *d = p->d;
	if (p->cancel || clock_mono_ms() >= p->next_cancel_check) {
		p->cancel = 0;
		check_cancels(d, p->conn);
		p->next_cancel_check = clock_mono_ms() + d->env.cfg->poll_interval_ms;
	}
	if (release_ended(d, p->conn, &p->err) > 0)
		atomic_store(&d->claim_wanted, 1);
	if (clock_mono_ms() >= p->next_sweep)
		flow_sweep(p);
}

/* This worker's writes' due times of each part (part_due_hint) into
 * part_due: taken as a round begins, so that its claim, which began after
 * their commits, sees their messages. */
static void take_part_hints(poller *p, int64_t now)
{
	dispatch *d = p->d;
	int64_t unix_now = clock_unix_ms();
	for (int i = 0; i < d->limits.nparts; i++) {
		int64_t h = atomic_exchange(&d->part_due_hint[i], 0);
		if (!h)
			continue;
		int64_t at = now + (h - unix_now);
		if (p->part_due[i] == PART_NOTHING || (p->part_due[i] >= 0 && at < p->part_due[i]))
			p->part_due[i] = at;
	}
}

/*
 * A claim that woke only because something is due (not a wake-up, not the
 * fallback, not busy) claims the parts due by now, or not known (rd->only):
 * one statement to claim a part instead of one to look at each part this
 * runner owns shards in and one to claim. Every write that makes a part
 * due at once wakes the runner (it is idle), whose claim is then of all;
 * the parts left out had said, in the claim of all before, when they are
 * next due. Whether some parts are left out (else the claim is of all).
 */
static int due_parts(poller *p, poll_round *rd)
{
	unsigned char has[DB_PARTS_MAX] = {0};
	owned_parts(p->d, has);
	int in = 0, out = 0;
	for (int i = 0; i < p->d->limits.nparts; i++) {
		int64_t at = p->part_due[i];
		rd->only[i] = has[i] && (at == PART_DUE || (at >= 0 && at <= rd->now));
		in += rd->only[i];
		out += has[i] && !rd->only[i];
	}
	return in > 0 && out > 0;
}

/* What this round claims: all that is due (wanted, due, or the fallback's
 * time), else the runs wake-ups named (into runs), else nothing. */
static void what_to_claim(poller *p, poll_round *rd, int64_t *runs)
{
	dispatch *d = p->d;
	if (atomic_exchange(&d->took_shards, 0))
		p->busy = 1;
	rd->now = clock_mono_ms();
	int64_t hint = atomic_exchange(&d->due_hint, 0);
	if (hint) {
		int64_t at = rd->now + (hint - clock_unix_ms());
		if (p->due_at_mono < 0 || at < p->due_at_mono)
			p->due_at_mono = at;
	}
	int wanted = atomic_exchange(&d->claim_wanted, 0), fallback = rd->now >= p->fallback_at;
	int due = p->due_at_mono >= 0 && rd->now >= p->due_at_mono;
	rd->want = wanted || fallback || due;
	if (d->limits.nparts > 1) {
		take_part_hints(p, rd->now);
		rd->some = due && !wanted && !fallback && !p->busy && due_parts(p, rd);
		for (int i = 0; i < d->limits.nparts; i++)
			rd->scope.next[i] = PART_UNSET;
	}
	/* Runs wake-ups named: a claim of all that is due finds them too (of
	 * some parts: theirs with them, and every part for a run older than
	 * parts, whose id names none). */
	rd->nruns = take_targets(d, runs);
	for (int i = 0; rd->some && i < rd->nruns; i++) {
		if (runs[i] < d->limits.first_placed_id)
			rd->some = 0;
		else
			rd->only[(runs[i] % RUN_ID_SHARDS) % d->limits.nparts] = 1;
	}
	if (rd->want)
		rd->nruns = 0;
	rd->targeted = rd->nruns > 0;
}

/* After a claim: what a claim of all that is due (of some parts, or all)
 * said of each part it claimed into part_due, and, of some parts, the next
 * due time the earliest of theirs and the others'. A claim of named runs
 * (runs) says nothing of their parts' other messages, and its next due
 * time is of one of those parts: they are due (PART_DUE) at the next
 * claim of due parts. */
static void parts_claimed(poller *p, poll_round *rd, const int64_t *runs)
{
	int n = p->d->limits.nparts;
	for (int i = 0; i < rd->nruns; i++)
		p->part_due[(runs[i] % RUN_ID_SHARDS) % n] = PART_DUE;
	for (int i = 0; i < n; i++) {
		int64_t next = rd->scope.next[i];
		if (next == PART_UNSET)
			continue;
		p->part_due[i] = rd->rc < 0 || next == PART_DUE || p->d->refused ? PART_DUE
		                 : next == PART_NOTHING                          ? PART_NOTHING
		                                        : rd->now + next + 1;
	}
	/* Runs given back (refuse_row) are due again, in parts whose claims
	 * said nothing of them: claimed again within a second. */
	if (p->d->refused && (p->due_at_mono < 0 || p->due_at_mono > rd->now + 1000))
		p->due_at_mono = rd->now + 1000;
	if (!rd->some || !rd->claimed || rd->rc < 0)
		return;
	unsigned char has[DB_PARTS_MAX] = {0};
	owned_parts(p->d, has);
	for (int i = 0; i < n; i++)
		if (has[i] && p->part_due[i] >= 0 &&
		    (p->due_at_mono < 0 || p->part_due[i] < p->due_at_mono))
			p->due_at_mono = p->part_due[i];
}

/* After a claim that answered: counts it, and marks the poller ready. */
static void count_claim(poller *p, const poll_round *rd, int go_busy)
{
	dispatch *d = p->d;
	if (rd->rc >= 0)
		atomic_store(&d->claiming, 1);
	if (go_busy && rd->rc >= 0)
		atomic_fetch_add(&d->env.m->poller_busy, 1);
	if (rd->rc >= 0)
		atomic_fetch_add(rd->targeted ? &d->env.m->claims_runs : &d->env.m->claims_all, 1);
}

/* Busy or idle after a claim (see BUSY_AFTER); me: this runner's id. */
static void busy_or_idle(poller *p, poll_round *rd, int go_busy, const char *me)
{
	p->busy |= go_busy || rd->rc < 0;
	p->last_n = rd->rc > 0 ? rd->n : 0;
	/* Busy: claim again while there is room; idle again
	 * (and one more claim) when this one found nothing. */
	if (p->busy && rd->rc > 0 && rd->n < rd->room)
		rd->again = 1;
	if (rd->rc != 0)
		p->idle_retry_ms = 0;
	if (p->busy && rd->rc == 0 && go_idle(p->d, p->conn, me, &p->idle_retry_ms, &p->err) > 0)
		p->busy = 0, rd->again = 1;
}

/* Claims (claim()) as owner, lets go what it parked, counts it, goes busy
 * or idle, and refreshes the statistics after a slow claim. */
static void claim_once(poller *p, poll_round *rd, int64_t owner, int start_now, const int64_t *runs)
{
	dispatch *d = p->d;
	int64_t t0 = clock_mono_ms();
	int go_busy = !p->busy && p->last_n >= BUSY_AFTER;
	buf_reset(&p->parked);
	rd->scope.only = rd->some ? rd->only : NULL;
	rd->claimed = 1;
	d->refused = 0;
	rd->rc = rd->n =
	    claim(d, p->conn, owner, rd->limit, start_now > 0 ? start_now : 0, go_busy, runs,
	          rd->nruns, &rd->next_due, &rd->skipped, &p->parked, &rd->scope, &p->err);
	/* After its commit: what it held may go at once. */
	if (rd->rc >= 0 && p->parked.len) {
		unsigned char in[DB_PARTS_MAX] = {0};
		owned_parts(d, in); /* where the claim held them */
		if (release_runs(d, p->conn, buf_str(&p->parked), owner, in, &p->err) > 0)
			rd->again = 1;
	}
	char me[24];
	db_i64(me, owner);
	count_claim(p, rd, go_busy);
	busy_or_idle(p, rd, go_busy, me);
	int64_t took = clock_mono_ms() - t0;
	/* Not the first run of a statement in the session,
	 * slow as it plans. */
	if (rd->n >= 0 && took > SLOW_CLAIM_MS && !d->cold_claim) {
		int grew = stats_stale(p->conn, 1);
		if (grew || clock_mono_ms() >= p->next_analyze) {
			refresh_stats(d, p->conn, took, grew);
			p->next_analyze = clock_mono_ms() + STATS_FRESH_MS;
		}
	}
}

/* Claims what the round wants if this runner owns shards and the queue has
 * room (else only says that it is ready). */
static void claim_round(poller *p, poll_round *rd, const int64_t *runs)
{
	dispatch *d = p->d;
	int64_t owner = lease_runner_id(d->env.lease);
	pthread_mutex_lock(&d->mu);
	rd->room = d->qcap - d->qlen;
	/* Runs that idle executors take at once are counted by the
	 * claim; not while a run is (about to be) executing alone,
	 * which holds the others back. */
	int start_now = d->solo || d->solo_waiting ? 0 : d->idle - d->qlen;
	pthread_mutex_unlock(&d->mu);
	rd->limit = rd->room < d->env.cfg->poll_batch ? rd->room : d->env.cfg->poll_batch;
	int owned = shardmap_owned(d->env.map);
	/* Nothing to claim: ready as it is. */
	if (owned == 0)
		atomic_store(&d->claiming, 1);
	if (owner && owned > 0 && rd->room > 0)
		claim_once(p, rd, owner, start_now, runs);
}

/* After a round's claim: whether due messages may be left behind
 * (recheck), when the fallback claim of all is, and when the next message
 * is due. */
static void plan_next(poller *p, poll_round *rd, const int64_t *runs)
{
	dispatch *d = p->d;
	/* A full claim of all that is due: more may be due. A
	 * claim of named runs says nothing of the others: it
	 * only adds to what the last full claim left behind and
	 * to when something is due next. */
	rd->full = rd->want && rd->rc >= 0 && rd->n > 0 && rd->n == rd->limit;
	int left = p->busy || rd->room == 0 || rd->skipped > 0 || rd->full ||
	           (rd->rc >= 0 && rd->n == rd->limit && rd->limit == rd->room);
	if (!rd->targeted || left)
		atomic_store(&d->recheck, left);
	if (!rd->targeted && !rd->some)
		p->fallback_at = rd->now + d->env.cfg->poll_interval_ms;
	int64_t at = rd->next_due >= 0 ? rd->now + rd->next_due + 1 : -1;
	if (rd->rc < 0)
		p->due_at_mono = rd->now + 1000; /* look again soon */
	else if (!rd->targeted || (at >= 0 && (p->due_at_mono < 0 || at < p->due_at_mono)))
		p->due_at_mono = at;
	if (d->limits.nparts > 1)
		parts_claimed(p, rd, runs);
	if (p->busy && p->idle_retry_ms &&
	    (p->due_at_mono < 0 || rd->now + p->idle_retry_ms < p->due_at_mono))
		p->due_at_mono = rd->now + p->idle_retry_ms;
}

/* A claim failed: log it, and drop the connection if it is gone. */
static void claim_failed(poller *p)
{
	log_kv(p->d->env.log, LOG_WARN, "poll failed", "error", buf_str(&p->err), NULL);
	if (!db_ok(p->conn)) {
		PQfinish(p->conn);
		p->conn = NULL;
		atomic_store(&p->d->claiming, 0);
	}
}

/* After a full claim, claim again at once while the queue is down to half
 * (see freed), else as it gets there. */
static int refill_now(dispatch *d, int full)
{
	int refill = 0;
	if (full) {
		pthread_mutex_lock(&d->mu);
		refill = refill_due_locked(d);
		pthread_mutex_unlock(&d->mu);
	}
	return refill;
}

/* Sleeps until woken, the next message is due, or the fallback poll. */
static void poller_sleep(poller *p)
{
	int64_t until = p->fallback_at;
	if (p->due_at_mono >= 0 && p->due_at_mono < until)
		until = p->due_at_mono;
	p->cancel |= wait_wake(p->d, until - clock_mono_ms());
}

/* The poller thread (see above): each round does its chores, claims what
 * the round wants and plans the next, then claims again or sleeps. */
static void *poller_main(void *arg)
{
	poller p = {.d = arg, .err = BUF_INIT, .parked = BUF_INIT, .due_at_mono = -1, .busy = 1};
	dispatch *d = p.d;
	atomic_store(&d->claim_wanted, 1);
	while (!atomic_load(&d->stopping)) {
		watch_stamp(d->env.loop);
		if (!p.conn && poller_connect(&p) < 0)
			continue;
		p.failures = 0;
		poller_chores(&p);
		take_pushed(d, p.conn);
		int64_t runs[CAIRN_WAKE_RUNS];
		poll_round rd = {.next_due = -1};
		what_to_claim(&p, &rd, runs);
		if (rd.want || rd.targeted) {
			claim_round(&p, &rd, runs);
			plan_next(&p, &rd, runs);
		}
		if (rd.rc < 0)
			claim_failed(&p);
		if (d->big_claim && p.conn) { /* its buffers go with it (DB_BUFFER_KEEP_MAX) */
			PQfinish(p.conn);
			p.conn = NULL;
			d->big_claim = 0;
		}
		int refill = refill_now(d, rd.full);
		if (rd.again || refill) {
			atomic_store(&d->claim_wanted, 1);
			continue;
		}
		poller_sleep(&p);
	}
	PQfinish(p.conn);
	buf_free(&p.err);
	buf_free(&p.parked);
	return NULL;
}

int dispatch_claiming(dispatch *d)
{
	return d && atomic_load(&d->claiming);
}

void dispatch_shards_taken(dispatch *d)
{
	if (!d)
		return;
	atomic_store(&d->took_shards, 1);
	want_claim(d);
}

void dispatch_wake(dispatch *d, int cancel)
{
	dispatch_wake_runs(d, cancel, NULL, 0);
}

void dispatch_wake_runs(dispatch *d, int cancel, const int64_t *runs, int n)
{
	if (!d)
		return;
	if (cancel)
		atomic_store(&d->cancel_wake, 1);
	pthread_mutex_lock(&d->mu);
	int fits = n > 0;
	for (int i = 0; fits && i < n; i++)
		fits = wake_runs_add(d->targets, &d->ntargets, runs[i]) == 0;
	pthread_mutex_unlock(&d->mu);
	if (fits)
		wake_poller(d);
	else
		want_claim(d); /* a claim of all that is due */
}

int dispatch_push(dispatch *d, int64_t run)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->mu);
	int kept = d->npushed < CAIRN_WAKE_RUNS;
	if (kept)
		d->pushed_runs[d->npushed++] = run;
	pthread_mutex_unlock(&d->mu);
	if (kept)
		wake_poller(d);
	return kept;
}

/* ------------------------------------------------------------- lifecycle */

/* Stops and joins the executors started so far (start failed or stopping). */
static void join_executors(dispatch *d)
{
	pthread_mutex_lock(&d->mu);
	d->exec_stop = 1;
	pthread_cond_broadcast(&d->job_cv);
	pthread_mutex_unlock(&d->mu);
	for (int i = 0; i < d->nexec_started; i++)
		pthread_join(d->execs[i], NULL);
	d->nexec_started = 0;
}

int dispatch_start(const dispatch_env *env, dispatch **out)
{
	*out = NULL;
	dispatch *d = calloc(1, sizeof *d);
	if (!d)
		return -CAIRN_ENOMEM;
	d->env = *env;
	d->exec = (exec_env){.reg = env->reg,
	                     .log = env->log,
	                     .m = env->m,
	                     .max_payload_bytes = env->cfg->max_payload_bytes,
	                     .unknown_workflow_timeout_ms = env->cfg->unknown_workflow_timeout_ms,
	                     .runner_ttl_ms = env->cfg->runner_ttl_ms,
	                     .poison_after = env->cfg->poison_after,
	                     .keys = env->cfg->keys,
	                     .conninfo = env->cfg->database_url,
	                     .flush = exec_flush,
	                     .must_stop = exec_must_stop,
	                     .step_state = exec_step_state,
	                     .arg = d,
	                     .tracer = env->tracer};
	d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	d->jc = jcache_new(env->cfg->journal_cache_bytes);
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->job_cv, NULL);
	pthread_cond_init(&d->start_cv, NULL);
	clock_cond_init(&d->turn_cv);
	d->nexec = env->cfg->concurrency;
	d->qcap = env->cfg->poll_batch > d->nexec ? env->cfg->poll_batch : d->nexec;
	d->execs = calloc((size_t)d->nexec, sizeof *d->execs);
	committer_env ce = {.conninfo = env->cfg->database_url,
	                    .app_name = "cairn-worker commit",
	                    .statement_timeout_ms = env->cfg->statement_timeout_ms,
	                    .loop = env->commit_loop,
	                    .log = env->log,
	                    .m = env->m,
	                    .keys = env->cfg->keys,
	                    .code_version = *env->cfg->code_version ? env->cfg->code_version : NULL,
	                    .on_final = on_final,
	                    .on_children = children_due,
	                    .arg = d};
	committer_env me = ce;
	me.on_children = NULL;
	me.app_name = "cairn-worker mark";
	me.async_commit = 1;
	me.loop = env->mark_loop;
	int rc = d->wake_fd < 0 || !d->execs || !d->jc ? -CAIRN_ENOMEM
	                                               : committer_start(&ce, &d->commit);
	if (!rc)
		rc = committer_start(&me, &d->marks);
	for (int i = 0; !rc && i < d->nexec; i++) {
		if (pthread_create(&d->execs[i], NULL, executor_main, d) != 0)
			rc = -CAIRN_ENOMEM;
		else
			d->nexec_started++;
	}
	if (!rc && pthread_create(&d->poller, NULL, poller_main, d) != 0)
		rc = -CAIRN_ENOMEM;
	if (rc) {
		join_executors(d);
		committer_stop(d->commit);
		committer_stop(d->marks);
		dispatch_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void dispatch_drop_queued(dispatch *d, int group)
{
	if (!d)
		return;
	job *dropped = NULL;
	pthread_mutex_lock(&d->mu);
	for (job **pp = &d->qhead; *pp;) {
		job *j = *pp;
		if (j->group == group &&
		    shardmap_epoch(d->env.map, j->group, j->shard) != j->epoch) {
			*pp = j->next;
			d->qlen--;
			j->next = dropped;
			dropped = j;
			continue;
		}
		pp = &j->next;
	}
	d->qtail = NULL;
	for (job *j = d->qhead; j; j = j->next)
		d->qtail = j;
	atomic_store(&d->env.m->queue_depth, d->qlen);
	pthread_mutex_unlock(&d->mu);
	/* Not started: their messages stay for the next owner, and a count
	 * their claim made while they waited is given back (give_back). */
	for (job *j = dropped, *next; j; j = next) {
		next = j->next;
		if (unstarted(d, j))
			give_back(d, j);
		else
			job_done(d, j);
	}
}

void dispatch_stop_begin(dispatch *d)
{
	if (!d)
		return;
	atomic_store(&d->stopping, 1);
	wake_poller(d);
	pthread_join(d->poller, NULL);
	/* Executors stop at their next durable point; queued jobs are dropped. */
	pthread_mutex_lock(&d->mu);
	d->exec_stop = 1;
	pthread_cond_broadcast(&d->job_cv);
	pthread_cond_broadcast(&d->turn_cv);
	pthread_mutex_unlock(&d->mu);
}

int dispatch_executing(dispatch *d)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->mu);
	int n = d->executing;
	pthread_mutex_unlock(&d->mu);
	return n;
}

int dispatch_executors_idle(dispatch *d)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->mu);
	int n = d->idle;
	pthread_mutex_unlock(&d->mu);
	return n;
}

void dispatch_stop_end(dispatch *d, int *clean, int *cut)
{
	*clean = *cut = 0;
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	*cut = d->executing;
	*clean = d->clean;
	pthread_mutex_unlock(&d->mu);
	if (*cut)
		return; /* a step is still running past the deadline: do not wait for it */
	join_executors(d);
	committer_stop(d->commit);
	committer_stop(d->marks);
}

void dispatch_free(dispatch *d)
{
	if (!d)
		return;
	/* Jobs still queued when the executors stopped never started. */
	for (job *j = d->qhead, *next; j; j = next) {
		next = j->next;
		job_free(j);
	}
	committer_free(d->commit);
	committer_free(d->marks);
	free(d->execs);
	free(d->fl);
	free(d->going);
	jcache_free(d->jc);
	pgarr_free(&d->ended);
	if (d->wake_fd >= 0)
		close(d->wake_fd);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->job_cv);
	pthread_cond_destroy(&d->start_cv);
	pthread_cond_destroy(&d->turn_cv);
	free(d);
}

void dispatch_steps(dispatch *d, int64_t *longest_ms, int *overdue)
{
	*longest_ms = 0;
	*overdue = 0;
	if (!d)
		return;
	int64_t now = clock_mono_ms();
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < d->nfl; i++) {
		const job *j = d->fl[i].job;
		int64_t ran = now - j->step_since_mono;
		if (!j->step[0])
			continue;
		if (ran > *longest_ms)
			*longest_ms = ran;
		*overdue += j->step_timeout_ms && ran >= j->step_timeout_ms;
	}
	pthread_mutex_unlock(&d->mu);
}

void dispatch_flow(dispatch *d, cJSON *object)
{
	if (!d || !object)
		return;
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < d->nfl; i++) {
		const job *j = d->fl[i].job;
		if (!j->flow)
			continue;
		cJSON *n = cJSON_GetObjectItemCaseSensitive(object, j->workflow);
		if (n)
			cJSON_SetNumberValue(n, n->valuedouble + 1);
		else
			cJSON_AddNumberToObject(object, j->workflow, 1);
	}
	pthread_mutex_unlock(&d->mu);
}

void dispatch_status(dispatch *d, cJSON *array)
{
	if (!d || !array)
		return;
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < d->nfl && i < 100; i++) {
		const job *j = d->fl[i].job;
		cJSON *it = cJSON_CreateObject();
		cJSON_AddNumberToObject(it, "run_id", (double)d->fl[i].run_id);
		cJSON_AddStringToObject(it, "workflow", j->workflow);
		cJSON_AddStringToObject(it, "group", j->group_name);
		cJSON_AddNumberToObject(it, "shard", j->shard);
		cJSON_AddNumberToObject(it, "since_unix_ms", (double)d->fl[i].since_unix_ms);
		if (j->step[0]) {
			int64_t ran = clock_mono_ms() - j->step_since_mono;
			cJSON_AddStringToObject(it, "step", j->step);
			cJSON_AddNumberToObject(it, "step_running_ms", (double)ran);
			if (j->step_timeout_ms) {
				cJSON_AddNumberToObject(it, "step_timeout_ms",
				                        (double)j->step_timeout_ms);
				cJSON_AddBoolToObject(it, "step_overdue",
				                      ran >= j->step_timeout_ms);
			}
		}
		cJSON_AddItemToArray(array, it);
	}
	pthread_mutex_unlock(&d->mu);
}
