/*
 * test_routing.c - routing by workflow (docs/sdks.md, migration 0020), end
 * to end: real cairn-worker processes in different shard groups serving
 * different workflows (tests/plugin_flows.so, with T_FLOWS naming the ones a
 * worker registers and T_RUNTIME their runtime label), runs enqueued through
 * the C client, the CLI and SQL, and every wait a condition polled with a
 * deadline. What each test proves is in its name; each fails without the
 * feature (a run enqueued without a group went to "default", a run in a
 * group nobody serves waited forever, a child stayed in its parent's group).
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

static const char TABLES[] =
    "CREATE TABLE t_counter (run_id bigint PRIMARY KEY, n integer NOT NULL);"
    "CREATE TABLE t_flags (run_id bigint NOT NULL);"
    "CREATE TABLE t_attempts (run_id bigint NOT NULL, at timestamptz NOT NULL);"
    "CREATE TABLE t_exec (id bigserial, run_id bigint, t_enter timestamptz, t_exit timestamptz);"
    "CREATE TABLE t_hits (run_id bigint NOT NULL, step text NOT NULL);";

typedef struct env {
	const char *db;
	PGconn *c;
	cairn_client *cl;
} env;

static void setup(env *e)
{
	e->db = tdb_new_migrated_shards(64);
	e->c = tdb_connect(e->db);
	tdb_exec(e->c, TABLES);
	int rc = cairn_client_open(e->db, &e->cl);
	cr_assert_eq(rc, CAIRN_OK, "client: %s", e->cl ? cairn_client_errmsg(e->cl) : "no memory");
}

static void teardown(env *e)
{
	cairn_client_free(e->cl);
	PQfinish(e->c);
}

typedef struct wk {
	pid_t pid;
	int port;
	char log[64];
} wk;

TestSuite(routing, .fini = tlive_kill);

/* Starts a worker in shard group group, with plugin_flows.so registering
 * only flows (a T_FLOWS list; NULL: no plugin, the built-ins alone) with
 * runtime label runtime (NULL: "c"), and extra settings (NULL-ended), and
 * waits until it is ready. */
static void wk_start(wk *w, const char *db, const char *group, const char *flows,
                     const char *runtime, ...)
{
	char groups[128], plugins[1100], only[256], rt[128];
	const char *set[16];
	int n = 0;
	snprintf(groups, sizeof groups, "CAIRN_SHARD_GROUPS=%s", group);
	set[n++] = groups;
	set[n++] = "CAIRN_POLL_INTERVAL=100ms";
	set[n++] = "CAIRN_HEARTBEAT_INTERVAL=200ms";
	set[n++] = "CAIRN_REBALANCE_INTERVAL=200ms";
	set[n++] = "CAIRN_RUNNER_TTL=2s";
	if (flows) {
		snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
		snprintf(only, sizeof only, "T_FLOWS=%s", flows);
		set[n++] = plugins;
		set[n++] = only;
	}
	if (runtime) {
		snprintf(rt, sizeof rt, "T_RUNTIME=%s", runtime);
		set[n++] = rt;
	}
	va_list ap;
	va_start(ap, runtime);
	for (const char *s; n < 15 && (s = va_arg(ap, const char *));)
		set[n++] = s;
	va_end(ap);
	while (n < 16)
		set[n++] = NULL;
	tlog_file(w->log);
	w->pid = tworker_start(db, &w->port, w->log, set[0], set[1], set[2], set[3], set[4], set[5],
	                       set[6], set[7], set[8], set[9], set[10], set[11], set[12], set[13],
	                       set[14], set[15], NULL);
	tlive_add(w->pid);
	cr_assert(thttp_wait(w->port, "/readyz", 200, 30000),
	          "worker never became ready; log in %s", w->log);
}

static void wk_end(wk *w, int sig)
{
	int rc = tworker_stop(w->pid, sig, 15000);
	tlive_del(w->pid);
	if (sig == SIGTERM)
		cr_assert_eq(rc, 0, "worker exit %d after SIGTERM; log in %s", rc, w->log);
}

#define num(e, ...)                        tdb_intf((e)->c, __VA_ARGS__)
#define wait_num(e, want, timeout_ms, ...) tdb_wait_at_leastf((e)->c, want, timeout_ms, __VA_ARGS__)

/* Enqueues a run of workflow with the C client (group NULL: routed); its id,
 * and its warning in *warning (caller frees; NULL when none) if asked. */
static int64_t enqueue(env *e, const char *workflow, const char *input, const char *group,
                       char **warning)
{
	cairn_enqueue_opts o = {.input = input, .group = group};
	cairn_enqueued r;
	int rc = cairn_enqueue(e->cl, workflow, &o, &r);
	cr_assert_eq(rc, CAIRN_OK, "enqueue %s: %s", workflow, cairn_client_errmsg(e->cl));
	if (warning)
		*warning = r.warning ? strdup(r.warning) : NULL;
	cairn_enqueued_clear(&r);
	return r.id;
}

/* The run's shard group (caller frees). */
static char *group_of(env *e, int64_t id)
{
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT shard_group FROM cairn.runs WHERE id = %" PRId64, id);
	return tdb_str(e->c, sql);
}

static void wait_status(env *e, int64_t id, const char *status, int64_t timeout_ms, const char *why)
{
	int ok = wait_num(
	    e, 1, timeout_ms,
	    "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = '%s'", id, status);
	char *err = NULL;
	if (!ok) {
		char sql[160];
		snprintf(sql, sizeof sql,
		         "SELECT status || ' in ' || shard_group || ': ' || coalesce(error, '') "
		         "FROM cairn.runs WHERE id = %" PRId64,
		         id);
		err = tdb_str(e->c, sql);
	}
	cr_assert(ok, "run %" PRId64 " never became %s (%s): %s", id, status, why, err ? err : "?");
}

/* The entry of `cairn workflows --json` for (workflow, group), or NULL. */
static const cJSON *listed(const cJSON *list, const char *workflow, const char *group)
{
	const cJSON *w;
	cJSON_ArrayForEach(w, list)
	{
		if (strcmp(cJSON_GetObjectItem(w, "workflow")->valuestring, workflow) == 0 &&
		    strcmp(cJSON_GetObjectItem(w, "group")->valuestring, group) == 0)
			return w;
	}
	return NULL;
}

static cJSON *workflows_json(env *e)
{
	char *out = NULL, *err = NULL;
	int rc = tcli(e->db, &out, &err, "workflows", "--json", NULL);
	cr_assert_eq(rc, 0, "cairn workflows: %s", err ? err : "");
	cJSON *j = cJSON_Parse(out);
	cr_assert(cJSON_IsArray(j), "not a JSON array: %s", out);
	free(out);
	free(err);
	return j;
}

Test(routing, an_enqueue_without_a_group_goes_to_the_group_whose_worker_serves_the_workflow)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "default", NULL, NULL, NULL);
	wk_start(&b, e.db, "other", "t.spread", "python 3.11.2", NULL);
	char *warning;
	int64_t spread = enqueue(&e, "t.spread", NULL, NULL, &warning);
	cr_assert_null(warning, "a served workflow got a warning: %s", warning);
	int64_t noop = enqueue(&e, "noop", NULL, NULL, NULL);
	char *g = group_of(&e, spread);
	cr_assert_str_eq(g, "other", "t.spread is served by group other only");
	free(g);
	g = group_of(&e, noop);
	cr_assert_str_eq(g, "default", "noop is served by both: default first");
	free(g);
	wait_status(&e, spread, "completed", 30000, "run by the worker of group other");
	wait_status(&e, noop, "completed", 30000, "run by the worker of group default");
	/* What serves what, as `cairn workflows`, `cairn runners` and status say. */
	cJSON *list = workflows_json(&e);
	const cJSON *w = listed(list, "t.spread", "other");
	cr_assert(w, "t.spread/other not listed");
	cr_assert_str_eq(cJSON_GetObjectItem(w, "runtime")->valuestring, "python 3.11.2");
	const cJSON *rs = cJSON_GetObjectItem(w, "runners");
	cr_assert_eq(cJSON_GetArraySize(rs), 1);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rs, 0), "runtime")->valuestring,
	                 "python 3.11.2");
	cr_assert_eq(cJSON_GetObjectItem(w, "group_live_runners")->valueint, 1);
	cr_assert_null(listed(list, "t.spread", "default"), "default never served t.spread");
	cr_assert(listed(list, "noop", "default") && listed(list, "noop", "other"));
	cJSON_Delete(list);
	char *out = NULL;
	cr_assert_eq(tcli(e.db, &out, NULL, "workflows", NULL), 0);
	cr_assert(strstr(out, "t.spread") && strstr(out, "python 3.11.2") && strstr(out, "1 of 1"),
	          "%s", out);
	free(out);
	cr_assert_eq(tcli(e.db, &out, NULL, "runners", NULL), 0);
	cr_assert(strstr(out, "c,python 3.11.2") || strstr(out, "python 3.11.2,c"), "%s", out);
	free(out);
	char ref[24];
	snprintf(ref, sizeof ref, "%" PRId64, spread);
	cr_assert_eq(tcli(e.db, &out, NULL, "status", ref, NULL), 0);
	cr_assert(strstr(out, "runtime    python 3.11.2"), "%s", out);
	free(out);
	wk_end(&a, SIGTERM);
	wk_end(&b, SIGTERM);
	teardown(&e);
}

Test(routing, a_run_enqueued_before_any_worker_served_it_warns_in_every_api_and_runs_once_one_does)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, "default", NULL, NULL, NULL);
	/* The C client: a warning field naming the workflow. */
	char *warning;
	int64_t by_c = enqueue(&e, "t.spread", NULL, NULL, &warning);
	cr_assert(warning && strstr(warning, "no worker has ever served workflow \"t.spread\""),
	          "C warning: %s", warning ? warning : "(none)");
	free(warning);
	/* The CLI: on stderr, and as "warning" with --json. */
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(e.db, &out, &err, "enqueue", "t.spread", NULL), 0, "%s", err);
	cr_assert(strstr(err, "warning: no worker has ever served workflow \"t.spread\""), "%s",
	          err);
	int64_t by_cli = strtoll(out, NULL, 10);
	free(out);
	free(err);
	cr_assert_eq(tcli(e.db, &out, &err, "enqueue", "t.spread", "--json", NULL), 0);
	cJSON *j = cJSON_Parse(out);
	const cJSON *wj = cJSON_GetObjectItem(j, "warning");
	cr_assert(cJSON_IsString(wj) && strstr(wj->valuestring, "\"t.spread\""), "%s", out);
	int64_t by_json = (int64_t)cJSON_GetObjectItem(j, "id")->valuedouble;
	cJSON_Delete(j);
	free(out);
	free(err);
	/* SQL: the result's warning column. */
	char *sql_warning = tdb_str(e.c, "SELECT warning FROM cairn.enqueue('t.spread', '{}')");
	cr_assert(sql_warning && strstr(sql_warning, "no worker has ever served workflow"),
	          "SQL warning: %s", sql_warning ? sql_warning : "(none)");
	free(sql_warning);
	int64_t by_sql = tdb_int(e.c, "SELECT max(id) FROM cairn.runs WHERE workflow = 't.spread'");
	/* It waits, visibly: the worker of default defers it, status says so. */
	char ref[24];
	snprintf(ref, sizeof ref, "%" PRId64, by_cli);
	cr_assert_eq(tcli(e.db, &out, NULL, "status", ref, NULL), 0);
	cr_assert(strstr(out, "no live worker serves workflow \"t.spread\" (never served)"), "%s",
	          out);
	free(out);
	cr_assert(tfile_wait(a.log, "waiting: no live worker serves", 0) ||
	              wait_num(&e, 1, 15000,
	                       "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                       " AND error LIKE 'waiting: no live worker serves%%'",
	                       by_c),
	          "the worker of default never deferred the run");
	/* A worker that serves it starts in another group: every run moves there
	 * and runs. */
	wk b;
	wk_start(&b, e.db, "other", "t.spread", NULL, NULL);
	int64_t ids[] = {by_c, by_cli, by_json, by_sql};
	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		wait_status(&e, ids[i], "completed", 30000, "moved to the group that serves it");
		char *g = group_of(&e, ids[i]);
		cr_assert_str_eq(g, "other");
		free(g);
	}
	cr_assert_eq(num(&e, "SELECT count(DISTINCT run_id) FROM t_hits"), 4);
	cr_assert(tfile_wait(a.log, "moved a run to a group whose live workers serve", 5000));
	wk_end(&a, SIGTERM);
	wk_end(&b, SIGTERM);
	teardown(&e);
}

Test(routing, require_served_refuses_a_workflow_never_served_in_every_api_and_writes_nothing)
{
	env e;
	setup(&e);
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(e.db, &out, &err, "enqueue", "typo.flow", "--require-served", NULL), 3,
	             "%s", err);
	cr_assert(strstr(err, "no worker has ever served workflow \"typo.flow\""), "%s", err);
	cr_assert(strstr(err, "refused"), "%s", err);
	free(out);
	free(err);
	cairn_enqueue_opts o = {.require_served = 1};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(e.cl, "typo.flow", &o, &r), CAIRN_ENOTFOUND);
	cr_assert(strstr(cairn_client_errmsg(e.cl), "\"typo.flow\""), "%s",
	          cairn_client_errmsg(e.cl));
	cairn_enqueued_clear(&r);
	cairn_enqueue_opts batch[2] = {{.require_served = 1}, {.require_served = 0}};
	cairn_enqueued res[2];
	cr_assert_eq(cairn_enqueue_batch(e.cl, "typo.flow", 2, batch, res), CAIRN_ENOTFOUND);
	PGresult *q =
	    PQexec(e.c, "SELECT cairn.enqueue('typo.flow', '{}', require_served => true)");
	cr_assert_eq(PQresultStatus(q), PGRES_FATAL_ERROR);
	cr_assert_str_eq(PQresultErrorField(q, PG_DIAG_SQLSTATE), "P0002");
	cr_assert(strstr(PQresultErrorField(q, PG_DIAG_MESSAGE_PRIMARY), "\"typo.flow\""));
	PQclear(q);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs"), 0, "a refusal wrote a run");
	/* A served workflow passes. */
	wk a;
	wk_start(&a, e.db, "default", NULL, NULL, NULL);
	cr_assert_eq(tcli(e.db, &out, &err, "enqueue", "noop", "--require-served", NULL), 0, "%s",
	             err);
	cr_assert(!strstr(err, "warning"), "%s", err);
	free(out);
	free(err);
	wk_end(&a, SIGTERM);
	teardown(&e);
}

Test(routing, a_run_in_a_group_without_a_live_runner_is_moved_by_the_janitor_to_one_that_serves_it)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, "default", "t.spread", NULL, NULL);
	/* Named, the group is kept, with a warning that says who serves it. */
	char *warning;
	int64_t id = enqueue(&e, "t.spread", NULL, "nobody", &warning);
	cr_assert(warning && strstr(warning, "group \"nobody\" has never served workflow "
	                                     "\"t.spread\" (group \"default\" has)"),
	          "%s", warning ? warning : "(none)");
	free(warning);
	wait_status(&e, id, "completed", 30000, "the janitor moves it to default");
	char *g = group_of(&e, id);
	cr_assert_str_eq(g, "default");
	free(g);
	cr_assert(tfile_wait(a.log, "moved due runs of groups without a live runner", 5000));
	wk_end(&a, SIGTERM);
	teardown(&e);
}

Test(routing, a_run_no_live_worker_serves_fails_after_the_timeout_saying_so)
{
	env e;
	setup(&e);
	wk a;
	wk_start(&a, e.db, "default", NULL, NULL, "CAIRN_UNKNOWN_WORKFLOW_TIMEOUT=2s", NULL);
	int64_t here = enqueue(&e, "ghost", NULL, NULL, NULL);         /* claimed, deferred */
	int64_t stranded = enqueue(&e, "ghost", NULL, "nobody", NULL); /* claimed by nobody */
	wait_status(&e, here, "failed", 30000, "claimed by default, which does not serve it");
	wait_status(&e, stranded, "failed", 30000, "stranded in a group without runners");
	for (int i = 0; i < 2; i++) {
		char sql[128];
		snprintf(sql, sizeof sql, "SELECT error FROM cairn.runs WHERE id = %" PRId64,
		         i ? stranded : here);
		char *error = tdb_str(e.c, sql);
		cr_assert(error && strstr(error, "no live worker serves workflow \"ghost\" "
		                                 "(never served)"),
		          "%s", error ? error : "(null)");
		cr_assert(strstr(error, "CAIRN_UNKNOWN_WORKFLOW_TIMEOUT"), "%s", error);
		free(error);
	}
	wk_end(&a, SIGTERM);
	teardown(&e);
}

Test(routing, status_and_workflows_say_when_no_live_worker_serves_a_run_and_where_it_was_last_seen)
{
	env e;
	setup(&e);
	wk b;
	wk_start(&b, e.db, "other", "t.spread", "python 3.11.2", NULL);
	wk_end(&b, SIGTERM); /* a deploy: served before, no worker live now */
	char *warning;
	int64_t id = enqueue(&e, "t.spread", NULL, NULL, &warning);
	cr_assert_null(warning, "served before: no warning (%s)", warning);
	char *g = group_of(&e, id);
	cr_assert_str_eq(g, "other", "routed to the group that served it last");
	free(g);
	char ref[24], *out = NULL;
	snprintf(ref, sizeof ref, "%" PRId64, id);
	cr_assert_eq(tcli(e.db, &out, NULL, "status", ref, NULL), 0);
	cr_assert(strstr(out, "runtime    python 3.11.2"), "%s", out);
	cr_assert(strstr(out, "waiting    no live worker serves workflow \"t.spread\" (last seen "),
	          "%s", out);
	cr_assert(strstr(out, " ago in group other)"), "%s", out);
	free(out);
	cr_assert_eq(tcli(e.db, &out, NULL, "status", ref, "--json", NULL), 0);
	cJSON *j = cJSON_Parse(out);
	cr_assert(strstr(cJSON_GetObjectItem(j, "unserved")->valuestring, "no live worker serves"));
	cJSON_Delete(j);
	free(out);
	cJSON *list = workflows_json(&e);
	const cJSON *w = listed(list, "t.spread", "other");
	cr_assert(w);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(w, "runners")), 0);
	cr_assert_eq(cJSON_GetObjectItem(w, "waiting")->valueint, 1);
	cJSON_Delete(list);
	/* Once a worker serves it again, it runs. */
	wk_start(&b, e.db, "other", "t.spread", NULL, NULL);
	wait_status(&e, id, "completed", 30000, "its group's worker is back");
	wk_end(&b, SIGTERM);
	teardown(&e);
}

Test(routing, a_child_of_a_workflow_served_by_another_group_runs_there)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "default", "t.parent", NULL, NULL);
	wk_start(&b, e.db, "other", "t.spread", NULL, NULL);
	int64_t parent = enqueue(&e, "t.parent", "{\"child\": \"t.spread\"}", NULL, NULL);
	cr_assert(wait_num(&e, 1, 30000,
	                   "SELECT count(*) FROM cairn.runs WHERE parent_id = %" PRId64, parent),
	          "the parent never started its child");
	int64_t child = num(&e, "SELECT id FROM cairn.runs WHERE parent_id = %" PRId64, parent);
	char *g = group_of(&e, child);
	cr_assert_str_eq(g, "other", "the child goes to the group that serves t.spread");
	free(g);
	wait_status(&e, child, "completed", 30000, "run by the worker of group other");
	cr_assert_eq(cairn_signal(e.cl, parent, "go", NULL), CAIRN_OK);
	wait_status(&e, parent, "completed", 30000, "the parent waits for its child");
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT output->>'child' FROM cairn.runs WHERE id = %" PRId64,
	         parent);
	char *out = tdb_str(e.c, sql);
	cr_assert_eq(strtoll(out, NULL, 10), child);
	free(out);
	wk_end(&a, SIGTERM);
	wk_end(&b, SIGTERM);
	teardown(&e);
}

Test(routing, a_group_whose_live_runners_serve_different_workflows_logs_a_warning)
{
	env e;
	setup(&e);
	wk a, b;
	wk_start(&a, e.db, "default", NULL, NULL, NULL);
	wk_start(&b, e.db, "default", "t.spread", NULL, NULL);
	int warned = tfile_wait(a.log, "serve different workflows", 20000) ||
	             tfile_wait(b.log, "serve different workflows", 1000);
	cr_assert(warned, "neither worker warned; logs in %s and %s", a.log, b.log);
	cr_assert(tfile_wait(a.log, "t.spread (runners ", 1000) ||
	              tfile_wait(b.log, "t.spread (runners ", 1000),
	          "the warning does not name the workflow");
	/* A run of it waits for its shard's owner to serve it, or runs: it
	 * never fails while a live worker of its group serves it. */
	int64_t id = enqueue(&e, "t.spread", NULL, NULL, NULL);
	char *g = group_of(&e, id);
	cr_assert_str_eq(g, "default");
	free(g);
	cr_assert_eq(num(&e, "SELECT count(*) FROM cairn.runs WHERE status = 'failed'"), 0);
	wk_end(&a, SIGTERM);
	wait_status(&e, id, "completed", 30000, "the worker that serves it owns every shard");
	wk_end(&b, SIGTERM);
	teardown(&e);
}

/* A client reuses the route of its last enqueue of a workflow for a second
 * (client.c, route_cached): the next enqueue carries the same group and the
 * same warning, a required one is still refused, and a served workflow's
 * runs keep going to the group that serves it. */
Test(routing, a_client_reuses_its_route_and_warning_for_a_second_and_still_refuses_when_required)
{
	env e;
	setup(&e);
	char *w1, *w2;
	int64_t a = enqueue(&e, "ghost", NULL, NULL, &w1);
	int64_t b = enqueue(&e, "ghost", NULL, NULL, &w2);
	cr_assert(w1 && w2, "both runs warned: %s / %s", w1 ? w1 : "-", w2 ? w2 : "-");
	cr_assert_str_eq(w1, w2);
	cr_assert_eq(num(&e,
	                 "SELECT count(*) FROM cairn.runs WHERE id IN (%" PRId64 ", %" PRId64
	                 ") AND shard_group = 'default'",
	                 a, b),
	             2, "both runs wait in the default group");
	free(w1);
	free(w2);
	cairn_enqueue_opts req = {.require_served = 1};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(e.cl, "ghost", &req, &r), CAIRN_ENOTFOUND, "%s",
	             cairn_client_errmsg(e.cl));
	cairn_enqueued_clear(&r);
	tdb_exec(e.c, "INSERT INTO cairn.workflows (workflow, shard_group, runtime, live_until) "
	              "VALUES ('served', 'python', 'python 3.11.2', now() + interval '1 hour')");
	for (int i = 0; i < 3; i++) {
		char *w;
		int64_t id = enqueue(&e, "served", NULL, NULL, &w);
		cr_assert_null(w, "%s", w);
		char *g = group_of(&e, id);
		cr_assert_str_eq(g, "python", "enqueue %d", i);
		free(g);
	}
	teardown(&e);
}
