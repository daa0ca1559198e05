/*
 * dispatch.c - moves runs from the messages table to the executors and their
 * results back (DESIGN section 5):
 *
 *   poller     one thread and connection: LISTEN cairn_wake, claim due
 *              messages of the shards this runner owns (one statement that
 *              also marks the runs running and returns their journals),
 *              never a run already in flight, at most as many as the queue
 *              has room for; polling pauses while the queue is full.
 *   executors  CAIRN_CONCURRENCY threads running exec_job().
 *   committer  one thread and connection: gathers the writes of many runs
 *              and commits them in one fenced statement (group commit). A
 *              run leaves the in-flight set only after its final commit, and
 *              an executor continues after a step only once it is committed.
 *
 * Owns: those threads, their connections, the queue and the in-flight set.
 */
#include "dispatch.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "client.h"
#include "db.h"
#include "parse.h"
#include "pgarr.h"

#define COMMIT_MAX    512
#define SLOW_CLAIM_MS 20 /* a claim of one batch normally takes a few ms */

typedef struct flight {
	int64_t run_id;
	job *job; /* valid while the run is in flight */
	int group, shard;
	int64_t since_unix_ms;
	char workflow[NAME_MAX_BYTES + 1];
} flight;

struct dispatch {
	cairn_worker *w;
	pthread_t poller, committer, *execs;
	int nexec;
	int wake_fd;

	pthread_mutex_t mu;
	pthread_cond_t job_cv;    /* queue has a job, or stop */
	pthread_cond_t done_cv;   /* a job left the in-flight set, or a commit finished */
	pthread_cond_t commit_cv; /* the committer has work, or stop */
	job *qhead, *qtail;
	int qlen, qcap;
	flight *fl;
	int nfl, capfl;
	commit *chead, *ctail;
	int executing;
	int exec_stop, commit_stop;
	_Atomic int stopping;
	int clean; /* executions that reached a durable point while draining */
	worker_loop *loop;
};

int dispatch_stopping(cairn_worker *w)
{
	return w->dispatch && atomic_load(&w->dispatch->stopping);
}

static void wake_poller(struct dispatch *d)
{
	uint64_t one = 1;
	ssize_t n = write(d->wake_fd, &one, sizeof one);
	(void)n;
}

static void job_free(job *j)
{
	if (!j)
		return;
	free(j->workflow);
	free(j->status);
	free(j->input);
	free(j->journal);
	free(j->signals);
	free(j->msgs);
	free(j);
}

/* The run leaves the in-flight set; the poller may claim it again. Holds d->mu. */
static void job_done_locked(struct dispatch *d, job *j)
{
	for (int i = 0; i < d->nfl; i++)
		if (d->fl[i].run_id == j->run_id) {
			d->fl[i] = d->fl[--d->nfl];
			break;
		}
	atomic_fetch_sub(&d->w->own[j->group].busy[j->shard], 1);
	job_free(j);
	pthread_cond_broadcast(&d->done_cv);
}

static void job_done(struct dispatch *d, job *j)
{
	pthread_mutex_lock(&d->mu);
	job_done_locked(d, j);
	pthread_mutex_unlock(&d->mu);
	wake_poller(d);
}

/* ------------------------------------------------------------- committer */

static void commit_enqueue(struct dispatch *d, commit *c)
{
	pthread_mutex_lock(&d->mu);
	c->next = NULL;
	if (d->ctail)
		d->ctail->next = c;
	else
		d->chead = c;
	d->ctail = c;
	pthread_cond_signal(&d->commit_cv);
	pthread_mutex_unlock(&d->mu);
}

int dispatch_commit_wait(cairn_worker *w, commit *c)
{
	struct dispatch *d = w->dispatch;
	c->async = 0;
	commit_enqueue(d, c);
	pthread_mutex_lock(&d->mu);
	while (!c->done)
		pthread_cond_wait(&d->done_cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
	return c->ok;
}

static const char SQL_COMMIT[] =
    "WITH b AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::int[], $5::bigint[]) "
    "           AS b(run_id, g, s, e)), "
    "ok AS (SELECT b.run_id, b.g, b.s FROM b JOIN cairn.shard_leases l "
    "       ON l.shard_group = b.g AND l.shard = b.s AND l.owner = $1 AND l.epoch = b.e), "
    "ins AS (INSERT INTO cairn.steps (run_id, seq, name, kind, status, output, error, attempts, "
    "                                 wake_at, started_at, finished_at) "
    "  SELECT t.r, t.q, t.n, t.k, t.st, t.o::jsonb, t.er, t.a, to_timestamp(t.w / 1000.0), "
    "         to_timestamp(t.sa / 1000.0), to_timestamp(t.fa / 1000.0) "
    "  FROM unnest($6::bigint[], $7::int[], $8::text[], $9::text[], $10::text[], $11::text[], "
    "              $12::text[], $13::int[], $14::bigint[], $15::bigint[], $16::bigint[]) "
    "       AS t(r, q, n, k, st, o, er, a, w, sa, fa) "
    "  WHERE t.r IN (SELECT run_id FROM ok) "
    "  ON CONFLICT (run_id, seq) DO UPDATE SET status = excluded.status, output = excluded.output, "
    "    error = excluded.error, attempts = excluded.attempts, wake_at = excluded.wake_at, "
    "    finished_at = excluded.finished_at), "
    "upd AS (UPDATE cairn.runs r SET status = u.st, output = u.o::jsonb, error = u.er, "
    "    attempt = u.a, updated_at = now(), finished_at = CASE WHEN u.fin THEN now() END "
    "  FROM unnest($17::bigint[], $18::text[], $19::text[], $20::text[], $21::int[], $22::bool[]) "
    "       AS u(id, st, o, er, a, fin) "
    "  WHERE r.id = u.id AND u.id IN (SELECT run_id FROM ok) RETURNING r.id, u.fin), "
    "delm AS (DELETE FROM cairn.messages m WHERE (m.id = ANY ($23::bigint[]) "
    "    OR m.run_id = ANY ($24::bigint[])) AND m.run_id IN (SELECT run_id FROM ok)), "
    "newm AS (INSERT INTO cairn.messages (run_id, shard_group, shard, kind, deliver_at) "
    "  SELECT ok.run_id, ok.g, ok.s, n.k, to_timestamp(n.at / 1000.0) "
    "  FROM unnest($25::bigint[], $26::text[], $27::bigint[]) AS n(r, k, at) "
    "  JOIN ok ON ok.run_id = n.r), "
    "sig AS (UPDATE cairn.signals g SET consumed_by_seq = x.q "
    "  FROM unnest($28::bigint[], $29::int[]) AS x(id, q) "
    "  WHERE g.id = x.id AND g.run_id IN (SELECT run_id FROM ok)), "
    "rst AS (DELETE FROM cairn.steps s WHERE s.run_id = ANY ($30::bigint[]) "
    "  AND s.status <> 'completed' AND s.run_id IN (SELECT run_id FROM ok) "
    "  AND (s.run_id, s.seq) NOT IN (SELECT * FROM unnest($6::bigint[], $7::int[]))), "
    "dfr AS (UPDATE cairn.messages m SET deliver_at = to_timestamp(x.at / 1000.0), "
    "    attempts = m.attempts + 1 FROM unnest($31::bigint[], $32::bigint[]) AS x(id, at) "
    "  WHERE m.id = x.id AND m.run_id IN (SELECT run_id FROM ok)), "
    "ntf AS (SELECT pg_notify('" CAIRN_DONE_CHANNEL "', id::text) FROM upd WHERE fin) "
    "SELECT ok.run_id, r.cancel_requested, (SELECT count(*) FROM ntf) "
    "FROM ok JOIN cairn.runs r ON r.id = ok.run_id";

#define NARR 31 /* $2..$32 */

static void add_ms(pgarr *a, int64_t ms)
{
	if (ms)
		pgarr_add_i64(a, ms);
	else
		pgarr_add(a, NULL);
}

/* Runs one group commit of the batch: 0; -2 when the statement failed on
 * the values themselves; -1 when it failed otherwise. */
static int commit_batch(cairn_worker *w, PGconn *conn, commit **batch, int n, buf *err)
{
	pgarr a[NARR];
	for (int i = 0; i < NARR; i++)
		a[i] = (pgarr)PGARR_INIT;
	for (int i = 0; i < n; i++) {
		commit *c = batch[i];
		job *j = c->job;
		pgarr_add_i64(&a[0], j->run_id);
		pgarr_add(&a[1], w->own[j->group].name);
		pgarr_add_i64(&a[2], j->shard);
		pgarr_add_i64(&a[3], j->epoch);
		for (int k = 0; k < c->nrows; k++) {
			jrow *r = &c->rows[k];
			pgarr_add_i64(&a[4], j->run_id);
			pgarr_add_i64(&a[5], r->seq);
			pgarr_add(&a[6], r->name);
			pgarr_add(&a[7], r->kind);
			pgarr_add(&a[8], r->status);
			pgarr_add(&a[9], r->output);
			pgarr_add(&a[10], r->error);
			pgarr_add_i64(&a[11], r->attempts);
			add_ms(&a[12], r->wake_ms);
			add_ms(&a[13], r->started_ms);
			add_ms(&a[14], r->finished_ms);
		}
		if (c->run_update) {
			pgarr_add_i64(&a[15], j->run_id);
			pgarr_add(&a[16], c->run_status);
			pgarr_add(&a[17], c->output);
			pgarr_add(&a[18], c->error);
			pgarr_add_i64(&a[19], c->attempt);
			pgarr_add(&a[20], c->finished ? "t" : "f");
		}
		if (c->delete_claimed)
			for (int k = 0; k < j->nmsgs; k++)
				pgarr_add_i64(&a[21], j->msgs[k]);
		if (c->delete_all)
			pgarr_add_i64(&a[22], j->run_id);
		if (c->new_kind) {
			pgarr_add_i64(&a[23], j->run_id);
			pgarr_add(&a[24], c->new_kind);
			pgarr_add_i64(&a[25], c->new_at_ms);
		}
		for (int k = 0; k < c->nsig; k++) {
			pgarr_add_i64(&a[26], c->sig_ids[k]);
			pgarr_add_i64(&a[27], c->sig_seqs[k]);
		}
		if (c->reset_steps)
			pgarr_add_i64(&a[28], j->run_id);
		if (c->defer_at_ms)
			for (int k = 0; k < j->nmsgs; k++) {
				pgarr_add_i64(&a[29], j->msgs[k]);
				pgarr_add_i64(&a[30], c->defer_at_ms);
			}
	}
	char me[24];
	const char *p[NARR + 1] = {db_i64(me, w->runner_id)};
	for (int i = 0; i < NARR; i++)
		p[i + 1] = pgarr_str(&a[i]);
	PGresult *r = PQexecPrepared(conn, "cairn_commit", NARR + 1, p, NULL, NULL, 0);
	int rc = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		buf_reset(err);
		buf_puts(err, PQresultErrorMessage(r));
		/* Data exceptions (22) and program limits (54) are the values'
		 * fault: the same writes would fail again. */
		const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		rc = st && (strncmp(st, "22", 2) == 0 || strncmp(st, "54", 2) == 0) ? -2 : -1;
	} else {
		for (int i = 0; i < n; i++)
			batch[i]->ok = 0;
		for (int row = 0; row < PQntuples(r); row++) {
			int64_t id = db_get_i64(r, row, 0);
			for (int i = 0; i < n; i++)
				if (batch[i]->job->run_id == id) {
					batch[i]->ok = 1;
					batch[i]->cancel_requested = db_get_bool(r, row, 1);
				}
		}
	}
	PQclear(r);
	for (int i = 0; i < NARR; i++)
		pgarr_free(&a[i]);
	return rc;
}

static PGconn *connect_prepared(cairn_worker *w, const char *app, const char *name, const char *sql,
                                buf *err)
{
	PGconn *c = db_connect(w->cfg.database_url, app, err);
	if (!c)
		return NULL;
	PGresult *r = PQprepare(c, name, sql, 0, NULL);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		buf_reset(err);
		buf_puts(err, PQresultErrorMessage(r));
		PQclear(r);
		PQfinish(c);
		return NULL;
	}
	PQclear(r);
	return c;
}

/*
 * The database refused a run's writes with the connection fine (invalid
 * UTF-8 in a step result, say): executing it again would redo its steps
 * forever, so the run fails with the database's message instead.
 */
static void fail_unstorable(cairn_worker *w, PGconn *conn, commit *c, buf *err)
{
	buf why = BUF_INIT;
	buf_printf(&why, "cannot store the run's results: %s", buf_str(err));
	while (why.len && (why.data[why.len - 1] == '\n'))
		why.data[--why.len] = '\0';
	log_kv(&w->log, LOG_ERROR, "a run's writes were refused; failing it", "error",
	       buf_str(&why), NULL);
	commit f = {.job = c->job,
	            .run_update = 1,
	            .run_status = "failed",
	            .error = (char *)buf_str(&why),
	            .attempt = c->job->attempt,
	            .finished = 1,
	            .delete_all = 1};
	commit *one = &f;
	c->ok = 0;
	if (commit_batch(w, conn, &one, 1, err) < 0)
		log_kv(&w->log, LOG_ERROR, "cannot fail the run either", "error", buf_str(err),
		       NULL);
	else
		atomic_fetch_add(&w->m.runs_failed, 1);
	c->cancel_requested = 0;
	buf_free(&why);
}

/* Ends the commits of a batch: wakes their executors or ends their jobs. */
static void settle(struct dispatch *d, commit **batch, int n)
{
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < n; i++) {
		commit *c = batch[i];
		c->done = 1;
		if (c->async) {
			if (!c->ok && c->run_update)
				log_kv(&d->w->log, LOG_WARN,
				       "final write refused by the fence: the shard moved", NULL);
			job_done_locked(d, c->job);
			commit_free(c);
		}
	}
	pthread_cond_broadcast(&d->done_cv);
	pthread_mutex_unlock(&d->mu);
	wake_poller(d);
}

static void *committer_main(void *arg)
{
	struct dispatch *d = arg;
	cairn_worker *w = d->w;
	PGconn *conn = NULL;
	buf err = BUF_INIT;
	commit *batch[COMMIT_MAX];
	int failures = 0;
	for (;;) {
		pthread_mutex_lock(&d->mu);
		while (!d->chead && !d->commit_stop)
			pthread_cond_wait(&d->commit_cv, &d->mu);
		if (!d->chead && d->commit_stop) {
			pthread_mutex_unlock(&d->mu);
			break;
		}
		int n = 0;
		while (d->chead && n < COMMIT_MAX) {
			batch[n++] = d->chead;
			d->chead = d->chead->next;
		}
		if (!d->chead)
			d->ctail = NULL;
		pthread_mutex_unlock(&d->mu);

		while (!conn) {
			conn = connect_prepared(w, "cairn-worker commit", "cairn_commit",
			                        SQL_COMMIT, &err);
			if (conn)
				break;
			log_kv(&w->log, LOG_WARN, "committer cannot connect; retrying", "error",
			       buf_str(&err), NULL);
			usleep((useconds_t)(worker_reconnect_ms(failures++) * 1000));
			if (atomic_load(&d->stopping) && failures > 3)
				break;
		}
		int rc = conn ? commit_batch(w, conn, batch, n, &err) : -1;
		if (rc < 0 && conn && db_ok(conn)) {
			/* One bad item must not sink the others: commit them one by one,
			 * and fail a run whose own writes the database refuses. */
			for (int i = 0; i < n; i++) {
				int one = n == 1 ? rc : commit_batch(w, conn, &batch[i], 1, &err);
				if (one == -2)
					fail_unstorable(w, conn, batch[i], &err);
				else if (one < 0) {
					log_kv(&w->log, LOG_WARN,
					       "commit failed; the run will be retried", "error",
					       buf_str(&err), NULL);
					batch[i]->ok = 0;
				}
			}
			rc = 0;
		} else if (rc < 0) {
			log_kv(&w->log, LOG_WARN, "commit failed; the runs will be retried",
			       "error", buf_str(&err), NULL);
			for (int i = 0; i < n; i++)
				batch[i]->ok = 0;
			if (conn && !db_ok(conn)) {
				PQfinish(conn);
				conn = NULL;
			}
		} else {
			failures = 0;
		}
		settle(d, batch, n);
	}
	PQfinish(conn);
	buf_free(&err);
	return NULL;
}

/* ------------------------------------------------------------- executors */

static void *executor_main(void *arg)
{
	struct dispatch *d = arg;
	cairn_worker *w = d->w;
	for (;;) {
		pthread_mutex_lock(&d->mu);
		while (!d->qhead && !d->exec_stop)
			pthread_cond_wait(&d->job_cv, &d->mu);
		job *j = d->qhead;
		if (!j) {
			pthread_mutex_unlock(&d->mu);
			break;
		}
		d->qhead = j->next;
		if (!d->qhead)
			d->qtail = NULL;
		d->qlen--;
		atomic_store(&w->m.queue_depth, d->qlen);
		int stale =
		    atomic_load(&d->stopping) || worker_epoch(w, j->group, j->shard) != j->epoch;
		if (!stale)
			d->executing++;
		pthread_mutex_unlock(&d->mu);
		wake_poller(d);
		if (stale) {
			job_done(d, j); /* not started: its messages stay for the next owner */
			continue;
		}
		commit *c = exec_job(w, j);
		pthread_mutex_lock(&d->mu);
		d->executing--;
		if (atomic_load(&d->stopping))
			d->clean++;
		pthread_mutex_unlock(&d->mu);
		if (c)
			commit_enqueue(d, c);
		else
			job_done(d, j);
	}
	return NULL;
}

/* ---------------------------------------------------------------- poller */

/* The ids of the runs in flight here, as an array literal. */
static void inflight_ids(struct dispatch *d, pgarr *out)
{
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < d->nfl; i++)
		pgarr_add_i64(out, d->fl[i].run_id);
	pthread_mutex_unlock(&d->mu);
}

/* The journal and the buffered signals come unordered (an ordered aggregate
 * costs a sort per run); exec.c indexes steps by seq and takes signals by id. */
static const char SQL_CLAIM[] =
    "WITH due AS (SELECT m.id, m.run_id, l.epoch FROM cairn.messages m "
    "  JOIN cairn.shard_leases l ON l.shard_group = m.shard_group AND l.shard = m.shard "
    "  WHERE l.owner = $1 AND m.deliver_at <= now() AND m.run_id <> ALL ($2::bigint[]) "
    "  ORDER BY m.deliver_at, m.id LIMIT $3), "
    "d AS (SELECT run_id, max(epoch) AS epoch, array_agg(id ORDER BY id) AS ids "
    "      FROM due GROUP BY run_id) "
    "UPDATE cairn.runs r SET "
    "  status = CASE WHEN r.status IN ('pending', 'sleeping', 'waiting') THEN 'running' ELSE "
    "r.status END, "
    "  attempt = CASE WHEN r.finished_at IS NULL THEN greatest(r.attempt, 1) ELSE r.attempt END, "
    "  started_at = CASE WHEN r.finished_at IS NULL THEN coalesce(r.started_at, now()) "
    "                    ELSE r.started_at END, "
    "  updated_at = now() "
    "FROM d WHERE r.id = d.run_id "
    "RETURNING r.id, r.shard_group, r.shard, d.epoch, d.ids::text, r.workflow, r.status, "
    "  r.input::text, r.attempt, r.max_attempts, r.cancel_requested, "
    "  (extract(epoch FROM r.created_at) * 1000)::bigint, (extract(epoch FROM now()) * "
    "1000)::bigint, "
    "  (SELECT json_agg(json_build_object('seq', s.seq, 'name', s.name, 'kind', s.kind, "
    "     'status', s.status, 'output', s.output, 'error', s.error, 'attempts', s.attempts, "
    "     'wake_at', (extract(epoch FROM s.wake_at) * 1000)::bigint, "
    "     'started_at', (extract(epoch FROM s.started_at) * 1000)::bigint))::text "
    "   FROM cairn.steps s WHERE s.run_id = r.id), "
    "  (SELECT json_agg(json_build_object('id', g.id, 'name', g.name, 'payload', g.payload))::text "
    "   FROM cairn.signals g WHERE g.run_id = r.id AND g.consumed_by_seq IS NULL)";

static int parse_ids(const char *text, int64_t **out)
{
	int n = 1;
	for (const char *p = text; *p; p++)
		n += *p == ',';
	*out = calloc((size_t)n, sizeof **out);
	if (!*out)
		return 0;
	int k = 0;
	for (const char *p = text; *p && k < n;) {
		while (*p && (*p < '0' || *p > '9'))
			p++;
		if (!*p)
			break;
		char *end;
		(*out)[k++] = strtoll(p, &end, 10);
		p = end;
	}
	return k;
}

/* Claims up to limit runs; returns how many were queued, or -1 on error. */
static int claim(struct dispatch *d, PGconn *conn, int limit, buf *err)
{
	cairn_worker *w = d->w;
	pgarr ex = PGARR_INIT;
	inflight_ids(d, &ex);
	char me[24], lim[24];
	const char *p[] = {db_i64(me, w->runner_id), pgarr_str(&ex), db_i64(lim, limit)};
	PGresult *r = PQexecPrepared(conn, "cairn_claim", 3, p, NULL, NULL, 0);
	pgarr_free(&ex);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		buf_reset(err);
		buf_puts(err, PQresultErrorMessage(r));
		PQclear(r);
		return -1;
	}
	int queued = 0;
	int64_t mono = worker_now_ms();
	for (int i = 0; i < PQntuples(r); i++) {
		int group = worker_group_index(w, PQgetvalue(r, i, 1));
		int shard = db_get_int(r, i, 2);
		int64_t epoch = db_get_i64(r, i, 3);
		if (group < 0 || shard < 0 || shard >= w->shards ||
		    worker_epoch(w, group, shard) != epoch)
			continue; /* being released, or not yet known here */
		job *j = calloc(1, sizeof *j);
		if (!j)
			break;
		j->run_id = db_get_i64(r, i, 0);
		j->group = group;
		j->shard = shard;
		j->epoch = epoch;
		j->nmsgs = parse_ids(PQgetvalue(r, i, 4), &j->msgs);
		j->workflow = db_get_str(r, i, 5);
		j->status = db_get_str(r, i, 6);
		j->input = db_get_str(r, i, 7);
		j->attempt = db_get_int(r, i, 8);
		j->max_attempts = db_get_int(r, i, 9);
		j->cancel_requested = db_get_bool(r, i, 10);
		j->created_ms = db_get_i64(r, i, 11);
		j->db_now_ms = db_get_i64(r, i, 12);
		j->mono_at_load = mono;
		j->journal = db_get_str(r, i, 13);
		j->signals = db_get_str(r, i, 14);
		if (!j->workflow || !j->status || !j->msgs) {
			job_free(j);
			continue;
		}
		pthread_mutex_lock(&d->mu);
		if (d->nfl == d->capfl) {
			int cap = d->capfl ? d->capfl * 2 : 64;
			flight *g = realloc(d->fl, (size_t)cap * sizeof *g);
			if (!g) {
				pthread_mutex_unlock(&d->mu);
				job_free(j);
				break;
			}
			d->fl = g;
			d->capfl = cap;
		}
		flight *f = &d->fl[d->nfl++];
		f->run_id = j->run_id;
		f->job = j;
		f->group = group;
		f->shard = shard;
		f->since_unix_ms = worker_unix_ms();
		snprintf(f->workflow, sizeof f->workflow, "%s", j->workflow);
		atomic_fetch_add(&w->own[group].busy[shard], 1);
		j->next = NULL;
		if (d->qtail)
			d->qtail->next = j;
		else
			d->qhead = j;
		d->qtail = j;
		d->qlen++;
		atomic_store(&w->m.queue_depth, d->qlen);
		pthread_cond_signal(&d->job_cv);
		pthread_mutex_unlock(&d->mu);
		queued++;
	}
	int got = PQntuples(r);
	PQclear(r);
	return got >= limit ? limit : queued;
}

static const char SQL_CANCELLED[] =
    "SELECT id FROM cairn.runs WHERE id = ANY ($1::bigint[]) AND cancel_requested";

/* Tells in-flight runs that were cancelled meanwhile, so that a long step
 * polling cairn_should_stop() hears of it before its next durable call. */
static void check_cancels(struct dispatch *d, PGconn *conn)
{
	pgarr ids = PGARR_INIT;
	inflight_ids(d, &ids);
	if (ids.n == 0)
		return;
	const char *p[] = {pgarr_str(&ids)};
	PGresult *r = db_exec(conn, NULL, SQL_CANCELLED, 1, p);
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

/* Waits for a notification, a wake-up from an executor, or the timeout. */
/* Drops the notifications libpq has received; 1 if there were any. */
static int take_notifies(PGconn *conn)
{
	int any = 0;
	PGnotify *n;
	PQconsumeInput(conn);
	while ((n = PQnotifies(conn))) {
		PQfreemem(n);
		any = 1;
	}
	return any;
}

static void wait_wake(struct dispatch *d, PGconn *conn, int64_t ms)
{
	/* A notification that came in with the last claim's result is already
	 * in libpq's queue, not on the socket: poll() would not see it. */
	if (conn && take_notifies(conn))
		return;
	struct pollfd fds[2] = {{.fd = d->wake_fd, .events = POLLIN},
	                        {.fd = conn ? PQsocket(conn) : -1, .events = POLLIN}};
	if (poll(fds, conn ? 2 : 1, (int)ms) > 0) {
		uint64_t v;
		if (fds[0].revents & POLLIN) {
			ssize_t n = read(d->wake_fd, &v, sizeof v);
			(void)n;
		}
	}
	if (conn)
		take_notifies(conn);
}

static void *poller_main(void *arg)
{
	struct dispatch *d = arg;
	cairn_worker *w = d->w;
	PGconn *conn = NULL;
	buf err = BUF_INIT;
	int failures = 0;
	int64_t next_cancel_check = 0, next_analyze = 0;
	while (!atomic_load(&d->stopping)) {
		worker_stamp(d->loop);
		if (conn && worker_now_ms() >= next_cancel_check) {
			check_cancels(d, conn);
			next_cancel_check = worker_now_ms() + w->cfg.poll_interval_ms;
		}
		if (!conn) {
			conn = connect_prepared(w, "cairn-worker poll", "cairn_claim", SQL_CLAIM,
			                        &err);
			/* A generic plan cannot know the LIMIT and sorts every due
			 * message; plan each claim with its values instead. */
			if (conn &&
			    (db_cmd(conn, &err, "SET plan_cache_mode = force_custom_plan", 0,
			            NULL) < 0 ||
			     db_cmd(conn, &err, "LISTEN " CAIRN_WAKE_CHANNEL, 0, NULL) < 0)) {
				PQfinish(conn);
				conn = NULL;
			}
			if (!conn) {
				wait_wake(d, NULL, worker_reconnect_ms(failures++));
				continue;
			}
			failures = 0;
		}
		pthread_mutex_lock(&w->mu);
		int attached = w->runner_id != 0 && atomic_load(&w->m.shards_owned) > 0;
		pthread_mutex_unlock(&w->mu);
		pthread_mutex_lock(&d->mu);
		int room = d->qcap - d->qlen;
		pthread_mutex_unlock(&d->mu);
		if (!attached || room <= 0) {
			wait_wake(d, conn, w->cfg.poll_interval_ms);
			continue;
		}
		int limit = room < w->cfg.poll_batch ? room : w->cfg.poll_batch;
		int64_t t0 = worker_now_ms();
		int n = claim(d, conn, limit, &err);
		int64_t took = worker_now_ms() - t0;
		if (n >= 0 && took > SLOW_CLAIM_MS && worker_now_ms() >= next_analyze) {
			/* A slow claim after a bulk load is the planner sorting every
			 * due message because its statistics still say the table is
			 * small; autovacuum would take up to a minute to notice. */
			char ms[24];
			log_kv(&w->log, LOG_INFO,
			       "slow claim: refreshing the statistics of cairn.messages",
			       "claim_ms", db_i64(ms, took), NULL);
			db_cmd(conn, NULL, "ANALYZE cairn.messages", 0, NULL);
			next_analyze = worker_now_ms() + 60000;
		}
		if (n < 0) {
			log_kv(&w->log, LOG_WARN, "poll failed", "error", buf_str(&err), NULL);
			if (!db_ok(conn)) {
				PQfinish(conn);
				conn = NULL;
			}
			wait_wake(d, conn, w->cfg.poll_interval_ms);
			continue;
		}
		if (n < limit)
			wait_wake(d, conn, w->cfg.poll_interval_ms);
	}
	PQfinish(conn);
	buf_free(&err);
	return NULL;
}

/* ------------------------------------------------------------- lifecycle */

int dispatch_start(cairn_worker *w)
{
	struct dispatch *d = calloc(1, sizeof *d);
	if (!d)
		return -1;
	d->w = w;
	d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->job_cv, NULL);
	worker_cond_init(&d->done_cv);
	pthread_cond_init(&d->commit_cv, NULL);
	d->nexec = w->cfg.concurrency;
	d->qcap = w->cfg.poll_batch > w->cfg.concurrency ? w->cfg.poll_batch : w->cfg.concurrency;
	d->execs = calloc((size_t)d->nexec, sizeof *d->execs);
	if (d->wake_fd < 0 || !d->execs) {
		free(d->execs);
		free(d);
		return -1;
	}
	d->loop = &w->loops[w->nloops++];
	d->loop->name = "poller";
	d->loop->interval_ms = w->cfg.poll_interval_ms;
	worker_stamp(d->loop);
	w->dispatch = d;
	for (int i = 0; i < d->nexec; i++)
		pthread_create(&d->execs[i], NULL, executor_main, d);
	pthread_create(&d->committer, NULL, committer_main, d);
	pthread_create(&d->poller, NULL, poller_main, d);
	return 0;
}

int dispatch_drain_shards(cairn_worker *w, int group, const int *shards, int n, int64_t deadline_ms)
{
	struct dispatch *d = w->dispatch;
	if (!d)
		return 0;
	pthread_mutex_lock(&d->mu);
	/* Queued runs of these shards have not started: drop them now rather
	 * than wait for a free executor (their messages stay in the table). */
	for (job **pp = &d->qhead; *pp;) {
		job *j = *pp;
		if (j->group == group && worker_epoch(w, j->group, j->shard) != j->epoch) {
			*pp = j->next;
			d->qlen--;
			job_done_locked(d, j);
			continue;
		}
		pp = &j->next;
	}
	d->qtail = NULL;
	for (job *j = d->qhead; j; j = j->next)
		d->qtail = j;
	atomic_store(&w->m.queue_depth, d->qlen);
	int busy;
	for (;;) {
		busy = 0;
		for (int i = 0; i < n; i++)
			busy += atomic_load(&w->own[group].busy[shards[i]]);
		int64_t left = deadline_ms - worker_now_ms();
		if (!busy || left <= 0)
			break;
		worker_cond_wait_ms(&d->done_cv, &d->mu, left < 50 ? left : 50);
	}
	pthread_mutex_unlock(&d->mu);
	return busy ? -1 : 0;
}

void dispatch_stop_begin(cairn_worker *w)
{
	struct dispatch *d = w->dispatch;
	if (!d)
		return;
	atomic_store(&d->stopping, 1);
	wake_poller(d);
	pthread_join(d->poller, NULL);
	/* Executors stop at their next durable point; queued jobs are dropped. */
	pthread_mutex_lock(&d->mu);
	d->exec_stop = 1;
	pthread_cond_broadcast(&d->job_cv);
	pthread_mutex_unlock(&d->mu);
}

int dispatch_executing(cairn_worker *w)
{
	struct dispatch *d = w->dispatch;
	if (!d)
		return 0;
	pthread_mutex_lock(&d->mu);
	int n = d->executing;
	pthread_mutex_unlock(&d->mu);
	return n;
}

void dispatch_stop_end(cairn_worker *w, int *clean, int *cut)
{
	struct dispatch *d = w->dispatch;
	*clean = *cut = 0;
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	*cut = d->executing;
	*clean = d->clean;
	pthread_mutex_unlock(&d->mu);
	if (*cut)
		return; /* a step is still running past the deadline: do not wait for it */
	for (int i = 0; i < d->nexec; i++)
		pthread_join(d->execs[i], NULL);
	pthread_mutex_lock(&d->mu);
	d->commit_stop = 1;
	pthread_cond_signal(&d->commit_cv);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->committer, NULL);
}

void dispatch_free(cairn_worker *w)
{
	struct dispatch *d = w->dispatch;
	if (!d)
		return;
	free(d->execs);
	free(d->fl);
	close(d->wake_fd);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->job_cv);
	pthread_cond_destroy(&d->done_cv);
	pthread_cond_destroy(&d->commit_cv);
	w->dispatch = NULL;
	free(d);
}

void dispatch_status(cairn_worker *w, buf *out)
{
	struct dispatch *d = w->dispatch;
	buf_puts(out, "[");
	if (d) {
		pthread_mutex_lock(&d->mu);
		for (int i = 0; i < d->nfl && i < 100; i++)
			buf_printf(out,
			           "%s{\"run_id\":%" PRId64 ",\"workflow\":\"%s\",\"group\":\"%s\","
			           "\"shard\":%d,\"since_unix_ms\":%" PRId64 "}",
			           i ? "," : "", d->fl[i].run_id, d->fl[i].workflow,
			           w->own[d->fl[i].group].name, d->fl[i].shard,
			           d->fl[i].since_unix_ms);
		pthread_mutex_unlock(&d->mu);
	}
	buf_puts(out, "]");
}
