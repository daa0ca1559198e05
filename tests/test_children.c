/*
 * test_children.c - a parent and its many children (DESIGN section 16):
 * waits for all, any or the first k of them, woken once the wait can be
 * met and not once per child, and the function that orders a wait with the
 * ends of its children (cairn.children_sync, migration 0021), driven from
 * two sessions. Real cairn-worker processes with tests/plugin_flows.so
 * (t.many, t.await), each test on a database of its own.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

/* The tables the plugin's workflows write (see plugin_flows.c). */
static const char TABLES[] =
    "CREATE TABLE t_counter (run_id bigint PRIMARY KEY, n integer NOT NULL);"
    "CREATE TABLE t_flags (run_id bigint NOT NULL);";

typedef struct env {
	const char *db;
	PGconn *c;
	cairn_client *cl;
	pid_t worker;
	int port;
	char log[64];
} env;

TestSuite(children, .fini = tlive_kill);

/* A database, a client and a worker with the test workflows, and the
 * setting extra ("NAME=value"; NULL: none). */
static void setup_with(env *e, const char *extra)
{
	e->db = tdb_new_migrated_shards(64);
	e->c = tdb_connect(e->db);
	tdb_exec(e->c, TABLES);
	cr_assert_eq(cairn_client_open(e->db, &e->cl), CAIRN_OK);
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(e->log);
	e->worker =
	    tworker_start(e->db, &e->port, e->log, "CAIRN_POLL_INTERVAL=5s", plugins, extra, NULL);
	tlive_add(e->worker);
	cr_assert(thttp_wait(e->port, "/readyz", 200, 20000), "worker never ready; log in %s",
	          e->log);
}

static void setup(env *e)
{
	setup_with(e, NULL);
}

static void teardown(env *e)
{
	int rc = tworker_stop(e->worker, SIGTERM, 15000);
	tlive_del(e->worker);
	cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, e->log);
	unlink(e->log);
	cairn_client_free(e->cl);
	PQfinish(e->c);
}

#define num(e, ...)                        tdb_intf((e)->c, __VA_ARGS__)
#define wait_num(e, want, timeout_ms, ...) tdb_wait_at_leastf((e)->c, want, timeout_ms, __VA_ARGS__)

static int64_t enqueue(env *e, const char *workflow, const char *input)
{
	cairn_enqueue_opts o = {.input = input};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(e->cl, workflow, &o, &r), CAIRN_OK, "%s",
	             cairn_client_errmsg(e->cl));
	cairn_enqueued_clear(&r);
	return r.id;
}

/* A t.many parent of n children of workflow (each with input {"name":
 * "end"}), waiting as mode says (extra: more of the input). */
static int64_t many_of(env *e, int n, const char *workflow, const char *mode, const char *extra)
{
	char *in = malloc(64 + (size_t)n * (64 + strlen(workflow)) + (extra ? strlen(extra) : 0));
	char *p = in + sprintf(in, "{\"mode\": \"%s\", %s%s\"children\": [", mode,
	                       extra ? extra : "", extra ? ", " : "");
	for (int i = 0; i < n; i++)
		p += sprintf(p, "%s{\"workflow\": \"%s\", \"input\": {\"name\": \"end\"}}",
		             i ? ", " : "", workflow);
	strcpy(p, "]}");
	int64_t id = enqueue(e, "t.many", in);
	free(in);
	return id;
}

/* A t.many parent of n children of t.await (each awaits signal "end", its
 * payload its output), waiting as mode says (extra: more of the input). */
static int64_t many_awaiting(env *e, int n, const char *mode, const char *extra)
{
	return many_of(e, n, "t.await", mode, extra);
}

/* Waits until the parent waits, with every child waiting for "end". */
static void all_waiting(env *e, int64_t parent, int n)
{
	cr_assert(wait_num(e, n, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	                   " AND status = 'waiting'",
	                   parent),
	          "the children never all waited");
	cr_assert(wait_num(e, 1, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                   " AND status = 'waiting'",
	                   parent),
	          "the parent never waited");
}

/* The id of the parent's i-th child. */
static int64_t kid(env *e, int64_t parent, int i)
{
	return num(e,
	           "SELECT id FROM cairn.runs WHERE parent_id = %" PRId64
	           " AND key = 'cairn.child:%" PRId64 ":%d'",
	           parent, parent, i);
}

/* Ends the parent's i-th child: signal "end" with {"i": i}, and waits for
 * the child to finish. */
static void end_child(env *e, int64_t parent, int i)
{
	int64_t id = kid(e, parent, i);
	char payload[32];
	snprintf(payload, sizeof payload, "{\"i\": %d}", i);
	cr_assert_eq(cairn_signal(e->cl, id, "end", payload), CAIRN_OK, "%s",
	             cairn_client_errmsg(e->cl));
	cr_assert_eq(cairn_run_wait(e->cl, id, 30000), CAIRN_OK, "child %d never ended", i);
}

/* How many times the parent executed (t_counter). */
static int64_t execs(env *e, int64_t parent)
{
	return num(e, "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, parent);
}

/* The parent, finished, and its output parsed (the caller deletes it). */
static cJSON *finished(env *e, int64_t id)
{
	cr_assert_eq(cairn_run_wait(e->cl, id, 60000), CAIRN_OK, "run %" PRId64 " never finished",
	             id);
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e->cl, id, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cJSON *out = cJSON_Parse(r->output);
	cairn_run_free(r);
	cr_assert(out);
	return out;
}

/* results[i] of a t.many output: done, and the "i" its child returned. */
static int result_i(const cJSON *out, const char *which, int i, int *done)
{
	const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(out, which), i);
	*done = cJSON_IsTrue(cJSON_GetObjectItem(r, "done"));
	const cJSON *o = cJSON_GetObjectItem(r, "output");
	const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "payload"), "i");
	return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* ------------------------------------------------------------ waits */

Test(children, a_wait_for_all_wakes_its_parent_once_and_returns_their_outputs_in_order)
{
	env e;
	setup(&e);
	enum { N = 12 };
	double replayed0 = tmetric(e.port, "cairn_replayed_entries_total");
	int64_t p = many_awaiting(&e, N, "all", NULL);
	all_waiting(&e, p, N);
	cr_assert_eq(execs(&e, p), 1);
	/* Every child but the first ends, in reverse: the parent sleeps on. */
	for (int i = N - 1; i >= 1; i--)
		end_child(&e, p, i);
	cr_assert_eq(execs(&e, p), 1, "the parent was woken before its wait could be met");
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.messages WHERE run_id = %" PRId64, p), 0,
	             "a child's end left the parent a message");
	end_child(&e, p, 0);
	cJSON *out = finished(&e, p);
	cr_assert_eq(execs(&e, p), 2, "the parent ran %" PRId64 " times", execs(&e, p));
	for (int i = 0; i < N; i++) {
		int done;
		cr_assert_eq(result_i(out, "results", i, &done), i, "result %d out of order", i);
		cr_assert(done);
	}
	cr_assert_str_eq(cJSON_GetObjectItem(out, "rc")->valuestring, "ok");
	cJSON_Delete(out);
	/* The second execution replayed the starts and the wait's entry. */
	double replayed = tmetric(e.port, "cairn_replayed_entries_total") - replayed0;
	cr_assert_leq(replayed, 3 * N + N, "%.0f entries replayed", replayed);
	teardown(&e);
}

Test(children, a_loop_of_single_waits_is_woken_only_by_the_child_it_waits_for)
{
	env e;
	setup(&e);
	enum { N = 6 };
	int64_t p = many_awaiting(&e, N, "each", NULL);
	all_waiting(&e, p, N);
	for (int i = N - 1; i >= 1; i--)
		end_child(&e, p, i);
	cr_assert_eq(execs(&e, p), 1, "the ends of children it did not wait for woke it");
	end_child(&e, p, 0);
	cJSON *out = finished(&e, p);
	cr_assert_eq(execs(&e, p), 2);
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, a_wait_for_any_returns_the_first_to_end_and_a_wait_for_all_after_it_the_rest)
{
	env e;
	setup(&e);
	int64_t p = many_awaiting(&e, 3, "any_all", NULL);
	all_waiting(&e, p, 3);
	end_child(&e, p, 1);
	/* Woken by the first end, it now waits for the other two. */
	cr_assert(wait_num(&e, 2, 30000,
	                   "SELECT coalesce(max(n), 0) FROM t_counter WHERE run_id = %" PRId64, p));
	cr_assert(wait_num(&e, 1, 30000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND kind = 'children' AND status = 'waiting'",
	                   p),
	          "the wait for all did not begin");
	end_child(&e, p, 2);
	cr_assert_eq(execs(&e, p), 2);
	end_child(&e, p, 0);
	cJSON *out = finished(&e, p);
	int done;
	cr_assert_eq(result_i(out, "first_results", 1, &done), 1);
	cr_assert(done);
	result_i(out, "first_results", 0, &done);
	cr_assert_not(done, "a child that had not ended was reported done");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(result_i(out, "results", i, &done), i);
		cr_assert(done, "child %d's end, taken by the first wait, was not given again", i);
	}
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, a_wait_for_the_first_k_is_met_by_the_kth_end)
{
	env e;
	setup(&e);
	int64_t p = many_awaiting(&e, 4, "first", "\"k\": 2");
	all_waiting(&e, p, 4);
	end_child(&e, p, 3);
	cr_assert_eq(execs(&e, p), 1);
	end_child(&e, p, 0);
	cJSON *out = finished(&e, p);
	int done, n = 0;
	for (int i = 0; i < 4; i++) {
		result_i(out, "results", i, &done);
		n += done;
	}
	cr_assert_eq(n, 2, "%d children reported done", n);
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, a_failed_child_is_named_and_the_others_are_returned)
{
	env e;
	setup(&e);
	int64_t p = enqueue(&e, "t.many",
	                    "{\"mode\": \"all\", \"children\": ["
	                    "{\"workflow\": \"square\", \"input\": {\"x\": 2}},"
	                    "{\"workflow\": \"square\", \"input\": {\"x\": -1}},"
	                    "{\"workflow\": \"square\", \"input\": {\"x\": 3}}]}");
	cJSON *out = finished(&e, p);
	cr_assert_str_eq(cJSON_GetObjectItem(out, "rc")->valuestring, "failed");
	const cJSON *err = cJSON_GetObjectItem(out, "error");
	cr_assert(strstr(err->valuestring, "failed: square: x is -1"), "%s", err->valuestring);
	const cJSON *r = cJSON_GetObjectItem(out, "results");
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r, 1), "status")->valuestring,
	                 "failed");
	const cJSON *y =
	    cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(r, 2), "output"), "y");
	cr_assert_eq(y->valuedouble, 9);
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, a_wait_for_children_times_out_at_its_deadline)
{
	env e;
	setup(&e);
	int64_t p = many_awaiting(&e, 2, "all", "\"timeout_ms\": 500");
	cJSON *out = finished(&e, p);
	cr_assert_str_eq(cJSON_GetObjectItem(out, "rc")->valuestring, "timeout");
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, waiting_for_a_run_it_did_not_start_fails_the_parent)
{
	env e;
	setup(&e);
	int64_t stranger = enqueue(&e, "noop", NULL);
	char extra[48];
	snprintf(extra, sizeof extra, "\"extra\": %" PRId64, stranger);
	int64_t p = many_awaiting(&e, 1, "all", extra);
	cr_assert_eq(cairn_run_wait(e.cl, p, 30000), CAIRN_OK);
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e.cl, p, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, "failed");
	cr_assert(strstr(r->error, "which is not a child this run started"), "%s", r->error);
	cairn_run_free(r);
	teardown(&e);
}

Test(children, a_cancelled_parent_waiting_for_many_cancels_them)
{
	env e;
	setup(&e);
	int64_t p = many_awaiting(&e, 5, "all", NULL);
	all_waiting(&e, p, 5);
	cr_assert_eq(cairn_cancel(e.cl, p), CAIRN_OK);
	cr_assert(wait_num(&e, 5, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	                   " AND status = 'cancelled'",
	                   p),
	          "the children were not cancelled with their parent");
	teardown(&e);
}

Test(children, a_fanout_of_500_replays_at_most_three_entries_per_child)
{
	env e;
	setup(&e);
	double r0 = tmetric(e.port, "cairn_replayed_entries_total");
	double s0 = tmetric(e.port, "cairn_runs_started_total");
	int64_t p = enqueue(&e, "fanout", "{\"n\": 500}");
	cJSON *out = finished(&e, p);
	cr_assert_eq(cJSON_GetObjectItem(out, "sum")->valuedouble, 41541750.0);
	cJSON_Delete(out);
	double replayed = tmetric(e.port, "cairn_replayed_entries_total") - r0;
	double parent = tmetric(e.port, "cairn_runs_started_total") - s0 - 500;
	fprintf(stderr,
	        "test_children: fan-out of 500: %.0f entries replayed, %.0f executions "
	        "of the parent\n",
	        replayed, parent);
	cr_assert_leq(replayed, 3 * 500, "%.0f entries replayed", replayed);
	cr_assert_leq(parent, 3, "the parent ran %.0f times", parent);
	teardown(&e);
}

/* ------------------------------------ children cancelled before they start */

/* Children of t.ghost go to group "ghosts", where a worker served the
 * workflow once (cairn.workflows) and none runs now: they stay pending,
 * never started, until cancelled, which ends them at once, with no worker
 * and no commit of theirs. */
static void ghosts(env *e)
{
	tdb_exec(e->c, "INSERT INTO cairn.workflows (workflow, shard_group, runtime, live_until) "
	               "VALUES ('t.ghost', 'ghosts', 'c', now())");
}

/* A t.many parent of n t.ghost children, once it waits for them as mode
 * says and they are all pending in group ghosts, never started. */
static int64_t many_ghosts(env *e, int n, const char *mode, const char *extra)
{
	int64_t p = many_of(e, n, "t.ghost", mode, extra);
	cr_assert(wait_num(e, n, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	                   " AND status = 'pending' AND attempt = 0 AND shard_group = 'ghosts'",
	                   p),
	          "the children were not all pending in group ghosts");
	cr_assert(wait_num(e, 1, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                   " AND status = 'waiting'",
	                   p),
	          "the parent never waited");
	return p;
}

/* The parent, finished with its output parsed, once woken by the ends of
 * its children: it ran twice (started them, then took their ends). */
static cJSON *woken_once(env *e, int64_t p)
{
	cJSON *out = finished(e, p);
	cr_assert_eq(execs(e, p), 2, "the parent ran %" PRId64 " times", execs(e, p));
	return out;
}

/* The status results[i] of a t.many output gives ("" when not done). */
static const char *result_status(const cJSON *out, int i)
{
	const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(out, "results"), i);
	const cJSON *st = cJSON_GetObjectItem(r, "status");
	return cJSON_IsTrue(cJSON_GetObjectItem(r, "done")) && cJSON_IsString(st) ? st->valuestring
	                                                                          : "";
}

/* The parent holds the signal a child cancelled at once sends, in the
 * words the commit of a child's end uses. */
static void told_cancelled(env *e, int64_t p, int64_t child)
{
	cr_assert_eq(num(e,
	                 "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64
	                 " AND name = 'cairn.child:%" PRId64 "' AND payload = '{\"status\": "
	                 "\"cancelled\", \"output\": null, \"error\": \"cancelled\"}'",
	                 p, child),
	             1, "the parent holds no cancelled end of child %" PRId64, child);
}

Test(children, a_single_wait_ends_when_its_child_is_cancelled_before_it_starts)
{
	env e;
	setup(&e);
	ghosts(&e);
	int64_t p = many_ghosts(&e, 1, "each", NULL);
	int64_t k = kid(&e, p, 0);
	cr_assert_eq(cairn_cancel(e.cl, k), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cJSON *out = woken_once(&e, p);
	cr_assert_str_eq(cJSON_GetObjectItem(out, "rc")->valuestring, "failed");
	const char *err = cJSON_GetObjectItem(out, "error")->valuestring;
	cr_assert(strstr(err, "cancelled: cancelled"), "%s", err);
	told_cancelled(&e, p, k);
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, a_wait_for_all_counts_children_cancelled_before_they_start_and_wakes_once)
{
	env e;
	setup(&e);
	ghosts(&e);
	enum { N = 5 };
	int64_t p = many_ghosts(&e, N, "all", NULL);
	/* Through the SQL API (cairn.cancel), all but the first. */
	for (int i = N - 1; i >= 1; i--)
		tdb_intf(e.c, "SELECT count(*) FROM (SELECT cairn.cancel(%" PRId64 ")) c",
		         kid(&e, p, i));
	cr_assert_eq(num(&e, "SELECT need FROM cairn.child_waits WHERE run_id = %" PRId64, p), 1,
	             "the cancels did not count the wait down");
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.messages WHERE run_id = %" PRId64, p), 0,
	             "a cancel woke the parent before its wait could be met");
	cr_assert_eq(execs(&e, p), 1);
	cr_assert_eq(cairn_cancel(e.cl, kid(&e, p, 0)), CAIRN_OK);
	cJSON *out = woken_once(&e, p);
	for (int i = 0; i < N; i++)
		cr_assert_str_eq(result_status(out, i), "cancelled", "child %d", i);
	cJSON_Delete(out);
	teardown(&e);
}

#define TOKEN39 "issue-39-cancel-token"

Test(children, a_wait_for_any_is_met_by_a_child_cancelled_over_http_before_it_starts)
{
	env e;
	setup_with(&e, "CAIRN_HTTP_TOKEN=" TOKEN39);
	ghosts(&e);
	int64_t p = many_ghosts(&e, 3, "any", NULL);
	char path[96], *body = NULL;
	snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/cancel", kid(&e, p, 1));
	long st = thttp_send(e.port, "POST", path, "Bearer " TOKEN39, NULL, &body, NULL);
	cr_assert_eq(st, 202, "POST %s: %ld %s", path, st, body ? body : "");
	free(body);
	cJSON *out = woken_once(&e, p);
	cr_assert_str_eq(result_status(out, 1), "cancelled");
	cr_assert_str_eq(result_status(out, 0), "", "a child that had not ended was reported done");
	cr_assert_str_eq(result_status(out, 2), "");
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, cairn_cancel_on_the_command_line_of_a_pending_child_wakes_its_parent)
{
	env e;
	setup(&e);
	ghosts(&e);
	int64_t p = many_ghosts(&e, 2, "all", NULL);
	for (int i = 0; i < 2; i++) {
		char id[24], *out = NULL, *err = NULL;
		snprintf(id, sizeof id, "%" PRId64, kid(&e, p, i));
		int rc = tcli(e.db, &out, &err, "cancel", id, NULL);
		cr_assert_eq(rc, 0, "cairn cancel %s: %d %s %s", id, rc, out, err);
		free(out);
		free(err);
	}
	cJSON *out = woken_once(&e, p);
	cr_assert_str_eq(result_status(out, 0), "cancelled");
	cr_assert_str_eq(result_status(out, 1), "cancelled");
	cJSON_Delete(out);
	teardown(&e);
}

Test(children, a_child_cancelled_while_it_runs_still_tells_its_parent_at_its_end)
{
	env e;
	setup(&e);
	int64_t p = many_awaiting(&e, 2, "all", NULL);
	all_waiting(&e, p, 2);
	int64_t k = kid(&e, p, 0);
	cr_assert_eq(cairn_cancel(e.cl, k), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(e.cl, k, 30000), CAIRN_OK, "the child never ended");
	cr_assert_eq(execs(&e, p), 1, "the parent was woken before its wait could be met");
	end_child(&e, p, 1);
	cJSON *out = woken_once(&e, p);
	cr_assert_str_eq(result_status(out, 0), "cancelled");
	int done;
	cr_assert_eq(result_i(out, "results", 1, &done), 1);
	cJSON_Delete(out);
	teardown(&e);
}

static int64_t wait_sql(PGconn *c, int64_t p, const int64_t *kids, int n, int want);

/* A child that continued as new, its next link not started yet: cancelling
 * the child (the run its parent started) ends that link and tells the
 * parent by the first run's id, through the client and the SQL API alike.
 * Rows as the worker writes them, in group ghosts, so no worker takes them. */
Test(children, a_chain_cancelled_before_its_next_link_starts_tells_its_parent_by_its_first_run)
{
	env e;
	setup(&e);
	for (int via_sql = 0; via_sql < 2; via_sql++) {
		int64_t p = tdb_intf(
		    e.c,
		    "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
		    "status) VALUES (cairn.new_run_id(0), cairn.part_of(0), 'p', gen_random_uuid(), 'ghosts', 0, "
		    "'waiting') RETURNING id");
		int64_t first = tdb_intf(e.c,
		                         "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, "
		                         "shard, parent_id, status, "
		                         "attempt, finished_at) VALUES (cairn.new_run_id(0), cairn.part_of(0), 'c', "
		                         "gen_random_uuid(), 'ghosts', 0, %" PRId64
		                         ", 'completed', 1, now()) RETURNING id",
		                         p);
		int64_t next = tdb_intf(
		    e.c,
		    "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
		    "parent_id, continued_from, chain_id) VALUES (cairn.new_run_id(0), cairn.part_of(0), 'c', "
		    "'cairn.next:%" PRId64 "', 'ghosts', 0, %" PRId64 ", %" PRId64 ", %" PRId64
		    ") RETURNING id",
		    first, p, first, first);
		tdb_intf(e.c,
		         "INSERT INTO cairn.child_waits (run_id, part) VALUES (%" PRId64 ", cairn.part_of(0)) RETURNING 1",
		         p);
		cr_assert_eq(wait_sql(e.c, p, &first, 1, 1), 0);
		if (via_sql)
			tdb_intf(e.c, "SELECT count(*) FROM (SELECT cairn.cancel(%" PRId64 ")) c",
			         first);
		else
			cr_assert_eq(cairn_cancel(e.cl, first), CAIRN_OK, "%s",
			             cairn_client_errmsg(e.cl));
		cr_assert_eq(num(&e,
		                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
		                 " AND status = 'cancelled'",
		                 next),
		             1, "the chain's last link was not cancelled");
		told_cancelled(&e, p, first);
		cr_assert_eq(
		    num(&e, "SELECT need FROM cairn.child_waits WHERE run_id = %" PRId64, p), 0);
		cr_assert_eq(num(&e,
		                 "SELECT count(*) FROM cairn.messages WHERE run_id = %" PRId64
		                 " AND kind = 'signal'",
		                 p),
		             1, "the parent whose wait was met got no message");
	}
	teardown(&e);
}

/* A parent cancelled while it waits for children that never started (in
 * group ghosts, which no worker serves): its commit ends them cancelled at
 * once, as cairn_cancel of each would, and tells `cairn wait`; nothing of
 * theirs is left for a worker, so none stays pending for ever. */
Test(children, a_cancelled_parent_ends_its_children_that_never_started_in_a_group_no_worker_serves)
{
	env e;
	setup(&e);
	ghosts(&e);
	enum { N = 3 };
	int64_t p = many_ghosts(&e, N, "all", NULL);
	cr_assert_eq(cairn_cancel(e.cl, p), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_run_wait(e.cl, p, 30000), CAIRN_OK, "the parent never ended");
	for (int i = 0; i < N; i++) {
		int64_t k = kid(&e, p, i);
		cr_assert_eq(cairn_run_wait(e.cl, k, 30000), CAIRN_OK, "child %d never ended", i);
		cairn_run *r;
		cr_assert_eq(cairn_run_get(e.cl, k, &r), CAIRN_OK);
		cr_assert_str_eq(r->status, "cancelled", "child %d", i);
		cairn_run_free(r);
	}
	cr_assert_eq(
	    num(&e,
	        "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64
	        " AND (finished_at IS NULL OR NOT cancel_requested OR start_at IS NOT NULL)",
	        p),
	    0, "a child was left unfinished");
	cr_assert_eq(
	    num(&e,
	        "SELECT count(*) FROM cairn.messages m JOIN cairn.runs r "
	        "ON r.id = m.run_id AND r.part = m.part "
	        "WHERE r.parent_id = %" PRId64,
	        p),
	    0, "a cancelled child kept a message for a worker");
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                 " AND status = 'cancelled'",
	                 p),
	             1);
	teardown(&e);
}

#define SEAL_K1 "k1=q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="

/* With payloads encrypted at rest, the end a child cancelled before it
 * starts sends its parent is sealed by the client that cancels it, as a
 * commit seals a child's end: stored as cairn:enc:k1:..., without its
 * words, and the parent's worker opens it and returns the child's end. */
Test(children, a_child_cancelled_before_it_starts_seals_the_end_it_sends_its_parent)
{
	env e;
	setup_with(&e, "CAIRN_ENCRYPTION_KEYS=" SEAL_K1);
	cr_assert_eq(cairn_client_set_keys(e.cl, SEAL_K1), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	ghosts(&e);
	int64_t p = many_ghosts(&e, 1, "each", NULL);
	int64_t k = kid(&e, p, 0);
	cr_assert_eq(cairn_cancel(e.cl, k), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64
	                 " AND name = 'cairn.child:%" PRId64 "' AND jsonb_typeof(payload) = "
	                 "'string' AND payload #>> '{}' LIKE 'cairn:enc:k1:%%' "
	                 "AND payload::text NOT LIKE '%%cancelled%%'",
	                 p, k),
	             1, "the parent's signal of child %" PRId64 " is not sealed", k);
	cJSON *out = woken_once(&e, p);
	cr_assert_str_eq(cJSON_GetObjectItem(out, "rc")->valuestring, "failed");
	const char *err = cJSON_GetObjectItem(out, "error")->valuestring;
	cr_assert(strstr(err, "cancelled: cancelled"), "%s", err);
	cJSON_Delete(out);
	teardown(&e);
}

/* ------------------------------------------- cairn.children_sync itself */

/* A parent run and n children of it, inserted as the worker would. */
static int64_t family(env *e, int n, int64_t *kids)
{
	int64_t p = tdb_intf(
	    e->c,
	    "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
	    "status) VALUES (cairn.new_run_id(0), cairn.part_of(0), 'p', gen_random_uuid(), 'default', 0, 'waiting') "
	    "RETURNING id");
	for (int i = 0; i < n; i++)
		kids[i] = tdb_intf(e->c,
		                   "INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
		                   "parent_id) VALUES (cairn.new_run_id(0), cairn.part_of(0), 'c', "
		                   "gen_random_uuid(), 'default', 0, %" PRId64 ") RETURNING id",
		                   p);
	tdb_intf(e->c, "INSERT INTO cairn.child_waits (run_id, part) VALUES (%" PRId64 ", cairn.part_of(0)) RETURNING 1",
	         p);
	return p;
}

/* A child's end as its commit writes it: its signal, then the function. */
#define END_SQL                                                                                    \
	"INSERT INTO cairn.signals (run_id, part, name, payload) VALUES (%" PRId64                 \
	", cairn.part_of(0), 'cairn.child:%" PRId64 "', '{}'); SELECT count(*) FROM cairn.children_sync('{%" PRId64  \
	"}', '{}', '{}', '{}', "                                                                   \
	"'{}', '{}', '{%" PRId64 "}', '{%" PRId64 "}', '{%" PRId64 "}') w WHERE w = %" PRId64

/* The wait of p (seq 3) for kids (n of them, want): whether it woke p. */
static int64_t wait_sql(PGconn *c, int64_t p, const int64_t *kids, int n, int want)
{
	char list[256] = "", *q = list;
	for (int i = 0; i < n; i++)
		q += sprintf(q, "%s%" PRId64, i ? "," : "", kids[i]);
	return tdb_intf(c,
	                "SELECT count(*) FROM cairn.children_sync('{%" PRId64 "}', '{%" PRId64
	                "}', '{3}', '{%d}', array_fill(%" PRId64 "::bigint, ARRAY[%d]), '{%s}', "
	                "'{}', '{}', '{}') w WHERE w = %" PRId64,
	                p, p, want, p, n, list, p);
}

/* Whether a session waits for a lock in cairn.children_sync, as c sees it:
 * on Citus (CAIRN_TEST_CITUS) a statement of the function waits on the
 * node of its part, which citus_lock_waits shows. */
static const char *lock_waiting(PGconn *c)
{
	return tdb_int(c, "SELECT count(*) FROM pg_extension WHERE extname = 'citus'")
	           ? "SELECT count(*) FROM citus_lock_waits"
	           : "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
	             "AND query LIKE '%children_sync%'";
}

/* Waits up to 10 s for sql on c to count 1 or more. */
static int wait_num_on(PGconn *c, const char *sql)
{
	return tdb_wait_at_least(c, sql, 1, 10000);
}

static int64_t ended(PGconn *c, int64_t p, int64_t kid_id)
{
	PGresult *r = PQexec(c, "BEGIN");
	PQclear(r);
	char sql[1024];
	snprintf(sql, sizeof sql, END_SQL, p, kid_id, kid_id, kid_id, kid_id, p, p);
	int64_t woke = tdb_int(c, sql);
	r = PQexec(c, "COMMIT");
	PQclear(r);
	return woke;
}

Test(children, children_sync_counts_ends_down_and_wakes_the_parent_at_the_last)
{
	env e;
	setup(&e);
	int64_t k[3];
	int64_t p = family(&e, 3, k);
	cr_assert_eq(wait_sql(e.c, p, k, 3, 3), 0);
	cr_assert_eq(num(&e, "SELECT need FROM cairn.child_waits WHERE run_id = %" PRId64, p), 3);
	cr_assert_eq(ended(e.c, p, k[1]), 0);
	cr_assert_eq(ended(e.c, p, k[0]), 0);
	cr_assert_eq(ended(e.c, p, k[2]), 1, "the last end did not wake the parent");
	/* A wait whose children ended before it began is met at once. */
	cr_assert_eq(wait_sql(e.c, p, k, 3, 2), 1);
	teardown(&e);
}

Test(children, children_sync_wakes_a_parent_that_started_its_children_before_it_for_each)
{
	env e;
	setup(&e);
	int64_t k[2];
	int64_t p = family(&e, 2, k);
	tdb_exec(e.c, "DELETE FROM cairn.child_waits");
	cr_assert_eq(ended(e.c, p, k[0]), 1, "a parent of the old ways was not told");
	teardown(&e);
}

/* The child's end holds the parent's row while its commit is open: a wait
 * that begins meanwhile waits for it and then counts it; a wait that began
 * first makes the end count down. Either way the parent is woken once. */
Test(children, a_wait_and_a_childs_end_at_the_same_time_never_lose_the_wake)
{
	env e;
	setup(&e);
	int64_t k[1];
	int64_t p = family(&e, 1, k);
	PGconn *other = tdb_connect(e.db);
	/* The end first, its commit held open. */
	PGresult *r = PQexec(e.c, "BEGIN");
	PQclear(r);
	char sql[1024];
	snprintf(sql, sizeof sql, END_SQL, p, k[0], k[0], k[0], k[0], p, p);
	cr_assert_eq(tdb_int(e.c, sql), 0);
	char wsql[512];
	snprintf(wsql, sizeof wsql,
	         "SELECT count(*) FROM cairn.children_sync('{%" PRId64 "}', '{%" PRId64
	         "}', '{3}', '{1}', '{%" PRId64 "}', '{%" PRId64 "}', '{}', '{}', '{}') w",
	         p, p, p, k[0]);
	cr_assert(PQsendQuery(other, wsql));
	/* Watched from a session of its own: pg_stat_activity holds still
	 * within a transaction. */
	PGconn *watch = tdb_connect(e.db);
	cr_assert(wait_num_on(watch, lock_waiting(watch)), "the wait did not wait for the end's commit");
	r = PQexec(e.c, "COMMIT");
	PQclear(r);
	r = PQgetResult(other);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(other));
	cr_assert_str_eq(PQgetvalue(r, 0, 0), "1", "the wait missed the end that committed first");
	PQclear(r);
	while ((r = PQgetResult(other)))
		PQclear(r);

	/* The wait first, its commit held open. */
	int64_t k2[1];
	int64_t p2 = family(&e, 1, k2);
	r = PQexec(other, "BEGIN");
	PQclear(r);
	cr_assert_eq(wait_sql(other, p2, k2, 1, 1), 0);
	snprintf(sql, sizeof sql, END_SQL, p2, k2[0], k2[0], k2[0], k2[0], p2, p2);
	r = PQexec(e.c, "BEGIN");
	PQclear(r);
	cr_assert(PQsendQuery(e.c, sql));
	cr_assert(wait_num_on(watch, lock_waiting(watch)), "the end did not wait for the wait's commit");
	PQfinish(watch);
	r = PQexec(other, "COMMIT");
	PQclear(r);
	int64_t woke = -1;
	while ((r = PQgetResult(e.c))) {
		if (PQresultStatus(r) == PGRES_TUPLES_OK)
			woke = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
		PQclear(r);
	}
	cr_assert_eq(woke, 1, "the end did not count down the wait that began first");
	r = PQexec(e.c, "COMMIT");
	PQclear(r);
	PQfinish(other);
	teardown(&e);
}
