/*
 * test_chaos.c - the short version of `make chaos`: build/<san>/chaos with a
 * few hundred runs and about twenty seconds of kills, drains and PostgreSQL
 * restarts. The driver starts a PostgreSQL of its own (tests/pg.sh), so
 * restarting it never disturbs the other suites on the harness's server.
 * Passes when the driver's line says lost=0 reexecuted=0 and it exits 0.
 * It has two poison runs, which must end failed as poison
 * (CAIRN_POISON_AFTER); CHAOS_TEST_POISON and CHAOS_TEST_FREEZE override
 * the number of poison runs and whether connections are frozen.
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

Test(chaos, kills_stops_and_database_restarts_lose_no_run_and_rerun_no_journaled_step)
{
	const char *bin = getenv("CAIRN_BIN_DIR");
	cr_assert(bin && *bin, "CAIRN_BIN_DIR is not set: run the tests with `make test`");
	char driver[1100], worker[1100], plugin[1100], pgsh[1100];
	snprintf(driver, sizeof driver, "%s/../chaos", bin);
	snprintf(worker, sizeof worker, "%s/cairn-worker", bin);
	snprintf(plugin, sizeof plugin, "%s/../tests/plugin_chaos.so", bin);
	snprintf(pgsh, sizeof pgsh, "%s/../../../tests/pg.sh", bin);

	char runs[64], duration[64], poison[64], freeze[64];
	snprintf(runs, sizeof runs, "CHAOS_RUNS=%s", env_or("CHAOS_TEST_RUNS", "300"));
	snprintf(duration, sizeof duration, "CHAOS_DURATION=%s",
	         env_or("CHAOS_TEST_DURATION", "20"));
	snprintf(poison, sizeof poison, "CHAOS_POISON=%s", env_or("CHAOS_TEST_POISON", "2"));
	snprintf(freeze, sizeof freeze, "CHAOS_FREEZE=%s", env_or("CHAOS_TEST_FREEZE", "0"));
	const char *env[] = {runs,
	                     duration,
	                     "CHAOS_DRAIN=90",
	                     "CHAOS_WORKERS=3",
	                     "CHAOS_CONCURRENCY=4",
	                     "CHAOS_SHARDS=64",
	                     poison,
	                     freeze,
	                     "CHAOS_RESTART_PG=1",
	                     "CHAOS_SEED", /* a new seed each time; it is printed */
	                     NULL};
	const char *argv[] = {driver, "--worker", worker, "--plugin",
	                      plugin, "--pg-sh",  pgsh,   NULL};
	int64_t t0 = tnow_ms();
	char *out = NULL, *err = NULL;
	int rc = trun(argv, env, &out, &err);
	fprintf(stderr, "test_chaos: %s(%.1f s in all)\n", out, (double)(tnow_ms() - t0) / 1000);
	cr_assert_eq(rc, 0, "chaos exited %d:\n%s%s", rc, out, err);
	cr_assert(strstr(out, " lost=0 ") && strstr(out, " reexecuted=0 "), "%s%s", out, err);
	free(out);
	free(err);
}
