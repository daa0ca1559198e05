/*
 * test_journal.c - large workflows (DESIGN section 16), end to end: long
 * journals, which a worker keeps in its journal cache so that a run that
 * wakes loads only its new entries (engine/jcache.c), and chains of runs
 * that continue as new (cairn_continue_as_new). Real cairn-worker
 * processes with the workflows of tests/plugin_flows.so, on a database of
 * their own per test, killed with SIGKILL where the point is to survive a
 * crash; every wait is a condition polled with a deadline.
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

#define TOKEN "test-token-0123456789"

typedef tflows_env env;

static void setup(env *e)
{
	tflows_setup(e, 64);
}

static void teardown(env *e)
{
	tflows_teardown(e);
}

typedef struct wk {
	pid_t pid;
	int port;
	char log[64];
} wk;

/* No per-test .timeout (see test_exec.c): tests/run.sh bounds every test. */
TestSuite(journal, .fini = tlive_kill);
TestSuite(chain, .fini = tlive_kill);

/* Starts a worker with quick polls and takeovers, the test plugin and the
 * HTTP API, plus up to two more NAME=value settings (or NULL), and waits
 * until it is ready. */
static void wk_start(wk *w, const char *db, const char *extra, const char *extra2)
{
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(w->log);
	w->pid = tworker_start(db, &w->port, w->log, "CAIRN_POLL_INTERVAL=1s",
	                       "CAIRN_HEARTBEAT_INTERVAL=200ms", "CAIRN_REBALANCE_INTERVAL=200ms",
	                       "CAIRN_RUNNER_TTL=2s", "CAIRN_HTTP_TOKEN=" TOKEN, plugins, extra,
	                       extra2, NULL);
	tlive_add(w->pid);
	cr_assert(thttp_wait(w->port, "/readyz", 200, 20000),
	          "worker never became ready; log in %s", w->log);
}

static void wk_kill(wk *w)
{
	int rc = tworker_stop(w->pid, SIGKILL, 5000);
	tlive_del(w->pid);
	cr_assert_eq(rc, 128 + SIGKILL, "kill -9: exit %d", rc);
	unlink(w->log);
}

/* Ends a worker with a SIGTERM drain: it must exit 0. */
static void wk_stop(wk *w)
{
	int rc = tworker_stop(w->pid, SIGTERM, 15000);
	tlive_del(w->pid);
	cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, w->log);
	unlink(w->log);
}

/* A metric of the worker's /metrics (-1: none). */
static double metric(const wk *w, const char *name)
{
	char auth[64];
	snprintf(auth, sizeof auth, "Bearer %s", TOKEN);
	char *body = NULL;
	double v = -1;
	if (thttp_auth(w->port, "GET", "/metrics", auth, &body, NULL) == 200 && body) {
		char key[128];
		snprintf(key, sizeof key, "\n%s ", name);
		const char *at = strstr(body, key);
		if (at)
			v = strtod(at + strlen(key), NULL);
	}
	free(body);
	return v;
}

/* Waits until the worker's metric is want. */
static int wait_metric(const wk *w, const char *name, double want, int64_t timeout_ms)
{
	for (int64_t until = tnow_ms() + timeout_ms; tnow_ms() < until; usleep(10000))
		if (metric(w, name) == want)
			return 1;
	return 0;
}

static int64_t enqueue_key(env *e, const char *workflow, const char *key, const char *input)
{
	cairn_enqueue_opts o = {.key = key, .input = input};
	cairn_enqueued r;
	int rc = cairn_enqueue(e->cl, workflow, &o, &r);
	cr_assert_eq(rc, CAIRN_OK, "enqueue %s: %s", workflow, cairn_client_errmsg(e->cl));
	cairn_enqueued_clear(&r);
	return r.id;
}

static int64_t enqueue(env *e, const char *workflow, const char *input)
{
	return enqueue_key(e, workflow, NULL, input);
}

/* A number the database computes with printf-style SQL, and a wait for it. */
#define num(e, ...)                        tdb_intf((e)->c, __VA_ARGS__)
#define wait_num(e, want, timeout_ms, ...) tdb_wait_at_leastf((e)->c, want, timeout_ms, __VA_ARGS__)

/* Waits for the run to finish and loads it. */
static cairn_run *finished(env *e, int64_t id, int64_t timeout_ms)
{
	int rc = cairn_run_wait(e->cl, id, timeout_ms);
	cr_assert_eq(rc, CAIRN_OK, "run %" PRId64 " did not finish within %" PRId64 " ms (%s)", id,
	             timeout_ms, cairn_strstatus(rc));
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e->cl, id, &r), CAIRN_OK, "%s", cairn_client_errmsg(e->cl));
	return r;
}

/* A number field of a JSON object text. */
static double jnum(const char *text, const char *name)
{
	cJSON *j = cJSON_Parse(text ? text : "");
	cr_assert(j, "not JSON: %s", text ? text : "(null)");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
	cr_assert(cJSON_IsNumber(v), "no number \"%s\" in %s", name, text);
	double d = v->valuedouble;
	cJSON_Delete(j);
	return d;
}

/* t.long's input, and what its run must return: the sum 0 + ... + n-1. */
static void long_input(char *out, size_t n, int steps, int every, int sleep_ms)
{
	snprintf(out, n, "{\"steps\": %d, \"every\": %d, \"sleep_ms\": %d}", steps, every,
	         sleep_ms);
}

static void expect_long(env *e, int64_t id, int steps, int64_t timeout_ms)
{
	cairn_run *r = finished(e, id, timeout_ms);
	cr_assert_str_eq(r->status, "completed", "run %" PRId64 " %s: %s", id, r->status,
	                 r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "sum"), (double)steps * (steps - 1) / 2, "%s", r->output);
	cairn_run_free(r);
}

/* ------------------------------------------------------- long journals */

Test(journal, a_run_of_many_steps_completes_replaying_its_journal_from_the_cache)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL, NULL);
	char in[128];
	long_input(in, sizeof in, 600, 10, 2);
	int64_t id = enqueue(&e, "t.long", in);
	expect_long(&e, id, 600, 120000);
	/* 60 wakes; once the journal holds JCACHE_MIN_ENTRIES (64) settled
	 * entries, each wake loads only what follows the cached ones. */
	double hits = metric(&a, "cairn_journal_cache_hits_total");
	double whole = metric(&a, "cairn_journal_loads_total");
	cr_assert_geq(hits, 45, "hits %.0f, whole loads %.0f", hits, whole);
	cr_assert_leq(whole, 10, "hits %.0f, whole loads %.0f", hits, whole);
	cr_assert_eq(metric(&a, "cairn_journal_cache_runs"), 0, "a run that ended stays cached");
	wk_stop(&a);
	teardown(&e);
}

Test(journal, a_run_resumes_from_its_whole_journal_on_a_worker_that_did_not_cache_it)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL, NULL);
	char in[128];
	long_input(in, sizeof in, 600, 10, 20);
	int64_t id = enqueue(&e, "t.long", in);
	cr_assert(wait_num(&e, 300, 120000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64, id),
	          "the run never got half way");
	cr_assert_gt(metric(&a, "cairn_journal_cache_hits_total"), 0);
	wk_kill(&a);
	wk_start(&b, e.db, NULL, NULL);
	expect_long(&e, id, 600, 120000);
	double whole = metric(&b, "cairn_journal_loads_total");
	cr_assert_geq(whole, 1, "the new worker never loaded the journal whole");
	cr_assert_gt(metric(&b, "cairn_journal_cache_hits_total"), 0,
	             "the new worker did not cache the journal it loaded");
	wk_stop(&b);
	teardown(&e);
}

/* The runs of t.cut each awaiting "go" and "again" as ran says: their 80
 * steps ran in attempt 1 but for steps 10 to 79, which ran in attempt 2
 * after a retry cut the journal there. */
static void expect_cut(env *e, int64_t id)
{
	cairn_run *r = finished(e, id, 60000);
	cr_assert_str_eq(r->status, "completed", "run %" PRId64 " %s: %s", id, r->status,
	                 r->error ? r->error : "");
	cJSON *ran = cJSON_Parse(r->output);
	cr_assert_eq(cJSON_GetArraySize(ran), 80, "%s", r->output);
	for (int i = 0; i < 80; i++)
		cr_assert_eq(cJSON_GetArrayItem(ran, i)->valuedouble, i < 10 ? 1 : 2,
		             "run %" PRId64 ": step %d replayed a value from before the cut: %s",
		             id, i, r->output);
	cJSON_Delete(ran);
	cairn_run_free(r);
}

static int signal_all(env *e, const int64_t *ids, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(cairn_signal(e->cl, ids[i], name, NULL), CAIRN_OK, "%s",
		             cairn_client_errmsg(e->cl));
	return n;
}

/*
 * Worker A caches the journals of 16 runs (80 settled steps each, then a
 * wait). Worker B joins and takes about half of the shards; the runs of
 * those execute on B, where each asks for a run retry at step 10, which
 * cuts its journal there, and runs steps 10 to 79 again in attempt 2. B
 * leaves, and A, which still holds those journals as they were before the
 * cut, executes the runs to their end: a claim that used A's copies would
 * replay steps 10 to 79 as attempt 1 ran them.
 */
Test(journal, a_journal_cut_by_a_retry_elsewhere_is_loaded_whole_not_from_a_stale_cache)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL, NULL);
	enum { RUNS = 16 };
	int64_t ids[RUNS];
	for (int i = 0; i < RUNS; i++)
		ids[i] = enqueue(&e, "t.cut", NULL);
	/* Each awaits "go" after its sleep: its second claim brought its 80
	 * settled steps, which A keeps. */
	cr_assert(wait_metric(&a, "cairn_journal_cache_runs", RUNS, 60000),
	          "A never cached the 16 journals (it holds %.0f)",
	          metric(&a, "cairn_journal_cache_runs"));
	tdb_exec(e.c, "INSERT INTO t_flags SELECT id FROM cairn.runs");
	wk_start(&b, e.db, NULL, NULL);
	int64_t b_id = num(&e, "SELECT max(id) FROM cairn.runners");
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64, b_id),
	          "B never took shards");
	signal_all(&e, ids, RUNS, "go");
	/* Every run was cut and ran its steps again, now awaiting "again". */
	cr_assert(wait_num(&e, RUNS, 60000,
	                   "SELECT count(*) FROM cairn.steps WHERE name = 'again' "
	                   "AND status = 'waiting'"),
	          "the runs never awaited again");
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE journal_cuts = 1"), RUNS);
	cr_assert_geq(metric(&b, "cairn_journal_loads_total"), 1,
	              "no run executed on B: nothing to prove");
	wk_stop(&b);
	/* A holds a copy of each journal: those of the runs that stayed, as
	 * they are; those of the runs B executed, from before their cut. */
	cr_assert(wait_metric(&a, "cairn_journal_cache_runs", RUNS, 60000), "A holds %.0f journals",
	          metric(&a, "cairn_journal_cache_runs"));
	double loads = metric(&a, "cairn_journal_loads_total");
	signal_all(&e, ids, RUNS, "again");
	for (int i = 0; i < RUNS; i++)
		expect_cut(&e, ids[i]);
	cr_assert_geq(metric(&a, "cairn_journal_loads_total") - loads, 1,
	              "A did not load the journals cut on B whole");
	wk_stop(&a);
	teardown(&e);
}

Test(journal, the_journal_cache_stays_within_its_bound_while_long_runs_complete)
{
	env e;
	setup(&e);
	wk a;
	/* About two runs' journals: the others are loaded whole. */
	wk_start(&a, e.db, "CAIRN_JOURNAL_CACHE=96KiB", NULL);
	char in[128];
	long_input(in, sizeof in, 300, 10, 5);
	enum { RUNS = 6 };
	int64_t ids[RUNS];
	for (int i = 0; i < RUNS; i++)
		ids[i] = enqueue(&e, "t.long", in);
	double most = 0;
	while (num(&e, "SELECT count(*) FROM cairn.runs WHERE finished_at IS NULL") > 0) {
		double bytes = metric(&a, "cairn_journal_cache_bytes");
		cr_assert_leq(bytes, 96 * 1024, "the cache holds %.0f bytes", bytes);
		if (bytes > most)
			most = bytes;
		usleep(20000);
	}
	for (int i = 0; i < RUNS; i++)
		expect_long(&e, ids[i], 300, 60000);
	cr_assert_gt(most, 0, "nothing was cached");
	wk_stop(&a);
	teardown(&e);
}

/* A worker's cached copy of a journal holds while the run's count of cuts
 * is the one it read: `cairn retry` and cairn.retry count theirs, as a run
 * retry does (see the test above). */
Test(journal, a_retry_from_the_cli_or_the_sql_api_counts_the_cut_it_makes)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL, NULL);
	cairn_enqueue_opts o = {.input = "{\"attempts\": 1}", .max_attempts = 1};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(e.cl, "t.flaky", &o, &r), CAIRN_OK);
	cairn_enqueued_clear(&r);
	cairn_run *run = finished(&e, r.id, 30000);
	cr_assert_str_eq(run->status, "failed");
	cairn_run_free(run);
	cr_assert_eq(num(&e, "SELECT journal_cuts FROM cairn.runs WHERE id = %" PRId64, r.id), 0);
	char ref[32];
	snprintf(ref, sizeof ref, "%" PRId64, r.id);
	cr_assert_eq(tcli(e.db, NULL, NULL, "retry", ref, NULL), 0);
	cr_assert_eq(num(&e, "SELECT journal_cuts FROM cairn.runs WHERE id = %" PRId64, r.id), 1);
	cr_assert(wait_num(&e, 1, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                   " AND status = 'failed'",
	                   r.id),
	          "the retried run never failed again");
	char sql[96];
	snprintf(sql, sizeof sql, "SELECT cairn.retry(%" PRId64 ")", r.id);
	tdb_exec(e.c, sql);
	cr_assert_eq(num(&e, "SELECT journal_cuts FROM cairn.runs WHERE id = %" PRId64, r.id), 2);
	wk_stop(&a);
	teardown(&e);
}

/* Every wake of a cached run loads a few new entries: the journal's whole
 * stored size is what counts against max_journal_bytes. */
Test(journal, a_journal_over_max_journal_bytes_is_refused_naming_continue_as_new)
{
	env e;
	setup(&e);
	tdb_exec(e.c, "UPDATE cairn.settings SET value = '30000' WHERE name = 'max_journal_bytes'");
	wk a;
	wk_start(&a, e.db, NULL, NULL);
	char in[128];
	long_input(in, sizeof in, 2000, 10, 2);
	int64_t id = enqueue(&e, "t.long", in);
	cairn_run *r = finished(&e, id, 120000);
	cr_assert_str_eq(r->status, "failed");
	cr_assert(strstr(r->error, "cannot load the run: its journal is "), "%s", r->error);
	cr_assert(strstr(r->error, "the limit (max_journal_bytes in cairn.settings) is 30000"),
	          "%s", r->error);
	cr_assert(strstr(r->error, "continue as new (cairn_continue_as_new)"), "%s", r->error);
	cairn_run_free(r);
	cr_assert_gt(metric(&a, "cairn_journal_cache_hits_total"), 0,
	             "refused on a load of the whole journal, not on the cached one");
	wk_stop(&a);
	teardown(&e);
}

/* ------------------------------------------------------ continue as new */

/* The runs of the chain of run head, first to last. */
static int64_t chain_runs(env *e, int64_t head)
{
	return num(e,
	           "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " OR chain_id = %" PRId64,
	           head, head);
}

/* Every run of head's chain but its last has exactly one successor, and
 * the chain has n runs. The runs are read once (a MATERIALIZED CTE): Citus
 * plans no subquery over runs correlated with another read of runs. */
static void expect_one_successor_each(env *e, int64_t head, int64_t n)
{
	cr_assert_eq(chain_runs(e, head), n);
	cr_assert_eq(
	    num(e,
	        "WITH r AS MATERIALIZED (SELECT id, chain_id, continued_from FROM cairn.runs) "
	        "SELECT count(*) FROM r p WHERE (p.id = %" PRId64 " OR p.chain_id = %" PRId64
	        ") AND (SELECT count(*) FROM r s WHERE s.continued_from = p.id) <> 1",
	        head, head),
	    1, "a run of the chain has no successor or more than one (only the last has none)");
}

Test(chain, a_run_that_continues_as_new_hands_on_to_its_successor_and_result_follows_the_chain)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL, NULL);
	int64_t head = enqueue_key(&e, "t.loop", "chain-1", "{\"n\": 0, \"until\": 5}");
	char *out = NULL, *err = NULL;
	int code =
	    tcli(e.db, &out, &err, "result", "t.loop/chain-1", "--wait", "--timeout", "60s", NULL);
	cr_assert_eq(code, 0, "cairn result: %s", err ? err : "");
	cr_assert_eq(jnum(out, "n"), 5, "%s", out);
	free(out);
	free(err);
	cr_assert_eq(cairn_run_wait(e.cl, head, 1000), CAIRN_OK, "the chain has ended");
	expect_one_successor_each(&e, head, 6);
	int64_t second = num(&e, "SELECT id FROM cairn.runs WHERE continued_from = %" PRId64, head);
	int64_t last;
	cr_assert_eq(cairn_run_last(e.cl, head, &last), CAIRN_OK);
	cr_assert_eq(last,
	             num(&e, "SELECT max(id) FROM cairn.runs WHERE chain_id = %" PRId64, head));
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e.cl, head, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, "completed");
	cr_assert_null(r->output);
	cr_assert_eq(r->continued_to, second);
	cr_assert_eq(r->continued_from, 0);
	cairn_run_free(r);
	cr_assert_eq(cairn_run_get(e.cl, second, &r), CAIRN_OK);
	cr_assert_eq(r->continued_from, head);
	char key[64];
	snprintf(key, sizeof key, "cairn.next:%" PRId64, head);
	cr_assert_str_eq(r->key, key);
	cr_assert_str_eq(r->input, "{\"n\": 1, \"until\": 5}");
	cairn_run_free(r);
	/* cairn status links the chain, both ways. */
	char ref[32];
	snprintf(ref, sizeof ref, "%" PRId64, head);
	cr_assert_eq(tcli(e.db, &out, NULL, "status", ref, "--json", NULL), 0);
	cr_assert_eq(jnum(out, "next"), (double)second, "%s", out);
	free(out);
	snprintf(ref, sizeof ref, "%" PRId64, second);
	cr_assert_eq(tcli(e.db, &out, NULL, "status", ref, NULL), 0);
	char line[96];
	snprintf(line, sizeof line, "previous   %" PRId64 " (this run continues it as new)", head);
	cr_assert(strstr(out, line), "%s", out);
	free(out);
	/* The HTTP API shows the link. */
	char path[64];
	snprintf(path, sizeof path, "/v1/runs/%" PRId64, head);
	cr_assert_eq(thttp_auth(a.port, "GET", path, "Bearer " TOKEN, &out, NULL), 200);
	cr_assert_eq(jnum(out, "continued_to"), (double)second, "%s", out);
	free(out);
	/* Enqueueing the chain's key again finds its first run. */
	cr_assert_eq(enqueue_key(&e, "t.loop", "chain-1", NULL), head);
	wk_stop(&a);
	teardown(&e);
}

/*
 * The commit that continues a run as new waits for the run's row, which
 * the test holds locked, and the worker is killed while it waits; then the
 * lock goes, and a new worker takes over. Whether that commit landed or
 * not, the chain goes on through exactly one successor of each run.
 */
Test(chain, a_worker_killed_in_the_commit_that_continues_a_run_leaves_exactly_one_successor)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, NULL, NULL);
	int64_t head = enqueue(&e, "t.loop", "{\"n\": 0, \"until\": 3, \"gate\": true}");
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND name = 'work'",
	                   head),
	          "the run never did its work");
	PGconn *lock = tdb_connect(e.db);
	/* In its part: Citus locks a row FOR UPDATE only by the distribution
	 * column's value. */
	char sql[192];
	snprintf(sql, sizeof sql,
	         "SELECT id FROM cairn.runs WHERE id = %" PRId64 " AND part = %" PRId64
	         " FOR UPDATE",
	         head, tdb_run_part(e.c, head));
	tdb_exec(lock, "BEGIN");
	tdb_exec(lock, sql);
	char flag[96];
	snprintf(flag, sizeof flag, "INSERT INTO t_flags VALUES (%" PRId64 ")", head);
	tdb_exec(e.c, flag);
	cr_assert(wait_num(&e, 1, 20000, "%s", tdb_commit_waiting()),
	          "the continue never waited for the run's row");
	wk_kill(&a);
	tdb_exec(lock, "ROLLBACK");
	PQfinish(lock);
	wk_start(&b, e.db, NULL, NULL);
	cr_assert_eq(cairn_run_wait(e.cl, head, 60000), CAIRN_OK);
	expect_one_successor_each(&e, head, 4);
	int64_t last;
	cr_assert_eq(cairn_run_last(e.cl, head, &last), CAIRN_OK);
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e.cl, last, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(jnum(r->output, "n"), 3);
	cairn_run_free(r);
	wk_stop(&b);
	teardown(&e);
}

Test(chain, a_chain_killed_again_and_again_at_any_point_goes_on_through_one_successor_each)
{
	env e;
	setup(&e);
	wk w;
	int64_t head = enqueue(&e, "t.loop", "{\"n\": 0, \"until\": 60, \"sleep_ms\": 30}");
	for (int round = 0; round < 6; round++) {
		wk_start(&w, e.db, NULL, NULL);
		/* Some links further, then the worker dies wherever it is. */
		int64_t before = chain_runs(&e, head);
		wait_num(&e, before + 3, 10000,
		         "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
		         " OR chain_id = %" PRId64,
		         head, head);
		usleep((useconds_t)(round * 37 % 100) * 1000);
		wk_kill(&w);
	}
	wk_start(&w, e.db, NULL, NULL);
	cr_assert_eq(cairn_run_wait(e.cl, head, 120000), CAIRN_OK);
	expect_one_successor_each(&e, head, 61);
	int64_t last;
	cr_assert_eq(cairn_run_last(e.cl, head, &last), CAIRN_OK);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                 " AND status = 'completed' AND (output->>'n')::int = 60",
	                 last),
	             1);
	wk_stop(&w);
	teardown(&e);
}

/* The payloads of a run's output, as text ("[1,2,3]"). */
static char *output_of(env *e, int64_t id)
{
	cairn_run *r = finished(e, id, 60000);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	char *o = strdup(r->output);
	cairn_run_free(r);
	return o;
}

Test(chain, signals_to_a_run_that_continued_reach_the_last_run_and_unconsumed_ones_carry_over)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL, NULL);
	/* One message per run of the chain: the second and third are buffered
	 * by a run that continues, or sent to one that has. */
	int64_t head = enqueue(&e, "t.inbox", "{\"want\": 3}");
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND status = 'waiting'",
	                   head),
	          "the run never awaited");
	cr_assert_eq(cairn_signal(e.cl, head, "msg", "1"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_signal(e.cl, head, "msg", "2"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_signal(e.cl, head, "msg", "3"), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	int64_t last;
	cr_assert_eq(cairn_run_wait(e.cl, head, 60000), CAIRN_OK);
	cr_assert_eq(cairn_run_last(e.cl, head, &last), CAIRN_OK);
	char *o = output_of(&e, last);
	cr_assert_str_eq(o, "[1, 2, 3]");
	free(o);
	cr_assert_eq(cairn_signal(e.cl, head, "msg", "4"), CAIRN_ESTATE,
	             "a signal to a chain that ended");
	cr_assert(strstr(cairn_client_errmsg(e.cl), "it has already finished"), "%s",
	          cairn_client_errmsg(e.cl));

	/* The SQL API's signal follows the chain too; so does a cancel. */
	head = enqueue(&e, "t.inbox", "{\"want\": 3}");
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                   " AND status = 'waiting'",
	                   head),
	          "the run never awaited");
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT cairn.signal(%" PRId64 ", 'msg', '1'::jsonb)", head);
	tdb_exec(e.c, sql);
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.runs s JOIN cairn.steps t "
	                   "ON t.run_id = s.id AND t.part = s.part "
	                   "WHERE s.continued_from = %" PRId64 " AND t.status = 'waiting'",
	                   head),
	          "the successor never awaited");
	snprintf(sql, sizeof sql, "SELECT cairn.signal(%" PRId64 ", 'msg', '2'::jsonb)", head);
	tdb_exec(e.c, sql);
	cr_assert(wait_num(&e, 3, 20000,
	                   "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                   " OR chain_id = %" PRId64,
	                   head, head),
	          "the second message never made the chain go on");
	cr_assert(wait_num(&e, 1, 20000,
	                   "SELECT count(*) FROM cairn.steps t JOIN cairn.runs s "
	                   "ON s.id = t.run_id AND s.part = t.part "
	                   "WHERE s.chain_id = %" PRId64 " AND s.continued_from <> %" PRId64
	                   " AND t.status = 'waiting'",
	                   head, head),
	          "the third run never awaited");
	cr_assert_eq(cairn_cancel(e.cl, head), CAIRN_OK, "%s", cairn_client_errmsg(e.cl));
	cr_assert_eq(cairn_run_wait(e.cl, head, 60000), CAIRN_OK);
	cr_assert_eq(cairn_run_last(e.cl, head, &last), CAIRN_OK);
	cairn_run *r;
	cr_assert_eq(cairn_run_get(e.cl, last, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, "cancelled", "the cancel did not reach the chain's last run");
	cairn_run_free(r);
	wk_stop(&a);
	teardown(&e);
}

Test(chain, a_child_that_continues_as_new_reports_to_its_parent_when_its_chain_ends)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, NULL, NULL);
	int64_t parent = enqueue(
	    &e, "t.parent",
	    "{\"child\": \"t.loop\", \"input\": {\"n\": 0, \"until\": 3, \"sleep_ms\": 10}}");
	cr_assert_eq(cairn_signal(e.cl, parent, "go", NULL), CAIRN_OK, "%s",
	             cairn_client_errmsg(e.cl));
	char *o = output_of(&e, parent);
	cJSON *j = cJSON_Parse(o);
	const cJSON *child = cJSON_GetObjectItemCaseSensitive(j, "child");
	const cJSON *out = cJSON_GetObjectItemCaseSensitive(j, "output");
	cr_assert(cJSON_IsNumber(child) && cJSON_IsObject(out), "%s", o);
	cr_assert_eq(jnum(o, "child"), (double)num(&e,
	                                           "SELECT min(id) FROM cairn.runs "
	                                           "WHERE parent_id = %" PRId64,
	                                           parent));
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(out, "n")->valuedouble, 3, "%s", o);
	cJSON_Delete(j);
	free(o);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64, parent),
	             4, "the child's successors are the parent's children too");
	wk_stop(&a);
	teardown(&e);
}

/*
 * A chain that goes on and on: with CAIRN_RETENTION=1s the janitor removes
 * the runs of the chain that ended more than a second ago, and keeps the
 * first (whose key names the chain) until the others are gone.
 */
Test(chain, the_janitor_removes_the_links_that_ended_and_keeps_the_first_while_the_chain_lives)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, "CAIRN_RETENTION=1s", NULL);
	/* On Citus, where a link costs about five times as much, 100 links:
	 * the janitor's statements are the same. */
	int until = tdb_on_citus() ? 100 : 250;
	char in[96];
	snprintf(in, sizeof in, "{\"n\": 0, \"until\": %d, \"sleep_ms\": 20}", until);
	int64_t head = enqueue_key(&e, "t.loop", "forever", in);
	int64_t most = 0, ended;
	while ((ended = num(&e,
	                    "SELECT count(*) FROM cairn.runs WHERE chain_id = %" PRId64
	                    " AND (output->>'n')::int = %d",
	                    head, until)) == 0) {
		int64_t n = chain_runs(&e, head);
		if (n > most)
			most = n;
		cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64, head),
		             1, "the chain's first run went while the chain lived");
		cr_assert_lt(num(&e,
		                 "SELECT count(*) FROM cairn.runs WHERE chain_id = %" PRId64
		                 " AND finished_at < now() - interval '10 seconds'",
		                 head),
		             1, "a link that ended 10 s ago is still there");
		usleep(100000);
	}
	int64_t links = num(
	    &e, "SELECT max((input->>'n')::int) FROM cairn.runs WHERE chain_id = %" PRId64, head);
	cr_assert_eq(links, until);
	cr_assert_lt(most, until * 4 / 5, "the chain kept %" PRId64 " of its %d runs at once", most,
	             until + 1);
	/* Once it ended, all of it goes, the first run last. */
	cr_assert(wait_num(&e, 1, 30000,
	                   "SELECT (count(*) = 0)::int FROM cairn.runs WHERE id = %" PRId64
	                   " OR chain_id = %" PRId64,
	                   head, head),
	          "the ended chain was not removed");
	wk_stop(&a);
	teardown(&e);
}
