/*
 * test_chaos.c - the short version of `make chaos`: build/<san>/chaos with a
 * few hundred runs and about twenty seconds of kills, drains and PostgreSQL
 * restarts. The driver starts a PostgreSQL of its own (tests/pg.sh), so
 * restarting it never disturbs the other suites on the harness's server.
 * Passes when the driver's line says lost=0 reexecuted=0 and it exits 0.
 * It has two poison runs, which must end failed as poison
 * (CAIRN_POISON_AFTER); CHAOS_TEST_POISON and CHAOS_TEST_FREEZE override
 * the number of poison runs and whether connections are frozen. The same
 * on a Citus cluster of the driver's own (--citus-sh: a coordinator and two
 * worker nodes, each restarted in turn), when Citus is installed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

/* No per-test .timeout (see test_exec.c); tests/run.sh bounds every test. */
TestSuite(chaos);

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* Runs the chaos driver with the database its script (--pg-sh or
 * --citus-sh) starts, for duration seconds and drain at most, and checks
 * its verdict. */
static void run_chaos(const char *db_flag, const char *script, const char *runs_dflt,
                      const char *drain)
{
	const char *bin = getenv("CAIRN_BIN_DIR");
	cr_assert(bin && *bin, "CAIRN_BIN_DIR is not set: run the tests with `make test`");
	char driver[1100], worker[1100], plugin[1100], sh[1100];
	snprintf(driver, sizeof driver, "%s/../chaos", bin);
	snprintf(worker, sizeof worker, "%s/cairn-worker", bin);
	snprintf(plugin, sizeof plugin, "%s/../tests/plugin_chaos.so", bin);
	snprintf(sh, sizeof sh, "%s/../../../tests/%s", bin, script);

	char runs[64], duration[64], poison[64], freeze[64], drain_env[64];
	snprintf(runs, sizeof runs, "CHAOS_RUNS=%s", env_or("CHAOS_TEST_RUNS", runs_dflt));
	snprintf(duration, sizeof duration, "CHAOS_DURATION=%s",
	         env_or("CHAOS_TEST_DURATION", "20"));
	snprintf(poison, sizeof poison, "CHAOS_POISON=%s", env_or("CHAOS_TEST_POISON", "2"));
	snprintf(freeze, sizeof freeze, "CHAOS_FREEZE=%s", env_or("CHAOS_TEST_FREEZE", "0"));
	snprintf(drain_env, sizeof drain_env, "CHAOS_DRAIN=%s", drain);
	const char *env[] = {runs,
	                     duration,
	                     drain_env,
	                     "CHAOS_WORKERS=3",
	                     "CHAOS_CONCURRENCY=4",
	                     "CHAOS_SHARDS=64",
	                     poison,
	                     freeze,
	                     "CHAOS_RESTART_PG=1",
	                     "CHAOS_SEED", /* a new seed each time; it is printed */
	                     NULL};
	const char *argv[] = {driver, "--worker", worker, "--plugin", plugin, db_flag, sh, NULL};
	int64_t t0 = tnow_ms();
	char *out = NULL, *err = NULL;
	int rc = trun(argv, env, &out, &err);
	fprintf(stderr, "test_chaos: %s(%.1f s in all)\n", out, (double)(tnow_ms() - t0) / 1000);
	cr_assert_eq(rc, 0, "chaos exited %d:\n%s%s", rc, out, err);
	cr_assert(strstr(out, " lost=0 ") && strstr(out, " reexecuted=0 "), "%s%s", out, err);
	free(out);
	free(err);
}

Test(chaos, kills_stops_and_database_restarts_lose_no_run_and_rerun_no_journaled_step)
{
	run_chaos("--pg-sh", "pg.sh", "300", "90");
}

/* On Citus: kill -9 and SIGTERM of workers, restarts of the coordinator and
 * of each worker node (a node's restart cuts off every session through
 * it: a commit, a claim, a heartbeat fail and are tried again). */
Test(chaos, on_citus_kills_stops_and_node_restarts_lose_no_run_and_rerun_no_journaled_step)
{
	const char *src = getenv("CAIRN_SRC_DIR");
	cr_assert(src && *src, "CAIRN_SRC_DIR is not set: run the tests with `make test`");
	char check[1100];
	snprintf(check, sizeof check, "%s/scripts/citus.sh", src);
	const char *argv[] = {"/bin/sh", check, "check", NULL};
	char *out = NULL, *err = NULL;
	int installed = trun(argv, NULL, &out, &err) == 0;
	free(out);
	free(err);
	if (!installed)
		cr_skip_test("Citus is not installed: sh scripts/deps.sh --citus && sh "
		             "scripts/citus.sh build (make test runs them)");
	run_chaos("--citus-sh", "citus.sh", "200", "180");
}
