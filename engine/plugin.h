/*
 * plugin.h - loads workflow plugins (shared objects exporting
 * cairn_plugin_init) into a worker before it starts.
 */
#ifndef CAIRN_PLUGIN_H
#define CAIRN_PLUGIN_H
#include "buf.h"

struct cairn_worker;

/*
 * Loads every plugin in paths (colon-separated; NULL or "" loads nothing;
 * empty entries are skipped) in order: dlopen(RTLD_NOW | RTLD_LOCAL), look up
 * cairn_plugin_init and call it with w. A path without a slash is taken
 * relative to the current directory, not searched in the library path.
 * Returns 0, or -1 at the first plugin that cannot be opened, lacks the
 * symbol or whose init returns non-zero, with a message naming the path and
 * the reason in err. Plugins that were loaded stay loaded for the life of
 * the process (their workflow functions are registered on w); call it from
 * one thread, before the worker's threads start.
 */
int plugin_load_all(struct cairn_worker *w, const char *paths, buf *err);
#endif
