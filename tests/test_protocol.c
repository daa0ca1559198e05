/*
 * test_protocol.c - the engine side of the worker protocol (docs/protocol.md)
 * spoken by the test itself: socket pairs, a real cairn-worker started with
 * --sdk-fds, a real PostgreSQL. The SDKs' own suites (test_sdk_python.c,
 * test_sdk_ts.c) prove the guarantees through real language processes;
 * this one proves what the engine does with messages no well-behaved SDK
 * sends, and the cases an SDK cannot easily provoke.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

enum { LANES = 2 };

typedef struct engine {
	pid_t pid;
	int fd[LANES + 1]; /* our ends: [0] control, then the lanes */
	char buf[LANES + 1][1 << 16];
	size_t len[LANES + 1];
	char log[64];
} engine;

/* Starts cairn-worker --sdk-fds 3-(3+LANES) with extra NAME=value settings
 * (NULL-terminated). */
static void engine_start(engine *e, const char *db, const char *const *env)
{
	int child[LANES + 1];
	for (int i = 0; i <= LANES; i++) {
		int sv[2];
		cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		e->fd[i] = sv[0];
		child[i] = sv[1];
		e->len[i] = 0;
	}
	tlog_file(e->log);
	e->pid = fork();
	cr_assert(e->pid >= 0);
	if (e->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* Up high first, so that moving them to 3.. clobbers none. */
		for (int i = 0; i <= LANES; i++)
			child[i] = fcntl(child[i], F_DUPFD, 100);
		for (int i = 0; i <= LANES; i++)
			dup2(child[i], 3 + i);
		FILE *f = freopen(e->log, "a", stderr);
		(void)f;
		setenv("DATABASE_URL", db, 1);
		setenv("CAIRN_HTTP_ADDR", "127.0.0.1:0", 1);
		setenv("CAIRN_LOG_LEVEL", "warn", 1);
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		char fds[16];
		snprintf(fds, sizeof fds, "3-%d", 3 + LANES);
		execl(tbin("cairn-worker"), "cairn-worker", "--sdk-fds", fds, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i <= LANES; i++)
		close(child[i]);
}

static void say(engine *e, int lane, const char *line)
{
	size_t n = strlen(line);
	cr_assert_eq(write(e->fd[lane], line, n), (ssize_t)n);
	cr_assert_eq(write(e->fd[lane], "\n", 1), 1);
}

/* The next line on lane (parsed), waiting up to 30 s; NULL at end of file. */
static cJSON *hear(engine *e, int lane)
{
	int64_t deadline = tnow_ms() + 30000;
	for (;;) {
		char *nl = memchr(e->buf[lane], '\n', e->len[lane]);
		if (nl) {
			*nl = '\0';
			cJSON *m = cJSON_Parse(e->buf[lane]);
			cr_assert(m, "not JSON: %s", e->buf[lane]);
			size_t used = (size_t)(nl - e->buf[lane]) + 1;
			memmove(e->buf[lane], nl + 1, e->len[lane] - used);
			e->len[lane] -= used;
			return m;
		}
		struct pollfd p = {.fd = e->fd[lane], .events = POLLIN};
		int left = (int)(deadline - tnow_ms());
		cr_assert(left > 0 && poll(&p, 1, left) == 1,
		          "nothing on lane %d within 30 s; log:\n%s", lane, tfile_read(e->log));
		ssize_t r = read(e->fd[lane], e->buf[lane] + e->len[lane],
		                 sizeof e->buf[lane] - 1 - e->len[lane]);
		if (r <= 0)
			return NULL;
		e->len[lane] += (size_t)r;
	}
}

/* The lane a run message arrives on (its x in *x, its message kept). */
static int hear_run(engine *e, int64_t *x)
{
	int64_t deadline = tnow_ms() + 30000;
	for (;;) {
		struct pollfd p[LANES];
		for (int i = 0; i < LANES; i++)
			p[i] = (struct pollfd){.fd = e->fd[i + 1], .events = POLLIN};
		int left = (int)(deadline - tnow_ms());
		cr_assert(left > 0 && poll(p, LANES, left) > 0, "no run within 30 s; log:\n%s",
		          tfile_read(e->log));
		for (int i = 0; i < LANES; i++) {
			if (!(p[i].revents & POLLIN))
				continue;
			cJSON *m = hear(e, i + 1);
			cr_assert(m);
			cr_assert_str_eq(cJSON_GetObjectItem(m, "t")->valuestring, "run");
			*x = (int64_t)cJSON_GetObjectItem(m, "x")->valuedouble;
			cJSON_Delete(m);
			return i + 1;
		}
	}
}

/* Sends {"x":x,"op":...rest} and returns the reply's "t" (static) with the
 * whole reply in *reply when reply is not NULL. */
static const char *ask(engine *e, int lane, int64_t x, const char *rest, cJSON **reply)
{
	char line[4096];
	snprintf(line, sizeof line, "{\"x\":%lld,%s}", (long long)x, rest);
	say(e, lane, line);
	cJSON *m = hear(e, lane);
	cr_assert(m, "the engine closed the lane; log:\n%s", tfile_read(e->log));
	static char t[32];
	snprintf(t, sizeof t, "%s", cJSON_GetObjectItem(m, "t")->valuestring);
	if (reply)
		*reply = m;
	else
		cJSON_Delete(m);
	return t;
}

static const char HELLO[] = "{\"op\":\"hello\",\"protocols\":[1],\"sdk\":\"test\","
                            "\"runtime\":\"c-test\",\"workflows\":[{\"name\":\"t.proto\"}]}";

static void welcome(engine *e)
{
	say(e, 0, HELLO);
	cJSON *m = hear(e, 0);
	cr_assert(m, "no welcome; log:\n%s", tfile_read(e->log));
	cr_assert_str_eq(cJSON_GetObjectItem(m, "t")->valuestring, "welcome");
	cr_assert_eq(cJSON_GetObjectItem(m, "protocol")->valueint, 1);
	cr_assert_eq(cJSON_GetObjectItem(m, "lanes")->valueint, LANES);
	cJSON_Delete(m);
}

static int exit_code(engine *e, int64_t timeout_ms)
{
	int64_t deadline = tnow_ms() + timeout_ms;
	int st;
	while (tnow_ms() < deadline) {
		pid_t r = waitpid(e->pid, &st, WNOHANG);
		if (r == e->pid) {
			e->pid = -1; /* reaped: engine_stop has nothing to kill */
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		struct pollfd none;
		poll(&none, 0, 10);
	}
	return -1;
}

static void engine_stop(engine *e)
{
	if (e->pid > 0) {
		kill(e->pid, SIGKILL);
		waitpid(e->pid, NULL, 0);
	}
	for (int i = 0; i <= LANES; i++)
		if (e->fd[i] >= 0)
			close(e->fd[i]);
}

static char *run_field(const char *db, const char *field)
{
	PGconn *c = tdb_connect(db);
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT %s FROM cairn.runs ORDER BY id LIMIT 1", field);
	char *v = tdb_str(c, sql);
	PQfinish(c);
	return v;
}

static void enqueue(const char *db)
{
	cr_assert_eq(tcli(db, NULL, NULL, "enqueue", "t.proto", NULL), 0);
}

Test(protocol, bad_requests_get_an_invalid_error_and_the_run_goes_on, .timeout = 120)
{
	const char *db = tdb_new_migrated();
	engine e;
	engine_start(&e, db, NULL);
	welcome(&e);
	enqueue(db);
	int64_t x;
	int lane = hear_run(&e, &x);
	cJSON *r;
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"sleep\",\"name\":\"nap\"", &r), "error");
	cr_assert_str_eq(cJSON_GetObjectItem(r, "code")->valuestring, "invalid");
	cr_assert(strstr(cJSON_GetObjectItem(r, "message")->valuestring, "\"ms\""));
	cJSON_Delete(r);
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"warp\"", &r), "error");
	cr_assert(strstr(cJSON_GetObjectItem(r, "message")->valuestring, "unknown op \"warp\""));
	cJSON_Delete(r);
	cr_assert_str_eq(
	    ask(&e, lane, x, "\"op\":\"step\",\"name\":\"s\",\"retry\":{\"jitter\":\"x\"}", &r),
	    "error");
	cr_assert(strstr(cJSON_GetObjectItem(r, "message")->valuestring, "jitter"));
	cJSON_Delete(r);
	/* A message about another execution is dropped, not answered. */
	say(&e, lane, "{\"x\":999999,\"op\":\"return\",\"value\":1}");
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"step\",\"name\":\"s\"", NULL), "run_step");
	say(&e, lane, "{\"x\":0,\"op\":\"step_result\",\"value\":0}"); /* stale: dropped */
	char line[128];
	snprintf(line, sizeof line, "{\"x\":%lld,\"op\":\"step_result\",\"value\":7}",
	         (long long)x);
	say(&e, lane, line); /* no reply without "await" */
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"random\"", &r), "ok");
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(r, "value")));
	cJSON_Delete(r);
	snprintf(line, sizeof line, "{\"x\":%lld,\"op\":\"return\",\"value\":{\"v\":7}}",
	         (long long)x);
	say(&e, lane, line);
	PGconn *c = tdb_connect(db);
	cr_assert(tdb_wait_at_least(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                            1, 30000));
	PQfinish(c);
	char *out = run_field(db, "output::text");
	cr_assert_str_eq(out, "{\"v\": 7}");
	free(out);
	engine_stop(&e);
}

Test(protocol, a_hello_without_a_common_version_is_refused_and_the_engine_exits_2, .timeout = 60)
{
	const char *db = tdb_new_migrated();
	engine e;
	engine_start(&e, db, NULL);
	say(&e, 0, "{\"op\":\"hello\",\"protocols\":[7],\"workflows\":[{\"name\":\"a\"}]}");
	cJSON *m = hear(&e, 0);
	cr_assert(m);
	cr_assert_str_eq(cJSON_GetObjectItem(m, "t")->valuestring, "refused");
	cr_assert(strstr(cJSON_GetObjectItem(m, "message")->valuestring,
	                 "speaks no protocol version this engine does (1 to 3"),
	          "%s", cJSON_GetObjectItem(m, "message")->valuestring);
	cJSON_Delete(m);
	cr_assert_eq(exit_code(&e, 30000), 2);
	engine_stop(&e);
}

Test(protocol, a_bad_workflow_name_in_hello_is_refused_naming_it, .timeout = 60)
{
	const char *db = tdb_new_migrated();
	engine e;
	engine_start(&e, db, NULL);
	say(&e, 0, "{\"op\":\"hello\",\"protocols\":[1],\"workflows\":[{\"name\":\"no spaces\"}]}");
	cJSON *m = hear(&e, 0);
	cr_assert(m);
	cr_assert_str_eq(cJSON_GetObjectItem(m, "t")->valuestring, "refused");
	cr_assert(strstr(cJSON_GetObjectItem(m, "message")->valuestring, "no spaces"), "%s",
	          cJSON_GetObjectItem(m, "message")->valuestring);
	cJSON_Delete(m);
	cr_assert_eq(exit_code(&e, 30000), 2);
	engine_stop(&e);
}

Test(protocol, a_line_that_is_not_json_ends_the_engine_and_the_run_resumes_later, .timeout = 120)
{
	const char *db = tdb_new_migrated();
	engine e;
	engine_start(&e, db, NULL);
	welcome(&e);
	enqueue(db);
	int64_t x;
	int lane = hear_run(&e, &x);
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"step\",\"name\":\"s\"", NULL), "run_step");
	say(&e, lane, "this is not json");
	cr_assert_eq(exit_code(&e, 30000), 1);
	engine_stop(&e);
	/* Nothing was written for it: the next engine runs it from the top. */
	char *status = run_field(db, "status");
	cr_assert_str_neq(status, "completed");
	free(status);
	engine_start(&e, db, NULL);
	welcome(&e);
	lane = hear_run(&e, &x);
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"step\",\"name\":\"s\"", NULL), "run_step");
	engine_stop(&e);
}

Test(protocol,
     a_result_refused_without_await_fails_the_run_and_a_closed_control_lane_ends_the_engine,
     .timeout = 120)
{
	const char *db = tdb_new_migrated();
	engine e;
	const char *env[] = {"CAIRN_MAX_PAYLOAD=1KiB", NULL};
	engine_start(&e, db, env);
	welcome(&e);
	enqueue(db);
	int64_t x;
	int lane = hear_run(&e, &x);
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"step\",\"name\":\"big\"", NULL), "run_step");
	char line[4096];
	char big[2049];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	snprintf(line, sizeof line, "{\"x\":%lld,\"op\":\"step_result\",\"value\":\"%s\"}",
	         (long long)x, big);
	say(&e, lane, line);
	cJSON *r;
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"now\"", &r), "stop");
	cr_assert_str_eq(cJSON_GetObjectItem(r, "reason")->valuestring, "failed");
	cr_assert(strstr(cJSON_GetObjectItem(r, "message")->valuestring, "CAIRN_MAX_PAYLOAD"));
	cJSON_Delete(r);
	PGconn *c = tdb_connect(db);
	cr_assert(tdb_wait_at_least(c, "SELECT count(*) FROM cairn.runs WHERE status = 'failed'", 1,
	                            30000));
	PQfinish(c);
	/* The SDK closes its control lane: the engine exits at once. */
	close(e.fd[0]);
	e.fd[0] = -1;
	cr_assert_eq(exit_code(&e, 30000), 1);
	char *log = tfile_read(e.log);
	cr_assert(strstr(log, "the SDK process is gone"), "%s", log);
	free(log);
	engine_stop(&e);
}

Test(protocol, a_late_result_with_await_is_judged_timed_out, .timeout = 120)
{
	const char *db = tdb_new_migrated();
	engine e;
	engine_start(&e, db, NULL);
	welcome(&e);
	enqueue(db);
	int64_t x;
	int lane = hear_run(&e, &x);
	cr_assert_str_eq(ask(&e, lane, x,
	                     "\"op\":\"step\",\"name\":\"slow\",\"await\":true,"
	                     "\"retry\":{\"max_attempts\":1,\"timeout_ms\":20}",
	                     NULL),
	                 "run_step");
	/* The step outlives its timeout: wait until well past it. */
	int64_t until = tnow_ms() + 100;
	while (tnow_ms() < until)
		poll(NULL, 0, (int)(until - tnow_ms()));
	cJSON *r;
	char line[128];
	snprintf(line, sizeof line, "{\"x\":%lld,\"op\":\"step_result\",\"value\":1}",
	         (long long)x);
	say(&e, lane, line);
	r = hear(&e, lane);
	cr_assert(r);
	cr_assert_str_eq(cJSON_GetObjectItem(r, "t")->valuestring, "error");
	cr_assert_str_eq(cJSON_GetObjectItem(r, "code")->valuestring, "failed");
	cr_assert(strstr(cJSON_GetObjectItem(r, "message")->valuestring, "timed out"), "%s",
	          cJSON_GetObjectItem(r, "message")->valuestring);
	cJSON_Delete(r);
	engine_stop(&e);
}

/* Version 2 adds the end message continue_as_new (cairn_continue_as_new):
 * an SDK that speaks it is welcomed in 2, and a run that ends with it is
 * completed and its successor comes on a lane with the input it was given.
 * In version 1 the message is unknown: answered error invalid, the run
 * goes on. */
Test(protocol, continue_as_new_in_version_2_starts_the_successor_and_is_unknown_in_version_1,
     .timeout = 120)
{
	const char *db = tdb_new_migrated();
	engine e;
	engine_start(&e, db, NULL);
	say(&e, 0,
	    "{\"op\":\"hello\",\"protocols\":[1,2],\"sdk\":\"test\",\"runtime\":\"c-test\","
	    "\"workflows\":[{\"name\":\"t.proto\"}]}");
	cJSON *m = hear(&e, 0);
	cr_assert(m, "no welcome; log:\n%s", tfile_read(e.log));
	cr_assert_eq(cJSON_GetObjectItem(m, "protocol")->valueint, 2);
	cJSON_Delete(m);
	enqueue(db);
	int64_t x;
	int lane = hear_run(&e, &x);
	char line[128];
	snprintf(line, sizeof line, "{\"x\":%lld,\"op\":\"continue_as_new\",\"input\":{\"n\":1}}",
	         (long long)x);
	say(&e, lane, line);
	/* The successor's execution. */
	lane = hear_run(&e, &x);
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"step\",\"name\":\"s\"", NULL), "run_step");
	char *status = run_field(db, "status");
	cr_assert_str_eq(status, "completed");
	free(status);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs r JOIN cairn.runs s "
	                        "ON s.continued_from = r.id WHERE s.input = '{\"n\": 1}'"),
	             1);
	PQfinish(c);
	engine_stop(&e);

	db = tdb_new_migrated();
	engine_start(&e, db, NULL);
	welcome(&e); /* version 1 */
	enqueue(db);
	lane = hear_run(&e, &x);
	cJSON *r;
	snprintf(line, sizeof line, "\"op\":\"continue_as_new\",\"input\":null");
	cr_assert_str_eq(ask(&e, lane, x, line, &r), "error");
	cr_assert_str_eq(cJSON_GetObjectItem(r, "code")->valuestring, "invalid");
	cJSON_Delete(r);
	cr_assert_str_eq(ask(&e, lane, x, "\"op\":\"now\"", NULL), "ok");
	engine_stop(&e);
}
