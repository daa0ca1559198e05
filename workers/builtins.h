/*
 * builtins.h - the workflows every stock cairn-worker serves: noop, sleep,
 * http and the order demo. See builtins.c and docs/builtins.md.
 */
#ifndef CAIRN_BUILTINS_H
#define CAIRN_BUILTINS_H
#include "cairn.h"

/*
 * Registers the built-in workflows on w (before cairn_worker_run) and
 * initialises libcurl for the http workflow; call it from the main thread
 * before any other thread runs. Returns CAIRN_OK, or the status of the first
 * registration that failed (cairn_worker_errmsg(w) says why).
 * builtins_shutdown() releases libcurl after cairn_worker_free().
 */
int builtins_register(cairn_worker *w);
void builtins_shutdown(void);
#endif
