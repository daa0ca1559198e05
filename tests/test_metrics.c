/*
 * test_metrics.c - what a fleet tells Prometheus: run outcomes, steps and
 * step failures counted per workflow (bounded by CAIRN_METRICS_MAX_WORKFLOWS,
 * the rest as "other"), poison runs, the database's backlog published by the
 * one worker that runs cairn.backlog (and by another once it stops); a real
 * Prometheus (Debian's) scraping three workers, loading deploy/prometheus/
 * alerts.yml and running every query of deploy/grafana/cairn.json, with
 * `promtool check metrics` clean on each worker's page and the backlog it
 * reads equal to what the database counts; the alert rules' own unit tests
 * (promtool test rules). Real workers (with tests/plugin_observe.c), real
 * PostgreSQL, real Prometheus.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

/* How often the workers of these tests read the backlog. */
#define BACKLOG_MS 1000

static const char *observe_plugin(void)
{
	static char path[1024];
	const char *dir = getenv("CAIRN_BIN_DIR");
	snprintf(path, sizeof path, "CAIRN_PLUGINS=%s/../tests/plugin_observe.so",
	         dir ? dir : "bin");
	return path;
}

static const char *src_path(const char *rel)
{
	static char path[4][1024];
	static int k;
	const char *top = getenv("CAIRN_SRC_DIR");
	cr_assert(top && *top, "CAIRN_SRC_DIR is not set: run the suite through tests/run.sh");
	char *p = path[k++ % 4];
	snprintf(p, 1024, "%s/%s", top, rel);
	return p;
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
	cairn_enqueued_clear(&e);
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
	/* (The backlog's families fold by backlog, not by registration: not these.) */
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, "cairn_runs_", 11) != 0 && strncmp(p, "cairn_step_", 11) != 0)
			continue;
		size_t n = strcspn(p, "\n");
		char line[512];
		snprintf(line, sizeof line, "%.*s", (int)n, p);
		cr_assert(!strstr(line, "o.fail") && !strstr(line, "o.retry"),
		          "a workflow past the limit has a label of its own: %s", line);
	}
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
 * o.idle in group "idle", held ones (a key limit of 1 in "idle"), delayed
 * noop runs and o.wait runs waiting for their signal. No worker serves
 * o.idle and none is in "idle", so routing leaves those runs where they are
 * until CAIRN_UNKNOWN_WORKFLOW_TIMEOUT (1m) has passed. */
static void make_backlog(cairn_client *c, const char *db)
{
	cairn_limit l = {.workflow = "o.idle", .key_concurrency = 1};
	cr_assert_eq(cairn_limit_set(c, &l), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_enqueue_opts idle = {.group = "idle"};
	for (int i = 0; i < 5; i++)
		enqueue(c, "o.idle", &idle);
	cairn_enqueue_opts keyed = {.group = "idle", .concurrency_key = "k"};
	for (int i = 0; i < 3; i++)
		enqueue(c, "o.idle", &keyed);
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
	                 "default noop delayed 2\ndefault o.wait waiting 2\nidle o.idle due 6\n"
	                 "idle o.idle held 2");
	int who = publisher(&f);
	cr_assert_geq(who, 0, "%d workers publish the backlog", who);
	for (int i = 0; i < 3; i++)
		if (i != who)
			cr_assert_eq(tmetric(f.ports[i], "cairn_backlog_runs"), -1,
			             "worker %d shows the backlog too", i);
	/* Once the fleet's rebalances have settled, the group it serves has
	 * every shard owned; the group it does not serve has none. */
	wait_sample(f.ports[who], "cairn_shards_unowned", "group=\"default\"", 0);
	char *text = page(f.ports[who]);
	cr_assert_eq(tmetric_in(text, "cairn_shards_unowned", "group=\"idle\""), 16, "%s", text);
	cr_assert_eq(tmetric_in(text, "cairn_schedule_lag_seconds", NULL), 0);
	cr_assert_eq(tmetric_in(text, "cairn_backlog_capped", NULL), 0);
	double oldest = tmetric_in(text, "cairn_backlog_oldest_due_seconds",
	                           "group=\"idle\",workflow=\"o.idle\"");
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

/* ------------------------------------------------------------ Prometheus */

typedef struct prom {
	pid_t pid;
	int port;
	char dir[64];
} prom;

/* A TCP port that was free a moment ago. */
static int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
	          getsockname(s, (struct sockaddr *)&a, &len) == 0);
	close(s);
	return ntohs(a.sin_port);
}

static void prom_stop(prom *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		int st;
		int64_t deadline = tnow_ms() + 10000;
		while (waitpid(p->pid, &st, WNOHANG) == 0 && tnow_ms() < deadline)
			usleep(20000);
		if (tnow_ms() >= deadline) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
		}
		p->pid = 0;
	}
	if (p->dir[0]) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf %s", p->dir);
		const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
		trun(argv, NULL, NULL, NULL);
		p->dir[0] = 0;
	}
}

static void prom_log(const prom *p)
{
	char path[128];
	snprintf(path, sizeof path, "%s/prometheus.log", p->dir);
	char *text = tfile_read(path);
	fprintf(stderr, "test_metrics: prometheus log:\n%s\n", text);
	free(text);
}

static int prom_ready(void *arg)
{
	const prom *p = arg;
	int st;
	if (waitpid(p->pid, &st, WNOHANG) == p->pid)
		return -1;
	return thttp(p->port, "GET", "/-/ready", NULL, NULL) == 200;
}

/* Starts Prometheus scraping the targets every second, with the alert
 * rules of deploy/prometheus/alerts.yml, its storage in a temporary
 * directory; waits until it is ready. */
static void prom_start(prom *p, const int *ports, int n)
{
	snprintf(p->dir, sizeof p->dir, "/tmp/cairn-prom-XXXXXX");
	cr_assert(mkdtemp(p->dir), "mkdtemp: %s", strerror(errno));
	char cfg[128];
	snprintf(cfg, sizeof cfg, "%s/prometheus.yml", p->dir);
	FILE *f = fopen(cfg, "w");
	cr_assert(f);
	fprintf(f,
	        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
	        "rule_files:\n  - %s\n"
	        "scrape_configs:\n  - job_name: cairn\n    static_configs:\n      - targets: [",
	        src_path("deploy/prometheus/alerts.yml"));
	for (int i = 0; i < n; i++)
		fprintf(f, "%s'127.0.0.1:%d'", i ? ", " : "", ports[i]);
	fprintf(f, "]\n");
	fclose(f);
	/* A port taken between free_port and the start makes it exit: again. */
	for (int tries = 0; tries < 5; tries++) {
		p->port = free_port();
		char listen[64], storage[128], log[128];
		snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", p->port);
		snprintf(storage, sizeof storage, "--storage.tsdb.path=%s/data", p->dir);
		snprintf(log, sizeof log, "%s/prometheus.log", p->dir);
		char config[160];
		snprintf(config, sizeof config, "--config.file=%s", cfg);
		p->pid = fork();
		cr_assert(p->pid >= 0);
		if (p->pid == 0) {
			/* It never outlives the test. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (!freopen(log, "a", stderr) || !freopen("/dev/null", "w", stdout))
				_exit(126);
			execlp("prometheus", "prometheus", config, storage, listen,
			       "--log.level=warn", (char *)NULL);
			_exit(127);
		}
		int64_t deadline = tnow_ms() + 60000;
		int ok = 0;
		while (tnow_ms() < deadline && !(ok = prom_ready(p)))
			usleep(50000);
		if (ok == 1)
			return;
		int st;
		if (ok == 0) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
		}
		p->pid = 0;
	}
	prom_log(p);
	cr_assert_fail("prometheus did not start");
}

/* text percent-encoded for a query string, into out. */
static void urlencode(const char *text, char *out, size_t n)
{
	size_t k = 0;
	for (const unsigned char *s = (const unsigned char *)text; *s && k + 4 < n; s++) {
		if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		    (*s >= '0' && *s <= '9') || strchr("-_.~", *s))
			out[k++] = (char)*s;
		else
			k += (size_t)snprintf(out + k, n - k, "%%%02X", *s);
	}
	out[k] = 0;
}

/* The answer of Prometheus's query API to expr (caller deletes), or NULL
 * when it does not answer. */
static cJSON *prom_query(const prom *p, const char *expr)
{
	char q[4096], path[4200];
	urlencode(expr, q, sizeof q);
	snprintf(path, sizeof path, "/api/v1/query?query=%s", q);
	char *body = NULL;
	long st = thttp(p->port, "GET", path, &body, NULL);
	cJSON *j = st ? cJSON_Parse(body ? body : "") : NULL;
	free(body);
	return j;
}

/* The value of the single sample expr gives; -1 when it gives none, -2
 * when it fails. */
static double prom_value(const prom *p, const char *expr)
{
	cJSON *j = prom_query(p, expr);
	const cJSON *st = cJSON_GetObjectItem(j, "status");
	double v = -2;
	if (cJSON_IsString(st) && strcmp(st->valuestring, "success") == 0) {
		const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data"), "result");
		const cJSON *s = cJSON_GetArrayItem(r, 0);
		const cJSON *val = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "value"), 1);
		v = cJSON_IsString(val) ? strtod(val->valuestring, NULL) : -1;
	}
	cJSON_Delete(j);
	return v;
}

typedef struct prom_want {
	const prom *p;
	const char *expr;
	double value;
} prom_want;

static int prom_has(void *arg)
{
	const prom_want *w = arg;
	return prom_value(w->p, w->expr) == w->value;
}

static int by_line(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The backlog as Prometheus reads it, in SQL_BACKLOG's form (caller frees). */
static char *prom_backlog(const prom *p)
{
	cJSON *j = prom_query(p, "max by (group, workflow, state) (cairn_backlog_runs) > 0");
	const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data"), "result");
	char lines[64][300];
	int n = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, r)
	{
		const cJSON *m = cJSON_GetObjectItem(s, "metric");
		const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "value"), 1);
		if (n < 64 && cJSON_IsString(v))
			snprintf(lines[n++], 300, "%s %s %s %s",
			         cJSON_GetObjectItem(m, "group")->valuestring,
			         cJSON_GetObjectItem(m, "workflow")->valuestring,
			         cJSON_GetObjectItem(m, "state")->valuestring, v->valuestring);
	}
	cJSON_Delete(j);
	qsort(lines, (size_t)n, sizeof *lines, by_line);
	char *out = calloc(1, (size_t)n * 301 + 1);
	for (int i = 0; i < n; i++) {
		if (i)
			strcat(out, "\n");
		strcat(out, lines[i]);
	}
	return out;
}

/* How many of the rules Prometheus loaded are healthy (all of them in *all); -1 when it does not
 * answer. */
static int prom_rules_ok(const prom *p, int *all)
{
	char *body = NULL;
	*all = 0;
	int ok = 0;
	if (thttp(p->port, "GET", "/api/v1/rules", &body, NULL) != 200) {
		free(body);
		return -1;
	}
	cJSON *j = cJSON_Parse(body);
	free(body);
	const cJSON *g, *r;
	cJSON_ArrayForEach(g, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data"), "groups"))
	{
		cJSON_ArrayForEach(r, cJSON_GetObjectItem(g, "rules"))
		{
			const cJSON *h = cJSON_GetObjectItem(r, "health");
			(*all)++;
			ok += cJSON_IsString(h) && strcmp(h->valuestring, "ok") == 0;
		}
	}
	cJSON_Delete(j);
	return ok;
}

typedef struct prom_match {
	const prom *p;
	PGconn *pg;
	double since; /* a read before this (the database's clock) does not count */
	char *got, *want;
} prom_match;

/* Prometheus's backlog is the database's, as of a read after m->since. */
static int prom_backlog_matches(void *arg)
{
	prom_match *m = arg;
	free(m->got);
	free(m->want);
	m->got = prom_backlog(m->p);
	m->want = tdb_str(m->pg, SQL_BACKLOG);
	return strcmp(m->got, m->want) == 0 &&
	       prom_value(m->p, "max(cairn_backlog_read_timestamp_seconds)") >= m->since;
}

/* The dashboard's queries (its panels' targets, rows' panels included). */
static int dashboard_exprs(const cJSON *panels, const char **out, int n, int max)
{
	const cJSON *p, *t;
	cJSON_ArrayForEach(p, panels)
	{
		n = dashboard_exprs(cJSON_GetObjectItem(p, "panels"), out, n, max);
		cJSON_ArrayForEach(t, cJSON_GetObjectItem(p, "targets"))
		{
			const cJSON *e = cJSON_GetObjectItem(t, "expr");
			if (cJSON_IsString(e) && n < max)
				out[n++] = e->valuestring;
		}
	}
	return n;
}

static cJSON *dashboard(void)
{
	char *text = tfile_read(src_path("deploy/grafana/cairn.json"));
	cJSON *d = cJSON_Parse(text);
	cr_assert(d, "deploy/grafana/cairn.json is not JSON");
	free(text);
	return d;
}

/* expr with Grafana's $__rate_interval as 1m, into out. */
static void grafana_expr(const char *expr, char *out, size_t n)
{
	size_t k = 0;
	static const char var[] = "$__rate_interval";
	for (const char *s = expr; *s && k + 3 < n;) {
		if (strncmp(s, var, strlen(var)) == 0) {
			memcpy(out + k, "1m", 2);
			k += 2;
			s += strlen(var);
		} else {
			out[k++] = *s++;
		}
	}
	out[k] = 0;
}

Test(metrics, a_real_prometheus_scrapes_three_workers_and_reads_the_backlog_the_database_counts,
     .timeout = 300)
{
	fleet f;
	fleet_start(&f);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(f.db, &c), CAIRN_OK);
	/* Executed runs, so that every family has its samples. */
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.ok", NULL), 30000), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, enqueue(c, "o.fail", NULL), 30000), CAIRN_OK);
	make_backlog(c, f.db);
	prom p = {0};
	prom_start(&p, f.ports, 3);

	prom_want up = {&p, "sum(up{job=\"cairn\"})", 3};
	if (!twait(prom_has, &up, 60000)) {
		prom_log(&p);
		cr_assert_fail("Prometheus has %g of 3 targets up", prom_value(&p, up.expr));
	}
	prom_want one = {&p, "sum(cairn_backlog_publisher)", 1};
	cr_assert(twait(prom_has, &one, 30000), "%g workers publish the backlog",
	          prom_value(&p, one.expr));
	prom_want ready = {&p, "sum(cairn_ready)", 3};
	cr_assert(twait(prom_has, &ready, 30000), "%g workers ready", prom_value(&p, ready.expr));

	/* What Prometheus scrapes is clean by promtool's rules. */
	for (int i = 0; i < 3; i++) {
		char *text = page(f.ports[i]), *out;
		int rc = promtool_check(text, &out);
		fprintf(stderr,
		        "test_metrics: promtool check metrics, worker %d: exit %d, output: "
		        "\"%s\"\n",
		        i, rc, out);
		cr_assert_eq(rc, 0, "worker %d: %s", i, out);
		cr_assert_str_empty(out, "worker %d: %s", i, out);
		free(out);
		free(text);
	}

	/* The backlog it reads is the database's count, as of one read. */
	prom_match m = {.p = &p, .pg = tdb_connect(f.db)};
	cr_assert(twait(prom_backlog_matches, &m, 30000),
	          "Prometheus reads:\n%s\nthe database counts:\n%s", m.got, m.want);
	/* A change shows as of the next read, within an interval (and a
	 * scrape) of it. */
	cairn_enqueue_opts idle = {.group = "idle"};
	for (int i = 0; i < 4; i++)
		enqueue(c, "o.idle", &idle);
	m.since =
	    (double)tdb_int(m.pg, "SELECT (extract(epoch FROM now()) * 1000)::bigint") / 1000.0;
	int64_t t0 = tnow_ms();
	cr_assert(twait(prom_backlog_matches, &m, 30000),
	          "Prometheus reads:\n%s\nthe database counts:\n%s", m.got, m.want);
	fprintf(stderr,
	        "test_metrics: Prometheus read the changed backlog %" PRId64 " ms after the "
	        "change (backlog interval %d ms, scrape interval 1 s)\n",
	        tnow_ms() - t0, BACKLOG_MS);
	cr_assert(strstr(m.want, "idle o.idle due 10"), "%s", m.want);
	double age = prom_value(&p, "time() - max(cairn_backlog_read_timestamp_seconds)");
	cr_assert(age >= -1 && age <= (BACKLOG_MS + 1000) / 1000.0 + 2,
	          "the backlog Prometheus has was read %g s ago", age);
	cr_assert_eq(prom_value(&p, "count(count by (instance) (cairn_backlog_runs))"), 1);
	cr_assert_eq(prom_value(&p, "max(cairn_shards_unowned{group=\"idle\"})"), 16);

	/* It loaded the alert rules, and every dashboard query runs. */
	int all, ok = prom_rules_ok(&p, &all);
	cr_assert(all == 9 && ok == 9, "%d of %d alert rules loaded and healthy", ok, all);
	cJSON *d = dashboard();
	const char *exprs[128];
	int n = dashboard_exprs(cJSON_GetObjectItem(d, "panels"), exprs, 0, 128);
	cr_assert_gt(n, 10);
	for (int i = 0; i < n; i++) {
		char e[1024];
		grafana_expr(exprs[i], e, sizeof e);
		cr_expect_neq(prom_value(&p, e), -2, "the dashboard's query fails: %s", e);
	}
	cJSON_Delete(d);

	free(m.got);
	free(m.want);
	PQfinish(m.pg);
	prom_stop(&p);
	cairn_client_free(c);
	fleet_stop(&f);
}

/* ---------------------------------------------- the files under deploy/ */

/* The metric families a /metrics page declares (# TYPE lines): "name type"
 * lines, each ending in a newline (caller frees). */
static char *families(const char *text)
{
	size_t cap = strlen(text) + 1, len = 0;
	char *out = calloc(1, cap);
	for (const char *p = text; (p = strstr(p, "# TYPE ")); p++) {
		const char *nl = strchr(p, '\n');
		size_t n = (size_t)((nl ? nl : p + strlen(p)) - (p + 7));
		memcpy(out + len, p + 7, n);
		len += n;
		out[len++] = '\n';
	}
	return out;
}

/* Whether name is a family of fams, or a series of a histogram family
 * (name_bucket, _sum, _count). */
static int is_family(const char *fams, const char *name)
{
	char line[256];
	snprintf(line, sizeof line, "\n%s ", name);
	char *with = malloc(strlen(fams) + 2);
	sprintf(with, "\n%s", fams);
	int found = strstr(with, line) != NULL;
	static const char *const suffix[] = {"_bucket", "_sum", "_count"};
	for (int i = 0; !found && i < 3; i++) {
		size_t n = strlen(name), k = strlen(suffix[i]);
		if (n > k && strcmp(name + n - k, suffix[i]) == 0) {
			snprintf(line, sizeof line, "\n%.*s histogram", (int)(n - k), name);
			found = strstr(with, line) != NULL;
		}
	}
	free(with);
	return found;
}

/* Checks every cairn_ name in text against the families; how many it found. */
static int check_names(const char *what, const char *text, const char *fams)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, "cairn_"));) {
		/* A name, not the tail of another word (a file name, say). */
		int word = p == text || !(p[-1] == '_' || p[-1] == '.' || p[-1] == '/' ||
		                          (p[-1] >= 'a' && p[-1] <= 'z'));
		size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
		if (word) {
			char name[128];
			snprintf(name, sizeof name, "%.*s", (int)len, p);
			cr_expect(is_family(fams, name), "%s names %s, which no worker exposes",
			          what, name);
			n++;
		}
		p += len;
	}
	return n;
}

static int publishes(void *arg)
{
	return tmetric(*(int *)arg, "cairn_backlog_publisher") == 1;
}

Test(metrics, every_dashboard_and_alert_query_names_metrics_a_worker_exposes)
{
	const char *db = tdb_new_migrated_shards(16);
	int port;
	pid_t pid = worker(db, &port, NULL, NULL);
	cr_assert(twait(publishes, &port, 30000), "the only worker does not read the backlog");
	char *text = page(port), *fams = families(text);
	cJSON *d = dashboard();
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(d, "title")));
	const char *exprs[128];
	int n = dashboard_exprs(cJSON_GetObjectItem(d, "panels"), exprs, 0, 128), names = 0;
	for (int i = 0; i < n; i++)
		names += check_names("deploy/grafana/cairn.json", exprs[i], fams);
	cr_assert_gt(names, n - 1, "the dashboard's %d queries name %d metrics", n, names);
	cJSON_Delete(d);
	char *rules = tfile_read(src_path("deploy/prometheus/alerts.yml"));
	int in_rules = 0;
	for (const char *p = rules; (p = strstr(p, "expr: ")); p++) {
		const char *nl = strchr(p, '\n');
		char expr[1024];
		snprintf(expr, sizeof expr, "%.*s", (int)(nl ? nl - p : (long)strlen(p)), p);
		in_rules += check_names("deploy/prometheus/alerts.yml", expr, fams);
	}
	cr_assert_geq(in_rules, 9);
	free(rules);
	free(fams);
	free(text);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

Test(metrics, the_alert_rules_pass_promtool_check_and_their_unit_tests)
{
	char cmd[2200];
	snprintf(cmd, sizeof cmd, "cd %s && promtool check rules alerts.yml",
	         src_path("deploy/prometheus"));
	const char *check[] = {"/bin/sh", "-c", cmd, NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(check, NULL, &out, &err);
	fprintf(stderr, "test_metrics: promtool check rules: exit %d\n%s%s", rc, out, err);
	cr_assert_eq(rc, 0, "%s%s", out, err);
	cr_assert(strstr(out, "SUCCESS: 9 rules found"), "%s", out);
	free(out);
	free(err);
	snprintf(cmd, sizeof cmd, "cd %s && promtool test rules alerts_test.yml",
	         src_path("deploy/prometheus"));
	const char *test[] = {"/bin/sh", "-c", cmd, NULL};
	rc = trun(test, NULL, &out, &err);
	fprintf(stderr, "test_metrics: promtool test rules: exit %d\n%s%s", rc, out, err);
	cr_assert_eq(rc, 0, "%s%s", out, err);
	cr_assert(strstr(out, "SUCCESS"), "%s", out);
	free(out);
	free(err);
}
