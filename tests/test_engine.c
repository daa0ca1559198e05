/*
 * test_engine.c - the engine's pure parts without a database: the journal
 * as the claim returns it, replay (exec_job with a flush that records
 * instead of writing), the group commit's encoding and its named
 * parameters, the state tables and the shard map.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cairn.h"
#include "clock.h"
#include "commit.h"
#include "exec.h"
#include "hash.h"
#include "jcache.h"
#include "journal.h"
#include "shardmap.h"
#include "sqlparam.h"
#include "state.h"

/* ---------------------------------------------------------------- journal */

/* One journal row as the claim renders it (numbers as text, the output as
 * JSON text in a string). */
#define ROW(seq, name, kind, status, output)                                                       \
	"{\"seq\":\"" seq "\",\"name\":\"" name "\",\"kind\":\"" kind "\",\"status\":\"" status    \
	"\",\"output\":\"" output "\",\"error\":null,\"attempts\":\"1\",\"wake_at\":null,"         \
	"\"started_at\":\"1700000000000\"}"

Test(journal, a_gap_in_seq_is_kept_and_lookups_find_both_sides)
{
	journal j;
	buf err = BUF_INIT;
	const char *text = "[" ROW("2", "c", "step", "completed",
	                           "3") "," ROW("0", "a", "step", "completed", "1") "]";
	cr_assert_eq(journal_parse(text, &j, &err), 0, "%s", buf_str(&err));
	cr_assert_eq(j.n, 2);
	cr_assert_not_null(journal_at(&j, 0));
	cr_assert_null(journal_at(&j, 1));
	cr_assert_str_eq(journal_at(&j, 2)->name, "c");
	cr_assert_eq(journal_at(&j, 2)->started_ms, 1700000000000LL);
	journal_free(&j);
	buf_free(&err);
}

Test(journal, a_seq_far_beyond_the_row_count_costs_nothing_extra)
{
	journal j;
	buf err = BUF_INIT;
	const char *text = "[" ROW("0", "a", "step", "completed",
	                           "1") "," ROW("2147483647", "z", "sleep", "waiting", "null") "]";
	cr_assert_eq(journal_parse(text, &j, &err), 0, "%s", buf_str(&err));
	cr_assert_eq(j.n, 2);
	cr_assert_eq(journal_at(&j, 2147483647)->kind, KIND_SLEEP);
	cr_assert_null(journal_at(&j, 1));
	journal_free(&j);
	buf_free(&err);
}

static void expect_corrupt(const char *text, const char *says)
{
	journal j;
	buf err = BUF_INIT;
	cr_assert_eq(journal_parse(text, &j, &err), -CAIRN_EINVAL, "accepted: %s", text);
	cr_assert(strstr(buf_str(&err), says), "error \"%s\" lacks \"%s\"", buf_str(&err), says);
	cr_assert_null(j.e);
	buf_free(&err);
}

Test(journal, corrupt_rows_are_refused_naming_the_row_and_the_field)
{
	expect_corrupt("[" ROW("0", "a", "step", "completed", "1") "," ROW("1", "b", "teleport",
	                                                                   "completed", "1") "]",
	               "journal row 2: unknown kind \"teleport\"");
	expect_corrupt("[" ROW("0", "a", "step", "done", "1") "]", "unknown status \"done\"");
	expect_corrupt("[" ROW("-1", "a", "step", "completed", "1") "]", "journal row 1: seq");
	expect_corrupt("[" ROW("x", "a", "step", "completed", "1") "]", "seq");
	expect_corrupt("[{\"seq\":0,\"name\":\"a\",\"kind\":\"step\",\"status\":\"completed\","
	               "\"attempts\":\"1\"}]",
	               "seq is missing or not an integer text");
	expect_corrupt("[" ROW("0", "", "step", "completed", "1") "]", "name is missing");
	expect_corrupt("[" ROW("3", "a", "step", "completed", "1") "," ROW("3", "b", "step",
	                                                                   "completed", "1") "]",
	               "seq 3: the seq appears twice");
	expect_corrupt("{\"seq\":\"0\"}", "not a JSON array");
	expect_corrupt("[1,2", "journal row 1: not an object");
	expect_corrupt("[" ROW("0", "a", "step", "completed", "1") ",", "not a JSON array");
}

Test(journal, signals_are_taken_oldest_first_per_name)
{
	signal_box b;
	buf err = BUF_INIT;
	const char *text = "[{\"id\":\"9\",\"name\":\"go\",\"payload\":\"2\"},"
	                   "{\"id\":\"4\",\"name\":\"go\",\"payload\":\"1\"},"
	                   "{\"id\":\"5\",\"name\":\"stop\",\"payload\":\"null\"}]";
	cr_assert_eq(signals_parse(text, &b, &err), 0, "%s", buf_str(&err));
	cr_assert_eq(signals_take(&b, "go")->id, 4);
	cr_assert_eq(signals_take(&b, "go")->id, 9);
	cr_assert_null(signals_take(&b, "go"));
	cr_assert_eq(signals_take(&b, "stop")->id, 5);
	signals_free(&b);
	cr_assert_eq(signals_parse("[{\"id\":\"0\",\"name\":\"go\"}]", &b, &err), -CAIRN_EINVAL);
	buf_free(&err);
}

/* ---------------------------------------------------------- journal cache */

/* The claim's text of n entries from seq first on, all completed but the
 * one at seq waiting (-1: none), each output "[seq]" and stored size 100. */
static char *entries(int first, int n, int waiting)
{
	buf t = BUF_INIT;
	buf_puts(&t, "[");
	for (int i = first; i < first + n; i++)
		buf_printf(&t,
		           "%s{\"seq\":\"%d\",\"name\":\"s%d\",\"kind\":\"step\","
		           "\"status\":\"%s\",\"output\":\"[%d]\",\"error\":null,"
		           "\"attempts\":\"1\",\"wake_at\":null,\"started_at\":\"1\","
		           "\"size\":\"100\"}",
		           i > first ? "," : "", i, i, i == waiting ? "waiting" : "completed", i);
	buf_puts(&t, "]");
	return buf_detach(&t);
}

/* A cached run of the first n entries (as a claim of them leaves it). */
static jcache_run *cached_run(int64_t id, int n)
{
	journal tail;
	buf err = BUF_INIT;
	char *text = entries(0, n, -1);
	cr_assert_eq(journal_parse(text, &tail, &err), 0, "%s", buf_str(&err));
	jcache_run *r = NULL;
	cr_assert_eq(jcache_run_extend(&r, id, 0, &tail), 0);
	journal_free(&tail);
	free(text);
	buf_free(&err);
	return r;
}

Test(jcache, a_run_is_kept_from_seq_0_up_to_its_first_entry_that_may_still_change)
{
	journal tail;
	buf err = BUF_INIT;
	char *text = entries(0, 100, 80); /* 80 waits: what follows may be cut */
	cr_assert_eq(journal_parse(text, &tail, &err), 0, "%s", buf_str(&err));
	free(text);
	jcache_run *r = NULL;
	cr_assert_eq(jcache_run_extend(&r, 7, 2, &tail), 0);
	journal_free(&tail);
	cr_assert_not_null(r);
	cr_assert_eq(r->upto, 80);
	cr_assert_eq(r->cuts, 2);
	cr_assert_eq(r->db_bytes, 80 * 100, "the stored size of what it holds");
	cr_assert_str_eq(jcache_run_at(r, 79)->name, "s79");
	cr_assert_null(jcache_run_at(r, 80));
	/* The next claim's entries from 80 on: 80 settled now, a gap at 83. */
	text = entries(80, 3, -1);
	cr_assert_eq(journal_parse(text, &tail, &err), 0, "%s", buf_str(&err));
	free(text);
	cr_assert_eq(jcache_run_extend(&r, 7, 2, &tail), 0);
	journal_free(&tail);
	cr_assert_eq(r->upto, 83);
	cr_assert_str_eq(jcache_run_at(r, 82)->output, "[82]", "a copy that outlives the claim");
	jcache_run_free(r);
	/* Too few entries to be worth keeping: none is made. */
	text = entries(0, JCACHE_MIN_ENTRIES - 1, -1);
	cr_assert_eq(journal_parse(text, &tail, &err), 0, "%s", buf_str(&err));
	free(text);
	r = NULL;
	cr_assert_eq(jcache_run_extend(&r, 8, 0, &tail), 0);
	cr_assert_null(r);
	journal_free(&tail);
	buf_free(&err);
}

Test(jcache, the_cache_stays_within_its_byte_bound_letting_the_least_recently_used_go)
{
	jcache_run *probe = cached_run(1, 100);
	size_t one = probe->mem_bytes;
	jcache_run_free(probe);
	jcache *c = jcache_new(3 * one + one / 2);
	jcache_run *gone = NULL;
	for (int64_t id = 1; id <= 5; id++) {
		jcache_put(c, cached_run(id, 100), &gone);
		cr_assert_leq(jcache_bytes(c), 3 * one + one / 2, "over its bound after run %ld",
		              (long)id);
	}
	cr_assert_eq(jcache_count(c), 3);
	int n = 0;
	for (jcache_run *g = gone; g; g = g->older, n++)
		cr_assert(g->run_id == 1 || g->run_id == 2, "run %ld went", (long)g->run_id);
	cr_assert_eq(n, 2, "the two least recently used went");
	jcache_run_free_list(gone);
	gone = NULL;
	/* Taking a run and putting it back makes it the most recently used. */
	jcache_put(c, jcache_take(c, 3), &gone);
	jcache_put(c, cached_run(6, 100), &gone);
	cr_assert_eq(gone->run_id, 4);
	cr_assert_null(gone->older);
	jcache_run_free_list(gone);
	gone = NULL;
	pgarr runs = PGARR_INIT, upto = PGARR_INIT, cuts = PGARR_INIT;
	cr_assert_eq(jcache_claim_args(c, &runs, &upto, &cuts), 3);
	cr_assert_str_eq(pgarr_str(&runs), "{6,3,5}");
	cr_assert_str_eq(pgarr_str(&upto), "{100,100,100}");
	pgarr_free(&runs);
	pgarr_free(&upto);
	pgarr_free(&cuts);
	/* A run larger than the whole bound is not kept at all. */
	jcache_put(c, cached_run(9, 400), &gone);
	cr_assert_eq(gone->run_id, 9);
	cr_assert_null(jcache_take(c, 9));
	jcache_run_free_list(gone);
	jcache_free(c);
	/* A cache of 0 bytes keeps nothing. */
	c = jcache_new(0);
	gone = NULL;
	jcache_put(c, cached_run(1, 100), &gone);
	cr_assert_eq(jcache_count(c), 0);
	jcache_run_free_list(gone);
	jcache_free(c);
}

/* ---------------------------------------------------------------- replay */

static int ran_a, ran_b, ran_c, flushes;

static int step_n(cairn_ctx *ctx, void *arg, cJSON **out)
{
	int *counter = arg;
	(*counter)++;
	*out = cJSON_CreateNumber(100);
	return CAIRN_OK;
}

/* Steps a, b, c in order; the output is their results. */
static int abc(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *a, *b, *c;
	CAIRN_TRY(cairn_step(ctx, "a", step_n, &ran_a, &a));
	CAIRN_TRY(cairn_step(ctx, "b", step_n, &ran_b, &b));
	CAIRN_TRY(cairn_step(ctx, "c", step_n, &ran_c, &c));
	*output = cJSON_CreateArray();
	cJSON_AddItemToArray(*output, cJSON_Duplicate(a, 1));
	cJSON_AddItemToArray(*output, cJSON_Duplicate(b, 1));
	cJSON_AddItemToArray(*output, cJSON_Duplicate(c, 1));
	return CAIRN_OK;
}

/* Waits for "go" (timing out at once), then asks for a run retry. */
static int wait_then_retry(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int rc = cairn_await_signal(ctx, "go", 0, NULL);
	if (rc != CAIRN_ETIMEOUT)
		return rc;
	CAIRN_TRY(cairn_step(ctx, "a", step_n, &ran_a, NULL));
	return cairn_retryable(ctx, "try the run again");
}

static int stop_requested;

/* A step that gives up the way a polite step does when the worker stops. */
static int step_until_stopped(cairn_ctx *ctx, void *arg, cJSON **out)
{
	stop_requested = 1;
	return cairn_should_stop(ctx) ? cairn_retryable(ctx, "interrupted") : CAIRN_OK;
}

static int polite(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cairn_retry_policy once = {.max_attempts = 1};
	return cairn_step_retry(ctx, "work", &once, step_until_stopped, NULL, NULL);
}

static int fail_b(cairn_ctx *ctx, void *arg, cJSON **out)
{
	return cairn_fail(ctx, "b broke");
}

/* Step a, then step b fails for good, and the workflow asks for a run retry. */
static int a_then_b_fails(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	CAIRN_TRY(cairn_step(ctx, "a", step_n, &ran_a, NULL));
	int rc = cairn_step(ctx, "b", fail_b, NULL, NULL);
	return rc == CAIRN_EFAIL ? cairn_retryable(ctx, "again") : rc;
}

static int sleeper(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	return cairn_sleep(ctx, "nap", 10000);
}

static int await_go(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *v;
	int rc = cairn_await_signal(ctx, "go", 1000, &v);
	if (rc == CAIRN_ETIMEOUT)
		return cairn_fail(ctx, "no go");
	CAIRN_TRY(rc);
	*output = cJSON_Duplicate(v, 1);
	return CAIRN_OK;
}

/* Steps s0 .. s69, each [i], then a sleep: its output is the sum. */
static int many(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	double sum = 0;
	for (int i = 0; i < 70; i++) {
		char name[16];
		cJSON *v;
		snprintf(name, sizeof name, "s%d", i);
		CAIRN_TRY(cairn_step(ctx, name, step_n, &ran_b, &v));
		sum += cJSON_GetArrayItem(v, 0)->valuedouble;
	}
	CAIRN_TRY(cairn_sleep(ctx, "nap", 10000));
	*output = cJSON_CreateNumber(sum);
	return CAIRN_OK;
}

/* Step a, then continues as new with {"n": n + 1}; a durable call after
 * that returns what the continue did. */
static int again(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	CAIRN_TRY(cairn_step(ctx, "a", step_n, &ran_a, NULL));
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(input, "n");
	cJSON *next = cJSON_CreateObject();
	cJSON_AddNumberToObject(next, "n", (n ? n->valuedouble : 0) + 1);
	int rc = cairn_continue_as_new(ctx, next);
	cJSON_Delete(next);
	if (rc == CAIRN_CONTINUED)
		cr_assert_eq(cairn_step(ctx, "b", step_n, &ran_b, NULL), CAIRN_CONTINUED);
	return rc;
}

/* Continues as new with an input nested too deep to be stored. */
static int too_deep(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *v = cJSON_CreateNumber(1);
	for (int i = 0; i < 200; i++) {
		cJSON *a = cJSON_CreateArray();
		cJSON_AddItemToArray(a, v);
		v = a;
	}
	int rc = cairn_continue_as_new(ctx, v);
	cJSON_Delete(v);
	return rc;
}

/* Children: three of square ({"x": i}), started in a row. */
static int start3(cairn_ctx *ctx, int64_t ids[3])
{
	for (int i = 0; i < 3; i++) {
		cJSON *in = cJSON_CreateObject();
		cJSON_AddNumberToObject(in, "x", i);
		int rc = cairn_child_start(ctx, "kid", "square", in, &ids[i]);
		cJSON_Delete(in);
		CAIRN_TRY(rc);
	}
	return CAIRN_OK;
}

/* Starts three children and returns. */
static int kids3(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t ids[3];
	return start3(ctx, ids);
}

/* The outputs of results (null for one not done), as the workflow's output. */
static cJSON *outputs_of(const cairn_child_result *r, int n)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(a, r[i].done && r[i].output ? cJSON_Duplicate(r[i].output, 1)
		                                                 : cJSON_CreateNull());
	return a;
}

/* Starts three children and waits for all of them. */
static int kids_all(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t ids[3];
	cairn_child_result r[3];
	CAIRN_TRY(start3(ctx, ids));
	CAIRN_TRY(cairn_child_wait_all(ctx, ids, 3, -1, r));
	*output = outputs_of(r, 3);
	return CAIRN_OK;
}

/* Starts three children, waits for any, then for all. */
static int kids_any_all(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t ids[3];
	cairn_child_result r[3];
	CAIRN_TRY(start3(ctx, ids));
	CAIRN_TRY(cairn_child_wait_any(ctx, ids, 3, -1, r));
	CAIRN_TRY(cairn_child_wait_all(ctx, ids, 3, -1, r));
	*output = outputs_of(r, 3);
	return CAIRN_OK;
}

/* Waits for run 12345, which it never started. */
static int kid_stranger(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t ids[3], stranger = 12345;
	cairn_child_result r[1];
	CAIRN_TRY(start3(ctx, ids));
	return cairn_child_wait_all(ctx, &stranger, 1, -1, r);
}

/* exec_env.child_ids without a database: values of the sequence from 501
 * on (exec makes each a run id with its shard), and the orphan
 * of square at orphan_seq (< 0: none) as run 900. */
static int64_t next_id;
static int orphan_seq, ids_asked;
static int fake_child_ids(const exec_env *e, int64_t run, int n, int orphans, exec_ids *out,
                          buf *err)
{
	ids_asked++;
	*out = (exec_ids){.ids = malloc((size_t)n * sizeof(int64_t)),
	                  .nids = n,
	                  .orphans = calloc(1, sizeof *out->orphans),
	                  .shards = 16};
	for (int i = 0; i < n; i++)
		out->ids[i] = next_id++;
	if (orphans && orphan_seq >= 0) {
		out->orphans[0] = (struct exec_orphan){
		    .id = 900, .seq = orphan_seq, .workflow = strdup("square")};
		out->norphans = 1;
	}
	return 0;
}

/* exec_env.more_ends without a database: more_json, and the id it was
 * asked after. */
static const char *more_json;
static int64_t more_after;
static int fake_more_ends(const exec_env *e, int64_t run, int64_t after, char **json, buf *err)
{
	more_after = after;
	*json = more_json ? strdup(more_json) : NULL;
	return 0;
}

static int record_flush(void *arg, commit *c)
{
	flushes++;
	c->ok = 1;
	return 0;
}

static int never_stop(void *arg, const job *j)
{
	return stop_requested;
}

static registry *reg;
static metrics counters;
static logger quiet = {.level = LOG_ERROR, .format = LOG_LOGFMT, .fd = 2};
static exec_env env;

static void replay_setup(void)
{
	cr_assert_eq(registry_new(&reg), 0);
	buf err = BUF_INIT;
	cr_assert_eq(registry_add_workflow(reg, "abc", abc, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "sleeper", sleeper, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "await", await_go, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "retry", wait_then_retry, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "polite", polite, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "retry2", a_then_b_fails, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "many", many, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "again", again, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "too_deep", too_deep, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "kids3", kids3, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "kids_all", kids_all, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "kids_any_all", kids_any_all, NULL, &err), 0);
	cr_assert_eq(registry_add_workflow(reg, "kid_stranger", kid_stranger, NULL, &err), 0);
	buf_free(&err);
	env = (exec_env){.reg = reg,
	                 .log = &quiet,
	                 .m = &counters,
	                 .max_payload_bytes = 1 << 20,
	                 .unknown_workflow_timeout_ms = 60000,
	                 .poison_after = 3,
	                 .flush = record_flush,
	                 .must_stop = never_stop,
	                 .child_ids = fake_child_ids,
	                 .more_ends = fake_more_ends};
	ran_a = ran_b = ran_c = flushes = stop_requested = 0;
	next_id = 501;
	orphan_seq = -1;
	ids_asked = 0;
	more_json = NULL;
	more_after = -1;
}

static void replay_teardown(void)
{
	registry_free(reg);
}

static int64_t msgs[] = {11, 12};

/* A claimed run of workflow with this journal (the job owns copies). */
static job *claimed(const char *workflow, const char *steps, const char *signals)
{
	job *j = calloc(1, sizeof *j);
	j->run_id = 7;
	j->group_name = "default";
	j->owner = 1;
	j->epoch = 1;
	j->workflow = strdup(workflow);
	j->input = strdup("null");
	j->status = RUN_RUNNING;
	j->attempt = 1;
	j->max_attempts = 3;
	j->db_now_ms = 1700000000000LL;
	j->mono_at_load = clock_mono_ms();
	j->journal = steps ? strdup(steps) : NULL;
	j->signals = signals ? strdup(signals) : NULL;
	j->msgs = malloc(sizeof msgs);
	memcpy(j->msgs, msgs, sizeof msgs);
	j->nmsgs = 2;
	return j;
}

TestSuite(replay, .init = replay_setup, .fini = replay_teardown);

Test(replay, journaled_steps_are_not_run_again_and_new_ones_are_committed_in_order)
{
	job *j = claimed("abc", "[" ROW("0", "a", "step", "completed", "1") "]", NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(ran_a, 0, "a journaled step ran again");
	cr_assert_eq(ran_b, 1);
	cr_assert_eq(ran_c, 1);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_COMPLETED);
	cr_assert_str_eq(c->output, "[1,100,100]");
	/* b was flushed before c ran; c comes with the final commit. */
	cr_assert_eq(flushes, 1);
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].seq, 2);
	cr_assert_str_eq(c->rows[0].name, "c");
	commit_free(c);
	job_free(j);
}

Test(replay, a_gap_in_the_journal_runs_only_the_missing_step)
{
	job *j = claimed("abc",
	                 "[" ROW("0", "a", "step", "completed", "1") "," ROW("2", "c", "step",
	                                                                     "completed", "3") "]",
	                 NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(ran_a + ran_c, 0, "a journaled step ran again");
	cr_assert_eq(ran_b, 1, "the missing step did not run");
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_str_eq(c->output, "[1,100,3]");
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].seq, 1);
	commit_free(c);
	job_free(j);
}

Test(replay, a_corrupt_journal_fails_the_run_alone_with_the_reason)
{
	job *j = claimed("abc",
	                 "[" ROW("0", "a", "step", "completed", "1") "," ROW("1", "b", "step",
	                                                                     "exploded", "1") "]",
	                 NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(ran_a + ran_b + ran_c, 0, "a step ran on a corrupt journal");
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert(
	    strstr(c->error, "cannot load the run: journal row 2: unknown status \"exploded\""),
	    "%s", c->error);
	commit_free(c);
	job_free(j);
}

Test(replay, a_huge_seq_in_the_journal_is_just_a_later_entry)
{
	job *j = claimed("abc",
	                 "[" ROW("0", "a", "step", "completed",
	                         "1") "," ROW("2000000000", "zz", "step", "completed", "9") "]",
	                 NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	cr_assert_eq(ran_a, 0);
	cr_assert_eq(ran_b + ran_c, 2);
	commit_free(c);
	job_free(j);
}

Test(replay, a_different_step_at_a_journaled_position_is_non_determinism)
{
	job *j = claimed("abc", "[" ROW("0", "x", "step", "completed", "1") "]", NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(ran_a, 0);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert(strstr(c->error, "non-determinism at journal position 0: the journal has step "
	                           "\"x\" but the workflow now calls step \"a\""),
	          "%s", c->error);
	commit_free(c);
	job_free(j);
}

Test(replay, a_sleep_suspends_with_a_wake_at_its_due_time)
{
	job *j = claimed("sleeper", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_SUSPEND);
	cr_assert_eq(c->status, RUN_SLEEPING);
	cr_assert_geq(c->at_ms, 1700000000000LL + 10000);
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].status, STEP_WAITING);
	commit_free(c);
	job_free(j);
}

Test(replay, a_signal_timeout_is_journaled_as_timed_out_and_replays_as_a_timeout)
{
	/* The wait began long ago: its deadline has passed. */
	job *j =
	    claimed("await",
	            "[{\"seq\":\"0\",\"name\":\"go\",\"kind\":\"signal\",\"status\":\"waiting\","
	            "\"attempts\":\"1\",\"wake_at\":\"1600000000000\",\"started_at\":null}]",
	            NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].status, STEP_TIMED_OUT);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert_str_eq(c->error, "no go");
	commit_free(c);
	job_free(j);

	j = claimed("await", "[" ROW("0", "go", "signal", "timed_out", "null") "]", NULL);
	c = exec_job(&env, j);
	cr_assert_eq(c->nrows, 0);
	cr_assert_str_eq(c->error, "no go");
	commit_free(c);
	job_free(j);
}

Test(replay, a_run_retry_starts_over_from_the_settled_journal)
{
	job *j = claimed("retry", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_RETRY);
	cr_assert_eq(c->attempt, 2);
	cr_assert_str_eq(c->error, "try the run again");
	/* The timed-out wait was flushed before step a ran; a stays too. */
	cr_assert_eq(flushes, 1);
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].status, STEP_COMPLETED);
	commit_free(c);
	job_free(j);
}

Test(replay, a_run_whose_workers_kept_stopping_fails_as_poison_naming_the_last_step)
{
	job *j = claimed("abc", "[" ROW("0", "a", "step", "completed", "1") "]", NULL);
	j->claims = 3; /* three executions stopped without progress */
	j->last_step = strdup("a");
	commit *c = exec_job(&env, j);
	cr_assert_eq(ran_a + ran_b + ran_c, 0, "a poison run ran again");
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert(strstr(c->error, "the worker stopped 3 times while running this run"), "%s",
	          c->error);
	cr_assert(strstr(c->error, "last durable step: a"), "%s", c->error);
	commit_free(c);
	job_free(j);

	j = claimed("abc", NULL, NULL);
	j->claims = 2; /* two stops: still runs */
	c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_COMPLETED);
	commit_free(c);
	job_free(j);
}

Test(replay, a_run_over_a_load_cap_fails_alone_with_the_reason)
{
	job *j = claimed("abc", NULL, NULL);
	snprintf(j->load_error, sizeof j->load_error, "its journal is 99 bytes stored");
	commit *c = exec_job(&env, j);
	cr_assert_eq(ran_a, 0);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert_str_eq(c->error, "cannot load the run: its journal is 99 bytes stored");
	commit_free(c);
	job_free(j);
}

Test(replay, a_signal_the_run_never_awaits_is_harmless_whatever_it_holds)
{
	job *j = claimed("abc", NULL, "[{\"id\":\"3\",\"name\":\"other\",\"payload\":\"[[[[\"}]");
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	commit_free(c);
	job_free(j);
}

Test(replay, a_step_interrupted_by_a_stop_spends_no_attempt_and_hands_over)
{
	job *j = claimed("polite", NULL, NULL);
	commit *c = exec_job(&env, j);
	/* Nothing new to write: the claim is given back, the run's messages stay
	 * for the next owner, and the step (max_attempts 1) has not failed. */
	cr_assert_eq(c->outcome, COMMIT_UNCLAIM);
	cr_assert_eq(c->nrows, 0);
	commit_free(c);
	job_free(j);
}

Test(replay, a_run_retry_starts_over_at_the_first_unsettled_step)
{
	job *j = claimed("retry2", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_RETRY);
	cr_assert_eq(c->retry_from, 1, "cut at %d", c->retry_from);
	cr_assert_eq(c->nrows, 0, "a was flushed before b ran; b's failure is cut");
	commit_free(c);
	job_free(j);
}

Test(replay, an_unknown_workflow_waits_from_when_the_run_was_due_and_honours_cancel)
{
	job *j = claimed("nobody", NULL, NULL);
	j->scheduled_ms = j->db_now_ms - 1000; /* due a second ago, created long ago */
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_DEFER);
	commit_free(c);
	j->cancel_requested = 1;
	c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_CANCELLED);
	commit_free(c);
	job_free(j);
}

Test(replay, a_buffered_signal_is_consumed_by_the_await)
{
	job *j = claimed("await", NULL,
	                 "[{\"id\":\"3\",\"name\":\"go\",\"payload\":\"{\\\"ok\\\":1}\"}]");
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_COMPLETED);
	cr_assert_str_eq(c->output, "{\"ok\":1}");
	cr_assert_eq(c->nsig, 1);
	cr_assert_eq(c->sig_ids[0], 3);
	cr_assert_eq(c->sig_seqs[0], 0);
	commit_free(c);
	job_free(j);
}

/* ------------------------------------------------------------- children */

/* The journal entry of a child start at seq for run id. */
#define START(seq, id) ROW(seq, "kid", "child", "completed", "{\\\"run\\\":" id "}")
#define STARTS3        START("0", "501") "," START("1", "502") "," START("2", "503")
/* A child's end, signal id sid: completed with {"y": y}. */
#define END(sid, child, y)                                                                         \
	"{\"id\":\"" sid "\",\"name\":\"cairn.child:" child "\",\"payload\":\"{\\\"status\\\":"    \
	"\\\"completed\\\",\\\"output\\\":{\\\"y\\\":" y "},\\\"error\\\":null}\"}"

Test(replay, children_started_in_a_row_go_with_the_commit_that_journals_them)
{
	job *j = claimed("kids3", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH, "%s", c->error ? c->error : "");
	cr_assert_eq(flushes, 0, "a child start was committed on its own");
	cr_assert_eq(ids_asked, 1, "ids asked for %d times", ids_asked);
	cr_assert_eq(c->nkids, 3);
	cr_assert_eq(c->nrows, 3);
	for (int i = 0; i < 3; i++) {
		char key[32], in[32], out[32];
		snprintf(key, sizeof key, "cairn.child:7:%d", i);
		snprintf(in, sizeof in, "{\"x\":%d}", i);
		/* A value of the sequence, the id carrying the child's shard. */
		int64_t id = RUN_ID(501 + i, hash_shard(key, 16));
		snprintf(out, sizeof out, "{\"run\":%" PRId64 "}", id);
		cr_assert_eq(c->kids[i].id, id);
		cr_assert_str_eq(c->kids[i].key, key);
		cr_assert_str_eq(c->kids[i].workflow, "square");
		cr_assert_str_eq(c->kids[i].input, in);
		cr_assert_eq(c->rows[i].kind, KIND_CHILD);
		cr_assert_str_eq(c->rows[i].output, out);
	}
	commit_free(c);
	job_free(j);
}

Test(replay, a_child_start_where_a_lost_entry_left_a_child_takes_that_child)
{
	orphan_seq = 1;
	job *j = claimed("kids3", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->nkids, 2, "the orphan was started again");
	cr_assert_eq(c->kids[0].seq, 0);
	cr_assert_eq(c->kids[1].seq, 2);
	cr_assert_str_eq(c->rows[1].output, "{\"run\":900}");
	commit_free(c);
	job_free(j);
}

Test(replay, a_wait_for_all_suspends_with_every_child_it_needs_then_takes_their_ends_in_order)
{
	job *j = claimed("kids_all", "[" STARTS3 "]", "[" END("21", "502", "1") "]");
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_SUSPEND, "%s", c->error ? c->error : "");
	cr_assert_eq(c->status, RUN_WAITING);
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].kind, KIND_CHILDREN);
	cr_assert_eq(c->rows[0].status, STEP_WAITING);
	/* 502's end is there but not taken: the commit's count sees it. */
	cr_assert_eq(c->await.seq, 3);
	cr_assert_eq(c->await.want, 3);
	cr_assert_eq(c->await.n, 3);
	cr_assert_eq(c->await.children[0], 501);
	cr_assert_eq(c->await.children[2], 503);
	cr_assert_eq(c->nsig, 0, "a signal was consumed by a wait that was not met");
	commit_free(c);
	job_free(j);

	j = claimed(
	    "kids_all", "[" STARTS3 "]",
	    "[" END("23", "503", "4") "," END("21", "502", "1") "," END("22", "501", "0") "]");
	c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	cr_assert_str_eq(c->output, "[{\"y\":0},{\"y\":1},{\"y\":4}]");
	cr_assert_eq(c->await.n, 0);
	cr_assert_eq(c->nsig, 3);
	cr_assert_eq(c->rows[0].kind, KIND_CHILDREN);
	cr_assert_eq(c->rows[0].status, STEP_COMPLETED);
	cJSON *row = cJSON_Parse(c->rows[0].output);
	cr_assert_eq(cJSON_GetArraySize(row), 3, "%s", c->rows[0].output);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(row, 2), "status")->valuestring,
	                 "completed");
	cJSON_Delete(row);
	commit_free(c);
	job_free(j);
}

Test(replay, a_wait_for_all_after_a_wait_for_any_takes_each_end_once)
{
	/* The wait for any was met by 502; 501 has ended since. */
	const char *steps =
	    "[" STARTS3
	    "," ROW("3", "children", "children", "completed",
	            "[null,{\\\"status\\\":\\\"completed\\\",\\\"output\\\":{\\\"y\\\":1},"
	            "\\\"error\\\":null},null]") "]";
	job *j = claimed("kids_any_all", steps, "[" END("31", "501", "0") "]");
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_SUSPEND, "%s", c->error ? c->error : "");
	cr_assert_eq(c->await.seq, 4);
	cr_assert_eq(c->await.want, 2, "502's end, taken before, counts");
	cr_assert_eq(c->await.n, 2);
	cr_assert_eq(c->await.children[0], 501);
	cr_assert_eq(c->await.children[1], 503);
	commit_free(c);
	job_free(j);

	j = claimed("kids_any_all", steps, "[" END("31", "501", "0") "," END("32", "503", "4") "]");
	c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	cr_assert_str_eq(c->output, "[{\"y\":0},{\"y\":1},{\"y\":4}]");
	cr_assert_eq(c->nsig, 2, "an end taken before was consumed again");
	commit_free(c);
	job_free(j);
}

Test(replay, a_wait_for_more_ends_than_the_claim_brought_fetches_the_rest)
{
	job *j = claimed("kids_all", "[" STARTS3 "]", "[" END("41", "502", "1") "]");
	j->max_signals = 1; /* the claim brought one signal: maybe not all */
	more_json = "[" END("42", "501", "0") "," END("43", "503", "4") "]";
	commit *c = exec_job(&env, j);
	cr_assert_eq(more_after, 41);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	cr_assert_str_eq(c->output, "[{\"y\":0},{\"y\":1},{\"y\":4}]");
	commit_free(c);
	job_free(j);
}

Test(replay, waiting_for_a_run_that_is_no_child_of_this_run_fails_it)
{
	job *j = claimed("kid_stranger", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert(strstr(c->error, "waiting for run 12345, which is not a child this run started"),
	          "%s", c->error);
	commit_free(c);
	job_free(j);
}

Test(replay, the_replayed_entries_are_counted)
{
	uint64_t before = atomic_load(&counters.replayed_entries);
	job *j = claimed("kids_all", "[" STARTS3 "]", NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(atomic_load(&counters.replayed_entries) - before, 3);
	cr_assert_eq(ids_asked, 0, "a replayed start asked for an id");
	commit_free(c);
	job_free(j);
}

/* --------------------------------------------------------------- commits */

static void statement_of(commit *c, buf *sql);

static commit *made(commit_outcome o)
{
	commit_run run = {.id = 7,
	                  .group = "default",
	                  .shard = 3,
	                  .owner = 1,
	                  .epoch = 4,
	                  .msgs = msgs,
	                  .nmsgs = 2};
	commit *c = commit_new(&run);
	c->outcome = o;
	c->attempt = 2;
	return c;
}

static const char *slot(commit_params *p, enum commit_slot s)
{
	return p->values[s];
}

Test(commit, a_finish_updates_the_run_and_deletes_every_message)
{
	commit *c = made(COMMIT_FINISH);
	c->status = RUN_COMPLETED;
	c->output = strdup("{\"a\":\"x\\\"y\"}");
	jrow r = {.seq = 4,
	          .name = "s",
	          .kind = KIND_STEP,
	          .status = STEP_COMPLETED,
	          .output = "1",
	          .attempts = 1,
	          .started_ms = 5};
	cr_assert_eq(commit_add_row(c, &r), 0);
	commit_params p;
	cr_assert_eq(commit_encode(&c, 1, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_b_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_b_group), "{\"default\"}");
	cr_assert_str_eq(slot(&p, SLOT_b_epoch), "{4}");
	cr_assert_str_eq(slot(&p, SLOT_j_seq), "{4}");
	cr_assert_str_eq(slot(&p, SLOT_j_kind), "{\"step\"}");
	cr_assert_str_eq(slot(&p, SLOT_j_wake), "{NULL}");
	cr_assert_str_eq(slot(&p, SLOT_j_started), "{5}");
	cr_assert_str_eq(slot(&p, SLOT_u_status), "{\"completed\"}");
	cr_assert_str_eq(slot(&p, SLOT_u_output), "{\"{\\\"a\\\":\\\"x\\\\\\\"y\\\"}\"}");
	cr_assert_str_eq(slot(&p, SLOT_u_finished), "{\"t\"}");
	cr_assert_str_eq(slot(&p, SLOT_del_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_del_msg), "{}");
	cr_assert_str_eq(slot(&p, SLOT_new_run), "{}");
	commit_params_free(&p);
	commit_free(c);
}

Test(commit, each_outcome_touches_only_its_own_slots)
{
	commit *s = made(COMMIT_SUSPEND), *r = made(COMMIT_RETRY), *d = made(COMMIT_DEFER),
	       *x = made(COMMIT_DISCARD), *j = made(COMMIT_JOURNAL);
	s->status = RUN_WAITING;
	s->at_ms = 99;
	r->at_ms = 98;
	d->at_ms = 97;
	commit *batch[] = {s, r, d, x, j};
	commit_params p;
	cr_assert_eq(commit_encode(batch, 5, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_b_run), "{7,7,7,7,7}");
	cr_assert_str_eq(slot(&p, SLOT_u_status), "{\"waiting\",\"pending\",\"pending\"}");
	cr_assert_str_eq(slot(&p, SLOT_u_finished), "{\"f\",\"f\",\"f\"}");
	cr_assert_str_eq(slot(&p, SLOT_del_msg),
	                 "{11,12,11,12,11,12}"); /* suspend, retry, discard */
	cr_assert_str_eq(slot(&p, SLOT_new_kind), "{\"wake\"}");
	cr_assert_str_eq(slot(&p, SLOT_new_at), "{99}");
	/* The start: none after a suspend, at the retry's time, as it was on a
	 * defer that did not claim it. */
	cr_assert_str_eq(slot(&p, SLOT_u_start), "{NULL,98,-1}");
	/* Only the retry cuts the journal, and counts the cut. */
	cr_assert_str_eq(slot(&p, SLOT_u_cut), "{0,1,0}");
	cr_assert_str_eq(slot(&p, SLOT_reset_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_defer_msg), "{11,12}");
	cr_assert_str_eq(slot(&p, SLOT_defer_at), "{97,97}");
	cr_assert_str_eq(slot(&p, SLOT_del_run), "{}");
	commit_params_free(&p);
	for (int i = 0; i < 5; i++)
		commit_free(batch[i]);
}

Test(commit, a_claimed_start_is_no_message_and_moves_with_a_defer)
{
	static const int64_t with_start[] = {MSG_START_ID, 11};
	commit_run run = {.id = 7, .group = "g", .owner = 1, .msgs = with_start, .nmsgs = 2};
	commit *d = commit_new(&run), *s = commit_new(&run);
	d->outcome = COMMIT_DEFER;
	d->at_ms = 97;
	s->outcome = COMMIT_SUSPEND;
	s->status = RUN_SLEEPING;
	commit *batch[] = {d, s};
	commit_params p;
	cr_assert_eq(commit_encode(batch, 2, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_defer_msg), "{11}");
	cr_assert_str_eq(slot(&p, SLOT_del_msg), "{11}");
	cr_assert_str_eq(slot(&p, SLOT_u_start), "{97,NULL}");
	commit_params_free(&p);
	commit_free(d);
	commit_free(s);
}

Test(commit, a_move_writes_the_run_and_its_messages_into_the_new_group_and_nothing_else)
{
	commit *m = made(COMMIT_MOVE);
	m->move_to = strdup("python");
	m->final = 1;
	commit_params p;
	cr_assert_eq(commit_encode(&m, 1, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_b_group), "{\"default\"}", "fenced by its lease here");
	cr_assert_str_eq(slot(&p, SLOT_mv_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_mv_group), "{\"python\"}");
	cr_assert_str_eq(slot(&p, SLOT_u_run), "{}");
	cr_assert_str_eq(slot(&p, SLOT_del_msg), "{}");
	cr_assert_str_eq(slot(&p, SLOT_defer_msg), "{}");
	cr_assert_str_eq(slot(&p, SLOT_refund_run), "{7}", "refused by the fence: count back");
	commit_params_free(&p);
	buf sql = BUF_INIT;
	statement_of(m, &sql);
	cr_assert(strstr(buf_str(&sql), "mv AS (") && strstr(buf_str(&sql), "mvm AS ("), "%s",
	          buf_str(&sql));
	cr_assert_null(strstr(buf_str(&sql), "upd AS ("));
	buf_free(&sql);
	commit_free(m);
}

Test(commit, a_run_retry_cuts_rows_and_consumed_signals_from_its_seq_on)
{
	commit *c = made(COMMIT_RETRY);
	step_status all[] = {STEP_TIMED_OUT, STEP_RETRYING, STEP_COMPLETED, STEP_FAILED,
	                     STEP_WAITING};
	for (int i = 0; i < 5; i++) {
		jrow r = {.seq = i, .name = "s", .kind = KIND_SIGNAL, .status = all[i]};
		cr_assert_eq(commit_add_row(c, &r), 0);
	}
	cr_assert_eq(commit_add_signal(c, 40, 0), 0);
	cr_assert_eq(commit_add_signal(c, 41, 3), 0);
	commit_truncate(c, 1);
	cr_assert_eq(c->nrows, 1);
	cr_assert_eq(c->rows[0].status, STEP_TIMED_OUT);
	cr_assert_eq(c->nsig, 1);
	cr_assert_eq(c->sig_ids[0], 40);
	c->retry_from = 1;
	commit_params p;
	cr_assert_eq(commit_encode(&c, 1, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_reset_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_reset_from), "{1}");
	commit_params_free(&p);
	commit_free(c);
}

Test(commit, progress_unclaims_and_cut_messages_are_encoded)
{
	commit *j = made(COMMIT_JOURNAL), *u = made(COMMIT_UNCLAIM), *f = made(COMMIT_FINISH),
	       *h = made(COMMIT_JOURNAL);
	h->final = 1; /* a hand-over */
	jrow r = {.seq = 0,
	          .name = "s",
	          .kind = KIND_STEP,
	          .status = STEP_COMPLETED,
	          .error = "cut \xc3"};
	cr_assert_eq(commit_add_row(j, &r), 0);
	f->status = RUN_FAILED;
	f->error = strdup("http: GET http://x/\xe2\x82");
	commit *batch[] = {j, u, f, h};
	commit_params p;
	cr_assert_eq(commit_encode(batch, 4, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_prog_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_unclaim_run), "{7,7}");
	cr_assert_str_eq(slot(&p, SLOT_u_run), "{7}", "only the finish updates the run");
	/* Text cut inside a character reaches the database as valid UTF-8. */
	cr_assert_str_eq(slot(&p, SLOT_j_error), "{\"cut \xef\xbf\xbd\"}");
	cr_assert_str_eq(slot(&p, SLOT_u_error),
	                 "{\"http: GET http://x/\xef\xbf\xbd\xef\xbf\xbd\"}");
	commit_params_free(&p);
	for (int i = 0; i < 4; i++)
		commit_free(batch[i]);
}

Test(commit, children_started_and_a_wait_for_them_fill_their_slots)
{
	commit *c = made(COMMIT_SUSPEND);
	c->status = RUN_WAITING;
	commit_child k = {.id = 501,
	                  .seq = 0,
	                  .shard = 5,
	                  .workflow = "square",
	                  .key = "cairn.child:7:0",
	                  .input = "{\"x\":0}"};
	cr_assert_eq(commit_add_child(c, &k), 0);
	int64_t kids[] = {501, 502};
	cr_assert_eq(commit_set_await(c, 3, 2, kids, 2), 0);
	commit_params p;
	cr_assert_eq(commit_encode(&c, 1, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_kn_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_kn_id), "{501}");
	cr_assert_str_eq(slot(&p, SLOT_kn_key), "{\"cairn.child:7:0\"}");
	cr_assert_str_eq(slot(&p, SLOT_kn_shard), "{5}");
	cr_assert_str_eq(slot(&p, SLOT_aw_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_aw_seq), "{3}");
	cr_assert_str_eq(slot(&p, SLOT_aw_want), "{2}");
	cr_assert_str_eq(slot(&p, SLOT_awc_child), "{501,502}");
	commit_params_free(&p);
	/* A retry that starts over before them drops both. */
	commit_truncate(c, 0);
	cr_assert_eq(c->nkids, 0);
	cr_assert_eq(c->await.n, 0);
	commit_free(c);
}

Test(commit, a_batch_never_holds_a_parent_and_its_child)
{
	commit_run p = {.id = 7, .group = "g"}, kid = {.id = 8, .group = "g", .parent = 7},
	           other = {.id = 9, .group = "g", .parent = 3};
	commit *cp = commit_new(&p), *ck = commit_new(&kid), *co = commit_new(&other);
	commit *batch[] = {cp, co};
	commit_run lone = {.id = 10, .group = "g"};
	commit *cl = commit_new(&lone);
	cr_assert(commit_batch_fits(batch, 2, cl), "a run of no kin was kept out");
	commit_free(cl);
	cr_assert_not(commit_batch_fits(batch, 1, ck), "a child joined its parent's batch");
	commit *kids[] = {ck};
	cr_assert_not(commit_batch_fits(kids, 1, cp), "a parent joined its child's batch");
	cr_assert(commit_batch_fits(&co, 1, ck), "a child of another run was kept out");
	commit_free(cp);
	commit_free(ck);
	commit_free(co);
}

Test(commit, a_suspend_without_a_wake_time_adds_no_message)
{
	commit *s = made(COMMIT_SUSPEND);
	s->status = RUN_WAITING;
	commit_params p;
	cr_assert_eq(commit_encode(&s, 1, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_new_run), "{}");
	commit_params_free(&p);
	commit_free(s);
}

/* The highest $n of sql. */
static int highest_param(const char *sql)
{
	int hi = 0;
	for (const char *q = strchr(sql, '$'); q; q = strchr(q + 1, '$'))
		if (atoi(q + 1) > hi)
			hi = atoi(q + 1);
	return hi;
}

Test(commit, every_set_of_parts_binds_exactly_the_slots_it_is_given)
{
	commit_params p = {0};
	for (int i = 0; i < COMMIT_NSLOTS; i++)
		p.values[i] = COMMIT_SLOT_NAMES[i];
	for (unsigned parts = 0; parts <= COMMIT_ALL_PARTS; parts++) {
		buf sql = BUF_INIT, err = BUF_INIT;
		cr_assert_eq(commit_statement(parts, &sql, &err), 0, "parts %x: %s", parts,
		             buf_str(&err));
		cr_assert_null(strstr(buf_str(&sql), " :"), "parts %x: an unbound :name", parts);
		const char *values[COMMIT_NSLOTS];
		int n = commit_values(&p, parts, values);
		cr_assert_eq(highest_param(buf_str(&sql)), n, "parts %x", parts);
		cr_assert_str_eq(values[0], "b_run");
		buf_free(&sql);
		buf_free(&err);
	}
	const char *all[COMMIT_NSLOTS];
	cr_assert_eq(commit_values(&p, COMMIT_ALL_PARTS, all), COMMIT_NSLOTS);
	for (int i = 0; i < COMMIT_NSLOTS; i++)
		cr_assert_str_eq(all[i], COMMIT_SLOT_NAMES[i], "every slot once, in order");
}

/* The statement a batch of c alone needs. */
static void statement_of(commit *c, buf *sql)
{
	commit_params p;
	buf err = BUF_INIT;
	cr_assert_eq(commit_encode(&c, 1, NULL, NULL, &p), 0);
	cr_assert_eq(commit_statement(commit_parts(&p), sql, &err), 0, "%s", buf_str(&err));
	commit_params_free(&p);
	buf_free(&err);
}

Test(commit, a_batch_sets_up_only_the_writes_it_makes)
{
	jrow r = {.seq = 1, .name = "s", .kind = KIND_STEP, .status = STEP_COMPLETED};
	commit *flush = made(COMMIT_JOURNAL);
	cr_assert_eq(commit_add_row(flush, &r), 0);
	buf sql = BUF_INIT;
	statement_of(flush, &sql);
	cr_assert(strstr(buf_str(&sql), "ins AS (") && strstr(buf_str(&sql), "prog AS ("), "%s",
	          buf_str(&sql));
	cr_assert_null(strstr(buf_str(&sql), "upd AS ("));
	cr_assert_null(strstr(buf_str(&sql), "delm AS ("));
	cr_assert_null(strstr(buf_str(&sql), "unc AS ("));

	commit *end = made(COMMIT_FINISH);
	end->status = RUN_COMPLETED;
	end->final = 1;
	buf_reset(&sql);
	statement_of(end, &sql);
	cr_assert(strstr(buf_str(&sql), "upd AS (") && strstr(buf_str(&sql), "delm AS (") &&
	              strstr(buf_str(&sql), "unc AS ("),
	          "%s", buf_str(&sql));
	cr_assert_null(strstr(buf_str(&sql), "ins AS ("));
	cr_assert_null(strstr(buf_str(&sql), "kid AS ("));
	buf_free(&sql);
	commit_free(flush);
	commit_free(end);
}

Test(sqlparam, names_become_numbers_casts_and_quotes_stay)
{
	const char *names[] = {"a", "b_2"};
	buf out = BUF_INIT, err = BUF_INIT;
	cr_assert_eq(sqlparam_bind("SELECT :a::int, :b_2, ':a''s', :a", names, 2, &out, &err), 0,
	             "%s", buf_str(&err));
	cr_assert_str_eq(buf_str(&out), "SELECT $1::int, $2, ':a''s', $1");
	buf_reset(&out);
	cr_assert_eq(sqlparam_bind("SELECT :a, :c", names, 2, &out, &err), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), ":c"), "%s", buf_str(&err));
	buf_reset(&out);
	buf_reset(&err);
	cr_assert_eq(sqlparam_bind("SELECT :a", names, 2, &out, &err), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), ":b_2 is not used"), "%s", buf_str(&err));
	buf_free(&out);
	buf_free(&err);
}

/* ---------------------------------------------------------- states, map */

Test(state, every_name_parses_back_to_its_value)
{
	for (int i = 0; i < RUN_STATUS_COUNT; i++) {
		run_status s;
		cr_assert_eq(run_status_parse(run_status_name((run_status)i), &s), 0);
		cr_assert_eq((int)s, i);
	}
	for (int i = 0; i < STEP_STATUS_COUNT; i++) {
		step_status s;
		cr_assert_eq(step_status_parse(step_status_name((step_status)i), &s), 0);
		cr_assert_eq((int)s, i);
	}
	step_kind k;
	cr_assert_eq(step_kind_parse("random", &k), 0);
	cr_assert_eq(k, KIND_RANDOM);
	cr_assert_eq(step_kind_parse("Random", &k), -CAIRN_EINVAL);
	cr_assert_str_eq(msg_kind_name(MSG_CANCEL), "cancel");
	cr_assert_str_eq(step_status_name(STEP_TIMED_OUT), "timed_out");
}

Test(shardmap, a_shard_being_released_is_not_owned_and_idle_waits_see_runs_end)
{
	char *groups[] = {"default", "other"};
	shardmap *m;
	cr_assert_eq(shardmap_new(groups, 2, &m), 0);
	cr_assert_eq(shardmap_epoch(m, 0, 1), 0, "owned before it was sized");
	cr_assert_eq(shardmap_set_shards(m, 8), 0);
	cr_assert_eq(shardmap_set_shards(m, 9), -CAIRN_EINVAL);
	shardmap_acquired(m, 0, 1, 5);
	cr_assert_eq(shardmap_epoch(m, 0, 1), 5);
	cr_assert_eq(shardmap_owned(m), 1);
	cr_assert_eq(shardmap_group_index(m, "other"), 1);
	shardmap_run_begin(m, 0, 1);
	shardmap_releasing(m, 0, 1);
	cr_assert_eq(shardmap_epoch(m, 0, 1), 0, "a shard being released still looks owned");
	cr_assert(shardmap_held(m, 0, 1));
	int shard = 1;
	cr_assert_eq(shardmap_wait_idle(m, 0, &shard, 1, clock_mono_ms()), -CAIRN_ETIMEOUT);
	shardmap_run_end(m, 0, 1);
	cr_assert_eq(shardmap_wait_idle(m, 0, &shard, 1, clock_mono_ms() + 1000), 0);
	shardmap_released(m, 0, 1);
	cr_assert_eq(shardmap_owned(m), 0);
	cr_assert_not(shardmap_held(m, 0, 1));
	cr_assert_eq(shardmap_epoch(m, 0, 99), 0, "out of range");
	shardmap_free(m);
}

/* ------------------------------------------------- replay from the cache */

Test(replay, a_cached_entry_replays_the_value_parsed_before_and_never_its_text)
{
	/* Entry 0 as the cache holds it: its text is not JSON, its value was
	 * parsed by an earlier execution. Parsing the text again would fail
	 * the run. */
	jcache_run *r = calloc(1, sizeof *r);
	r->run_id = 7;
	r->upto = r->cap = 1;
	r->e = calloc(1, sizeof *r->e);
	r->e[0] = (journal_entry){.seq = 0,
	                          .name = strdup("a"),
	                          .kind = KIND_STEP,
	                          .status = STEP_COMPLETED,
	                          .output = strdup("this is not JSON"),
	                          .attempts = 1,
	                          .value = cJSON_CreateNumber(5)};
	job *j = claimed("abc", "[" ROW("1", "b", "step", "completed", "2") "]", NULL);
	j->jc = r;
	j->journal_from = 1;
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	cr_assert_str_eq(c->output, "[5,2,100]");
	cr_assert_eq(ran_a + ran_b, 0, "a cached or claimed step ran again");
	cr_assert_eq(ran_c, 1);
	cr_assert_null(j->jc, "a run that ends keeps no journal");
	commit_free(c);
	job_free(j);
}

Test(replay, a_run_that_suspends_keeps_its_settled_journal_for_its_next_execution)
{
	char *text = entries(0, 70, -1);
	job *j = claimed("many", text, NULL);
	free(text);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_SUSPEND);
	cr_assert_eq(ran_b, 0);
	cr_assert_not_null(j->jc);
	cr_assert_eq(j->jc->upto, 70, "the sleep it wrote comes with the next claim");
	cr_assert_not_null(j->jc->e[69].value, "the values replays parsed are kept");
	commit_free(c);
	/* The next execution: the claim brings only the sleep, due now. */
	job *k = claimed("many",
	                 "[{\"seq\":\"70\",\"name\":\"nap\",\"kind\":\"sleep\","
	                 "\"status\":\"waiting\",\"attempts\":\"1\","
	                 "\"wake_at\":\"1600000000000\",\"started_at\":\"1\"}]",
	                 NULL);
	k->jc = j->jc;
	k->journal_from = 70;
	j->jc = NULL;
	job_free(j);
	c = exec_job(&env, k);
	cr_assert_eq(c->status, RUN_COMPLETED, "%s", c->error ? c->error : "");
	cr_assert_str_eq(c->output, "2415", "0 + 1 + ... + 69");
	cr_assert_eq(ran_b, 0, "a cached step ran again");
	commit_free(c);
	job_free(k);
}

/* ------------------------------------------------------- continue as new */

Test(replay, continue_as_new_completes_the_run_with_its_successors_input)
{
	job *j = claimed("again", NULL, NULL);
	free(j->input);
	j->input = strdup("{\"n\":1}");
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_COMPLETED);
	cr_assert_null(c->output);
	cr_assert_str_eq(c->next_input, "{\"n\":2}");
	cr_assert_eq(ran_a, 1);
	cr_assert_eq(ran_b, 0, "a durable call after the continue ran");
	cr_assert_eq(c->nrows, 1, "the run's journal ends with the final commit");
	commit_free(c);
	job_free(j);
}

Test(replay, a_cancel_before_continue_as_new_ends_the_run_cancelled_without_a_successor)
{
	job *j = claimed("again", "[" ROW("0", "a", "step", "completed", "1") "]", NULL);
	j->cancel_requested = 1;
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->outcome, COMMIT_FINISH);
	cr_assert_eq(c->status, RUN_CANCELLED);
	cr_assert_null(c->next_input);
	commit_free(c);
	job_free(j);
}

Test(replay, continue_as_new_with_an_input_that_cannot_be_stored_fails_the_run)
{
	job *j = claimed("too_deep", NULL, NULL);
	commit *c = exec_job(&env, j);
	cr_assert_eq(c->status, RUN_FAILED);
	cr_assert_null(c->next_input);
	cr_assert(strstr(c->error, "cannot continue as new: the input of the run it continues as "
	                           "is nested"),
	          "%s", c->error);
	commit_free(c);
	job_free(j);
}

Test(commit, a_run_that_continues_as_new_inserts_its_successor_and_tells_no_parent)
{
	commit *c = made(COMMIT_FINISH), *last = made(COMMIT_FINISH);
	c->status = last->status = RUN_COMPLETED;
	c->run.parent = last->run.parent = 9;
	c->run.chain = 7;
	c->next_input = strdup("{\"n\":2}");
	last->run.id = 12; /* a later run of the chain that ends */
	last->run.chain = 7;
	commit *batch[] = {c, last};
	commit_params p;
	cr_assert_eq(commit_encode(batch, 2, NULL, NULL, &p), 0);
	cr_assert_str_eq(slot(&p, SLOT_cont_run), "{7}");
	cr_assert_str_eq(slot(&p, SLOT_cont_input), "{\"{\\\"n\\\":2}\"}");
	cr_assert_str_eq(slot(&p, SLOT_kid_run), "{12}", "only the chain's end tells the parent");
	cr_assert_str_eq(slot(&p, SLOT_kid_name), "{\"cairn.child:7\"}",
	                 "as the child its parent started");
	cr_assert_str_eq(slot(&p, SLOT_u_cut), "{0,0}");
	commit_params_free(&p);
	commit_free(c);
	commit_free(last);
}
