/*
 * registry.c - workflow and singleton definitions (see registry.h): checked
 * once at registration, then read by the executors and the singleton
 * supervisor for the life of the worker.
 */
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct registry {
	workflow_def *flows;
	int nflows;
	singleton_def *singletons;
	int nsingletons;
	metrics *m; /* where workflows take their slots; may be NULL */
};

int registry_new(registry **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -CAIRN_ENOMEM;
}

void registry_free(registry *r)
{
	if (!r)
		return;
	free(r->flows);
	free(r->singletons);
	free(r);
}

void registry_count_in(registry *r, metrics *m)
{
	r->m = m;
}

/* A valid, unused name for a definition of kind ("workflow", "singleton"). */
static int check_name(const char *kind, const char *name,
                      int (*taken)(const registry *, const char *), const registry *r, int has_fn,
                      buf *err)
{
	char what[32], perr[PARSE_ERR_MAX];
	snprintf(what, sizeof what, "%s name", kind);
	buf_reset(err);
	if (!has_fn) {
		buf_printf(err, "%s function is NULL", kind);
		return -CAIRN_EINVAL;
	}
	if (parse_check_name(what, name, perr) < 0) {
		buf_puts(err, perr);
		return -CAIRN_EINVAL;
	}
	if (taken(r, name)) {
		buf_printf(err, "%s %s is registered twice", kind, name);
		return -CAIRN_EINVAL;
	}
	return 0;
}

static int flow_taken(const registry *r, const char *name)
{
	return registry_workflow(r, name) != NULL;
}

static int singleton_taken(const registry *r, const char *name)
{
	for (int i = 0; i < r->nsingletons; i++)
		if (strcmp(r->singletons[i].name, name) == 0)
			return 1;
	return 0;
}

int registry_add_workflow(registry *r, const char *name, cairn_workflow_fn fn,
                          const cairn_workflow_opts *opts, buf *err)
{
	int rc = check_name("workflow", name, flow_taken, r, fn != NULL, err);
	if (rc)
		return rc;
	workflow_def *g = realloc(r->flows, (size_t)(r->nflows + 1) * sizeof *g);
	if (!g)
		return -CAIRN_ENOMEM;
	r->flows = g;
	workflow_def *d = &r->flows[r->nflows++];
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	d->fn = fn;
	if (opts)
		d->opts = *opts;
	snprintf(d->runtime, sizeof d->runtime, "%s", d->opts.runtime ? d->opts.runtime : "c");
	d->opts.runtime = NULL; /* the array moves as it grows: read d->runtime */
	d->mx = r->m ? metrics_flow_add(r->m, name) : NULL;
	return 0;
}

const workflow_def *registry_workflow(const registry *r, const char *name)
{
	for (int i = 0; name && i < r->nflows; i++)
		if (strcmp(r->flows[i].name, name) == 0)
			return &r->flows[i];
	return NULL;
}

int registry_add_singleton(registry *r, const singleton_def *def, buf *err)
{
	int rc = check_name("singleton", def->name, singleton_taken, r, def->fn != NULL, err);
	if (rc)
		return rc;
	singleton_def *g = realloc(r->singletons, (size_t)(r->nsingletons + 1) * sizeof *g);
	if (!g)
		return -CAIRN_ENOMEM;
	r->singletons = g;
	r->singletons[r->nsingletons++] = *def;
	return 0;
}

int registry_nsingletons(const registry *r)
{
	return r->nsingletons;
}

const singleton_def *registry_singleton(const registry *r, int i)
{
	return &r->singletons[i];
}
