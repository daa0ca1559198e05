/*
 * backlog.h - the cairn.backlog singleton (DESIGN section 17): metrics that
 * describe the database rather than a worker, read by one worker of the
 * fleet, not by each: the unfinished runs per shard group, workflow and
 * state (due and not started, delayed, held by flow control, running,
 * sleeping, waiting), the age of the oldest due run, the shards no live
 * runner owns, and how far behind the schedules are. Every
 * CAIRN_BACKLOG_INTERVAL the singleton reads them with bounded, indexed
 * statements and keeps the result here; the worker that runs it shows
 * them on its /metrics, the others show only cairn_backlog_publisher 0.
 *
 * Owns: the last result, behind its own lock; the singleton's thread and
 * connection while it runs (singleton.c starts and stops it). Created by
 * the worker, registered by maint.c, rendered by status.c.
 */
#ifndef CAIRN_BACKLOG_H
#define CAIRN_BACKLOG_H
#include "buf.h"
#include "cairn.h"
#include "config.h"
#include "log.h"

/* The most rows each part of the read walks (due starts, due messages,
 * delayed, held, running or waiting runs): past it the counts are lower
 * bounds and cairn_backlog_capped says so. */
#define BACKLOG_ROWS_MAX 100000

typedef struct backlog backlog;

typedef struct backlog_env {
	const config *cfg; /* interval, runner TTL, CAIRN_METRICS_MAX_WORKFLOWS */
	const logger *log;
} backlog_env;

/* 0 or -CAIRN_ENOMEM. env must outlive b. */
int backlog_new(const backlog_env *env, backlog **out);
void backlog_free(backlog *b);

/* The singleton's function (cairn_singleton_fn); arg is the backlog. */
int backlog_singleton(cairn_singleton *s, void *arg);

/* Appends the backlog's families to a /metrics page: always
 * cairn_backlog_publisher, the rest while this worker publishes. Any
 * thread. */
void backlog_render(backlog *b, buf *out);
#endif
