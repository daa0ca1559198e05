/*
 * dispatch.h - what the dispatcher (dispatch.c) and the executor (exec.c)
 * share: a job is one claimed run with its journal; a commit is the writes of
 * one run that the group committer puts into a shared transaction.
 */
#ifndef CAIRN_DISPATCH_H
#define CAIRN_DISPATCH_H
#include <stdint.h>

#include "buf.h"
#include "worker.h"

typedef struct job {
	int64_t run_id;
	int group, shard;
	int64_t epoch;
	char *workflow, *status, *input;
	int attempt, max_attempts;
	_Atomic int cancel_requested; /* also set by the poller while the run executes */
	int64_t created_ms;
	int64_t db_now_ms, mono_at_load; /* the database clock, read at claim */
	char *journal, *signals;         /* JSON arrays or NULL */
	int64_t *msgs;                   /* claimed message ids */
	int nmsgs;
	struct job *next;
} job;

/* One journal row to insert or update. */
typedef struct jrow {
	int seq;
	char *name;
	const char *kind, *status;
	char *output, *error; /* JSON text / message, or NULL */
	int attempts;
	int64_t wake_ms, started_ms, finished_ms; /* 0: NULL */
} jrow;

typedef struct commit {
	job *job;
	jrow *rows;
	int nrows, caprows;
	int64_t *sig_ids;
	int *sig_seqs;
	int nsig, capsig;

	int run_update; /* write the fields below to cairn.runs */
	const char *run_status;
	char *output, *error;
	int attempt, finished;

	int delete_claimed, delete_all, reset_steps;
	const char *new_kind; /* a new message for the run at new_at_ms, or NULL */
	int64_t new_at_ms;
	int64_t defer_at_ms; /* move the claimed messages to this time instead */

	/* Filled by the committer. */
	int done, ok, cancel_requested;
	int async; /* the executor does not wait: the committer ends the job */
	struct commit *next;
} commit;

void commit_free(commit *c);

/* exec.c: runs one job to its next durable point and builds its final commit
 * (NULL when there is nothing to write). */
commit *exec_job(cairn_worker *w, job *j);
/* The wait, in the committer, for a commit of the running execution. */
int dispatch_commit_wait(cairn_worker *w, commit *c);
/* Whether in-flight work must stop at its next durable point. */
int dispatch_stopping(cairn_worker *w);
#endif
