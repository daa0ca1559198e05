/*
 * test_docs.c - the guide (README.md and docs/) as a reader meets it:
 * `make docs` builds it with mkdocs in strict mode and scripts/docs-check.py
 * finds no page left out of the navigation, no broken link or anchor and no
 * excerpt that drifted from its file; and every sample marked runnable
 * (scripts/docs-samples.py: the first-workflow walkthrough, the CLI, SQL and
 * HTTP API examples) runs against this PostgreSQL server and the built
 * worker. The C samples that are whole programs are the files of
 * workers/examples/, which the test build compiles and the guide includes
 * as they are.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* The checkout the tests were built from ($CAIRN_SRC_DIR, set by run.sh). */
static const char *top(void)
{
	const char *t = getenv("CAIRN_SRC_DIR");
	cr_assert(t && *t, "CAIRN_SRC_DIR is not set: run the suite through tests/run.sh");
	return t;
}

/* Runs script with sh -c in the checkout, outside of any make that started the
 * tests (its jobserver is not ours); out and err as trun. */
static int in_checkout(const char *script, char **out, char **err)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "cd '%s' && %s", top(), script);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	const char *env[] = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", NULL};
	return trun(argv, env, out, err);
}

Test(docs, the_guide_builds_strictly_with_every_page_in_its_nav_and_no_broken_link)
{
	char *out = NULL, *err = NULL;
	int rc = in_checkout("make -s docs", &out, &err);
	cr_assert_eq(rc, 0, "make docs exited %d:\n%s%s", rc, out, err);
	/* mkdocs --quiet prints only its warnings, docs-check.py only problems. */
	cr_assert_str_empty(out, "make docs printed:\n%s", out);
	cr_assert_str_empty(err, "make docs printed on stderr:\n%s", err);
	char page[512];
	snprintf(page, sizeof page, "%s/build/site/getting-started.html", top());
	char *html = tfile_read(page);
	cr_assert(html && strstr(html, "cairn_plugin_init"),
	          "the guide does not include workers/examples/greet.c into Getting started");
	free(html);
	free(out);
	free(err);
}

Test(docs, every_runnable_sample_of_the_guide_runs_against_postgresql_and_a_worker)
{
	char *out = NULL, *err = NULL;
	int rc = in_checkout("/usr/bin/python3 scripts/docs-samples.py", &out, &err);
	cr_assert_eq(rc, 0, "the guide's samples failed (exit %d):\n%s%s", rc, out, err);
	/* The walkthrough, the order run, the CLI's refusals, the SQL functions and
	 * the HTTP API at least: a marker dropped by an edit shows here. */
	int ran = 0, failed = -1;
	const char *line = strstr(out, "docs-samples: ");
	while (line && sscanf(line, "docs-samples: %d blocks ran, %d failed", &ran, &failed) != 2)
		line = strstr(line + 1, "docs-samples: ");
	cr_assert(ran >= 8 && failed == 0, "ran %d samples, %d failed:\n%s%s", ran, failed, out, err);
	cr_assert(strstr(out, "ok README.md:"), "the README's walkthrough did not run:\n%s", out);
	free(out);
	free(err);
}
