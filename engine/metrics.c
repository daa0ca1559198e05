/*
 * metrics.c - the per-workflow slots and the step-duration histogram (see
 * metrics.h), and the Prometheus text helpers the status page and the
 * backlog render with.
 */
#include "metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

const double METRICS_STEP_BOUNDS_S[METRICS_STEP_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                            0.1,   0.25,   0.5,   1,    2.5,   10};

int metrics_init(metrics *m, int max)
{
	m->flows = max > 0 ? calloc((size_t)max, sizeof *m->flows) : NULL;
	if (max > 0 && !m->flows)
		return -CAIRN_ENOMEM;
	m->maxflows = max;
	m->nflows = 0;
	snprintf(m->other.name, sizeof m->other.name, "%s", METRICS_OTHER);
	return 0;
}

void metrics_free(metrics *m)
{
	free(m->flows);
	m->flows = NULL;
	m->nflows = m->maxflows = 0;
}

metrics_flow *metrics_other(metrics *m)
{
	return &m->other;
}

metrics_flow *metrics_flow_add(metrics *m, const char *name)
{
	/* "other" is the label of the rest: a workflow of that name shares it. */
	if (m->nflows >= m->maxflows || strcmp(name, METRICS_OTHER) == 0)
		return &m->other;
	metrics_flow *f = &m->flows[m->nflows++];
	snprintf(f->name, sizeof f->name, "%s", name);
	return f;
}

void metrics_observe_step(metrics_flow *f, int64_t us)
{
	double s = (double)(us > 0 ? us : 0) / 1e6;
	int i = 0;
	while (i < METRICS_STEP_BUCKETS && s > METRICS_STEP_BOUNDS_S[i])
		i++;
	atomic_fetch_add_explicit(&f->step_buckets[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->step_sum_us, (uint64_t)(us > 0 ? us : 0),
	                          memory_order_relaxed);
}

/* ------------------------------------------------------------ rendering */

void metrics_family(buf *b, const char *name, const char *type, const char *help)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_sample(buf *b, const char *name, const char *type, const char *help,
                    const char *labels, double value)
{
	metrics_family(b, name, type, help);
	buf_printf(b, "%s%s %.17g\n", name, labels ? labels : "", value);
}

const char *metrics_label(const char *s, char out[256])
{
	size_t n = 0;
	for (; *s && n + 3 < 256; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n')
			out[n++] = '\\';
		out[n++] = *s == '\n' ? 'n' : *s;
	}
	out[n] = 0;
	return out;
}

/* The slots in the order they are rendered: the registered workflows', then "other". */
static const metrics_flow *slot(const metrics *m, int i)
{
	return i < m->nflows ? &m->flows[i] : &m->other;
}

#define RUN_EVENT_NAME(id, name, help) name,
static const char *const RUN_EVENT_NAMES[] = {METRICS_RUN_EVENTS(RUN_EVENT_NAME)};
#undef RUN_EVENT_NAME
#define RUN_EVENT_HELP(id, name, help) help,
static const char *const RUN_EVENT_HELPS[] = {METRICS_RUN_EVENTS(RUN_EVENT_HELP)};
#undef RUN_EVENT_HELP

static void render_histogram(const metrics *m, buf *b)
{
	char lab[256];
	metrics_family(b, "cairn_step_duration_seconds", "histogram",
	               "Duration of executed step attempts, per workflow.");
	for (int i = 0; i <= m->nflows; i++) {
		const metrics_flow *f = slot(m, i);
		const char *w = metrics_label(f->name, lab);
		uint64_t cum = 0;
		for (int k = 0; k <= METRICS_STEP_BUCKETS; k++) {
			cum += atomic_load_explicit(&f->step_buckets[k], memory_order_relaxed);
			if (k < METRICS_STEP_BUCKETS)
				buf_printf(
				    b,
				    "cairn_step_duration_seconds_bucket{workflow=\"%s\",le=\"%g\"} "
				    "%" PRIu64 "\n",
				    w, METRICS_STEP_BOUNDS_S[k], cum);
			else
				buf_printf(b,
				           "cairn_step_duration_seconds_bucket{workflow=\"%s\",le="
				           "\"+Inf\"} "
				           "%" PRIu64 "\n",
				           w, cum);
		}
		buf_printf(b, "cairn_step_duration_seconds_sum{workflow=\"%s\"} %.6f\n", w,
		           (double)atomic_load_explicit(&f->step_sum_us, memory_order_relaxed) /
		               1e6);
		buf_printf(b, "cairn_step_duration_seconds_count{workflow=\"%s\"} %" PRIu64 "\n", w,
		           cum);
	}
}

void metrics_render_flows(const metrics *m, buf *b)
{
	char name[64], lab[256];
	for (int e = 0; e < METRICS_RUN_NEVENTS; e++) {
		snprintf(name, sizeof name, "cairn_runs_%s_total", RUN_EVENT_NAMES[e]);
		metrics_family(b, name, "counter", RUN_EVENT_HELPS[e]);
		for (int i = 0; i <= m->nflows; i++) {
			const metrics_flow *f = slot(m, i);
			buf_printf(b, "%s{workflow=\"%s\"} %" PRIu64 "\n", name,
			           metrics_label(f->name, lab),
			           atomic_load_explicit(&f->runs[e], memory_order_relaxed));
		}
	}
	metrics_family(b, "cairn_step_failures_total", "counter",
	               "Step attempts that failed (an error, a timeout), retried or not, per "
	               "workflow.");
	for (int i = 0; i <= m->nflows; i++) {
		const metrics_flow *f = slot(m, i);
		buf_printf(b, "cairn_step_failures_total{workflow=\"%s\"} %" PRIu64 "\n",
		           metrics_label(f->name, lab),
		           atomic_load_explicit(&f->step_failures, memory_order_relaxed));
	}
	render_histogram(m, b);
}
