/*
 * bench.c - the benchmark driver behind `make bench` (scripts/bench.sh starts
 * the database and runs it). Against the database in $DATABASE_URL, which it
 * empties of runs between phases, it measures:
 *
 *   enqueue_single   cairn_enqueue() in a loop, one transaction per run
 *   enqueue_batch    cairn_enqueue_batch() in batches of 500
 *   noop             runs/s of one cairn-worker at concurrency 16 draining a
 *                    backlog of noop runs, from the first run's started_at to
 *                    the last one's finished_at (cairn.runs)
 *   bench3           the same for a three-step workflow (the bench_flows plugin)
 *   latency          enqueue-to-start p50/p99 at low load: one noop run every
 *                    20 ms, started_at - created_at computed by PostgreSQL
 *
 * It prints a table with the targets beside the numbers and writes them as
 * JSON; it reports and never asserts on a number: exit 0, or 3 when a phase
 * could not be measured (the worker died, runs did not finish), 1 or 2 when
 * it cannot run at all.
 * Owns: one libpq connection, one cairn client, and the worker processes it
 * starts (killed with it: PR_SET_PDEATHSIG).
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "clock.h"

#define BATCH 500

typedef struct bench {
	const char *db_url;
	const char *worker;  /* cairn-worker binary */
	const char *plugin;  /* bench_flows.so */
	const char *out;     /* JSON file */
	const char *log_dir; /* worker logs */
	int concurrency;
	int single_n, batch_n, noop_n, flow3_n, latency_n;
	int64_t latency_gap_ms;
	int64_t phase_timeout_ms;
	PGconn *pg;
	cairn_client *c;
	cJSON *results, *errors;
} bench;

static const char SQL_RESET[] = "TRUNCATE cairn.messages, cairn.signals, cairn.steps, cairn.runs";
static const char SQL_PROGRESS[] =
    "SELECT count(*) FILTER (WHERE finished_at IS NOT NULL),"
    "       count(*) FILTER (WHERE status IN ('failed', 'cancelled'))"
    "  FROM cairn.runs WHERE workflow = $1 AND key LIKE $2";
static const char SQL_THROUGHPUT[] =
    "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))"
    "  FROM cairn.runs WHERE workflow = $1 AND status = 'completed'";
static const char SQL_LATENCY[] =
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),"
    "       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), avg(ms), max(ms), count(*)"
    "  FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms"
    "          FROM cairn.runs WHERE workflow = 'noop' AND key LIKE 'lat-%'"
    "           AND started_at IS NOT NULL) s";
static const char SQL_SERVER[] =
    "SELECT current_setting('server_version'), current_setting('fsync'),"
    "       current_setting('synchronous_commit')";

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
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

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || n < 0 || n > 10000000) {
		fprintf(stderr, "bench: %s=\"%s\" is not a count from 0 to 10000000; using %d\n",
		        name, v, def);
		return def;
	}
	return (int)n;
}

/* ------------------------------------------------------------ database */

static PGresult *q(bench *b, const char *sql, int n, const char *const *params)
{
	PGresult *r = PQexecParams(b->pg, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		fprintf(stderr, "bench: query failed: %s", PQerrorMessage(b->pg));
		PQclear(r);
		return NULL;
	}
	return r;
}

static int reset(bench *b)
{
	PGresult *r = q(b, SQL_RESET, 0, NULL);
	PQclear(r);
	return r ? 0 : -1;
}

static double cell(PGresult *r, int col)
{
	return PQgetisnull(r, 0, col) ? -1 : strtod(PQgetvalue(r, 0, col), NULL);
}

/* -------------------------------------------------------------- worker */

static int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	int port = 0;
	if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

static pid_t worker_start(bench *b, const char *name, int port)
{
	char log[4096], addr[64], conc[16];
	snprintf(log, sizeof log, "%s/worker-%s.log", b->log_dir, name);
	snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
	snprintf(conc, sizeof conc, "%d", b->concurrency);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	setenv("DATABASE_URL", b->db_url, 1);
	setenv("CAIRN_HTTP_ADDR", addr, 1);
	setenv("CAIRN_CONCURRENCY", conc, 1);
	if (b->plugin && *b->plugin)
		setenv("CAIRN_PLUGINS", b->plugin, 1);
	execl(b->worker, b->worker, (char *)NULL);
	fprintf(stderr, "bench: cannot run %s: %s\n", b->worker, strerror(errno));
	_exit(127);
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	return size * n;
}

static long http_status(int port, const char *path)
{
	char url[128];
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
	CURL *e = curl_easy_init();
	long status = 0;
	if (!e)
		return 0;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
	if (curl_easy_perform(e) == CURLE_OK)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(e);
	return status;
}

/* Waits for /readyz; 0 when ready, -1 when the worker died or the time ran out. */
static int worker_ready(pid_t pid, int port, int64_t timeout_ms)
{
	int64_t end = clock_mono_ms() + timeout_ms;
	while (clock_mono_ms() < end) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return -1;
		if (http_status(port, "/readyz") == 200)
			return 0;
		sleep_ms(50);
	}
	return -1;
}

static void worker_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	int64_t end = clock_mono_ms() + 40000;
	int st;
	while (clock_mono_ms() < end) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid || (r < 0 && errno == ECHILD))
			return;
		sleep_ms(20);
	}
	fprintf(stderr, "bench: worker %d did not drain within 40s; killing it\n", (int)pid);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

/* Waits until n runs of workflow (keys like key_like) have finished; gives up
 * after the phase timeout, or after 30 s without progress. 0 when all did. */
static int wait_finished(bench *b, const char *phase, const char *workflow, const char *key_like,
                         int n, pid_t worker)
{
	const char *params[] = {workflow, key_like};
	int64_t start = clock_mono_ms(), last_change = start, last_print = start;
	long done = -1;
	for (;;) {
		PGresult *r = q(b, SQL_PROGRESS, 2, params);
		if (!r)
			return -1;
		long d = (long)cell(r, 0), failed = (long)cell(r, 1);
		PQclear(r);
		int64_t t = clock_mono_ms();
		if (d != done)
			done = d, last_change = t;
		if (done >= n) {
			if (failed)
				note_error(b, phase,
				           "%ld of %d runs did not complete (failed or cancelled)",
				           failed, n);
			return 0;
		}
		int st;
		if (worker > 0 && waitpid(worker, &st, WNOHANG) == worker) {
			note_error(b, phase,
			           "the worker exited (see its log in %s) after %ld of %d runs",
			           b->log_dir, done, n);
			return -1;
		}
		if (t - last_change > 30000 || t - start > b->phase_timeout_ms) {
			note_error(b, phase, "gave up after %" PRId64 " s: %ld of %d runs finished",
			           (t - start) / 1000, done, n);
			return -1;
		}
		if (t - last_print >= 5000) {
			fprintf(stderr, "bench: %s: %ld of %d runs finished\n", phase, done, n);
			last_print = t;
		}
		sleep_ms(50);
	}
}

/* -------------------------------------------------------------- phases */

static int enqueue_batched(bench *b, const char *workflow, int n, const char *key_prefix)
{
	cairn_enqueue_opts *o = calloc(BATCH, sizeof *o);
	cairn_enqueued *out = calloc(BATCH, sizeof *out);
	char(*keys)[32] = calloc(BATCH, sizeof *keys);
	int rc = (o && out && keys) ? 0 : -1;
	for (int i = 0; rc == 0 && i < n; i += BATCH) {
		int m = n - i < BATCH ? n - i : BATCH;
		for (int k = 0; k < m; k++) {
			snprintf(keys[k], sizeof keys[k], "%s%d", key_prefix, i + k);
			o[k] = (cairn_enqueue_opts){.key = keys[k], .input = "{}"};
		}
		if (cairn_enqueue_batch(b->c, workflow, (size_t)m, o, out) != CAIRN_OK) {
			fprintf(stderr, "bench: enqueue_batch: %s\n", cairn_client_errmsg(b->c));
			rc = -1;
		}
	}
	free(o);
	free(out);
	free(keys);
	return rc;
}

static void phase_enqueue(bench *b)
{
	if (reset(b))
		return;
	int64_t t0 = clock_mono_ms();
	for (int i = 0; i < b->single_n; i++) {
		char key[32];
		snprintf(key, sizeof key, "s-%d", i);
		cairn_enqueue_opts o = {.key = key, .input = "{}"};
		cairn_enqueued r;
		if (cairn_enqueue(b->c, "noop", &o, &r) != CAIRN_OK) {
			note_error(b, "enqueue_single", "%s", cairn_client_errmsg(b->c));
			return;
		}
	}
	double s = (double)(clock_mono_ms() - t0) / 1000;
	cJSON_AddNumberToObject(b->results, "enqueue_single_per_s", s > 0 ? b->single_n / s : 0);
	if (reset(b))
		return;
	t0 = clock_mono_ms();
	if (enqueue_batched(b, "noop", b->batch_n, "b-")) {
		note_error(b, "enqueue_batch", "%s", cairn_client_errmsg(b->c));
		return;
	}
	s = (double)(clock_mono_ms() - t0) / 1000;
	cJSON_AddNumberToObject(b->results, "enqueue_batch_per_s", s > 0 ? b->batch_n / s : 0);
}

/* Drains a backlog of n runs of workflow with a fresh worker; adds result. */
static void phase_throughput(bench *b, const char *phase, const char *workflow, int n,
                             const char *result)
{
	if (n <= 0 || reset(b))
		return;
	if (enqueue_batched(b, workflow, n, "t-")) {
		note_error(b, phase, "cannot enqueue the backlog: %s", cairn_client_errmsg(b->c));
		return;
	}
	int port = free_port();
	pid_t w = worker_start(b, phase, port);
	if (w < 0) {
		note_error(b, phase, "fork: %s", strerror(errno));
		return;
	}
	fprintf(stderr, "bench: %s: %d runs enqueued, worker %d started\n", phase, n, (int)w);
	int rc = wait_finished(b, phase, workflow, "t-%", n, w);
	worker_stop(w);
	if (rc)
		return;
	const char *params[] = {workflow};
	PGresult *r = q(b, SQL_THROUGHPUT, 1, params);
	if (!r)
		return;
	double count = cell(r, 0), secs = cell(r, 1);
	PQclear(r);
	if (secs > 0)
		cJSON_AddNumberToObject(b->results, result, count / secs);
	else
		note_error(b, phase, "no completed runs with timestamps to measure");
}

static void phase_latency(bench *b)
{
	if (b->latency_n <= 0 || reset(b))
		return;
	int port = free_port();
	pid_t w = worker_start(b, "latency", port);
	if (w < 0 || worker_ready(w, port, 60000)) {
		note_error(b, "latency", "the worker did not become ready within 60 s (log in %s)",
		           b->log_dir);
		worker_stop(w);
		return;
	}
	for (int i = 0; i < b->latency_n; i++) {
		char key[32];
		snprintf(key, sizeof key, "lat-%d", i);
		cairn_enqueue_opts o = {.key = key, .input = "{}"};
		cairn_enqueued r;
		if (cairn_enqueue(b->c, "noop", &o, &r) != CAIRN_OK) {
			note_error(b, "latency", "%s", cairn_client_errmsg(b->c));
			worker_stop(w);
			return;
		}
		sleep_ms(b->latency_gap_ms);
	}
	int rc = wait_finished(b, "latency", "noop", "lat-%", b->latency_n, w);
	worker_stop(w);
	if (rc)
		return;
	PGresult *r = q(b, SQL_LATENCY, 0, NULL);
	if (!r)
		return;
	cJSON_AddNumberToObject(b->results, "latency_p50_ms", cell(r, 0));
	cJSON_AddNumberToObject(b->results, "latency_p99_ms", cell(r, 1));
	cJSON_AddNumberToObject(b->results, "latency_avg_ms", cell(r, 2));
	cJSON_AddNumberToObject(b->results, "latency_max_ms", cell(r, 3));
	PQclear(r);
}

/* ------------------------------------------------------------- report */

typedef struct row {
	const char *key, *label;
	int higher_is_better; /* 1: >= target, 0: <= target, -1: no target */
	double target;
} row;

static const row ROWS[] = {
    {"enqueue_single_per_s", "enqueue, one run per call (runs/s)", -1, 0},
    {"enqueue_batch_per_s", "enqueue, batches of 500 (runs/s)", -1, 0},
    {"noop_runs_per_s", "noop runs/s, 1 worker", 1, 7000},
    {"bench3_runs_per_s", "3-step runs/s, 1 worker", 1, 1500},
    {"latency_p50_ms", "enqueue-to-start p50 (ms)", 0, 3},
    {"latency_p99_ms", "enqueue-to-start p99 (ms)", 0, 10},
    {"latency_avg_ms", "enqueue-to-start average (ms)", -1, 0},
    {"latency_max_ms", "enqueue-to-start max (ms)", -1, 0},
};

static int report(bench *b, cJSON *env)
{
	int problems = cJSON_GetArraySize(b->errors);
	cJSON *targets = cJSON_CreateObject(), *met = cJSON_CreateObject();
	printf("\ncairn bench: PostgreSQL %s (fsync=%s, synchronous_commit=%s), %ld CPUs, "
	       "concurrency %d\n\n",
	       cJSON_GetStringValue(cJSON_GetObjectItem(env, "postgres")),
	       cJSON_GetStringValue(cJSON_GetObjectItem(env, "fsync")),
	       cJSON_GetStringValue(cJSON_GetObjectItem(env, "synchronous_commit")),
	       sysconf(_SC_NPROCESSORS_ONLN), b->concurrency);
	printf("%-38s %12s  %-10s %s\n", "measure", "value", "target", "");
	for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
		const row *r = &ROWS[i];
		cJSON *v = cJSON_GetObjectItem(b->results, r->key);
		char val[32] = "-", tgt[32] = "", verdict[16] = "";
		if (r->higher_is_better >= 0) {
			snprintf(tgt, sizeof tgt, "%s %g",
			         r->higher_is_better ? ">=" : "<=", r->target);
			cJSON_AddNumberToObject(targets, r->key, r->target);
		}
		if (cJSON_IsNumber(v)) {
			snprintf(val, sizeof val, "%.1f", v->valuedouble);
			if (r->higher_is_better >= 0) {
				int ok = r->higher_is_better ? v->valuedouble >= r->target
				                             : v->valuedouble <= r->target;
				snprintf(verdict, sizeof verdict, "%s", ok ? "met" : "MISSED");
				cJSON_AddBoolToObject(met, r->key, ok);
			}
		} else if (r->higher_is_better >= 0) {
			snprintf(verdict, sizeof verdict, "not measured");
		}
		printf("%-38s %12s  %-10s %s\n", r->label, val, tgt, verdict);
	}
	cJSON *e;
	if (cJSON_GetArraySize(b->errors)) {
		printf("\nproblems:\n");
		cJSON_ArrayForEach(e, b->errors) printf("  %s: %s\n", e->string, e->valuestring);
	}
	cJSON *doc = cJSON_CreateObject();
	cJSON_AddItemToObject(doc, "environment", env);
	cJSON_AddItemToObject(doc, "results", b->results);
	cJSON_AddItemToObject(doc, "targets", targets);
	cJSON_AddItemToObject(doc, "met", met);
	cJSON_AddItemToObject(doc, "errors", b->errors);
	b->results = b->errors = NULL;
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
	PQclear(r);
	cJSON_AddNumberToObject(env, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
	cJSON_AddNumberToObject(env, "concurrency", b->concurrency);
	cJSON_AddStringToObject(env, "cairn", CAIRN_VERSION);
	cJSON_AddNumberToObject(env, "enqueue_single_runs", b->single_n);
	cJSON_AddNumberToObject(env, "enqueue_batch_runs", b->batch_n);
	cJSON_AddNumberToObject(env, "noop_runs", b->noop_n);
	cJSON_AddNumberToObject(env, "bench3_runs", b->flow3_n);
	cJSON_AddNumberToObject(env, "latency_runs", b->latency_n);
	cJSON_AddNumberToObject(env, "latency_gap_ms", (double)b->latency_gap_ms);
	return env;
}

static const char USAGE[] =
    "usage: bench [--worker PATH] [--plugin PATH] [--out FILE] [--logs DIR]\n"
    "\n"
    "Measures enqueue rate, worker throughput and enqueue-to-start latency\n"
    "against $DATABASE_URL (migrated). It TRUNCATES cairn.runs and the tables\n"
    "that hang off it between phases: use a database of its own (`make bench`\n"
    "starts one). Sizes come from BENCH_SINGLE (2000), BENCH_BATCH (20000),\n"
    "BENCH_NOOP (20000), BENCH_3STEP (10000), BENCH_LATENCY (200),\n"
    "BENCH_CONCURRENCY (16); the JSON goes to --out, $BENCH_OUT or bench.json.\n";

int main(int argc, char **argv)
{
	bench b = {
	    .worker = "bin/cairn-worker",
	    .plugin = "build/examples/bench_flows.so",
	    .out = getenv("BENCH_OUT") && *getenv("BENCH_OUT") ? getenv("BENCH_OUT") : "bench.json",
	    .log_dir = ".",
	    .latency_gap_ms = 20,
	    .phase_timeout_ms = 600000,
	};
	for (int i = 1; i < argc; i++) {
		const char **slot = NULL;
		if (strcmp(argv[i], "--worker") == 0)
			slot = &b.worker;
		else if (strcmp(argv[i], "--plugin") == 0)
			slot = &b.plugin;
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
	b.single_n = env_int("BENCH_SINGLE", 2000);
	b.batch_n = env_int("BENCH_BATCH", 20000);
	b.noop_n = env_int("BENCH_NOOP", 20000);
	b.flow3_n = env_int("BENCH_3STEP", 10000);
	b.latency_n = env_int("BENCH_LATENCY", 200);
	b.concurrency = env_int("BENCH_CONCURRENCY", 16);
	b.db_url = getenv("DATABASE_URL");
	if (!b.db_url || !*b.db_url) {
		fprintf(stderr, "bench: DATABASE_URL is not set\n");
		return 2;
	}
	if (access(b.worker, X_OK) != 0) {
		fprintf(stderr, "bench: --worker %s is not an executable: %s\n", b.worker,
		        strerror(errno));
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	b.pg = PQconnectdb(b.db_url);
	if (PQstatus(b.pg) != CONNECTION_OK) {
		fprintf(stderr, "bench: cannot connect: %s", PQerrorMessage(b.pg));
		PQfinish(b.pg);
		return 1;
	}
	if (cairn_client_open(b.db_url, &b.c) != CAIRN_OK) {
		fprintf(stderr, "bench: %s\n", cairn_client_errmsg(b.c));
		cairn_client_free(b.c);
		PQfinish(b.pg);
		return 1;
	}
	PQclear(PQexec(b.pg, "SET client_min_messages = warning"));
	b.results = cJSON_CreateObject();
	b.errors = cJSON_CreateObject();
	cJSON *env = environment(&b);

	/* Latency at low load first: after the throughput phases PostgreSQL is
	 * still vacuuming and checkpointing their tens of thousands of rows,
	 * which is load, and shows up in the tail. */
	phase_latency(&b);
	phase_enqueue(&b);
	phase_throughput(&b, "noop", "noop", b.noop_n, "noop_runs_per_s");
	phase_throughput(&b, "bench3", "bench3", b.flow3_n, "bench3_runs_per_s");
	reset(&b);

	int problems = report(&b, env);
	cairn_client_free(b.c);
	PQfinish(b.pg);
	curl_global_cleanup();
	return problems ? 3 : 0;
}
