/*
 * trace.h - OpenTelemetry traces of runs (docs/monitoring.md, "Traces").
 *
 * Two halves. The pure half is W3C trace context: parsing and printing a
 * `traceparent`, and the ids of a run's spans, derived from the run so that
 * every worker that executes it (after a crash, a hand-over, a replay) names
 * the same span the same way: the run's trace is the one its stored
 * traceparent names (runs.traceparent, given at enqueue or by the parent
 * run), or one derived from the run's id and enqueue time; its run span's
 * id is derived from the trace and the run; a durable call's from the run,
 * its attempt, the call's position in the journal and the step's attempt.
 *
 * The other half is the exporter: spans go into a bounded queue that never
 * blocks (a full one drops the span and counts it), and one thread sends
 * them in batches as OTLP/HTTP protobuf (a hand-written encoder of the few
 * messages of opentelemetry-proto's trace service) with libcurl. A worker
 * without an endpoint has no tracer (NULL): every caller tests that one
 * pointer and does nothing else.
 *
 * Owns: the exporter thread, its curl handle and its queue of spans. Made
 * by worker.c; spans come from exec.c (durable calls) and dispatch.c
 * (executions and runs, once their commit is written).
 */
#ifndef CAIRN_TRACE_H
#define CAIRN_TRACE_H
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "log.h"
#include "metrics.h"

/* "00-" 32 hex "-" 16 hex "-" 2 hex. */
#define TRACEPARENT_LEN 55

/* A run's place in its trace. */
typedef struct trace_ctx {
	uint8_t trace_id[16];
	uint8_t parent[8];   /* the run span's parent (from the traceparent); zero: a root */
	uint8_t run_span[8]; /* the run span's id */
	uint8_t flags;       /* W3C trace-flags; bit 0: sampled */
} trace_ctx;

/*
 * Parses a W3C traceparent (version 00, or a later version's first four
 * fields): 0, or -1 with why (PARSE_ERR_MAX bytes) naming what is wrong.
 * An all-zero trace or span id, version ff, or upper-case hex is refused.
 */
int trace_parse(const char *s, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags, char *why);
/* "00-TRACE-SPAN-FLAGS" into out (TRACEPARENT_LEN + 1 bytes). */
void trace_format(char *out, const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags);
/*
 * The trace context of run run_id enqueued at created_us (Unix
 * microseconds) with traceparent tp (NULL or "": none, or one that does
 * not parse: then the run is a root of a trace of its own, sampled when
 * sampled is 1).
 */
void trace_run(trace_ctx *t, int64_t run_id, int64_t created_us, const char *tp, int sampled);
/* The span id of the durable call at seq of the run's attempt
 * run_attempt, in its step attempt step_attempt (0: a call that has none:
 * a sleep, a signal wait). */
void trace_call_id(const trace_ctx *t, int64_t run_id, int run_attempt, int seq, int step_attempt,
                   uint8_t out[8]);
/* A random span id (an execution's). */
void trace_random_id(uint8_t out[8]);
/* The wall clock in Unix nanoseconds. */
int64_t trace_now_ns(void);

/* What a span is of: its attributes follow. */
typedef enum trace_span_kind { TRACE_RUN, TRACE_EXECUTION, TRACE_CALL } trace_span_kind;

/*
 * One finished span: one allocation, its strings at its tail. Attributes:
 * cairn.run_id, cairn.workflow, cairn.attempt, cairn.shard,
 * cairn.shard_group, and of a call cairn.step.seq, cairn.step.kind and
 * cairn.step.attempt (when > 0); cairn.outcome when set. A span with an
 * error has status ERROR with the error as its message and an `exception`
 * event (exception.type, exception.message).
 */
typedef struct trace_span {
	uint8_t trace_id[16], span_id[8], parent[8]; /* parent zero: none */
	int64_t start_ns, end_ns;
	trace_span_kind kind;
	int64_t run_id;
	int attempt, shard, seq, step_attempt;
	const char *call_kind;                 /* a call's: "step", "sleep" ... (static) */
	const char *outcome;                   /* static, or NULL */
	const char *error_type;                /* static; with error: the span failed */
	char *name, *workflow, *group, *error; /* at the tail; error may be NULL */
	char tail[];
} trace_span;

/* The most bytes of an error a span keeps. */
#define TRACE_ERROR_MAX 4096

/* A span named "what name" of a run of workflow in group, with error
 * (NULL: none; its first TRACE_ERROR_MAX bytes, a byte that is not UTF-8
 * as '?'), every other field zero: NULL when out of memory. */
trace_span *trace_span_new(const char *what, const char *name, const char *workflow,
                           const char *group, const char *error);

/* The exporter's settings (config.c validates them). */
typedef struct trace_settings {
	const char *url;            /* the traces endpoint; "" or NULL: no tracer */
	const char *headers;        /* "k=v,k2=v2" (values percent-encoded), or "" */
	const char *service_name;   /* OTEL_SERVICE_NAME, or "" */
	const char *resource_attrs; /* OTEL_RESOURCE_ATTRIBUTES, or "" */
	int queue_max, batch_max;
	int64_t delay_ms, timeout_ms;
} trace_settings;

typedef struct tracer tracer;

/*
 * Starts the exporter of s: 0 with *out (NULL when s has no url: tracing
 * is off), or -CAIRN_ENOMEM / -CAIRN_EINVAL with why in err. Counts into
 * m's otel_* fields; logs export failures to log.
 */
int tracer_start(const trace_settings *s, metrics *m, const logger *log, tracer **out, buf *err);
/* Queues s (t takes it): dropped and counted when the queue is full. Any
 * thread; never blocks on the exporter. */
void tracer_emit(tracer *t, trace_span *s);
/* Whether s's sampled flag lets t export a run's spans: t set and bit 0 of
 * flags. */
static inline int trace_on(const tracer *t, const trace_ctx *c)
{
	return t && (c->flags & 1);
}
/* Exports what is queued (for at most wait_ms), stops the thread, frees t. */
void tracer_stop(tracer *t, int64_t wait_ms);

/*
 * The OTLP protobuf of an ExportTraceServiceRequest of n spans under
 * resource (the encoded attributes of a Resource message) into out. For
 * tracer.c and its unit test.
 */
void trace_encode(const buf *resource, trace_span *const *spans, int n, buf *out);
/* The Resource message of settings s, with instance as service.instance.id. */
int trace_resource(const trace_settings *s, const char *instance, buf *out, char *why);

/* Checks the OTEL_* values the worker takes: a traces URL (http:// or
 * https:// with a host), headers and resource attributes ("k=v,..."). 0 or
 * -1 with why (PARSE_ERR_MAX bytes). */
int trace_check_url(const char *url, char *why);
int trace_check_pairs(const char *what, const char *pairs, char *why);
#endif
