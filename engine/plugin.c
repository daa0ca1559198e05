/*
 * plugin.c - the plugin loader: opens each shared object named by
 * CAIRN_PLUGINS / --plugin and has the worker call its cairn_plugin_init(w)
 * (plugin_env.init), which registers workflows and singletons. Called once
 * by cairn_worker_run() before any worker thread starts; it knows nothing
 * of the worker but that hook.
 *
 * Owns nothing after it returns: the dlopen handles are deliberately never
 * closed, because the functions a plugin registered must stay mapped as long
 * as the worker may call them, which is the life of the process. Plugins are
 * opened RTLD_LOCAL so two plugins cannot clash over their own symbols; the
 * cairn_* functions they call resolve against the executable, which is linked
 * with -rdynamic (and the whole of libcairn) for that reason.
 */
#include "plugin.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static int load_one(const plugin_env *env, const char *path, buf *err)
{
	/* dlopen searches the library path for a bare name; a plugin named on
	 * the command line is a file, so make it one. */
	buf file = BUF_INIT;
	buf_printf(&file, "%s%s", strchr(path, '/') ? "" : "./", path);
	if (file.oom) {
		buf_printf(err, "plugin \"%s\": out of memory", path);
		return -CAIRN_ENOMEM;
	}
	dlerror();
	void *h = dlopen(file.data, RTLD_NOW | RTLD_LOCAL);
	buf_free(&file);
	if (!h) {
		const char *why = dlerror();
		buf_printf(err, "plugin \"%s\": cannot load it: %s", path,
		           why ? why : "unknown error");
		return -CAIRN_EINVAL;
	}
	dlerror();
	/* POSIX guarantees a function pointer survives the trip through void *. */
	void *sym = dlsym(h, "cairn_plugin_init");
	const char *why = dlerror();
	if (!sym || why) {
		buf_printf(
		    err,
		    "plugin \"%s\": it does not export cairn_plugin_init: %s; a plugin defines "
		    "int cairn_plugin_init(cairn_worker *w)",
		    path, why ? why : "the symbol is NULL");
		dlclose(h);
		return -CAIRN_EINVAL;
	}
	cairn_plugin_init_fn init;
	memcpy(&init, &sym, sizeof init);
	const char *detail = NULL;
	int rc = env->init(env->arg, init, &detail);
	if (rc != 0) {
		/* The worker's own message says which registration failed. err may
		 * be that very buffer, so build the text aside first. */
		buf msg = BUF_INIT;
		buf_printf(&msg, "plugin \"%s\": cairn_plugin_init returned %d (%s)", path, rc,
		           cairn_strstatus(rc));
		if (detail && *detail)
			buf_printf(&msg, ": %s", detail);
		if (detail && buf_str(err) == detail)
			buf_reset(err);
		buf_puts(err, buf_str(&msg));
		buf_free(&msg);
		/* It may have registered some workflows already: keep it mapped. */
		return -CAIRN_EINVAL;
	}
	return 0;
}

int plugin_load_all(const plugin_env *env, const char *paths, buf *err)
{
	if (!paths || !*paths)
		return 0;
	char *list = strdup(paths);
	if (!list) {
		buf_puts(err, "plugins: out of memory");
		return -CAIRN_ENOMEM;
	}
	int rc = 0;
	char *save = NULL;
	for (char *p = strtok_r(list, ":", &save); p && rc == 0; p = strtok_r(NULL, ":", &save))
		rc = load_one(env, p, err);
	free(list);
	return rc;
}
