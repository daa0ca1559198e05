/*
 * commit.c - the group committer (see commit.h): a queue of commits, one
 * thread with its own connection that takes up to COMMIT_MAX of them at a
 * time and writes them with one prepared statement, made of the parts the
 * batch needs (COMMIT_PART). A batch the database
 * refuses is retried one commit at a time, so one run's bad values cannot
 * sink the others; a run whose own writes are refused (invalid UTF-8 in a
 * result, say) fails with the database's message instead of being executed
 * again forever. Its session has CAIRN_STATEMENT_TIMEOUT as statement_timeout
 * (a commit that hits it is a failed commit like any other), and the thread
 * stamps its watch while it waits for work and after every statement, so
 * /healthz fails only when a commit goes unanswered past that timeout.
 */
#include "commit.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "client.h"
#include "clock.h"
#include "db.h"
#include "hash.h"
#include "parse.h"
#include "sqlparam.h"

#define COMMIT_MAX 512

#define COMMIT_SLOT_NAME(name) #name,
const char *const COMMIT_SLOT_NAMES[COMMIT_NSLOTS] = {COMMIT_SLOTS(COMMIT_SLOT_NAME)};
#undef COMMIT_SLOT_NAME

/* ------------------------------------------------------------ one commit */

commit *commit_new(const commit_run *run)
{
	commit *c = calloc(1, sizeof *c);
	if (c)
		c->run = *run;
	return c;
}

static void row_clear(jrow *r)
{
	free(r->name);
	free(r->output);
	free(r->error);
}

static void child_clear(commit_child *k)
{
	free(k->workflow);
	free(k->key);
	free(k->input);
	free(k->group);
}

void commit_free(commit *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->nrows; i++)
		row_clear(&c->rows[i]);
	free(c->rows);
	free(c->sig_ids);
	free(c->sig_seqs);
	for (int i = 0; i < c->nkids; i++)
		child_clear(&c->kids[i]);
	free(c->kids);
	free(c->await.children);
	free(c->output);
	free(c->next_input);
	free(c->error);
	free(c->move_to);
	free(c);
}

int commit_add_row(commit *c, const jrow *r)
{
	if (c->nrows == c->caprows) {
		int cap = c->caprows ? c->caprows * 2 : 4;
		jrow *g = realloc(c->rows, (size_t)cap * sizeof *g);
		if (!g)
			return -CAIRN_ENOMEM;
		c->rows = g;
		c->caprows = cap;
	}
	jrow *d = &c->rows[c->nrows];
	*d = *r;
	d->name = strdup(r->name);
	d->output = r->output ? strdup(r->output) : NULL;
	d->error = r->error ? strdup(r->error) : NULL;
	if (!d->name || (r->output && !d->output) || (r->error && !d->error)) {
		row_clear(d);
		return -CAIRN_ENOMEM;
	}
	c->nrows++;
	return 0;
}

int commit_add_signal(commit *c, int64_t id, int seq)
{
	if (c->nsig == c->capsig) {
		int cap = c->capsig ? c->capsig * 2 : 4;
		int64_t *ids = realloc(c->sig_ids, (size_t)cap * sizeof *ids);
		if (ids)
			c->sig_ids = ids;
		int *seqs = realloc(c->sig_seqs, (size_t)cap * sizeof *seqs);
		if (seqs)
			c->sig_seqs = seqs;
		if (!ids || !seqs)
			return -CAIRN_ENOMEM;
		c->capsig = cap;
	}
	c->sig_ids[c->nsig] = id;
	c->sig_seqs[c->nsig++] = seq;
	return 0;
}

int commit_add_child(commit *c, const commit_child *k)
{
	if (c->nkids == c->capkids) {
		int cap = c->capkids ? c->capkids * 2 : 16;
		commit_child *g = realloc(c->kids, (size_t)cap * sizeof *g);
		if (!g)
			return -CAIRN_ENOMEM;
		c->kids = g;
		c->capkids = cap;
	}
	commit_child *d = &c->kids[c->nkids];
	*d = *k;
	d->workflow = strdup(k->workflow);
	d->key = strdup(k->key);
	d->input = strdup(k->input);
	d->group = k->group ? strdup(k->group) : NULL;
	if (!d->workflow || !d->key || !d->input || (k->group && !d->group)) {
		child_clear(d);
		return -CAIRN_ENOMEM;
	}
	c->nkids++;
	return 0;
}

int commit_set_await(commit *c, int seq, int want, const int64_t *children, int n)
{
	int64_t *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
	if (!copy)
		return -CAIRN_ENOMEM;
	memcpy(copy, children, (size_t)n * sizeof *copy);
	free(c->await.children);
	c->await = (commit_await){.seq = seq, .want = want, .children = copy, .n = n};
	return 0;
}

void commit_truncate(commit *c, int from)
{
	int k = 0;
	for (int i = 0; i < c->nrows; i++) {
		if (c->rows[i].seq < from)
			c->rows[k++] = c->rows[i];
		else
			row_clear(&c->rows[i]);
	}
	c->nrows = k;
	k = 0;
	for (int i = 0; i < c->nsig; i++)
		if (c->sig_seqs[i] < from) {
			c->sig_ids[k] = c->sig_ids[i];
			c->sig_seqs[k++] = c->sig_seqs[i];
		}
	c->nsig = k;
	k = 0;
	for (int i = 0; i < c->nkids; i++) {
		if (c->kids[i].seq < from)
			c->kids[k++] = c->kids[i];
		else
			child_clear(&c->kids[i]);
	}
	c->nkids = k;
	if (c->await.n && c->await.seq >= from) {
		free(c->await.children);
		c->await = (commit_await){0};
	}
}

/* -------------------------------------------------------------- encoding */

/*
 * The commit statement, in parts. Every statement starts with the batch and
 * its fence (COMMIT_HEAD) and ends with the runs the fence let through
 * (COMMIT_TAIL); between them come only the parts whose slots the batch
 * fills (commit_parts). PostgreSQL sets up every data-modifying CTE of a
 * statement, with the indexes and constraints of its table, whether the CTE
 * writes a row or not: with every array empty, the statement with all its
 * parts took 0.35 to 0.45 ms to execute, the head with the journal's insert
 * 0.06 to 0.09 ms.
 */
/* With parts (Citus), a batch's commits are written part by part, each
 * statement filtering its tables by its part's key, the last parameter
 * (SQLPARAM_IN_PART): a fence with an equality on the distribution column,
 * which Citus needs to lock (FOR SHARE) on the node of the part. */
#define IN_PART(a)  SQLPARAM_IN_PART(a)
/* The parents a batch's children tell (p of PART_KID's kid and kidm) are
 * in other parts: of one part, "p.part = ANY (the parents' parts) AND ", a
 * parameter after the part's key (commit_parent_parts), so that Citus sends
 * those CTEs to the parents' shards, not to every shard; nothing on one
 * server. */
#define IN_PARENTS  "@in_parents@"
#define COMMIT_LOCK " FOR SHARE OF l"
/* Of one part, the fence (ok, which then locks nothing) is NOT
 * MATERIALIZED when every row the statement writes is in the part: Citus
 * makes each write in a CTE a subplan of its own, and a materialized ok
 * was one too, whose rows it copied to every node for the subplans that
 * read them, so that every commit was a two-phase commit over every node.
 * Inlined, ok is read again by each write, on the node of the part, from
 * the lease rows the transaction holds locked: the same rows, and one node.
 * Not with a child's start, a child's end told to its parent or a cancel
 * passed to children, which write in other parts: there Citus 13.2's
 * worker node crashed in the COMMIT PREPARED of the inlined statement (a
 * child's end, test_journal on the cluster). Nothing on one server. */
#define OK_AS "@ok_as@"
#define COMMIT_HEAD                                                                                \
	"WITH b AS (SELECT * FROM unnest(:b_run::bigint[], :b_group::text[], :b_shard::int[], "    \
	"                                :b_owner::bigint[], :b_epoch::bigint[]) "                 \
	"           AS b(run_id, g, s, o, e)), "                                                   \
	"ok AS " OK_AS "(SELECT b.run_id, b.g, b.s, l.part AS p FROM b JOIN cairn.shard_leases l " \
	"       ON " IN_PART("l") "l.shard_group = b.g AND l.shard = b.s AND l.owner = b.o "       \
	                          "         AND l.epoch = b.e "                                    \
	                          "       ORDER BY l.shard_group, l.shard" COMMIT_LOCK ")"
/* The fence of COMMIT_HEAD is a lock: the lease rows the batch depends on
 * are locked shared, in a fixed order, so an epoch bump waits for the
 * commit, and a commit that waited sees the bumped row and writes nothing. */
#define COMMIT_TAIL                                                                                \
	" SELECT ok.run_id, r.cancel_requested FROM ok "                                           \
	"JOIN cairn.runs r ON " IN_PART("r") "r.id = ok.run_id"
/* With the part that tells parents (PART_KID): also whether the run is due
 * again because its wait for children was met as it began. */
#define COMMIT_TAIL_WOKEN                                                                          \
	" SELECT ok.run_id, r.cancel_requested, ok.run_id IN (SELECT run_id FROM kidm) "           \
	"FROM ok JOIN cairn.runs r ON " IN_PART("r") "r.id = ok.run_id"

/* A part: its CTEs, and the slots they read (first to last, in the order
 * of COMMIT_SLOTS). */
typedef struct commit_part {
	const char *sql;
	enum commit_slot first, last;
} commit_part;

static const commit_part COMMIT_PART[COMMIT_NPARTS] = {
    {"ins AS (INSERT INTO cairn.steps (run_id, part, seq, name, kind, status, output, error, "
     "                                 attempts, wake_at, started_at, finished_at) "
     "  SELECT t.r, ok.p, t.q, t.n, t.k, t.st, t.o::jsonb, t.er, t.a, "
     "         to_timestamp(t.w / 1000.0), to_timestamp(t.sa / 1000.0), "
     "         to_timestamp(t.fa / 1000.0) "
     "  FROM unnest(:j_run::bigint[], :j_seq::int[], :j_name::text[], :j_kind::text[], "
     "              :j_status::text[], :j_output::text[], :j_error::text[], :j_attempts::int[], "
     "              :j_wake::bigint[], :j_started::bigint[], :j_finished::bigint[]) "
     "       AS t(r, q, n, k, st, o, er, a, w, sa, fa) "
     "  JOIN ok ON ok.run_id = t.r "
     /* A settled entry is never overwritten: the journal only grows. */
     "  ON CONFLICT ON CONSTRAINT steps_pkey DO UPDATE SET status = excluded.status, "
     "    output = excluded.output, error = excluded.error, attempts = excluded.attempts, "
     "    wake_at = excluded.wake_at, finished_at = excluded.finished_at "
     "  WHERE cairn.steps.status NOT IN ('completed', 'timed_out'))",
     SLOT_j_run, SLOT_j_finished},
    /* The run's start (runs.start_at): u.sa Unix ms, NULL (none: the run
     * started), or -1 (as it is). u.cut: a retry cuts the journal (rst),
     * which counts (journal_cuts, migration 0022). Its RETURNING is the
     * row as written, after any change committed while this waited for
     * its lock (a cancel): cont reads it. */
    {"upd AS (UPDATE cairn.runs r SET status = u.st, output = u.o::jsonb, error = u.er, "
     "    attempt = u.a, claims = 0, updated_at = now(), "
     "    code_version = coalesce(r.code_version, u.v), "
     /* now() outside CASE: Citus refuses a function that is not IMMUTABLE
      * inside one (it evaluates them on the coordinator, unconditionally). */
     "    finished_at = now() + CASE WHEN u.fin THEN interval '0' END, "
     "    start_at = CASE WHEN u.sa < 0 THEN r.start_at ELSE to_timestamp(u.sa / 1000.0) END, "
     "    journal_cuts = r.journal_cuts + u.cut "
     "  FROM unnest(:u_run::bigint[], :u_status::text[], :u_output::text[], :u_error::text[], "
     "              :u_attempt::int[], :u_finished::bool[], :u_start::bigint[], "
     "              :u_version::text[], :u_cut::int[]) "
     "       AS u(id, st, o, er, a, fin, sa, v, cut) "
     "  WHERE " IN_PART("r") "r.id = u.id AND u.id IN (SELECT run_id FROM ok) "
                             "  RETURNING r.id, r.cancel_requested)",
     SLOT_u_run, SLOT_u_cut},
    {"delm AS (DELETE FROM cairn.messages m WHERE " IN_PART(
         "m") "(m.id = ANY (:del_msg::bigint[]) "
              "    OR m.run_id = ANY (:del_run::bigint[])) AND m.run_id IN (SELECT run_id FROM "
              "ok))",
     SLOT_del_msg, SLOT_del_run},
    {"newm AS (INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind, deliver_at) "
     "  SELECT ok.run_id, ok.p, ok.g, ok.s, n.k, to_timestamp(n.at / 1000.0) "
     "  FROM unnest(:new_run::bigint[], :new_kind::text[], :new_at::bigint[]) AS n(r, k, at) "
     "  JOIN ok ON ok.run_id = n.r)",
     SLOT_new_run, SLOT_new_at},
    /* A signal consumed by run x.r: its own, or one sent to the run it
     * continues as new while that one ended (see cont), which becomes
     * its own. */
    {"sig AS (UPDATE cairn.signals g SET consumed_by_seq = x.q, run_id = x.r "
     "  FROM unnest(:sig_id::bigint[], :sig_seq::int[], :sig_run::bigint[]) AS x(id, q, r) "
     "  WHERE " IN_PART("g") "g.id = x.id AND x.r IN (SELECT run_id FROM ok) AND (g.run_id = x.r "
                             "    OR g.run_id = (SELECT p.continued_from FROM cairn.runs p "
                             "                   WHERE " IN_PART("p") "p.id = x.r)))",
     SLOT_sig_id, SLOT_sig_run},
    /* Children started (cairn_child_start), under the ids their starts
     * journal, in the group that serves their workflow (NULL: the run's),
     * and the parent's child_waits row, which tells the ends of its
     * children to count down its waits (cairn.children_sync). */
    {"kn AS (INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, input, "
     "                               max_attempts, scheduled_at, start_at, parent_id, "
     "                               traceparent) "
     "  SELECT x.id, cairn.part_of(x.s), x.w, x.k, coalesce(x.g, ok.g), x.s, x.i::jsonb, 3, "
     "         now(), now(), x.p, x.tp "
     "  FROM unnest(:kn_run::bigint[], :kn_id::bigint[], :kn_workflow::text[], "
     "              :kn_key::text[], :kn_shard::int[], :kn_group::text[], :kn_input::text[], "
     "              :kn_tp::text[]) "
     "       AS x(p, id, w, k, s, g, i, tp) "
     "  JOIN ok ON ok.run_id = x.p "
     "  ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING), "
     "knw AS (INSERT INTO cairn.child_waits (run_id, part) "
     "  SELECT DISTINCT x.p, ok.p FROM unnest(:kn_run::bigint[]) AS x(p) "
     "  JOIN ok ON ok.run_id = x.p "
     "  ON CONFLICT ON CONSTRAINT child_waits_pkey DO NOTHING)",
     SLOT_kn_run, SLOT_kn_tp},
    /* A run retry cuts the journal where the run starts over, and gives
     * back the signals consumed from there on. */
    {"rst AS (DELETE FROM cairn.steps s USING unnest(:reset_run::bigint[], :reset_from::int[]) "
     "    AS x(r, f) "
     "  WHERE " IN_PART("s") "s.run_id = x.r AND s.seq >= x.f "
                             "    AND s.run_id IN (SELECT run_id FROM ok)), "
                             "gb AS (UPDATE cairn.signals g SET consumed_by_seq = NULL "
                             "  FROM unnest(:reset_run::bigint[], :reset_from::int[]) AS x(r, f) "
                             "  WHERE " IN_PART("g") "g.run_id = x.r AND g.consumed_by_seq >= x.f "
                                                     "    AND g.run_id IN (SELECT run_id FROM ok))",
     SLOT_reset_run, SLOT_reset_from},
    {"dfr AS (UPDATE cairn.messages m SET deliver_at = to_timestamp(x.at / 1000.0), "
     "    attempts = m.attempts + 1 "
     "  FROM unnest(:defer_msg::bigint[], :defer_at::bigint[]) AS x(id, at) "
     "  WHERE " IN_PART("m") "m.id = x.id AND m.run_id IN (SELECT run_id FROM ok))",
     SLOT_defer_msg, SLOT_defer_at},
    /* Progress (journal rows) while running resets the claim count; only
     * written when it counts more than this claim. */
    {"prog AS (UPDATE cairn.runs r SET claims = 0 "
     "  WHERE " IN_PART("r") "r.id = ANY (:prog_run::bigint[]) "
                             "  AND r.claims > 1 AND r.id IN (SELECT run_id FROM ok))",
     SLOT_prog_run, SLOT_prog_run},
    /* A hand-over gives its mark back unfenced, as the mark was made: it is
     * a count, not a result, and a drain that released the shard before
     * this commit must not leave its stop counted against the run. So does
     * any other end of an execution that the fence refused: the execution
     * ended here, it did not stop its worker. */
    {"unc AS (UPDATE cairn.runs r SET " GIVE_COUNT_BACK " "
     "  WHERE " IN_PART("r") "(r.id = ANY (:unclaim_run::bigint[]) "
                             "     OR (r.id = ANY (:refund_run::bigint[]) AND r.id NOT IN (SELECT "
                             "run_id FROM ok))))",
     SLOT_unclaim_run, SLOT_refund_run},
    /* A child that finished tells its parent: a signal with its outcome
     * (unless the parent has finished). A run that suspends in a wait for
     * children drops its signal messages (its wait counts the signals, and
     * a message its claim did not see would wake it for nothing).
     * cairn.children_sync (migration 0021) counts down the waits of the
     * ended children's parents and sets up the new waits: the runs it
     * returns get a message, and the fence's runs among them are due again
     * (COMMIT_TAIL_WOKEN). */
    {"kid AS (INSERT INTO cairn.signals (run_id, part, name, payload) "
     "  SELECT p.id, p.part, x.n, x.pl::jsonb "
     "  FROM unnest(:kid_run::bigint[], :kid_parent::bigint[], :kid_name::text[], "
     "              :kid_payload::text[]) AS x(r, p, n, pl) "
     "  JOIN cairn.runs p ON " IN_PARENTS "p.id = x.p "
     "  WHERE x.r IN (SELECT run_id FROM ok) AND p.finished_at IS NULL), "
     "awd AS (DELETE FROM cairn.messages m "
     "  WHERE " IN_PART(
         "m") "m.run_id = ANY (:aw_run::bigint[]) "
              "  AND m.kind = 'signal' AND m.run_id IN (SELECT run_id FROM ok)), "
              "ksync AS MATERIALIZED (SELECT w.id FROM cairn.children_sync( "
              "         (SELECT array_agg(run_id) FROM ok), :aw_run::bigint[], "
              "         :aw_seq::int[], :aw_want::int[], :awc_run::bigint[], :awc_child::bigint[], "
              "         :kid_run::bigint[], :kid_child::bigint[], :kid_parent::bigint[]) AS "
              "w(id)), "
              "kidm AS (INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind) "
              "  SELECT p.id, p.part, p.shard_group, p.shard, 'signal' "
              "  FROM ksync w JOIN cairn.runs p ON " IN_PARENTS
              "p.id = w.id AND p.finished_at IS NULL "
              "  RETURNING run_id)",
     SLOT_kid_run, SLOT_awc_child},
    /* A cancelled parent asks its unfinished children to cancel; those
     * that never started end cancelled here, as cairn_cancel ends such a
     * run (client.c, SQL_CANCEL), whatever group they are in: one that no
     * worker serves would otherwise wait for ever. Their parent is the run
     * this commit ends, which needs no signal of their ends. */
    {"canc AS (UPDATE cairn.runs c SET cancel_requested = true, updated_at = now(), "
     "    status = CASE WHEN c.status = 'pending' AND c.attempt = 0 THEN 'cancelled' "
     "             ELSE c.status END, "
     "    error = CASE WHEN c.status = 'pending' AND c.attempt = 0 THEN 'cancelled' "
     "            ELSE c.error END, "
     "    finished_at = now() + CASE WHEN c.status = 'pending' AND c.attempt = 0 "
     "                                THEN interval '0' END, "
     "    start_at = CASE WHEN c.status = 'pending' AND c.attempt = 0 THEN NULL "
     "               ELSE c.start_at END, "
     "    held = c.held AND NOT (c.status = 'pending' AND c.attempt = 0) "
     "  WHERE c.parent_id = ANY (:can_run::bigint[]) AND c.parent_id IN (SELECT run_id FROM ok) "
     "    AND c.finished_at IS NULL AND NOT c.cancel_requested "
     "  RETURNING c.id, c.part, c.shard_group, c.shard, c.finished_at IS NOT NULL AS now_), "
     "cancm AS (INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind) "
     "  SELECT part, id, shard_group, shard, 'cancel' FROM canc WHERE NOT now_), "
     "cand AS (DELETE FROM cairn.messages m WHERE m.run_id IN (SELECT id FROM canc WHERE now_))",
     SLOT_can_run, SLOT_can_run},
    /* Events: the latest value of each key (the highest seq) wins. */
    {"ev AS (INSERT INTO cairn.events AS e (run_id, part, key, value) "
     "  SELECT DISTINCT ON (x.r, x.k) x.r, ok.p, x.k, x.v::jsonb "
     "  FROM unnest(:ev_run::bigint[], :ev_key::text[], :ev_value::text[], :ev_seq::int[]) "
     "    AS x(r, k, v, q) "
     "  JOIN ok ON ok.run_id = x.r ORDER BY x.r, x.k, x.q DESC "
     /* excluded.updated_at: the insert's now() (its default), as Citus
      * takes no function that is not IMMUTABLE in DO UPDATE SET. */
     "  ON CONFLICT ON CONSTRAINT events_pkey DO UPDATE SET value = excluded.value, "
     "    updated_at = excluded.updated_at)",
     SLOT_ev_run, SLOT_ev_seq},
    /* A run moves to a group whose workers serve its workflow (migration
     * 0020): its row and every message of it, still due; the shard is the
     * same number in every group. Its claim is given back: no code ran. */
    {"mv AS (UPDATE cairn.runs r SET shard_group = x.g, status = 'pending', error = NULL, "
     "    " GIVE_COUNT_BACK ", updated_at = now() "
     "  FROM unnest(:mv_run::bigint[], :mv_group::text[]) AS x(id, g) "
     "  WHERE " IN_PART("r") "r.id = x.id AND x.id IN (SELECT run_id FROM ok)), "
                             "mvm AS (UPDATE cairn.messages m SET shard_group = x.g "
                             "  FROM unnest(:mv_run::bigint[], :mv_group::text[]) AS x(id, g) "
                             "  WHERE " IN_PART(
                                 "m") "m.run_id = x.id AND x.id IN (SELECT run_id FROM ok))",
     SLOT_mv_run, SLOT_mv_group},
    /*
     * A run that continues as new (its FINISH, in upd): its successor, in
     * the same shard (so this commit's fence covers it, and the same owner
     * starts it), keyed by the run it continues, so that no commit inserts
     * two; its cancel request is the run's as upd wrote it. The signals the
     * run had not consumed carry over (carry; not those its last execution
     * consumed, cont_taken, which sig marks in this same statement, unseen
     * by carry's snapshot), with those of the run before it: a signal sent
     * to a run while its successor is inserted (a sender
     * holds the run's row lock until it commits, see SQL_SIGNAL in
     * client.c) commits before this statement does but may be newer than
     * its snapshot; the successor reads its predecessor's (dispatch.c,
     * CLAIM_RUN_DATA) and takes them over as it consumes them (sig), and
     * its own successor carries them over.
     */
    {"cont AS (INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, input, "
     "    max_attempts, start_at, parent_id, concurrency_key, priority, continued_from, "
     "    chain_id, cancel_requested, traceparent) "
     "  SELECT x.id, p.part, p.workflow, 'cairn.next:' || p.id, "
     "         p.shard_group, p.shard, x.i::jsonb, "
     "         p.max_attempts, now(), p.parent_id, p.concurrency_key, p.priority, p.id, "
     "         coalesce(p.chain_id, p.id), u.cancel_requested, p.traceparent "
     "  FROM unnest(:cont_run::bigint[], :cont_id::bigint[], :cont_input::text[]) AS x(r, id, i) "
     "  JOIN upd u ON u.id = x.r JOIN cairn.runs p ON " IN_PART(
         "p") "p.id = x.r "
              "  ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING RETURNING id, "
              "continued_from), "
              "carry AS (UPDATE cairn.signals g SET run_id = n.id FROM cont n "
              "  WHERE " IN_PART(
                  "g") "g.consumed_by_seq IS NULL AND g.id <> ALL (:cont_taken::bigint[]) "
                       "    AND (g.run_id = n.continued_from "
                       "      OR g.run_id = (SELECT p.continued_from FROM cairn.runs p "
                       "                     WHERE " IN_PART("p") "p.id = n.continued_from)))",
     SLOT_cont_run, SLOT_cont_taken},
};

/* Tells `cairn wait` and the like that runs finished ($1) and that runs
 * published events ($2), and wakes the owners (when idle) of the parents
 * of finished children that are due ($3: their waits were met), of the
 * children of cancelled runs ($4) and, other than this runner ($6), of
 * children just started ($5; bare, so that PostgreSQL folds them into one
 * notification per owner), after their commit and in a transaction of its
 * own: PostgreSQL serialises the commits of notifying transactions, and
 * this one writes no WAL, so it is short. */
#define SQL_DONE_BODY                                                                              \
	"SELECT count(pg_notify('" CAIRN_DONE_CHANNEL                                              \
	"', id::text)) FROM unnest($1::bigint[]) id "                                              \
	"UNION ALL "                                                                               \
	"SELECT count(pg_notify('" CAIRN_EVENT_CHANNEL                                             \
	"', id::text)) FROM unnest($2::bigint[]) id "                                              \
	"UNION ALL "                                                                               \
	"SELECT count(pg_notify('" CAIRN_WAKE_CHANNEL "', l.owner || x.how || ' ' || x.id)) "      \
	"FROM (SELECT r.id, r.shard_group, r.shard, '' AS how FROM cairn.runs r "                  \
	"      WHERE r.id = ANY ($3::bigint[]) AND r.finished_at IS NULL "                         \
	"        AND EXISTS (SELECT 1 FROM cairn.messages m WHERE m.run_id = r.id "                \
	"                    AND m.deliver_at <= now()) "                                          \
	"      UNION ALL SELECT id, shard_group, shard, '" CAIRN_WAKE_CANCEL "' FROM cairn.runs "  \
	"      WHERE parent_id = ANY ($4::bigint[]) AND finished_at IS NULL) x "                   \
	"JOIN cairn.shard_leases l ON l.shard_group = x.shard_group AND l.shard = x.shard "        \
	"JOIN cairn.runners w ON w.id = l.owner AND (w.idle OR x.how <> '') "                      \
	"UNION ALL "                                                                               \
	"SELECT count(pg_notify('" CAIRN_WAKE_CHANNEL "', o.owner::text)) "                        \
	"FROM (SELECT DISTINCT l.owner FROM cairn.runs c "                                         \
	"      JOIN cairn.shard_leases l ON l.shard_group = c.shard_group AND l.shard = c.shard "  \
	"      JOIN cairn.runners w ON w.id = l.owner AND w.idle "                                 \
	"      WHERE c.id = ANY ($5::bigint[]) AND l.owner <> $6) o"
static const char SQL_DONE[] = SQL_DONE_BODY;
/* SQL_DONE when runs ended cancelled ($4): also tells that their children
 * that never started ended with them (the commit's part canc); those
 * cancelled before are told again, which a waiter reads as nothing new.
 * A statement of its own, so that the one every other batch sends is not
 * longer for it. */
static const char SQL_DONE_CANCELLED[] =
    "SELECT count(pg_notify('" CAIRN_DONE_CHANNEL "', id::text)) FROM cairn.runs "
    "WHERE parent_id = ANY ($4::bigint[]) AND status = 'cancelled' "
    "UNION ALL " SQL_DONE_BODY;

/* The slots of the statement of parts, in its $n order (the head's first):
 * their number. */
static int part_slots(unsigned parts, int slots[COMMIT_NSLOTS])
{
	int n = 0;
	for (int s = 0; s < SLOT_j_run; s++)
		slots[n++] = s;
	for (int i = 0; i < COMMIT_NPARTS; i++)
		if (parts & (1u << i))
			for (int s = (int)COMMIT_PART[i].first; s <= (int)COMMIT_PART[i].last; s++)
				slots[n++] = s;
	return n;
}

/* The bit of the part that reads slot s. */
static unsigned part_bit(enum commit_slot s)
{
	for (int i = 0; i < COMMIT_NPARTS; i++)
		if (COMMIT_PART[i].first <= s && s <= COMMIT_PART[i].last)
			return 1u << i;
	return 0;
}

unsigned commit_parts(const commit_params *p)
{
	unsigned parts = 0;
	for (int i = 0; i < COMMIT_NPARTS; i++)
		for (int s = (int)COMMIT_PART[i].first; s <= (int)COMMIT_PART[i].last; s++)
			if (p->slot[s].n > 0)
				parts |= 1u << i;
	return parts;
}

int commit_tells_parents(unsigned parts)
{
	return (parts & part_bit(SLOT_kid_run)) != 0;
}

void commit_parent_parts(commit *const *batch, int n, const db_settings *st, pgarr *out)
{
	unsigned char seen[DB_PARTS_MAX] = {0};
	/* The batch's own part: kidm's runs include those of its waits met
	 * as they began. */
	seen[batch[0]->run.shard % st->nparts] = 1;
	for (int i = 0; i < n; i++) {
		int64_t parent = batch[i]->run.parent;
		if (!parent)
			continue;
		if (parent < st->first_placed_id) { /* its id names no shard: any part */
			memset(seen, 1, sizeof seen);
			break;
		}
		seen[(parent % RUN_ID_SHARDS) % st->nparts] = 1;
	}
	for (int i = 0; i < st->nparts; i++)
		if (seen[i])
			pgarr_add_i64(out, st->part_keys[i]);
}

int commit_statement(unsigned parts, buf *sql, buf *err)
{
	return commit_statement_part(parts, 0, sql, err);
}

int commit_statement_part(unsigned parts, int in_part, buf *sql, buf *err)
{
	buf text = BUF_INIT;
	buf_puts(&text, COMMIT_HEAD);
	for (int i = 0; i < COMMIT_NPARTS; i++)
		if (parts & (1u << i)) {
			buf_puts(&text, ", ");
			buf_puts(&text, COMMIT_PART[i].sql);
		}
	buf_puts(&text, parts & part_bit(SLOT_kid_run) ? COMMIT_TAIL_WOKEN : COMMIT_TAIL);
	int slots[COMMIT_NSLOTS];
	const char *names[COMMIT_NSLOTS];
	int n = part_slots(parts, slots);
	for (int i = 0; i < n; i++)
		names[i] = COMMIT_SLOT_NAMES[slots[i]];
	char part[32], parents[64];
	snprintf(part, sizeof part, "$%d::int", n + 1);
	snprintf(parents, sizeof parents, "p.part = ANY ($%d::int[]) AND ", n + 2);
	buf resolved = BUF_INIT, unlocked = BUF_INIT, inlined = BUF_INIT, told = BUF_INIT;
	/* Of one part, the fence's lock is taken before (SQL_FENCE_PART). */
	buf_puts_replacing(&unlocked, buf_str(&text), COMMIT_LOCK, in_part ? "" : COMMIT_LOCK);
	int inline_ok =
	    in_part &&
	    !(parts & (part_bit(SLOT_kn_run) | part_bit(SLOT_kid_run) | part_bit(SLOT_can_run)));
	buf_puts_replacing(&inlined, buf_str(&unlocked), OK_AS,
	                   inline_ok ? "NOT MATERIALIZED " : "");
	buf_puts_replacing(&told, buf_str(&inlined), IN_PARENTS, in_part ? parents : "");
	sqlparam_in_part(buf_str(&told), in_part ? part : NULL, &resolved);
	text.oom |= unlocked.oom | inlined.oom | told.oom;
	buf_free(&unlocked);
	buf_free(&inlined);
	buf_free(&told);
	int rc = text.oom || resolved.oom ? -CAIRN_ENOMEM
	                                  : sqlparam_bind(buf_str(&resolved), names, n, sql, err);
	buf_free(&text);
	buf_free(&resolved);
	return rc;
}

int commit_values(const commit_params *p, unsigned parts, const char *values[COMMIT_NSLOTS])
{
	int slots[COMMIT_NSLOTS];
	int n = part_slots(parts, slots);
	for (int i = 0; i < n; i++)
		values[i] = p->values[slots[i]];
	return n;
}

static void add_ms(pgarr *a, int64_t ms)
{
	if (ms)
		pgarr_add_i64(a, ms);
	else
		pgarr_add(a, NULL);
}

/* Adds a value of a field f (NULL: SQL NULL), sealed when there are keys. */
static void add_sealed(pgarr *a, const seal_keys *k, seal_field f, const char *v)
{
	if (!v || !k) {
		pgarr_add(a, v);
		return;
	}
	buf sealed = BUF_INIT;
	if (seal_value(k, f, v, &sealed) == 0)
		pgarr_add(a, buf_str(&sealed));
	else
		a->b.oom = 1;
	buf_free(&sealed);
}

/* Adds message text as valid UTF-8 (a message cut in the middle of a
 * character must not make the database refuse the whole commit). */
static void add_text(pgarr *a, const seal_keys *k, seal_field f, const char *s)
{
	if (!s || utf8_valid(s)) {
		add_sealed(a, k, f, s);
		return;
	}
	buf clean = BUF_INIT;
	utf8_clean(s, &clean);
	add_sealed(a, k, f, buf_str(&clean));
	if (clean.oom)
		a->b.oom = 1;
	buf_free(&clean);
}

/* start: the run's start from now on, in Unix ms; START_NONE or START_KEEP. */
enum { START_NONE = 0, START_KEEP = -1 };

static void add_run_update(commit_params *p, const commit *c, run_status st, int finished,
                           int64_t start)
{
	pgarr_add_i64(&p->slot[SLOT_u_run], c->run.id);
	pgarr_add(&p->slot[SLOT_u_status], run_status_name(st));
	add_sealed(&p->slot[SLOT_u_output], p->keys, SEAL_RUN_OUTPUT, c->output);
	add_text(&p->slot[SLOT_u_error], p->keys, SEAL_RUN_ERROR, c->error);
	pgarr_add_i64(&p->slot[SLOT_u_attempt], c->attempt);
	pgarr_add(&p->slot[SLOT_u_finished], finished ? "t" : "f");
	add_ms(&p->slot[SLOT_u_start], start);
	pgarr_add(&p->slot[SLOT_u_version], p->code_version);
	pgarr_add_i64(&p->slot[SLOT_u_cut], c->outcome == COMMIT_RETRY);
}

/* Whether the claim took the run's start. */
static int claimed_start(const commit *c)
{
	for (int k = 0; k < c->run.nmsgs; k++)
		if (c->run.msgs[k] == MSG_START_ID)
			return 1;
	return 0;
}

static void add_claimed(pgarr *a, const commit *c)
{
	for (int k = 0; k < c->run.nmsgs; k++)
		if (c->run.msgs[k] != MSG_START_ID)
			pgarr_add_i64(a, c->run.msgs[k]);
}

static void add_new_message(commit_params *p, const commit *c, msg_kind kind)
{
	pgarr_add_i64(&p->slot[SLOT_new_run], c->run.id);
	pgarr_add(&p->slot[SLOT_new_kind], msg_kind_name(kind));
	pgarr_add_i64(&p->slot[SLOT_new_at], c->at_ms);
}

/* The signal a finished child sends its parent: {"status", "output", "error"}. */
static void add_child_end(commit_params *p, const commit *c)
{
	pgarr *s = p->slot;
	char name[64];
	/* Its parent started the first run of its chain. */
	snprintf(name, sizeof name, CHILD_SIGNAL_PREFIX "%" PRId64,
	         c->run.chain ? c->run.chain : c->run.id);
	cJSON *err = cJSON_CreateString(c->error ? c->error : "");
	char *etext = err && c->error ? cJSON_PrintUnformatted(err) : NULL;
	buf payload = BUF_INIT;
	buf_printf(&payload, "{\"status\":\"%s\",\"output\":%s,\"error\":%s}",
	           run_status_name(c->status), c->output ? c->output : "null",
	           etext ? etext : "null");
	if ((c->error && !etext) || payload.oom)
		s[SLOT_kid_payload].b.oom = 1;
	pgarr_add_i64(&s[SLOT_kid_run], c->run.id);
	pgarr_add_i64(&s[SLOT_kid_child], c->run.chain ? c->run.chain : c->run.id);
	pgarr_add_i64(&s[SLOT_kid_parent], c->run.parent);
	pgarr_add(&s[SLOT_kid_name], name);
	add_sealed(&s[SLOT_kid_payload], p->keys, SEAL_SIGNAL_PAYLOAD, buf_str(&payload));
	buf_free(&payload);
	cJSON_free(etext);
	cJSON_Delete(err);
}

/* The children the commit starts, their inputs sealed as a run's. */
static void add_children(commit_params *p, const commit *c)
{
	pgarr *s = p->slot;
	for (int k = 0; k < c->nkids; k++) {
		const commit_child *kid = &c->kids[k];
		pgarr_add_i64(&s[SLOT_kn_run], c->run.id);
		pgarr_add_i64(&s[SLOT_kn_id], kid->id);
		pgarr_add(&s[SLOT_kn_workflow], kid->workflow);
		pgarr_add(&s[SLOT_kn_key], kid->key);
		pgarr_add_i64(&s[SLOT_kn_shard], kid->shard);
		pgarr_add(&s[SLOT_kn_group], kid->group);
		add_sealed(&s[SLOT_kn_input], p->keys, SEAL_RUN_INPUT, kid->input);
		pgarr_add(&s[SLOT_kn_tp], kid->tp[0] ? kid->tp : NULL);
	}
}

/* The wait for children a run suspends in. */
static void add_await(commit_params *p, const commit *c)
{
	pgarr *s = p->slot;
	if (!c->await.n)
		return;
	pgarr_add_i64(&s[SLOT_aw_run], c->run.id);
	pgarr_add_i64(&s[SLOT_aw_seq], c->await.seq);
	pgarr_add_i64(&s[SLOT_aw_want], c->await.want);
	for (int k = 0; k < c->await.n; k++) {
		pgarr_add_i64(&s[SLOT_awc_run], c->run.id);
		pgarr_add_i64(&s[SLOT_awc_child], c->await.children[k]);
	}
}

/* Whether a commit's own write gives its execution's count back, fenced or
 * not: a hand-over (an execution's final JOURNAL, or UNCLAIM). */
static int gives_count_back(const commit *c)
{
	return c->outcome == COMMIT_UNCLAIM || (c->outcome == COMMIT_JOURNAL && c->final);
}

static void encode_one(commit_params *p, const commit *c)
{
	pgarr *s = p->slot;
	pgarr_add_i64(&s[SLOT_b_run], c->run.id);
	pgarr_add(&s[SLOT_b_group], c->run.group);
	pgarr_add_i64(&s[SLOT_b_shard], c->run.shard);
	pgarr_add_i64(&s[SLOT_b_owner], c->run.owner);
	pgarr_add_i64(&s[SLOT_b_epoch], c->run.epoch);
	for (int k = 0; k < c->nrows; k++) {
		const jrow *r = &c->rows[k];
		pgarr_add_i64(&s[SLOT_j_run], c->run.id);
		pgarr_add_i64(&s[SLOT_j_seq], r->seq);
		pgarr_add(&s[SLOT_j_name], r->name);
		pgarr_add(&s[SLOT_j_kind], step_kind_name(r->kind));
		pgarr_add(&s[SLOT_j_status], step_status_name(r->status));
		add_sealed(&s[SLOT_j_output], p->keys, SEAL_STEP_OUTPUT, r->output);
		add_text(&s[SLOT_j_error], p->keys, SEAL_STEP_ERROR, r->error);
		if (r->kind == KIND_EVENT && r->status == STEP_COMPLETED) {
			pgarr_add_i64(&s[SLOT_ev_run], c->run.id);
			pgarr_add(&s[SLOT_ev_key], r->name + sizeof EVENT_STEP_PREFIX - 1);
			add_sealed(&s[SLOT_ev_value], p->keys, SEAL_EVENT_VALUE, r->output);
			pgarr_add_i64(&s[SLOT_ev_seq], r->seq);
		}
		pgarr_add_i64(&s[SLOT_j_attempts], r->attempts);
		add_ms(&s[SLOT_j_wake], r->wake_ms);
		add_ms(&s[SLOT_j_started], r->started_ms);
		add_ms(&s[SLOT_j_finished], r->finished_ms);
	}
	for (int k = 0; k < c->nsig; k++) {
		pgarr_add_i64(&s[SLOT_sig_id], c->sig_ids[k]);
		pgarr_add_i64(&s[SLOT_sig_seq], c->sig_seqs[k]);
		pgarr_add_i64(&s[SLOT_sig_run], c->run.id);
	}
	add_children(p, c);
	switch (c->outcome) {
	case COMMIT_JOURNAL:
		/* A hand-over gives its claim back (a stop that is not a crash
		 * never counts); a flush while running is progress. */
		if (c->final)
			pgarr_add_i64(&s[SLOT_unclaim_run], c->run.id);
		else if (c->nrows || c->nsig)
			pgarr_add_i64(&s[SLOT_prog_run], c->run.id);
		break;
	case COMMIT_SUSPEND:
		add_run_update(p, c, c->status, 0, START_NONE);
		add_claimed(&s[SLOT_del_msg], c);
		if (c->at_ms)
			add_new_message(p, c, MSG_WAKE);
		add_await(p, c);
		break;
	case COMMIT_FINISH:
		add_run_update(p, c, c->status, 1, START_NONE);
		pgarr_add_i64(&s[SLOT_del_run], c->run.id);
		if (c->next_input) {
			pgarr_add_i64(&s[SLOT_cont_run], c->run.id);
			pgarr_add_i64(&s[SLOT_cont_id], c->next_id);
			add_sealed(&s[SLOT_cont_input], p->keys, SEAL_RUN_INPUT, c->next_input);
			for (int k = 0; k < c->nsig; k++)
				pgarr_add_i64(&s[SLOT_cont_taken], c->sig_ids[k]);
		} else if (c->run.parent) {
			add_child_end(p, c);
		}
		if (c->status == RUN_CANCELLED)
			pgarr_add_i64(&s[SLOT_can_run], c->run.id);
		break;
	case COMMIT_RETRY:
		add_run_update(p, c, RUN_PENDING, 0, c->at_ms);
		pgarr_add_i64(&s[SLOT_reset_run], c->run.id);
		pgarr_add_i64(&s[SLOT_reset_from], c->retry_from);
		add_claimed(&s[SLOT_del_msg], c);
		break;
	case COMMIT_DEFER: {
		add_run_update(p, c, RUN_PENDING, 0, claimed_start(c) ? c->at_ms : START_KEEP);
		/* Each claimed message (not the start) is due again at at_ms. */
		int from = s[SLOT_defer_msg].n;
		add_claimed(&s[SLOT_defer_msg], c);
		for (int k = from; k < s[SLOT_defer_msg].n; k++)
			pgarr_add_i64(&s[SLOT_defer_at], c->at_ms);
		break;
	}
	case COMMIT_MOVE:
		pgarr_add_i64(&s[SLOT_mv_run], c->run.id);
		pgarr_add(&s[SLOT_mv_group], c->move_to);
		break;
	case COMMIT_DISCARD: add_claimed(&s[SLOT_del_msg], c); break;
	case COMMIT_UNCLAIM: pgarr_add_i64(&s[SLOT_unclaim_run], c->run.id); break;
	case COMMIT_MARK:
	case COMMIT_START:
	case COMMIT_START_RUN:
	case COMMIT_UNQUEUE: break; /* written by write_marks */
	}
	/* Its count comes back if the fence refuses the rest (see unc). */
	if (c->final && !gives_count_back(c))
		pgarr_add_i64(&s[SLOT_refund_run], c->run.id);
}

int commit_encode(commit *const *batch, int n, const seal_keys *keys, const char *code_version,
                  commit_params *p)
{
	p->keys = keys;
	p->code_version = code_version;
	for (int i = 0; i < COMMIT_NSLOTS; i++)
		p->slot[i] = (pgarr)PGARR_INIT;
	for (int i = 0; i < n; i++)
		encode_one(p, batch[i]);
	int oom = 0;
	for (int i = 0; i < COMMIT_NSLOTS; i++) {
		p->values[i] = pgarr_str(&p->slot[i]);
		oom |= p->slot[i].b.oom;
	}
	if (oom) {
		commit_params_free(p);
		return -CAIRN_ENOMEM;
	}
	return 0;
}

void commit_params_free(commit_params *p)
{
	for (int i = 0; i < COMMIT_NSLOTS; i++)
		pgarr_free(&p->slot[i]);
}

/* ------------------------------------------------------------- committer */

struct committer {
	committer_env env;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* the queue has a commit, or stop */
	pthread_cond_t done_cv; /* a commit is done */
	commit *head, *tail;
	int stop;
	int64_t *refund; /* runs whose final writes were lost: their counts to give back */
	int nrefund, caprefund;
	int failures;    /* failed connects since the last write that succeeded */
	int64_t pid;     /* the server process of the commit connection */
	int64_t old_pid; /* that of a connection that broke with a write in flight; 0: none */
	int big_write;   /* the last statement sent more than DB_BUFFER_KEEP_MAX */
	/* The sets of parts whose statement the connection has prepared (as
	 * cairn_commit_<parts in hex>), one bit each: a set is prepared the
	 * first time a batch needs it, and a worker meets a handful. */
	unsigned char prepared[(COMMIT_ALL_PARTS + 1) / 8];
	unsigned char prepared_part[(COMMIT_ALL_PARTS + 1) / 8]; /* the same, of one part */
	db_settings st; /* the commit connection's read of cairn.settings (its parts) */
};

/* The failure of one statement: whether the values were at fault. */
enum { BATCH_DB = -CAIRN_EDB, BATCH_VALUES = -CAIRN_EINVAL };

/* Writes one batch: 0, BATCH_VALUES when the database refused the values
 * themselves (data exception, program limit), BATCH_DB otherwise. */
/*
 * The marker's statement, one for the whole batch. $1: executions that
 * start, counted (COMMIT_MARK). A mark is a count, not a result: it needs
 * no fence (every write of the execution that follows is fenced). $2, $3:
 * runners whose queued runs up to a runs.queued_seq start (COMMIT_START):
 * one UPDATE of each runner's row, whatever the number of runs. $4, $5:
 * queued runs no longer numbered, by run and runner, unless another
 * runner's claim counted the run since (queued_by): $6 true, one that will
 * not start here (COMMIT_UNQUEUE), its count given back, so that no later
 * START counts it; false, one that starts on its own (COMMIT_START_RUN),
 * its count holding.
 */
static const char SQL_MARK[] =
    "WITH s AS (UPDATE cairn.runners w SET started_upto = greatest(w.started_upto, x.upto) "
    "      FROM (SELECT rn, max(upto) AS upto FROM unnest($2::bigint[], $3::bigint[]) "
    "            AS x(rn, upto) GROUP BY rn) x WHERE w.id = x.rn), "
    "u AS (UPDATE cairn.runs r SET claims = CASE WHEN u.back THEN greatest(r.claims - 1, 0) "
    "        ELSE r.claims END, queued_by = NULL "
    "      FROM unnest($4::bigint[], $5::bigint[], $6::boolean[]) AS u(run, rn, back) "
    "      WHERE r.id = u.run AND r.queued_by = u.rn) "
    "UPDATE cairn.runs SET claims = claims + 1 WHERE id = ANY ($1::bigint[]) "
    "RETURNING id, cancel_requested";

/* SQL_MARK on a database with parts (Citus): the runners' started_upto, a
 * reference table's rows, in a statement of its own on the coordinator
 * (SQL_MARK_STARTS), then the runs' counts part by part, each one router
 * statement (SQL_MARK_PART, $5 the part's key). */
static const char SQL_MARK_STARTS[] =
    "UPDATE cairn.runners w SET started_upto = greatest(w.started_upto, x.upto) "
    "FROM (SELECT rn, max(upto) AS upto FROM unnest($1::bigint[], $2::bigint[]) "
    "      AS x(rn, upto) GROUP BY rn) x WHERE w.id = x.rn";
static const char SQL_MARK_PART[] =
    "WITH u AS (UPDATE cairn.runs r SET claims = CASE WHEN u.back THEN greatest(r.claims - 1, 0) "
    "        ELSE r.claims END, queued_by = NULL "
    "      FROM unnest($2::bigint[], $3::bigint[], $4::boolean[]) AS u(run, rn, back) "
    "      WHERE r.part = $5 AND r.id = u.run AND r.queued_by = u.rn) "
    "UPDATE cairn.runs SET claims = claims + 1 WHERE part = $5 AND id = ANY ($1::bigint[]) "
    "RETURNING id, cancel_requested";

/* The part_no of the part of a commit's run (its shard's), with n parts. */
static int part_no(const commit *c, int n)
{
	return c->run.shard % n;
}

/* Marks the commits whose runs the statement's rows name (id,
 * cancel_requested) as written; the others as refused. */
static void settle_rows(commit *const *batch, int n, const PGresult *r)
{
	for (int i = 0; i < n; i++)
		batch[i]->ok = 0;
	int woken = PQnfields(r) > 2;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t id = db_get_i64(r, row, 0);
		for (int i = 0; i < n; i++)
			if (batch[i]->run.id == id) {
				batch[i]->ok = 1;
				batch[i]->cancel_requested = db_get_bool(r, row, 1);
				batch[i]->woken = woken && db_get_bool(r, row, 2);
			}
	}
}

static int write_marks_parts(committer *k, PGconn *conn, commit *const *batch, int n, buf *err);

static int write_marks(committer *k, PGconn *conn, commit *const *batch, int n, buf *err)
{
	if (k->st.nparts > 1)
		return write_marks_parts(k, conn, batch, n, err);
	enum { MARKS, START_RUNNER, START_UPTO, UNQUEUE_RUN, UNQUEUE_RUNNER, UNQUEUE_BACK, NARR };
	pgarr a[NARR] = {PGARR_INIT, PGARR_INIT, PGARR_INIT, PGARR_INIT, PGARR_INIT, PGARR_INIT};
	for (int i = 0; i < n; i++) {
		const commit *c = batch[i];
		if (c->outcome == COMMIT_MARK) {
			pgarr_add_i64(&a[MARKS], c->run.id);
		} else if (c->outcome == COMMIT_START) {
			pgarr_add_i64(&a[START_RUNNER], c->run.owner);
			pgarr_add_i64(&a[START_UPTO], c->upto);
		} else {
			pgarr_add_i64(&a[UNQUEUE_RUN], c->run.id);
			pgarr_add_i64(&a[UNQUEUE_RUNNER], c->run.owner);
			pgarr_add(&a[UNQUEUE_BACK], c->outcome == COMMIT_UNQUEUE ? "t" : "f");
		}
	}
	const char *p[NARR];
	int oom = 0;
	for (int i = 0; i < NARR; i++) {
		p[i] = pgarr_str(&a[i]);
		oom |= a[i].b.oom;
	}
	PGresult *r = oom ? NULL : PQexecPrepared(conn, "cairn_mark", NARR, p, NULL, NULL, 0);
	for (int i = 0; i < NARR; i++)
		pgarr_free(&a[i]);
	int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : BATCH_DB;
	if (rc) {
		buf_reset(err);
		buf_puts(err, r ? PQresultErrorMessage(r) : "out of memory encoding marks");
	} else {
		/* A mark holds when its run is still there; the rest when the
		 * statement does. */
		settle_rows(batch, n, r);
		for (int i = 0; i < n; i++)
			if (batch[i]->outcome != COMMIT_MARK)
				batch[i]->ok = 1;
	}
	PQclear(r);
	return rc;
}

/* write_marks on a database with parts: the starts, then each part's
 * marks. */
static int write_marks_parts(committer *k, PGconn *conn, commit *const *batch, int n, buf *err)
{
	pgarr runner = PGARR_INIT, upto = PGARR_INIT;
	for (int i = 0; i < n; i++)
		if (batch[i]->outcome == COMMIT_START) {
			pgarr_add_i64(&runner, batch[i]->run.owner);
			pgarr_add_i64(&upto, batch[i]->upto);
		}
	int rc = 0;
	if (runner.n) {
		const char *p[] = {pgarr_str(&runner), pgarr_str(&upto)};
		rc = runner.b.oom || upto.b.oom || db_cmd(conn, err, SQL_MARK_STARTS, 2, p) < 0
		         ? BATCH_DB
		         : 0;
	}
	pgarr_free(&runner);
	pgarr_free(&upto);
	for (int i = 0; i < n; i++)
		batch[i]->ok = batch[i]->outcome != COMMIT_MARK;
	for (int part = 0; part < k->st.nparts && !rc; part++) {
		enum { MARKS, UNQUEUE_RUN, UNQUEUE_RUNNER, UNQUEUE_BACK, NARR };
		pgarr a[NARR] = {PGARR_INIT, PGARR_INIT, PGARR_INIT, PGARR_INIT};
		for (int i = 0; i < n; i++) {
			const commit *c = batch[i];
			if (c->outcome == COMMIT_START || part_no(c, k->st.nparts) != part)
				continue;
			if (c->outcome == COMMIT_MARK) {
				pgarr_add_i64(&a[MARKS], c->run.id);
			} else {
				pgarr_add_i64(&a[UNQUEUE_RUN], c->run.id);
				pgarr_add_i64(&a[UNQUEUE_RUNNER], c->run.owner);
				pgarr_add(&a[UNQUEUE_BACK],
				          c->outcome == COMMIT_UNQUEUE ? "t" : "f");
			}
		}
		if (a[MARKS].n || a[UNQUEUE_RUN].n) {
			char key[24];
			const char *p[NARR + 1];
			int oom = 0;
			for (int i = 0; i < NARR; i++) {
				p[i] = pgarr_str(&a[i]);
				oom |= a[i].b.oom;
			}
			p[NARR] = db_i64(key, k->st.part_keys[part]);
			PGresult *r = oom ? NULL : db_exec(conn, err, SQL_MARK_PART, NARR + 1, p);
			if (!r) {
				rc = BATCH_DB;
			} else {
				for (int row = 0; row < PQntuples(r); row++) {
					int64_t id = db_get_i64(r, row, 0);
					for (int i = 0; i < n; i++)
						if (batch[i]->run.id == id) {
							batch[i]->ok = 1;
							batch[i]->cancel_requested =
							    db_get_bool(r, row, 1);
						}
				}
				PQclear(r);
			}
		}
		for (int i = 0; i < NARR; i++)
			pgarr_free(&a[i]);
	}
	return rc;
}

/* Whom a written batch tells, after it (SQL_DONE's parameters). */
typedef struct tellings {
	pgarr done, events, parents, cancelled, started;
	int64_t self; /* this runner: the owner of the leases of the commits */
} tellings;
#define TELLINGS_INIT                                                                              \
	{                                                                                          \
		PGARR_INIT, PGARR_INIT, PGARR_INIT, PGARR_INIT, PGARR_INIT, 0                      \
	}

/* How long the committer may keep the tellings of written batches while
 * more commits wait: under load one SQL_DONE tells for several batches,
 * instead of a transaction of its own in every cycle of the committer. */
#define TELL_DELAY_MS 5

static int has_event(const commit *c)
{
	for (int k = 0; k < c->nrows; k++)
		if (c->rows[k].kind == KIND_EVENT)
			return 1;
	return 0;
}

/* Adds whom batch tells to t. */
static void collect_tellings(commit *const *batch, int n, tellings *t)
{
	for (int i = 0; i < n; i++) {
		const commit *c = batch[i];
		int fin = c->ok && c->outcome == COMMIT_FINISH;
		if (fin)
			pgarr_add_i64(&t->done, c->run.id);
		if (fin && c->run.parent && !c->next_input)
			pgarr_add_i64(&t->parents, c->run.parent);
		if (c->ok && c->outcome == COMMIT_MOVE) /* its new owner claims it */
			pgarr_add_i64(&t->parents, c->run.id);
		if (fin && c->status == RUN_CANCELLED)
			pgarr_add_i64(&t->cancelled, c->run.id);
		if (c->ok && has_event(c))
			pgarr_add_i64(&t->events, c->run.id);
		for (int k = 0; c->ok && k < c->nkids; k++)
			pgarr_add_i64(&t->started, c->kids[k].id);
		t->self = c->run.owner;
	}
}

/* Sends SQL_DONE (SQL_DONE_CANCELLED when runs ended cancelled) for t
 * (and empties t) without waiting for its answer,
 * which notify_collect reads before conn is used again: the server tells
 * the waiters while the committer takes the next batch. Returns whether it
 * sent one. */
static int notify_parts(committer *k, PGconn *conn, tellings *t);

static int notify_send(committer *k, PGconn *conn, tellings *t)
{
	if (k->st.nparts > 1)
		return notify_parts(k, conn, t);
	pgarr *a[] = {&t->done, &t->events, &t->parents, &t->cancelled, &t->started};
	enum { N = sizeof a / sizeof a[0] };
	const char *p[N + 1];
	char self[24];
	int any = 0, oom = 0;
	for (int i = 0; i < N; i++) {
		p[i] = pgarr_str(a[i]);
		any |= a[i]->n > 0;
		oom |= a[i]->b.oom;
	}
	p[N] = db_i64(self, t->self);
	const char *name = t->cancelled.n ? "cairn_done_cancelled" : "cairn_done";
	int sent = conn && any && !oom && PQsendQueryPrepared(conn, name, N + 1, p, NULL, NULL, 0);
	for (int i = 0; i < N; i++)
		pgarr_free(a[i]);
	return sent;
}

/*
 * SQL_DONE on a database with parts (Citus), where a notification sent by
 * a statement that reads a distributed table goes out on the worker node,
 * not on the coordinator where the relay listens: the runs that finished
 * and published events are told from the coordinator (SQL_TELL, which reads
 * no table); the owners of the parents and of the children started are
 * woken by cairn.wake_runs (migration 0025) part by part, which reads each
 * run in its part and notifies from the coordinator. The children of
 * cancelled runs are read over every part (SQL_CANCELLED_KIDS; only after
 * a batch that ended runs cancelled), then told and woken the same way.
 * A parent's owner is woken whether or not the parent is due: a claim
 * that finds nothing costs it one statement. Waits for its answers: 0.
 */
static const char SQL_TELL[] =
    "SELECT count(pg_notify('" CAIRN_DONE_CHANNEL "', id::text)) FROM unnest($1::bigint[]) id "
    "UNION ALL "
    "SELECT count(pg_notify('" CAIRN_EVENT_CHANNEL "', id::text)) FROM unnest($2::bigint[]) id";
static const char SQL_WAKE_PART[] = "SELECT cairn.wake_runs($1::bigint[], $2, $3)";
static const char SQL_CANCELLED_KIDS[] =
    "SELECT id, shard, status = 'cancelled' FROM cairn.runs WHERE parent_id = ANY ($1::bigint[]) "
    "  AND (finished_at IS NULL OR status = 'cancelled')";

/* Wakes the owners of runs (their shards in shards), part by part. */
static void wake_parts(committer *k, PGconn *conn, const int64_t *runs, const int *shards, int n,
                       int cancel, buf *err)
{
	for (int part = 0; part < k->st.nparts; part++) {
		pgarr a = PGARR_INIT;
		for (int i = 0; i < n; i++)
			if (shards[i] % k->st.nparts == part)
				pgarr_add_i64(&a, runs[i]);
		char key[24];
		const char *p[] = {pgarr_str(&a), db_i64(key, k->st.part_keys[part]),
		                   cancel ? "t" : "f"};
		if (a.n && !a.b.oom)
			db_cmd(conn, err, SQL_WAKE_PART, 3, p);
		pgarr_free(&a);
	}
}

static int notify_parts(committer *k, PGconn *conn, tellings *t)
{
	pgarr *a[] = {&t->done, &t->events, &t->parents, &t->cancelled, &t->started};
	if (!conn) {
		for (size_t i = 0; i < sizeof a / sizeof *a; i++)
			pgarr_free(a[i]);
		return 0;
	}
	buf err = BUF_INIT;
	pgarr *tell[] = {&t->done, &t->events};
	if (t->done.n || t->events.n) {
		const char *p[] = {pgarr_str(tell[0]), pgarr_str(tell[1])};
		db_cmd(conn, &err, SQL_TELL, 2, p);
	}
	/* The parents and the children started: their ids carry their shards
	 * (runs older than parts carry none: the poll finds their work). */
	int n = t->parents.n + t->started.n, m = 0;
	int64_t *wake = malloc((size_t)(n ? n : 1) * sizeof *wake);
	int *shards = malloc((size_t)(n ? n : 1) * sizeof *shards);
	pgarr *from[] = {&t->parents, &t->started};
	for (int f = 0; wake && shards && f < 2; f++)
		for (const char *c = pgarr_str(from[f]); *c;) {
			char *end;
			long long id = strtoll(c + 1, &end, 10);
			if (end == c + 1)
				break;
			if (id >= k->st.first_placed_id && m < n) {
				wake[m] = id;
				shards[m++] = (int)(id % RUN_ID_SHARDS);
			}
			c = end;
		}
	if (wake && shards)
		wake_parts(k, conn, wake, shards, m, 0, &err);
	free(wake);
	free(shards);
	if (t->cancelled.n) {
		const char *p[] = {pgarr_str(&t->cancelled)};
		PGresult *r = db_exec(conn, &err, SQL_CANCELLED_KIDS, 1, p);
		int rows = r ? PQntuples(r) : 0;
		int64_t *kids = malloc((size_t)(rows ? rows : 1) * sizeof *kids);
		int *kshards = malloc((size_t)(rows ? rows : 1) * sizeof *kshards);
		pgarr ended = PGARR_INIT, none = PGARR_INIT;
		int live = 0;
		for (int i = 0; kids && kshards && i < rows; i++) {
			if (db_get_bool(r, i, 2)) {
				pgarr_add_i64(&ended, db_get_i64(r, i, 0));
				continue;
			}
			kids[live] = db_get_i64(r, i, 0);
			kshards[live++] = db_get_int(r, i, 1);
		}
		PQclear(r);
		if (ended.n) {
			const char *pe[] = {pgarr_str(&ended), pgarr_str(&none)};
			db_cmd(conn, &err, SQL_TELL, 2, pe);
		}
		if (kids && kshards)
			wake_parts(k, conn, kids, kshards, live, 1, &err);
		pgarr_free(&ended);
		pgarr_free(&none);
		free(kids);
		free(kshards);
	}
	buf_free(&err);
	for (size_t i = 0; i < sizeof a / sizeof *a; i++)
		pgarr_free(a[i]);
	return 0;
}

/* Reads the answer of notify_send, if one is pending. */
static void notify_collect(PGconn *conn, int *pending)
{
	PGresult *r;
	while (*pending && (r = PQgetResult(conn)))
		PQclear(r);
	*pending = 0;
}

/* Sends SQL_DONE for t (and empties t), and waits for its answer. */
static void notify_done(committer *k, PGconn *conn, tellings *t)
{
	int sent = notify_send(k, conn, t);
	notify_collect(conn, &sent);
}

/* Prepares the statement of parts (of one part: in_part) on conn unless it
 * is: 0, or BATCH_DB. */
static int prepare_parts(committer *k, PGconn *conn, unsigned parts, int in_part, const char *name,
                         buf *err)
{
	unsigned char bit = (unsigned char)(1u << (parts % 8));
	unsigned char *prepared = in_part ? k->prepared_part : k->prepared;
	if (prepared[parts / 8] & bit)
		return 0;
	buf sql = BUF_INIT;
	buf_reset(err);
	int rc = commit_statement_part(parts, in_part, &sql, err);
	db_stmt st = {name, buf_str(&sql)};
	if (!rc)
		rc = db_prepare(conn, &st, 1, err);
	buf_free(&sql);
	if (rc)
		return BATCH_DB;
	prepared[parts / 8] |= bit;
	return 0;
}

static int write_statement(committer *k, PGconn *conn, commit *const *batch, int n,
                           const char *part, buf *err);

/* A batch on a database with parts (Citus): a statement per part its
 * commits are in, each a commit of its own. A batch was never one
 * transaction's worth of meaning (a failed one is written again commit by
 * commit), so one that fails after some parts were written is too. */
static int write_parts(committer *k, PGconn *conn, commit *const *batch, int n, buf *err)
{
	commit **sub = malloc((size_t)n * sizeof *sub);
	if (!sub) {
		buf_reset(err);
		buf_puts(err, "out of memory splitting a commit by part");
		return BATCH_DB;
	}
	int rc = 0;
	for (int part = 0; part < k->st.nparts && !rc; part++) {
		int m = 0;
		for (int i = 0; i < n; i++)
			if (part_no(batch[i], k->st.nparts) == part)
				sub[m++] = batch[i];
		char key[24];
		if (m)
			rc = write_statement(k, conn, sub, m, db_i64(key, k->st.part_keys[part]),
			                     err);
	}
	free(sub);
	return rc;
}

static int write_batch(committer *k, PGconn *conn, commit *const *batch, int n, buf *err)
{
	if (k->env.async_commit)
		return write_marks(k, conn, batch, n, err); /* the marker takes nothing else */
	if (k->st.nparts > 1)
		return write_parts(k, conn, batch, n, err);
	return write_statement(k, conn, batch, n, NULL, err);
}

/*
 * The fence of one part on Citus, a statement of its own in the commit's
 * transaction: the lease rows of the batch's shards, locked shared in the
 * same order (one task, on the node of the part). Citus 13.2 fails a
 * statement whose INSERT ... SELECT reads the result of a CTE locked FOR
 * SHARE ('invalid input syntax for type bigint: "PGCOPY"' on the node), so
 * the commit's statement of a part reads the rows it locked here, which no
 * epoch bump can change before the transaction ends, without a lock of
 * its own: $1 the part's key, $2, $3 the batch's groups and shards.
 */
static const char SQL_FENCE_PART[] = "SELECT 1 FROM cairn.shard_leases l "
                                     "WHERE l.part = $1 AND (l.shard_group, l.shard) IN "
                                     "  (SELECT * FROM unnest($2::text[], $3::int[])) "
                                     "ORDER BY l.shard_group, l.shard FOR SHARE OF l";

const char *commit_sql_fence_part(void)
{
	return SQL_FENCE_PART;
}

/* Writes batch with one statement (of one part: part, its key, in a
 * transaction with its fence): 0, or BATCH_VALUES, or BATCH_DB. */
static int write_statement(committer *k, PGconn *conn, commit *const *batch, int n,
                           const char *part, buf *err)
{
	commit_params p;
	if (commit_encode(batch, n, k->env.keys, k->env.code_version, &p) < 0) {
		buf_reset(err);
		buf_puts(err, "out of memory encoding a commit");
		return BATCH_DB;
	}
	unsigned parts = commit_parts(&p);
	char name[32];
	snprintf(name, sizeof name, part ? "cairn_commit_part_%x" : "cairn_commit_%x", parts);
	if (prepare_parts(k, conn, parts, part != NULL, name, err) < 0) {
		commit_params_free(&p);
		return BATCH_DB;
	}
	const char *values[COMMIT_NSLOTS + 2];
	int nv = commit_values(&p, parts, values);
	pgarr parents = PGARR_INIT;
	if (part) {
		values[nv++] = part;
		if (commit_tells_parents(parts)) {
			commit_parent_parts(batch, n, &k->st, &parents);
			values[nv++] = pgarr_str(&parents);
		}
	}
	size_t bytes = 0;
	for (int i = 0; i < nv; i++)
		bytes += values[i] ? strlen(values[i]) : 0;
	k->big_write |= bytes > DB_BUFFER_KEEP_MAX;
	if (part) {
		const char *f[] = {part, values[SLOT_b_group], values[SLOT_b_shard]};
		PGresult *b = PQexec(conn, "BEGIN");
		PQclear(b);
		if (db_cmd(conn, err, SQL_FENCE_PART, 3, f) < 0) {
			PQclear(PQexec(conn, "ROLLBACK"));
			commit_params_free(&p);
			pgarr_free(&parents);
			return BATCH_DB;
		}
	}
	PGresult *r = PQexecPrepared(conn, name, nv, values, NULL, NULL, 0);
	commit_params_free(&p);
	pgarr_free(&parents);
	int rc = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		buf_reset(err);
		buf_puts(err, PQresultErrorMessage(r));
		const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		rc = st && (strncmp(st, "22", 2) == 0 || strncmp(st, "54", 2) == 0) ? BATCH_VALUES
		                                                                    : BATCH_DB;
	} else {
		settle_rows(batch, n, r);
	}
	PQclear(r);
	if (part) {
		PGresult *e = PQexec(conn, rc ? "ROLLBACK" : "COMMIT");
		if (!rc && PQresultStatus(e) != PGRES_COMMAND_OK) {
			buf_reset(err);
			buf_puts(err, PQresultErrorMessage(e));
			rc = BATCH_DB;
		}
		PQclear(e);
	}
	return rc;
}

/* The database refused a run's own writes with the connection fine: fail
 * the run with the database's message instead. */
static void fail_unstorable(committer *k, PGconn *conn, commit *c, buf *err)
{
	buf why = BUF_INIT;
	char id[24], attempt[24];
	buf_printf(&why, "cannot store the run's results: %s", buf_str(err));
	while (why.len && why.data[why.len - 1] == '\n')
		why.data[--why.len] = '\0';
	db_i64(id, c->run.id);
	db_i64(attempt, c->run.attempt);
	commit f = {.run = c->run,
	            .outcome = COMMIT_FINISH,
	            .status = RUN_FAILED,
	            .error = (char *)buf_str(&why),
	            .attempt = c->run.attempt};
	commit *one = &f;
	c->ok = 0;
	c->cancel_requested = 0;
	if (write_batch(k, conn, &one, 1, err) < 0)
		log_kv(k->env.log, LOG_ERROR, "a run's writes were refused, and so was its failure",
		       "run", id, "workflow", c->run.workflow, "attempt", attempt, "error",
		       buf_str(&why), "then", buf_str(err), NULL);
	else {
		/* Its one "run failed" line: on_final sees a refused commit. */
		log_kv(k->env.log, LOG_WARN, "run failed", "run", id, "workflow", c->run.workflow,
		       "attempt", attempt, "error",
		       k->env.keys ? "(sealed at rest: cairn status shows it)" : buf_str(&why),
		       NULL);
		if (c->run.mx)
			metrics_run(c->run.mx, METRICS_RUNS_FAILED);
		tellings t = TELLINGS_INIT;
		f.ok = 1;
		collect_tellings(&one, 1, &t);
		notify_done(k, conn, &t);
	}
	buf_free(&why);
}

static void stamp(committer *k)
{
	if (k->env.loop)
		watch_stamp(k->env.loop);
}

static const char *committer_name(const committer *k)
{
	return k->env.app_name ? k->env.app_name : "cairn-worker commit";
}

static PGconn *connect_committer(committer *k, buf *err)
{
	PGconn *c = db_connect(k->env.conninfo, committer_name(k), err);
	/* Its statements are planned once (generic plans): PostgreSQL would
	 * otherwise plan the marks and SQL_DONE again at every batch, their
	 * generic plan assuming ten ids where a custom one counts them, and
	 * planning cost more than running them (in a drain of 3-step runs,
	 * 0.45 ms to plan SQL_DONE against 0.03 ms to run it). */
	int flags = DB_SESSION_GENERIC_PLANS | (k->env.async_commit ? DB_SESSION_NO_DISK_WAIT : 0);
	if (c && db_session_limits(c, k->env.statement_timeout_ms, k->env.statement_timeout_ms / 2,
	                           flags, err) < 0) {
		PQfinish(c);
		c = NULL;
	}
	if (!c)
		return NULL;
	/* With parts (Citus), whose statements that join tables have no
	 * generic plan ("could not create distributed plan"), it plans each
	 * with its values. */
	if (db_read_settings(c, &k->st, err) < 0 ||
	    (k->st.nparts > 1 &&
	     db_cmd(c, err, "SELECT set_config('plan_cache_mode', 'auto', false)", 0, NULL) < 0)) {
		PQfinish(c);
		return NULL;
	}
	/* The marker (the committer whose commits do not wait for the disk)
	 * sends only SQL_MARK, and finishes no run; the commit connection sends
	 * SQL_DONE after batches that finished runs, and the commit statements,
	 * prepared as batches need them (prepare_parts). */
	memset(k->prepared, 0, sizeof k->prepared);
	memset(k->prepared_part, 0, sizeof k->prepared_part);
	static const db_stmt mark[] = {{"cairn_mark", SQL_MARK}},
	                     done[] = {{"cairn_done", SQL_DONE},
	                               {"cairn_done_cancelled", SQL_DONE_CANCELLED}};
	int rc = k->env.async_commit ? db_prepare(c, mark, 1, err) : db_prepare(c, done, 2, err);
	/* Its server process, to end it should the connection break with a
	 * write in flight (end_old_session). */
	if (!rc && (k->pid = db_server_pid(c, err)) < 0)
		rc = -CAIRN_EDB;
	if (rc) {
		PQfinish(c);
		return NULL;
	}
	return c;
}

/* Connects, retrying with backoff (stamping the watch: waiting for the
 * database is not being stuck) until it can; NULL once stopping after a
 * few failures. The backoff grows until a write succeeds. */
static PGconn *connect_retrying(committer *k, buf *err)
{
	for (;;) {
		PGconn *conn = connect_committer(k, err);
		if (conn)
			return conn;
		log_kv(k->env.log, LOG_WARN, "committer cannot connect; retrying", "error",
		       buf_str(err), NULL);
		for (int64_t until = clock_mono_ms() + db_backoff_ms(k->failures++);
		     clock_mono_ms() < until;) {
			stamp(k);
			int64_t left = until - clock_mono_ms(), slice = 100;
			usleep((useconds_t)((left < slice ? left : slice) * 1000));
		}
		pthread_mutex_lock(&k->mu);
		int stopping = k->stop;
		pthread_mutex_unlock(&k->mu);
		if (stopping && k->failures > 3)
			return NULL;
	}
}

/*
 * A write whose connection broke in flight (a statement timeout, a reset)
 * may still reach the server later: held in a network buffer, or waiting
 * for a lock. Landing after the worker took it for lost and ran the run
 * again, it would write a step's result or the run's end beside those of
 * the new execution, and the run and its journal would disagree. So before
 * the runs of such a write leave the in-flight set, the committer ends the
 * old session on the server and waits until its process is gone: what it
 * wrote is then there for the next claim to see, and nothing of it can come
 * later. (A worker that stops while the database is unreachable cannot; it
 * exits, its leases end, and the next owner's epoch fences the old session
 * out.)
 */
static const char SQL_END_SESSION[] =
    "SELECT coalesce(bool_and(pg_terminate_backend(pid, 1000)), true) FROM pg_stat_activity "
    "WHERE pid = $1 AND pid <> pg_backend_pid() AND application_name = $2 "
    "  AND datname = current_database()";

static void end_old_session(committer *k, PGconn **conn, buf *err)
{
	while (k->old_pid) {
		if (!*conn && !(*conn = connect_retrying(k, err)))
			return;
		char pid[24];
		const char *p[] = {db_i64(pid, k->old_pid), committer_name(k)};
		PGresult *r = db_exec(*conn, err, SQL_END_SESSION, 2, p);
		if (r && db_get_bool(r, 0, 0))
			k->old_pid = 0;
		else if (!r && db_ok(*conn)) {
			log_kv(k->env.log, LOG_ERROR, "cannot end the broken commit session",
			       "error", buf_str(err), NULL);
			k->old_pid = 0;
		}
		PQclear(r);
		if (!db_ok(*conn)) {
			PQfinish(*conn);
			*conn = NULL;
		}
		stamp(k);
	}
}

static void give_refunds(committer *k, PGconn *conn, buf *err);

/* Marks a batch done: wakes waiting executors, ends the session of a
 * broken connection and gives back the counts of lost final writes, hands
 * final commits back (their runs may then be claimed again). A waited-for
 * commit belongs to its executor again once it is done (it may be freed at
 * once), so the final ones are picked out before. */
static void settle(committer *k, commit **batch, int n, PGconn **conn, buf *err)
{
	commit *finals[COMMIT_MAX];
	int nfinal = 0;
	pthread_mutex_lock(&k->mu);
	for (int i = 0; i < n; i++)
		if (batch[i]->final)
			finals[nfinal++] = batch[i];
		else
			batch[i]->done = 1;
	pthread_cond_broadcast(&k->done_cv);
	pthread_mutex_unlock(&k->mu);
	end_old_session(k, conn, err);
	give_refunds(k, *conn, err);
	for (int i = 0; i < nfinal; i++) {
		commit *c = finals[i];
		c->done = 1;
		if (!c->ok && c->outcome != COMMIT_JOURNAL && c->outcome != COMMIT_DISCARD &&
		    c->outcome != COMMIT_UNCLAIM && c->outcome != COMMIT_UNQUEUE) {
			char id[24];
			log_kv(k->env.log, LOG_WARN,
			       "final write refused by the fence: the shard moved", "run",
			       db_i64(id, c->run.id), "workflow", c->run.workflow, NULL);
		}
		k->env.on_final(k->env.arg, c);
	}
}

/* Whether a written commit of batch started children. */
static int started_children(commit *const *batch, int n)
{
	for (int i = 0; i < n; i++)
		if (batch[i]->ok && batch[i]->nkids)
			return 1;
	return 0;
}

/* Whether no commit waits. */
static int queue_empty(committer *k)
{
	pthread_mutex_lock(&k->mu);
	int empty = !k->head;
	pthread_mutex_unlock(&k->mu);
	return empty;
}

int commit_batch_fits(commit *const *batch, int n, const commit *c)
{
	for (int i = 0; i < n; i++)
		if ((c->run.parent && batch[i]->run.id == c->run.parent) ||
		    batch[i]->run.parent == c->run.id)
			return 0;
	return 1;
}

/* Takes up to COMMIT_MAX queued commits, ending a batch before a commit
 * that does not fit it (commit_batch_fits; the marker's commits always
 * do); 0 when stopping with none left. Stamps the watch while it waits. */
static int take_batch(committer *k, commit **batch)
{
	pthread_mutex_lock(&k->mu);
	stamp(k);
	while (!k->head && !k->stop) {
		clock_cond_wait_ms(&k->work_cv, &k->mu,
		                   k->env.loop ? k->env.loop->interval_ms : 1000);
		stamp(k);
	}
	int n = 0;
	while (k->head && n < COMMIT_MAX &&
	       (k->env.async_commit || commit_batch_fits(batch, n, k->head))) {
		batch[n++] = k->head;
		k->head = k->head->next;
	}
	if (!k->head)
		k->tail = NULL;
	pthread_mutex_unlock(&k->mu);
	return n;
}

/*
 * A final write that failed wrote nothing: not the count of its execution
 * either, which only a crash of the worker should leave behind (see
 * CAIRN_POISON_AFTER). An execution that ended here while the database
 * restarted, or the commit connection broke, gives its count back once
 * the database answers again, before its run leaves the in-flight set
 * (and is claimed again, so that a count of a new execution is not taken).
 * A hand-over whose commit went through but whose answer was lost (the
 * database stopped in between) gives its count back twice: the run counts
 * a stop too few, never one too many. (Any other end that went through
 * reset the count to 0, which stays 0.)
 */
static const char SQL_REFUND[] =
    "UPDATE cairn.runs SET " GIVE_COUNT_BACK " WHERE id = ANY ($1::bigint[])";

/* Keeps the final writes of batch, which failed, for give_refunds. */
static void keep_refunds(committer *k, commit *const *batch, int n)
{
	for (int i = 0; i < n; i++) {
		/* Not an UNQUEUE: its run, still numbered, counts as never
		 * counted. */
		if (!batch[i]->final || batch[i]->outcome == COMMIT_UNQUEUE)
			continue;
		if (k->nrefund == k->caprefund) {
			int cap = k->caprefund ? k->caprefund * 2 : COMMIT_MAX;
			int64_t *g = realloc(k->refund, (size_t)cap * sizeof *g);
			if (!g)
				return; /* the run counts a stop too many, as before */
			k->refund = g;
			k->caprefund = cap;
		}
		k->refund[k->nrefund++] = batch[i]->run.id;
	}
}

/* Gives the kept counts back on conn (end_old_session connected it after a
 * break); keeps them while there is no connection. */
static void give_refunds(committer *k, PGconn *conn, buf *err)
{
	if (k->nrefund == 0 || !conn || !db_ok(conn))
		return;
	pgarr ids = PGARR_INIT;
	for (int i = 0; i < k->nrefund; i++)
		pgarr_add_i64(&ids, k->refund[i]);
	const char *p[] = {pgarr_str(&ids)};
	int rc = ids.b.oom ? -1 : db_cmd(conn, err, SQL_REFUND, 1, p);
	pgarr_free(&ids);
	if (rc < 0 && db_ok(conn))
		log_kv(k->env.log, LOG_WARN, "cannot give back the counts of lost final writes",
		       "error", buf_str(err), NULL);
	if (rc == 0 || db_ok(conn))
		k->nrefund = 0;
}

static void *committer_main(void *arg)
{
	committer *k = arg;
	PGconn *conn = NULL;
	buf err = BUF_INIT;
	commit *batch[COMMIT_MAX];
	int n, telling = 0;
	tellings told = TELLINGS_INIT; /* of written batches, not yet sent */
	int64_t told_since = 0;        /* when the oldest of them was written */
	/* Connected before the first commit comes (as docs/shards.md counts a
	 * worker's connections), once: else each worker of a fleet pays for
	 * its connection, settings and prepared statements (three transactions)
	 * within its first run's commit. Failing, the first batch connects,
	 * retrying; a committer with nothing to write stops at once. */
	conn = connect_committer(k, &err);
	while ((n = take_batch(k, batch)) > 0) {
		notify_collect(conn, &telling);
		if (!conn)
			conn = connect_retrying(k, &err);
		int rc = conn ? write_batch(k, conn, batch, n, &err) : BATCH_DB;
		if (rc < 0 && conn && db_ok(conn)) {
			/* One bad commit must not sink the others: write them one by
			 * one, and fail a run whose own writes the database refuses. */
			for (int i = 0; i < n; i++) {
				stamp(k); /* each of these is a statement of its own */
				int one = n == 1 ? rc : write_batch(k, conn, &batch[i], 1, &err);
				if (one == BATCH_VALUES)
					fail_unstorable(k, conn, batch[i], &err);
				else if (one < 0) {
					char id[24];
					log_kv(k->env.log, LOG_WARN,
					       "commit failed; the run will be retried", "run",
					       db_i64(id, batch[i]->run.id), "workflow",
					       batch[i]->run.workflow, "error", buf_str(&err),
					       NULL);
					batch[i]->ok = 0;
					keep_refunds(k, &batch[i], 1);
				}
			}
		} else if (rc < 0) {
			log_kv(k->env.log, LOG_WARN, "commit failed; the runs will be retried",
			       "error", buf_str(&err), NULL);
			for (int i = 0; i < n; i++)
				batch[i]->ok = 0;
			keep_refunds(k, batch, n);
		} else {
			k->failures = 0;
		}
		if (conn && !db_ok(conn)) {
			k->old_pid = k->pid; /* a write may be in flight: see end_old_session */
			PQfinish(conn);
			conn = NULL;
		}
		/* Waiters are told after the executors go on, and the answer is
		 * read before the next batch: no run waits for the notification.
		 * While more commits wait, for TELL_DELAY_MS at most. */
		collect_tellings(batch, n, &told);
		int started = started_children(batch, n);
		settle(k, batch, n, &conn, &err);
		if (started && k->env.on_children)
			k->env.on_children(k->env.arg);
		if (!told_since)
			told_since = clock_mono_ms();
		if (k->big_write && conn) {
			/* Its buffers go with it (DB_BUFFER_KEEP_MAX); the next
			 * batch connects again. */
			notify_done(k, conn, &told);
			told_since = 0;
			PQfinish(conn);
			conn = NULL;
			k->big_write = 0;
		} else if (queue_empty(k) || clock_mono_ms() - told_since >= TELL_DELAY_MS) {
			telling = notify_send(k, conn, &told);
			told_since = 0;
		}
	}
	notify_collect(conn, &telling);
	notify_done(k, conn, &told);
	PQfinish(conn);
	free(k->refund);
	buf_free(&err);
	return NULL;
}

int committer_start(const committer_env *env, committer **out)
{
	*out = NULL;
	committer *k = calloc(1, sizeof *k);
	if (!k)
		return -CAIRN_ENOMEM;
	k->env = *env;
	pthread_mutex_init(&k->mu, NULL);
	if (clock_cond_init(&k->work_cv) < 0) {
		free(k);
		return -CAIRN_ENOMEM;
	}
	pthread_cond_init(&k->done_cv, NULL);
	if (pthread_create(&k->thread, NULL, committer_main, k) != 0) {
		committer_free(k);
		return -CAIRN_ENOMEM;
	}
	*out = k;
	return 0;
}

static void enqueue(committer *k, commit *c)
{
	pthread_mutex_lock(&k->mu);
	c->next = NULL;
	if (k->tail)
		k->tail->next = c;
	else
		k->head = c;
	k->tail = c;
	pthread_cond_signal(&k->work_cv);
	pthread_mutex_unlock(&k->mu);
}

int committer_wait(committer *k, commit *c)
{
	c->final = 0;
	enqueue(k, c);
	pthread_mutex_lock(&k->mu);
	while (!c->done)
		pthread_cond_wait(&k->done_cv, &k->mu);
	pthread_mutex_unlock(&k->mu);
	return c->ok ? 0 : -CAIRN_ESTOP;
}

void committer_submit_final(committer *k, commit *c)
{
	c->final = 1;
	enqueue(k, c);
}

void committer_stop(committer *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->mu);
	k->stop = 1;
	pthread_cond_signal(&k->work_cv);
	pthread_mutex_unlock(&k->mu);
	pthread_join(k->thread, NULL);
}

void committer_free(committer *k)
{
	if (!k)
		return;
	pthread_mutex_destroy(&k->mu);
	pthread_cond_destroy(&k->work_cv);
	pthread_cond_destroy(&k->done_cv);
	free(k);
}
