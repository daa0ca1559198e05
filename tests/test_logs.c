/*
 * test_logs.c - what a worker's log says about runs: every line about a run
 * names the run and its workflow; a run that fails for good or is cancelled
 * logs one line, with its error and attempt, once its end is written (a
 * retried attempt logs none); JSON lines (CAIRN_LOG_FORMAT=json) keep
 * numbers as numbers. The logger itself without a database; the lines of a
 * real worker (with tests/plugin_observe.c) against PostgreSQL.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "log.h"
#include "support.h"

/* The line log_kv writes for msg with the key/value pairs (NULL-ended), as
 * JSON or logfmt (caller frees). */
static char *logged(int format, const char *const *kv)
{
	char path[] = "/tmp/cairn-log-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	logger lg = {.level = LOG_DEBUG, .format = format, .fd = fd};
	const char *k[8] = {0};
	for (int i = 0; i < 8 && kv[i]; i++)
		k[i] = kv[i];
	log_kv(&lg, LOG_INFO, "m", k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], NULL);
	close(fd);
	return tfile_take(path);
}

Test(logs, json_lines_write_numbers_and_booleans_bare_and_everything_else_as_strings)
{
	const char *kv[] = {"run", "42", "workflow", "123", "attempt", "x1", "gone", "true", NULL};
	char *line = logged(LOG_JSON, kv);
	cJSON *j = cJSON_Parse(line);
	cr_assert(j, "not JSON: %s", line);
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "run")), "%s", line);
	cr_assert_eq(cJSON_GetObjectItem(j, "run")->valuedouble, 42);
	/* A workflow named like a number stays a string: its key is text. */
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "workflow")), "%s", line);
	/* A number's key with a value that is none stays valid JSON, a string. */
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "attempt")), "%s", line);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "gone")), "%s", line);
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "msg")), "%s", line);
	cJSON_Delete(j);
	free(line);
	/* Numbers that JSON spells otherwise stay strings. */
	static const char *const odd[] = {"007", "1.", "-", "1e", "0x10", "1 2", "", "+1"};
	for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
		const char *o[] = {"run", odd[i], NULL};
		line = logged(LOG_JSON, o);
		j = cJSON_Parse(line);
		cr_assert(j && cJSON_IsString(cJSON_GetObjectItem(j, "run")), "%s", line);
		cJSON_Delete(j);
		free(line);
	}
	const char *neg[] = {"run", "-1.5e3", NULL};
	line = logged(LOG_JSON, neg);
	j = cJSON_Parse(line);
	cr_assert(j && cJSON_GetObjectItem(j, "run")->valuedouble == -1500, "%s", line);
	cJSON_Delete(j);
	free(line);
	/* logfmt is as it was. */
	line = logged(LOG_LOGFMT, kv);
	cr_assert(strstr(line, " msg=\"m\" run=42 workflow=123 attempt=x1 gone=true\n"), "%s",
	          line);
	free(line);
}

/* The text of every engine source file, one after the other (caller frees). */
static char *engine_sources(void)
{
	const char *top = getenv("CAIRN_SRC_DIR");
	cr_assert(top && *top, "CAIRN_SRC_DIR is not set: run the suite through tests/run.sh");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/engine", top);
	DIR *d = opendir(dir);
	cr_assert(d);
	char *all = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&all, &len);
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".c") != 0)
			continue;
		char path[8200];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		char *text = tfile_read(path);
		fputs(text, m);
		free(text);
	}
	closedir(d);
	fclose(m);
	return all;
}

/* The text of every log_kv call of the engine (from "log_kv(" to its
 * "NULL);"), one after the other, each ended by a NUL: n of them. */
static char *log_calls(int *n)
{
	char *src = engine_sources(), *all = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&all, &len);
	*n = 0;
	for (const char *p = src; (p = strstr(p, "log_kv(")); p++) {
		if (p - src >= 5 && strncmp(p - 5, "void ", 5) == 0)
			continue; /* its definition */
		const char *end = strstr(p, "NULL);");
		cr_assert(end, "a log_kv call without its NULL sentinel");
		fwrite(p, 1, (size_t)(end - p), m);
		fputc(0, m);
		(*n)++;
	}
	fclose(m);
	free(src);
	return all;
}

Test(logs, every_key_the_engine_logs_with_a_number_is_a_json_number)
{
	int ncalls;
	char *calls = log_calls(&ncalls), *src = calls;
	/* One text: the calls' NULs as newlines. */
	for (char *c = calls, *e = NULL; ncalls-- > 0; c = e + 1) {
		e = c + strlen(c);
		*e = '\n';
	}
	int keys = 0;
	for (const char *p = src; (p = strstr(p, "db_i64(")); p++) {
		/* "key", db_i64(...) (maybe across lines): the key is the string
		 * just before. */
		const char *q = p - 1;
		while (q > src && (*q == ' ' || *q == '\t' || *q == '\n'))
			q--;
		if (*q != ',')
			continue;
		for (q--; q > src && (*q == ' ' || *q == '\t' || *q == '\n');)
			q--;
		if (*q != '"')
			continue;
		const char *open = q - 1;
		while (open > src && *open != '"')
			open--;
		char key[64];
		snprintf(key, sizeof key, "%.*s", (int)(q - open - 1), open + 1);
		if (!*key || strspn(key, "abcdefghijklmnopqrstuvwxyz_") != strlen(key))
			continue;
		const char *kv[] = {key, "12", NULL};
		char *line = logged(LOG_JSON, kv), want[80];
		snprintf(want, sizeof want, "\"%s\":12", key);
		cr_expect(strstr(line, want), "key %s is logged with a number, as a string: %s",
		          key, line);
		free(line);
		keys++;
	}
	cr_assert_gt(keys, 5, "found only %d keys logged with db_i64", keys);
	free(calls);
}

Test(logs, every_log_call_that_names_a_run_names_its_workflow_and_back)
{
	int calls, about_runs = 0;
	char *all = log_calls(&calls), *call = all;
	for (int i = 0; i < calls; i++, call += strlen(call) + 1) {
		int run = strstr(call, "\"run\",") != NULL;
		int workflow = strstr(call, "\"workflow\",") != NULL;
		cr_expect_eq(run, workflow, "a log line names %s without %s:\n%s",
		             run ? "a run" : "a workflow", run ? "its workflow" : "a run", call);
		about_runs += run;
	}
	cr_assert_gt(calls, 50);
	cr_assert_geq(about_runs, 8);
	free(all);
}

/* ------------------------------------------------------- a real worker */

static const char *observe_plugin(void)
{
	static char path[1024];
	const char *dir = getenv("CAIRN_BIN_DIR");
	snprintf(path, sizeof path, "CAIRN_PLUGINS=%s/../tests/plugin_observe.so",
	         dir ? dir : "bin");
	return path;
}

static int64_t run_to_end(cairn_client *c, const char *workflow, const cairn_enqueue_opts *o)
{
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(c, workflow, o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_wait(c, e.id, 30000), CAIRN_OK);
	return e.id;
}

/* The JSON lines of text whose msg is msg and whose run is id, as numbers
 * (into *line, the last of them, which the caller deletes); how many. */
static int lines_of(const char *text, const char *msg, int64_t id, cJSON **line)
{
	int n = 0;
	*line = NULL;
	char *copy = strdup(text), *save = NULL;
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		cJSON *j = cJSON_Parse(l);
		cr_assert(j, "a line that is not JSON: %s", l);
		const cJSON *m = cJSON_GetObjectItem(j, "msg"), *r = cJSON_GetObjectItem(j, "run");
		/* Whatever it says of a run, it names the workflow too. */
		if (r)
			cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "workflow")), "%s", l);
		if (cJSON_IsString(m) && strcmp(m->valuestring, msg) == 0 && cJSON_IsNumber(r) &&
		    (int64_t)r->valuedouble == id) {
			n++;
			cJSON_Delete(*line);
			*line = j;
			continue;
		}
		cJSON_Delete(j);
	}
	free(copy);
	return n;
}

Test(logs, a_failed_run_logs_one_json_line_with_run_workflow_attempt_and_error)
{
	const char *db = tdb_new_migrated_shards(16);
	char log[64];
	tlog_file(log);
	int port;
	pid_t pid = tworker_start(db, &port, log, observe_plugin(), "CAIRN_LOG_FORMAT=json",
	                          "CAIRN_POLL_INTERVAL=200ms", NULL);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	int64_t failed = run_to_end(c, "o.fail", NULL);
	cairn_enqueue_opts twice = {.max_attempts = 2};
	int64_t retried = run_to_end(c, "o.retry", &twice);
	int64_t ok = run_to_end(c, "o.ok", NULL);
	char want[64];
	snprintf(want, sizeof want, "\"run\":%" PRId64 ",", retried);
	cr_assert(tfile_wait(log, want, 30000), "no line names run %" PRId64, retried);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	char *text = tfile_take(log);

	cJSON *line;
	cr_assert_eq(lines_of(text, "run failed", failed, &line), 1, "%s", text);
	cr_assert_str_eq(cJSON_GetObjectItem(line, "workflow")->valuestring, "o.fail");
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(line, "attempt")), "%s", text);
	cr_assert_str_eq(cJSON_GetObjectItem(line, "level")->valuestring, "warn");
	const cJSON *err = cJSON_GetObjectItem(line, "error");
	cr_assert(cJSON_IsString(err) && strstr(err->valuestring, "step boom: boom: on purpose"),
	          "%s", text);
	cJSON_Delete(line);
	/* Retried once, failed once: one line, for the attempt that failed. */
	PGconn *pg = tdb_connect(db);
	int64_t attempt =
	    tdb_intf(pg, "SELECT attempt FROM cairn.runs WHERE id = %" PRId64, retried);
	cr_assert_eq(lines_of(text, "run failed", retried, &line), 1, "%s", text);
	cr_assert_eq(cJSON_GetObjectItem(line, "attempt")->valuedouble, (double)attempt, "%s",
	             text);
	cr_assert(strstr(cJSON_GetObjectItem(line, "error")->valuestring, "not yet"), "%s", text);
	cJSON_Delete(line);
	cr_assert_eq(lines_of(text, "run failed", ok, &line), 0, "%s", text);
	/* The worker's own numbers are numbers too. */
	cr_assert(strstr(text, "\"http_port\":") && !strstr(text, "\"http_port\":\""), "%s", text);
	PQfinish(pg);
	free(text);
	cairn_client_free(c);
}

Test(logs, a_cancelled_run_logs_one_line_with_run_workflow_attempt_and_its_error)
{
	const char *db = tdb_new_migrated_shards(16);
	char log[64];
	tlog_file(log);
	int port;
	pid_t pid =
	    tworker_start(db, &port, log, observe_plugin(), "CAIRN_POLL_INTERVAL=200ms", NULL);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(c, "o.wait", NULL, &e), CAIRN_OK);
	PGconn *pg = tdb_connect(db);
	cr_assert(tdb_wait_at_leastf(
	    pg, 1, 30000,
	    "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = 'waiting'", e.id));
	cr_assert_eq(cairn_cancel(c, e.id), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, e.id, 30000), CAIRN_OK);
	char want[160];
	snprintf(want, sizeof want,
	         "level=info msg=\"run cancelled\" run=%" PRId64 " workflow=o.wait attempt=%" PRId64
	         " error=cancelled\n",
	         e.id, tdb_intf(pg, "SELECT attempt FROM cairn.runs WHERE id = %" PRId64, e.id));
	cr_assert(tfile_wait(log, want, 30000), "no line %s", want);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	char *text = tfile_take(log);
	char *first = strstr(text, want);
	cr_assert_null(strstr(first + 1, want), "logged twice:\n%s", text);
	cr_assert_null(strstr(text, "msg=\"run failed\""), "%s", text);
	free(text);
	PQfinish(pg);
	cairn_client_free(c);
}
