/*
 * test_tracing.c - OpenTelemetry traces (engine/trace.c,
 * docs/monitoring.md#traces), end to end: real cairn-worker processes
 * export to tests/otlp/receiver.js, which decodes every request with
 * protobufjs and the official opentelemetry-proto definitions (an npm
 * package of the OpenTelemetry project ships them; installed with `npm ci`
 * from the committed package-lock.json) and writes one JSON line per span.
 * The tests read those lines: names, parent links, one trace id from the
 * client's traceparent through a kill -9 and the replay on another worker
 * down to the child run, a failed step's error status and exception event;
 * an exporter whose collector never answers drops and counts without
 * holding runs back; bad OTEL_* values are refused naming what is wrong.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"
#include "trace.h"

#define TRACE_ID "4bf92f3577b34da6a3ce929d0e0e4736"
#define CALLER   "00f067aa0ba902b7"
#define TP       "00-" TRACE_ID "-" CALLER "-01"

static const char TABLES[] = "CREATE TABLE t_flags (run_id bigint NOT NULL);";

/* A process this test started, ended now (tlive_del: the suite's fini
 * need not). */
static void live_end(pid_t pid)
{
	tlive_del(pid);
	tworker_stop(pid, SIGKILL, 5000);
}

TestSuite(tracing, .fini = tlive_kill);

/* ------------------------------------------------------------- receiver */

/* The npm packages of tests/otlp, installed with npm ci into the build
 * directory once per package-lock.json (under flock: suites run at once). */
static const char *node_modules(void)
{
	static char dir[1100];
	if (dir[0])
		return dir;
	char top[1024], cmd[4096];
	snprintf(top, sizeof top, "%s/../otlp-receiver", getenv("CAIRN_BIN_DIR"));
	snprintf(cmd, sizeof cmd,
	         "set -e; mkdir -p '%s'; cd '%s'; exec 9>.lock; flock 9; "
	         "src='%s/tests/otlp'; "
	         "if ! cmp -s \"$src/package-lock.json\" package-lock.json || "
	         "[ ! -d node_modules/protobufjs ]; then rm -rf node_modules; "
	         "cp \"$src/package.json\" \"$src/package-lock.json\" .; "
	         "npm ci --no-audit --no-fund --ignore-scripts; fi",
	         top, top, getenv("CAIRN_SRC_DIR"));
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	char *out, *err;
	int rc = trun(sh, NULL, &out, &err);
	cr_assert_eq(rc, 0, "npm ci in %s failed:\n%s\n%s", top, out, err);
	free(out);
	free(err);
	snprintf(dir, sizeof dir, "%s/node_modules", top);
	return dir;
}

typedef struct receiver {
	pid_t pid;
	int port;
	char out[64]; /* the spans, one JSON line each */
} receiver;

/* Starts node tests/otlp/receiver.js and waits for its port. */
static void receiver_start(receiver *r)
{
	const char *mods = node_modules();
	snprintf(r->out, sizeof r->out, "/tmp/cairn-spans-XXXXXX");
	int fd = mkstemp(r->out);
	cr_assert(fd >= 0);
	close(fd);
	char script[1100], path[1200];
	snprintf(script, sizeof script, "%s/tests/otlp/receiver.js", getenv("CAIRN_SRC_DIR"));
	snprintf(path, sizeof path, "NODE_PATH=%s", mods);
	int p[2];
	cr_assert(pipe(p) == 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		putenv(path);
		execlp("node", "node", script, "--out", r->out, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	tlive_add(pid);
	r->pid = pid;
	char line[64] = "";
	size_t n = 0;
	while (n + 1 < sizeof line && read(p[0], line + n, 1) == 1 && line[n] != '\n')
		n++;
	line[n] = '\0';
	close(p[0]);
	cr_assert(sscanf(line, "listening %d", &r->port) == 1, "receiver said \"%s\"", line);
}

static void receiver_stop(receiver *r)
{
	live_end(r->pid);
	unlink(r->out);
}

/* Every span received so far, as an array (the caller's to free). */
static cJSON *spans(const receiver *r)
{
	cJSON *all = cJSON_CreateArray();
	char *text = tfile_read(r->out);
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		cJSON *s = cJSON_Parse(line);
		cr_assert(s, "receiver wrote a line that is not JSON: %s", line);
		cJSON_AddItemToArray(all, s);
	}
	free(text);
	return all;
}

static const char *str(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *attr_str(const cJSON *s, const char *name)
{
	return str(cJSON_GetObjectItemCaseSensitive(s, "attributes"), name);
}

static double attr_num(const cJSON *s, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(s, "attributes"), name);
	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The spans named name of run run (every run: 0), and how many. */
static int find(const cJSON *all, const char *name, int64_t run, const cJSON **out)
{
	int n = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, all)
	{
		if (strcmp(str(s, "name"), name) == 0 &&
		    (!run || attr_num(s, "cairn.run_id") == (double)run)) {
			if (out && !n)
				*out = s;
			n++;
		}
	}
	return n;
}

typedef struct want {
	const receiver *r;
	const char *name;
	int64_t run;
} want;

static int has_span(void *arg)
{
	const want *w = arg;
	cJSON *all = spans(w->r);
	int n = find(all, w->name, w->run, NULL);
	cJSON_Delete(all);
	return n > 0;
}

static void wait_span(const receiver *r, const char *name, int64_t run)
{
	want w = {r, name, run};
	if (twait(has_span, &w, 30000))
		return;
	char *text = tfile_read(r->out);
	cr_assert_fail("no span \"%s\" of run %" PRId64 " arrived; those that did:\n%s", name, run,
	               text);
}

/* ---------------------------------------------------------------- workers */

typedef struct wk {
	pid_t pid;
	int port;
	char log[64];
} wk;

static void wk_start(wk *w, const char *db, const char *endpoint, const char *extra,
                     const char *extra2)
{
	char plugins[1100];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(w->log);
	w->pid = tworker_start(db, &w->port, w->log, "CAIRN_POLL_INTERVAL=100ms",
	                       "CAIRN_HEARTBEAT_INTERVAL=200ms", "CAIRN_REBALANCE_INTERVAL=200ms",
	                       "CAIRN_RUNNER_TTL=2s", "CAIRN_HTTP_TOKEN=tracing-test-token-0123",
	                       "OTEL_SERVICE_NAME=cairn-test", "OTEL_BSP_SCHEDULE_DELAY=100",
	                       "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test", plugins,
	                       endpoint, extra, extra2, NULL);
	tlive_add(w->pid);
	cr_assert(thttp_wait(w->port, "/readyz", 200, 20000), "worker never became ready; log %s",
	          w->log);
}

static void endpoint_of(const receiver *r, char *out, size_t n)
{
	snprintf(out, n, "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", r->port);
}

typedef struct run_done {
	PGconn *c;
	int64_t id;
} run_done;

static int finished(void *arg)
{
	run_done *d = arg;
	return tdb_intf(d->c,
	                "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                " AND finished_at IS NOT NULL",
	                d->id) == 1;
}

static int64_t enqueue_cli(const char *db, const char *input, const char *tp)
{
	char *out, *err;
	int rc = tp ? tcli(db, &out, &err, "enqueue", "t.traced", "--input", input, "--traceparent",
	                   tp, NULL)
	            : tcli(db, &out, &err, "enqueue", "t.traced", "--input", input, NULL);
	cr_assert_eq(rc, 0, "cairn enqueue: %s", err);
	int64_t id = strtoll(out, NULL, 10);
	free(out);
	free(err);
	return id;
}

/* The span id in a traceparent ("00-T-S-01": S). */
static const char *span_of(const char *tp, char out[17])
{
	cr_assert_eq(strlen(tp), TRACEPARENT_LEN, "not a traceparent: %s", tp);
	memcpy(out, tp + 36, 16);
	out[16] = '\0';
	return out;
}

/* --------------------------------------------------------------- tests */

Test(tracing, one_trace_from_the_clients_traceparent_through_a_kill_and_replay_to_the_child)
{
	const char *db = tdb_new_migrated_shards(8);
	PGconn *c = tdb_connect(db);
	tdb_exec(c, TABLES);
	receiver r;
	receiver_start(&r);
	char ep[128];
	endpoint_of(&r, ep, sizeof ep);
	wk a, b;
	wk_start(&a, db, ep, NULL, NULL);
	int64_t id = enqueue_cli(db, "{}", TP);

	/* A ran "first" and started the child; the child ran; A's spans of them
	 * are out; the run waits in step "gate". Then A dies. */
	wait_span(&r, "child kid", id);
	int64_t kid = tdb_intf(
	    c, "SELECT coalesce(max(id), 0) FROM cairn.runs WHERE parent_id = %" PRId64, id);
	cr_assert_gt(kid, 0);
	wait_span(&r, "run t.traced_kid", kid);
	cr_assert(tdb_wait_at_leastf(c, 1, 20000,
	                             "SELECT count(*) FROM cairn.steps WHERE run_id = %" PRId64
	                             " AND name = 'kid' AND status = 'completed'",
	                             id));
	live_end(a.pid);
	char sql[128];
	snprintf(sql, sizeof sql, "INSERT INTO t_flags VALUES (%" PRId64 ")", id);
	tdb_exec(c, sql);
	wk_start(&b, db, ep, NULL, NULL);
	run_done d = {c, id};
	cr_assert(twait(finished, &d, 60000), "the run never finished; log %s", b.log);
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                      " AND status = 'completed'",
	                      id),
	             1);
	wait_span(&r, "run t.traced", id);

	cJSON *all = spans(&r);
	const cJSON *run, *first, *child, *kid_run, *kidstep, *gate, *nap, *s;
	cr_assert_eq(find(all, "run t.traced", id, &run), 1, "one run span, whatever the crash");
	cr_assert_str_eq(str(run, "trace_id"), TRACE_ID);
	cr_assert_str_eq(str(run, "parent"), CALLER, "the run span is the caller's child");
	cr_assert_str_eq(attr_str(run, "cairn.workflow"), "t.traced");
	cr_assert_eq(attr_num(run, "cairn.attempt"), 1);
	cr_assert_geq(attr_num(run, "cairn.shard"), 0);
	cr_assert_str_eq(str(cJSON_GetObjectItemCaseSensitive(run, "resource"), "service.name"),
	                 "cairn-test");
	cr_assert_str_eq(
	    str(cJSON_GetObjectItemCaseSensitive(run, "resource"), "deployment.environment"),
	    "test");
	const char *run_span = str(run, "span_id");

	/* "first" ran on A only: the replay on B took it from the journal. */
	cr_assert_eq(find(all, "step first", id, &first), 1);
	cr_assert_str_eq(str(first, "parent"), run_span);
	cr_assert_eq(attr_num(first, "cairn.step.attempt"), 1);
	cr_assert_eq(attr_num(first, "cairn.step.seq"), 0);
	/* What the step read with cairn_ctx_traceparent names its own span. */
	snprintf(sql, sizeof sql, "SELECT output->>'tp' FROM cairn.runs WHERE id = %" PRId64, id);
	char *tp = tdb_str(c, sql);
	char sp[17];
	cr_assert_str_eq(span_of(tp, sp), str(first, "span_id"));
	cr_assert(strncmp(tp, "00-" TRACE_ID "-", 36) == 0 && strcmp(tp + 52, "-01") == 0, "%s",
	          tp);

	/* The child: its run span is the child of the durable call that
	 * started it, in the same trace; its step reads its own span. */
	cr_assert_eq(find(all, "child kid", id, &child), 1);
	cr_assert_str_eq(str(child, "parent"), run_span);
	cr_assert_eq(find(all, "run t.traced_kid", kid, &kid_run), 1);
	cr_assert_str_eq(str(kid_run, "trace_id"), TRACE_ID);
	cr_assert_str_eq(str(kid_run, "parent"), str(child, "span_id"));
	cr_assert_eq(find(all, "step kidstep", kid, &kidstep), 1);
	cr_assert_str_eq(str(kidstep, "parent"), str(kid_run, "span_id"));
	snprintf(sql, sizeof sql, "SELECT output->>'kid_tp' FROM cairn.runs WHERE id = %" PRId64,
	         id);
	char *ktp = tdb_str(c, sql);
	cr_assert_str_eq(span_of(ktp, sp), str(kidstep, "span_id"));

	/* "gate" ran again on B (A's attempt never ended), and the rest. */
	cr_assert_eq(find(all, "step gate", id, &gate), 1);
	cr_assert_str_eq(str(gate, "parent"), run_span);
	cr_assert_str_neq(
	    str(cJSON_GetObjectItemCaseSensitive(gate, "resource"), "service.instance.id"),
	    str(cJSON_GetObjectItemCaseSensitive(first, "resource"), "service.instance.id"),
	    "B is another instance than A");
	cr_assert_eq(find(all, "sleep nap", id, &nap), 1);
	cr_assert_str_eq(str(nap, "parent"), run_span);
	cr_assert_geq(find(all, "execute t.traced", id, NULL), 1);

	/* One trace, and no span points at a parent that is not there. */
	int n = 0;
	cJSON_ArrayForEach(s, all)
	{
		double of = attr_num(s, "cairn.run_id");
		if (of != (double)id && of != (double)kid)
			continue;
		n++;
		cr_assert_str_eq(str(s, "trace_id"), TRACE_ID, "span %s", str(s, "name"));
		const char *parent = str(s, "parent");
		if (s == run)
			continue;
		int found = 0;
		const cJSON *p;
		cJSON_ArrayForEach(p, all) found |= strcmp(str(p, "span_id"), parent) == 0;
		cr_assert(found, "span %s has parent %s, which was never exported", str(s, "name"),
		          parent);
		cr_assert_eq(cJSON_GetObjectItemCaseSensitive(
		                 cJSON_GetObjectItemCaseSensitive(s, "status"), "code")
		                 ->valuedouble,
		             0, "span %s failed", str(s, "name"));
	}
	cr_assert_geq(n, 9);
	free(tp);
	free(ktp);
	cJSON_Delete(all);
	live_end(b.pid);
	receiver_stop(&r);
	PQfinish(c);
}

Test(tracing, a_failed_step_has_error_status_and_an_exception_event_and_so_does_its_run)
{
	const char *db = tdb_new_migrated_shards(8);
	PGconn *c = tdb_connect(db);
	tdb_exec(c, TABLES);
	receiver r;
	receiver_start(&r);
	char ep[128];
	endpoint_of(&r, ep, sizeof ep);
	wk a;
	wk_start(&a, db, ep, NULL, NULL);
	int64_t id = enqueue_cli(db, "{\"fail\": true}", NULL);
	char sql[128];
	snprintf(sql, sizeof sql, "INSERT INTO t_flags VALUES (%" PRId64 ")", id);
	tdb_exec(c, sql);
	wait_span(&r, "run t.traced", id);

	cJSON *all = spans(&r);
	const cJSON *run, *boom, *ev;
	cr_assert_eq(find(all, "run t.traced", id, &run), 1);
	cr_assert_str_eq(str(run, "parent"), "", "without a traceparent the run is a root");
	cr_assert_eq(strlen(str(run, "trace_id")), 32);
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(run, "status");
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(st, "code")->valuedouble, 2, "ERROR");
	cr_assert(strstr(str(st, "message"), "card declined"), "%s", str(st, "message"));
	cr_assert_str_eq(attr_str(run, "cairn.outcome"), "failed");

	cr_assert_eq(find(all, "step boom", id, &boom), 1);
	cr_assert_str_eq(str(boom, "parent"), str(run, "span_id"));
	st = cJSON_GetObjectItemCaseSensitive(boom, "status");
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(st, "code")->valuedouble, 2);
	cr_assert_str_eq(str(st, "message"), "card declined");
	const cJSON *events = cJSON_GetObjectItemCaseSensitive(boom, "events");
	cr_assert_eq(cJSON_GetArraySize(events), 1);
	ev = cJSON_GetArrayItem(events, 0);
	cr_assert_str_eq(str(ev, "name"), "exception");
	cr_assert_str_eq(attr_str(ev, "exception.message"), "card declined");
	cr_assert_str_eq(attr_str(ev, "exception.type"), "cairn.failed");
	/* The steps that went well have no status. */
	const cJSON *first;
	cr_assert_eq(find(all, "step first", id, &first), 1);
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(
	                 cJSON_GetObjectItemCaseSensitive(first, "status"), "code")
	                 ->valuedouble,
	             0);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(first, "events")), 0);
	cJSON_Delete(all);

	/* POST /v1/runs with a traceparent header: the run joins that trace. */
	const char *hdr[] = {"Authorization: Bearer tracing-test-token-0123",
	                     "Content-Type: application/json", "traceparent: " TP, NULL};
	char *body;
	long status = thttp_req(a.port, "POST", "/v1/runs", hdr, "{\"workflow\": \"t.traced_kid\"}",
	                        &body, NULL);
	cr_assert_eq(status, 201, "%s", body);
	cJSON *made = cJSON_Parse(body);
	int64_t api_run = (int64_t)cJSON_GetObjectItemCaseSensitive(made, "id")->valuedouble;
	cJSON_Delete(made);
	free(body);
	wait_span(&r, "run t.traced_kid", api_run);
	all = spans(&r);
	cr_assert_eq(find(all, "run t.traced_kid", api_run, &run), 1);
	cr_assert_str_eq(str(run, "trace_id"), TRACE_ID);
	cr_assert_str_eq(str(run, "parent"), CALLER);
	cJSON_Delete(all);
	live_end(a.pid);
	receiver_stop(&r);
	PQfinish(c);
}

Test(tracing, enqueue_stores_a_traceparent_from_the_cli_and_sql_and_refuses_a_bad_one)
{
	const char *db = tdb_new_migrated_shards(8);
	PGconn *c = tdb_connect(db);
	int64_t id = enqueue_cli(db, "{}", "01-" TRACE_ID "-" CALLER "-01-future-field");
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                      " AND traceparent = '%s'",
	                      id, TP),
	             1, "stored as version 00, the later version's field dropped");
	int64_t plain = enqueue_cli(db, "{}", NULL);
	cr_assert_eq(tdb_intf(c,
	                      "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                      " AND traceparent IS NULL",
	                      plain),
	             1);
	char *out, *err;
	int rc = tcli(db, &out, &err, "enqueue", "t.traced", "--traceparent",
	              "00-" TRACE_ID "-0000000000000000-01", NULL);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(err, "--traceparent") && strstr(err, "0000000000000000") &&
	              strstr(err, "W3C traceparent"),
	          "%s", err);
	free(out);
	free(err);

	/* The SQL API: both signatures, by name; the old calls still work. */
	tdb_exec(c, "SELECT cairn.enqueue('t.traced', '{}'::jsonb, 'k-jsonb', traceparent => '" TP
	            "')");
	tdb_exec(c, "SELECT cairn.enqueue('t.traced', '{}', 'k-text', traceparent => '" TP "')");
	cr_assert_eq(tdb_int(c,
	                     "SELECT count(*) FROM cairn.runs WHERE key IN ('k-jsonb', 'k-text') "
	                     "AND traceparent = '" TP "'"),
	             2);
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.enqueue('t.traced', '{}'::jsonb, "
	                         "'k-old', NULL, NULL, 2)"),
	             1);
	PGresult *res = PQexec(c, "SELECT cairn.enqueue('t.traced', '{}'::jsonb, "
	                          "traceparent => 'ff-" TRACE_ID "-" CALLER "-01')");
	cr_assert_eq(PQresultStatus(res), PGRES_FATAL_ERROR);
	cr_assert(strstr(PQresultErrorMessage(res), "invalid traceparent"), "%s",
	          PQresultErrorMessage(res));
	PQclear(res);
	PQfinish(c);
}

/* A socket that accepts connections into its backlog and never answers:
 * an export to it waits until its timeout. */
static int black_hole(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof sa;
	cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
	cr_assert(listen(fd, 16) == 0);
	cr_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

typedef struct all_done {
	PGconn *c;
	int n;
} all_done;

static int all_finished(void *arg)
{
	all_done *d = arg;
	return tdb_int(d->c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'noop' "
	                     "AND status = 'completed'") == d->n;
}

Test(
    tracing,
    a_collector_that_never_answers_costs_runs_nothing_and_spans_are_dropped_and_counted_and_a_drain_waits_2_s)
{
	const char *db = tdb_new_migrated_shards(8);
	PGconn *c = tdb_connect(db);
	int port;
	int hole = black_hole(&port);
	char ep[128];
	snprintf(ep, sizeof ep, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:%d/v1/traces",
	         port);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60000", 1); /* the worker inherits it */
	/* The first export hangs for a minute: the exporter is stuck in it
	 * for the whole test, and its queue of 8 fills at once. */
	wk a;
	wk_start(&a, db, ep, "OTEL_BSP_MAX_QUEUE_SIZE=8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=8");
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	cairn_enqueue_opts o[200] = {{0}};
	cairn_enqueued res[200];
	cr_assert_eq(cairn_enqueue_batch(cl, "noop", 200, o, res), CAIRN_OK, "%s",
	             cairn_client_errmsg(cl));
	int64_t t0 = tnow_ms();
	all_done d = {c, 200};
	cr_assert(twait(all_finished, &d, 30000), "runs waited for the exporter; log %s", a.log);
	int64_t took = tnow_ms() - t0;
	char *page;
	cr_assert_eq(
	    thttp_auth(a.port, "GET", "/metrics", "Bearer tracing-test-token-0123", &page, NULL),
	    200);
	double full = tmetric_in(page, "cairn_otel_spans_dropped_total", "reason=\"queue_full\"");
	cr_assert_geq(full, 200 * 2 - 8 - 8, "each run's spans past the queue are dropped:\n%s",
	              page);
	cr_assert_eq(tmetric_in(page, "cairn_otel_spans_exported_total", NULL), 0);
	cr_assert_leq(tmetric_in(page, "cairn_otel_queue_length", NULL), 8);
	cr_assert_eq(tmetric_in(page, "cairn_otel_queue_capacity", NULL), 8);
	cr_log_info("200 runs took %" PRId64 " ms with the exporter stuck", took);
	unsetenv("OTEL_EXPORTER_OTLP_TIMEOUT");
	free(page);
	cairn_client_free(cl);
	/* A drain waits for the stuck export 2 s at most, not its minute. */
	int64_t t1 = tnow_ms();
	tlive_del(a.pid);
	cr_assert_eq(tworker_stop(a.pid, SIGTERM, 30000), 0, "the drain failed; log %s", a.log);
	cr_assert_lt(tnow_ms() - t1, 12000, "the drain waited for the collector");
	close(hole);
	PQfinish(c);
}

/* cairn-worker --check-config with env: its exit code, stderr in err. */
static int check_config(const char *env1, const char *env2, char **err)
{
	const char *argv[] = {tbin("cairn-worker"), "--check-config", NULL};
	const char *env[] = {"DATABASE_URL=postgresql://localhost/x", env1, env2, NULL};
	char *out;
	int rc = trun(argv, env, &out, err);
	free(out);
	return rc;
}

static void refused(const char *setting, const char *other, const char *want1, const char *want2)
{
	char *err;
	int rc = check_config(setting, other, &err);
	cr_assert_neq(rc, 0, "%s was accepted", setting);
	cr_assert(strstr(err, want1) && strstr(err, want2), "%s: said %s", setting, err);
	free(err);
}

Test(tracing, bad_otel_settings_are_refused_naming_the_variable_value_and_what_is_accepted)
{
	refused("OTEL_EXPORTER_OTLP_ENDPOINT=ftp://collector:21", NULL,
	        "OTEL_EXPORTER_OTLP_ENDPOINT: \"ftp://collector:21\"", "http:// or https://");
	refused("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector", NULL,
	        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: \"collector\"", "http:// or https://");
	refused("OTEL_EXPORTER_OTLP_PROTOCOL=grpc", NULL, "OTEL_EXPORTER_OTLP_PROTOCOL: \"grpc\"",
	        "http/protobuf");
	refused("OTEL_RESOURCE_ATTRIBUTES=team", NULL, "OTEL_RESOURCE_ATTRIBUTES: member \"team\"",
	        "key=value");
	refused("OTEL_RESOURCE_ATTRIBUTES=a=%zz", NULL, "member \"a=%zz\"", "percent-encoded");
	refused("OTEL_BSP_MAX_QUEUE_SIZE=0", NULL, "OTEL_BSP_MAX_QUEUE_SIZE: \"0\"",
	        "from 1 to 1000000");
	refused("OTEL_BSP_MAX_QUEUE_SIZE=10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=20",
	        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 20", "at most OTEL_BSP_MAX_QUEUE_SIZE (10)");
	char *err;
	cr_assert_eq(check_config("OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318/",
	                          "OTEL_RESOURCE_ATTRIBUTES=a=b%20c, d = e", &err),
	             0, "%s", err);
	free(err);
}

/* ----------------------------------------------------- the pure parts */

Test(tracing, traceparents_parse_as_the_w3c_recommendation_says_and_ids_are_derived_stably)
{
	uint8_t t[16], s[8], f;
	char why[256], out[TRACEPARENT_LEN + 1];
	cr_assert_eq(trace_parse(TP, t, s, &f, why), 0, "%s", why);
	trace_format(out, t, s, f);
	cr_assert_str_eq(out, TP);
	const char *bad[] = {"",
	                     "00-" TRACE_ID "-" CALLER "-01-",
	                     "ff-" TRACE_ID "-" CALLER "-01",
	                     "00-00000000000000000000000000000000-" CALLER "-01",
	                     "00-" TRACE_ID "-0000000000000000-01",
	                     "00-4BF92F3577B34DA6A3CE929D0E0E4736-" CALLER "-01",
	                     "00-" TRACE_ID "-" CALLER "-1",
	                     "00_" TRACE_ID "-" CALLER "-01"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(trace_parse(bad[i], t, s, &f, why), -1, "accepted \"%s\"", bad[i]);
	cr_assert_eq(trace_parse("cc-" TRACE_ID "-" CALLER "-01-more", t, s, &f, why), 0);

	/* The same run gives the same ids wherever it is executed; another run
	 * other ids; a run without a traceparent a trace of its own. */
	trace_ctx a, b, o, r1, r2;
	trace_run(&a, 42, 1700000000000000, TP, 1);
	trace_run(&b, 42, 1700000000000000, TP, 0);
	trace_run(&o, 43, 1700000000000000, TP, 1);
	cr_assert_eq(memcmp(a.run_span, b.run_span, 8), 0);
	cr_assert_neq(memcmp(a.run_span, o.run_span, 8), 0);
	cr_assert_eq(memcmp(a.trace_id, o.trace_id, 16), 0);
	cr_assert_eq(b.flags, 1, "the caller's flags hold");
	trace_run(&r1, 42, 1700000000000000, NULL, 1);
	trace_run(&r2, 42, 1700000000000001, NULL, 1);
	cr_assert_neq(memcmp(r1.trace_id, a.trace_id, 16), 0);
	cr_assert_neq(memcmp(r1.trace_id, r2.trace_id, 16), 0);
	uint8_t c1[8], c2[8], c3[8];
	trace_call_id(&a, 42, 1, 3, 1, c1);
	trace_call_id(&b, 42, 1, 3, 1, c2);
	trace_call_id(&a, 42, 1, 3, 2, c3);
	cr_assert_eq(memcmp(c1, c2, 8), 0);
	cr_assert_neq(memcmp(c1, c3, 8), 0);
}

Test(tracing, a_spans_error_is_cut_at_its_limit_and_made_utf8)
{
	trace_span *s =
	    trace_span_new("step", "pay", "order", "default", "bad \xff byte, caf\xc3\xa9");
	cr_assert_not_null(s);
	cr_assert_str_eq(s->name, "step pay");
	cr_assert_str_eq(s->error, "bad ? byte, caf\xc3\xa9");
	free(s);
	char *big = malloc(TRACE_ERROR_MAX + 100);
	memset(big, 'x', TRACE_ERROR_MAX + 99);
	memcpy(big + TRACE_ERROR_MAX - 1, "\xc3\xa9", 2); /* a character across the limit */
	big[TRACE_ERROR_MAX + 99] = '\0';
	s = trace_span_new("run", "order", "order", NULL, big);
	cr_assert_eq(strlen(s->error), TRACE_ERROR_MAX - 1, "cut before the character");
	free(s);
	free(big);
}
