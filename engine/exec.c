/*
 * exec.c - runs a workflow function with replay (DESIGN section 5). The
 * journal arrives with the job; each durable call takes the next sequence
 * number and returns the journaled result if there is one (a different name
 * or kind at that position is a non-determinism error). New results are
 * collected in a pending commit that is flushed, through the group committer
 * and fenced, before any step function runs and when the execution ends, so
 * no side effect ever follows an unjournaled result.
 *
 * Owns: the cairn_ctx of one execution (one executor thread).
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "dispatch.h"
#include "parse.h"

struct cairn_ctx {
	cairn_worker *w;
	job *job;
	const workflow_def *def;
	cJSON *journal, *signals;
	cJSON **by_seq; /* journal entries indexed by seq (NULL: none) */
	int njournal;
	int seq;
	cJSON *keep; /* owns values handed to the workflow */
	commit *pending;
	buf err;
	int fatal;                  /* a sticky error (non-determinism, lost fence) */
	const char *suspend_status; /* sleeping or waiting once suspended */
	int64_t wake_ms;            /* a new wake message is needed at this time */
};

/* The database clock: read at claim, advanced by the monotonic clock. */
static int64_t ctx_now(const cairn_ctx *ctx)
{
	return ctx->job->db_now_ms + (worker_now_ms() - ctx->job->mono_at_load);
}

void commit_free(commit *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->nrows; i++) {
		free(c->rows[i].name);
		free(c->rows[i].output);
		free(c->rows[i].error);
	}
	free(c->rows);
	free(c->sig_ids);
	free(c->sig_seqs);
	free(c->output);
	free(c->error);
	free(c);
}

static commit *pending(cairn_ctx *ctx)
{
	if (!ctx->pending) {
		ctx->pending = calloc(1, sizeof *ctx->pending);
		if (ctx->pending)
			ctx->pending->job = ctx->job;
	}
	return ctx->pending;
}

/* Adds a journal row (copying its strings); -1 on out of memory. */
static int add_row(cairn_ctx *ctx, const jrow *r)
{
	commit *c = pending(ctx);
	if (!c)
		return -1;
	if (c->nrows == c->caprows) {
		int cap = c->caprows ? c->caprows * 2 : 4;
		jrow *g = realloc(c->rows, (size_t)cap * sizeof *g);
		if (!g)
			return -1;
		c->rows = g;
		c->caprows = cap;
	}
	jrow *d = &c->rows[c->nrows++];
	*d = *r;
	d->name = strdup(r->name);
	d->output = r->output ? strdup(r->output) : NULL;
	d->error = r->error ? strdup(r->error) : NULL;
	return 0;
}

static int add_signal(cairn_ctx *ctx, int64_t id, int seq)
{
	commit *c = pending(ctx);
	if (!c)
		return -1;
	if (c->nsig == c->capsig) {
		int cap = c->capsig ? c->capsig * 2 : 4;
		int64_t *ids = realloc(c->sig_ids, (size_t)cap * sizeof *ids);
		if (ids)
			c->sig_ids = ids;
		int *seqs = realloc(c->sig_seqs, (size_t)cap * sizeof *seqs);
		if (seqs)
			c->sig_seqs = seqs;
		if (!ids || !seqs)
			return -1;
		c->capsig = cap;
	}
	c->sig_ids[c->nsig] = id;
	c->sig_seqs[c->nsig++] = seq;
	return 0;
}

/* Writes the pending rows and waits for their commit; CAIRN_ESTOP if fenced out. */
static int flush(cairn_ctx *ctx)
{
	commit *c = ctx->pending;
	if (!c)
		return CAIRN_OK;
	ctx->pending = NULL;
	int ok = dispatch_commit_wait(ctx->w, c);
	if (ok)
		if (c->cancel_requested)
			atomic_store(&ctx->job->cancel_requested, 1);
	commit_free(c);
	if (!ok) {
		ctx->fatal = CAIRN_ESTOP;
		return CAIRN_ESTOP;
	}
	return CAIRN_OK;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
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

static cJSON *keep_copy(cairn_ctx *ctx, const cJSON *v)
{
	return keep(ctx, v ? cJSON_Duplicate(v, 1) : NULL);
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

static int stop_now(const cairn_ctx *ctx)
{
	return dispatch_stopping(ctx->w) ||
	       worker_epoch(ctx->w, ctx->job->group, ctx->job->shard) != ctx->job->epoch;
}

int cairn_should_stop(const cairn_ctx *ctx)
{
	return ctx->job->cancel_requested || stop_now(ctx);
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
static int next_entry(cairn_ctx *ctx, const char *name, const char *kind, cJSON **entry, int *seq)
{
	*entry = NULL;
	if (ctx->suspend_status)
		return CAIRN_SUSPENDED; /* the workflow went on after a suspension */
	if (ctx->fatal)
		return ctx->fatal;
	char err[PARSE_ERR_MAX];
	if (!name || parse_check_name("durable call name", name, err) < 0) {
		buf_reset(&ctx->err);
		buf_printf(&ctx->err, "%s %s", kind, name ? err : "name is NULL");
		return ctx->fatal = CAIRN_EFAIL;
	}
	*seq = ctx->seq++;
	if (*seq >= ctx->njournal || !ctx->by_seq[*seq])
		return CAIRN_OK;
	cJSON *e = ctx->by_seq[*seq];
	const char *en = jstr(e, "name"), *ek = jstr(e, "kind");
	if (!en || !ek || strcmp(en, name) != 0 || strcmp(ek, kind) != 0) {
		buf_reset(&ctx->err);
		buf_printf(
		    &ctx->err,
		    "non-determinism at journal position %d: the journal has %s \"%s\" but the "
		    "workflow now calls %s \"%s\"",
		    *seq, ek ? ek : "?", en ? en : "?", kind, name);
		return ctx->fatal = CAIRN_ENONDET;
	}
	*entry = e;
	return CAIRN_OK;
}

static int suspend(cairn_ctx *ctx, const char *status, int64_t wake_ms)
{
	ctx->suspend_status = status;
	if (wake_ms && (!ctx->wake_ms || wake_ms < ctx->wake_ms))
		ctx->wake_ms = wake_ms;
	return CAIRN_SUSPENDED;
}

static void observe_step(cairn_worker *w, int64_t us)
{
	atomic_fetch_add(&w->m.step_count, 1);
	atomic_fetch_add(&w->m.step_sum_us, (uint64_t)us);
	for (int i = 0; i < STEP_BUCKETS; i++)
		if ((double)us / 1e6 <= WORKER_STEP_BOUNDS_S[i])
			atomic_fetch_add(&w->m.step_buckets[i], 1);
}

static char *print_json(const cJSON *v)
{
	return v ? cJSON_PrintUnformatted(v) : strdup("null");
}

int cairn_step_retry(cairn_ctx *ctx, const char *name, const cairn_retry_policy *policy,
                     cairn_step_fn fn, void *arg, cJSON **result)
{
	if (result)
		*result = NULL;
	cJSON *e;
	int seq, rc = next_entry(ctx, name, "step", &e, &seq);
	if (rc)
		return rc;
	cairn_retry_policy p = backoff_policy(policy);
	int attempts = 0;
	if (e) {
		const char *st = jstr(e, "status");
		if (st && strcmp(st, "completed") == 0) {
			cJSON *v = keep_copy(ctx, cJSON_GetObjectItemCaseSensitive(e, "output"));
			if (result)
				*result = v;
			return CAIRN_OK;
		}
		if (st && strcmp(st, "failed") == 0) {
			const char *er = jstr(e, "error");
			buf_reset(&ctx->err);
			buf_puts(&ctx->err, er ? er : "step failed");
			return CAIRN_EFAIL;
		}
		attempts = (int)jnum(e, "attempts");
		if ((rc = interrupt(ctx)))
			return rc;
		if (jnum(e, "wake_at") > ctx_now(ctx))
			return suspend(ctx, "sleeping", 0);
	}
	/* The flush also brings news of a cancellation: look again after it. */
	if ((rc = interrupt(ctx)) || (rc = flush(ctx)) || (rc = interrupt(ctx)))
		return rc;
	attempts++;
	int64_t t0 = worker_unix_ms(), m0 = worker_now_ms();
	buf_reset(&ctx->err);
	cJSON *out = NULL;
	int src = fn ? fn(ctx, arg, &out) : cairn_fail(ctx, "step function is NULL");
	int64_t took_ms = worker_now_ms() - m0;
	observe_step(ctx->w, took_ms * 1000);
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = "step",
	            .attempts = attempts,
	            .started_ms = t0,
	            .finished_ms = worker_unix_ms()};
	char *text = NULL;
	if (src == CAIRN_OK) {
		text = print_json(out);
		if (!text)
			src = cairn_fail(ctx, "step %s: out of memory printing its result", name);
		else if (strlen(text) > ctx->w->cfg.max_payload_bytes)
			src = cairn_fail(
			    ctx,
			    "step %s: result is %zu bytes; the limit (CAIRN_MAX_PAYLOAD) is %zu",
			    name, strlen(text), ctx->w->cfg.max_payload_bytes);
	}
	if (src == CAIRN_OK) {
		row.status = "completed";
		row.output = text;
		rc = add_row(ctx, &row);
		free(text);
		cJSON *v = keep(ctx, out);
		if (result)
			*result = v;
		return rc ? cairn_fail(ctx, "out of memory") : CAIRN_OK;
	}
	free(text);
	cJSON_Delete(out);
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
		row.status = "failed";
		rc = add_row(ctx, &row);
		buf_free(&msg);
		return rc ? cairn_fail(ctx, "out of memory") : CAIRN_CANCELLED;
	}
	if (src == CAIRN_ERETRY && attempts < p.max_attempts) {
		row.status = "retrying";
		row.wake_ms =
		    ctx_now(ctx) + backoff_ms(&p, attempts, randombytes_uniform(1000000) / 1e6);
		rc = add_row(ctx, &row);
		buf_free(&msg);
		return rc ? cairn_fail(ctx, "out of memory")
		          : suspend(ctx, "sleeping", row.wake_ms);
	}
	row.status = "failed";
	add_row(ctx, &row);
	buf_reset(&ctx->err);
	buf_puts(&ctx->err, buf_str(&msg));
	if (src == CAIRN_ERETRY)
		buf_printf(&ctx->err, " (gave up after %d attempts)", attempts);
	buf_free(&msg);
	return CAIRN_EFAIL;
}

int cairn_step(cairn_ctx *ctx, const char *name, cairn_step_fn fn, void *arg, cJSON **result)
{
	return cairn_step_retry(ctx, name, NULL, fn, arg, result);
}

int cairn_sleep_until(cairn_ctx *ctx, const char *name, int64_t until_ms)
{
	cJSON *e;
	int seq, rc = next_entry(ctx, name, "sleep", &e, &seq);
	if (rc)
		return rc;
	const char *st = e ? jstr(e, "status") : NULL;
	if (st && strcmp(st, "completed") == 0)
		return CAIRN_OK;
	if ((rc = interrupt(ctx)))
		return rc;
	int64_t now = ctx_now(ctx), wake = e ? jnum(e, "wake_at") : until_ms;
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = "sleep",
	            .attempts = 1,
	            .started_ms = e ? jnum(e, "started_at") : worker_unix_ms(),
	            .wake_ms = wake};
	if (wake <= now) {
		row.status = "completed";
		row.finished_ms = worker_unix_ms();
		return add_row(ctx, &row) ? cairn_fail(ctx, "out of memory") : CAIRN_OK;
	}
	if (e)
		return suspend(ctx, "sleeping", 0);
	row.status = "waiting";
	return add_row(ctx, &row) ? cairn_fail(ctx, "out of memory")
	                          : suspend(ctx, "sleeping", wake);
}

int cairn_sleep(cairn_ctx *ctx, const char *name, int64_t duration_ms)
{
	return cairn_sleep_until(ctx, name, ctx_now(ctx) + (duration_ms > 0 ? duration_ms : 0));
}

int cairn_await_signal(cairn_ctx *ctx, const char *name, int64_t timeout_ms, cJSON **payload)
{
	if (payload)
		*payload = NULL;
	cJSON *e;
	int seq, rc = next_entry(ctx, name, "signal", &e, &seq);
	if (rc)
		return rc;
	const char *st = e ? jstr(e, "status") : NULL;
	if (st && strcmp(st, "completed") == 0) {
		if (jstr(e, "error"))
			return CAIRN_ETIMEOUT;
		cJSON *v = keep_copy(ctx, cJSON_GetObjectItemCaseSensitive(e, "output"));
		if (payload)
			*payload = v;
		return CAIRN_OK;
	}
	if ((rc = interrupt(ctx)))
		return rc;
	int64_t now = ctx_now(ctx);
	int64_t deadline = e ? jnum(e, "wake_at") : timeout_ms >= 0 ? now + timeout_ms : 0;
	jrow row = {.seq = seq,
	            .name = (char *)name,
	            .kind = "signal",
	            .attempts = 1,
	            .started_ms = e ? jnum(e, "started_at") : worker_unix_ms(),
	            .wake_ms = deadline};
	/* The oldest buffered signal of this name, if one came. */
	cJSON *sig = NULL, *it;
	int idx = 0, i = 0;
	cJSON_ArrayForEach(it, ctx->signals)
	{
		const char *sn = jstr(it, "name");
		if (sn && strcmp(sn, name) == 0 && (!sig || jnum(it, "id") < jnum(sig, "id"))) {
			sig = it;
			idx = i;
		}
		i++;
	}
	if (sig) {
		row.status = "completed";
		row.finished_ms = worker_unix_ms();
		const cJSON *pl = cJSON_GetObjectItemCaseSensitive(sig, "payload");
		row.output = print_json(pl);
		rc = add_row(ctx, &row) || add_signal(ctx, jnum(sig, "id"), seq);
		free(row.output);
		cJSON *v = keep_copy(ctx, pl);
		cJSON_DeleteItemFromArray(ctx->signals, idx);
		if (payload)
			*payload = v;
		return rc ? cairn_fail(ctx, "out of memory") : CAIRN_OK;
	}
	if (deadline && deadline <= now) {
		row.status = "completed";
		row.finished_ms = worker_unix_ms();
		row.error = "timed out";
		return add_row(ctx, &row) ? cairn_fail(ctx, "out of memory") : CAIRN_ETIMEOUT;
	}
	if (e)
		return suspend(ctx, "waiting", 0);
	row.status = "waiting";
	return add_row(ctx, &row) ? cairn_fail(ctx, "out of memory")
	                          : suspend(ctx, "waiting", deadline);
}

/* cairn_now and cairn_random: a value made once and journaled as text. */
static int journaled_value(cairn_ctx *ctx, const char *kind, uint64_t fresh, uint64_t *out)
{
	cJSON *e;
	int seq, rc = next_entry(ctx, kind, kind, &e, &seq);
	if (rc)
		return rc;
	if (e) {
		const char *v = jstr(e, "output");
		*out = v ? strtoull(v, NULL, 10) : 0;
		return CAIRN_OK;
	}
	if ((rc = interrupt(ctx)))
		return rc;
	char text[32];
	snprintf(text, sizeof text, "\"%" PRIu64 "\"", fresh);
	int64_t now = worker_unix_ms();
	jrow row = {.seq = seq,
	            .name = (char *)kind,
	            .kind = kind,
	            .status = "completed",
	            .output = text,
	            .attempts = 1,
	            .started_ms = now,
	            .finished_ms = now};
	*out = fresh;
	return add_row(ctx, &row) ? cairn_fail(ctx, "out of memory") : CAIRN_OK;
}

int cairn_now(cairn_ctx *ctx, int64_t *unix_ms)
{
	uint64_t v = 0;
	int rc = journaled_value(ctx, "now", (uint64_t)ctx_now(ctx), &v);
	*unix_ms = (int64_t)v;
	return rc;
}

int cairn_random(cairn_ctx *ctx, uint64_t *value)
{
	uint64_t fresh;
	randombytes_buf(&fresh, sizeof fresh);
	return journaled_value(ctx, "random", fresh, value);
}

/* --------------------------------------------------------------- the run */

static int load(cairn_ctx *ctx)
{
	job *j = ctx->job;
	ctx->keep = cJSON_CreateArray();
	ctx->journal = j->journal ? cJSON_Parse(j->journal) : cJSON_CreateArray();
	ctx->signals = j->signals ? cJSON_Parse(j->signals) : cJSON_CreateArray();
	if (!ctx->keep || !cJSON_IsArray(ctx->journal) || !cJSON_IsArray(ctx->signals))
		return -1;
	int max = -1;
	cJSON *e;
	cJSON_ArrayForEach(e, ctx->journal)
	{
		int s = (int)jnum(e, "seq");
		if (s > max)
			max = s;
	}
	ctx->njournal = max + 1;
	ctx->by_seq = calloc((size_t)ctx->njournal + 1, sizeof *ctx->by_seq);
	if (!ctx->by_seq)
		return -1;
	cJSON_ArrayForEach(e, ctx->journal)
	{
		int s = (int)jnum(e, "seq");
		if (s >= 0)
			ctx->by_seq[s] = e;
	}
	return 0;
}

static void finish(commit *c, const char *status, const char *error)
{
	c->run_update = 1;
	c->run_status = status;
	c->finished = 1;
	c->delete_all = 1;
	c->error = error ? strdup(error) : NULL;
}

/* Drops the not-completed rows of this execution (a run retry starts them over). */
static void drop_unfinished_rows(commit *c)
{
	int k = 0;
	for (int i = 0; i < c->nrows; i++) {
		if (strcmp(c->rows[i].status, "completed") == 0) {
			c->rows[k++] = c->rows[i];
			continue;
		}
		free(c->rows[i].name);
		free(c->rows[i].output);
		free(c->rows[i].error);
	}
	c->nrows = k;
}

/* A message for a workflow nobody here registered: wait for one, then fail. */
static commit *unknown_workflow(cairn_worker *w, job *j, commit *c)
{
	int64_t age = j->db_now_ms - j->created_ms;
	if (age >= w->cfg.unknown_workflow_timeout_ms) {
		buf msg = BUF_INIT;
		buf_printf(
		    &msg,
		    "workflow \"%s\" is not registered on any worker that owned this run's shard "
		    "within CAIRN_UNKNOWN_WORKFLOW_TIMEOUT (%" PRId64 " ms)",
		    j->workflow, w->cfg.unknown_workflow_timeout_ms);
		finish(c, "failed", buf_str(&msg));
		buf_free(&msg);
		atomic_fetch_add(&w->m.runs_failed, 1);
		log_kv(&w->log, LOG_WARN, "failed a run of an unknown workflow", "workflow",
		       j->workflow, NULL);
		return c;
	}
	int64_t left = w->cfg.unknown_workflow_timeout_ms - age;
	c->defer_at_ms = j->db_now_ms + (left < 5000 ? left : 5000);
	c->run_update = 1;
	c->run_status = "pending";
	buf msg = BUF_INIT;
	buf_printf(&msg, "waiting for a worker that has workflow \"%s\" registered", j->workflow);
	c->error = buf_detach(&msg);
	return c;
}

/* The final commit of an execution: the committer ends the job with it. */
static commit *final_commit(commit *c, job *j)
{
	if (!c)
		c = calloc(1, sizeof *c);
	if (c) {
		c->job = j;
		c->async = 1;
		c->attempt = j->attempt;
	}
	return c;
}

commit *exec_job(cairn_worker *w, job *j)
{
	commit *c;
	if (strcmp(j->status, "completed") == 0 || strcmp(j->status, "failed") == 0 ||
	    strcmp(j->status, "cancelled") == 0) {
		if ((c = final_commit(NULL, j)))
			c->delete_claimed = 1; /* a late message for a finished run */
		return c;
	}
	const workflow_def *def = worker_flow(w, j->workflow);
	if (!def)
		return (c = final_commit(NULL, j)) ? unknown_workflow(w, j, c) : NULL;
	cairn_ctx ctx = {.w = w, .job = j, .def = def};
	cJSON *input = j->input ? cJSON_Parse(j->input) : NULL, *output = NULL;
	int rc;
	if (load(&ctx) < 0)
		rc = cairn_fail(&ctx, "cannot load the run's journal (out of memory or corrupt)");
	else if (j->cancel_requested && ctx.njournal == 0)
		rc = CAIRN_CANCELLED;
	else
		rc = def->fn(&ctx, input, &output);
	atomic_fetch_add(&w->m.runs_started, 1);
	/* The rows this execution has not flushed open its final commit. */
	c = final_commit(ctx.pending, j);
	if (!c) {
		/* Out of memory: nothing is written; the messages bring it back. */
	} else if (ctx.suspend_status) {
		if (rc != CAIRN_SUSPENDED)
			log_kv(&w->log, LOG_WARN,
			       "workflow did not return CAIRN_SUSPENDED after a durable call "
			       "suspended it",
			       "workflow", j->workflow, NULL);
		c->run_update = 1;
		c->run_status = ctx.suspend_status;
		c->delete_claimed = 1;
		if (ctx.wake_ms) {
			c->new_kind = "wake";
			c->new_at_ms = ctx.wake_ms;
		}
	} else if (rc == CAIRN_ESTOP || ctx.fatal == CAIRN_ESTOP) {
		/* Handing over: keep what is journaled, leave the messages. */
		if (!c->nrows && !c->nsig) {
			commit_free(c);
			c = NULL;
		}
	} else if (rc == CAIRN_OK) {
		char *text = print_json(output);
		if (text && strlen(text) <= w->cfg.max_payload_bytes) {
			finish(c, "completed", NULL);
			c->output = text;
			atomic_fetch_add(&w->m.runs_completed, 1);
		} else {
			buf msg = BUF_INIT;
			buf_printf(
			    &msg,
			    "workflow output is %zu bytes; the limit (CAIRN_MAX_PAYLOAD) is %zu",
			    text ? strlen(text) : 0, w->cfg.max_payload_bytes);
			finish(c, "failed", buf_str(&msg));
			buf_free(&msg);
			free(text);
			atomic_fetch_add(&w->m.runs_failed, 1);
		}
	} else if (rc == CAIRN_CANCELLED) {
		finish(c, "cancelled", "cancelled");
	} else {
		const char *why = ctx.err.len ? buf_str(&ctx.err) : cairn_strstatus(rc);
		cairn_retry_policy pol = backoff_policy(&def->opts.retry);
		if (rc == CAIRN_ERETRY && j->attempt < j->max_attempts) {
			drop_unfinished_rows(c);
			c->run_update = 1;
			c->run_status = "pending";
			c->attempt = j->attempt + 1;
			c->error = strdup(why);
			c->reset_steps = 1;
			c->delete_claimed = 1;
			c->new_kind = "start";
			c->new_at_ms =
			    ctx_now(&ctx) +
			    backoff_ms(&pol, j->attempt, randombytes_uniform(1000000) / 1e6);
		} else {
			/* The attempt count is on the run; name it when it ran out. */
			buf msg = BUF_INIT;
			buf_puts(&msg, why);
			if (rc == CAIRN_ERETRY)
				buf_printf(&msg, " (run attempt %d of %d)", j->attempt,
				           j->max_attempts);
			finish(c, "failed", buf_str(&msg));
			buf_free(&msg);
			atomic_fetch_add(&w->m.runs_failed, 1);
		}
	}
	cJSON_Delete(output);
	cJSON_Delete(input);
	cJSON_Delete(ctx.keep);
	cJSON_Delete(ctx.journal);
	cJSON_Delete(ctx.signals);
	free(ctx.by_seq);
	buf_free(&ctx.err);
	return c;
}

int cairn_workflow_register(cairn_worker *w, const char *name, cairn_workflow_fn fn,
                            const cairn_workflow_opts *opts)
{
	char err[PARSE_ERR_MAX];
	buf_reset(&w->err);
	if (!fn || parse_check_name("workflow name", name, err) < 0) {
		buf_puts(&w->err, fn ? err : "workflow function is NULL");
		return CAIRN_EINVAL;
	}
	if (worker_flow(w, name)) {
		buf_printf(&w->err, "workflow %s is registered twice", name);
		return CAIRN_EINVAL;
	}
	workflow_def *g = realloc(w->flows, (size_t)(w->nflows + 1) * sizeof *g);
	if (!g)
		return CAIRN_ENOMEM;
	w->flows = g;
	workflow_def *d = &w->flows[w->nflows++];
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	d->fn = fn;
	if (opts)
		d->opts = *opts;
	return CAIRN_OK;
}

const workflow_def *worker_flow(const cairn_worker *w, const char *name)
{
	for (int i = 0; i < w->nflows; i++)
		if (strcmp(w->flows[i].name, name) == 0)
			return &w->flows[i];
	return NULL;
}
