/*
 * sdk.h - cairn-worker as the engine of a language SDK process
 * (docs/protocol.md). The SDK process hands the worker its lanes (connected
 * sockets); the worker registers the workflows the SDK serves and runs each
 * of their executions by forwarding the workflow's durable calls over a
 * lane to the C API, so the engine's rules (journal, replay, retries,
 * fencing) stay the C engine's.
 *
 * Owns: the lanes and the thread that watches the control lane.
 */
#ifndef CAIRN_SDK_H
#define CAIRN_SDK_H
#include "cairn.h"

typedef struct sdk sdk;

/*
 * Opens the lanes named by `--sdk-fds FIRST-LAST` (fds) or `--sdk-connect
 * PATH` (path: connects 1 + CAIRN_CONCURRENCY times), whichever is not
 * NULL, and reads the SDK's hello. 0 with *out, or -1 with a message in err
 * (the caller exits 2).
 */
int sdk_open(const char *fds, const char *path, sdk **out, char *err, size_t errlen);

/* Closes the lanes and frees s; only before sdk_attach (whose watcher
 * reads s for the life of the process), or with s NULL. */
void sdk_free(sdk *s);

/* The number of execution lanes: the worker's CAIRN_CONCURRENCY. */
int sdk_lanes(const sdk *s);

/* Answers the SDK refused with why (a setting the worker does not take). */
void sdk_refuse(sdk *s, const char *why);

/*
 * Registers the hello's workflows with w and answers welcome, or refused
 * (then returns the error: the caller exits 2). Then watches the control
 * lane: when the SDK process is gone the worker exits at once.
 */
int sdk_attach(sdk *s, cairn_worker *w);
#endif
