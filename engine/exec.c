/*
 * exec.c - runs a workflow function with replay (see exec.h). The journal
 * arrives with the job; each durable call takes the next sequence number and
 * returns the journaled result if there is one (a different name or kind at
 * that position is a non-determinism error). New results are collected in a
 * pending commit that is flushed before any step function runs and when the
 * execution ends, so no side effect ever follows an unjournaled result.
 *
 * Time: sleeps, signal deadlines and retry backoffs use the run's clock
 * (ctx_now: the database's now() at claim, advanced by the monotonic clock),
 * and so do the journaled start and finish of sleeps and signal waits, so a
 * wake is never judged against another clock than the one that set it.
 *
 * Owns: the cairn_ctx of one execution (one executor thread).
 */
#include "exec.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "client.h"
#include "clock.h"
#include "hash.h"
#include "idmap.h"
#include "journal.h"
#include "parse.h"

struct cairn_ctx {
	const exec_env *env;
	job *job;
	const workflow_def *def;
	journal jr;
	signal_box sigs;
	int seq;
	cJSON *keep; /* owns values handed to the workflow */
	commit *pending;
	buf err;
	int fatal;             /* a sticky status (non-determinism, lost fence, no memory) */
	int suspended;         /* a durable call suspended the run */
	run_status wait_as;    /* sleeping or waiting, once suspended */
	int64_t wake_ms;       /* a wake message is needed at this time (0: none) */
	int first_unsettled;   /* the lowest seq this execution left unsettled (INT_MAX: none) */
	int64_t step_deadline; /* monotonic ms the running step must end by (0: none) */
	int step_attempt;      /* the attempt of the step running now (0: none) */
	char *next_input;      /* cairn_continue_as_new: the successor's input (JSON text) */
	int64_t next_id;       /* and its id */
	int step_seq;          /* the seq of the step running now (with step_attempt) */
	int trace_ready;       /* job->trace is set (always when the worker traces) */
	char tp[TRACEPARENT_LEN + 1]; /* cairn_ctx_traceparent's answer */
	int64_t replayed;             /* journal entries this execution replayed */
	int rows_made;                /* journal rows this execution wrote */
	int rows_trimmed;             /* rows_made at its last trim (exec_give_back_memory) */
	/* Children: those this run started (by the calls so far), each to the
	 * outcome (a cJSON object ctx keeps) a wait took, or NULL. */
	idmap kids;
	exec_ids ids;    /* for new children: fresh run ids (used: taken), the orphans */
	int ids_used;    /* of ids.ids */
	int ids_asked;   /* times ids were asked for in this execution */
	signal_box more; /* children's ends beyond the claim's signals (fetched once) */
	int more_fetched;
};

void job_free(job *j)
{
	if (!j)
		return;
	free(j->workflow);
	free(j->input);
	free(j->journal);
	free(j->signals);
	free(j->last_step);
	free(j->msgs);
	jcache_run_free(j->jc);
	free(j);
}

void journal_too_large(job *j, int64_t bytes, int64_t max_bytes)
{
	snprintf(j->load_error, sizeof j->load_error,
	         "its journal is %" PRId64 " bytes stored; the limit (max_journal_bytes in "
	         "cairn.settings) is %" PRId64 "; a run that goes on without end should "
	         "continue as new (cairn_continue_as_new), which starts it again with a fresh "
	         "journal",
	         bytes, max_bytes);
}

/* The database clock: read at claim, advanced by the monotonic clock. */
static int64_t ctx_now(const cairn_ctx *ctx)
{
	return ctx->job->db_now_ms + (clock_mono_ms() - ctx->job->mono_at_load);
}

commit *job_commit(const job *j)
{
	commit_run run = {.id = j->run_id,
	                  .group = j->group_name,
	                  .shard = j->shard,
	                  .owner = j->owner,
	                  .epoch = j->epoch,
	                  .msgs = j->msgs,
	                  .nmsgs = j->nmsgs,
	                  .attempt = j->attempt,
	                  .parent = j->parent_id,
	                  .chain = j->chain_id,
	                  .workflow = j->workflow,
	                  .mx = j->mx};
	commit *c = commit_new(&run);
	if (c)
		c->attempt = j->attempt;
	return c;
}

static commit *pending(cairn_ctx *ctx)
{
	if (!ctx->pending)
		ctx->pending = job_commit(ctx->job);
	return ctx->pending;
}

static int vfail(cairn_ctx *ctx, int code, const char *fmt, va_list ap)
{
	buf_reset(&ctx->err);
	buf_vprintf(&ctx->err, fmt, ap);
	return code;
}

int cairn_fail(cairn_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vfail(ctx, CAIRN_EFAIL, fmt, ap);
	va_end(ap);
	return rc;
}

int cairn_retryable(cairn_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vfail(ctx, CAIRN_ERETRY, fmt, ap);
	va_end(ap);
	return rc;
}

/* Out of memory while recording a result: the run fails (sticky), since
 * going on would run steps whose predecessors are not journaled. */
static int no_memory(cairn_ctx *ctx)
{
	buf_reset(&ctx->err);
	buf_puts(&ctx->err, "out of memory recording a durable call");
	return ctx->fatal = CAIRN_EFAIL;
}

static int add_row(cairn_ctx *ctx, const jrow *r)
{
	if (!step_status_settled(r->status) && r->seq < ctx->first_unsettled)
		ctx->first_unsettled = r->seq;
	commit *c = pending(ctx);
	ctx->rows_made++;
	return c && commit_add_row(c, r) == 0 ? CAIRN_OK : no_memory(ctx);
}

/* Journals a durable call that settles as it is made (a clock or random
 * value, a patch marker, an event): completed at now, output its value. */
static int add_settled(cairn_ctx *ctx, int seq, const char *name, step_kind kind,
                       const char *output, int64_t now)
{
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = kind,
	            .status = STEP_COMPLETED,
	            .output = (char *)output,
	            .attempts = 1,
	            .started_ms = now,
	            .finished_ms = now};
	return add_row(ctx, &row);
}

/* Writes the pending rows and waits for their commit; CAIRN_ESTOP if refused. */
static int flush(cairn_ctx *ctx)
{
	commit *c = ctx->pending;
	if (!c)
		return CAIRN_OK;
	ctx->pending = NULL;
	c->outcome = COMMIT_JOURNAL;
	int rc = ctx->env->flush(ctx->env->arg, c);
	if (!rc && c->cancel_requested)
		atomic_store(&ctx->job->cancel_requested, 1);
	commit_free(c);
	return rc ? (ctx->fatal = CAIRN_ESTOP) : CAIRN_OK;
}

/* Hands v to the workflow; ctx keeps ownership. */
static cJSON *keep(cairn_ctx *ctx, cJSON *v)
{
	if (!v)
		v = cJSON_CreateNull();
	if (v)
		cJSON_AddItemToArray(ctx->keep, v);
	return v;
}

/* The journal's entry at seq: the cached one (jcache.h), else the claim's. */
static journal_entry *entry_at(cairn_ctx *ctx, int seq)
{
	journal_entry *e = jcache_run_at(ctx->job->jc, seq);
	return e ? e : journal_find(&ctx->jr, seq);
}

/* Hands the workflow the value journaled in e (its output; none: null): a
 * copy of the value parsed the first time a replay asked for it, which the
 * entry keeps, so that a run's journal is parsed once in its life on this
 * worker, not at every wake (a cached entry lives on across executions). A
 * value that does not parse fails the run, as keep_parsed says. */
static int keep_value(cairn_ctx *ctx, journal_entry *e, cJSON **out)
{
	const cJSON *v;
	size_t added;
	buf why = BUF_INIT;
	if (journal_value(e, &v, &added, &why) < 0) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "cannot load the run: %s",
		           why.oom ? "out of memory" : buf_str(&why));
		buf_free(&why);
		return ctx->fatal = CAIRN_EFAIL;
	}
	buf_free(&why);
	jcache_run *jc = ctx->job->jc;
	if (jc && e == jcache_run_at(jc, e->seq))
		jc->mem_bytes += added;
	if (!out)
		return CAIRN_OK;
	cJSON *copy = cJSON_Duplicate(v, 1);
	if (!copy)
		return no_memory(ctx);
	*out = keep(ctx, copy);
	return CAIRN_OK;
}

/* Parses journaled JSON text and hands it to the workflow (NULL text: null).
 * A value that does not parse fails the run: the journal was written by
 * something other than cairn. So does one that json_check_text refuses: a
 * value sealed before cairn refused \u0000 (PostgreSQL never saw it) would
 * be cut short where cJSON reads it. */
static int keep_parsed(cairn_ctx *ctx, const char *text, cJSON **out)
{
	char err[PARSE_ERR_MAX];
	if (text && json_check_text("a journaled value", text, strlen(text), err) < 0) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "cannot load the run: %s", err);
		return ctx->fatal = CAIRN_EFAIL;
	}
	cJSON *v = text ? cJSON_Parse(text) : NULL;
	if (text && !v) {
		buf_reset(&ctx->err);
		buf_puts(&ctx->err, "cannot load the run: a journaled value is not valid JSON");
		return ctx->fatal = CAIRN_EFAIL;
	}
	v = keep(ctx, v);
	if (out)
		*out = v;
	return CAIRN_OK;
}

static int stop_now(const cairn_ctx *ctx)
{
	return ctx->env->must_stop(ctx->env->arg, ctx->job);
}

int cairn_should_stop(const cairn_ctx *ctx)
{
	return ctx->job->cancel_requested || stop_now(ctx) ||
	       (ctx->step_deadline && clock_mono_ms() >= ctx->step_deadline);
}

int64_t cairn_ctx_run_id(const cairn_ctx *ctx)
{
	return ctx->job->run_id;
}

const char *cairn_ctx_workflow(const cairn_ctx *ctx)
{
	return ctx->job->workflow;
}

int cairn_ctx_attempt(const cairn_ctx *ctx)
{
	return ctx->job->attempt;
}

int cairn_ctx_step_attempt(const cairn_ctx *ctx)
{
	return ctx->step_attempt;
}

/* The run's trace context, derived the first time it is asked for on a
 * worker that does not trace (then a run without a traceparent is not
 * sampled: nothing of it is recorded here). */
static const trace_ctx *run_trace(cairn_ctx *ctx)
{
	job *j = ctx->job;
	if (!ctx->trace_ready) {
		trace_run(&j->trace, j->run_id, j->created_us, j->traceparent, 0);
		ctx->trace_ready = 1;
	}
	return &j->trace;
}

/* The traceparent of the durable call at seq in its attempt into out
 * (TRACEPARENT_LEN + 1 bytes). */
static void call_traceparent(cairn_ctx *ctx, int seq, int attempt, char *out)
{
	const trace_ctx *t = run_trace(ctx);
	uint8_t id[8];
	trace_call_id(t, ctx->job->run_id, ctx->job->attempt, seq, attempt, id);
	trace_format(out, t->trace_id, id, t->flags);
}

/* Whether the runs this run starts carry its trace context: it is traced
 * here, or was given a traceparent. A run in neither starts runs that are
 * roots of traces of their own, at no cost to a worker that does not
 * trace. */
static int in_a_trace(const cairn_ctx *ctx)
{
	return ctx->job->traced || ctx->job->traceparent[0];
}

const char *cairn_ctx_traceparent(cairn_ctx *ctx)
{
	const trace_ctx *t = run_trace(ctx);
	if (ctx->step_attempt)
		call_traceparent(ctx, ctx->step_seq, ctx->step_attempt, ctx->tp);
	else
		trace_format(ctx->tp, t->trace_id, t->run_span, t->flags);
	return ctx->tp;
}

/* The span of a durable call that ended now (trace.h): the step attempt
 * step_attempt at seq (0: a call that has none, a sleep or a signal wait),
 * from start_ns, failed with error of type error_type unless that is NULL.
 * Its parent is the run span, which whichever execution ends the run
 * exports: a call's span never points at an execution that a crash kept
 * from being exported. */
static void trace_call(cairn_ctx *ctx, step_kind kind, const char *name, int seq, int step_attempt,
                       int64_t start_ns, const char *outcome, const char *error_type)
{
	job *j = ctx->job;
	const char *what = step_kind_name(kind);
	trace_span *s = trace_span_new(what, name, j->workflow, j->group_name,
	                               error_type ? buf_str(&ctx->err) : NULL);
	if (!s)
		return;
	memcpy(s->trace_id, j->trace.trace_id, 16);
	trace_call_id(&j->trace, j->run_id, j->attempt, seq, step_attempt, s->span_id);
	memcpy(s->parent, j->trace.run_span, 8);
	s->kind = TRACE_CALL;
	s->start_ns = start_ns;
	s->end_ns = trace_now_ns();
	s->run_id = j->run_id;
	s->attempt = j->attempt;
	s->shard = j->shard;
	s->seq = seq;
	s->step_attempt = step_attempt;
	s->call_kind = what;
	s->outcome = outcome;
	s->error_type = error_type;
	tracer_emit(ctx->env->tracer, s);
}

const char *cairn_ctx_error(const cairn_ctx *ctx)
{
	return buf_str(&ctx->err);
}

void *cairn_workflow_arg(const cairn_ctx *ctx)
{
	return ctx->def->opts.arg;
}

/* Before anything new happens: cancellation and hand-over. */
static int interrupt(cairn_ctx *ctx)
{
	if (ctx->fatal)
		return ctx->fatal;
	if (ctx->job->cancel_requested)
		return CAIRN_CANCELLED;
	if (stop_now(ctx))
		return ctx->fatal = CAIRN_ESTOP;
	return CAIRN_OK;
}

/*
 * Takes the next sequence number for a durable call. *entry is the journal's
 * entry at that position or NULL; a mismatch fails the run.
 */
static int next_entry(cairn_ctx *ctx, const char *name, step_kind kind, journal_entry **entry,
                      int *seq)
{
	*entry = NULL;
	if (ctx->suspended)
		return CAIRN_SUSPENDED; /* the workflow went on after a suspension */
	if (ctx->next_input)
		return CAIRN_CONTINUED; /* ... or after it continued as new */
	if (ctx->fatal)
		return ctx->fatal;
	char err[PARSE_ERR_MAX];
	if (!name || parse_check_name("durable call name", name, err) < 0) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "%s %s", step_kind_name(kind), name ? err : "name is NULL");
		return ctx->fatal = CAIRN_EFAIL;
	}
	*seq = ctx->seq++;
	journal_entry *e = entry_at(ctx, *seq);
	if (!e)
		return CAIRN_OK;
	if (e->kind != kind || strcmp(e->name, name) != 0) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err,
		           "non-determinism at journal position %d: the journal has %s \"%s\" but "
		           "the workflow now calls %s \"%s\"; if the code changed while this run "
		           "was in flight, put the change behind `if (cairn_patched(ctx, "
		           "\"a-patch-id\"))` so that runs started before it take the old path",
		           *seq, step_kind_name(e->kind), e->name, step_kind_name(kind), name);
		return ctx->fatal = CAIRN_ENONDET;
	}
	*entry = e;
	ctx->replayed++;
	return CAIRN_OK;
}

static int suspend(cairn_ctx *ctx, run_status as, int64_t wake_ms)
{
	ctx->suspended = 1;
	ctx->wait_as = as;
	if (wake_ms && (!ctx->wake_ms || wake_ms < ctx->wake_ms))
		ctx->wake_ms = wake_ms;
	return CAIRN_SUSPENDED;
}

static char *print_json(const cJSON *v)
{
	return v ? cJSON_PrintUnformatted(v) : strdup("null");
}

/* A journaled step: its recorded result, its recorded failure, or (for a
 * step that is retrying) a suspension until its backoff is over. *run_it is
 * set when the step is due to run again, after *attempts attempts. */
static int replay_step(cairn_ctx *ctx, journal_entry *e, cJSON **result, int *attempts, int *run_it)
{
	*run_it = 0;
	if (e->status == STEP_COMPLETED)
		return keep_value(ctx, e, result);
	if (e->status == STEP_FAILED) {
		buf_reset(&ctx->err);
		buf_puts(&ctx->err, e->error ? e->error : "step failed");
		return CAIRN_EFAIL;
	}
	*attempts = e->attempts;
	int rc = interrupt(ctx);
	if (rc)
		return rc;
	if (e->wake_ms > ctx_now(ctx))
		return suspend(ctx, RUN_SLEEPING, 0);
	*run_it = 1;
	return CAIRN_OK;
}

/* Whether JSON text a workflow made (a step's result, an event's value,
 * the run's output) may be stored: at most max_payload_bytes, JSON_MAX_DEPTH
 * levels deep, and of the characters every entry point takes
 * (json_check_text: cJSON copies a string's bytes as they are, so a value
 * may hold bytes that are not UTF-8). 0, or -1 with why, which starts with
 * what. */
static int check_made(const exec_env *env, const char *what, const char *text, buf *why)
{
	size_t len = strlen(text);
	int depth = json_depth(text);
	char err[PARSE_ERR_MAX];
	if (depth > JSON_MAX_DEPTH)
		buf_printf(why, "%s is nested %d levels deep; at most %d are accepted", what, depth,
		           JSON_MAX_DEPTH);
	else if (len > env->max_payload_bytes)
		buf_printf(why, "%s is %zu bytes; the limit (CAIRN_MAX_PAYLOAD) is %zu", what, len,
		           env->max_payload_bytes);
	else if (json_check_text(what, text, len, err) < 0)
		buf_puts(why, err);
	else
		return 0;
	return -1;
}

/* Checks a step function's result: CAIRN_OK with *text set, or a failure
 * (whose message run_step prefixes with the step's name). */
static int step_result(cairn_ctx *ctx, int src, const cJSON *out, char **text)
{
	*text = NULL;
	if (src != CAIRN_OK)
		return src;
	*text = print_json(out);
	if (!*text)
		return cairn_fail(ctx, "out of memory printing its result");
	buf why = BUF_INIT;
	if (check_made(ctx->env, "result", *text, &why) < 0) {
		free(*text);
		*text = NULL;
		src = cairn_fail(ctx, "%s", why.oom ? "out of memory" : buf_str(&why));
	}
	buf_free(&why);
	return src;
}

/* A step of kind: the body of cairn_step_retry, and of the durable calls
 * that write elsewhere than the run (children, sends, enqueues). */
static cairn_client *exec_client(cairn_ctx *ctx);
static int tx_begin(cairn_ctx *ctx, PGconn **conn);
static int tx_end(cairn_ctx *ctx, PGconn *conn, const jrow *row);

static int run_step(cairn_ctx *ctx, const char *name, step_kind kind,
                    const cairn_retry_policy *policy, cairn_step_fn fn, cairn_tx_fn txfn, void *arg,
                    cJSON **result)
{
	if (result)
		*result = NULL;
	journal_entry *e;
	int seq, rc = next_entry(ctx, name, kind, &e, &seq);
	if (rc)
		return rc;
	cairn_retry_policy p = backoff_policy(policy);
	int attempts = 0, run_it = 1;
	if (e && ((rc = replay_step(ctx, e, result, &attempts, &run_it)) || !run_it))
		return rc;
	/* The flush also brings news of a cancellation: look again after it. */
	if ((rc = interrupt(ctx)) || (rc = flush(ctx)) || (rc = interrupt(ctx)))
		return rc;
	attempts++;
	int64_t t0 = clock_unix_ms(), m0 = clock_mono_ms();
	buf_reset(&ctx->err);
	cJSON *out = NULL;
	const exec_env *env = ctx->env;
	ctx->step_deadline = p.timeout_ms > 0 ? m0 + p.timeout_ms : 0;
	ctx->step_attempt = attempts;
	ctx->step_seq = seq;
	int64_t t0_ns = ctx->job->traced ? trace_now_ns() : 0;
	if (env->step_state)
		env->step_state(env->arg, ctx->job, name, p.timeout_ms > 0 ? p.timeout_ms : 0);
	PGconn *conn = NULL;
	int src = txfn ? tx_begin(ctx, &conn) : CAIRN_OK;
	if (src == CAIRN_OK)
		src = txfn ? txfn(ctx, conn, arg, &out)
		      : fn ? fn(ctx, arg, &out)
		           : cairn_fail(ctx, "step function is NULL");
	if (env->step_state)
		env->step_state(env->arg, ctx->job, NULL, 0);
	ctx->step_deadline = 0;
	ctx->step_attempt = 0;
	int64_t took = clock_mono_ms() - m0;
	metrics_observe_step(ctx->job->mx, took * 1000);
	if (p.timeout_ms > 0 && took >= p.timeout_ms) {
		/* Late: whatever it returned is discarded. */
		cJSON_Delete(out);
		out = NULL;
		atomic_fetch_add(&env->m->steps_timed_out, 1);
		src = cairn_retryable(
		    ctx, "timed out after %" PRId64 " ms (its timeout is %" PRId64 " ms)", took,
		    p.timeout_ms);
	}
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = kind,
	            .attempts = attempts,
	            .started_ms = t0,
	            .finished_ms = clock_unix_ms()};
	char *text;
	src = step_result(ctx, src, out, &text);
	if (ctx->job->traced)
		trace_call(ctx, kind, name, seq, attempts, t0_ns, NULL,
		           src == CAIRN_OK                            ? NULL
		           : p.timeout_ms > 0 && took >= p.timeout_ms ? "cairn.timeout"
		           : src == CAIRN_ERETRY                      ? "cairn.retryable"
		                                                      : "cairn.failed");
	if (conn) {
		/* The result is journaled in the step's own transaction, or the
		 * transaction is rolled back with whatever the step did. */
		row.status = STEP_COMPLETED;
		row.output = text;
		if ((rc = tx_end(ctx, conn, src == CAIRN_OK ? &row : NULL)) == CAIRN_ESTOP) {
			free(text);
			cJSON_Delete(out);
			return ctx->fatal = CAIRN_ESTOP;
		}
		if (src == CAIRN_OK && rc) {
			/* Not journaled: the failure's row below has no output (it
			 * pointed at the text freed here). */
			free(text);
			text = NULL;
			row.output = NULL;
			src = rc;
		}
	}
	if (src == CAIRN_OK) {
		row.status = STEP_COMPLETED;
		row.output = text;
		rc = conn ? CAIRN_OK : add_row(ctx, &row);
		free(text);
		cJSON *v = keep(ctx, out);
		if (result)
			*result = v;
		return rc;
	}
	cJSON_Delete(out);
	if (!atomic_load(&ctx->job->cancel_requested) && stop_now(ctx)) {
		/* Interrupted by a drain or a hand-over, not failed: no attempt is
		 * spent; the step runs again on the shard's next owner. */
		return ctx->fatal = CAIRN_ESTOP;
	}
	metrics_step_failed(ctx->job->mx);
	if (src != CAIRN_ERETRY && src != CAIRN_EFAIL) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err,
		           "step function returned %d (%s); expected CAIRN_OK, CAIRN_ERETRY or "
		           "CAIRN_EFAIL",
		           src, cairn_strstatus(src));
		src = CAIRN_EFAIL;
	}
	buf msg = BUF_INIT;
	buf_printf(&msg, "step %s: %s", name, ctx->err.len ? buf_str(&ctx->err) : "failed");
	row.error = (char *)buf_str(&msg);
	if (atomic_load(&ctx->job->cancel_requested)) {
		/* The step gave up because the run was cancelled under it. */
		row.status = STEP_FAILED;
		rc = add_row(ctx, &row);
		buf_free(&msg);
		return rc ? rc : CAIRN_CANCELLED;
	}
	if (src == CAIRN_ERETRY && attempts < p.max_attempts) {
		row.status = STEP_RETRYING;
		row.wake_ms =
		    ctx_now(ctx) + backoff_ms(&p, attempts, randombytes_uniform(1000000) / 1e6);
		rc = add_row(ctx, &row);
		buf_free(&msg);
		return rc ? rc : suspend(ctx, RUN_SLEEPING, row.wake_ms);
	}
	row.status = STEP_FAILED;
	rc = add_row(ctx, &row);
	buf_reset(&ctx->err);
	buf_puts(&ctx->err, buf_str(&msg));
	if (src == CAIRN_ERETRY)
		buf_printf(&ctx->err, " (gave up after %d attempts)", attempts);
	buf_free(&msg);
	return rc ? rc : CAIRN_EFAIL;
}

int cairn_step_retry(cairn_ctx *ctx, const char *name, const cairn_retry_policy *policy,
                     cairn_step_fn fn, void *arg, cJSON **result)
{
	return run_step(ctx, name, KIND_STEP, policy, fn, NULL, arg, result);
}

int cairn_step(cairn_ctx *ctx, const char *name, cairn_step_fn fn, void *arg, cJSON **result)
{
	return cairn_step_retry(ctx, name, NULL, fn, arg, result);
}

/* ----------------------------------------------------------- composition */

/* The executor thread's own client, for the durable calls that write
 * elsewhere than the run: opened on first use, dropped after a database
 * error (the next call opens a new one) and when the thread ends. */
static pthread_key_t client_key;
static pthread_once_t client_once = PTHREAD_ONCE_INIT;

static void client_drop(void *c)
{
	cairn_client_free(c);
}

static void client_key_make(void)
{
	pthread_key_create(&client_key, client_drop);
}

/* The thread's client, opened on first use: NULL with why in err when the
 * database cannot be reached. */
static cairn_client *thread_client(const exec_env *env, buf *err)
{
	pthread_once(&client_once, client_key_make);
	cairn_client *c = pthread_getspecific(client_key);
	if (c)
		return c;
	int rc = cairn_client_open(env->conninfo, &c);
	if (rc) {
		buf_printf(err, "cannot reach the database: %s", cairn_client_errmsg(c));
		cairn_client_free(c);
		return NULL;
	}
	client_use_keys(c, env->keys);
	cairn_client_set_max_payload(c, env->max_payload_bytes);
	pthread_setspecific(client_key, c);
	return c;
}

/* Drops the thread's client after a database error: the next call opens
 * a new one. */
static void thread_client_drop(void)
{
	cairn_client *c = pthread_getspecific(client_key);
	pthread_setspecific(client_key, NULL);
	cairn_client_free(c);
}

static cairn_client *exec_client(cairn_ctx *ctx)
{
	buf why = BUF_INIT;
	cairn_client *c = thread_client(ctx->env, &why);
	if (!c)
		cairn_retryable(ctx, "%s", buf_str(&why));
	buf_free(&why);
	return c;
}

/* A client call's rc as a step's: the database being away is worth a
 * retry (on a new connection); anything else is the call's answer. */
static int client_rc(cairn_ctx *ctx, cairn_client *c, int rc, const char *what)
{
	if (rc == CAIRN_OK)
		return CAIRN_OK;
	if (rc == CAIRN_EDB || rc == CAIRN_ENOMEM) {
		cairn_retryable(ctx, "%s: %s", what, cairn_client_errmsg(c));
		pthread_setspecific(client_key, NULL);
		cairn_client_free(c);
		return CAIRN_ERETRY;
	}
	return cairn_fail(ctx, "%s: %s", what, cairn_client_errmsg(c));
}

/* ---- transactional steps */

/* The journal entry of a transactional step, written in its transaction
 * and fenced like every commit: no row unless the lease still holds
 * (locked shared, so an epoch bump waits for this commit). Progress resets
 * the run's claims. Every table is read in the part of the run's shard
 * ($12), where its lease and its rows are: on Citus the statement is then
 * one task on the node of the part (Citus locks FOR SHARE only by the
 * distribution column's value); on one server the part is 0. */
static const char SQL_TX_JOURNAL[] =
    "WITH ok AS (SELECT part FROM cairn.shard_leases WHERE shard_group = $1 AND shard = $2 "
    "            AND part = $12 AND owner = $3 AND epoch = $4 FOR SHARE), "
    "ins AS (INSERT INTO cairn.steps (run_id, part, seq, name, kind, status, output, attempts, "
    "                                 started_at, finished_at) "
    "  SELECT $5, ok.part, $6, $7, 'step', 'completed', $8::jsonb, $9, "
    "         to_timestamp($10 / 1000.0), to_timestamp($11 / 1000.0) FROM ok "
    "  ON CONFLICT ON CONSTRAINT steps_pkey DO UPDATE SET status = 'completed', "
    "    output = excluded.output, attempts = excluded.attempts, "
    "    finished_at = excluded.finished_at "
    "  WHERE cairn.steps.status NOT IN ('completed', 'timed_out') RETURNING run_id), "
    "prog AS (UPDATE cairn.runs SET claims = 0 WHERE id IN (SELECT run_id FROM ins) "
    "  AND part = $12 AND claims > 1) "
    "SELECT count(*) FROM ins";

static int tx_begin(cairn_ctx *ctx, PGconn **conn)
{
	cairn_client *c = exec_client(ctx);
	*conn = NULL;
	if (!c)
		return CAIRN_ERETRY;
	/* The settings, read once: tx_end journals in the part of the run. */
	int shards;
	if (client_shards(c, &shards) != CAIRN_OK)
		return client_rc(ctx, c, CAIRN_EDB, "cannot read the settings");
	if (db_cmd(c->conn, &c->err, "BEGIN", 0, NULL) < 0)
		return client_rc(ctx, c, CAIRN_EDB, "cannot begin the step's transaction");
	*conn = c->conn;
	return CAIRN_OK;
}

/* Journals row (NULL: none, roll back) and commits: CAIRN_OK; CAIRN_ESTOP
 * when the lease was lost (rolled back); CAIRN_ERETRY when the database
 * refused (rolled back: the step runs again). */
static int tx_end(cairn_ctx *ctx, PGconn *conn, const jrow *row)
{
	cairn_client *c = exec_client(ctx); /* the one tx_begin opened conn on */
	const job *j = ctx->job;
	if (!row) {
		db_cmd(conn, NULL, "ROLLBACK", 0, NULL);
		return CAIRN_OK;
	}
	buf out = BUF_INIT;
	char sh[24], ow[24], ep[24], id[24], sq[24], at[24], t0[24], t1[24], pt[24];
	const char *p[] = {j->group_name,
	                   db_i64(sh, j->shard),
	                   db_i64(ow, j->owner),
	                   db_i64(ep, j->epoch),
	                   db_i64(id, j->run_id),
	                   db_i64(sq, row->seq),
	                   row->name,
	                   seal_value(ctx->env->keys, SEAL_STEP_OUTPUT, row->output, &out) == 0
	                       ? buf_str(&out)
	                       : NULL,
	                   db_i64(at, row->attempts),
	                   db_i64(t0, row->started_ms),
	                   db_i64(t1, row->finished_ms),
	                   db_i64(pt, client_part(c, j->shard))};
	PGresult *r = p[7] ? db_exec(conn, &c->err, SQL_TX_JOURNAL, 12, p) : NULL;
	buf_free(&out);
	int wrote = r && db_get_int(r, 0, 0) == 1;
	PQclear(r);
	if (wrote && db_cmd(conn, &c->err, "COMMIT", 0, NULL) == 0)
		return CAIRN_OK;
	db_cmd(conn, NULL, "ROLLBACK", 0, NULL);
	if (r && !wrote)
		return CAIRN_ESTOP; /* the fence: this worker no longer owns the run */
	return client_rc(ctx, c, CAIRN_EDB, "cannot journal the step in its transaction");
}

int cairn_tx_step(cairn_ctx *ctx, const char *name, cairn_tx_fn fn, void *arg, cJSON **result)
{
	if (!fn) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "step %s: the function is NULL", name ? name : "(null)");
		return ctx->fatal = CAIRN_EFAIL;
	}
	return run_step(ctx, name, KIND_STEP, NULL, NULL, fn, arg, result);
}

/* What a step that starts an independent run does. */
typedef struct start_arg {
	const char *workflow;
	char *input; /* JSON text */
	char key[64];
} start_arg;

static int start_fn(cairn_ctx *ctx, void *arg, cJSON **out)
{
	start_arg *a = arg;
	cairn_client *c = exec_client(ctx);
	if (!c)
		return CAIRN_ERETRY;
	/* Routed: this run's group if it serves the workflow, else one that
	 * does. The new run's span is a child of this step's (trace.h). */
	cairn_enqueue_opts o = {.key = a->key,
	                        .input = a->input,
	                        .traceparent = in_a_trace(ctx) ? cairn_ctx_traceparent(ctx) : NULL};
	cairn_enqueued e;
	int rc = client_enqueue_child(c, a->workflow, &o, 0, ctx->job->group_name, &e);
	if (!rc && e.warning) {
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, e.id);
		log_kv(ctx->env->log, LOG_WARN, "started a run of a workflow no worker serves",
		       "run", id, "workflow", a->workflow, "warning", e.warning, NULL);
	}
	cairn_enqueued_clear(&e);
	if ((rc = client_rc(ctx, c, rc, "cannot enqueue")))
		return rc;
	*out = cJSON_CreateObject();
	if (!*out || !cJSON_AddNumberToObject(*out, "run", (double)e.id))
		return cairn_fail(ctx, "out of memory");
	return CAIRN_OK;
}

/* The run id a start step journaled ({"run": ID}). */
static int started_id(cairn_ctx *ctx, const cJSON *result, int64_t *id)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(result, "run");
	if (!cJSON_IsNumber(v) || v->valuedouble < 1) {
		buf_reset(&ctx->err);
		buf_puts(&ctx->err, "cannot load the run: a journaled start has no run id");
		return ctx->fatal = CAIRN_EFAIL;
	}
	*id = (int64_t)v->valuedouble;
	return CAIRN_OK;
}

int cairn_enqueue_from(cairn_ctx *ctx, const char *name, const char *workflow, const cJSON *input,
                       int64_t *id)
{
	/* Keyed by this run and the step's seq: done again, it finds the run. */
	*id = 0;
	start_arg a = {.workflow = workflow, .input = print_json(input)};
	snprintf(a.key, sizeof a.key, "cairn.from:%" PRId64 ":%d", ctx->job->run_id, ctx->seq);
	if (!a.input)
		return no_memory(ctx);
	cJSON *result;
	int rc = run_step(ctx, name, KIND_ENQUEUE, NULL, start_fn, NULL, &a, &result);
	free(a.input);
	return rc ? rc : started_id(ctx, result, id);
}

/* -------------------------------------------------------------- children */

/*
 * A child start is journaled, and the child inserted, by the run's next
 * commit (commit_child), under an id taken from runs' sequence beforehand:
 * so starting N children costs a statement per CHILD_FLUSH_AT, not a
 * transaction each. Ids come in blocks, CHILD_IDS_FIRST at first, doubling
 * up to CHILD_IDS_MAX; the first block of an execution comes with the
 * run's orphans (children whose journal entry was lost), which a start at
 * their position finds again instead of starting twice.
 */
#define CHILD_FLUSH_AT     1000
#define CHILD_IDS_FIRST    16
#define CHILD_IDS_MAX      1024
#define TRIM_AFTER_ENTRIES 10000 /* exec_give_back_memory */

void exec_ids_free(exec_ids *x)
{
	for (int i = 0; i < x->norphans; i++)
		free(x->orphans[i].workflow);
	free(x->orphans);
	free(x->ids);
	*x = (exec_ids){0};
}

static const char SQL_CHILD_IDS[] = "SELECT id, seq, workflow FROM cairn.child_ids($1, $2, $3)";
/* cairn.child_ids written out, for a database with parts (Citus), which
 * plans no SQL-language function with parameters that reads a distributed
 * table ("could not create distributed plan"): its orphans are read over
 * every part (a child's part is its key's), its ids are the coordinator's
 * sequence's; $4 the part of the run. */
static const char SQL_CHILD_IDS_PARTS[] =
    "SELECT o.id, o.seq, o.workflow "
    "FROM (SELECT r.id, r.workflow, "
    "             CASE WHEN split_part(r.key, ':', 3) ~ '^[0-9]{1,9}$' "
    "                  THEN split_part(r.key, ':', 3)::integer END AS seq "
    "      FROM cairn.runs r "
    "      WHERE $3::bool AND r.parent_id = $1::bigint "
    "        AND r.key LIKE 'cairn.child:' || $1::bigint || ':%') o "
    "WHERE o.seq IS NOT NULL "
    "  AND o.seq <> ALL (ARRAY(SELECT s.seq FROM cairn.steps s "
    "                         WHERE s.part = $4::int AND s.run_id = $1)) "
    "UNION ALL "
    "SELECT nextval(pg_get_serial_sequence('cairn.runs', 'id')), NULL, NULL "
    "FROM generate_series(1, $2::int)";
static const char SQL_CHILD_IDS_NEW[] =
    "SELECT nextval(pg_get_serial_sequence('cairn.runs', 'id')), NULL::int, NULL::text "
    "FROM generate_series(1, $2::int) "
    "WHERE $1::bigint IS NOT NULL AND NOT $3::bool AND $4::int IS NOT NULL";

/* exec_env.child_ids from the database (migration 0021, cairn.child_ids). */
static int db_child_ids(const exec_env *env, int64_t run, int n, int orphans, exec_ids *out,
                        buf *err)
{
	*out = (exec_ids){0};
	cairn_client *c = thread_client(env, err);
	if (!c)
		return -CAIRN_EDB;
	char r[24], k[24];
	const char *p[] = {db_i64(r, run), db_i64(k, n), orphans ? "t" : "f"};
	const char *sql = SQL_CHILD_IDS;
	PGresult *res = NULL;
	if (client_shards(c, &out->shards) == CAIRN_OK) {
		int part = 0, np = 3;
		if (c->settings.nparts > 1 && client_run_part(c, run, &part) == CAIRN_OK) {
			sql = orphans ? SQL_CHILD_IDS_PARTS : SQL_CHILD_IDS_NEW;
			np = 4;
		}
		char pk[24];
		const char *pp[] = {p[0], p[1], p[2], db_i64(pk, part)};
		res = db_exec(c->conn, &c->err, sql, np, pp);
	}
	if (!res) {
		buf_puts(err, cairn_client_errmsg(c));
		thread_client_drop();
		return -CAIRN_EDB;
	}
	int rows = PQntuples(res), rc = 0;
	out->ids = malloc((size_t)rows * sizeof *out->ids + 1);
	out->orphans = malloc((size_t)rows * sizeof *out->orphans + 1);
	for (int i = 0; i < rows && out->ids && out->orphans && !rc; i++) {
		int64_t id = db_get_i64(res, i, 0);
		if (PQgetisnull(res, i, 1)) {
			out->ids[out->nids++] = id;
			continue;
		}
		struct exec_orphan *o = &out->orphans[out->norphans];
		*o = (struct exec_orphan){.id = id,
		                          .seq = db_get_int(res, i, 1),
		                          .workflow = strdup(PQgetvalue(res, i, 2))};
		rc = o->workflow ? 0 : -CAIRN_ENOMEM;
		out->norphans += !rc;
	}
	PQclear(res);
	if (!out->ids || !out->orphans || rc) {
		exec_ids_free(out);
		buf_puts(err, "out of memory");
		return -CAIRN_ENOMEM;
	}
	return 0;
}

/* Asks for more ids (with the orphans the first time): 0, or a status for
 * the workflow (CAIRN_ERETRY: the database could not be reached). */
static int ask_ids(cairn_ctx *ctx)
{
	const exec_env *env = ctx->env;
	int n = CHILD_IDS_FIRST << (ctx->ids_asked < 6 ? ctx->ids_asked : 6);
	exec_ids got;
	buf why = BUF_INIT;
	int rc = (env->child_ids ? env->child_ids : db_child_ids)(
	    env, ctx->job->run_id, n < CHILD_IDS_MAX ? n : CHILD_IDS_MAX, ctx->ids_asked == 0, &got,
	    &why);
	if (rc == -CAIRN_ENOMEM) {
		buf_free(&why);
		return no_memory(ctx);
	}
	if (rc) {
		rc = cairn_retryable(ctx, "cannot start the child: %s", buf_str(&why));
		buf_free(&why);
		return rc;
	}
	buf_free(&why);
	if (ctx->ids_asked) { /* the orphans stay those of the first answer */
		free(ctx->ids.ids);
		ctx->ids.ids = got.ids;
		ctx->ids.nids = got.nids;
		got.ids = NULL;
		exec_ids_free(&got);
	} else {
		ctx->ids = got;
	}
	ctx->ids_used = 0;
	ctx->ids_asked++;
	return CAIRN_OK;
}

/* The id of the child started at seq: an orphan of that position and
 * workflow (*found: it exists already), or a fresh one. */
static int child_id(cairn_ctx *ctx, int seq, const char *workflow, int64_t *id, int *found)
{
	int rc;
	*found = 0;
	if (!ctx->ids_asked && (rc = ask_ids(ctx)))
		return rc;
	for (int i = 0; i < ctx->ids.norphans; i++) {
		const struct exec_orphan *o = &ctx->ids.orphans[i];
		if (o->seq == seq && strcmp(o->workflow, workflow) == 0) {
			*id = o->id;
			*found = 1;
			return CAIRN_OK;
		}
	}
	if (ctx->ids_used == ctx->ids.nids && (rc = ask_ids(ctx)))
		return rc;
	if (ctx->ids_used == ctx->ids.nids)
		return cairn_retryable(ctx, "cannot start the child: the database gave no run id");
	*id = ctx->ids.ids[ctx->ids_used++];
	return CAIRN_OK;
}

/* Notes id as a child of this run. */
static int add_kid(cairn_ctx *ctx, int64_t id)
{
	const void *had;
	if (idmap_get(&ctx->kids, id, &had))
		return CAIRN_OK;
	return idmap_put(&ctx->kids, id, NULL) == 0 ? CAIRN_OK : no_memory(ctx);
}

/* Why a child of workflow with input text cannot start, into why (empty:
 * it can). */
static void child_refused(const exec_env *env, const char *workflow, const char *text, buf *why)
{
	char err[PARSE_ERR_MAX];
	if (!workflow || parse_check_name("workflow", workflow, err) < 0)
		buf_puts(why, workflow ? err : "workflow is NULL");
	else if (client_check_unsealed("input", text, err) < 0)
		buf_puts(why, err);
	else
		check_made(env, "the child's input", text, why);
}

/*
 * The group a child of workflow goes to, as cairn_enqueue routes it: this
 * run's own (*out NULL) when this worker serves the workflow (a live worker
 * of this group then does), else the one cairn.route gives with this
 * run's group preferred (through the executor's client, whose routes are
 * cached for a second), with its warning (*warned, malloc'ed). No database (env->child_ids
 * given, the unit tests): this run's own.
 */
static int child_group(cairn_ctx *ctx, const char *workflow, char *group, size_t size,
                       const char **out, char **warned)
{
	*out = NULL;
	*warned = NULL;
	if (ctx->env->child_ids || registry_workflow(ctx->env->reg, workflow))
		return CAIRN_OK;
	cairn_client *c = exec_client(ctx);
	if (!c)
		return CAIRN_ERETRY;
	char *warning = NULL;
	int rc = client_route_child(c, workflow, ctx->job->group_name, group, size, &warning);
	if ((rc = client_rc(ctx, c, rc, "cannot start the child")))
		return rc;
	*warned = warning;
	if (strcmp(group, ctx->job->group_name) != 0)
		*out = group;
	return CAIRN_OK;
}

/* A new child (no journal entry at seq yet, or one retrying whose time has
 * come, after attempts): its start and the child go with the pending
 * commit. */
static int child_new(cairn_ctx *ctx, int seq, const char *name, const char *workflow,
                     const cJSON *input, int attempts, int64_t *id)
{
	int rc = interrupt(ctx);
	if (rc)
		return rc;
	char *text = print_json(input);
	if (!text)
		return no_memory(ctx);
	int64_t now = clock_unix_ms();
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = KIND_CHILD,
	            .attempts = attempts + 1,
	            .started_ms = now,
	            .finished_ms = now};
	buf why = BUF_INIT;
	child_refused(ctx->env, workflow, text, &why);
	if (why.len || why.oom) {
		/* A start that can never succeed: journaled as failed, for the
		 * workflow to handle. */
		buf msg = BUF_INIT;
		buf_printf(&msg, "step %s: cannot start the child: %s", name,
		           why.oom ? "out of memory" : buf_str(&why));
		row.status = STEP_FAILED;
		row.error = (char *)buf_str(&msg);
		rc = add_row(ctx, &row);
		buf_reset(&ctx->err);
		buf_puts(&ctx->err, buf_str(&msg));
		buf_free(&msg);
		buf_free(&why);
		free(text);
		return rc ? rc : CAIRN_EFAIL;
	}
	buf_free(&why);
	int found = 0;
	char routed[129], *warning = NULL;
	const char *group;
	if ((rc = child_group(ctx, workflow, routed, sizeof routed, &group, &warning)) ||
	    (rc = child_id(ctx, seq, workflow, id, &found))) {
		free(warning);
		free(text);
		return rc;
	}
	char key[64], out[48];
	snprintf(key, sizeof key, "cairn.child:%" PRId64 ":%d", ctx->job->run_id, seq);
	int shard = hash_shard(key, ctx->ids.shards > 0 ? ctx->ids.shards : 1);
	if (!found) /* a value of the sequence: the id carries the shard (RUN_ID) */
		*id = RUN_ID(*id, shard);
	if (warning) {
		char child[24];
		snprintf(child, sizeof child, "%" PRId64, *id);
		log_kv(ctx->env->log, LOG_WARN, "started a run of a workflow no worker serves",
		       "run", child, "workflow", workflow, "warning", warning, NULL);
		free(warning);
	}
	snprintf(out, sizeof out, "{\"run\":%" PRId64 "}", *id);
	commit_child kid = {.id = *id,
	                    .seq = seq,
	                    .shard = shard,
	                    .workflow = (char *)workflow,
	                    .key = key,
	                    .input = text,
	                    .group = (char *)group};
	/* The child's run span is the child of this call's (trace.h), when
	 * the run is in a trace someone records: traced here, or given a
	 * traceparent (a worker that traces may execute the child). */
	if (in_a_trace(ctx))
		call_traceparent(ctx, seq, attempts + 1, kid.tp);
	if (ctx->job->traced)
		trace_call(ctx, KIND_CHILD, name, seq, attempts + 1, now * 1000000, NULL, NULL);
	commit *c = pending(ctx);
	if (!c || (!found && commit_add_child(c, &kid) < 0)) {
		free(text);
		return no_memory(ctx);
	}
	free(text);
	row.status = STEP_COMPLETED;
	row.output = out;
	if ((rc = add_row(ctx, &row)) || (rc = add_kid(ctx, *id)))
		return rc;
	if (ctx->pending->nkids < CHILD_FLUSH_AT)
		return CAIRN_OK;
	if ((rc = flush(ctx)))
		return rc;
	/* A parent starting children for a long while: the children other
	 * executors run meanwhile leave freed blocks in every thread's arena
	 * (a fan-out of 100,000 grew the worker by 3 to 5 MB of them, 1.3x),
	 * which only a trim gives back. */
	if (ctx->rows_made - ctx->rows_trimmed >= TRIM_AFTER_ENTRIES) {
		ctx->rows_trimmed = ctx->rows_made;
		exec_give_back_memory(TRIM_AFTER_ENTRIES);
	}
	return CAIRN_OK;
}

/* The id a child start journaled, read from its text as it is stored
 * ({"run": ID}, jsonb's spacing or none) without parsing it into a tree a
 * replay would keep: a parent of 100,000 children replays as many. 1, or
 * 0 for any other text (started_id parses that). */
static int started_id_text(const char *t, int64_t *id)
{
	if (!t)
		return 0;
	t += strspn(t, " ");
	if (strncmp(t, "{\"run\"", 6) != 0)
		return 0;
	t += 6;
	t += strspn(t, " ");
	if (*t++ != ':')
		return 0;
	t += strspn(t, " ");
	char *end;
	long long v = strtoll(t, &end, 10);
	if (end == t || v < 1 || *(end += strspn(end, " ")) != '}' || end[1 + strspn(end + 1, " ")])
		return 0;
	*id = v;
	return 1;
}

int cairn_child_start(cairn_ctx *ctx, const char *name, const char *workflow, const cJSON *input,
                      int64_t *child)
{
	*child = 0;
	journal_entry *e;
	int seq, rc = next_entry(ctx, name, KIND_CHILD, &e, &seq);
	if (rc)
		return rc;
	if (e && e->status == STEP_COMPLETED && started_id_text(e->output, child))
		return add_kid(ctx, *child);
	int attempts = 0, run_it = 1;
	cJSON *result = NULL;
	if (e && ((rc = replay_step(ctx, e, &result, &attempts, &run_it)) || !run_it))
		return rc || !result                           ? rc
		       : (rc = started_id(ctx, result, child)) ? rc
		                                               : add_kid(ctx, *child);
	return child_new(ctx, seq, name, workflow, input, attempts, child);
}

/*
 * Waits for children. A child's end arrives as the signal cairn.child:ID
 * with its outcome; a wait takes the ends it needs (consumes their signals)
 * when it can be met, and journals them: the single wait (cairn_child_wait,
 * kind signal, named after the child) its outcome, the wait for many
 * (kind children) an array of them in the order given, null for a child
 * that had not ended. A wait that cannot be met suspends the run and gives
 * the commit the children it still needs (commit_await), so that the run
 * is woken once the last of them ends (cairn.children_sync).
 */

/* The end of child: an outcome a wait took before (*taken), or an untaken
 * signal of the claim's (or fetched) ends (*sig), or neither. */
static int find_end(cairn_ctx *ctx, int64_t child, const cJSON **taken, signal_entry **sig)
{
	char name[48];
	const void *v = NULL;
	*sig = NULL;
	idmap_get(&ctx->kids, child, &v);
	if ((*taken = v))
		return CAIRN_OK;
	snprintf(name, sizeof name, CHILD_SIGNAL_PREFIX "%" PRId64, child);
	int oom;
	if (!(*sig = signals_find(&ctx->sigs, name, &oom)) && !oom)
		*sig = signals_find(&ctx->more, name, &oom);
	return oom ? no_memory(ctx) : CAIRN_OK;
}

/* exec_env.more_ends from the database: the run's unconsumed children's
 * ends after id `after`, rendered as the claim renders signals. */
static const char SQL_MORE_ENDS[] =
    "SELECT json_agg(json_build_object('id', g.id::text, 'name', g.name, "
    "  'payload', g.payload::text) ORDER BY g.id)::text "
    "FROM cairn.signals g WHERE g.run_id = $1 AND g.id > $2 AND g.consumed_by_seq IS NULL "
    "  AND g.name LIKE 'cairn.child:%'";

static int db_more_ends(const exec_env *env, int64_t run, int64_t after, char **json, buf *err)
{
	*json = NULL;
	cairn_client *c = thread_client(env, err);
	if (!c)
		return -CAIRN_EDB;
	char r[24], a[24];
	const char *p[] = {db_i64(r, run), db_i64(a, after)};
	PGresult *res = db_exec(c->conn, &c->err, SQL_MORE_ENDS, 2, p);
	if (!res) {
		buf_puts(err, cairn_client_errmsg(c));
		thread_client_drop();
		return -CAIRN_EDB;
	}
	int rc = 0;
	if (!PQgetisnull(res, 0, 0) && !(*json = strdup(PQgetvalue(res, 0, 0))))
		rc = -CAIRN_ENOMEM;
	int big = PQgetlength(res, 0, 0) > DB_BUFFER_KEEP_MAX;
	PQclear(res);
	if (big) /* its buffers go with it (DB_BUFFER_KEEP_MAX) */
		thread_client_drop();
	return rc;
}

/* The claim brings a run at most max_pending_signals of its signals, the
 * oldest: a run with more children's ends than that fetches the others
 * (once an execution), when a wait lacks some. */
static int fetch_more_ends(cairn_ctx *ctx)
{
	const job *j = ctx->job;
	if (ctx->more_fetched || j->max_signals <= 0 || ctx->sigs.n < j->max_signals)
		return CAIRN_OK;
	ctx->more_fetched = 1;
	int64_t after = 0;
	for (int i = 0; i < ctx->sigs.n; i++)
		if (ctx->sigs.e[i].id > after)
			after = ctx->sigs.e[i].id;
	const exec_env *env = ctx->env;
	char *json = NULL;
	buf why = BUF_INIT;
	char key[SEAL_ID_MAX + 1] = "";
	int rc =
	    (env->more_ends ? env->more_ends : db_more_ends)(env, j->run_id, after, &json, &why);
	if (!rc && !(rc = signals_parse(json, &ctx->more, &why)))
		rc = signals_unseal(&ctx->more, env->keys, &why, key);
	free(json);
	if (rc == -CAIRN_ENOMEM)
		rc = no_memory(ctx);
	else if (rc == -CAIRN_EDB)
		rc = cairn_retryable(ctx, "cannot read the children's ends: %s", buf_str(&why));
	else if (rc) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "cannot load the children's ends: %s", buf_str(&why));
		rc = ctx->fatal = CAIRN_EFAIL;
	}
	buf_free(&why);
	return rc;
}

/* What one wait for children is, and what it found. */
typedef struct child_wait {
	step_kind kind; /* KIND_SIGNAL (cairn_child_wait) or KIND_CHILDREN */
	const char *name;
	const int64_t *children;
	int n, want;
	int64_t timeout_ms;
	/* Found: each child's end, taken before or in a signal (or neither). */
	const cJSON **taken;
	signal_entry **sig;
	int ended;      /* children whose end is there */
	int taken_only; /* of them, taken before */
} child_wait;

/* Checks the children a wait names: each started by this run, none twice.
 * A wait that breaks that is the workflow's mistake: CAIRN_EINVAL, sticky
 * (every later durable call returns it), which fails the run. */
static int check_children(cairn_ctx *ctx, const child_wait *w)
{
	/* A bit per child this run started, by its place in ctx->kids. */
	size_t words = (ctx->kids.n + 63) / 64, at;
	uint64_t *seen = w->n > 1 ? calloc(words + 1, sizeof *seen) : NULL;
	int rc = w->n > 1 && !seen ? no_memory(ctx) : CAIRN_OK;
	for (int i = 0; i < w->n && !rc; i++) {
		if (!idmap_index(&ctx->kids, w->children[i], &at)) {
			buf_reset(&ctx->err);
			buf_printf(&ctx->err,
			           "waiting for run %" PRId64
			           ", which is not a child this run started",
			           w->children[i]);
			rc = ctx->fatal = CAIRN_EINVAL;
		} else if (seen && (seen[at / 64] >> (at % 64) & 1)) {
			buf_reset(&ctx->err);
			buf_printf(&ctx->err, "waiting for child %" PRId64 " twice in one wait",
			           w->children[i]);
			rc = ctx->fatal = CAIRN_EINVAL;
		} else if (seen) {
			seen[at / 64] |= (uint64_t)1 << (at % 64);
		}
	}
	free(seen);
	return rc;
}

/* Looks for the ends of w's children (w->taken, w->sig, w->ended). */
static int look_for_ends(cairn_ctx *ctx, child_wait *w)
{
	w->ended = w->taken_only = 0;
	for (int i = 0; i < w->n; i++) {
		int rc = find_end(ctx, w->children[i], &w->taken[i], &w->sig[i]);
		if (rc)
			return rc;
		w->ended += w->taken[i] || w->sig[i];
		w->taken_only += w->taken[i] != NULL;
	}
	return CAIRN_OK;
}

/* Takes the ends of w (their signals consumed by seq) and journals them at
 * seq: w->taken[] then holds every end there is. */
static int take_ends(cairn_ctx *ctx, child_wait *w, int seq, int64_t started_ms)
{
	buf out = BUF_INIT;
	int rc = CAIRN_OK;
	if (w->kind == KIND_CHILDREN)
		buf_puts(&out, "[");
	for (int i = 0; i < w->n && !rc; i++) {
		signal_entry *g = w->sig[i];
		if (i)
			buf_puts(&out, ",");
		if (g) {
			cJSON *v;
			g->taken = 1;
			if (!(rc = keep_parsed(ctx, g->payload, &v))) {
				w->taken[i] = v;
				if (idmap_put(&ctx->kids, w->children[i], v) < 0 ||
				    commit_add_signal(pending(ctx), g->id, seq) < 0)
					rc = no_memory(ctx);
			}
			buf_puts(&out, g->payload);
		} else if (w->taken[i]) {
			char *t = cJSON_PrintUnformatted(w->taken[i]);
			if (!t)
				rc = no_memory(ctx);
			buf_puts(&out, t ? t : "null");
			cJSON_free(t);
		} else {
			buf_puts(&out, "null");
		}
	}
	if (w->kind == KIND_CHILDREN)
		buf_puts(&out, "]");
	if (!rc && out.oom)
		rc = no_memory(ctx);
	if (!rc) {
		jrow row = {.seq = seq,
		            .name = (char *)w->name,
		            .kind = w->kind,
		            .status = STEP_COMPLETED,
		            .output = (char *)buf_str(&out),
		            .attempts = 1,
		            .started_ms = started_ms,
		            .finished_ms = ctx_now(ctx)};
		rc = add_row(ctx, &row);
		if (!rc && ctx->job->traced)
			trace_call(ctx, w->kind, w->name, seq, 0, started_ms * 1000000, NULL, NULL);
	}
	buf_free(&out);
	return rc;
}

/* A journaled wait that was met: its ends, from the entry's output. */
static int replay_ends(cairn_ctx *ctx, child_wait *w, const journal_entry *e)
{
	cJSON *v;
	int rc = keep_parsed(ctx, e->output, &v);
	if (rc)
		return rc;
	if (w->kind == KIND_SIGNAL) {
		w->taken[0] = v;
	} else if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != w->n) {
		buf_reset(&ctx->err);
		buf_printf(
		    &ctx->err,
		    "non-determinism at journal position %d: the journal's wait for children "
		    "has %d of them, but the workflow now waits for %d",
		    e->seq, cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0, w->n);
		return ctx->fatal = CAIRN_ENONDET;
	} else {
		int i = 0;
		const cJSON *it;
		cJSON_ArrayForEach(it, v) w->taken[i++] = cJSON_IsNull(it) ? NULL : it;
	}
	for (int i = 0; i < w->n; i++)
		if (w->taken[i] && idmap_put(&ctx->kids, w->children[i], w->taken[i]) < 0)
			return no_memory(ctx);
	return CAIRN_OK;
}

/* The wait itself: CAIRN_OK once met (w->taken: the ends, NULL for a child
 * not ended), CAIRN_ETIMEOUT, CAIRN_SUSPENDED, or another status. */
static int wait_children(cairn_ctx *ctx, child_wait *w)
{
	journal_entry *e;
	int seq, rc = next_entry(ctx, w->name, w->kind, &e, &seq);
	if (rc)
		return rc;
	if ((rc = check_children(ctx, w)))
		return rc;
	if (e && e->status == STEP_TIMED_OUT)
		return CAIRN_ETIMEOUT;
	if (e && e->status == STEP_COMPLETED)
		return replay_ends(ctx, w, e);
	if ((rc = interrupt(ctx)) || (rc = look_for_ends(ctx, w)))
		return rc;
	if (w->ended < w->want && (rc = fetch_more_ends(ctx)) == CAIRN_OK && ctx->more_fetched &&
	    ctx->more.n)
		rc = look_for_ends(ctx, w);
	if (rc)
		return rc;
	int64_t now = ctx_now(ctx), started = e ? e->started_ms : now;
	if (w->ended >= w->want)
		return take_ends(ctx, w, seq, started);
	int64_t deadline = e ? e->wake_ms : w->timeout_ms >= 0 ? now + w->timeout_ms : 0;
	jrow row = {.seq = seq,
	            .name = (char *)w->name,
	            .kind = w->kind,
	            .attempts = 1,
	            .started_ms = started,
	            .wake_ms = deadline};
	if (deadline && deadline <= now) {
		row.status = STEP_TIMED_OUT;
		row.finished_ms = now;
		if (ctx->job->traced)
			trace_call(ctx, w->kind, w->name, seq, 0, started * 1000000, "timed_out",
			           NULL);
		return (rc = add_row(ctx, &row)) ? rc : CAIRN_ETIMEOUT;
	}
	row.status = STEP_WAITING;
	if (!e && (rc = add_row(ctx, &row)))
		return rc;
	/* The children whose ends it has not taken before, and how many of
	 * them must end: the commit's wait (cairn.children_sync). */
	int64_t *need = malloc((size_t)w->n * sizeof *need + 1);
	int k = 0;
	for (int i = 0; need && i < w->n; i++)
		if (!w->taken[i])
			need[k++] = w->children[i];
	commit *c = pending(ctx);
	rc = need && c && commit_set_await(c, seq, w->want - w->taken_only, need, k) == 0
	         ? CAIRN_OK
	         : no_memory(ctx);
	free(need);
	return rc ? rc : suspend(ctx, RUN_WAITING, e ? 0 : deadline);
}

/* Runs the wait w with room for what it finds. */
static int wait_for(cairn_ctx *ctx, child_wait *w)
{
	w->taken = calloc((size_t)w->n + 1, sizeof *w->taken);
	w->sig = calloc((size_t)w->n + 1, sizeof *w->sig);
	int rc = w->taken && w->sig ? wait_children(ctx, w) : no_memory(ctx);
	free(w->sig);
	w->sig = NULL;
	return rc;
}

/* A child's outcome ({"status", "output", "error"}) as a result. */
static void outcome_of(const cJSON *o, cairn_child_result *r)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
	run_status status;
	int known = cJSON_IsString(st) && run_status_parse(st->valuestring, &status) == 0;
	r->done = 1;
	r->status = known && status == RUN_COMPLETED   ? CAIRN_OK
	            : known && status == RUN_CANCELLED ? CAIRN_CANCELLED
	                                               : CAIRN_EFAIL;
	r->output = r->status == CAIRN_OK ? cJSON_GetObjectItemCaseSensitive(o, "output") : NULL;
	r->error = r->status == CAIRN_OK ? NULL
	           : cJSON_IsString(err) ? err->valuestring
	                                 : "no error recorded";
}

/* The error of a child that did not complete, for the workflow. */
static int child_failed(cairn_ctx *ctx, const cairn_child_result *r)
{
	return cairn_fail(ctx, "child run %" PRId64 " %s: %s", r->child,
	                  r->status == CAIRN_CANCELLED ? "cancelled" : "failed", r->error);
}

int cairn_child_wait(cairn_ctx *ctx, int64_t child, int64_t timeout_ms, cJSON **output)
{
	char name[64];
	snprintf(name, sizeof name, CHILD_SIGNAL_PREFIX "%" PRId64, child);
	if (output)
		*output = NULL;
	child_wait w = {.kind = KIND_SIGNAL,
	                .name = name,
	                .children = &child,
	                .n = 1,
	                .want = 1,
	                .timeout_ms = timeout_ms};
	int rc = wait_for(ctx, &w);
	cairn_child_result r = {.child = child};
	if (!rc)
		outcome_of(w.taken[0], &r);
	free(w.taken);
	if (rc)
		return rc;
	if (r.status != CAIRN_OK)
		return child_failed(ctx, &r);
	if (output)
		*output = (cJSON *)r.output;
	return CAIRN_OK;
}

int cairn_child_wait_first(cairn_ctx *ctx, const int64_t *children, int n, int k,
                           int64_t timeout_ms, cairn_child_result *results)
{
	if (!children || !results || n < 1 || n > 1000000 || k < 1 || k > n) {
		buf_reset(&ctx->err);
		buf_printf(
		    &ctx->err,
		    "a wait for children needs 1 <= k <= n <= 1000000 and the arrays of them: "
		    "got n %d, k %d%s",
		    n, k, children && results ? "" : ", an array NULL");
		return ctx->fatal = CAIRN_EINVAL;
	}
	for (int i = 0; i < n; i++)
		results[i] = (cairn_child_result){.child = children[i]};
	child_wait w = {.kind = KIND_CHILDREN,
	                .name = "children",
	                .children = children,
	                .n = n,
	                .want = k,
	                .timeout_ms = timeout_ms};
	int rc = wait_for(ctx, &w);
	const cairn_child_result *failed = NULL;
	for (int i = 0; !rc && i < n; i++)
		if (w.taken[i]) {
			outcome_of(w.taken[i], &results[i]);
			if (results[i].status != CAIRN_OK && !failed)
				failed = &results[i];
		}
	free(w.taken);
	return rc ? rc : failed ? child_failed(ctx, failed) : CAIRN_OK;
}

int cairn_child_wait_all(cairn_ctx *ctx, const int64_t *children, int n, int64_t timeout_ms,
                         cairn_child_result *results)
{
	return cairn_child_wait_first(ctx, children, n, n, timeout_ms, results);
}

int cairn_child_wait_any(cairn_ctx *ctx, const int64_t *children, int n, int64_t timeout_ms,
                         cairn_child_result *results)
{
	return cairn_child_wait_first(ctx, children, n, 1, timeout_ms, results);
}

typedef struct send_arg {
	int64_t run;
	const char *signal;
	char *payload;
	char nonce[33];
} send_arg;

static int send_fn(cairn_ctx *ctx, void *arg, cJSON **out)
{
	send_arg *a = arg;
	cairn_client *c = exec_client(ctx);
	if (!c)
		return CAIRN_ERETRY;
	int rc = client_signal_once(c, a->run, a->signal, a->payload, a->nonce);
	/* The nonce is recorded with the signal: found, an earlier attempt of
	 * this step delivered it before its worker stopped. */
	if (rc == CAIRN_ESTATE && strstr(cairn_client_errmsg(c), CLIENT_NONCE_USED))
		rc = CAIRN_OK;
	if ((rc = client_rc(ctx, c, rc, "cannot send the signal")))
		return rc;
	*out = cJSON_CreateObject();
	if (!*out || !cJSON_AddNumberToObject(*out, "run", (double)a->run))
		return cairn_fail(ctx, "out of memory");
	return CAIRN_OK;
}

int cairn_send(cairn_ctx *ctx, const char *name, int64_t run, const char *signal,
               const cJSON *payload)
{
	send_arg a = {.run = run, .signal = signal, .payload = print_json(payload)};
	if (!a.payload)
		return no_memory(ctx);
	/* This call's own nonce: the same in every replay of it. */
	char id[96];
	unsigned char h[16];
	int n = snprintf(id, sizeof id, "cairn.send:%" PRId64 ":%d", ctx->job->run_id, ctx->seq);
	crypto_generichash(h, sizeof h, (const unsigned char *)id, (size_t)n, NULL, 0);
	sodium_bin2hex(a.nonce, sizeof a.nonce, h, sizeof h);
	int rc = run_step(ctx, name, KIND_SEND, NULL, send_fn, NULL, &a, NULL);
	free(a.payload);
	return rc;
}

int cairn_patched(cairn_ctx *ctx, const char *patch)
{
	char err[PARSE_ERR_MAX];
	if (ctx->suspended || ctx->fatal || ctx->next_input)
		return 0;
	if (!patch || parse_check_name("patch id", patch, err) < 0) {
		buf_reset(&ctx->err);
		buf_puts(&ctx->err, patch ? err : "patch id is NULL");
		ctx->fatal = CAIRN_EFAIL;
		return 0;
	}
	const journal_entry *e = entry_at(ctx, ctx->seq);
	if (e && (e->kind != KIND_PATCH || strcmp(e->name, patch) != 0))
		return 0; /* a journal written before the patch: the old path, no seq taken */
	int seq = ctx->seq++;
	if (e) {
		ctx->replayed++;
		return 1; /* its marker: this run passed here with the patch */
	}
	return add_settled(ctx, seq, patch, KIND_PATCH, NULL, ctx_now(ctx)) == CAIRN_OK;
}

int cairn_set_event(cairn_ctx *ctx, const char *key, const cJSON *value)
{
	char name[160], err[PARSE_ERR_MAX];
	if (!key || parse_check_name("event key", key, err) < 0 || strlen(key) > 120) {
		buf_reset(&ctx->err);
		if (!key)
			buf_puts(&ctx->err, "event key is NULL");
		else if (strlen(key) > 120)
			buf_printf(&ctx->err,
			           "event key is %zu bytes long: at most 120 are accepted",
			           strlen(key));
		else
			buf_puts(&ctx->err, err);
		return ctx->fatal = CAIRN_EFAIL;
	}
	snprintf(name, sizeof name, EVENT_STEP_PREFIX "%s", key);
	journal_entry *e;
	int seq, rc = next_entry(ctx, name, KIND_EVENT, &e, &seq);
	if (rc || e)
		return rc; /* published before */
	char *text;
	if ((rc = step_result(ctx, CAIRN_OK, value, &text))) {
		buf msg = BUF_INIT;
		buf_printf(&msg, "event %s: %s", key, buf_str(&ctx->err));
		buf_reset(&ctx->err);
		buf_puts(&ctx->err, buf_str(&msg));
		buf_free(&msg);
		return ctx->fatal = rc;
	}
	rc = add_settled(ctx, seq, name, KIND_EVENT, text, ctx_now(ctx));
	free(text);
	return rc;
}

int cairn_sleep_until(cairn_ctx *ctx, const char *name, int64_t until_ms)
{
	journal_entry *e;
	int seq, rc = next_entry(ctx, name, KIND_SLEEP, &e, &seq);
	if (rc)
		return rc;
	if (e && e->status == STEP_COMPLETED)
		return CAIRN_OK;
	if ((rc = interrupt(ctx)))
		return rc;
	int64_t now = ctx_now(ctx), wake = e ? e->wake_ms : until_ms;
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = KIND_SLEEP,
	            .attempts = 1,
	            .started_ms = e ? e->started_ms : now,
	            .wake_ms = wake};
	if (wake <= now) {
		row.status = STEP_COMPLETED;
		row.finished_ms = now;
		if (ctx->job->traced)
			trace_call(ctx, KIND_SLEEP, name, seq, 0, row.started_ms * 1000000, NULL,
			           NULL);
		return add_row(ctx, &row);
	}
	if (e)
		return suspend(ctx, RUN_SLEEPING, 0);
	row.status = STEP_WAITING;
	return (rc = add_row(ctx, &row)) ? rc : suspend(ctx, RUN_SLEEPING, wake);
}

int cairn_sleep(cairn_ctx *ctx, const char *name, int64_t duration_ms)
{
	return cairn_sleep_until(ctx, name, ctx_now(ctx) + (duration_ms > 0 ? duration_ms : 0));
}

/* A signal wait that took a child's end (named cairn.child:ID, awaited
 * directly): later waits for that child find it taken (find_end). */
static int note_child_end(cairn_ctx *ctx, const char *name, const cJSON *end)
{
	const void *v;
	if (strncmp(name, CHILD_SIGNAL_PREFIX, sizeof CHILD_SIGNAL_PREFIX - 1) != 0)
		return CAIRN_OK;
	int64_t id = strtoll(name + sizeof CHILD_SIGNAL_PREFIX - 1, NULL, 10);
	if (id <= 0 || !idmap_get(&ctx->kids, id, &v) || v)
		return CAIRN_OK;
	return idmap_put(&ctx->kids, id, end) == 0 ? CAIRN_OK : no_memory(ctx);
}

int cairn_await_signal(cairn_ctx *ctx, const char *name, int64_t timeout_ms, cJSON **payload)
{
	if (payload)
		*payload = NULL;
	journal_entry *e;
	int seq, rc = next_entry(ctx, name, KIND_SIGNAL, &e, &seq);
	if (rc)
		return rc;
	if (e && e->status == STEP_TIMED_OUT)
		return CAIRN_ETIMEOUT;
	if (e && e->status == STEP_COMPLETED) {
		cJSON *v = NULL;
		rc = keep_value(ctx, e, &v);
		if (payload)
			*payload = v;
		return rc ? rc : note_child_end(ctx, name, v);
	}
	if ((rc = interrupt(ctx)))
		return rc;
	int64_t now = ctx_now(ctx);
	int64_t deadline = e ? e->wake_ms : timeout_ms >= 0 ? now + timeout_ms : 0;
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = KIND_SIGNAL,
	            .attempts = 1,
	            .started_ms = e ? e->started_ms : now,
	            .wake_ms = deadline};
	int oom;
	signal_entry *sig = signals_find(&ctx->sigs, name, &oom);
	if (oom)
		return no_memory(ctx);
	if (sig) {
		sig->taken = 1;
		/* Only a signal the run awaits is parsed: one it never awaits is
		 * harmless, whatever it holds. */
		cJSON *v;
		if ((rc = keep_parsed(ctx, sig->payload, &v)))
			return rc;
		if (payload)
			*payload = v;
		row.status = STEP_COMPLETED;
		row.finished_ms = now;
		row.output = (char *)sig->payload;
		if (ctx->job->traced)
			trace_call(ctx, KIND_SIGNAL, name, seq, 0, row.started_ms * 1000000, NULL,
			           NULL);
		rc = add_row(ctx, &row);
		if (!rc && commit_add_signal(pending(ctx), sig->id, seq) < 0)
			rc = no_memory(ctx);
		return rc ? rc : note_child_end(ctx, name, v);
	}
	if (deadline && deadline <= now) {
		row.status = STEP_TIMED_OUT;
		row.finished_ms = now;
		if (ctx->job->traced)
			trace_call(ctx, KIND_SIGNAL, name, seq, 0, row.started_ms * 1000000,
			           "timed_out", NULL);
		return (rc = add_row(ctx, &row)) ? rc : CAIRN_ETIMEOUT;
	}
	if (e)
		return suspend(ctx, RUN_WAITING, 0);
	row.status = STEP_WAITING;
	return (rc = add_row(ctx, &row)) ? rc : suspend(ctx, RUN_WAITING, deadline);
}

/* cairn_now and cairn_random: a value made once and journaled as text. */
static int journaled_value(cairn_ctx *ctx, step_kind kind, uint64_t fresh, uint64_t *out)
{
	const char *name = step_kind_name(kind);
	journal_entry *e;
	int seq, rc = next_entry(ctx, name, kind, &e, &seq);
	if (rc)
		return rc;
	if (e) {
		/* Journaled as a JSON string of digits: "123". */
		const char *v = e->output;
		*out = v && v[0] == '"' ? strtoull(v + 1, NULL, 10) : 0;
		return CAIRN_OK;
	}
	if ((rc = interrupt(ctx)))
		return rc;
	char text[32];
	snprintf(text, sizeof text, "\"%" PRIu64 "\"", fresh);
	*out = fresh;
	return add_settled(ctx, seq, name, kind, text, clock_unix_ms());
}

int cairn_now(cairn_ctx *ctx, int64_t *unix_ms)
{
	uint64_t v = 0;
	int rc = journaled_value(ctx, KIND_NOW, (uint64_t)ctx_now(ctx), &v);
	*unix_ms = (int64_t)v;
	return rc;
}

int cairn_random(cairn_ctx *ctx, uint64_t *value)
{
	uint64_t fresh;
	randombytes_buf(&fresh, sizeof fresh);
	return journaled_value(ctx, KIND_RANDOM, fresh, value);
}

/* Not a durable call of its own: the run's final commit ends it and
 * inserts its successor (commit.c, part cont), so it happens exactly when
 * that commit does. A cancel that came first wins. */
int cairn_continue_as_new(cairn_ctx *ctx, const cJSON *input)
{
	if (ctx->suspended)
		return CAIRN_SUSPENDED;
	if (ctx->next_input)
		return CAIRN_CONTINUED;
	int rc = interrupt(ctx);
	if (rc)
		return rc;
	char *text = print_json(input);
	if (!text)
		return no_memory(ctx);
	buf why = BUF_INIT;
	if (check_made(ctx->env, "the input of the run it continues as", text, &why) < 0) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "cannot continue as new: %s",
		           why.oom ? "out of memory" : buf_str(&why));
		buf_free(&why);
		free(text);
		return ctx->fatal = CAIRN_EFAIL;
	}
	buf_free(&why);
	/* The successor's id, a value of the sequence in this run's shard (as
	 * a child's, child_id), taken now rather than in the commit: on Citus
	 * a nextval in the commit's statement runs on the node of the part,
	 * whose sequence is not the coordinator's. */
	if ((!ctx->ids_asked || ctx->ids_used == ctx->ids.nids) && (rc = ask_ids(ctx))) {
		free(text);
		return rc;
	}
	if (ctx->ids_used == ctx->ids.nids) {
		free(text);
		return cairn_retryable(ctx, "cannot continue as new: the database gave no run id");
	}
	ctx->next_id = RUN_ID(ctx->ids.ids[ctx->ids_used++], ctx->job->shard);
	ctx->next_input = text;
	return CAIRN_CONTINUED;
}

/* --------------------------------------------------------------- the run */

/* The run's input, decrypted, into *input (NULL for a value that does not
 * parse, which the jsonb column never holds). */
static int load_input(const exec_env *env, const job *j, cJSON **input, buf *why, char *key)
{
	buf plain = BUF_INIT;
	char err[PARSE_ERR_MAX];
	int rc = seal_open(env->keys, SEAL_RUN_INPUT, j->input, &plain, key);
	if (rc < 0) {
		buf_puts(why, "the input: ");
		seal_explain(rc, key, why);
	} else if (rc == 0 && json_check_text("the input", buf_str(&plain), plain.len, err) < 0) {
		/* Sealed before cairn refused \u0000: it would be cut short here. */
		buf_puts(why, err);
		rc = -CAIRN_EINVAL;
	} else {
		*input = cJSON_Parse(rc == 0 ? buf_str(&plain) : j->input);
	}
	buf_free(&plain);
	return rc > 0 ? 0 : rc;
}

/* Loads the input, the journal and the signals, decrypted: 0, SEAL_NOKEY
 * (a value names a key this worker lacks: its id in key, and why in
 * ctx->err), or an error: the run fails alone with a message saying why. */
static int load(cairn_ctx *ctx, cJSON **input, char *key)
{
	job *j = ctx->job;
	const seal_keys *k = ctx->env->keys;
	buf why = BUF_INIT;
	ctx->keep = cJSON_CreateArray();
	int rc = ctx->keep ? 0 : -CAIRN_ENOMEM;
	if (!rc)
		rc = load_input(ctx->env, j, input, &why, key);
	if (!rc && !(rc = journal_parse(j->journal, &ctx->jr, &why)))
		rc = journal_unseal(&ctx->jr, k, &why, key);
	if (!rc && !(rc = signals_parse(j->signals, &ctx->sigs, &why)))
		rc = signals_unseal(&ctx->sigs, k, &why, key);
	if (!rc && j->load_error[0]) {
		buf_puts(&why, j->load_error);
		rc = -CAIRN_EINVAL;
	}
	buf_reset(&ctx->err);
	if (rc == SEAL_NOKEY)
		buf_puts(&ctx->err, buf_str(&why));
	else if (rc)
		buf_printf(&ctx->err, "cannot load the run: %s",
		           rc == -CAIRN_ENOMEM ? "out of memory" : buf_str(&why));
	buf_free(&why);
	return rc;
}

/* A run encrypted with a key this worker lacks: left alone, not failed. A
 * worker that has the key takes it once its shard moves there, or this one
 * once it is given the key; until then it comes back every
 * LOCKED_RETRY_MS. */
#define LOCKED_RETRY_MS 15000
static void locked(const exec_env *env, job *j, commit *c, const char *why, const char *key)
{
	buf msg = BUF_INIT;
	buf_printf(&msg, "waiting for a worker that has encryption key \"%s\": %s", key, why);
	c->outcome = COMMIT_DEFER;
	c->at_ms = j->db_now_ms + LOCKED_RETRY_MS;
	c->error = buf_detach(&msg);
	atomic_fetch_add(&env->m->runs_locked, 1);
	char id[24];
	snprintf(id, sizeof id, "%" PRId64, j->run_id);
	log_kv(env->log, LOG_WARN,
	       "left a run alone: it is encrypted with a key this worker does not have "
	       "(CAIRN_ENCRYPTION_KEYS)",
	       "run", id, "workflow", j->workflow, "key", key, NULL);
}

static void finish(commit *c, run_status status, const char *error)
{
	c->outcome = COMMIT_FINISH;
	c->status = status;
	c->error = error ? strdup(error) : NULL;
}

/* poison_after executions of the run started since it last made progress,
 * and each time its worker stopped: whatever it does kills workers. It fails
 * alone, before any of its code runs again. */
static commit *poisoned(const exec_env *env, job *j, commit *c)
{
	buf msg = BUF_INIT;
	buf_printf(&msg,
	           "the worker stopped %d times while running this run (CAIRN_POISON_AFTER is "
	           "%d); last durable step: %s; `cairn retry` runs it again",
	           j->claims, env->poison_after, j->last_step ? j->last_step : "none");
	finish(c, RUN_FAILED, buf_str(&msg));
	buf_free(&msg);
	metrics_run(j->mx, METRICS_RUNS_POISONED);
	return c;
}

/* Where the workflow of j is served (client_placement), read on the
 * executor's own client: 0, or -1 when that is not known (no database, or
 * env->runner_ttl_ms 0). */
static int placement(const exec_env *env, job *j, client_placed *pl)
{
	if (env->runner_ttl_ms <= 0)
		return -1;
	cairn_ctx ctx = {.env = env, .job = j};
	cairn_client *c = exec_client(&ctx);
	int rc =
	    c ? client_placement(c, j->workflow, j->group_name, env->runner_ttl_ms, pl) : CAIRN_EDB;
	if (c && rc)
		client_rc(&ctx, c, CAIRN_EDB, "cannot look where the workflow is served");
	if (rc) {
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, j->run_id);
		log_kv(env->log, LOG_WARN, "cannot look where a workflow is served", "run", id,
		       "workflow", j->workflow, "error", buf_str(&ctx.err), NULL);
	}
	buf_free(&ctx.err);
	return rc ? -1 : 0;
}

/*
 * A run of a workflow this worker does not serve (routing by workflow,
 * docs/sdks.md). When another group has a live worker that serves it, the
 * run moves there (fenced, with its messages; the new owner is woken).
 * Otherwise it waits, deferred a few seconds at a time: for the owner of
 * its shard to serve it while other live workers of its group do (a
 * rolling deploy), without end; else for any worker to serve it, and fails
 * once CAIRN_UNKNOWN_WORKFLOW_TIMEOUT has passed since it was due and no
 * live worker has served the workflow for as long.
 */
static commit *unknown_workflow(const exec_env *env, job *j, commit *c)
{
	/* Counted from when the run was due: a delayed or retried run gets the
	 * whole timeout too. */
	int64_t age = j->db_now_ms - j->scheduled_ms, timeout = env->unknown_workflow_timeout_ms;
	client_placed pl;
	int known = !j->cancel_requested && placement(env, j, &pl) == 0;
	int gone = !known || !pl.served || pl.gone_ms >= timeout;
	buf msg = BUF_INIT;
	if (j->cancel_requested) {
		finish(c, RUN_CANCELLED, "cancelled");
	} else if (known && pl.to[0] && (c->move_to = strdup(pl.to))) {
		c->outcome = COMMIT_MOVE;
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, j->run_id);
		log_kv(env->log, LOG_INFO,
		       "moved a run to a group whose live workers serve its workflow", "run", id,
		       "workflow", j->workflow, "from", j->group_name, "to", pl.to, NULL);
	} else if (known && pl.here) {
		buf_printf(
		    &msg,
		    "waiting for the owner of its shard to serve workflow \"%s\": other live "
		    "workers of group \"%s\" do (its workers serve different workflows)",
		    j->workflow, j->group_name);
	} else if (age >= timeout && gone) {
		buf_printf(&msg,
		           "no live worker serves workflow \"%s\" (%s); failed after "
		           "CAIRN_UNKNOWN_WORKFLOW_TIMEOUT (%" PRId64 " ms)",
		           j->workflow, known ? pl.seen : "not found", timeout);
		finish(c, RUN_FAILED, buf_str(&msg));
	} else {
		buf_printf(&msg, "waiting: no live worker serves workflow \"%s\" (%s)", j->workflow,
		           known ? pl.seen : "not found");
	}
	if (msg.len && c->outcome != COMMIT_FINISH) {
		/* Again when the timeout may have passed, and every 5 s at most. */
		int64_t left = timeout - age;
		if (known && pl.served && timeout - pl.gone_ms > left)
			left = timeout - pl.gone_ms;
		c->outcome = COMMIT_DEFER;
		c->at_ms = j->db_now_ms + (left < 5000 ? left > 250 ? left : 250 : 5000);
		c->error = buf_detach(&msg);
	}
	buf_free(&msg);
	return c;
}

/* The final commit of an execution that continued as new (and returned
 * rc): the run completes with a null output, and its successor is
 * inserted with the input it was given. */
static void continue_as_new(cairn_ctx *ctx, commit *c, int rc)
{
	if (rc != CAIRN_CONTINUED) {
		char id[24];
		log_kv(ctx->env->log, LOG_WARN,
		       "workflow did not return CAIRN_CONTINUED after cairn_continue_as_new", "run",
		       db_i64(id, ctx->job->run_id), "workflow", ctx->job->workflow, NULL);
	}
	finish(c, RUN_COMPLETED, NULL);
	c->next_input = ctx->next_input;
	c->next_id = ctx->next_id;
	ctx->next_input = NULL;
	atomic_fetch_add(&ctx->env->m->runs_continued, 1);
}

/* The final commit of an execution that returned rc. */
static void conclude(cairn_ctx *ctx, commit *c, int rc, const cJSON *output)
{
	const exec_env *env = ctx->env;
	job *j = ctx->job;
	if (ctx->suspended) {
		if (rc != CAIRN_SUSPENDED) {
			char id[24];
			log_kv(env->log, LOG_WARN,
			       "workflow did not return CAIRN_SUSPENDED after a durable call "
			       "suspended it",
			       "run", db_i64(id, j->run_id), "workflow", j->workflow, NULL);
		}
		c->outcome = COMMIT_SUSPEND;
		c->status = ctx->wait_as;
		c->at_ms = ctx->wake_ms;
	} else if (ctx->next_input && !ctx->fatal) {
		continue_as_new(ctx, c, rc);
	} else if (rc == CAIRN_ESTOP || ctx->fatal == CAIRN_ESTOP ||
	           (rc != CAIRN_OK && rc != CAIRN_CANCELLED && !ctx->job->cancel_requested &&
	            stop_now(ctx))) {
		/* Hand over: keep what is journaled. A workflow that gave up because
		 * the worker is stopping has not failed: it resumes elsewhere. */
		c->outcome = COMMIT_JOURNAL;
	} else if (rc == CAIRN_OK) {
		char *text = print_json(output);
		buf msg = BUF_INIT;
		if (text && check_made(env, "workflow output", text, &msg) == 0) {
			finish(c, RUN_COMPLETED, NULL);
			c->output = text;
			buf_free(&msg);
			return;
		}
		finish(c, RUN_FAILED,
		       text && !msg.oom ? buf_str(&msg) : "out of memory printing the output");
		free(text);
		buf_free(&msg);
	} else if (rc == CAIRN_CANCELLED) {
		finish(c, RUN_CANCELLED, "cancelled");
	} else {
		const char *why = ctx->err.len ? buf_str(&ctx->err) : cairn_strstatus(rc);
		cairn_retry_policy pol = backoff_policy(&ctx->def->opts.retry);
		if (rc == CAIRN_ERETRY && j->attempt < j->max_attempts) {
			/* Start over from the first durable call that did not settle,
			 * or from where this execution stopped making calls. */
			c->retry_from =
			    ctx->first_unsettled < ctx->seq ? ctx->first_unsettled : ctx->seq;
			commit_truncate(c, c->retry_from);
			c->outcome = COMMIT_RETRY;
			c->attempt = j->attempt + 1;
			c->error = strdup(why);
			c->at_ms = ctx_now(ctx) +
			           backoff_ms(&pol, j->attempt, randombytes_uniform(1000000) / 1e6);
			return;
		}
		/* The attempt count is on the run; name it when it ran out. */
		buf msg = BUF_INIT;
		buf_puts(&msg, why);
		if (rc == CAIRN_ERETRY)
			buf_printf(&msg, " (run attempt %d of %d)", j->attempt, j->max_attempts);
		finish(c, RUN_FAILED, buf_str(&msg));
		buf_free(&msg);
	}
}

/*
 * What the worker keeps of the journal for the run's next execution
 * (jcache.h): of a run that suspends, the cached entries and those that
 * came with the claim, settled and without a gap. The rows this execution
 * wrote come back with the next claim, which reads their stored size. A
 * run that ends, retries or leaves needs none of it.
 */
static void cache_journal(cairn_ctx *ctx, const commit *c)
{
	job *j = ctx->job;
	if (!c || c->outcome != COMMIT_SUSPEND || ctx->fatal) {
		jcache_run_free(j->jc);
		j->jc = NULL;
		return;
	}
	if (jcache_run_extend(&j->jc, j->run_id, j->journal_cuts, &ctx->jr) < 0)
		j->jc = NULL; /* the next claim loads it whole */
}

/*
 * An execution that loaded a journal this long (or wrote as many rows)
 * gives the memory it freed back to the system as it ends (and one that
 * starts children, every TRIM_AFTER_ENTRIES of them): glibc keeps freed
 * small blocks in the thread's arena, so the worker's RSS stayed at the
 * peak of the largest replay (a parent of 100,000 children: about 400 MB,
 * once).
 */
void exec_give_back_memory(int entries)
{
#ifdef __GLIBC__
	if (entries >= TRIM_AFTER_ENTRIES)
		malloc_trim(0);
#else
	(void)entries;
#endif
}

commit *exec_job(const exec_env *env, job *j)
{
	commit *c;
	const workflow_def *def = registry_workflow(env->reg, j->workflow);
	j->mx = def && def->mx ? def->mx : metrics_other(env->m);
	if (run_status_finished(j->status)) {
		if ((c = job_commit(j)))
			c->outcome = COMMIT_DISCARD; /* a late message for a finished run */
		return c;
	}
	if (env->tracer) {
		/* Sampled unless the traceparent it was given says not. */
		trace_run(&j->trace, j->run_id, j->created_us, j->traceparent, 1);
		if ((j->traced = j->trace.flags & 1)) {
			trace_random_id(j->exec_span);
			j->exec_start_ns = trace_now_ns();
		}
	}
	if (j->claims >= env->poison_after)
		return (c = job_commit(j)) ? poisoned(env, j, c) : NULL;
	if (!def)
		return (c = job_commit(j)) ? unknown_workflow(env, j, c) : NULL;
	cairn_ctx ctx = {.env = env,
	                 .job = j,
	                 .def = def,
	                 .first_unsettled = INT_MAX,
	                 .trace_ready = env->tracer != NULL};
	cJSON *input = NULL, *output = NULL;
	int entries;
	char key[SEAL_ID_MAX + 1] = "";
	int rc = load(&ctx, &input, key);
	if (rc == SEAL_NOKEY) {
		if ((c = job_commit(j)))
			locked(env, j, c, buf_str(&ctx.err), key);
		goto out;
	}
	if (rc < 0)
		rc = ctx.fatal = CAIRN_EFAIL;
	else if (j->cancel_requested && ctx.jr.n == 0 && !j->jc)
		rc = CAIRN_CANCELLED;
	else
		rc = def->fn(&ctx, input, &output);
	metrics_run(j->mx, METRICS_RUNS_STARTED);
	atomic_fetch_add(&env->m->replayed_entries, (uint64_t)ctx.replayed);
	/* The rows this execution has not flushed open its final commit. */
	c = ctx.pending ? ctx.pending : job_commit(j);
	if (c) {
		conclude(&ctx, c, rc, output);
		if (c->outcome == COMMIT_JOURNAL && !c->nrows && !c->nsig)
			c->outcome = COMMIT_UNCLAIM; /* handing over with nothing new */
	}
	cache_journal(&ctx, c);
out:
	/* What it loaded, or the rows it wrote (a parent's first execution
	 * that starts 100,000 children loads nothing); not what it replayed
	 * from the cache: a long run would trim at every wake. */
	entries = ctx.jr.n + ctx.sigs.n + ctx.more.n;
	entries = entries > ctx.rows_made ? entries : ctx.rows_made;
	cJSON_Delete(output);
	cJSON_Delete(input);
	cJSON_Delete(ctx.keep);
	free(ctx.next_input);
	journal_free(&ctx.jr);
	signals_free(&ctx.sigs);
	signals_free(&ctx.more);
	idmap_free(&ctx.kids);
	exec_ids_free(&ctx.ids);
	buf_free(&ctx.err);
	exec_give_back_memory(entries);
	return c;
}
