/*
 * plugin_test.c - a cairn-worker plugin for the singleton tests in
 * test_lease.c, loaded with `cairn-worker --plugin plugin_test.so` (or
 * CAIRN_PLUGINS). It registers two singletons:
 *
 *   test.recorder  while it runs, writes a row to test_singleton every ~20 ms
 *                  under the runner id it started with; consecutive rows of
 *                  one run tile the time it was running (each row's t_start
 *                  is the previous row's t_end), so two runners' rows overlap
 *                  in time exactly when two copies ran at once. With
 *                  CAIRN_TEST_RECORDER_LINGER set it goes on recording after
 *                  its cancel until test_recorder_release has a row (at most
 *                  60 s): a singleton that is slow to stop.
 *   test.crasher   when CAIRN_TEST_CRASHER is set, writes the time to
 *                  test_crasher and fails at once, every time it is started,
 *                  so the restart backoff shows in the gaps between rows;
 *                  otherwise it returns at once.
 *   test.stubborn  registered only when CAIRN_TEST_STUBBORN is set: ignores
 *                  its cancel flag, writing a row to test_stubborn every ~20
 *                  ms until test_stubborn_release has a row.
 *
 * Each call opens and closes its own libpq connection (one connection per
 * thread); nothing is shared between calls.
 */
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn.h"

static const char SQL_RECORDER_TABLE[] = "CREATE TABLE IF NOT EXISTS test_singleton (runner "
                                         "bigint, t_start timestamptz, t_end timestamptz)";
static const char SQL_RECORD[] = "INSERT INTO test_singleton (runner, t_start, t_end) VALUES ($1, "
                                 "$2::timestamptz, clock_timestamp()) "
                                 "RETURNING t_end::text";
static const char SQL_CRASHER_TABLE[] =
    "CREATE TABLE IF NOT EXISTS test_crasher (runner bigint, t timestamptz)";
static const char SQL_CRASH[] =
    "INSERT INTO test_crasher (runner, t) VALUES ($1, clock_timestamp())";

/* Runs sql; 0 if it succeeded. A concurrent CREATE TABLE IF NOT EXISTS may
 * fail with a unique violation, which still leaves the table there. */
static int exec_ok(PGconn *c, const char *sql, int n, const char *const *p, char *out, size_t outn)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, p, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);
	int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
	if (ok && out && PQntuples(r) == 1)
		snprintf(out, outn, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return ok ? 0 : -1;
}

/* "relation already exists, skipping" is expected; keep the worker's log clean. */
static void quiet(void *arg, const char *message) {}

static PGconn *open_table(cairn_singleton *s, const char *create)
{
	PGconn *c = PQconnectdb(cairn_singleton_conninfo(s));
	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, quiet, NULL);
	exec_ok(c, create, 0, NULL, NULL, 0);
	return c;
}

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&t, NULL);
}

/* 1 once the table has a row (the test's go-ahead); creates it if needed. */
static int released(PGconn *c, const char *table)
{
	char sql[160], n[24] = "0";
	snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS %s (t timestamptz)", table);
	exec_ok(c, sql, 0, NULL, NULL, 0);
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
	exec_ok(c, sql, 0, NULL, n, sizeof n);
	return atoi(n) > 0;
}

static int recorder(cairn_singleton *s, void *arg)
{
	(void)arg;
	PGconn *c = open_table(s, SQL_RECORDER_TABLE);
	if (!c)
		return CAIRN_EDB;
	char since[64];
	if (exec_ok(c, "SELECT clock_timestamp()::text", 0, NULL, since, sizeof since) < 0) {
		PQfinish(c);
		return CAIRN_EDB;
	}
	/* The runner this copy started on, even after the runner lost its lease. */
	char runner[24];
	snprintf(runner, sizeof runner, "%lld", (long long)cairn_singleton_runner_id(s));
	int linger = getenv("CAIRN_TEST_RECORDER_LINGER") != NULL;
	int64_t linger_until = 0;
	int rc = CAIRN_OK;
	for (;;) {
		int cancelled = linger_until ? (nap_ms(20), 1) : cairn_singleton_sleep(s, 20);
		const char *p[] = {runner, since};
		if (exec_ok(c, SQL_RECORD, 2, p, since, sizeof since) < 0) {
			rc = CAIRN_EDB;
			break;
		}
		if (!cancelled && !cairn_singleton_cancelled(s))
			continue;
		if (!linger)
			break;
		if (!linger_until)
			linger_until = mono_ms() + 60000;
		if (mono_ms() >= linger_until || released(c, "test_recorder_release"))
			break;
	}
	PQfinish(c);
	return rc;
}

static int stubborn(cairn_singleton *s, void *arg)
{
	(void)arg;
	PGconn *c = open_table(s, "CREATE TABLE IF NOT EXISTS test_stubborn (runner bigint, t "
	                          "timestamptz)");
	if (!c)
		return CAIRN_EDB;
	char runner[24];
	snprintf(runner, sizeof runner, "%lld", (long long)cairn_singleton_runner_id(s));
	const char *p[] = {runner};
	/* Never looks at cairn_singleton_cancelled(). */
	while (!released(c, "test_stubborn_release")) {
		exec_ok(c, "INSERT INTO test_stubborn (runner, t) VALUES ($1, clock_timestamp())",
		        1, p, NULL, 0);
		nap_ms(20);
	}
	PQfinish(c);
	return CAIRN_OK;
}

static int crasher(cairn_singleton *s, void *arg)
{
	(void)arg;
	if (!getenv("CAIRN_TEST_CRASHER"))
		return CAIRN_OK;
	PGconn *c = open_table(s, SQL_CRASHER_TABLE);
	if (c) {
		char runner[24];
		snprintf(runner, sizeof runner, "%lld", (long long)cairn_singleton_runner_id(s));
		const char *p[] = {runner};
		exec_ok(c, SQL_CRASH, 1, p, NULL, 0);
		PQfinish(c);
	}
	return CAIRN_EFAIL;
}

int cairn_plugin_init(cairn_worker *w)
{
	if (cairn_singleton_register(w, "test.recorder", recorder, NULL, NULL) != CAIRN_OK)
		return 1;
	if (cairn_singleton_register(w, "test.crasher", crasher, NULL, NULL) != CAIRN_OK)
		return 1;
	if (getenv("CAIRN_TEST_STUBBORN") &&
	    cairn_singleton_register(w, "test.stubborn", stubborn, NULL, NULL) != CAIRN_OK)
		return 1;
	return 0;
}
