/*
 * watchdog.h - the heartbeats of the worker's long-running loops (the
 * supervisor, the poller, the committer): each loop stamps its watch every
 * iteration (the committer: while it waits for work and after every
 * statement), and /healthz fails when a stamp is older than three intervals
 * plus a second.
 *
 * Owns: a fixed table of WATCHDOG_MAX watches. Watches are added before the
 * loops start (one thread); stamps and checks are atomic.
 */
#ifndef CAIRN_WATCHDOG_H
#define CAIRN_WATCHDOG_H
#include <stdatomic.h>
#include <stdint.h>

#define WATCHDOG_MAX 8

typedef struct watch {
	const char *name; /* static storage */
	int64_t interval_ms;
	_Atomic int64_t stamp_ms; /* monotonic ms of the last stamp */
} watch;

typedef struct watchdog {
	watch w[WATCHDOG_MAX];
	int n;
} watchdog;

/* A new watch, stamped now; NULL when the table is full. */
watch *watchdog_add(watchdog *d, const char *name, int64_t interval_ms);
void watch_stamp(watch *w);
/* The name of a loop whose stamp is stale, or NULL when every loop is alive. */
const char *watchdog_stale(watchdog *d);
#endif
