/*
 * test_metrics.c - what a fleet tells Prometheus: run outcomes, steps and
 * step failures counted per workflow (bounded by CAIRN_METRICS_MAX_WORKFLOWS,
 * the rest as "other"), poison runs, and the database's backlog published
 * by the one worker that runs cairn.backlog (and by another once it
 * stops), equal to what the database counts; `promtool check metrics` is
 * clean on a worker's page. Real workers (with tests/plugin_observe.c),
 * real PostgreSQL.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

static const char *observe_plugin(void)
{
	static char path[1024];
	const char *dir = getenv("CAIRN_BIN_DIR");
	snprintf(path, sizeof path, "CAIRN_PLUGINS=%s/../tests/plugin_observe.so",
	         dir ? dir : "bin");
	return path;
}

static pid_t worker(const char *db, int *port, const char *log, const char *more)
{
	pid_t pid = tworker_start(db, port, log, observe_plugin(), "CAIRN_POLL_INTERVAL=200ms",
	                          "CAIRN_BACKLOG_INTERVAL=1s", "CAIRN_RUNNER_TTL=3s", more, NULL);
	cr_assert(thttp_wait(*port, "/readyz", 200, 30000), "a worker never became ready");
	return pid;
}

static int64_t enqueue(cairn_client *c, const char *workflow, const cairn_enqueue_opts *o)
{
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(c, workflow, o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	return e.id;
}

/* The /metrics page of the worker on port (caller frees). */
static char *page(int port)
{
	char *body = NULL;
	cr_assert_eq(thttp(port, "GET", "/metrics", &body, NULL), 200);
	return body;
}

/* The sample of name with labels (e.g. "workflow=\"o.ok\"") on port's page. */
static double sample(int port, const char *name, const char *labels)
{
	char *text = page(port);
	double v = tmetric_in(text, name, labels);
	free(text);
	return v;
}

typedef struct want {
	int port;
	const char *name, *labels;
	double value;
} want;

static int has(void *arg)
{
	const want *w = arg;
	return sample(w->port, w->name, w->labels) == w->value;
}

static void wait_sample(int port, const char *name, const char *labels, double value)
{
	want w = {port, name, labels, value};
	if (!twait(has, &w, 30000))
		cr_assert_fail("%s{%s} is %g, not %g", name, labels ? labels : "",
		               sample(port, name, labels), value);
}

/* `promtool check metrics` of text: its exit code, its output in *out. */
static int promtool_check(const char *text, char **out)
{
	char path[] = "/tmp/cairn-metrics-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	char *o = NULL, *e = NULL;
	int rc = trun(argv, NULL, &o, &e);
	unlink(path);
	size_t n = strlen(o ? o : "") + strlen(e ? e : "") + 1;
	*out = malloc(n);
	snprintf(*out, n, "%s%s", o ? o : "", e ? e : "");
	free(o);
	free(e);
	return rc;
}

/* ------------------------------------------------- counted per workflow */

Test(metrics, runs_and_steps_are_counted_per_workflow_once_their_end_is_written)
{
	const char *db = tdb_new_migrated_shards(16);
	int port;
	pid_t pid = worker(db, &port, NULL, NULL);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.ok", NULL), 30000), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.fail", NULL), 30000), CAIRN_OK);
	cairn_enqueue_opts twice = {.max_attempts = 2};
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.retry", &twice), 30000), CAIRN_OK);
	int64_t waiting = enqueue(c, "o.wait", NULL);
	PGconn *pg = tdb_connect(db);
	cr_assert(tdb_wait_at_leastf(pg, 1, 30000,
	                             "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                             " AND status = 'waiting'",
	                             waiting));
	cr_assert_eq(cairn_cancel(c, waiting), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, waiting, 30000), CAIRN_OK);
	/* Counted once the end is written, so waited for: the client may
	 * see the end before the worker has counted it. */
	wait_sample(port, "cairn_runs_cancelled_total", "workflow=\"o.wait\"", 1);
	wait_sample(port, "cairn_runs_completed_total", "workflow=\"o.ok\"", 3);
	wait_sample(port, "cairn_runs_failed_total", "workflow=\"o.retry\"", 1);
	wait_sample(port, "cairn_runs_failed_total", "workflow=\"o.fail\"", 1);

	char *text = page(port);
	struct {
		const char *name, *labels;
		double value;
	} expect[] = {
	    {"cairn_runs_started_total", "workflow=\"o.ok\"", 3},
	    {"cairn_runs_started_total", "workflow=\"o.retry\"", 2},
	    {"cairn_runs_started_total", "workflow=\"o.wait\"", 2},
	    {"cairn_runs_completed_total", "workflow=\"o.fail\"", 0},
	    {"cairn_runs_completed_total", NULL, 3},
	    {"cairn_runs_failed_total", "workflow=\"o.ok\"", 0},
	    {"cairn_runs_failed_total", NULL, 2},
	    {"cairn_runs_retried_total", "workflow=\"o.retry\"", 1},
	    {"cairn_runs_retried_total", NULL, 1},
	    {"cairn_runs_cancelled_total", NULL, 1},
	    {"cairn_runs_poisoned_total", NULL, 0},
	    {"cairn_step_failures_total", "workflow=\"o.fail\"", 1},
	    {"cairn_step_failures_total", NULL, 1},
	    {"cairn_step_duration_seconds_count", "workflow=\"o.ok\"", 3},
	    {"cairn_step_duration_seconds_count", "workflow=\"o.fail\"", 1},
	    {"cairn_step_duration_seconds_bucket", "workflow=\"o.ok\",le=\"+Inf\"", 3},
	    {"cairn_step_duration_seconds_count", "workflow=\"other\"", 0},
	    {"cairn_runs_started_total", "workflow=\"noop\"", 0},
	};
	for (size_t i = 0; i < sizeof expect / sizeof *expect; i++) {
		double v = tmetric_in(text, expect[i].name, expect[i].labels);
		cr_expect_eq(v, expect[i].value, "%s{%s} is %g, not %g", expect[i].name,
		             expect[i].labels ? expect[i].labels : "", v, expect[i].value);
	}
	/* Every series of the family carries a workflow label. */
	cr_assert_null(strstr(text, "\ncairn_runs_completed_total "), "%s", text);
	char *out;
	cr_assert_eq(promtool_check(text, &out), 0, "promtool check metrics:\n%s", out);
	free(out);
	free(text);
	PQfinish(pg);
	cairn_client_free(c);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

Test(metrics, workflows_past_the_configured_number_count_as_other)
{
	const char *db = tdb_new_migrated_shards(16);
	int port;
	/* The nine built-ins register first, then o.ok: the tenth and last
	 * with a label of its own. */
	pid_t pid = worker(db, &port, NULL, "CAIRN_METRICS_MAX_WORKFLOWS=10");
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.ok", NULL), 30000), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.fail", NULL), 30000), CAIRN_OK);
	cairn_enqueue_opts once = {.max_attempts = 1};
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.retry", &once), 30000), CAIRN_OK);
	wait_sample(port, "cairn_runs_failed_total", "workflow=\"other\"", 2);
	char *text = page(port);
	cr_assert_eq(tmetric_in(text, "cairn_runs_completed_total", "workflow=\"o.ok\""), 1);
	cr_assert_eq(tmetric_in(text, "cairn_step_failures_total", "workflow=\"other\""), 1);
	cr_assert_eq(tmetric_in(text, "cairn_runs_started_total", "workflow=\"other\""), 2);
	cr_assert_null(strstr(text, "o.fail"), "o.fail has a label of its own:\n%s", text);
	cr_assert_null(strstr(text, "o.retry"), "o.retry has a label of its own:\n%s", text);
	/* Ten workflows and "other" in each per-workflow family. */
	int series = 0;
	for (const char *p = text; (p = strstr(p, "\ncairn_runs_started_total{")); p++)
		series++;
	cr_assert_eq(series, 11, "%s", text);
	free(text);
	cairn_client_free(c);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

Test(metrics, a_run_that_kills_its_worker_counts_as_poisoned_and_failed_on_the_next)
{
	const char *db = tdb_new_migrated_shards(16);
	int port;
	char log[64];
	tlog_file(log);
	pid_t pid = worker(db, &port, log, "CAIRN_POISON_AFTER=1");
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	int64_t id = enqueue(c, "o.crash", NULL);
	int rc = tworker_stop(pid, 0, 30000); /* it aborts by itself */
	cr_assert_neq(rc, 0, "the worker did not crash");
	pid = worker(db, &port, log, "CAIRN_POISON_AFTER=1");
	cr_assert_eq(cairn_run_wait(c, id, 30000), CAIRN_OK);
	wait_sample(port, "cairn_runs_failed_total", "workflow=\"o.crash\"", 1);
	cr_assert_eq(sample(port, "cairn_runs_poisoned_total", "workflow=\"o.crash\""), 1);
	cr_assert_eq(sample(port, "cairn_runs_started_total", "workflow=\"o.crash\""), 0);
	cairn_client_free(c);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

/* ------------------------------------------------------------ the backlog */

/* The backlog the database holds, as cairn.backlog counts it (no message
 * of a sleeping or waiting run is due in these tests, so their status is
 * their state): "group workflow state n" lines, sorted (caller frees). */
static const char SQL_BACKLOG[] =
    "SELECT coalesce(string_agg(format('%s %s %s %s', g, w, s, n), E'\\n' ORDER BY g, w, s), '') "
    "FROM (SELECT shard_group g, workflow w, CASE WHEN held THEN 'held' "
    "  WHEN status = 'pending' AND start_at <= now() THEN 'due' "
    "  WHEN status = 'pending' THEN 'delayed' ELSE status END s, count(*) n "
    "  FROM cairn.runs WHERE finished_at IS NULL GROUP BY 1, 2, 3) x";

static int by_text(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The nonzero cairn_backlog_runs samples of a /metrics page in the same
 * form (caller frees). */
static char *page_backlog(const char *text)
{
	char *lines[256];
	int n = 0;
	for (const char *p = text; p && *p && n < 256;) {
		const char *nl = strchr(p, '\n');
		char g[128], w[128], s[32];
		double v;
		if (sscanf(p,
		           "cairn_backlog_runs{group=\"%127[^\"]\",workflow=\"%127[^\"]\",state=\"%"
		           "31[^\"]\"} %lf",
		           g, w, s, &v) == 4 &&
		    v > 0) {
			lines[n] = malloc(400);
			snprintf(lines[n++], 400, "%s %s %s %.0f", g, w, s, v);
		}
		p = nl ? nl + 1 : NULL;
	}
	qsort(lines, (size_t)n, sizeof *lines, by_text);
	size_t len = 1;
	for (int i = 0; i < n; i++)
		len += strlen(lines[i]) + 1;
	char *out = calloc(1, len);
	for (int i = 0; i < n; i++) {
		if (i)
			strcat(out, "\n");
		strcat(out, lines[i]);
		free(lines[i]);
	}
	return out;
}

/* Fills a database with a backlog of every state but sleeping: due runs of
 * o.ok in group "idle" (no worker serves it), held ones (a key limit of 1
 * in "idle"), delayed noop runs and o.wait runs waiting for their signal. */
static void make_backlog(cairn_client *c, const char *db)
{
	cairn_limit l = {.workflow = "o.ok", .key_concurrency = 1};
	cr_assert_eq(cairn_limit_set(c, &l), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueue_opts idle = {.group = "idle"};
	for (int i = 0; i < 5; i++)
		enqueue(c, "o.ok", &idle);
	cairn_enqueue_opts keyed = {.group = "idle", .concurrency_key = "k"};
	for (int i = 0; i < 3; i++)
		enqueue(c, "o.ok", &keyed);
	cairn_enqueue_opts later = {.delay_ms = 3600 * 1000};
	for (int i = 0; i < 2; i++)
		enqueue(c, "noop", &later);
	for (int i = 0; i < 2; i++)
		enqueue(c, "o.wait", NULL);
	PGconn *pg = tdb_connect(db);
	cr_assert(tdb_wait_at_least(pg,
	                            "SELECT count(*) FROM cairn.runs WHERE workflow = 'o.wait' "
	                            "AND status = 'waiting'",
	                            2, 30000));
	PQfinish(pg);
}

typedef struct fleet {
	const char *db;
	int ports[3];
	pid_t pids[3];
	char logs[3][64];
} fleet;

static void fleet_start(fleet *f)
{
	f->db = tdb_new_migrated_shards(16);
	for (int i = 0; i < 3; i++) {
		tlog_file(f->logs[i]);
		f->pids[i] = worker(f->db, &f->ports[i], f->logs[i], NULL);
	}
}

static void fleet_stop(fleet *f)
{
	for (int i = 0; i < 3; i++)
		if (f->pids[i] > 0)
			tworker_stop(f->pids[i], SIGTERM, 30000);
}

/* The index of the worker whose /metrics says it publishes the backlog
 * (-1: none; -2: more than one). */
static int publisher(const fleet *f)
{
	int who = -1;
	for (int i = 0; i < 3; i++) {
		if (f->pids[i] <= 0 || tmetric(f->ports[i], "cairn_backlog_publisher") != 1)
			continue;
		who = who == -1 ? i : -2;
	}
	return who;
}

static int one_publisher(void *arg)
{
	return publisher(arg) >= 0;
}

typedef struct matching {
	const fleet *f;
	PGconn *pg;
	char *got, *want;
} matching;

static int backlog_matches(void *arg)
{
	matching *m = arg;
	int who = publisher(m->f);
	if (who < 0)
		return 0;
	free(m->got);
	free(m->want);
	char *text = page(m->f->ports[who]);
	m->got = page_backlog(text);
	free(text);
	m->want = tdb_str(m->pg, SQL_BACKLOG);
	return strcmp(m->got, m->want) == 0;
}

Test(metrics, the_backlog_is_published_by_one_worker_and_moves_when_it_stops)
{
	fleet f;
	fleet_start(&f);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(f.db, &c), CAIRN_OK);
	make_backlog(c, f.db);
	matching m = {.f = &f, .pg = tdb_connect(f.db)};
	cr_assert(twait(backlog_matches, &m, 30000),
	          "the published backlog:\n%s\nthe database's:\n%s", m.got, m.want);
	cr_assert_str_eq(m.want,
	                 "default noop delayed 2\ndefault o.wait waiting 2\nidle o.ok due 6\n"
	                 "idle o.ok held 2");
	int who = publisher(&f);
	cr_assert_geq(who, 0, "%d workers publish the backlog", who);
	for (int i = 0; i < 3; i++)
		if (i != who)
			cr_assert_eq(tmetric(f.ports[i], "cairn_backlog_runs"), -1,
			             "worker %d shows the backlog too", i);
	char *text = page(f.ports[who]);
	cr_assert_eq(tmetric_in(text, "cairn_shards_unowned", "group=\"idle\""), 16, "%s", text);
	cr_assert_eq(tmetric_in(text, "cairn_shards_unowned", "group=\"default\""), 0, "%s", text);
	cr_assert_eq(tmetric_in(text, "cairn_schedule_lag_seconds", NULL), 0);
	cr_assert_eq(tmetric_in(text, "cairn_backlog_capped", NULL), 0);
	double oldest = tmetric_in(text, "cairn_backlog_oldest_due_seconds",
	                           "group=\"idle\",workflow=\"o.ok\"");
	double age = (double)tdb_int(m.pg, "SELECT (extract(epoch FROM now() - min(start_at)) * "
	                                   "1000)::bigint FROM cairn.runs WHERE status = 'pending' "
	                                   "AND start_at <= now()") /
	             1000.0;
	/* As of the last read, at most an interval (and this test's own time) ago. */
	cr_assert(oldest > 0 && oldest <= age && oldest >= age - 10, "oldest due %g s, age %g s",
	          oldest, age);
	free(text);
	/* The publisher goes; another takes the singleton and publishes. */
	cr_assert_eq(tworker_stop(f.pids[who], SIGTERM, 30000), 0);
	f.pids[who] = -1;
	cr_assert(twait(one_publisher, &f, 30000), "no worker took over the backlog");
	cr_assert_neq(publisher(&f), who);
	cr_assert(twait(backlog_matches, &m, 30000),
	          "the published backlog:\n%s\nthe database's:\n%s", m.got, m.want);
	free(m.got);
	free(m.want);
	PQfinish(m.pg);
	cairn_client_free(c);
	fleet_stop(&f);
}

Test(metrics, a_waiting_run_with_a_message_due_counts_as_due_not_as_waiting)
{
	const char *db = tdb_new_migrated_shards(16);
	int port;
	/* A worker of group g2 takes the run to its signal wait, and goes. */
	pid_t pid = worker(db, &port, NULL, "CAIRN_SHARD_GROUPS=g2");
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	cairn_enqueue_opts g2 = {.group = "g2"};
	int64_t id = enqueue(c, "o.wait", &g2);
	PGconn *pg = tdb_connect(db);
	cr_assert(tdb_wait_at_leastf(
	    pg, 1, 30000,
	    "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = 'waiting'", id));
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	/* A worker of group default reads the backlog: the run waits... */
	pid = worker(db, &port, NULL, NULL);
	wait_sample(port, "cairn_backlog_runs",
	            "group=\"g2\",workflow=\"o.wait\",state=\"waiting\"", 1);
	cr_assert_eq(sample(port, "cairn_backlog_oldest_due_seconds", "group=\"g2\""), -1);
	/* ...until its signal comes: then it needs a worker, and none serves g2. */
	cr_assert_eq(cairn_signal(c, id, "go", "true"), CAIRN_OK, "%s", cairn_client_errmsg(c));
	wait_sample(port, "cairn_backlog_runs", "group=\"g2\",workflow=\"o.wait\",state=\"due\"",
	            1);
	char *text = page(port);
	cr_assert_eq(tmetric_in(text, "cairn_backlog_runs",
	                        "group=\"g2\",workflow=\"o.wait\",state=\"waiting\""),
	             0, "%s", text);
	cr_assert_geq(tmetric_in(text, "cairn_backlog_oldest_due_seconds", "group=\"g2\""), 0, "%s",
	              text);
	cr_assert_eq(tmetric_in(text, "cairn_shards_unowned", "group=\"g2\""), 16, "%s", text);
	free(text);
	PQfinish(pg);
	cairn_client_free(c);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}
