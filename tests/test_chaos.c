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

	int po[2], pe[2];
	cr_assert(pipe(po) == 0 && pipe(pe) == 0);
	int64_t t0 = tnow_ms();
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close(po[0]);
		close(pe[0]);
		setenv("CHAOS_RUNS", env_or("CHAOS_TEST_RUNS", "300"), 1);
		setenv("CHAOS_DURATION", env_or("CHAOS_TEST_DURATION", "20"), 1);
		setenv("CHAOS_DRAIN", "90", 1);
		setenv("CHAOS_WORKERS", "3", 1);
		setenv("CHAOS_CONCURRENCY", "4", 1);
		setenv("CHAOS_SHARDS", "64", 1);
		setenv("CHAOS_POISON", env_or("CHAOS_TEST_POISON", "2"), 1);
		setenv("CHAOS_FREEZE", env_or("CHAOS_TEST_FREEZE", "0"), 1);
		setenv("CHAOS_RESTART_PG", "1", 1);
		unsetenv("CHAOS_SEED"); /* a new seed each time; it is printed */
		execl(driver, driver, "--worker", worker, "--plugin", plugin, "--pg-sh", pgsh,
		      (char *)NULL);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	/* The driver's stderr is short (one line per action); read stdout after. */
	char err[65536];
	size_t elen = 0;
	ssize_t n;
	while ((n = read(pe[0], err + elen, sizeof err - 1 - elen)) > 0)
		elen += (size_t)n;
	err[elen] = '\0';
	char out[4096];
	size_t olen = 0;
	while ((n = read(po[0], out + olen, sizeof out - 1 - olen)) > 0)
		olen += (size_t)n;
	out[olen] = '\0';
	close(po[0]);
	close(pe[0]);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	fprintf(stderr, "test_chaos: %s(%.1f s in all)\n", out, (double)(tnow_ms() - t0) / 1000);
	cr_assert_eq(rc, 0, "chaos exited %d:\n%s%s", rc, out, err);
	cr_assert(strstr(out, " lost=0 ") && strstr(out, " reexecuted=0 "), "%s%s", out, err);
}
