/*
 * bench.c - the benchmark driver behind `make bench` (scripts/bench.sh starts
 * the database and runs it). Every figure is measured with the client's
 * CLOCK_MONOTONIC, as a user sees it, and printed beside a floor measured in
 * the same run on the same server, as a ratio. Phases (see
 * docs/benchmarks.md):
 *
 *   1 floors       a bare single-row INSERT commit loop on one connection;
 *                  pgbench -b simple-update -c 4 -j 2 -T 10 on its own database;
 *                  pgbench of a single-row INSERT, -c 8 -j 2 -T 10
 *   2 enqueue      cairn_enqueue() alone, one client: p50/p99 per call
 *   3 enqueue x8   one-by-one enqueue from 8 threads, a client each: runs/s,
 *                  without a worker and with one running the runs
 *   4 batch        one cairn_enqueue_batch() of 10,000 runs: seconds
 *   4b sql         the SQL API: cairn.enqueue() one by one from 8 connections,
 *                  and 10,000 in one INSERT ... SELECT-style statement, each
 *                  beside the C client's figure of phases 3 and 4
 *   5 stamp        enqueue-to-first-instruction latency, one run every 10 ms
 *                  (the stamp workflow writes the monotonic clock into a
 *                  shared file), beside a bare commit at the same pace
 *   6 drain        noop and bench3 backlogs drained by one worker on a fresh
 *                  database: runs/s, transactions and statements per run
 *   7 fleet        1, 10, 50 workers on a fresh database: settle time, idle
 *                  transactions/s, transactions per run, settle after kill -9
 *   8 plan         a bulk enqueue into fresh tables drained with and without
 *                  an ANALYZE before the worker starts
 *   9 baseline     (--baseline DIR, BENCH_BASELINE) the drains and the x8
 *                  enqueue against an older build's, alternating
 *  10 memory       (BENCH_MEMORY_RUNS=N, alone) N noop runs through one
 *                  worker, its VmRSS every 50,000 runs
 *
 * Every phase starts from emptied tables and a CHECKPOINT (see reset).
 * It prints a table (measure, value, floor, ratio, goal, met?) and writes
 * JSON; it reports and never asserts on a number: exit 0, or 3 when a phase
 * could not be measured, 1 or 2 when it cannot run at all.
 * Owns: its libpq connections, its cairn clients, the databases it creates
 * (dropped at the end) and the processes it starts (killed with it:
 * PR_SET_PDEATHSIG).
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"

#define MAX_FLEET 64
/* PostgreSQL 15 flushes a backend's stats at most once a second, and a
 * backend that goes idle less than a second after its last flush defers the
 * flush by PGSTAT_IDLE_INTERVAL (10 s): after a burst, the counters are only
 * complete 10 s later. */
#define STATS_LAG_MS 11000

/* A build of cairn that the bench drives: its CLI, its worker, its
 * bench_flows plugin and bench_load (tests/bench_load.c compiled against
 * it). The bench's own build is "current"; the one BENCH_BASELINE names
 * (scripts/bench.sh builds it) is compared with it, alternating. */
typedef struct side {
	const char *name, *cli, *worker, *plugin, *load;
	/* A language SDK's side (the "sdk" phase): its worker is the program
	 * interp runs (script), which starts `worker` as its engine; its
	 * workflows are named prefix + the C ones' names ("py.bench3"). NULL
	 * for a C side. */
	const char *interp, *script, *prefix;
} side;

typedef struct bench {
	const char *db_url;
	const char *out, *log_dir, *pgbench;
	side cur, base; /* base.worker is NULL without a baseline */
	int ab_rounds, ab_noop_n, ab_3step_n, ab_x8_n;
	int have_statements; /* pg_stat_statements is loaded and created */
	int commits_n, single_n, threads_n, threads_runs, batch_n, batch_rounds, stamp_n, noop_n,
	    flow3_n;
	int drain_concurrency; /* BENCH_DRAIN_CONCURRENCY: the drains' worker's */
	int fleet_runs, memory_runs, fanout_n, flow_n, flow_keys, flow_backlog;
	int sdk_rounds, sdk_memory_n; /* BENCH_SDK_ROUNDS, BENCH_SDK_MEMORY */
	int long_n, chain_n;          /* BENCH_LONG_STEPS, BENCH_CHAIN */
	int fleet[8], fleet_n;
	PGconn *pg;
	long nq; /* statements run on pg */
	cairn_client *c;
	cJSON *measures, *errors, *extra;
	/* floors */
	double commit_p50_ms, pgbench_tps, insert8_tps;
	const char *phases; /* BENCH_PHASES: the phases to run, or NULL for all */
	int no_checkpoint;  /* the server refused CHECKPOINT (see reset) */
	/* the C client's figures, for the SQL API's to compare with */
	double c_x8_rps, c_batch_s;
	/* the 3-step drain's runs/s, the fan-out's floor */
	double drain3_rps;
	/* fleet: transactions per run of the first (smallest) fleet */
	double fleet_xact_base;
	/* One more setting of the drains' workers (the tracing phase's
	 * endpoint), or NULL. */
	const char *drain_env_name, *drain_env_value;
	/* On Citus (BENCH_CITUS_SH, BENCH_CITUS_DIR: scripts/bench.sh): the
	 * cluster's script and directory, which make the phases' databases on
	 * every node, and a connection to each worker node (BENCH_NODES), whose
	 * statements and transactions each drain also counts. NULL / 0: one
	 * server. */
	const char *citus_sh, *citus_dir;
	PGconn *nodes[4];
	int nnodes;
} bench;

typedef enum goal { NONE, LE, GE, RATIO_LE, RATIO_GE } goal;

/* A cairn-worker the bench started. */
typedef struct worker {
	pid_t pid;
	int port, ready; /* port: 0 until read from the worker's start line */
	char log[4096];
} worker;

static const char SQL_RESET[] =
    "TRUNCATE cairn.messages, cairn.signals, cairn.signal_links, cairn.events, cairn.steps, "
    "cairn.runs, cairn.limits, cairn.rates, cairn.slots, cairn.child_waits, cairn.child_awaited";
static const char SQL_PROGRESS[] =
    "SELECT count(*) FILTER (WHERE finished_at IS NOT NULL),"
    "       count(*) FILTER (WHERE status IN ('failed', 'cancelled'))"
    "  FROM cairn.runs WHERE workflow = $1 AND key LIKE $2";
static const char SQL_SETTLED[] =
    "SELECT count(*) FILTER (WHERE r.id IS NULL OR NOT cairn.runner_live(r, 10000)),"
    "       md5(string_agg(l.shard_group || '/' || l.shard || '=' || coalesce(l.owner::text, '-')"
    "                      || '@' || l.epoch, ',' ORDER BY l.shard_group, l.shard))"
    "  FROM cairn.shard_leases l LEFT JOIN cairn.runners r ON r.id = l.owner";
static const char SQL_XACTS[] =
    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1";
static const char SQL_SERVER[] =
    "SELECT current_setting('server_version'), current_setting('fsync'),"
    "       current_setting('synchronous_commit'), current_database(),"
    "       current_setting('server_version_num')::int";

/* ------------------------------------------------------------- helpers */

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ms(void)
{
	return now_ns() / 1000000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
	}
}

static void sleep_until_ns(int64_t t)
{
	struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
	}
}

static void note_error(bench *b, const char *phase, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_error(bench *b, const char *phase, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "bench: %s: %s\n", phase, msg);
	cJSON_AddStringToObject(b->errors, phase, msg);
}

/* $name as an integer from lo to hi; def when unset or anything else. */
static int env_int_in(const char *name, int def, long lo, long hi)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || n < lo || n > hi) {
		fprintf(stderr, "bench: %s=\"%s\" is not an integer from %ld to %ld; using %d\n",
		        name, v, lo, hi, def);
		return def;
	}
	return (int)n;
}

static int env_int(const char *name, int def)
{
	return env_int_in(name, def, 0, 100000000);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts v and returns its p-quantile (nearest rank). */
static double quantile(double *v, int n, double p)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	int k = (int)ceil(p * n) - 1;
	return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* Adds a row of the table: value against floor (<= 0: none) and its goal, on
 * the value (LE, GE) or on value / floor (RATIO_LE, RATIO_GE). */
static void measure(bench *b, const char *key, const char *label, const char *unit, double value,
                    double floor, const char *floor_label, goal g, double target)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "key", key);
	cJSON_AddStringToObject(m, "label", label);
	cJSON_AddStringToObject(m, "unit", unit);
	cJSON_AddNumberToObject(m, "value", value);
	double ratio = floor > 0 ? value / floor : NAN;
	if (floor > 0) {
		cJSON_AddNumberToObject(m, "floor", floor);
		cJSON_AddStringToObject(m, "floor_is", floor_label);
		cJSON_AddNumberToObject(m, "ratio", ratio);
	}
	if (g != NONE) {
		static const char *const ops[] = {"", "<=", ">=", "ratio <=", "ratio >="};
		double x = g == LE || g == GE ? value : ratio;
		int ok = isfinite(x) && (g == LE || g == RATIO_LE ? x <= target : x >= target);
		cJSON_AddStringToObject(m, "goal", ops[g]);
		cJSON_AddNumberToObject(m, "target", target);
		cJSON_AddBoolToObject(m, "met", ok);
	}
	cJSON_AddItemToArray(b->measures, m);
	fprintf(stderr, "bench: %s = %.3f %s\n", key, value, unit);
}

/* url with its database replaced by db (a URI's path, else dbname=). */
static char *url_with_db(const char *url, const char *db)
{
	char *out = malloc(strlen(url) + strlen(db) + 16);
	if (!out)
		return NULL;
	const char *scheme = strstr(url, "://");
	if (scheme && (strncmp(url, "postgres", 8) == 0)) {
		const char *host = scheme + 3;
		const char *path = host + strcspn(host, "/?");
		const char *rest = *path == '/' ? path + strcspn(path, "?") : path;
		sprintf(out, "%.*s/%s%s", (int)(path - url), url, db, rest);
	} else {
		sprintf(out, "%s dbname=%s", url, db);
	}
	return out;
}

/* ------------------------------------------------------------ database */

static PGresult *qc(PGconn *pg, long *count, const char *sql, int n, const char *const *params)
{
	PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
	if (count)
		(*count)++;
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		fprintf(stderr, "bench: query failed: %s", PQerrorMessage(pg));
		PQclear(r);
		return NULL;
	}
	return r;
}

static PGresult *q(bench *b, const char *sql, int n, const char *const *params)
{
	return qc(b->pg, &b->nq, sql, n, params);
}

static int exec_ok(PGconn *pg, const char *sql)
{
	PGresult *r = qc(pg, NULL, sql, 0, NULL);
	PQclear(r);
	return r ? 0 : -1;
}

/* Empties cairn's tables and checkpoints, so that every phase (and the
 * floor it is compared with) starts from the same state instead of the
 * dirty pages and WAL of the phases before it; a phase that cannot start
 * clean is not measured (noted, so the bench exits 3). A server that
 * refuses CHECKPOINT (BENCH_DATABASE_URL of a role without pg_checkpoint)
 * is told once, and the phases run without it. */
static int reset(bench *b)
{
	int rc = exec_ok(b->pg, SQL_RESET);
	if (rc) {
		note_error(b, "reset", "cannot empty cairn's tables: %s", PQerrorMessage(b->pg));
		return rc;
	}
	if (!b->no_checkpoint && exec_ok(b->pg, "CHECKPOINT")) {
		fprintf(stderr, "bench: CHECKPOINT refused, phases start without one: %s",
		        PQerrorMessage(b->pg));
		b->no_checkpoint = 1;
	}
	return 0;
}

static double cell(PGresult *r, int col)
{
	return PQgetisnull(r, 0, col) ? -1 : strtod(PQgetvalue(r, 0, col), NULL);
}

static PGconn *connect_url(const char *url)
{
	PGconn *pg = PQconnectdb(url);
	if (PQstatus(pg) != CONNECTION_OK) {
		fprintf(stderr, "bench: cannot connect: %s", PQerrorMessage(pg));
		PQfinish(pg);
		return NULL;
	}
	PQclear(PQexec(pg, "SET client_min_messages = warning"));
	return pg;
}

static int run_capture(char *const argv[], char *buf, size_t size);

/* On Citus: runs the cluster's script (tests/citus.sh) with cmd and
 * database name; its output (a URL) in out. 0 or -1. */
static int citus_db(bench *b, const char *cmd, const char *name, char *out, size_t size)
{
	char *const argv[] = {"/bin/sh", (char *)b->citus_sh, (char *)cmd, (char *)b->citus_dir,
	                      (char *)name, NULL};
	if (run_capture(argv, out, size) != 0) {
		fprintf(stderr, "bench: citus.sh %s %s failed: %.300s\n", cmd, name, out);
		return -1;
	}
	out[strcspn(out, "\n")] = '\0';
	return 0;
}

/* A fresh database name on the bench's server, migrated; its URL, or NULL.
 * On Citus, a database of the cluster on every node. */
static char *db_create(bench *b, const char *name, int migrate)
{
	char sql[256];
	if (b->citus_sh) { /* migrated by the caller (cairn migrate --citus) */
		char out[4096];
		if (migrate || citus_db(b, "dropdb", name, out, sizeof out) ||
		    citus_db(b, "createdb", name, out, sizeof out))
			return NULL;
		return strdup(out);
	}
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
	if (exec_ok(b->pg, sql))
		return NULL;
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
	if (exec_ok(b->pg, sql))
		return NULL;
	char *url = url_with_db(b->db_url, name);
	if (!url || !migrate)
		return url;
	cairn_client *c = NULL;
	int applied = 0;
	if (cairn_client_open(url, &c) != CAIRN_OK ||
	    cairn_migrate(c, NULL, 0, &applied) != CAIRN_OK) {
		fprintf(stderr, "bench: cannot migrate %s: %s\n", name, cairn_client_errmsg(c));
		free(url);
		url = NULL;
	}
	cairn_client_free(c);
	return url;
}

static void db_drop(bench *b, const char *name)
{
	char sql[256];
	if (b->citus_sh) {
		char out[4096];
		citus_db(b, "dropdb", name, out, sizeof out);
		return;
	}
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
	exec_ok(b->pg, sql);
}

/* ------------------------------------------------------------ processes */

/* The worker's HTTP port, once its log has the start line (it binds port 0
 * and logs http_port=N); 0 before. */
static int worker_port(worker *w)
{
	if (w->port)
		return w->port;
	FILE *f = fopen(w->log, "r");
	char line[1024];
	while (f && fgets(line, sizeof line, f)) {
		const char *k = strstr(line, "msg=\"cairn-worker started\"");
		if (k && (k = strstr(k, " http_port=")) && strchr(line, '\n')) {
			w->port = atoi(k + strlen(" http_port="));
			break;
		}
	}
	if (f)
		fclose(f);
	return w->port;
}

/* Forks and execs argv with stdout and stderr to log (or a pipe's write end
 * when out_fd >= 0); dies with the bench. */
static pid_t spawn(char *const argv[], const char *log, int out_fd, char *const env[])
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int fd = out_fd >= 0 ? out_fd : open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	for (int i = 0; env && env[i]; i += 2)
		setenv(env[i], env[i + 1], 1);
	execvp(argv[0], argv);
	fprintf(stderr, "bench: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Starts side s's cairn-worker on url at concurrency, with extra
 * environment (name, value pairs) if any; w->pid < 0 when fork failed. */
static void worker_start_of(bench *b, const side *s, worker *w, const char *name, const char *url,
                            int concurrency, const char *extra_name, const char *extra_value)
{
	char conc[16];
	snprintf(w->log, sizeof w->log, "%s/worker-%s.log", b->log_dir, name);
	w->port = w->ready = 0;
	snprintf(conc, sizeof conc, "%d", concurrency);
	char *const env[] = {"DATABASE_URL",
	                     (char *)url,
	                     "CAIRN_HTTP_ADDR",
	                     "127.0.0.1:0",
	                     "CAIRN_CONCURRENCY",
	                     conc,
	                     "CAIRN_PLUGINS",
	                     (char *)s->plugin,
	                     (char *)extra_name,
	                     (char *)extra_value,
	                     NULL};
	/* A language worker starts the worker as its engine, in the group the
	 * bench enqueues into. */
	char *const sdk_env[] = {"DATABASE_URL",
	                         (char *)url,
	                         "CAIRN_HTTP_ADDR",
	                         "127.0.0.1:0",
	                         "CAIRN_CONCURRENCY",
	                         conc,
	                         "CAIRN_WORKER_BIN",
	                         (char *)s->worker,
	                         "CAIRN_SHARD_GROUPS",
	                         "default",
	                         (char *)extra_name,
	                         (char *)extra_value,
	                         NULL};
	char *const argv[] = {(char *)s->worker, NULL};
	char *const sdk_argv[] = {(char *)s->interp, (char *)s->script, NULL};
	/* Not the last worker's start line under the same name. */
	unlink(w->log);
	w->pid = s->script ? spawn(sdk_argv, w->log, -1, sdk_env) : spawn(argv, w->log, -1, env);
}

/* worker_start_of the bench's own build. */
static void worker_start(bench *b, worker *w, const char *name, const char *url, int concurrency,
                         const char *extra_name, const char *extra_value)
{
	worker_start_of(b, &b->cur, w, name, url, concurrency, extra_name, extra_value);
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	return size * n;
}

typedef struct {
	char text[65536];
	size_t n;
} body;

static size_t keep(char *p, size_t size, size_t n, void *arg)
{
	body *b = arg;
	size_t k = size * n < sizeof b->text - 1 - b->n ? size * n : sizeof b->text - 1 - b->n;
	memcpy(b->text + b->n, p, k);
	b->n += k;
	b->text[b->n] = 0;
	return size * n;
}

/* GET of path on the worker's port: the HTTP status (0 when it did not
 * answer); the start of the body in *into unless into is NULL. */
static long http_get(int port, const char *path, body *into)
{
	char url[128];
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
	CURL *e = curl_easy_init();
	long status = 0;
	if (!e)
		return 0;
	if (into)
		into->n = 0, into->text[0] = 0;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, into ? keep : discard);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, into);
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(e);
	return status;
}

static long http_status(int port, const char *path)
{
	return http_get(port, path, NULL);
}

/* The sum of the samples of metric name on a /metrics page (one without
 * labels, or one per workflow: the baseline's build may have either); -1
 * when it has none. */
static long metric_sum(const char *text, const char *name)
{
	long n = -1;
	size_t len = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, name, len) != 0 || (p[len] != ' ' && p[len] != '{'))
			continue;
		const char *v = strchr(p, ' ');
		n = (n < 0 ? 0 : n) + (v ? atol(v + 1) : 0);
	}
	return n;
}

/* The sum of the metrics names (NULL-terminated) of a worker's /metrics
 * (metric_sum); -1 when it did not answer or lacks one. */
static double worker_metrics(worker *w, const char *const *names)
{
	body m;
	if (!worker_port(w) || http_get(w->port, "/metrics", &m) != 200)
		return -1;
	double n = 0;
	for (int i = 0; names[i]; i++) {
		long k = metric_sum(m.text, names[i]);
		if (k < 0)
			return -1;
		n += (double)k;
	}
	return n;
}

/* The runs a worker ended (completed or failed for good), from its
 * /metrics; -1 when it did not answer. */
static long worker_ended(worker *w)
{
	const char *names[] = {"cairn_runs_completed_total", "cairn_runs_failed_total", NULL};
	return (long)worker_metrics(w, names);
}

static int worker_dead(worker *w)
{
	int st;
	if (w->pid <= 0)
		return 1;
	if (waitpid(w->pid, &st, WNOHANG) == w->pid) {
		w->pid = -1;
		return 1;
	}
	return 0;
}

/* Polls /readyz every poll_ms; the monotonic ms when it answered 200, or -1
 * when the worker died or timeout_ms passed. */
static int64_t worker_ready(worker *w, int64_t timeout_ms, int poll_ms)
{
	int64_t end = now_ms() + timeout_ms;
	while (now_ms() < end) {
		if (worker_dead(w))
			return -1;
		if (worker_port(w) && http_status(w->port, "/readyz") == 200)
			return w->ready = 1, now_ms();
		sleep_ms(poll_ms);
	}
	return -1;
}

/* SIGTERM to all, then waits for each (SIGKILL after 40 s). */
static void workers_stop(worker *ws, int n)
{
	for (int i = 0; i < n; i++)
		if (ws[i].pid > 0)
			kill(ws[i].pid, SIGTERM);
	int64_t end = now_ms() + 40000;
	for (int i = 0; i < n; i++) {
		while (ws[i].pid > 0 && !worker_dead(&ws[i])) {
			if (now_ms() > end) {
				fprintf(stderr,
				        "bench: worker %d did not stop within 40 s; killing it\n",
				        (int)ws[i].pid);
				kill(ws[i].pid, SIGKILL);
				waitpid(ws[i].pid, NULL, 0);
				ws[i].pid = -1;
			} else {
				sleep_ms(10);
			}
		}
	}
}

/*
 * How long to wait before asking a worker's /metrics again, with ended of
 * n runs ended elapsed ms after the start: a quarter of the time the rest
 * should take at the rate so far, between poll_ms and 200 ms. The page is
 * tens of KB, and asking for it every poll_ms through a drain of seconds
 * cost the worker it measures a few per cent of a core. Asked this way,
 * a drain's end is seen within poll_ms of it unless its rate more than
 * quadruples on the way.
 */
static int poll_wait(long ended, int n, int64_t elapsed, int poll_ms)
{
	if (ended <= 0 || elapsed <= 0)
		return poll_ms;
	double rest = (double)(n - ended) * (double)elapsed / (double)ended;
	int wait = (int)(rest / 4);
	return wait < poll_ms ? poll_ms : wait > 200 ? 200 : wait;
}

/* Waits until n runs of workflow (keys like key_like) have finished, asking
 * pg every poll_ms (each ask counted in *count); gives up after 10 minutes, or
 * 30 s without progress, or when a worker died. 0 when all did. */
static int wait_finished(bench *b, const char *phase, PGconn *pg, long *count, const char *workflow,
                         const char *key_like, int n, worker *ws, int nw, int poll_ms)
{
	const char *params[] = {workflow, key_like};
	int64_t start = now_ms(), last_change = start, last_print = start;
	long done = -1;
	for (;;) {
		/* Counting the runs in the database costs a scan of them, which
		 * would slow the one worker it waits for: that worker's own
		 * count says when to look. */
		long ended = nw == 1 ? worker_ended(&ws[0]) : -1;
		if (ended >= 0 && ended < n && !worker_dead(&ws[0])) {
			int64_t t = now_ms();
			if (t - last_print >= 5000) {
				fprintf(stderr, "bench: %s: %ld of %d runs ended\n", phase, ended,
				        n);
				last_print = t;
			}
			if (ended != done)
				done = ended, last_change = t;
			if (t - last_change <= 30000 && t - start <= 600000) {
				sleep_ms(poll_wait(ended, n, t - start, poll_ms));
				continue;
			}
		}
		PGresult *r = qc(pg, count, SQL_PROGRESS, 2, params);
		if (!r)
			return -1;
		long d = (long)cell(r, 0), failed = (long)cell(r, 1);
		PQclear(r);
		int64_t t = now_ms();
		if (d != done)
			done = d, last_change = t;
		if (done >= n) {
			if (failed)
				note_error(b, phase,
				           "%ld of %d runs did not complete (failed or cancelled)",
				           failed, n);
			return 0;
		}
		for (int i = 0; i < nw; i++)
			if (worker_dead(&ws[i])) {
				note_error(b, phase,
				           "a worker exited (logs in %s) after %ld of %d runs",
				           b->log_dir, done, n);
				return -1;
			}
		if (t - last_change > 30000 || t - start > 600000) {
			note_error(b, phase, "gave up after %" PRId64 " s: %ld of %d runs finished",
			           (t - start) / 1000, done, n);
			return -1;
		}
		if (t - last_print >= 5000) {
			fprintf(stderr, "bench: %s: %ld of %d runs finished\n", phase, done, n);
			last_print = t;
		}
		sleep_ms(poll_ms);
	}
}

/* Enqueues n runs of workflow with input "{}" and keys prefix0.. in batches
 * of batch through c. */
static int enqueue_batched(cairn_client *c, const char *workflow, int first, int n, int batch,
                           const char *key_prefix)
{
	cairn_enqueue_opts *o = calloc((size_t)batch, sizeof *o);
	cairn_enqueued *out = calloc((size_t)batch, sizeof *out);
	char(*keys)[32] = calloc((size_t)batch, sizeof *keys);
	int rc = (o && out && keys) ? 0 : -1;
	for (int i = 0; rc == 0 && i < n; i += batch) {
		int m = n - i < batch ? n - i : batch;
		for (int k = 0; k < m; k++) {
			snprintf(keys[k], sizeof keys[k], "%s%d", key_prefix, first + i + k);
			o[k] = (cairn_enqueue_opts){.key = keys[k], .input = "{}"};
		}
		if (cairn_enqueue_batch(c, workflow, (size_t)m, o, out) != CAIRN_OK) {
			fprintf(stderr, "bench: enqueue_batch: %s\n", cairn_client_errmsg(c));
			rc = -1;
		}
	}
	free(o);
	free(out);
	free(keys);
	return rc;
}

/* One cairn_enqueue of workflow with key prefix-i and input; 0 or -1. */
static int enqueue_one(cairn_client *c, const char *workflow, const char *prefix, int i,
                       const char *input)
{
	char key[48];
	snprintf(key, sizeof key, "%s%d", prefix, i);
	cairn_enqueue_opts o = {.key = key, .input = input};
	cairn_enqueued r;
	int rc = cairn_enqueue(c, workflow, &o, &r);
	cairn_enqueued_clear(&r);
	return rc == CAIRN_OK ? 0 : -1;
}

/* ------------------------------------------------------ 1: the floors */

/* n single-row INSERTs into bench_floor, each its own commit, one every
 * gap_ns (0: back to back), each timed into ms: the seconds they took, or
 * -1 (noted under phase). */
static double commit_loop(bench *b, const char *phase, int n, int64_t gap_ns, double *ms)
{
	if (exec_ok(b->pg, "DROP TABLE IF EXISTS bench_floor") ||
	    exec_ok(b->pg, "CREATE TABLE bench_floor (id bigserial PRIMARY KEY, v int NOT NULL)")) {
		note_error(b, phase, "cannot create the table bench_floor");
		return -1;
	}
	int64_t t0 = now_ns();
	for (int i = 0; i < n; i++) {
		if (gap_ns)
			sleep_until_ns(t0 + (int64_t)i * gap_ns);
		int64_t t = now_ns();
		PGresult *r = PQexec(b->pg, "INSERT INTO bench_floor (v) VALUES (1)");
		ms[i] = (double)(now_ns() - t) / 1e6;
		int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
		if (!ok) {
			note_error(b, phase, "%s", PQerrorMessage(b->pg));
			return -1;
		}
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	exec_ok(b->pg, "DROP TABLE bench_floor");
	return secs;
}

static void phase_floor_commit(bench *b)
{
	int n = b->commits_n;
	double *ms = calloc((size_t)n, sizeof *ms);
	double secs = ms ? commit_loop(b, "floor_commit", n, 0, ms) : -1;
	if (secs >= 0) {
		b->commit_p50_ms = quantile(ms, n, 0.5);
		measure(b, "floor_commit_p50_ms", "floor: bare INSERT commit p50", "ms",
		        b->commit_p50_ms, 0, "", NONE, 0);
		measure(b, "floor_commit_p99_ms", "floor: bare INSERT commit p99", "ms",
		        quantile(ms, n, 0.99), 0, "", NONE, 0);
		measure(b, "floor_commits_per_s", "floor: bare INSERT commits/s", "/s", n / secs, 0,
		        "", NONE, 0);
	}
	free(ms);
}

/* Runs argv with extra environment env (name, value pairs, or NULL), its
 * output into buf; the exit status, or -1. */
static int run_capture_env(char *const argv[], char *const env[], char *buf, size_t size)
{
	int p[2];
	if (pipe(p))
		return -1;
	pid_t pid = spawn(argv, NULL, p[1], env);
	close(p[1]);
	size_t len = 0;
	ssize_t k;
	while (len + 1 < size && (k = read(p[0], buf + len, size - len - 1)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			break;
		len += (size_t)k;
	}
	buf[len] = 0;
	close(p[0]);
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_capture(char *const argv[], char *buf, size_t size)
{
	return run_capture_env(argv, NULL, buf, size);
}

/* pgbench on url with args (NULL-terminated, after the program); its TPS,
 * or -1 (noted under phase). */
static double pgbench_tps(bench *b, const char *phase, const char *url, char *const *args)
{
	static char out[65536];
	char *argv[16];
	int n = 0;
	argv[n++] = (char *)b->pgbench;
	while (*args && n < 14)
		argv[n++] = *args++;
	argv[n++] = (char *)url;
	argv[n] = NULL;
	const char *tps;
	if (run_capture(argv, out, sizeof out) != 0 || !(tps = strstr(out, "tps = "))) {
		note_error(b, phase, "pgbench failed: %.300s", out);
		return -1;
	}
	return strtod(tps + 6, NULL);
}

/* pgbench simple-update with 4 clients, and one single-row INSERT per
 * transaction with 8 clients (the rate one-by-one enqueue is held to). */
static void phase_floor_pgbench(bench *b)
{
	char *url = db_create(b, "bench_pgbench", 0);
	char script[4096];
	snprintf(script, sizeof script, "%s/insert.sql", b->log_dir);
	FILE *f = fopen(script, "w");
	if (!url || !f || fputs("INSERT INTO bench_insert (v) VALUES (1);\n", f) < 0) {
		note_error(b, "floor_pgbench", "cannot create the database bench_pgbench or %s",
		           script);
		if (f)
			fclose(f);
		free(url);
		return;
	}
	fclose(f);
	static char out[65536];
	char *init[] = {(char *)b->pgbench, "-i", "-s", "1", "-q", url, NULL};
	char *update[] = {"-b", "simple-update", "-c", "4", "-j", "2", "-T", "10", NULL};
	char *insert[] = {"-n", "-f", script, "-c", "8", "-j", "2", "-T", "10", NULL};
	PGconn *pg = connect_url(url);
	if (run_capture(init, out, sizeof out) != 0)
		note_error(b, "floor_pgbench", "pgbench -i failed: %.300s", out);
	else if ((b->pgbench_tps = pgbench_tps(b, "floor_pgbench", url, update)) > 0)
		measure(b, "floor_pgbench_tps", "floor: pgbench simple-update -c4 -j2", "TPS",
		        b->pgbench_tps, 0, "", NONE, 0);
	if (!pg ||
	    exec_ok(pg, "CREATE TABLE bench_insert (id bigserial PRIMARY KEY, v int NOT NULL)"))
		note_error(b, "floor_insert_x8", "cannot create the table bench_insert");
	else if ((b->insert8_tps = pgbench_tps(b, "floor_insert_x8", url, insert)) > 0)
		measure(b, "floor_insert_x8_tps", "floor: pgbench 1-row INSERT -c8 -j2", "TPS",
		        b->insert8_tps, 0, "", NONE, 0);
	PQfinish(pg);
	free(url);
	db_drop(b, "bench_pgbench");
}

/* ------------------------------------------------------ 2-4: enqueue */

static void phase_enqueue_single(bench *b)
{
	int n = b->single_n;
	double *ms = calloc((size_t)n, sizeof *ms);
	if (!ms || reset(b))
		return free(ms);
	for (int i = 0; i < n; i++) {
		int64_t t = now_ns();
		if (enqueue_one(b->c, "noop", "s-", i, "{}")) {
			note_error(b, "enqueue", "%s", cairn_client_errmsg(b->c));
			return free(ms);
		}
		ms[i] = (double)(now_ns() - t) / 1e6;
	}
	double p50 = quantile(ms, n, 0.5), p99 = quantile(ms, n, 0.99);
	measure(b, "enqueue_p50_ms", "cairn_enqueue p50, 1 client", "ms", p50, b->commit_p50_ms,
	        "bare commit p50", NONE, 0);
	measure(b, "enqueue_p99_ms", "cairn_enqueue p99, 1 client", "ms", p99, b->commit_p50_ms,
	        "bare commit p50", NONE, 0);
	free(ms);
}

typedef struct enq_thread {
	bench *b;
	cairn_client *c;
	pthread_barrier_t *go;
	const char *prefix;
	int first, n, failed;
	pthread_t t;
} enq_thread;

static void *enqueue_thread(void *arg)
{
	enq_thread *e = arg;
	pthread_barrier_wait(e->go);
	for (int i = 0; i < e->n && !e->failed; i++)
		if (enqueue_one(e->c, "noop", e->prefix, e->first + i, "{}"))
			e->failed = 1;
	return NULL;
}

/* One-by-one enqueue from 8 threads, a client each: without a worker (no
 * owner to wake), and with one running the runs as they come (every enqueue
 * wakes it, and its commits compete with the enqueues'). */
static void phase_enqueue_threads(bench *b, int with_worker)
{
	enum { T = 8 };
	enq_thread th[T] = {{0}};
	pthread_barrier_t go;
	const char *key = with_worker ? "enqueue_x8_worker_runs_per_s" : "enqueue_x8_runs_per_s";
	const char *prefix = with_worker ? "mw-" : "m-";
	worker w = {.pid = -1};
	if (reset(b))
		return;
	if (with_worker) {
		worker_start(b, &w, "x8", b->db_url, 16, NULL, NULL);
		if (worker_ready(&w, 60000, 5) < 0) {
			note_error(b, key, "the worker did not become ready (log in %s)",
			           b->log_dir);
			workers_stop(&w, 1);
			return;
		}
	}
	pthread_barrier_init(&go, NULL, T + 1);
	int started = 0, failed = 0;
	for (int i = 0; i < T; i++) {
		th[i] = (enq_thread){.b = b,
		                     .go = &go,
		                     .prefix = prefix,
		                     .first = i * (b->threads_runs / T),
		                     .n = b->threads_runs / T};
		if (cairn_client_open(b->db_url, &th[i].c) != CAIRN_OK) {
			note_error(b, key, "%s", cairn_client_errmsg(th[i].c));
			th[i].failed = 1;
		}
	}
	for (int i = 0; i < T; i++)
		if (pthread_create(&th[i].t, NULL, enqueue_thread, &th[i]) == 0)
			started++;
	if (started != T) {
		note_error(b, key, "cannot start %d threads", T);
		abort(); /* the barrier would never open */
	}
	pthread_barrier_wait(&go);
	int64_t t0 = now_ns();
	for (int i = 0; i < T; i++) {
		pthread_join(th[i].t, NULL);
		failed |= th[i].failed;
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	for (int i = 0; i < T; i++)
		cairn_client_free(th[i].c);
	pthread_barrier_destroy(&go);
	int n = T * (b->threads_runs / T);
	if (failed)
		note_error(b, key, "an enqueue failed");
	else if (with_worker)
		measure(b, key, "cairn_enqueue, 8 threads, 1 worker running", "runs/s", n / secs,
		        b->insert8_tps, "INSERT x8 TPS", NONE, 0);
	else
		measure(b, key, "cairn_enqueue, 8 threads x 1 client", "runs/s",
		        b->c_x8_rps = n / secs, b->insert8_tps, "INSERT x8 TPS", RATIO_GE, 0.5);
	if (with_worker && !failed) /* the runs must all have run */
		wait_finished(b, key, b->pg, &b->nq, "noop", "mw-%", n, &w, 1, 10);
	if (with_worker)
		workers_stop(&w, 1);
}

/* The floor of a batch: the same number of rows written into cairn.runs by
 * one bare INSERT ... SELECT (every index of the table, no API), from the
 * client's clock, then emptied; seconds, or 0. */
static double batch_floor(bench *b)
{
	char n[24];
	snprintf(n, sizeof n, "%d", b->batch_n);
	const char *p[] = {n};
	int64_t t0 = now_ns();
	PGresult *r = PQexecParams(
	    b->pg,
	    "INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, "
	    "                        input, start_at) "
	    "SELECT cairn.new_run_id(g % 64), 'floor', 'f-' || g, 'default', g % 64, '{}', now() "
	    "FROM generate_series(1, $1::int) g",
	    1, NULL, p, NULL, NULL, 0);
	double secs = (double)(now_ns() - t0) / 1e9;
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		note_error(b, "enqueue_batch", "the bare INSERT failed: %s", PQerrorMessage(b->pg));
	PQclear(r);
	return !ok || reset(b) ? 0 : secs;
}

/*
 * The batch and its floor, alternated BENCH_BATCH_ROUNDS (5) times from
 * emptied tables and a CHECKPOINT each: the medians. One of each took from
 * 0.13 to 0.80 s on a loaded 2-core machine whose disk other builds share,
 * which made a single ratio anything from 0.7x to 3x: the two write the
 * same WAL (6.4 MB for 10,000 runs) and wait for the same fsync.
 */
static void phase_enqueue_batch(bench *b)
{
	enum { MAX_ROUNDS = 15 };
	double floors[MAX_ROUNDS], batches[MAX_ROUNDS];
	int rounds = b->batch_rounds < 1            ? 1
	             : b->batch_rounds > MAX_ROUNDS ? MAX_ROUNDS
	                                            : b->batch_rounds;
	if (reset(b))
		return;
	for (int i = 0; i < rounds; i++) {
		char prefix[24];
		snprintf(prefix, sizeof prefix, "b%d-", i);
		if (!(floors[i] = batch_floor(b)))
			return;
		int64_t t0 = now_ns();
		if (enqueue_batched(b->c, "noop", 0, b->batch_n, b->batch_n, prefix)) {
			note_error(b, "enqueue_batch", "%s", cairn_client_errmsg(b->c));
			return;
		}
		batches[i] = (double)(now_ns() - t0) / 1e9;
		fprintf(stderr, "bench: batch round %d: floor %.3f s, cairn_enqueue_batch %.3f s\n",
		        i + 1, floors[i], batches[i]);
		if (i + 1 < rounds && reset(b))
			return;
	}
	double floor = quantile(floors, rounds, 0.5), secs = quantile(batches, rounds, 0.5);
	char label[96];
	snprintf(label, sizeof label, "floor: bare INSERT of 10,000 rows (median of %d)", rounds);
	measure(b, "floor_insert_batch_s", label, "s", floor, 0, "", NONE, 0);
	b->c_batch_s = secs;
	snprintf(label, sizeof label, "cairn_enqueue_batch of 10,000 runs (median of %d)", rounds);
	measure(b, "enqueue_batch_s", label, "s", secs, floor, "bare INSERT of 10,000 rows",
	        RATIO_LE, 1.5);
}

/* ------------------------------------------------------- 4b: the SQL API */

typedef struct sql_thread {
	PGconn *pg;
	pthread_barrier_t *go;
	int first, n, failed;
	pthread_t t;
} sql_thread;

static void *sql_enqueue_thread(void *arg)
{
	sql_thread *e = arg;
	pthread_barrier_wait(e->go);
	for (int i = 0; i < e->n && !e->failed; i++) {
		char key[32];
		snprintf(key, sizeof key, "q-%d", e->first + i);
		const char *p[] = {key};
		PGresult *r = PQexecPrepared(e->pg, "enqueue", 1, p, NULL, NULL, 0);
		e->failed = PQresultStatus(r) != PGRES_TUPLES_OK;
		if (e->failed)
			fprintf(stderr, "bench: cairn.enqueue: %s", PQerrorMessage(e->pg));
		PQclear(r);
	}
	return NULL;
}

/* cairn.enqueue() one by one from 8 connections (an application's
 * statements, each its own transaction), no worker running; then 10,000
 * runs in one statement. Each beside the C client's figure, measured here
 * when phases 3 and 4 did not run. */
static void phase_sql(bench *b)
{
	enum { T = 8 };
	if (!b->c_x8_rps)
		phase_enqueue_threads(b, 0);
	if (!b->c_batch_s)
		phase_enqueue_batch(b);
	sql_thread th[T] = {{0}};
	pthread_barrier_t go;
	if (reset(b))
		return;
	pthread_barrier_init(&go, NULL, T + 1);
	int failed = 0, per = b->threads_runs / T;
	for (int i = 0; i < T; i++) {
		th[i] = (sql_thread){.go = &go, .first = i * per, .n = per};
		th[i].pg = PQconnectdb(b->db_url);
		PGresult *r =
		    PQprepare(th[i].pg, "enqueue",
		              "SELECT id FROM cairn.enqueue('noop', '{}', key => $1)", 1, NULL);
		th[i].failed = PQresultStatus(r) != PGRES_COMMAND_OK;
		if (th[i].failed)
			note_error(b, "sql_enqueue_x8", "%s", PQerrorMessage(th[i].pg));
		PQclear(r);
	}
	for (int i = 0; i < T; i++)
		if (pthread_create(&th[i].t, NULL, sql_enqueue_thread, &th[i]) != 0)
			abort(); /* the barrier would never open */
	pthread_barrier_wait(&go);
	int64_t t0 = now_ns();
	for (int i = 0; i < T; i++) {
		pthread_join(th[i].t, NULL);
		failed |= th[i].failed;
		PQfinish(th[i].pg);
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	pthread_barrier_destroy(&go);
	if (failed)
		note_error(b, "sql_enqueue_x8", "an enqueue failed");
	else
		measure(b, "sql_enqueue_x8_runs_per_s", "cairn.enqueue, 8 connections, one by one",
		        "runs/s", T * per / secs, b->c_x8_rps, "cairn_enqueue x8", NONE, 0);
	if (reset(b))
		return;
	char n[24];
	snprintf(n, sizeof n, "%d", b->batch_n);
	const char *p[] = {n};
	t0 = now_ns();
	PGresult *r = qc(b->pg, &b->nq,
	                 "SELECT count((cairn.enqueue('noop', '{}', key => 'qb-' || g)).id) "
	                 "FROM generate_series(1, $1::int) g",
	                 1, p);
	secs = (double)(now_ns() - t0) / 1e9;
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		note_error(b, "sql_enqueue_batch", "%s", PQerrorMessage(b->pg));
	else
		measure(b, "sql_enqueue_batch_s", "cairn.enqueue of 10,000 runs in one statement",
		        "s", secs, b->c_batch_s, "cairn_enqueue_batch", NONE, 0);
	PQclear(r);
}

/* ------------------------------------------- 5: enqueue to first instruction */

/* The stamp phase enqueues one run every STAMP_GAP_NS: a run that meets an
 * idle worker, as a low load does. A commit that comes after a pause takes
 * longer than one of a busy loop (the processes it wakes were asleep), so
 * the floor is a bare commit at the same pace. The first STAMP_WARM runs,
 * the second after the worker turned ready, are its start (its singletons
 * connect, the relay begins to listen, each statement is planned for the
 * first time): their worst is a figure of its own, and p50 and p99 are of
 * the runs after them. */
#define STAMP_GAP_NS 10000000
#define STAMP_WARM   100

/* Prints the runs of the tail (the 5 slowest of n, ms each, call[] their
 * enqueue calls): how much of each was the enqueue's own commit, and how
 * much came after it (the wake-up, the claim, the start). */
static void stamp_tail(const double *ms, const double *call, int n)
{
	int worst[5], k = 0;
	for (; k < 5 && k < n; k++) {
		int w = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int j = 0; j < k; j++)
				taken |= worst[j] == i;
			if (!taken && (w < 0 || ms[i] > ms[w]))
				w = i;
		}
		worst[k] = w;
	}
	fprintf(stderr, "bench: stamp tail (run: total = enqueue call + after it, ms):");
	for (int j = 0; j < k; j++)
		fprintf(stderr, " #%d: %.2f = %.2f + %.2f;", worst[j], ms[worst[j]], call[worst[j]],
		        ms[worst[j]] - call[worst[j]]);
	fprintf(stderr, "\n");
}

/* Side s's worker, idle, takes BENCH_STAMP runs of its stamp workflow
 * enqueued one per 10 ms after STAMP_WARM others: each run's time from its
 * enqueue to its first instruction into run[] (n of them, sorted), the
 * warm-up's worst into *warm_max and each enqueue call's into call[]. 0, or
 * -1 (noted). */
static int stamp_side(bench *b, const side *s, double *run, double *call, double *warm_max)
{
	int n = b->stamp_n, all = STAMP_WARM + n, rc = -1;
	char path[4096], workflow[64], name[64];
	snprintf(path, sizeof path, "%s/stamps.bin", b->log_dir);
	snprintf(workflow, sizeof workflow, "%sstamp", s->prefix ? s->prefix : "");
	snprintf(name, sizeof name, "stamp-%s", s->name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)all * 8) != 0) {
		note_error(b, "stamp", "cannot create %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int64_t *slot = mmap(NULL, (size_t)all * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	int64_t *sent = calloc((size_t)all, sizeof *sent);
	double *ms = calloc((size_t)all, sizeof *ms), *calls = calloc((size_t)all, sizeof *calls);
	worker w = {0};
	if (slot == MAP_FAILED || !sent || !ms || !calls || reset(b))
		goto out;
	worker_start_of(b, s, &w, name, b->db_url, 16, "BENCH_STAMPS", path);
	if (worker_ready(&w, 60000, 20) < 0) {
		note_error(b, "stamp", "the %s worker did not become ready (log in %s)", s->name,
		           b->log_dir);
		goto out;
	}
	int64_t start = now_ns();
	for (int i = 0; i < all; i++) {
		char input[32];
		snprintf(input, sizeof input, "{\"i\": %d}", i);
		sleep_until_ns(start + (int64_t)i * STAMP_GAP_NS);
		sent[i] = now_ns();
		if (enqueue_one(b->c, workflow, "st-", i, input)) {
			note_error(b, "stamp", "%s", cairn_client_errmsg(b->c));
			goto out;
		}
		calls[i] = (double)(now_ns() - sent[i]) / 1e6;
	}
	int64_t end = now_ms() + 30000;
	int seen = 0;
	while (seen < all && now_ms() < end && !worker_dead(&w)) {
		for (seen = 0; seen < all && __atomic_load_n(&slot[seen], __ATOMIC_ACQUIRE);
		     seen++) {
		}
		if (seen < all)
			sleep_ms(5);
	}
	if (seen < all) {
		note_error(b, "stamp", "%s: only %d of %d runs stamped their start", s->name, seen,
		           all);
		goto out;
	}
	*warm_max = 0;
	for (int i = 0; i < all; i++) {
		ms[i] = (double)(slot[i] - sent[i]) / 1e6;
		if (i < STAMP_WARM && ms[i] > *warm_max)
			*warm_max = ms[i];
	}
	stamp_tail(ms + STAMP_WARM, calls + STAMP_WARM, n);
	memcpy(run, ms + STAMP_WARM, (size_t)n * sizeof *run);
	memcpy(call, calls + STAMP_WARM, (size_t)n * sizeof *call);
	qsort(run, (size_t)n, sizeof *run, cmp_double);
	rc = 0;
out:
	workers_stop(&w, w.pid > 0);
	if (slot != MAP_FAILED)
		munmap(slot, (size_t)all * 8);
	unlink(path);
	free(sent);
	free(ms);
	free(calls);
	return rc;
}

static void phase_stamp(bench *b)
{
	int n = b->stamp_n;
	double *ms = calloc((size_t)n + 1, sizeof *ms), *call = calloc((size_t)n + 1, sizeof *call);
	double warm_max = 0;
	if (n <= 0 || !ms || !call || reset(b) || commit_loop(b, "stamp", n, STAMP_GAP_NS, ms) < 0)
		goto out;
	double floor = quantile(ms, n, 0.5), floor99 = quantile(ms, n, 0.99);
	measure(b, "floor_paced_commit_p50_ms", "floor: bare INSERT commit p50, 1 per 10 ms", "ms",
	        floor, 0, "", NONE, 0);
	measure(b, "floor_paced_commit_p99_ms", "floor: bare INSERT commit p99, 1 per 10 ms", "ms",
	        floor99, 0, "", NONE, 0);
	if (stamp_side(b, &b->cur, ms, call, &warm_max))
		goto out;
	measure(b, "stamp_enqueue_p50_ms", "cairn_enqueue p50, 1 per 10 ms, worker idle", "ms",
	        quantile(call, n, 0.5), floor, "paced commit p50", NONE, 0);
	measure(b, "stamp_p50_ms", "enqueue to first instruction p50", "ms", quantile(ms, n, 0.5),
	        floor, "paced commit p50", RATIO_LE, 2.5);
	measure(b, "stamp_p99_ms", "enqueue to first instruction p99", "ms", quantile(ms, n, 0.99),
	        floor99, "paced commit p99", RATIO_LE, 2);
	measure(b, "stamp_max_ms", "enqueue to first instruction max", "ms", ms[n - 1], floor,
	        "paced commit p50", NONE, 0);
	measure(b, "stamp_start_max_ms", "enqueue to first instruction max, 1st s after ready",
	        "ms", warm_max, floor, "paced commit p50", NONE, 0);
out:
	free(ms);
	free(call);
}

/* ------------------------------------------------------- 6: drain a backlog */

/* The drains' goals hold at concurrency DRAIN_CONCURRENCY; at another
 * (BENCH_DRAIN_CONCURRENCY) the figure is reported under a key of its own,
 * without a goal. */
#define DRAIN_CONCURRENCY 16

static const char SQL_DB_XACTS[] =
    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1";
/* Clients only: on Citus, a maintenance daemon in each database keeps
 * connections of its own (citus_internal) to every node, the coordinator
 * too. */
static const char SQL_DB_SESSIONS[] =
    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() "
    "  AND backend_type = 'client backend' AND application_name NOT LIKE 'citus\\_internal%'";
/* On a worker node of Citus, every client: the coordinator's sessions reach
 * it as citus_internal ones, which a maintenance daemon's stay among. */
static const char SQL_NODE_SESSIONS[] =
    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() "
    "  AND backend_type = 'client backend'";
static const char SQL_STMT_RESET[] =
    "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = $1), 0)";
static const char SQL_STMT_SUM[] =
    "SELECT coalesce(sum(s.calls), 0), coalesce(sum(s.total_exec_time + s.total_plan_time), 0)"
    "  FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1";
static const char SQL_STMT_TOP[] =
    "SELECT s.calls, round((s.total_exec_time + s.total_plan_time)::numeric, 1),"
    "       left(regexp_replace(s.query, '[[:space:]]+', ' ', 'g'), 160)"
    "  FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1"
    " ORDER BY s.calls DESC, s.total_exec_time DESC LIMIT 10";

/* One drain on a database of its own (see drain_fresh). */
typedef struct drain {
	double start_rps; /* runs/s from the worker's start, on the client's clock */
	double ready_rps; /* runs/s from its /readyz 200 */
	double xacts;     /* the database's transactions per run while the worker ran */
	double stmts;     /* statements per run (pg_stat_statements), -1 without it */
	double server_ms; /* their planning and execution time per run, ms, or -1 */
	double cpu_us;    /* the worker's CPU time (user + system) per run, us, or -1 */
	cJSON *top;       /* the most frequent statements, or NULL */
	/* On Citus: each worker node's statements and transactions per run. */
	double node_stmts[4], node_xacts[4];
} drain;

/* The CPU time process pid has used (user + system), ms, or -1. */
static double cpu_ms_of(pid_t pid)
{
	char path[64], line[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(line, 1, sizeof line - 1, f) : 0;
	if (f)
		fclose(f);
	line[n] = '\0';
	/* Past "(comm)", which may hold spaces: fields 3 on; utime and stime
	 * are fields 14 and 15. */
	const char *p = strrchr(line, ')');
	unsigned long ut, st;
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* The database's transactions once every session but the bench's has
 * ended: a backend reports its counters as it exits, before it leaves
 * pg_stat_activity. -1 after 30 s. */
static double db_xacts_settled(bench *b, const char *db)
{
	const char *p[] = {db};
	for (int64_t end = now_ms() + 30000; now_ms() < end; sleep_ms(20)) {
		PGresult *r = q(b, SQL_DB_SESSIONS, 1, p);
		long left = r ? (long)cell(r, 0) : -1;
		PQclear(r);
		if (left != 0)
			continue;
		r = q(b, SQL_DB_XACTS, 1, p);
		double x = r ? cell(r, 0) : -1;
		PQclear(r);
		return x;
	}
	return -1;
}

/* On Citus: the one value of sql (with db as $1) on worker node i, or -1. */
static double node_value(bench *b, int i, const char *sql, const char *db)
{
	const char *p[] = {db};
	PGresult *r = PQexecParams(b->nodes[i], sql, 1, NULL, p, NULL, NULL, 0);
	double v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? cell(r, 0) : -1;
	PQclear(r);
	return v;
}

/* On Citus: each worker node's statements and transactions of db so far,
 * once its sessions there are down to sessions[i] (a node's backends
 * report as they end); with sessions NULL, at once, and sessions0 gets
 * the count. */
static void nodes_count(bench *b, const char *db, double *stmts, double *xacts,
                        const double *sessions, double *sessions0)
{
	for (int i = 0; i < b->nnodes; i++) {
		if (sessions0)
			sessions0[i] = node_value(b, i, SQL_NODE_SESSIONS, db);
		for (int64_t end = now_ms() + 30000;
		     sessions && node_value(b, i, SQL_NODE_SESSIONS, db) > sessions[i] && now_ms() < end;)
			sleep_ms(20);
		stmts[i] = b->have_statements ? node_value(b, i, SQL_STMT_SUM, db) : -1;
		xacts[i] = node_value(b, i, SQL_DB_XACTS, db);
	}
}

/* Runs side s's program argv (its CLI or bench_load) on url; its output in
 * out, 0 or -1 (noted under phase). */
static int side_run(bench *b, const char *phase, const char *url, char *const argv[], char *out,
                    size_t size)
{
	char *const env[] = {"DATABASE_URL", (char *)url, NULL};
	if (run_capture_env(argv, env, out, size) == 0)
		return 0;
	note_error(b, phase, "%s %s failed: %.300s", argv[0], argv[1], out);
	return -1;
}

/* A new database db on the bench's server, migrated by side s's CLI; its
 * URL, or NULL (noted under phase). */
static char *side_db(bench *b, const side *s, const char *phase, const char *db)
{
	char out[4096];
	char *url = db_create(b, db, 0);
	char *const argv[] = {(char *)s->cli, "migrate", b->citus_sh ? "--citus" : NULL, NULL};
	if (!url)
		note_error(b, phase, "cannot create the database %s", db);
	else if (side_run(b, phase, url, argv, out, sizeof out))
		free(url), url = NULL;
	return url;
}

/* Drains n runs of workflow with side s's worker at concurrency conc on a
 * new database db, migrated and filled by s's own CLI and bench_load (in
 * batches, as a bulk enqueue does) into fresh tables, then ANALYZEd if
 * analyze: what a new deployment sees. The worker starts after a
 * CHECKPOINT; the drain ends when the client sees every run finished. Its
 * transactions and statements are the database's while the worker ran,
 * less the bench's own progress queries. 0, or -1 (noted under phase). */
static int drain_fresh(bench *b, const side *s, const char *phase, const char *db,
                       const char *workflow, int n, int conc, int analyze, drain *d)
{
	char out[4096], count[16];
	*d = (drain){.stmts = -1, .server_ms = -1, .cpu_us = -1};
	snprintf(count, sizeof count, "%d", n);
	char *url = side_db(b, s, phase, db);
	char *const load[] = {(char *)s->load, "batch", (char *)workflow, count, "t-", NULL};
	const char *p[] = {db};
	PGconn *pg = NULL;
	int rc = -1;
	if (!url || side_run(b, phase, url, load, out, sizeof out))
		goto out;
	if (!(pg = connect_url(url)) || (analyze && exec_ok(pg, "ANALYZE")))
		goto out;
	if (!b->no_checkpoint)
		exec_ok(b->pg, "CHECKPOINT");
	PQfinish(pg);
	pg = NULL;
	if (b->have_statements)
		PQclear(q(b, SQL_STMT_RESET, 1, p));
	for (int i = 0; i < b->nnodes && b->have_statements; i++)
		node_value(b, i, SQL_STMT_RESET, db);
	double x0 = db_xacts_settled(b, db), ns0[4] = {0}, nx0[4] = {0}, nsess[4] = {0};
	nodes_count(b, db, ns0, nx0, NULL, nsess);
	worker w;
	long polls = 0;
	char name[64];
	snprintf(name, sizeof name, "%s-%s-%s", phase, s->name, workflow);
	int64_t t0 = now_ms();
	worker_start_of(b, s, &w, name, url, conc, b->drain_env_name, b->drain_env_value);
	int64_t t1 = worker_ready(&w, 60000, 5);
	if (t1 < 0)
		note_error(b, phase, "the worker did not become ready (log in %s)", b->log_dir);
	else if ((pg = connect_url(url)) &&
	         wait_finished(b, phase, pg, &polls, workflow, "t-%", n, &w, 1, 10) == 0)
		rc = 0;
	int64_t t2 = now_ms();
	double cpu = rc ? -1 : cpu_ms_of(w.pid);
	PQfinish(pg);
	pg = NULL;
	workers_stop(&w, 1);
	if (rc)
		goto out;
	d->cpu_us = cpu < 0 ? -1 : cpu * 1000 / n;
	d->start_rps = n / ((double)(t2 - t0) / 1000);
	d->ready_rps = n / ((double)(t2 - t1) / 1000);
	d->xacts = (db_xacts_settled(b, db) - x0 - (double)polls) / n;
	double ns[4] = {0}, nx[4] = {0};
	nodes_count(b, db, ns, nx, nsess, NULL);
	for (int i = 0; i < b->nnodes; i++) {
		d->node_stmts[i] = ns[i] < 0 ? -1 : (ns[i] - ns0[i]) / n;
		d->node_xacts[i] = (nx[i] - nx0[i]) / n;
	}
	PGresult *r = b->have_statements ? q(b, SQL_STMT_SUM, 1, p) : NULL;
	if (r) {
		d->stmts = (cell(r, 0) - (double)polls) / n;
		d->server_ms = cell(r, 1) / n;
	}
	PQclear(r);
	r = b->have_statements ? q(b, SQL_STMT_TOP, 1, p) : NULL;
	for (int i = 0; r && i < PQntuples(r); i++) {
		cJSON *row = cJSON_CreateObject();
		cJSON_AddNumberToObject(row, "per_run", strtod(PQgetvalue(r, i, 0), NULL) / n);
		cJSON_AddNumberToObject(row, "ms", strtod(PQgetvalue(r, i, 1), NULL));
		cJSON_AddStringToObject(row, "query", PQgetvalue(r, i, 2));
		if (!d->top)
			d->top = cJSON_CreateArray();
		cJSON_AddItemToArray(d->top, row);
	}
	PQclear(r);
out:
	PQfinish(pg);
	free(url);
	db_drop(b, db);
	return rc;
}

/* The per-run cost of a drain, as measures under key_xacts_per_run etc.,
 * beside floor's (the baseline's) when floor is not NULL. */
static void measure_cost(bench *b, const char *key, const char *what, const drain *d,
                         const drain *floor, const char *floor_is)
{
	char k[96], label[96];
	snprintf(k, sizeof k, "%s_xacts_per_run", key);
	snprintf(label, sizeof label, "%s: transactions/run", what);
	measure(b, k, label, "xacts", d->xacts, floor ? floor->xacts : 0, floor_is, NONE, 0);
	for (int i = 0; i < b->nnodes; i++) {
		snprintf(k, sizeof k, "%s_node%d_xacts_per_run", key, i + 1);
		snprintf(label, sizeof label, "%s: transactions/run, node w%d", what, i + 1);
		measure(b, k, label, "xacts", d->node_xacts[i], 0, "", NONE, 0);
		if (d->node_stmts[i] < 0)
			continue;
		snprintf(k, sizeof k, "%s_node%d_statements_per_run", key, i + 1);
		snprintf(label, sizeof label, "%s: statements/run, node w%d", what, i + 1);
		measure(b, k, label, "stmts", d->node_stmts[i], 0, "", NONE, 0);
	}
	if (d->stmts < 0)
		return;
	snprintf(k, sizeof k, "%s_statements_per_run", key);
	snprintf(label, sizeof label, "%s: statements/run", what);
	measure(b, k, label, "stmts", d->stmts, floor && floor->stmts >= 0 ? floor->stmts : 0,
	        floor_is, NONE, 0);
	snprintf(k, sizeof k, "%s_server_ms_per_run", key);
	snprintf(label, sizeof label, "%s: server ms/run", what);
	measure(b, k, label, "ms", d->server_ms,
	        floor && floor->server_ms >= 0 ? floor->server_ms : 0, floor_is, NONE, 0);
}

/* A drain of the bench's own build, its rate from /readyz (what the goals
 * were set on) beside pgbench, and its per-run cost. */
static void phase_drain(bench *b, const char *workflow, int n, const char *name, const char *what,
                        double target)
{
	char key[64], label[64];
	int conc = b->drain_concurrency;
	snprintf(key, sizeof key, conc == DRAIN_CONCURRENCY ? "%s" : "%s_c%d", name, conc);
	snprintf(label, sizeof label, "%s runs/s, 1 worker x%d", what, conc);
	drain d;
	if (n <= 0 || drain_fresh(b, &b->cur, key, "bench_drain", workflow, n, conc, 0, &d))
		return;
	measure(b, key, label, "runs/s", d.ready_rps, b->pgbench_tps, "pgbench TPS",
	        conc == DRAIN_CONCURRENCY ? RATIO_GE : NONE, target);
	if (strcmp(workflow, "bench3") == 0)
		b->drain3_rps = d.ready_rps;
	snprintf(label, sizeof label, "%s drain", what);
	measure_cost(b, workflow, label, &d, NULL, "");
	if (d.top)
		cJSON_AddItemToObject(b->extra, key, d.top);
}

static int cmp_drain_start(const void *x, const void *y)
{
	double a = ((const drain *)x)->start_rps, c = ((const drain *)y)->start_rps;
	return (a > c) - (a < c);
}

/* The round with the median rate of the rounds in d (sorted by it). */
static drain *drain_median(drain *d, int n)
{
	qsort(d, (size_t)n, sizeof *d, cmp_drain_start);
	return &d[n / 2];
}

static void drains_free(drain *d, int n)
{
	for (int i = 0; i < n; i++)
		cJSON_Delete(d[i].top);
}

/* The rounds of one workload, the two builds alternating (current first in
 * odd rounds): each drains on a fresh database. The medians go in as
 * measures, the current build's beside the baseline's as its floor. */
static void baseline_drain(bench *b, const char *workflow, int n, const char *key, const char *what)
{
	enum { MAX_ROUNDS = 15 };
	drain cur[MAX_ROUNDS], base[MAX_ROUNDS];
	int rounds = b->ab_rounds < MAX_ROUNDS ? b->ab_rounds : MAX_ROUNDS, done = 0;
	cJSON *each = cJSON_AddArrayToObject(b->extra, key);
	for (; done < rounds; done++) {
		const side *order[2] = {&b->cur, &b->base};
		drain *into[2] = {&cur[done], &base[done]};
		int first = done % 2; /* 0: current first */
		if (drain_fresh(b, order[first], key, "bench_ab", workflow, n, DRAIN_CONCURRENCY, 0,
		                into[first]) ||
		    drain_fresh(b, order[!first], key, "bench_ab", workflow, n, DRAIN_CONCURRENCY,
		                0, into[!first])) {
			cJSON_Delete(into[first]->top);
			break;
		}
		cJSON *r = cJSON_CreateObject();
		cJSON_AddNumberToObject(r, "current_runs_per_s", cur[done].start_rps);
		cJSON_AddNumberToObject(r, "baseline_runs_per_s", base[done].start_rps);
		cJSON_AddNumberToObject(r, "current_ready_runs_per_s", cur[done].ready_rps);
		cJSON_AddNumberToObject(r, "baseline_ready_runs_per_s", base[done].ready_rps);
		cJSON_AddNumberToObject(r, "current_worker_cpu_us_per_run", cur[done].cpu_us);
		cJSON_AddNumberToObject(r, "baseline_worker_cpu_us_per_run", base[done].cpu_us);
		cJSON_AddItemToArray(each, r);
		fprintf(stderr,
		        "bench: %s round %d: current %.0f, %s %.0f runs/s; worker CPU %.0f, %.0f "
		        "us/run\n",
		        key, done + 1, cur[done].start_rps, b->base.name, base[done].start_rps,
		        cur[done].cpu_us, base[done].cpu_us);
	}
	if (done == rounds) {
		char label[96];
		drain *c = drain_median(cur, rounds), *f = drain_median(base, rounds);
		snprintf(label, sizeof label, "%s runs/s vs %s (median of %d)", what, b->base.name,
		         rounds);
		measure(b, key, label, "runs/s", c->start_rps, f->start_rps, b->base.name, RATIO_GE,
		        0.9);
		measure_cost(b, key, what, c, f, b->base.name);
		char k[96];
		snprintf(k, sizeof k, "%s_top_current", key);
		if (c->top)
			cJSON_AddItemToObject(b->extra, k, cJSON_Duplicate(c->top, 1));
		snprintf(k, sizeof k, "%s_top_baseline", key);
		if (f->top)
			cJSON_AddItemToObject(b->extra, k, cJSON_Duplicate(f->top, 1));
	}
	drains_free(cur, done);
	drains_free(base, done);
}

/* One-by-one enqueue from 8 clients into a fresh database, no worker:
 * runs/s, or -1 (noted under key). */
static double x8_fresh(bench *b, const side *s, const char *key, int n)
{
	char out[4096], count[16];
	snprintf(count, sizeof count, "%d", n);
	char *url = side_db(b, s, key, "bench_ab");
	char *const load[] = {(char *)s->load, "one", "noop", count, "x-", "8", NULL};
	double rps = -1;
	if (url && !b->no_checkpoint)
		exec_ok(b->pg, "CHECKPOINT");
	if (url && side_run(b, key, url, load, out, sizeof out) == 0)
		rps = strtod(out, NULL);
	free(url);
	db_drop(b, "bench_ab");
	return rps;
}

/* BENCH_BASELINE: the throughput figures of the bench's own build against
 * an older build's, alternating on this server, each as a ratio; a ratio
 * under 0.9 shows as a goal not met. */
static void phase_baseline(bench *b)
{
	if (!b->base.worker)
		return;
	baseline_drain(b, "noop", b->ab_noop_n, "baseline_noop", "noop drain");
	baseline_drain(b, "bench3", b->ab_3step_n, "baseline_bench3", "3-step drain");
	enum { MAX_ROUNDS = 15 };
	double cur[MAX_ROUNDS], base[MAX_ROUNDS];
	int rounds = b->ab_rounds < MAX_ROUNDS ? b->ab_rounds : MAX_ROUNDS;
	for (int i = 0; i < rounds; i++) {
		int first = i % 2;
		double *into[2] = {&cur[i], &base[i]};
		const side *order[2] = {&b->cur, &b->base};
		*into[first] = x8_fresh(b, order[first], "baseline_x8", b->ab_x8_n);
		*into[!first] = x8_fresh(b, order[!first], "baseline_x8", b->ab_x8_n);
		if (cur[i] < 0 || base[i] < 0)
			return;
	}
	char label[96];
	snprintf(label, sizeof label, "enqueue x8 runs/s vs %s (median of %d)", b->base.name,
	         rounds);
	measure(b, "baseline_x8", label, "runs/s", quantile(cur, rounds, 0.5),
	        quantile(base, rounds, 0.5), b->base.name, RATIO_GE, 0.9);
}

/* ------------------------------------------------------------- tracing */

/* An OTLP/HTTP sink: accepts connections and answers every request 200
 * with nothing, reading (and discarding) its body, on one thread per
 * connection. It counts requests and bytes, so the phase can tell that
 * spans went out. */
typedef struct sink {
	int fd, port;
	_Atomic long requests, bytes;
	pthread_t thread;
} sink;

typedef struct sink_conn {
	sink *s;
	int fd;
} sink_conn;

static void *sink_serve(void *arg)
{
	sink_conn *c = arg;
	char buf[65536];
	size_t have = 0;
	for (;;) {
		char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
		if (!end) {
			if (have == sizeof buf)
				break;
			ssize_t n = read(c->fd, buf + have, sizeof buf - have);
			if (n <= 0)
				break;
			have += (size_t)n;
			continue;
		}
		size_t head = (size_t)(end + 4 - buf);
		long len = 0;
		for (char *h = buf; h < end; h++)
			if (strncasecmp(h, "\ncontent-length:", 16) == 0)
				len = strtol(h + 16, NULL, 10);
		size_t upto = head + (size_t)len;
		while (have < upto && have < sizeof buf) {
			ssize_t n = read(c->fd, buf + have, sizeof buf - have);
			if (n <= 0)
				goto out;
			have += (size_t)n;
		}
		long left = (long)upto - (long)have; /* a body larger than buf */
		while (left > 0) {
			ssize_t n =
			    read(c->fd, buf, sizeof buf < (size_t)left ? sizeof buf : (size_t)left);
			if (n <= 0)
				goto out;
			left -= n;
		}
		c->s->requests++;
		c->s->bytes += len;
		static const char ok[] =
		    "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
		    "Content-Length: 0\r\n\r\n";
		if (write(c->fd, ok, sizeof ok - 1) < 0)
			break;
		size_t used = upto < have ? upto : have;
		memmove(buf, buf + used, have - used);
		have -= used;
	}
out:
	close(c->fd);
	free(c);
	return NULL;
}

static void *sink_accept(void *arg)
{
	sink *s = arg;
	for (;;) {
		int fd = accept(s->fd, NULL, NULL);
		if (fd < 0)
			return NULL; /* the listening socket was shut down */
		sink_conn *c = malloc(sizeof *c);
		pthread_t t;
		if (!c || (c->s = s, c->fd = fd, pthread_create(&t, NULL, sink_serve, c)) != 0) {
			close(fd);
			free(c);
			continue;
		}
		pthread_detach(t);
	}
}

static int sink_start(sink *s)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof sa;
	s->requests = s->bytes = 0;
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    listen(s->fd, 64) < 0 || getsockname(s->fd, (struct sockaddr *)&sa, &len) < 0 ||
	    pthread_create(&s->thread, NULL, sink_accept, s) != 0) {
		if (s->fd >= 0)
			close(s->fd);
		return -1;
	}
	s->port = ntohs(sa.sin_port);
	return 0;
}

static void sink_stop(sink *s)
{
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->thread, NULL);
	close(s->fd);
}

/* Tracing's cost: the 3-step drain of the bench's own build with its spans
 * exported (OTEL_EXPORTER_OTLP_ENDPOINT to the sink above, the exporter's
 * defaults otherwise) against without, alternating on this server
 * (BENCH_BASELINE_ROUNDS rounds of BENCH_BASELINE_3STEP runs); the
 * medians' ratio should be at least 0.9. */
static void phase_tracing(bench *b)
{
	enum { MAX_ROUNDS = 15 };
	drain on[MAX_ROUNDS], off[MAX_ROUNDS];
	int rounds = b->ab_rounds < MAX_ROUNDS ? b->ab_rounds : MAX_ROUNDS, done = 0;
	sink k;
	if (sink_start(&k) < 0) {
		note_error(b, "tracing", "cannot start the OTLP sink: %s", strerror(errno));
		return;
	}
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", k.port);
	cJSON *each = cJSON_AddArrayToObject(b->extra, "tracing");
	for (; done < rounds; done++) {
		int rc = 0;
		long req0 = k.requests;
		on[done] = off[done] = (drain){0};
		for (int i = 0; i < 2 && !rc; i++) {
			int traced = (i + done) % 2; /* off first in even rounds */
			b->drain_env_name = traced ? "OTEL_EXPORTER_OTLP_ENDPOINT" : NULL;
			b->drain_env_value = traced ? url : NULL;
			rc = drain_fresh(b, &b->cur, "tracing", "bench_ab", "bench3", b->ab_3step_n,
			                 DRAIN_CONCURRENCY, 0, traced ? &on[done] : &off[done]);
		}
		b->drain_env_name = b->drain_env_value = NULL;
		if (rc) {
			cJSON_Delete(on[done].top);
			cJSON_Delete(off[done].top);
			break;
		}
		cJSON *r = cJSON_CreateObject();
		cJSON_AddNumberToObject(r, "on_runs_per_s", on[done].start_rps);
		cJSON_AddNumberToObject(r, "off_runs_per_s", off[done].start_rps);
		cJSON_AddNumberToObject(r, "on_worker_cpu_us_per_run", on[done].cpu_us);
		cJSON_AddNumberToObject(r, "off_worker_cpu_us_per_run", off[done].cpu_us);
		cJSON_AddNumberToObject(r, "export_requests", (double)(k.requests - req0));
		cJSON_AddItemToArray(each, r);
		fprintf(
		    stderr,
		    "bench: tracing round %d: on %.0f, off %.0f runs/s; worker CPU on %.0f, off "
		    "%.0f us/run (%ld exports)\n",
		    done + 1, on[done].start_rps, off[done].start_rps, on[done].cpu_us,
		    off[done].cpu_us, k.requests - req0);
	}
	sink_stop(&k);
	cJSON_AddNumberToObject(b->extra, "tracing_export_bytes", (double)k.bytes);
	if (done == rounds) {
		char label[96];
		drain *c = drain_median(on, rounds), *f = drain_median(off, rounds);
		snprintf(label, sizeof label, "3-step drain runs/s, traced vs not (median of %d)",
		         rounds);
		measure(b, "tracing_bench3", label, "runs/s", c->start_rps, f->start_rps,
		        "untraced", RATIO_GE, 0.9);
		/* The worker's CPU per run, less at the mercy of what else the
		 * machine runs than the rate: the medians of the rounds. */
		double con[MAX_ROUNDS], coff[MAX_ROUNDS];
		int cpu_ok = 1;
		for (int i = 0; i < rounds; i++) {
			con[i] = on[i].cpu_us;
			coff[i] = off[i].cpu_us;
			cpu_ok &= con[i] > 0 && coff[i] > 0;
		}
		snprintf(label, sizeof label, "3-step drain worker CPU us/run, traced vs not");
		if (cpu_ok)
			measure(b, "tracing_bench3_cpu", label, "us", quantile(con, rounds, 0.5),
			        quantile(coff, rounds, 0.5), "untraced", RATIO_LE, 1.1);
		if (!k.requests)
			note_error(b, "tracing", "the traced drains exported nothing to the sink");
	}
	drains_free(on, done);
	drains_free(off, done);
}

/* The planner's luck: the bench's own build drains a bulk enqueue into
 * fresh tables with and without an ANALYZE just before the worker starts,
 * alternating; the medians should differ by at most 10%. */
static void phase_plan(bench *b)
{
	enum { MAX_ROUNDS = 15 };
	drain with[MAX_ROUNDS], without[MAX_ROUNDS];
	int rounds = b->ab_rounds < MAX_ROUNDS ? b->ab_rounds : MAX_ROUNDS, done = 0;
	cJSON *each = cJSON_AddArrayToObject(b->extra, "plan_noop");
	for (; done < rounds; done++) {
		drain *into[2] = {&without[done], &with[done]};
		int first = done % 2; /* 0: without first */
		if (drain_fresh(b, &b->cur, "plan_noop", "bench_plan", "noop", b->ab_noop_n,
		                DRAIN_CONCURRENCY, first == 1, into[first]) ||
		    drain_fresh(b, &b->cur, "plan_noop", "bench_plan", "noop", b->ab_noop_n,
		                DRAIN_CONCURRENCY, first == 0, into[!first])) {
			cJSON_Delete(into[first]->top);
			break;
		}
		cJSON *r = cJSON_CreateObject();
		cJSON_AddNumberToObject(r, "without_analyze_runs_per_s", without[done].start_rps);
		cJSON_AddNumberToObject(r, "with_analyze_runs_per_s", with[done].start_rps);
		cJSON_AddItemToArray(each, r);
		fprintf(stderr, "bench: plan round %d: without ANALYZE %.0f, with %.0f runs/s\n",
		        done + 1, without[done].start_rps, with[done].start_rps);
	}
	if (done == rounds) {
		drain *n = drain_median(without, rounds), *a = drain_median(with, rounds);
		measure(b, "plan_noop", "noop drain without ANALYZE / with", "runs/s", n->start_rps,
		        a->start_rps, "with ANALYZE", RATIO_GE, 0.9);
	}
	drains_free(with, done);
	drains_free(without, done);
}

/* ---------------------------------------------------------- fan-out */

/* The database's transactions so far, read after lag_ms (the backends
 * report theirs when idle). */
static double db_xacts(bench *b, int64_t lag_ms)
{
	sleep_ms(lag_ms);
	PGresult *r = qc(b->pg, &b->nq,
	                 "SELECT xact_commit + xact_rollback FROM pg_stat_database "
	                 "WHERE datname = current_database()",
	                 0, NULL);
	double x = r ? cell(r, 0) : -1;
	PQclear(r);
	return x;
}

static long rss_kb(pid_t pid);

/* A sample of the fan-out's worker: the runs it ended, its VmRSS. */
typedef struct rss_sample {
	double ended;
	long kb;
} rss_sample;

/* The VmRSS of the worker while the fan-out's children ran, from the
 * samples (n): at the first one after 10 % of them had ended, at the last
 * one before 90 % had (its children's memory, which must stay flat however
 * many there are), and the highest of all (the parent's replays too). */
static void fanout_rss(bench *b, const rss_sample *s, int ns, int n, double ended0)
{
	long at10 = 0, at90 = 0, peak = 0;
	cJSON *curve = cJSON_AddArrayToObject(b->extra, "fanout_rss_kb");
	for (int i = 0; i < ns; i++) {
		double done = s[i].ended - ended0;
		if (!at10 && done >= n / 10.0)
			at10 = s[i].kb;
		if (done < n * 0.9)
			at90 = s[i].kb;
		if (s[i].kb > peak)
			peak = s[i].kb;
		cJSON *p = cJSON_CreateObject();
		cJSON_AddNumberToObject(p, "ended", done);
		cJSON_AddNumberToObject(p, "rss_kb", (double)s[i].kb);
		cJSON_AddItemToArray(curve, p);
	}
	if (at10 <= 0 || at90 <= 0)
		return;
	measure(b, "fanout_rss_children_kb",
	        "fan-out: worker VmRSS at 90 % of children ended / at 10 %", "kB", (double)at90,
	        (double)at10, "VmRSS at 10 %", RATIO_LE, 1.2);
	measure(b, "fanout_rss_peak_kb", "fan-out: worker VmRSS, highest (parent's replays too)",
	        "kB", (double)peak, (double)at10, "VmRSS at 10 %", NONE, 0);
}

/*
 * One parent (the built-in fanout) that starts n children of square and
 * waits for them (half, then all): the time from its enqueue to its result
 * on the client's clock, as children/s beside the 3-step drain's runs/s of
 * the same run (measured here when the drain phase did not run); the
 * database's transactions per child (all of them: the worker's, and the
 * client's waits, a few a second); the journal entries the worker replayed
 * per child (cairn_replayed_entries_total: the parent replays its journal
 * each time it is woken, so once per child would make it O(n^2)); and the
 * worker's VmRSS, sampled every 200 ms, as the children run.
 */
static void phase_fanout(bench *b, int n)
{
	if (n <= 0)
		return;
	if (!b->drain3_rps)
		phase_drain(b, "bench3", b->flow3_n, "bench3_runs_per_s", "3-step", 0.75);
	if (reset(b))
		return;
	worker w;
	worker_start(b, &w, "fanout", b->db_url, 16, NULL, NULL);
	if (worker_ready(&w, 60000, 5) < 0) {
		note_error(b, "fanout", "the worker did not become ready (log in %s)", b->log_dir);
		workers_stop(&w, 1);
		return;
	}
	const char *replays[] = {"cairn_replayed_entries_total", NULL},
	           *ends[] = {"cairn_runs_completed_total", "cairn_runs_failed_total", NULL};
	double x0 = db_xacts(b, STATS_LAG_MS), r0 = worker_metrics(&w, replays);
	double ended0 = worker_metrics(&w, ends);
	char input[64];
	snprintf(input, sizeof input, "{\"n\": %d}", n);
	cairn_enqueue_opts o = {.input = input};
	cairn_enqueued e;
	int ns = 0, cap = 1024;
	rss_sample *samples = malloc((size_t)cap * sizeof *samples);
	int64_t t0 = now_ns(), give_up = now_ms() + 900000;
	int rc = cairn_enqueue(b->c, "fanout", &o, &e);
	/* cairn_run_wait's own wait is the pace of the samples. */
	while (!rc) {
		rc = cairn_run_wait(b->c, e.id, 200);
		if (rc != CAIRN_ETIMEOUT || now_ms() >= give_up || worker_dead(&w))
			break;
		rc = CAIRN_OK;
		if (samples && ns == cap) {
			rss_sample *g = realloc(samples, (size_t)(cap *= 2) * sizeof *g);
			if (!g)
				free(samples);
			samples = g;
		}
		if (samples)
			samples[ns++] = (rss_sample){worker_metrics(&w, ends), rss_kb(w.pid)};
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	double replayed = worker_metrics(&w, replays) - r0;
	cairn_run *r = NULL;
	if (!rc)
		rc = cairn_run_get(b->c, e.id, &r);
	if (rc || strcmp(r->status, "completed") != 0) {
		note_error(b, "fanout", "the fan-out did not complete: %s",
		           rc         ? cairn_client_errmsg(b->c)
		           : r->error ? r->error
		                      : r->status);
	} else {
		cairn_run_free(r);
		r = NULL;
		workers_stop(&w, 1); /* a backend reports its counters as it exits */
		double x1 = db_xacts(b, STATS_LAG_MS);
		measure(b, "fanout_seconds", "fan-out: 1 parent, its children waited for", "s",
		        secs, 0, "", NONE, 0);
		measure(b, "fanout_children_per_s", "fan-out: children/s", "children/s", n / secs,
		        b->drain3_rps, "3-step drain runs/s", RATIO_GE, 0.5);
		measure(b, "fanout_xacts_per_child", "fan-out: transactions/child", "xacts",
		        (x1 - x0) / n, 0, "", LE, 4);
		measure(b, "fanout_replayed_per_child", "fan-out: journal entries replayed/child",
		        "entries", replayed / n, 0, "", LE, 3);
		if (samples)
			fanout_rss(b, samples, ns, n, ended0);
	}
	free(samples);
	cairn_run_free(r);
	cairn_enqueued_clear(&e);
	workers_stop(&w, w.pid > 0);
}

/* ------------------------------------------------------ large workflows */

/* A counter of the worker's /metrics, or -1. */
static double worker_metric(worker *w, const char *name)
{
	body m;
	char key[128];
	snprintf(key, sizeof key, "\n%s ", name);
	if (!worker_port(w) || http_get(w->port, "/metrics", &m) != 200)
		return -1;
	const char *k = strstr(m.text, key);
	return k ? atof(k + strlen(key)) : -1;
}

/* The ms from the start of step k (of kind step, in seq order) to the start
 * of step k + 100, the last block's to the run's end: Unix ms as the worker
 * journaled them. */
static const char SQL_LONG_STARTS[] =
    "SELECT (extract(epoch FROM started_at) * 1000)::bigint FROM cairn.steps "
    "WHERE run_id = $1 AND kind = 'step' ORDER BY seq";
static const char SQL_LONG_END[] =
    "SELECT (extract(epoch FROM finished_at) * 1000)::bigint FROM cairn.runs WHERE id = $1";

#define LONG_BLOCK 100

/*
 * One run of BENCH_LONG_STEPS (10,000) journaled steps with a durable 2 ms
 * sleep after every 10th (bench_flows.so's long): its blocks of 100 steps
 * timed by its journal, from the start of a block's first step to that of
 * the next block's (the last one's to the run's end). The last block beside
 * the second (steps 101-200), as a ratio: a run that wakes 1,000 times costs
 * the same per step at its end as near its start when a wake does not
 * reload and walk its whole journal (goal <= 2x).
 */
static void phase_long(bench *b, int n)
{
	if (n < 3 * LONG_BLOCK || reset(b))
		return;
	worker w;
	worker_start(b, &w, "long", b->db_url, 16, NULL, NULL);
	if (worker_ready(&w, 60000, 5) < 0) {
		note_error(b, "long", "the worker did not become ready (log in %s)", b->log_dir);
		workers_stop(&w, 1);
		return;
	}
	char input[96];
	snprintf(input, sizeof input, "{\"steps\": %d, \"every\": 10, \"sleep_ms\": 2}", n);
	cairn_enqueue_opts o = {.input = input};
	cairn_enqueued e;
	int64_t t0 = now_ns();
	int rc = cairn_enqueue(b->c, "long", &o, &e);
	if (!rc)
		rc = cairn_run_wait(b->c, e.id, 1800000);
	double secs = (double)(now_ns() - t0) / 1e9;
	cairn_run *r = NULL;
	if (!rc)
		rc = cairn_run_get(b->c, e.id, &r);
	if (rc || strcmp(r->status, "completed") != 0) {
		note_error(b, "long", "the long run did not complete: %s",
		           rc         ? cairn_client_errmsg(b->c)
		           : r->error ? r->error
		                      : r->status);
	} else {
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, e.id);
		const char *p[] = {id};
		PGresult *st = q(b, SQL_LONG_STARTS, 1, p), *end = q(b, SQL_LONG_END, 1, p);
		int blocks = st ? PQntuples(st) / LONG_BLOCK : 0;
		cJSON *ms = cJSON_CreateArray();
		double early = 0, last = 0;
		for (int k = 0; k < blocks && end && PQntuples(end) == 1; k++) {
			double a = atof(PQgetvalue(st, k * LONG_BLOCK, 0));
			double z = k + 1 < blocks ? atof(PQgetvalue(st, (k + 1) * LONG_BLOCK, 0))
			                          : atof(PQgetvalue(end, 0, 0));
			cJSON_AddItemToArray(ms, cJSON_CreateNumber(z - a));
			if (k == 1)
				early = z - a;
			last = z - a;
		}
		cJSON_AddItemToObject(b->extra, "long_blocks_ms", ms);
		cJSON_AddNumberToObject(b->extra, "long_journal_cache_hits",
		                        worker_metric(&w, "cairn_journal_cache_hits_total"));
		cJSON_AddNumberToObject(b->extra, "long_journal_loads",
		                        worker_metric(&w, "cairn_journal_loads_total"));
		PQclear(st);
		PQclear(end);
		measure(b, "long_seconds", "long journal: the run, enqueue to result", "s", secs, 0,
		        "", NONE, 0);
		measure(b, "long_block_early_ms", "long journal: steps 101-200", "ms", early, 0, "",
		        NONE, 0);
		measure(b, "long_block_last_ms", "long journal: its last 100 steps", "ms", last,
		        early, "steps 101-200", RATIO_LE, 2);
	}
	cairn_run_free(r);
	cairn_enqueued_clear(&e);
	workers_stop(&w, 1);
}

/* The rows of cairn.runs and cairn.steps. */
static void chain_rows(bench *b, double *runs, double *steps)
{
	PGresult *r = q(b,
	                "SELECT (SELECT count(*) FROM cairn.runs), (SELECT count(*) FROM "
	                "cairn.steps)",
	                0, NULL);
	*runs = r ? cell(r, 0) : -1;
	*steps = r && PQntuples(r) == 1 ? atof(PQgetvalue(r, 0, 1)) : -1;
	PQclear(r);
}

/*
 * A workflow that lives on: BENCH_CHAIN (10,000) runs of bench_flows.so's
 * chain, each a step and a durable 2 ms sleep, then continuing as new, on
 * a worker whose janitor removes the runs that ended more than
 * CAIRN_RETENTION (2 s here) ago. The rows of cairn.runs and cairn.steps
 * are read every second: the most at once, and where they are when the
 * chain ends, beside the links it made (a footprint that grows with the
 * chain would be as many).
 */
static void phase_chain(bench *b, int n)
{
	if (n <= 0 || reset(b))
		return;
	worker w;
	worker_start(b, &w, "chain", b->db_url, 16, "CAIRN_RETENTION", "2s");
	if (worker_ready(&w, 60000, 5) < 0) {
		note_error(b, "chain", "the worker did not become ready (log in %s)", b->log_dir);
		workers_stop(&w, 1);
		return;
	}
	char input[96];
	snprintf(input, sizeof input, "{\"n\": 0, \"until\": %d, \"sleep_ms\": 2}", n);
	cairn_enqueue_opts o = {.input = input};
	cairn_enqueued e;
	int64_t t0 = now_ns();
	int rc = cairn_enqueue(b->c, "chain", &o, &e);
	double most_runs = 0, most_steps = 0, runs, steps;
	cJSON *curve = cJSON_CreateArray();
	while (!rc && (rc = cairn_run_wait(b->c, e.id, 1000)) == CAIRN_ETIMEOUT) {
		chain_rows(b, &runs, &steps);
		most_runs = runs > most_runs ? runs : most_runs;
		most_steps = steps > most_steps ? steps : most_steps;
		cJSON_AddItemToArray(curve, cJSON_CreateNumber(runs));
		if (worker_dead(&w) || (now_ns() - t0) / 1000000000 > 1800)
			break;
		rc = 0;
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	int64_t last = 0;
	if (!rc)
		rc = cairn_run_last(b->c, e.id, &last);
	chain_rows(b, &runs, &steps);
	double links = worker_metric(&w, "cairn_runs_continued_total");
	if (rc || links < n) {
		note_error(b, "chain", "the chain did not end: %s (%.0f links)",
		           rc ? cairn_client_errmsg(b->c) : "", links);
		cJSON_Delete(curve);
	} else {
		cJSON_AddItemToObject(b->extra, "chain_runs_rows", curve);
		measure(b, "chain_links_per_s", "chain: runs continued as new/s", "runs/s",
		        links / secs, 0, "", NONE, 0);
		measure(b, "chain_runs_rows_most", "chain: most rows of cairn.runs at once", "rows",
		        most_runs, links, "runs the chain made", RATIO_LE, 0.1);
		measure(b, "chain_steps_rows_most", "chain: most rows of cairn.steps at once",
		        "rows", most_steps, 0, "", NONE, 0);
		measure(b, "chain_runs_rows_end", "chain: rows of cairn.runs at its end", "rows",
		        runs, 0, "", NONE, 0);
	}
	cairn_enqueued_clear(&e);
	workers_stop(&w, 1);
}

/* ------------------------------------------------------- flow control */

/* n noop runs keyed prefix-i, concurrency key ckprefix-(i % keys) (or
 * ckprefix alone when keys is 1), in batches of 5,000; 0 or -1. */
static int enqueue_keyed(cairn_client *c, const char *prefix, const char *ckprefix, int keys, int n)
{
	enum { BATCH = 5000 };
	cairn_enqueue_opts *o = calloc(BATCH, sizeof *o);
	cairn_enqueued *out = calloc(BATCH, sizeof *out);
	char(*k)[32] = calloc(BATCH, sizeof *k), (*ck)[32] = calloc(BATCH, sizeof *ck);
	int rc = o && out && k && ck ? 0 : -1;
	for (int i = 0; rc == 0 && i < n; i += BATCH) {
		int m = n - i < BATCH ? n - i : BATCH;
		for (int j = 0; j < m; j++) {
			snprintf(k[j], sizeof k[j], "%s%d", prefix, i + j);
			if (keys > 1)
				snprintf(ck[j], sizeof ck[j], "%s%d", ckprefix, (i + j) % keys);
			else
				snprintf(ck[j], sizeof ck[j], "%s", ckprefix);
			o[j] = (cairn_enqueue_opts){
			    .key = k[j], .input = "{}", .concurrency_key = ck[j]};
		}
		if (cairn_enqueue_batch(c, "noop", (size_t)m, o, out) != CAIRN_OK)
			rc = -1;
	}
	free(o);
	free(out);
	free(k);
	free(ck);
	return rc;
}

/* Flow control, one worker at concurrency 16 with `noop` limited to one
 * run per concurrency key at a time:
 *   (a) BENCH_FLOW_RUNS runs over BENCH_FLOW_KEYS keys, drained: runs/s,
 *       beside pgbench (every run is held at enqueue but the first of its
 *       key, and let go when the one before it ends);
 *   (b) a backlog of BENCH_FLOW_BACKLOG runs of one key, being drained:
 *       a run of another key, from just before its enqueue to its result
 *       on the client's clock (five times, the median). */
static void phase_flow(bench *b)
{
	if (b->flow_n <= 0 || reset(b))
		return;
	cairn_limit lim = {.workflow = "noop", .key_concurrency = 1};
	worker w;
	if (cairn_limit_set(b->c, &lim) != CAIRN_OK ||
	    enqueue_keyed(b->c, "f-", "k", b->flow_keys, b->flow_n)) {
		note_error(b, "flow", "cannot set up: %s", cairn_client_errmsg(b->c));
		return;
	}
	worker_start(b, &w, "flow", b->db_url, 16, NULL, NULL);
	int64_t t0 = worker_ready(&w, 60000, 5);
	char label[96];
	snprintf(label, sizeof label, "flow: runs/s, %d keys at key concurrency 1", b->flow_keys);
	if (t0 < 0)
		note_error(b, "flow", "the worker did not become ready (log in %s)", b->log_dir);
	else if (wait_finished(b, "flow", b->pg, &b->nq, "noop", "f-%", b->flow_n, &w, 1, 10) == 0)
		measure(b, "flow_keyed_runs_per_s", label, "runs/s",
		        b->flow_n / ((double)(now_ms() - t0) / 1000), b->pgbench_tps, "pgbench TPS",
		        NONE, 0);
	if (t0 >= 0 && enqueue_keyed(b->c, "big-", "big", 1, b->flow_backlog) == 0) {
		double ms[5];
		int got = 0;
		sleep_ms(500); /* the backlog is draining */
		for (int i = 0; i < 5; i++) {
			char key[32];
			snprintf(key, sizeof key, "small-%d", i);
			cairn_enqueue_opts o = {.key = key, .concurrency_key = "small"};
			cairn_enqueued e;
			int64_t s0 = now_ns();
			int rc = cairn_enqueue(b->c, "noop", &o, &e);
			if (!rc)
				rc = cairn_run_wait(b->c, e.id, 30000);
			if (!rc)
				ms[got++] = (double)(now_ns() - s0) / 1e6;
			cairn_enqueued_clear(&e);
		}
		PGresult *r = qc(b->pg, &b->nq,
		                 "SELECT count(*) FROM cairn.runs WHERE key LIKE 'big-%' "
		                 "AND finished_at IS NULL",
		                 0, NULL);
		double left = r ? cell(r, 0) : -1;
		PQclear(r);
		if (got == 5) {
			qsort(ms, 5, sizeof ms[0], cmp_double);
			snprintf(label, sizeof label,
			         "flow: another key's run behind %d queued, enqueue to result p50",
			         b->flow_backlog);
			measure(b, "flow_small_key_ms", label, "ms", ms[2], 0, "", NONE, 0);
			cJSON_AddNumberToObject(b->extra, "flow_backlog_left", left);
		} else {
			note_error(b, "flow", "a run behind the backlog did not finish: %s",
			           cairn_client_errmsg(b->c));
		}
	} else if (t0 >= 0) {
		note_error(b, "flow", "cannot enqueue the backlog: %s", cairn_client_errmsg(b->c));
	}
	workers_stop(&w, 1);
}

/* ------------------------------------------------------------- 7: fleets */

typedef struct fleet {
	bench *b;
	char name[32];
	char *url;
	PGconn *pg;    /* on the fleet's database */
	long nq;       /* statements run on pg */
	PGconn *stats; /* on the database postgres */
	worker w[MAX_FLEET];
	int n;
} fleet;

/* Milliseconds from since until ownership settles: every shard owned by a
 * live runner, every live worker's /readyz 200, and shard_leases unchanged
 * for 1 s (the time is when it last changed or the last worker became
 * ready, whichever is later); -1 after 180 s. */
static int64_t fleet_settle(fleet *f, int64_t since)
{
	char last[64] = "";
	int64_t changed = now_ms(), ready_at = -1;
	while (now_ms() - since < 180000) {
		PGresult *r = qc(f->pg, &f->nq, SQL_SETTLED, 0, NULL);
		if (!r)
			return -1;
		long unowned = (long)cell(r, 0);
		char fp[64];
		snprintf(fp, sizeof fp, "%s", PQgetvalue(r, 0, 1));
		PQclear(r);
		int64_t t = now_ms();
		if (unowned || strcmp(fp, last) != 0) {
			snprintf(last, sizeof last, "%s", fp);
			changed = t;
		} else if (ready_at < 0) {
			int all = 1;
			for (int i = 0; i < f->n; i++) {
				if (f->w[i].pid > 0 && !f->w[i].ready)
					f->w[i].ready = worker_port(&f->w[i]) &&
					                http_status(f->w[i].port, "/readyz") == 200;
				all &= f->w[i].pid <= 0 || f->w[i].ready;
			}
			if (all)
				ready_at = now_ms();
		}
		if (!unowned && ready_at >= 0 && t - changed >= 1000)
			return (ready_at > changed ? ready_at : changed) - since;
		sleep_ms(50);
	}
	return -1;
}

/* xact_commit + xact_rollback of the fleet's database, read through the
 * connection to postgres after lag_ms (STATS_LAG_MS after a burst). */
static double fleet_xacts(fleet *f, int64_t lag_ms)
{
	sleep_ms(lag_ms);
	const char *params[] = {f->name};
	PGresult *r = qc(f->stats, NULL, SQL_XACTS, 1, params);
	double x = r ? cell(r, 0) : -1;
	PQclear(r);
	return x;
}

/* Makes the fleet connection's own statements count now, not when PostgreSQL
 * gets round to it: it is about to go idle. */
static void fleet_flush(fleet *f)
{
	PQclear(qc(f->pg, &f->nq, "SELECT pg_stat_force_next_flush()", 0, NULL));
}

static void fleet_measure(fleet *f, const char *what, const char *label, const char *unit,
                          double value, double floor, const char *floor_label, goal g,
                          double target)
{
	char key[64], text[96];
	snprintf(key, sizeof key, "fleet%d_%s", f->n, what);
	snprintf(text, sizeof text, "%d worker%s: %s", f->n, f->n == 1 ? "" : "s", label);
	measure(f->b, key, text, unit, value, floor, floor_label, g, target);
}

/* (b) after (c): the idle rate over 10 s from x0 at t0; stores x1 and t1. */
static double fleet_idle(fleet *f, double x0, int64_t t0, double *x1, int64_t *t1)
{
	/* The idle window itself, not a wait for a condition; idle, the flush
	 * lag is the same at both ends. */
	*x1 = fleet_xacts(f, 10000);
	*t1 = now_ms();
	return (*x1 - x0) / ((double)(*t1 - t0) / 1000);
}

/* (c): transactions per run of runs noop runs enqueued one by one, from x0
 * read at t0 (the end of the idle window), less the idle transactions: the
 * mean of the idle rates before (idle_before) and after the runs. */
/* Transactions per run are measured at one enqueue every FLEET_GAP_NS, the
 * same load for every size of fleet: a burst would let one worker claim and
 * commit many runs at a time, which a fleet whose workers each get a few
 * cannot, and the ratio would measure the burst instead of the fleet. */
#define FLEET_GAP_NS 10000000

static void fleet_per_run(fleet *f, double idle_before, double x0, int64_t t0)
{
	bench *b = f->b;
	int runs = b->fleet_runs;
	cairn_client *c = NULL;
	long nq0 = f->nq;
	if (cairn_client_open(f->url, &c) != CAIRN_OK) {
		note_error(b, f->name, "%s", cairn_client_errmsg(c));
		cairn_client_free(c);
		return;
	}
	int64_t start = now_ns();
	for (int i = 0; i < runs; i++) {
		sleep_until_ns(start + (int64_t)i * FLEET_GAP_NS);
		if (enqueue_one(c, "noop", "f-", i, "{}")) {
			note_error(b, f->name, "%s", cairn_client_errmsg(c));
			cairn_client_free(c);
			return;
		}
	}
	cairn_client_free(c); /* a backend flushes its stats as it exits */
	if (wait_finished(b, f->name, f->pg, &f->nq, "noop", "f-%", runs, f->w, f->n, 10))
		return;
	fleet_flush(f);
	double x1 = fleet_xacts(f, STATS_LAG_MS), x2;
	int64_t t1 = now_ms(), t2;
	double mine = (double)(f->nq - nq0);
	double idle_after = fleet_idle(f, x1, t1, &x2, &t2);
	double idle = (idle_before + idle_after) / 2;
	fleet_measure(f, "idle_after_xacts_per_s", "idle transactions/s per worker, after",
	              "xacts/s", idle_after / f->n, 0, "", NONE, 0);
	double per_run = (x1 - x0 - mine - idle * (double)(t1 - t0) / 1000) / runs;
	if (!b->fleet_xact_base)
		b->fleet_xact_base = per_run - 2;
	fleet_measure(f, "xacts_per_run", "transactions/run (with the client's)", "xacts", per_run,
	              0, "", NONE, 0);
	fleet_measure(f, "worker_xacts_per_run", "transactions/run (workers only)", "xacts",
	              per_run - 2, b->fleet_xact_base, "1 worker", RATIO_LE, 1.2);
}

static void phase_fleet(bench *b, int n)
{
	fleet f = {.b = b, .n = n};
	snprintf(f.name, sizeof f.name, "bench_fleet%d", n);
	if (n > MAX_FLEET) {
		note_error(b, f.name, "at most %d workers", MAX_FLEET);
		return;
	}
	char *stats_url = url_with_db(b->db_url, "postgres");
	f.url = db_create(b, f.name, 1);
	f.stats = stats_url ? connect_url(stats_url) : NULL;
	free(stats_url);
	f.pg = f.url ? connect_url(f.url) : NULL;
	if (!f.pg || !f.stats) {
		note_error(b, f.name, "cannot create, migrate or connect to the database");
		goto out;
	}
	fprintf(stderr, "bench: %s: starting %d workers\n", f.name, n);
	int64_t start = now_ms();
	for (int i = 0; i < n; i++) {
		char name[48];
		snprintf(name, sizeof name, "fleet%d-%d", n, i);
		worker_start(b, &f.w[i], name, f.url, 1, NULL, NULL);
	}
	int64_t settle = fleet_settle(&f, start);
	if (settle < 0) {
		note_error(b, f.name, "ownership did not settle within 180 s (logs in %s)",
		           b->log_dir);
		goto out;
	}
	fleet_measure(&f, "settle_s", "seconds until ownership settles", "s", settle / 1000.0, 0,
	              "", NONE, 0);

	fleet_flush(&f);
	double x0 = fleet_xacts(&f, STATS_LAG_MS);
	int64_t t0 = now_ms(), t1;
	double x1, idle_rate = fleet_idle(&f, x0, t0, &x1, &t1);
	fleet_measure(&f, "idle_xacts_per_s", "idle transactions/s per worker", "xacts/s",
	              idle_rate / n, 0, "", LE, 1);

	fleet_per_run(&f, idle_rate, x1, t1);

	if (n >= 5) {
		int64_t killed = now_ms();
		for (int i = 0; i < n / 5; i++) {
			kill(f.w[i].pid, SIGKILL);
			waitpid(f.w[i].pid, NULL, 0);
			f.w[i].pid = -1;
		}
		for (int i = n / 5; i < n; i++)
			f.w[i].ready = 0;
		int64_t again = fleet_settle(&f, killed);
		if (again < 0)
			note_error(b, f.name,
			           "ownership did not settle again within 180 s after kill -9");
		else
			fleet_measure(&f, "resettle_s", "seconds to settle after kill -9 of 1/5",
			              "s", again / 1000.0, 0, "", NONE, 0);
	}
out:
	workers_stop(f.w, n);
	PQfinish(f.pg);
	PQfinish(f.stats);
	free(f.url);
	db_drop(b, f.name);
}

/* --------------------------------------------------------- 8: memory */

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* Side s's worker (for a language SDK, its language process) takes n noop
 * runs, fed in batches and deleted as they finish, its VmRSS sampled every
 * `every` runs into curve (and *first_kb, *last_kb: after the first batch,
 * at the end). The time it took in ms, or -1 (noted). */
static int64_t memory_side(bench *b, const side *s, int n, int every, cJSON *curve, long *first_kb,
                           long *last_kb)
{
	const int batch = 10000;
	int enqueued = 0;
	long deleted = 0, next_sample = 0;
	int64_t took = -1;
	char workflow[64], like[64], name[64];
	snprintf(workflow, sizeof workflow, "%snoop", s->prefix ? s->prefix : "");
	snprintf(like, sizeof like, "mem-%s-", s->name);
	snprintf(name, sizeof name, "memory-%s", s->name);
	*first_kb = *last_kb = 0;
	if (reset(b))
		return -1;
	worker w;
	worker_start_of(b, s, &w, name, b->db_url, 16, NULL, NULL);
	if (worker_ready(&w, 60000, 20) < 0) {
		note_error(b, "memory", "the %s worker did not become ready (log in %s)", s->name,
		           b->log_dir);
		goto out;
	}
	int64_t t0 = now_ms(), last_change = t0;
	long last_done = -1;
	printf("\n%s worker VmRSS (kB) by runs finished:\n", s->name);
	for (;;) {
		char pattern[80];
		snprintf(pattern, sizeof pattern, "%s%%", like);
		const char *params[] = {workflow, pattern};
		PGresult *r = q(b, SQL_PROGRESS, 2, params);
		if (!r)
			goto out;
		long done = deleted + (long)cell(r, 0), finished_rows = (long)cell(r, 0);
		PQclear(r);
		while (done >= next_sample && next_sample <= n) {
			long kb = rss_kb(w.pid);
			cJSON *p = cJSON_CreateObject();
			cJSON_AddNumberToObject(p, "runs", (double)next_sample);
			cJSON_AddNumberToObject(p, "rss_kb", (double)kb);
			cJSON_AddItemToArray(curve, p);
			printf("  %8ld runs  %8ld kB\n", next_sample, kb);
			fflush(stdout);
			if (next_sample >= batch && !*first_kb)
				*first_kb = kb;
			*last_kb = kb;
			next_sample += every;
		}
		if (done >= n)
			break;
		if (done != last_done)
			last_done = done, last_change = now_ms();
		if (worker_dead(&w) || now_ms() - last_change > 30000) {
			note_error(b, "memory", "%s: stopped after %ld of %d runs (log in %s)",
			           s->name, done, n, b->log_dir);
			goto out;
		}
		if (finished_rows >= batch) {
			r = q(b, "DELETE FROM cairn.runs WHERE finished_at IS NOT NULL", 0, NULL);
			deleted += r ? strtol(PQcmdTuples(r), NULL, 10) : 0;
			PQclear(r);
		}
		if (enqueued < n && enqueued - done < 2 * batch) {
			int m = n - enqueued < batch ? n - enqueued : batch;
			if (enqueue_batched(b->c, workflow, enqueued, m, batch, like)) {
				note_error(b, "memory", "%s", cairn_client_errmsg(b->c));
				goto out;
			}
			enqueued += m;
		} else {
			sleep_ms(50);
		}
	}
	took = now_ms() - t0;
out:
	workers_stop(&w, w.pid > 0);
	return took;
}

static void phase_memory(bench *b)
{
	long first, last;
	cJSON *curve = cJSON_AddArrayToObject(b->extra, "memory_rss_kb");
	int64_t took = memory_side(b, &b->cur, b->memory_runs, 50000, curve, &first, &last);
	if (took > 0)
		measure(b, "memory_runs_per_s", "memory phase: noop runs/s (with deletes)",
		        "runs/s", b->memory_runs / ((double)took / 1000), b->pgbench_tps,
		        "pgbench TPS", NONE, 0);
}

/* ------------------------------------------------- 9: language SDKs */

/* The languages whose SDK is in the tree and whose interpreter runs. */
static int sdk_sides(bench *b, side *out)
{
	static const struct {
		const char *name, *interp, *script, *prefix;
	} langs[] = {{"python", "python3", "sdk/python/bench/flows.py", "py."},
	             {"typescript", "node", "sdk/typescript/bench/flows.mjs", "ts."}};
	int n = 0;
	for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++) {
		char *const argv[] = {(char *)langs[i].interp, "--version", NULL};
		char out_text[256];
		if (access(langs[i].script, R_OK) != 0 ||
		    run_capture(argv, out_text, sizeof out_text) != 0) {
			note_error(b, "sdk", "%s: cannot run %s %s", langs[i].name, langs[i].interp,
			           langs[i].script);
			continue;
		}
		out[n] = b->cur;
		out[n].name = langs[i].name;
		out[n].interp = langs[i].interp;
		out[n].script = langs[i].script;
		out[n].prefix = langs[i].prefix;
		n++;
	}
	return n;
}

/* Each SDK's workers against C's, in the same run: the 3-step drain
 * (alternating, median of BENCH_SDK_ROUNDS), enqueue to first instruction,
 * and the language process's memory over BENCH_SDK_MEMORY runs. */
static void phase_sdk(bench *b)
{
	enum { MAX_ROUNDS = 9, MAX_LANGS = 2 };
	side langs[MAX_LANGS];
	int nl = sdk_sides(b, langs),
	    rounds = b->sdk_rounds < MAX_ROUNDS ? b->sdk_rounds : MAX_ROUNDS;
	if (nl == 0)
		return;
	double rps[1 + MAX_LANGS][MAX_ROUNDS];
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k <= nl; k++) {
			/* C first in even rounds, last in odd ones. */
			int i = r % 2 ? nl - k : k;
			const side *s = i == 0 ? &b->cur : &langs[i - 1];
			char workflow[64];
			snprintf(workflow, sizeof workflow, "%sbench3", s->prefix ? s->prefix : "");
			drain d;
			if (drain_fresh(b, s, "sdk_drain", "bench_sdk", workflow, b->flow3_n,
			                DRAIN_CONCURRENCY, 0, &d))
				return;
			rps[i][r] = d.ready_rps;
		}
	double c_rps = quantile(rps[0], rounds, 0.5);
	int n = b->stamp_n;
	double *run = calloc((size_t)n + 1, sizeof *run),
	       *call = calloc((size_t)n + 1, sizeof *call);
	double warm, c_p50 = -1;
	if (run && call && n > 0 && stamp_side(b, &b->cur, run, call, &warm) == 0)
		c_p50 = quantile(run, n, 0.5);
	for (int i = 0; i < nl; i++) {
		const side *s = &langs[i];
		char key[96], label[96];
		snprintf(key, sizeof key, "sdk_%s_bench3_runs_per_s", s->name);
		snprintf(label, sizeof label, "%s 3-step runs/s, 1 worker x%d (median of %d)",
		         s->name, DRAIN_CONCURRENCY, rounds);
		measure(b, key, label, "runs/s", quantile(rps[i + 1], rounds, 0.5), c_rps,
		        "C 3-step runs/s", RATIO_GE, 0.5);
		if (c_p50 > 0 && stamp_side(b, s, run, call, &warm) == 0) {
			snprintf(key, sizeof key, "sdk_%s_stamp_p50_ms", s->name);
			snprintf(label, sizeof label, "%s enqueue to first instruction p50",
			         s->name);
			measure(b, key, label, "ms", quantile(run, n, 0.5), c_p50, "C p50",
			        RATIO_LE, 1.5);
		}
		long first, last;
		snprintf(key, sizeof key, "sdk_%s_rss_kb", s->name);
		cJSON *curve = cJSON_AddArrayToObject(b->extra, key);
		if (b->sdk_memory_n > 0 && memory_side(b, s, b->sdk_memory_n, b->sdk_memory_n / 10,
		                                       curve, &first, &last) > 0) {
			snprintf(label, sizeof label, "%s process VmRSS after %d runs", s->name,
			         b->sdk_memory_n);
			measure(b, key, label, "kB", (double)last, (double)first, "VmRSS at 10,000",
			        RATIO_LE, 1.1);
		}
	}
	free(run);
	free(call);
}

/* ------------------------------------------------------------- report */

static int report(bench *b, cJSON *env)
{
	int problems = cJSON_GetArraySize(b->errors);
	printf("\ncairn bench: PostgreSQL %s (fsync=%s, synchronous_commit=%s), %ld CPUs\n\n",
	       cJSON_GetStringValue(cJSON_GetObjectItem(env, "postgres")),
	       cJSON_GetStringValue(cJSON_GetObjectItem(env, "fsync")),
	       cJSON_GetStringValue(cJSON_GetObjectItem(env, "synchronous_commit")),
	       sysconf(_SC_NPROCESSORS_ONLN));
	printf("%-46s %11s %10s %8s  %-15s %s\n", "measure", "value", "floor", "ratio", "goal",
	       "met?");
	cJSON *m;
	cJSON_ArrayForEach(m, b->measures)
	{
		char val[40], fl[32] = "", ratio[32] = "", g[32] = "", met[8] = "";
		double v = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "value"));
		const char *unit = cJSON_GetStringValue(cJSON_GetObjectItem(m, "unit"));
		snprintf(val, sizeof val, "%.*f %s", fabs(v) < 100 ? 3 : 0, v, unit);
		cJSON *f = cJSON_GetObjectItem(m, "floor");
		if (f) {
			snprintf(fl, sizeof fl, "%.*f", f->valuedouble < 100 ? 3 : 0,
			         f->valuedouble);
			snprintf(ratio, sizeof ratio, "%.2fx",
			         cJSON_GetNumberValue(cJSON_GetObjectItem(m, "ratio")));
		}
		cJSON *goal_op = cJSON_GetObjectItem(m, "goal");
		if (goal_op) {
			snprintf(g, sizeof g, "%s %g%s", goal_op->valuestring,
			         cJSON_GetNumberValue(cJSON_GetObjectItem(m, "target")),
			         strncmp(goal_op->valuestring, "ratio", 5) == 0 ? "x" : "");
			snprintf(met, sizeof met, "%s",
			         cJSON_IsTrue(cJSON_GetObjectItem(m, "met")) ? "yes" : "NO");
		}
		printf("%-46s %11s %10s %8s  %-15s %s\n",
		       cJSON_GetStringValue(cJSON_GetObjectItem(m, "label")), val, fl, ratio, g,
		       met);
	}
	cJSON *e;
	if (problems) {
		printf("\nnot measured:\n");
		cJSON_ArrayForEach(e, b->errors) printf("  %s: %s\n", e->string, e->valuestring);
	}
	cJSON *doc = cJSON_CreateObject();
	cJSON_AddItemToObject(doc, "environment", env);
	cJSON_AddItemToObject(doc, "measures", b->measures);
	cJSON_AddItemToObject(doc, "extra", b->extra);
	cJSON_AddItemToObject(doc, "errors", b->errors);
	b->measures = b->errors = b->extra = NULL;
	char *text = cJSON_Print(doc);
	FILE *f = fopen(b->out, "w");
	if (!f || !text || fprintf(f, "%s\n", text) < 0)
		fprintf(stderr, "bench: cannot write %s: %s\n", b->out, strerror(errno));
	else
		printf("\nwritten to %s\n", b->out);
	if (f)
		fclose(f);
	free(text);
	cJSON_Delete(doc);
	return problems;
}

static cJSON *environment(bench *b)
{
	cJSON *env = cJSON_CreateObject();
	PGresult *r = q(b, SQL_SERVER, 0, NULL);
	cJSON_AddStringToObject(env, "postgres", r ? PQgetvalue(r, 0, 0) : "?");
	cJSON_AddStringToObject(env, "fsync", r ? PQgetvalue(r, 0, 1) : "?");
	cJSON_AddStringToObject(env, "synchronous_commit", r ? PQgetvalue(r, 0, 2) : "?");
	cJSON_AddStringToObject(env, "database", r ? PQgetvalue(r, 0, 3) : "?");
	PQclear(r);
	cJSON_AddNumberToObject(env, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
	cJSON_AddStringToObject(env, "cairn", CAIRN_VERSION);
	cJSON_AddStringToObject(env, "clock", "client CLOCK_MONOTONIC");
	cJSON_AddStringToObject(env, "drain_end",
	                        "client polls the finished count every 10 ms from /readyz 200");
	cJSON_AddNumberToObject(env, "floor_commits", b->commits_n);
	cJSON_AddNumberToObject(env, "enqueue_single_runs", b->single_n);
	cJSON_AddNumberToObject(env, "enqueue_threads_runs", b->threads_runs);
	cJSON_AddNumberToObject(env, "enqueue_batch_runs", b->batch_n);
	cJSON_AddNumberToObject(env, "stamp_runs", b->stamp_n);
	cJSON_AddNumberToObject(env, "noop_runs", b->noop_n);
	cJSON_AddNumberToObject(env, "bench3_runs", b->flow3_n);
	cJSON_AddNumberToObject(env, "fleet_runs", b->fleet_runs);
	cJSON_AddNumberToObject(env, "memory_runs", b->memory_runs);
	return env;
}

/* Whether BENCH_PHASES (a comma-separated list) names phase, or is unset. */
static int wanted(const bench *b, const char *phase)
{
	size_t n = strlen(phase);
	for (const char *p = b->phases; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0))
		if (strncmp(p, phase, n) == 0 && (p[n] == ',' || p[n] == 0))
			return 1;
	return !b->phases;
}

static void parse_fleet(bench *b, const char *s)
{
	b->fleet_n = 0;
	while (s && *s && b->fleet_n < (int)(sizeof b->fleet / sizeof b->fleet[0])) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		if (v > 0 && v <= MAX_FLEET)
			b->fleet[b->fleet_n++] = (int)v;
		s = *end ? end + 1 : end;
	}
}

static const char USAGE[] =
    "usage: bench [--worker PATH] [--plugin PATH] [--cli PATH] [--load PATH]\n"
    "             [--baseline DIR [--baseline-name NAME]] [--pgbench PATH] [--out FILE]\n"
    "             [--logs DIR]\n"
    "\n"
    "Measures cairn as a client sees it, beside floors measured on the same\n"
    "server (a bare INSERT commit loop, pgbench simple-update), against\n"
    "$DATABASE_URL (migrated). It TRUNCATES cairn.runs between phases and\n"
    "creates and drops the databases bench_pgbench and bench_fleetN: use a\n"
    "server of its own (`make bench` starts one). Sizes: BENCH_COMMITS (2000),\n"
    "BENCH_SINGLE (1000), BENCH_THREADS (10000), BENCH_BATCH (10000),\n"
    "BENCH_BATCH_ROUNDS (5, the batch and its floor alternated: medians),\n"
    "BENCH_STAMP (300), BENCH_NOOP (20000), BENCH_3STEP (5000),\n"
    "BENCH_DRAIN_CONCURRENCY (16, the drains' worker: their goals hold at 16),\n"
    "BENCH_FLEET (1,10,50), BENCH_FLEET_RUNS (1000), BENCH_FANOUT (10000 children),\n"
    "BENCH_FLOW_RUNS (20000), BENCH_FLOW_KEYS (1000), BENCH_FLOW_BACKLOG (100000),\n"
    "BENCH_LONG_STEPS (10000 steps of one run), BENCH_CHAIN (10000 continues);\n"
    "BENCH_MEMORY_RUNS=N runs only the memory phase. --baseline DIR (a built\n"
    "tree of an older commit) compares the drains and the x8 enqueue with it,\n"
    "alternating: BENCH_BASELINE_ROUNDS (3), BENCH_BASELINE_NOOP (10000),\n"
    "BENCH_BASELINE_3STEP (5000), BENCH_BASELINE_X8 (10000); the plan phase\n"
    "drains as many noop runs with and without an ANALYZE, as many rounds.\n"
    "The sdk phase compares the Python and TypeScript SDKs' workers with C's:\n"
    "BENCH_SDK_ROUNDS (3) alternated 3-step drains, the stamp, and the language\n"
    "process's memory over BENCH_SDK_MEMORY (100000) runs.\n"
    "The tracing phase drains BENCH_BASELINE_3STEP 3-step runs with spans exported\n"
    "to a local OTLP sink and without, alternating, BENCH_BASELINE_ROUNDS rounds.\n"
    "BENCH_PHASES (enqueue,x8,batch,sql,stamp,drain,plan,baseline,fanout,long,\n"
    "chain,flow,fleet,sdk,tracing) runs only those after the floors. The JSON goes to --out,\n"
    "$BENCH_OUT or bench.json.\n";

/* The side of a built tree dir (scripts/bench.sh builds BENCH_BASELINE's);
 * 0, or -1 when dir is too long. */
static int side_of(side *s, const char *dir, const char *name)
{
	static char paths[4][4096];
	const char *rel[] = {"bin/cairn", "bin/cairn-worker", "build/examples/bench_flows.so",
	                     "build/rel/bench_load"};
	for (int i = 0; i < 4; i++)
		if (snprintf(paths[i], sizeof paths[i], "%s/%s", dir, rel[i]) >=
		    (int)sizeof paths[i]) {
			fprintf(stderr, "bench: --baseline %s: too long\n", dir);
			return -1;
		}
	*s = (side){.name = name,
	            .cli = paths[0],
	            .worker = paths[1],
	            .plugin = paths[2],
	            .load = paths[3]};
	return 0;
}

static const char *default_pgbench(void)
{
	static char path[4096] = "pgbench";
	glob_t g;
	if (glob("/usr/lib/postgresql/*/bin/pgbench", 0, NULL, &g) == 0 && g.gl_pathc)
		snprintf(path, sizeof path, "%s", g.gl_pathv[g.gl_pathc - 1]);
	globfree(&g);
	return path;
}

int main(int argc, char **argv)
{
	bench b = {
	    .cur = {.name = "current",
	            .cli = "bin/cairn",
	            .worker = "bin/cairn-worker",
	            .plugin = "build/examples/bench_flows.so",
	            .load = "build/rel/bench_load"},
	    .out = getenv("BENCH_OUT") && *getenv("BENCH_OUT") ? getenv("BENCH_OUT") : "bench.json",
	    .log_dir = ".",
	};
	const char *baseline = NULL;
	for (int i = 1; i < argc; i++) {
		const char **slot = NULL;
		if (strcmp(argv[i], "--worker") == 0)
			slot = &b.cur.worker;
		else if (strcmp(argv[i], "--plugin") == 0)
			slot = &b.cur.plugin;
		else if (strcmp(argv[i], "--cli") == 0)
			slot = &b.cur.cli;
		else if (strcmp(argv[i], "--load") == 0)
			slot = &b.cur.load;
		else if (strcmp(argv[i], "--baseline") == 0)
			slot = &baseline;
		else if (strcmp(argv[i], "--baseline-name") == 0)
			slot = &b.base.name;
		else if (strcmp(argv[i], "--pgbench") == 0)
			slot = &b.pgbench;
		else if (strcmp(argv[i], "--out") == 0)
			slot = &b.out;
		else if (strcmp(argv[i], "--logs") == 0)
			slot = &b.log_dir;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return fputs(USAGE, stdout), 0;
		if (!slot || i + 1 >= argc) {
			fprintf(stderr, "bench: unknown or incomplete argument \"%s\"\n%s", argv[i],
			        USAGE);
			return 2;
		}
		*slot = argv[++i];
	}
	if (!b.pgbench)
		b.pgbench = default_pgbench();
	b.commits_n = env_int("BENCH_COMMITS", 2000);
	b.single_n = env_int("BENCH_SINGLE", 1000);
	b.threads_runs = env_int("BENCH_THREADS", 10000);
	b.batch_n = env_int("BENCH_BATCH", 10000);
	b.batch_rounds = env_int("BENCH_BATCH_ROUNDS", 5);
	b.stamp_n = env_int("BENCH_STAMP", 300);
	b.noop_n = env_int("BENCH_NOOP", 20000);
	b.flow3_n = env_int("BENCH_3STEP", 5000);
	b.drain_concurrency = env_int_in("BENCH_DRAIN_CONCURRENCY", DRAIN_CONCURRENCY, 1, 1024);
	b.fleet_runs = env_int("BENCH_FLEET_RUNS", 1000);
	b.fanout_n = env_int("BENCH_FANOUT", 10000);
	b.flow_n = env_int("BENCH_FLOW_RUNS", 20000);
	b.flow_keys = env_int("BENCH_FLOW_KEYS", 1000);
	b.flow_backlog = env_int("BENCH_FLOW_BACKLOG", 100000);
	b.memory_runs = env_int("BENCH_MEMORY_RUNS", 0);
	b.sdk_rounds = env_int_in("BENCH_SDK_ROUNDS", 3, 1, 9);
	b.sdk_memory_n = env_int("BENCH_SDK_MEMORY", 100000);
	b.long_n = env_int("BENCH_LONG_STEPS", 10000);
	b.chain_n = env_int("BENCH_CHAIN", 10000);
	parse_fleet(&b, getenv("BENCH_FLEET") ? getenv("BENCH_FLEET") : "1,10,50");
	b.phases =
	    getenv("BENCH_PHASES") && *getenv("BENCH_PHASES") ? getenv("BENCH_PHASES") : NULL;
	b.db_url = getenv("DATABASE_URL");
	b.citus_sh = getenv("BENCH_CITUS_SH");
	b.citus_dir = getenv("BENCH_CITUS_DIR");
	if (!b.citus_sh || !*b.citus_sh || !b.citus_dir || !*b.citus_dir)
		b.citus_sh = b.citus_dir = NULL;
	char *nodes = getenv("BENCH_NODES") ? strdup(getenv("BENCH_NODES")) : NULL;
	for (char *sp, *u = nodes ? strtok_r(nodes, " ", &sp) : NULL; u && b.nnodes < 4;
	     u = strtok_r(NULL, " ", &sp)) {
		if (!(b.nodes[b.nnodes++] = connect_url(u)))
			return 1;
	}
	free(nodes);
	if (!b.db_url || !*b.db_url) {
		fprintf(stderr, "bench: DATABASE_URL is not set\n");
		return 2;
	}
	if (baseline && side_of(&b.base, baseline, b.base.name ? b.base.name : "baseline"))
		return 2;
	const side *sides[] = {&b.cur, b.base.worker ? &b.base : NULL};
	for (int i = 0; i < 2 && sides[i]; i++) {
		const char *progs[] = {sides[i]->cli, sides[i]->worker, sides[i]->load};
		for (int k = 0; k < 3; k++)
			if (access(progs[k], X_OK) != 0) {
				fprintf(stderr, "bench: %s: %s is not an executable: %s\n",
				        sides[i]->name, progs[k], strerror(errno));
				return 2;
			}
	}
	b.ab_rounds = env_int_in("BENCH_BASELINE_ROUNDS", 3, 1, 15);
	b.ab_noop_n = env_int("BENCH_BASELINE_NOOP", 10000);
	b.ab_3step_n = env_int("BENCH_BASELINE_3STEP", 5000);
	b.ab_x8_n = env_int("BENCH_BASELINE_X8", 10000);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	b.pg = connect_url(b.db_url);
	if (!b.pg)
		return 1;
	if (cairn_client_open(b.db_url, &b.c) != CAIRN_OK) {
		fprintf(stderr, "bench: %s\n", cairn_client_errmsg(b.c));
		cairn_client_free(b.c);
		PQfinish(b.pg);
		return 1;
	}
	b.have_statements =
	    exec_ok(b.pg, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements") == 0 &&
	    exec_ok(b.pg, "SELECT 1 FROM pg_stat_statements LIMIT 1") == 0;
	if (!b.have_statements)
		fprintf(stderr, "bench: pg_stat_statements is not loaded: statements per run are "
		                "not measured\n");
	b.measures = cJSON_CreateArray();
	b.errors = cJSON_CreateObject();
	b.extra = cJSON_CreateObject();
	cJSON *env = environment(&b);

	phase_floor_commit(&b);
	phase_floor_pgbench(&b);
	if (b.memory_runs > 0) {
		phase_memory(&b);
	} else {
		if (wanted(&b, "enqueue"))
			phase_enqueue_single(&b);
		if (wanted(&b, "x8")) {
			phase_enqueue_threads(&b, 0);
			phase_enqueue_threads(&b, 1);
		}
		if (wanted(&b, "batch"))
			phase_enqueue_batch(&b);
		if (wanted(&b, "sql"))
			phase_sql(&b);
		if (wanted(&b, "stamp"))
			phase_stamp(&b);
		if (wanted(&b, "drain")) {
			phase_drain(&b, "noop", b.noop_n, "noop_runs_per_s", "noop", 3);
			phase_drain(&b, "bench3", b.flow3_n, "bench3_runs_per_s", "3-step", 0.75);
		}
		if (wanted(&b, "fanout"))
			phase_fanout(&b, b.fanout_n);
		if (wanted(&b, "long"))
			phase_long(&b, b.long_n);
		if (wanted(&b, "chain"))
			phase_chain(&b, b.chain_n);
		if (wanted(&b, "flow"))
			phase_flow(&b);
		for (int i = 0; i < b.fleet_n && wanted(&b, "fleet"); i++)
			phase_fleet(&b, b.fleet[i]);
		if (wanted(&b, "plan"))
			phase_plan(&b);
		if (wanted(&b, "baseline"))
			phase_baseline(&b);
		if (wanted(&b, "sdk"))
			phase_sdk(&b);
		if (wanted(&b, "tracing"))
			phase_tracing(&b);
	}
	reset(&b);

	int problems = report(&b, env);
	cairn_client_free(b.c);
	PQfinish(b.pg);
	for (int i = 0; i < b.nnodes; i++)
		PQfinish(b.nodes[i]);
	curl_global_cleanup();
	return problems ? 3 : 0;
}
