/*
 * test_layering.c - the engine's layering as docs/architecture.md states it
 * ("Who may call whom"), checked on the source the tests were built from
 * ($CAIRN_SRC_DIR): the worker's context (worker.h) is worker.c's alone,
 * and the plugin loader and the endpoint (status.c) meet the worker only
 * through the hooks of their env, so no include or call circle runs back
 * into worker.c.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text of engine/name in the checkout; the caller frees it. */
static char *engine_file(const char *name)
{
	const char *top = getenv("CAIRN_SRC_DIR");
	cr_assert(top && *top, "CAIRN_SRC_DIR is not set: run the suite through tests/run.sh");
	char path[4096];
	snprintf(path, sizeof path, "%s/engine/%s", top, name);
	FILE *f = fopen(path, "rb");
	cr_assert(f, "cannot open %s", path);
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	cr_assert(m);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		fwrite(chunk, 1, n, m);
	fclose(f);
	fclose(m);
	return text;
}

Test(layering, only_worker_c_includes_the_workers_context)
{
	const char *top = getenv("CAIRN_SRC_DIR");
	cr_assert(top && *top, "CAIRN_SRC_DIR is not set: run the suite through tests/run.sh");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/engine", top);
	DIR *d = opendir(dir);
	cr_assert(d, "cannot open %s", dir);
	int files = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 3 || (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h")))
			continue;
		files++;
		char *text = engine_file(e->d_name);
		if (strcmp(e->d_name, "worker.c") != 0)
			cr_expect(!strstr(text, "#include \"worker.h\""),
			          "engine/%s includes worker.h: a module takes a narrow env, not "
			          "the worker",
			          e->d_name);
		free(text);
	}
	closedir(d);
	cr_assert_gt(files, 20, "found only %d engine sources in %s", files, dir);
}

Test(layering, the_plugin_loader_and_the_endpoint_never_see_the_worker)
{
	/* What reaching into the worker looks like: its context, its struct, or
	 * a function of worker.c called back. */
	static const char *const files[] = {"plugin.c", "plugin.h", "status.c", "status.h"};
	static const char *const worker[] = {"worker.h",
	                                     "struct cairn_worker",
	                                     "cairn_worker_errmsg",
	                                     "worker_members_changed",
	                                     "worker_state_name",
	                                     "cairn_worker *w ="};
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		char *text = engine_file(files[i]);
		for (size_t k = 0; k < sizeof worker / sizeof *worker; k++)
			cr_expect(!strstr(text, worker[k]), "engine/%s mentions %s", files[i],
			          worker[k]);
		free(text);
	}
}
