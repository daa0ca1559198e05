/*
 * plugin.h - loads workflow plugins (shared objects exporting
 * cairn_plugin_init) into a worker before it starts.
 */
#ifndef CAIRN_PLUGIN_H
#define CAIRN_PLUGIN_H
#include "buf.h"
#include "cairn.h"

/*
 * What loading needs of the worker. A plugin's cairn_plugin_init registers
 * its workflows and singletons through the public handle it is given
 * (cairn_workflow_register, cairn_singleton_register), which checks them
 * against the worker's settings and adds them to its registry; the worker
 * makes that call, so this module never sees the worker.
 */
typedef struct plugin_env {
	/* Calls init with the worker's handle and returns what it returned;
	 * when that is not 0, *why is the worker's message (which registration
	 * failed, or ""), valid until the next registration. */
	int (*init)(void *arg, cairn_plugin_init_fn init, const char **why);
	void *arg;
} plugin_env;

/*
 * Loads every plugin in paths (colon-separated; NULL or "" loads nothing;
 * empty entries are skipped) in order: dlopen(RTLD_NOW | RTLD_LOCAL), look up
 * cairn_plugin_init and call it through env->init. A path without a slash is
 * taken relative to the current directory, not searched in the library path.
 * Returns 0, or a negated status at the first plugin that cannot be opened,
 * lacks the symbol or whose init returns non-zero, with a message naming the
 * path and the reason in err. Plugins that were loaded stay loaded for the
 * life of the process (the worker calls the functions they registered); call
 * it from one thread, before the worker's threads start.
 */
int plugin_load_all(const plugin_env *env, const char *paths, buf *err);
#endif
