/* test_worker.c - the cairn-worker process: its HTTP endpoint, configuration
 * errors, SIGTERM drain, and life without a database; and a worker embedded
 * in a program of its own (cairn_worker_new_with). Real processes, real
 * PostgreSQL. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "slow.h"
#include "support.h"

/* The slow connections of the slowloris tests, per worker. */
#define SLOW_CONNS 200

Test(worker, endpoints_answer_with_status_type_and_content)
{
	const char *db = tdb_new_migrated();
	int port;
	pid_t pid = tworker_start(db, &port, NULL, NULL);
	cr_assert(thttp_wait(port, "/readyz", 200, 30000), "worker never became ready");
	char *body, *ct;
	cr_assert_eq(thttp(port, "GET", "/healthz", &body, &ct), 200);
	cr_assert_str_eq(body, "ok\n");
	free(body);
	free(ct);

	cr_assert_eq(thttp(port, "GET", "/metrics", &body, &ct), 200);
	cr_assert(strstr(ct, "text/plain; version=0.0.4"), "%s", ct);
	const char *names[] = {"cairn_build_info",
	                       "cairn_uptime_seconds",
	                       "cairn_db_connected",
	                       "cairn_db_reconnects_total",
	                       "cairn_shards_owned",
	                       "cairn_runs_started_total",
	                       "cairn_runs_completed_total",
	                       "cairn_runs_failed_total",
	                       "cairn_step_duration_seconds",
	                       "cairn_queue_depth",
	                       "cairn_detachments_total",
	                       "cairn_executors_idle",
	                       "cairn_ready",
	                       "cairn_backlog_publisher"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char help[128], type[128];
		snprintf(help, sizeof help, "# HELP %s ", names[i]);
		snprintf(type, sizeof type, "# TYPE %s ", names[i]);
		cr_assert(strstr(body, help) && strstr(body, type), "%s lacks HELP/TYPE", names[i]);
	}
	cr_assert(strstr(body, "cairn_db_connected 1\n"), "%s", body);
	cr_assert(
	    strstr(body, "cairn_step_duration_seconds_bucket{workflow=\"other\",le=\"+Inf\"} 0\n"),
	    "%s", body);
	cr_assert(strstr(body, "cairn_ready 1\n"), "%s", body);
	free(body);
	free(ct);

	cr_assert_eq(thttp(port, "GET", "/status", &body, &ct), 200);
	cr_assert(strstr(ct, "application/json"), "%s", ct);
	cJSON *j = cJSON_Parse(body);
	cr_assert(j, "not JSON: %s", body);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "version")->valuestring, "0.1.0");
	cr_assert_str_eq(cJSON_GetObjectItem(j, "state")->valuestring, "running");
	cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "runner")));
	cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "config")));
	cr_assert(cJSON_IsArray(cJSON_GetObjectItem(j, "shards")));
	cJSON_Delete(j);
	free(body);
	free(ct);

	cr_assert_eq(thttp(port, "GET", "/nope", NULL, NULL), 404);
	cr_assert_eq(thttp(port, "POST", "/healthz", NULL, NULL), 405);
	/* The relay's pokes: accepted, and nothing else under POST. A wake-up
	 * may name up to 16 runs, as decimal ids. */
	static const struct {
		const char *path;
		long status;
	} pokes[] = {
	    {"/wake", 204},
	    {"/wake/cancel", 204},
	    {"/members/0123456789abcdef", 204},
	    {"/members/not-hex", 405},
	    {"/wake/now", 405},
	    {"/wake/7", 204},
	    {"/wake/cancel/7,8,9", 204},
	    {"/wake/1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", 204},
	    {"/wake/1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", 405},
	    {"/wake/", 405},
	    {"/wake/1,,2", 405},
	    {"/wake/1,", 405},
	    {"/wake/-1", 405},
	    {"/wake/9999999999999999999", 405},
	    {"/wakeful", 405},
	};
	for (size_t i = 0; i < sizeof pokes / sizeof pokes[0]; i++) {
		long got = thttp(port, "POST", pokes[i].path, NULL, NULL);
		cr_assert_eq(got, pokes[i].status, "POST %s: %ld, expected %ld", pokes[i].path, got,
		             pokes[i].status);
	}
	cr_assert_eq(thttp(port, "DELETE", "/status", NULL, NULL), 405);
	cr_assert_eq(thttp(port, "HEAD", "/healthz", NULL, NULL), 200);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

static int port_owns_all(void *arg)
{
	return tmetric(*(int *)arg, "cairn_shards_owned") == 4096;
}

Test(worker, status_lists_owned_shards_as_ranges_and_stays_small)
{
	const char *db = tdb_new_migrated_shards(4096);
	int port;
	pid_t pid = tworker_start(db, &port, NULL, NULL);
	cr_assert(twait(port_owns_all, &port, 30000), "the worker never owned the 4096 shards");
	char *body;
	cr_assert_eq(thttp(port, "GET", "/status", &body, NULL), 200);
	fprintf(stderr, "test_worker: /status with 4096 shards owned: %zu bytes\n", strlen(body));
	cr_assert_lt(strlen(body), 8192, "/status is %zu bytes", strlen(body));
	cJSON *j = cJSON_Parse(body);
	cr_assert(j, "not JSON: %s", body);
	cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shards"), 0);
	cr_assert_str_eq(cJSON_GetObjectItem(g, "owned")->valuestring, "0-4095");
	cr_assert_eq(cJSON_GetObjectItem(g, "count")->valueint, 4096);
	cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "epochs"), 0);
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "epoch")), "%s", body);
	cr_assert_str_eq(cJSON_GetObjectItem(e, "shards")->valuestring, "0-4095", "%s", body);
	cJSON_Delete(j);
	free(body);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

#define TOKEN "s3cr3t-t0ken-0123456789"

Test(worker, the_http_token_guards_every_page_but_the_probes_and_the_relay_sends_it)
{
	const char *db = tdb_new_migrated_shards(64);
	int ports[2];
	pid_t pids[2];
	for (int i = 0; i < 2; i++)
		pids[i] = tworker_start(db, &ports[i], NULL, "CAIRN_HTTP_TOKEN=" TOKEN,
		                        "CAIRN_POLL_INTERVAL=1h", NULL);
	int port = ports[0];
	cr_assert(thttp_wait(port, "/readyz", 200, 30000), "the probes need no token");
	cr_assert_eq(thttp(port, "GET", "/healthz", NULL, NULL), 200);
	static const char *const guarded[][2] = {
	    {"GET", "/status"}, {"GET", "/metrics"}, {"POST", "/wake"}, {"GET", "/nope"}};
	for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++) {
		const char *m = guarded[i][0], *p = guarded[i][1];
		char *body = NULL;
		cr_assert_eq(thttp(port, m, p, &body, NULL), 401, "%s %s without a token", m, p);
		cr_assert(strstr(body, "CAIRN_HTTP_TOKEN"), "%s", body);
		free(body);
		cr_assert_eq(thttp_auth(port, m, p, "Bearer wrong-token-0123456789", NULL, NULL),
		             401, "%s %s with a wrong token", m, p);
		cr_assert_eq(thttp_auth(port, m, p, "Basic " TOKEN, NULL, NULL), 401);
	}
	cr_assert_eq(thttp_auth(port, "GET", "/status", "Bearer " TOKEN, NULL, NULL), 200);
	cr_assert_eq(thttp_auth(port, "GET", "/metrics", "bearer " TOKEN, NULL, NULL), 200);
	cr_assert_eq(thttp_auth(port, "POST", "/wake", "Bearer " TOKEN, NULL, NULL), 204);
	char *status = NULL;
	cr_assert_eq(thttp_auth(port, "GET", "/status", "Bearer " TOKEN, &status, NULL), 200);
	cr_assert(!strstr(status, TOKEN) && strstr(status, "\"CAIRN_HTTP_TOKEN\":\"****\""), "%s",
	          status);
	free(status);
	/* The relay wakes the other worker over HTTP with the token: with a 1 h
	 * poll, runs of both workers' shards start only because it does. */
	cr_assert(thttp_wait(ports[1], "/readyz", 200, 30000));
	PGconn *c = tdb_connect(db);
	cr_assert(tdb_wait_at_least(c,
	                            "SELECT count(DISTINCT owner) FROM cairn.shard_leases l JOIN "
	                            "cairn.runners r ON r.id = l.owner",
	                            2, 30000),
	          "the shards were never split between the two workers");
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	for (int i = 0; i < 40; i++) {
		cairn_enqueue_opts o = {.input = "{}"};
		cairn_enqueued e;
		cr_assert_eq(cairn_enqueue(cl, "noop", &o, &e), CAIRN_OK, "%s",
		             cairn_client_errmsg(cl));
	}
	cr_assert(tdb_wait_at_least(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                            40, 20000),
	          "runs waited for the 1 h poll: the relay's wake-ups were refused");
	cairn_client_free(cl);
	PQfinish(c);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(tworker_stop(pids[i], SIGTERM, 30000), 0);
}

Test(worker, status_shows_no_secret_of_the_connection)
{
	const char *db = tdb_new_migrated();
	char url[2200];
	snprintf(url, sizeof url, "%s password=hunter2 sslpassword=sw0rdfish", db);
	int port;
	pid_t pid = tworker_start(url, &port, NULL, NULL);
	cr_assert(thttp_wait(port, "/healthz", 200, 30000));
	char *body;
	cr_assert_eq(thttp(port, "GET", "/status", &body, NULL), 200);
	cr_assert(!strstr(body, "hunter2") && !strstr(body, "sw0rdfish") &&
	              !strstr(body, "password"),
	          "%s", body);
	free(body);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

Test(worker, sigterm_drains_and_exits_zero_within_the_timeout)
{
	const char *db = tdb_new_migrated();
	int port;
	char log[64];
	tlog_file(log);
	pid_t pid = tworker_start(db, &port, log, "CAIRN_SHUTDOWN_TIMEOUT=5s", NULL);
	cr_assert(thttp_wait(port, "/readyz", 200, 30000));
	int64_t t0 = tnow_ms();
	int rc = tworker_stop(pid, SIGTERM, 30000);
	int64_t took = tnow_ms() - t0;
	char *text = tfile_take(log);
	cr_assert_eq(rc, 0, "exit %d:\n%s", rc, text);
	fprintf(stderr, "test_worker: an idle worker drained in %lld ms\n", (long long)took);
	/* Within the timeout: nothing was cut off and no loop outlived it (the
	 * worker says so; the elapsed time is only printed). */
	cr_assert(strstr(text, "level=info msg=\"draining\" reason=SIGTERM"), "%s", text);
	cr_assert(strstr(text, "msg=\"stopped\" finished_cleanly=") && strstr(text, " cut_off=0"),
	          "%s", text);
	cr_assert(!strstr(text, "shutdown timeout passed"), "%s", text);
	free(text);
}

static int readyz_says_unreachable(void *arg)
{
	char *body;
	long st = thttp(*(int *)arg, "GET", "/readyz", &body, NULL);
	int ok = st == 503 && strstr(body, "database unreachable");
	free(body);
	return ok;
}

Test(worker, unreachable_database_keeps_it_alive_and_not_ready_until_it_appears)
{
	const char *db = tdb_new_migrated();
	/* The same server, a database that does not exist yet. */
	char late[2200], name[64];
	snprintf(name, sizeof name, "cairn_late_%d", (int)getpid());
	snprintf(late, sizeof late, "%s dbname=%s", db, name);
	int port;
	char log[64];
	tlog_file(log);
	pid_t pid = tworker_start(late, &port, log, "CAIRN_HEARTBEAT_INTERVAL=100ms",
	                          "CAIRN_RUNNER_TTL=1s", NULL);
	cr_assert(thttp_wait(port, "/healthz", 200, 30000), "healthz not 200 without a database");
	cr_assert(twait(readyz_says_unreachable, &port, 30000),
	          "readyz does not say the database is unreachable");
	cr_assert_eq(thttp(port, "GET", "/healthz", NULL, NULL), 200);

	PGconn *c = tdb_connect(db);
	char sql[128];
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
	tdb_exec(c, sql);
	/* Reachable but not migrated: still not ready, and it says why. */
	cr_assert(thttp_wait(port, "/readyz", 503, 20000));
	char mig[2300];
	snprintf(mig, sizeof mig, "%s", late);
	cr_assert_eq(tcli(mig, NULL, NULL, "migrate", NULL), 0);
	cr_assert(thttp_wait(port, "/readyz", 200, 30000),
	          "never became ready after the database appeared");
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", name);
	tdb_exec(c, sql);
	PQfinish(c);

	/* Each state change is logged once, not once per attempt. */
	char *text = tfile_take(log);
	int unreachable = 0;
	for (const char *p = text; (p = strstr(p, "database unreachable")); p++)
		unreachable++;
	cr_assert_eq(unreachable, 1, "logged %d times:\n%s", unreachable, text);
	cr_assert(strstr(text, "database connected"), "%s", text);
	free(text);
}

Test(worker, shard_count_mismatch_stops_with_a_clear_error)
{
	const char *db = tdb_new_migrated();
	char log[64];
	tlog_file(log);
	pid_t pid = tworker_spawn(db, log, "CAIRN_SHARDS=64", NULL);
	int rc = tworker_stop(pid, 0, 30000);
	cr_assert_eq(rc, 2, "exit %d: a configuration error", rc);
	char *text = tfile_take(log);
	cr_assert(
	    strstr(text, "CAIRN_SHARDS is 64 but the database records shards_per_group = 4096"),
	    "%s", text);
	free(text);
}

/* A database migrated by a newer cairn: the worker refuses to start (exit
 * 2), naming both versions; the CLI works and warns. */
Test(worker, a_schema_newer_than_the_binary_stops_the_worker_and_the_cli_warns)
{
	const char *db = tdb_new_migrated();
	PGconn *c = tdb_connect(db);
	tdb_exec(c, "INSERT INTO cairn.schema_migrations (version, name, checksum) "
	            "VALUES (9999, 'from_the_future', repeat('0', 64))");
	PQfinish(c);
	char log[64];
	tlog_file(log);
	pid_t pid = tworker_spawn(db, log, NULL);
	int rc = tworker_stop(pid, 0, 30000);
	char *text = tfile_take(log);
	cr_assert_eq(rc, 2, "exit %d:\n%s", rc, text);
	cr_assert(strstr(text, "the database's schema is at migration 9999, newer than this "
	                       "cairn-worker, which knows migrations up to 00"),
	          "%s", text);
	free(text);
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "list", NULL), 0, "%s", err);
	cr_assert(strstr(err, "warning: the database's schema is at migration 9999"), "%s", err);
	free(out);
	free(err);
}

static int run_worker_cmd(char **out, char **err, const char *env, const char *arg)
{
	int po[2], pe[2];
	cr_assert(pipe(po) == 0 && pipe(pe) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		setenv("DATABASE_URL", "postgresql://app:s3cret@db.example/cairn", 1);
		if (env)
			putenv((char *)env);
		execl(tbin("cairn-worker"), "cairn-worker", arg, (char *)NULL);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	char bufo[65536] = "", bufe[8192] = "";
	ssize_t r;
	size_t no = 0, ne = 0;
	while ((r = read(po[0], bufo + no, sizeof bufo - 1 - no)) > 0)
		no += (size_t)r;
	while ((r = read(pe[0], bufe + ne, sizeof bufe - 1 - ne)) > 0)
		ne += (size_t)r;
	close(po[0]);
	close(pe[0]);
	int st;
	waitpid(pid, &st, 0);
	*out = strdup(bufo);
	*err = strdup(bufe);
	return WEXITSTATUS(st);
}

Test(worker, check_config_prints_effective_settings_without_the_password)
{
	char *out, *err;
	cr_assert_eq(run_worker_cmd(&out, &err, "CAIRN_CONCURRENCY=4", "--check-config"), 0, "%s",
	             err);
	cr_assert(strstr(out, "CAIRN_CONCURRENCY=4\n"), "%s", out);
	cr_assert(strstr(out, "DATABASE_URL=host=db.example dbname=cairn user=app\n") &&
	              !strstr(out, "s3cret") && !strstr(out, "password"),
	          "%s", out);
	free(out);
	free(err);
}

Test(worker, bad_setting_stops_before_doing_anything)
{
	char *out, *err;
	cr_assert_eq(run_worker_cmd(&out, &err, "CAIRN_CONCURRENCY=zero", NULL), 2);
	cr_assert(strstr(err, "invalid value for CAIRN_CONCURRENCY: \"zero\": expected an integer "
	                      "from 1 to 1024"),
	          "%s", err);
	free(out);
	free(err);
	cr_assert_eq(run_worker_cmd(&out, &err, NULL, "--bogus"), 2);
	cr_assert(strstr(err, "unknown option \"--bogus\""), "%s", err);
	free(out);
	free(err);
}

/* The collapse of a fleet whose runners advertised ":PORT" to each other's
 * health checkers cannot start: the worker refuses the address. */
Test(worker, listening_on_every_interface_without_an_advertised_address_stops_with_a_clear_error)
{
	char *out, *err;
	cr_assert_eq(run_worker_cmd(&out, &err, "CAIRN_HTTP_ADDR=:8080", NULL), 2, "%s", err);
	cr_assert(strstr(err, "CAIRN_ADVERTISE_ADDR is not set and CAIRN_HTTP_ADDR \":8080\" "
	                      "listens on every interface"),
	          "%s", err);
	free(out);
	free(err);
}

Test(worker, help_and_version)
{
	char *out, *err;
	cr_assert_eq(run_worker_cmd(&out, &err, NULL, "--help"), 0);
	cr_assert(strstr(out, "CAIRN_SHUTDOWN_TIMEOUT") && strstr(out, "--check-config"), "%s",
	          out);
	free(out);
	free(err);
	cr_assert_eq(run_worker_cmd(&out, &err, NULL, "--version"), 0);
	cr_assert(strstr(out, "cairn-worker 0.1.0"), "%s", out);
	free(out);
	free(err);
}

/* /status lists the shards owned with their epochs, the singletons running
 * here and the rebalance rounds that gave them. */
static int status_has_all_shards(void *arg)
{
	int port = *(int *)arg;
	char *body = NULL;
	int ok = 0;
	if (thttp(port, "GET", "/status", &body, NULL) == 200) {
		cJSON *j = cJSON_Parse(body);
		cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shards"), 0);
		ok = g && cJSON_GetObjectItem(g, "count")->valueint == 64 &&
		     cJSON_GetArraySize(cJSON_GetObjectItem(j, "singletons")) == 5;
		cJSON_Delete(j);
	}
	free(body);
	return ok;
}

Test(worker, status_lists_owned_shards_with_epochs_singletons_and_rebalances)
{
	const char *db = tdb_new_migrated_shards(64);
	int port;
	pid_t pid = tworker_start(db, &port, NULL, "CAIRN_REBALANCE_INTERVAL=100ms", NULL);
	cr_assert(twait(status_has_all_shards, &port, 30000),
	          "the worker never owned all 64 shards");
	char *body;
	cr_assert_eq(thttp(port, "GET", "/status", &body, NULL), 200);
	cJSON *j = cJSON_Parse(body);
	cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shards"), 0);
	cr_assert_str_eq(cJSON_GetObjectItem(g, "group")->valuestring, "default");
	cr_assert_str_eq(cJSON_GetObjectItem(g, "owned")->valuestring, "0-63");
	cJSON *it;
	int epochs = 0;
	PGconn *c = tdb_connect(db);
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(g, "epochs"))
	{
		/* The epochs /status shows are the ones in the database. */
		int64_t epoch = (int64_t)cJSON_GetObjectItem(it, "epoch")->valuedouble;
		const char *shards = cJSON_GetObjectItem(it, "shards")->valuestring;
		cr_assert_geq(epoch, 1);
		cr_assert_eq(
		    tdb_intf(c,
		             "SELECT count(*) FROM cairn.shard_leases WHERE owner IS NOT NULL "
		             "AND epoch = %" PRId64 " AND shard = 0",
		             epoch),
		    strncmp(shards, "0", 1) == 0 &&
		        (shards[1] == '-' || shards[1] == ',' || !shards[1]),
		    "epoch %" PRId64 ": %s", epoch, shards);
		epochs++;
	}
	cr_assert_geq(epochs, 1, "%s", body);
	/* The built-ins, in the order they were registered. */
	static const char *const builtins[] = {"cairn.relay", "cairn.scheduler", "cairn.health",
	                                       "cairn.janitor", "cairn.backlog"};
	int k = 0;
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "singletons"))
	{
		cr_assert_lt(k, 5);
		cr_assert_str_eq(cJSON_GetObjectItem(it, "name")->valuestring, builtins[k]);
		k++;
	}
	cJSON *rb = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "rebalances"), 0);
	cr_assert(rb, "no rebalance round recorded: %s", body);
	cr_assert_eq(cJSON_GetObjectItem(rb, "acquired")->valueint, 64);
	cr_assert_str_eq(cJSON_GetObjectItem(rb, "acquired_shards")->valuestring, "0-63");
	cr_assert_str_eq(cJSON_GetObjectItem(rb, "released_shards")->valuestring, "");
	cr_assert_str_eq(cJSON_GetObjectItem(rb, "group")->valuestring, "default");
	cr_assert(cJSON_IsArray(cJSON_GetObjectItem(j, "in_flight")));
	cr_assert_eq(
	    tdb_int(
	        c,
	        "SELECT count(*) FROM cairn.shard_leases WHERE owner IS NOT NULL AND epoch >= 1"),
	    64);
	PQfinish(c);
	cJSON_Delete(j);
	free(body);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

/* A plugin that cannot be loaded stops the worker before it does anything,
 * naming the path and the reason. */
static void refuses_plugin(const char *path, const char *why)
{
	const char *db = tdb_new_migrated();
	char log[64], env[1100];
	tlog_file(log);
	snprintf(env, sizeof env, "CAIRN_PLUGINS=%s", path);
	pid_t pid = tworker_spawn(db, log, env, NULL);
	int rc = tworker_stop(pid, 0, 30000);
	char *text = tfile_take(log);
	/* A configuration error: the systemd unit does not restart on 2. */
	cr_assert_eq(rc, 2, "exit %d:\n%s", rc, text);
	cr_assert(strstr(text, path) && strstr(text, why), "%s", text);
	free(text);
}

Test(worker, unloadable_plugins_stop_the_worker_naming_path_and_reason)
{
	refuses_plugin("/nonexistent/flows.so", "cannot load it");
	/* A shared object without cairn_plugin_init: libpq, found where this
	 * process loaded it from (no architecture-specific path). */
	Dl_info info;
	cr_assert(dladdr((void *)PQlibVersion, &info) && info.dli_fname &&
	              info.dli_fname[0] == '/' && strstr(info.dli_fname, ".so"),
	          "cannot tell where libpq was loaded from");
	refuses_plugin(info.dli_fname, "does not export cairn_plugin_init");
}

/* The built-in singletons at work: the janitor deletes finished runs older
 * than CAIRN_RETENTION (and only those), the health checker removes runners
 * whose heartbeat is older than twice the TTL. */
Test(worker, janitor_deletes_old_finished_runs_and_health_checker_removes_dead_runners)
{
	const char *db = tdb_new_migrated_shards(64);
	PGconn *c = tdb_connect(db);
	tdb_exec(
	    c, "INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, status, input, "
	       "finished_at) VALUES "
	       "(cairn.new_run_id(1), 'noop', 'old-done', 'default', 1, 'completed', 'null', now() "
	       "- interval '2 days'), "
	       "(cairn.new_run_id(2), 'noop', 'new-done', 'default', 2, 'completed', 'null', now() "
	       "- interval '1 hour'), "
	       "(cairn.new_run_id(3), 'noop', 'old-live', 'default', 3, 'sleeping', 'null', NULL)");
	tdb_exec(
	    c,
	    "UPDATE cairn.runs SET created_at = now() - interval '3 days' WHERE key LIKE 'old-%'");
	/* The ghost's address refuses connections for the whole test. */
	int ghost_fd;
	int ghost_port = tclosed_port(&ghost_fd);
	char sql[512];
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.runners (name, address, version, groups, weight, lease_pid, "
	         "heartbeat_at) VALUES ('ghost:1', '127.0.0.1:%d', 'x', '{default}', 100, 1, "
	         "now() - interval '1 hour')",
	         ghost_port);
	tdb_exec(c, sql);
	pid_t pid = tworker_start(db, NULL, NULL, "CAIRN_RETENTION=1d", "CAIRN_RUNNER_TTL=2s",
	                          "CAIRN_HEARTBEAT_INTERVAL=200ms", NULL);
	cr_assert(tdb_wait_at_least(c, "SELECT 1 - count(*) FROM cairn.runs WHERE key = 'old-done'",
	                            1, 30000),
	          "the janitor never deleted the old finished run");
	cr_assert(tdb_wait_at_least(
	              c, "SELECT 1 - count(*) FROM cairn.runners WHERE name = 'ghost:1'", 1, 30000),
	          "the health checker never removed the dead runner");
	cr_assert_eq(
	    tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE key IN ('new-done', 'old-live')"), 2,
	    "the janitor deleted a run it must keep");
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runners"), 1,
	             "the live runner was removed");
	PQfinish(c);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	close(ghost_fd);
}

/* Deleting a run deletes its signals (the foreign key), found by run: the
 * janitor deletes 1,000 old runs beside 20,000 consumed signals of runs it
 * keeps without reading them (each deleted run read the whole table when
 * only the unconsumed signals were indexed by run). */
Test(worker, the_janitor_deletes_old_runs_and_their_signals_without_reading_every_signal)
{
	enum { OLD = 1000, KEPT = 20000 };
	const char *db = tdb_new_migrated_shards(64);
	PGconn *c = tdb_connect(db);
	tdb_intf(c,
	         "WITH i AS (INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, "
	         "                                   status, input, finished_at) "
	         "  SELECT cairn.new_run_id(g %% 64), cairn.part_of(g %% 64), 'noop', "
	         "         CASE WHEN g <= %d THEN 'old-' ELSE "
	         "'kept-' END || g, "
	         "         'default', g %% 64, 'completed', 'null', now() - CASE WHEN g <= %d "
	         "         THEN interval '2 days' ELSE interval '1 hour' END "
	         "  FROM generate_series(1, %d) g RETURNING 1) SELECT count(*) FROM i",
	         OLD, OLD, OLD + KEPT);
	tdb_exec(c, "INSERT INTO cairn.signals (run_id, part, name, payload, consumed_by_seq) "
	            "SELECT id, part, 'approval', '{}', 0 FROM cairn.runs");
	tdb_exec(c, "ANALYZE cairn.signals");
	const char *read = "SELECT seq_tup_read FROM pg_stat_user_tables "
	                   "WHERE relid = 'cairn.signals'::regclass";
	/* On Citus the signals are read on the worker nodes: the coordinator's
	 * pg_stat_user_tables counts none of it (what is deleted is checked). */
	int citus = tdb_on_citus();
	int64_t before = citus ? 0 : tdb_stat_after_sessions(c, NULL, read, 10000);
	pid_t pid = tworker_start(db, NULL, NULL, "CAIRN_RETENTION=1d", NULL);
	cr_assert(tdb_wait_at_leastf(c, OLD, 60000,
	                             "SELECT %d - count(*) FROM cairn.runs WHERE key LIKE 'old-%%'",
	                             OLD),
	          "the janitor did not delete the old runs");
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	int64_t after = citus ? 0 : tdb_stat_after_sessions(c, NULL, read, 10000);
	cr_assert(before >= 0 && after >= 0, "a session of the test database did not end");
	if (!citus) {
		fprintf(stderr,
		        "test_worker: deleting %d runs read %" PRId64
		        " signals in sequential scans\n",
		        OLD, after - before);
		cr_assert_lt(after - before, KEPT, "deleting %d runs read %" PRId64 " signals", OLD,
		             after - before);
	}
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.signals"), KEPT,
	             "the old runs' signals were not deleted, or the kept ones were");
	PQfinish(c);
}

/* ------------------------------------------------------------- embedded */

static int embedded_echo(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	*output = cJSON_Duplicate(input, 1);
	return CAIRN_OK;
}

static void *embedded_run(void *w)
{
	return (void *)(intptr_t)cairn_worker_run(w);
}

Test(worker, an_embedded_worker_built_from_settings_runs_a_workflow_and_returns_on_stop)
{
	const char *db = tdb_new_migrated();
	const char *settings[] = {"CAIRN_HTTP_ADDR=127.0.0.1:0", "CAIRN_CONCURRENCY=2",
	                          "CAIRN_LOG_LEVEL=error", "CAIRN_REBALANCE_INTERVAL=100ms", NULL};
	cairn_worker_settings ws = {.database_url = db, .settings = settings};
	cairn_worker *w;
	cr_assert_eq(cairn_worker_new_with(&ws, &w), CAIRN_OK, "%s", cairn_worker_errmsg(w));
	cr_assert_eq(cairn_workflow_register(w, "embedded.echo", embedded_echo, NULL), CAIRN_OK);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, embedded_run, w), 0);

	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK);
	cairn_enqueue_opts o = {.input = "{\"x\": 1}"};
	cairn_enqueued r;
	cr_assert_eq(cairn_enqueue(c, "embedded.echo", &o, &r), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_wait(c, r.id, 60000), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_run *run;
	cr_assert_eq(cairn_run_get(c, r.id, &run), CAIRN_OK);
	cr_assert_str_eq(run->status, "completed");
	cr_assert_str_eq(run->output, "{\"x\": 1}");
	cairn_run_free(run);
	cairn_enqueued_clear(&r);
	cairn_client_free(c);

	/* Stopping returns from cairn_worker_run; the process goes on. */
	cairn_worker_stop(w);
	void *rc;
	cr_assert_eq(pthread_join(t, &rc), 0);
	cr_assert_eq((intptr_t)rc, CAIRN_OK, "cairn_worker_run returned %d: %s", (int)(intptr_t)rc,
	             cairn_worker_errmsg(w));
	cairn_worker_free(w);
}

static void refused_settings(const char *const *settings, const char *db, const char *says)
{
	cairn_worker_settings ws = {.database_url = db, .settings = settings};
	cairn_worker *w;
	cr_assert_eq(cairn_worker_new_with(&ws, &w), CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), says), "\"%s\" lacks \"%s\"",
	          cairn_worker_errmsg(w), says);
	cairn_worker_free(w);
}

Test(worker, settings_of_an_embedded_worker_are_validated_by_name)
{
	const char *typo[] = {"CAIRN_CONCURENCY=8", NULL};
	refused_settings(typo, "dbname=x",
	                 "invalid setting \"CAIRN_CONCURENCY=8\": expected NAME=value");
	const char *no_value[] = {"CAIRN_CONCURRENCY", NULL};
	refused_settings(no_value, "dbname=x", "invalid setting \"CAIRN_CONCURRENCY\"");
	const char *zero[] = {"CAIRN_CONCURRENCY=0", NULL};
	refused_settings(zero, "dbname=x",
	                 "invalid value for CAIRN_CONCURRENCY: \"0\": expected an integer from 1");
	refused_settings(NULL, NULL, "DATABASE_URL is not set");
	/* The environment is read only when asked. */
	setenv("CAIRN_CONCURRENCY", "not-a-number", 1);
	cairn_worker_settings ws = {.database_url = "dbname=x"};
	cairn_worker *w;
	cr_assert_eq(cairn_worker_new_with(&ws, &w), CAIRN_OK, "%s", cairn_worker_errmsg(w));
	cairn_worker_free(w);
	ws.from_environment = 1;
	cr_assert_eq(cairn_worker_new_with(&ws, &w), CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), "CAIRN_CONCURRENCY"), "%s",
	          cairn_worker_errmsg(w));
	cairn_worker_free(w);
	unsetenv("CAIRN_CONCURRENCY");
}

static char slow_logs[3][64];
static int slow_ports[3];

/* Each poller has run its claims more than once: none is planned any more. */
static int every_poller_claimed_thrice(void *arg)
{
	(void)arg;
	for (int i = 0; i < 3; i++)
		if (tmetric(slow_ports[i], "cairn_claims_total{of=\"shards\"}") < 3)
			return 0;
	return 1;
}

/* Autovacuum leaves cairn.runs and cairn.messages alone: only the
 * pollers analyze them. */
static void only_pollers_analyze(PGconn *pg)
{
	tdb_exec(pg, "ALTER TABLE cairn.runs SET (autovacuum_enabled = false)");
	tdb_exec(pg, "ALTER TABLE cairn.messages SET (autovacuum_enabled = false)");
}

/* Holds a share lock on cairn.runs until the claims of n pollers have
 * waited for it together over 50 ms, then lets it go: n slow claims. */
static void slow_claims(PGconn *pg, PGconn *lk, int n)
{
	tdb_exec(lk, "BEGIN");
	tdb_exec(lk, "LOCK TABLE cairn.runs IN SHARE MODE");
	cr_assert(tdb_wait_at_least(pg,
	                            "SELECT count(*) FROM pg_stat_activity "
	                            "WHERE application_name = 'cairn-worker poll' "
	                            "AND wait_event_type = 'Lock' "
	                            "AND now() - query_start > interval '50 ms'",
	                            n, 60000),
	          "%d pollers never waited for the lock together", n);
	tdb_exec(lk, "COMMIT");
}

/* The pollers of a fleet see the same slow claims at the same time; one
 * ANALYZE serves them all (each used to run its own, and every session then
 * planned again). */
Test(worker, pollers_whose_claims_are_slow_together_refresh_the_statistics_once)
{
	if (tdb_on_citus())
		cr_skip_test("on Citus the rows of cairn.runs and their statistics are the worker "
		             "nodes' (their autovacuum's): the coordinator's pg_class and "
		             "pg_stat_user_tables, which this test reads, count none of them");
	const char *db = tdb_new_migrated();
	PGconn *pg = tdb_connect(db), *lk = tdb_connect(db);
	only_pollers_analyze(pg);
	const char *count = "SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables "
	                    "WHERE relid = 'cairn.runs'::regclass";
	int64_t before = tdb_int(pg, count);
	pid_t w[3];
	for (int i = 0; i < 3; i++)
		w[i] = tworker_start(db, &slow_ports[i], tlog_file(slow_logs[i]),
		                     "CAIRN_POLL_INTERVAL=100ms", NULL);
	cr_assert(twait(every_poller_claimed_thrice, NULL, 30000), "the pollers did not claim");
	/* Every poller's claim waits for the lock for over 50 ms: all slow. */
	slow_claims(pg, lk, 3);
	for (int i = 0; i < 3; i++)
		cr_assert(tfile_wait(slow_logs[i], "slow claim:", 30000),
		          "poller %d did not see its slow claim", i);
	cr_assert_eq(tdb_int(pg, count) - before, 1,
	             "three slow pollers analyzed cairn.runs %" PRId64 " times",
	             tdb_int(pg, count) - before);
	for (int i = 0; i < 3; i++)
		tworker_stop(w[i], SIGTERM, 30000);
	PQfinish(lk);
	PQfinish(pg);
}

static char grow_log[64];
static int grow_port;

static int grow_claimed_thrice(void *arg)
{
	(void)arg;
	return tmetric(grow_port, "cairn_claims_total{of=\"shards\"}") >= 3;
}

/* A slow claim refreshes the statistics at once (not once a minute) when
 * the tables gained more live rows than their statistics counted (a run
 * that started 10,000 children), not when cairn.runs only grew by the dead
 * versions of the rows a drain updated: that ANALYZE changed no plan and
 * made every session plan its statements again, mid-drain. */
Test(worker, a_slow_claim_refreshes_the_statistics_for_new_rows_not_for_dead_ones)
{
	if (tdb_on_citus())
		cr_skip_test("on Citus the rows of cairn.runs and their statistics are the worker "
		             "nodes' (their autovacuum's): the coordinator's pg_class and "
		             "pg_stat_user_tables, which this test reads, count none of them");
	const char *db = tdb_new_migrated();
	PGconn *pg = tdb_connect(db), *lk = tdb_connect(db);
	only_pollers_analyze(pg);
	const char *fill = "INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, status, "
	                   "                        finished_at) "
	                   "SELECT cairn.new_run_id(0), 'ended', '%s' || g, 'default', 0, "
	                   "       'completed', now() "
	                   "FROM generate_series(1, 3000) g";
	char sql[512];
	snprintf(sql, sizeof sql, fill, "a");
	tdb_exec(pg, sql);
	const char *count = "SELECT analyze_count FROM pg_stat_user_tables "
	                    "WHERE relid = 'cairn.runs'::regclass";
	int64_t before = tdb_int(pg, count);
	/* As it connects, the poller analyzes tables never analyzed. */
	pid_t w =
	    tworker_start(db, &grow_port, tlog_file(grow_log), "CAIRN_POLL_INTERVAL=100ms", NULL);
	cr_assert(twait(grow_claimed_thrice, NULL, 30000), "the poller did not claim");
	cr_assert_eq(tdb_int(pg, count), before + 1, "the connecting poller did not analyze");
	/* Three new versions of every row (a key changed: not updated in place):
	 * the table is over twice its size. */
	for (int i = 0; i < 3; i++)
		tdb_exec(pg, "UPDATE cairn.runs SET key = key || 'x' WHERE workflow = 'ended'");
	cr_assert(tdb_int(pg, "SELECT (pg_relation_size('cairn.runs') > 2 * relpages * 8192)::int "
	                      "FROM pg_class WHERE oid = 'cairn.runs'::regclass"),
	          "the updates did not double cairn.runs");
	slow_claims(pg, lk, 1);
	cr_assert(tfile_wait(grow_log, "refreshed in the last minute", 30000),
	          "the slow claim was not seen, or refreshed the statistics");
	cr_assert_eq(tdb_int(pg, count), before + 1, "dead rows made the poller analyze");
	/* Twice the live rows the statistics counted, and more. */
	snprintf(sql, sizeof sql, fill, "b");
	tdb_exec(pg, sql);
	snprintf(sql, sizeof sql, fill, "c");
	tdb_exec(pg, sql);
	/* The cumulative statistics see the inserts within a second. */
	cr_assert(tdb_wait_at_least(pg,
	                            "SELECT n_live_tup FROM pg_stat_user_tables "
	                            "WHERE relid = 'cairn.runs'::regclass",
	                            9000, 30000),
	          "the inserts never reached the cumulative statistics");
	slow_claims(pg, lk, 1);
	cr_assert(tfile_wait(grow_log, "slow claim: refreshed the statistics", 30000),
	          "new rows did not make the slow claim refresh the statistics");
	cr_assert_eq(tdb_int(pg, count), before + 2);
	tworker_stop(w, SIGTERM, 30000);
	PQfinish(lk);
	PQfinish(pg);
}

/* ------------------------------------------------------- slow clients */

/* The sockets the process pid holds open. */
static int sockets_of(pid_t pid)
{
	char dir[64], path[320], target[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
	int n = 0;
	for (int fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof path, "%s/%d", dir, fd);
		ssize_t l = readlink(path, target, sizeof target - 1);
		if (l > 0 && (target[l] = '\0', strncmp(target, "socket:", 7) == 0))
			n++;
	}
	return n;
}

typedef struct sockets_want {
	pid_t pid;
	int n;
} sockets_want;

static int holds_sockets(void *arg)
{
	sockets_want *w = arg;
	return sockets_of(w->pid) >= w->n;
}

static int slow_all_tried(void *arg)
{
	tslow **t = arg;
	return tslow_tried(t[0]) >= SLOW_CONNS && tslow_tried(t[1]) >= SLOW_CONNS;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The slowloris: hundreds of connections from several addresses,
 * each sending a header line every 2 s, against both workers of a fleet.
 * The probes (from 127.0.0.1, timed on the client's clock) must each be
 * answered within a second, and the relay's wake-ups (runs of both
 * workers' shards with a 1 h poll start only because of them) still
 * arrive. Before the fix the endpoint held 64 connections (16 per address,
 * a thread each, an idle timeout restarted by every line): the probes and
 * the relay's POSTs were refused. */
Test(worker, probes_answer_within_a_second_under_200_slow_connections_and_wake_ups_arrive,
     .timeout = 200)
{
	const char *db = tdb_new_migrated_shards(64);
	int ports[2];
	pid_t pids[2];
	char logs[2][64];
	for (int i = 0; i < 2; i++)
		pids[i] = tworker_start(db, &ports[i], tlog_file(logs[i]), "CAIRN_POLL_INTERVAL=1h",
		                        NULL);
	for (int i = 0; i < 2; i++)
		cr_assert(thttp_wait(ports[i], "/readyz", 200, 30000));
	PGconn *c = tdb_connect(db);
	cr_assert(tdb_wait_at_least(c,
	                            "SELECT count(DISTINCT owner) FROM cairn.shard_leases l JOIN "
	                            "cairn.runners r ON r.id = l.owner",
	                            2, 30000),
	          "the shards were never split between the two workers");
	tslow *slow[2] = {tslow_start(ports[0], SLOW_CONNS, 6, 2000),
	                  tslow_start(ports[1], SLOW_CONNS, 6, 2000)};
	/* Every one has tried to connect; whether the worker took them all is
	 * checked after the probes (before the fix it did not). */
	cr_assert(twait(slow_all_tried, slow, 30000), "the slow connections were not all tried");
	cairn_client *cl;
	cr_assert_eq(cairn_client_open(db, &cl), CAIRN_OK);
	enum { PROBES = 30 };
	int64_t took[PROBES];
	long status[PROBES];
	for (int i = 0; i < PROBES; i++) {
		status[i] =
		    thttp_timed(ports[0], i % 2 ? "/readyz" : "/healthz", NULL, 5000, &took[i]);
		for (int k = 0; k < 2; k++) {
			cairn_enqueue_opts o = {.input = "{}"};
			cairn_enqueued e;
			cr_assert_eq(cairn_enqueue(cl, "noop", &o, &e), CAIRN_OK, "%s",
			             cairn_client_errmsg(cl));
		}
		usleep(250 * 1000); /* the probes' pace, as a prober's period */
	}
	int64_t sorted[PROBES];
	int answered = 0;
	for (int i = 0; i < PROBES; i++)
		answered += status[i] == 200;
	memcpy(sorted, took, sizeof sorted);
	qsort(sorted, PROBES, sizeof sorted[0], cmp_i64);
	fprintf(stderr,
	        "test_worker: %d probes under %d slow connections per worker: %d answered 200, "
	        "max %lld ms, p50 %lld ms; slow connections the workers closed or refused: %d, "
	        "%d\n",
	        PROBES, SLOW_CONNS, answered, (long long)sorted[PROBES - 1],
	        (long long)sorted[PROBES / 2], tslow_closed(slow[0]), tslow_closed(slow[1]));
	for (int i = 0; i < PROBES; i++)
		cr_assert(status[i] == 200 && took[i] < 1000,
		          "probe %d (%s): status %ld after %lld ms, want 200 within 1 s", i,
		          i % 2 ? "/readyz" : "/healthz", status[i], (long long)took[i]);
	/* The attack was held, not refused: the worker has a socket for each. */
	sockets_want w = {pids[0], SLOW_CONNS};
	cr_assert(twait(holds_sockets, &w, 10000), "the worker holds %d sockets, want %d",
	          sockets_of(pids[0]), SLOW_CONNS);
	cr_assert(tdb_wait_at_least(c, "SELECT count(*) FROM cairn.runs WHERE status = 'completed'",
	                            2 * PROBES, 30000),
	          "runs waited for the 1 h poll: the relay's wake-ups did not arrive");
	for (int i = 0; i < 2; i++)
		tslow_stop(slow[i]);
	cairn_client_free(cl);
	PQfinish(c);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(tworker_stop(pids[i], SIGTERM, 30000), 0);
		char *text = tfile_take(logs[i]);
		cr_assert(!strstr(text, "cannot wake a runner"), "worker %d:\n%s", i, text);
		free(text);
	}
}

static int slow_closed_once(void *arg)
{
	return tslow_closed(arg) > 0;
}

/* libmicrohttpd's idle timeout restarts with every byte: a request whose
 * header lines come one a second must still be cut off at the deadline for
 * its headers (HTTP_HEADERS_MS, 10 s), and not before. */
Test(worker, a_request_whose_headers_trickle_in_is_cut_off_at_its_deadline)
{
	const char *db = tdb_new_migrated();
	int port;
	pid_t pid = tworker_start(db, &port, NULL, NULL);
	cr_assert(thttp_wait(port, "/healthz", 200, 30000));
	int64_t t0 = tnow_ms();
	tslow *t = tslow_start(port, 1, 1, 1000);
	int closed = twait(slow_closed_once, t, 25000);
	int64_t took = tnow_ms() - t0;
	tslow_stop(t);
	cr_assert(closed, "a request trickling its headers was still open after %lld ms",
	          (long long)took);
	cr_assert(took >= 9500 && took < 20000, "cut off after %lld ms, want about 10 s",
	          (long long)took);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

/* ----------------------------------------------------- DNS rebinding */

static long with_host(int port, const char *method, const char *path, const char *host)
{
	char h[128];
	snprintf(h, sizeof h, "Host: %s", host);
	const char *headers[] = {h, "Authorization: Bearer " TOKEN, NULL};
	return thttp_req(port, method, path, headers, strcmp(method, "POST") ? NULL : "", NULL,
	                 NULL);
}

/* The worker's endpoint refuses a Host that is not an IP address,
 * localhost, its advertised host or a name of CAIRN_HTTP_HOSTS with 421 on
 * every path (even with the token: a rebound page may be in a browser that
 * has it); the probes still answer a pod IP (Kubernetes, Prometheus). */
Test(worker, a_request_naming_another_host_is_refused_on_every_path)
{
	const char *db = tdb_new_migrated();
	int port;
	pid_t pid = tworker_start(db, &port, NULL, "CAIRN_HTTP_TOKEN=" TOKEN,
	                          "CAIRN_ADVERTISE_ADDR=worker-7.cairn.test:0",
	                          "CAIRN_HTTP_HOSTS=metrics.example,w7", NULL);
	cr_assert(thttp_wait(port, "/readyz", 200, 30000));
	char attacker[64];
	snprintf(attacker, sizeof attacker, "rebind.attacker.example:%d", port);
	static const char *const paths[][2] = {
	    {"GET", "/healthz"},      {"GET", "/readyz"},    {"GET", "/metrics"},
	    {"GET", "/status"},       {"HEAD", "/healthz"},  {"POST", "/wake"},
	    {"POST", "/members/x"},   {"GET", "/v1/runs/1"}, {"POST", "/v1/runs"},
	    {"POST", "/signal/AAAA"}, {"GET", "/nope"},      {"PUT", "/status"}};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		cr_assert_eq(with_host(port, paths[i][0], paths[i][1], attacker), 421,
		             "%s %s with Host %s", paths[i][0], paths[i][1], attacker);
	char allowed[6][64];
	snprintf(allowed[0], 64, "127.0.0.1:%d", port);
	snprintf(allowed[1], 64, "10.244.1.7:%d", port);
	snprintf(allowed[2], 64, "localhost:%d", port);
	snprintf(allowed[3], 64, "worker-7.cairn.test:%d", port);
	snprintf(allowed[4], 64, "METRICS.example:%d", port);
	snprintf(allowed[5], 64, "w7");
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(with_host(port, "GET", "/healthz", allowed[i]), 200, "%s", allowed[i]);
		cr_assert_eq(with_host(port, "GET", "/status", allowed[i]), 200, "%s", allowed[i]);
	}
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
}

Test(worker, a_bad_hosts_list_stops_the_worker_naming_it)
{
	char *out, *err;
	cr_assert_eq(
	    run_worker_cmd(&out, &err, "CAIRN_HTTP_HOSTS=ok.example,bad:80", "--check-config"), 2);
	cr_assert(strstr(err, "invalid value for CAIRN_HTTP_HOSTS: \"bad:80\""), "%s", err);
	free(out);
	free(err);
}
