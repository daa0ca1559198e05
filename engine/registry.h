/*
 * registry.h - the workflows and singletons registered with a worker. Filled
 * before cairn_worker_run() (by the program and its plugins, one thread) and
 * only read afterwards, so lookups need no lock.
 *
 * Owns: the definitions (names copied; functions and args are the caller's).
 */
#ifndef CAIRN_REGISTRY_H
#define CAIRN_REGISTRY_H
#include <stdint.h>

#include "buf.h"
#include "cairn.h"
#include "metrics.h"
#include "parse.h"

/* The longest runtime label kept (cairn_workflow_opts.runtime). */
#define RUNTIME_MAX_BYTES 63

typedef struct workflow_def {
	char name[NAME_MAX_BYTES + 1];
	cairn_workflow_fn fn;
	cairn_workflow_opts opts; /* opts.runtime is NULL: read runtime */
	char runtime[RUNTIME_MAX_BYTES + 1];
	/* Its metrics slot, taken as it registered (metrics.h); NULL when the
	 * registry counts in no metrics. */
	metrics_flow *mx;
} workflow_def;

typedef struct singleton_def {
	char name[NAME_MAX_BYTES + 1];
	cairn_singleton_fn fn;
	void *arg;
	int group;          /* index into the worker's shard groups */
	int64_t backoff_ms; /* restart backoff base */
} singleton_def;

typedef struct registry registry;

int registry_new(registry **out); /* 0 or -CAIRN_ENOMEM */
void registry_free(registry *r);
/* The metrics whose slots the workflows registered from now on take (the
 * worker's; must outlive r). */
void registry_count_in(registry *r, metrics *m);

/* 0, or -CAIRN_EINVAL (bad or repeated name, NULL fn; message in err) or -CAIRN_ENOMEM. */
int registry_add_workflow(registry *r, const char *name, cairn_workflow_fn fn,
                          const cairn_workflow_opts *opts, buf *err);
/* The workflow registered under name, or NULL. */
const workflow_def *registry_workflow(const registry *r, const char *name);

/* As registry_add_workflow; def->name is checked, the rest taken as given. */
int registry_add_singleton(registry *r, const singleton_def *def, buf *err);
int registry_nsingletons(const registry *r);
const singleton_def *registry_singleton(const registry *r, int i);
#endif
