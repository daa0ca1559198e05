/*
 * cairn.h - the public C API of cairn, a durable workflow engine on PostgreSQL.
 *
 * Two halves:
 *   - the client (cairn_client_*, cairn_enqueue, cairn_signal, cairn_cancel,
 *     cairn_run_get, cairn_run_list): what the `cairn` CLI is built on, so an
 *     application can do everything the CLI does without shelling out;
 *   - the worker (cairn_worker_*): the daemon as a library call, so a user can
 *     build a worker binary with their own workflows linked in.
 *
 * Conventions (borrowed from SQLite and libuv):
 *   - every function that can fail returns a cairn_status; CAIRN_OK is 0;
 *   - handles are opaque; every constructor has a matching free;
 *   - strings returned inside structs are owned by the struct and freed by its
 *     free function; a function's comment says who owns what it returns;
 *   - the last error of a handle is available as text from *_errmsg().
 *
 * A handle must not be used from two threads at once.
 */
#ifndef CAIRN_H
#define CAIRN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_VERSION "0.1.0"

typedef enum cairn_status {
	CAIRN_OK = 0,
	CAIRN_EINVAL = 1,    /* bad input: see the handle's errmsg */
	CAIRN_ENOTFOUND = 2, /* the run (or other object) does not exist */
	CAIRN_EDB = 3,       /* database unreachable or a statement failed */
	CAIRN_ENOMEM = 4,    /* out of memory */
	CAIRN_ETIMEOUT = 5,  /* a wait ran out of time */
	CAIRN_ESTATE = 6,    /* the object is in a state that forbids the call */
	CAIRN_ESCHEMA = 7,   /* schema missing, outdated, or configuration mismatch */
} cairn_status;

/* A short, constant English name for a status code ("not found"). */
const char *cairn_strstatus(int status);

/* ---------------------------------------------------------------- client */

typedef struct cairn_client cairn_client;

/*
 * Opens a client on the database named by conninfo (a libpq connection string
 * or URL; NULL means $DATABASE_URL). On CAIRN_OK or CAIRN_EDB *out is set to a
 * handle the caller frees with cairn_client_free(); on CAIRN_EDB its errmsg
 * says why the connection failed. *out is NULL only on CAIRN_ENOMEM.
 */
int cairn_client_open(const char *conninfo, cairn_client **out);
void cairn_client_free(cairn_client *c);

/* The message of the last failed call on c; owned by c, valid until the next call. */
const char *cairn_client_errmsg(const cairn_client *c);

/* Largest accepted input/payload in bytes (default 1 MiB). */
void cairn_client_set_max_payload(cairn_client *c, size_t bytes);

/* Options of cairn_enqueue(); zero-initialise and set what you need. */
typedef struct cairn_enqueue_opts {
	const char *key;    /* idempotency key; NULL generates a unique one */
	const char *input;  /* JSON text; NULL means null */
	int64_t delay_ms;   /* start no earlier than now + delay_ms */
	int64_t at_unix_ms; /* or: start no earlier than this time (0: unset) */
	int max_attempts;   /* attempts before the run fails for good; 0 = default 3 */
	const char *group;  /* shard group; NULL means "default" */
} cairn_enqueue_opts;

typedef struct cairn_enqueued {
	int64_t id;   /* the run's id */
	int existed;  /* 1 if (workflow, key) was already enqueued: id is that run */
} cairn_enqueued;

/*
 * Enqueues one run of workflow and its start message in one transaction and
 * notifies the shard's wake channel. Enqueueing the same (workflow, key) again
 * writes nothing and returns the existing run with existed = 1.
 * Validation errors return CAIRN_EINVAL and write nothing.
 */
int cairn_enqueue(cairn_client *c, const char *workflow, const cairn_enqueue_opts *opts,
		  cairn_enqueued *out);

/*
 * Enqueues n runs of one workflow in one transaction (one statement). opts[i]
 * is run i; out[i] receives its id. Either every run is validated and written
 * or, on an error, nothing is.
 */
int cairn_enqueue_batch(cairn_client *c, const char *workflow, size_t n,
			const cairn_enqueue_opts *opts, cairn_enqueued *out);

/*
 * Resolves a run reference: a numeric id or "WORKFLOW/KEY". CAIRN_ENOTFOUND if
 * there is no such run.
 */
int cairn_run_resolve(cairn_client *c, const char *ref, int64_t *id);

/*
 * Sends signal name with payload (JSON text or NULL for null) to the run. The
 * signal is buffered until the run awaits it. CAIRN_ESTATE if the run has
 * already finished.
 */
int cairn_signal(cairn_client *c, int64_t run_id, const char *name, const char *payload);

/*
 * Requests cancellation of the run: its next durable call returns
 * CAIRN_CANCELLED. A pending run that never started is cancelled at once.
 * CAIRN_ESTATE if the run has already finished.
 */
int cairn_cancel(cairn_client *c, int64_t run_id);

/* Re-drives a failed or cancelled run from its journal with a fresh attempt count. */
int cairn_retry(cairn_client *c, int64_t run_id);

/* One entry of a run's journal. */
typedef struct cairn_step_info {
	int seq;
	char *name;
	char *kind;   /* step, sleep, signal, now, random */
	char *status; /* completed, failed, retrying, waiting */
	char *output; /* JSON text or NULL */
	char *error;  /* or NULL */
	int attempts;
	int64_t started_unix_ms, finished_unix_ms; /* 0 when unset */
} cairn_step_info;

typedef struct cairn_run {
	int64_t id;
	char *workflow, *key, *group;
	int shard;
	char *status; /* pending running sleeping waiting completed failed cancelled */
	int attempt, max_attempts;
	int cancel_requested;
	char *input;  /* JSON text */
	char *output; /* JSON text or NULL */
	char *error;  /* or NULL */
	int64_t created_unix_ms, scheduled_unix_ms, started_unix_ms, updated_unix_ms,
		finished_unix_ms; /* 0 when unset */
	size_t nsteps;
	cairn_step_info *steps; /* the journal, by seq; only from cairn_run_get */
} cairn_run;

/* Loads a run and its journal. The caller frees *out with cairn_run_free(). */
int cairn_run_get(cairn_client *c, int64_t id, cairn_run **out);
void cairn_run_free(cairn_run *run);

typedef struct cairn_list_filter {
	const char *workflow; /* NULL: any */
	const char *status;   /* NULL: any */
	int limit;            /* 0: 50 */
} cairn_list_filter;

/* Lists runs, newest first, without journals. Free with cairn_run_list_free(). */
int cairn_run_list(cairn_client *c, const cairn_list_filter *f, cairn_run **runs, size_t *n);
void cairn_run_list_free(cairn_run *runs, size_t n);

/*
 * Waits until the run has finished (completed, failed or cancelled) or
 * timeout_ms passes (CAIRN_ETIMEOUT); woken by notification with a polling
 * fallback. timeout_ms < 0 waits forever.
 */
int cairn_run_wait(cairn_client *c, int64_t id, int64_t timeout_ms);

/* ------------------------------------------------------------- migrations */

/*
 * Applies every pending migration (embedded in the library, or read from dir
 * when dir is not NULL), each in its own transaction, serialized with other
 * migrators by an advisory lock. Refuses (CAIRN_ESCHEMA) if an applied
 * migration's checksum differs from its file. shards_per_group > 0 records the
 * shard count on a fresh database, or must equal the recorded one.
 */
int cairn_migrate(cairn_client *c, const char *dir, int shards_per_group, int *applied);

typedef struct cairn_migration_info {
	int version;
	char *name;
	char *checksum;   /* hex SHA-256 of the file */
	int applied;      /* 1 if recorded in cairn.schema_migrations */
	int64_t applied_unix_ms;
	int changed;      /* applied, but the file's checksum differs */
} cairn_migration_info;

/* Lists known and applied migrations in version order. Free with cairn_migration_list_free(). */
int cairn_migration_list(cairn_client *c, const char *dir, cairn_migration_info **out, size_t *n);
void cairn_migration_list_free(cairn_migration_info *m, size_t n);

/* ---------------------------------------------------------------- worker */

typedef struct cairn_worker cairn_worker;

/*
 * Creates a worker from the environment (DATABASE_URL, CAIRN_*) overridden by
 * flags in argv (argv[0] is the program name; see `cairn-worker --help`).
 * Nothing is started yet. On CAIRN_EINVAL *out is still set and
 * cairn_worker_errmsg() names the bad variable, its value and what is
 * accepted. *out is NULL only on CAIRN_ENOMEM. Free with cairn_worker_free().
 */
int cairn_worker_new(int argc, char **argv, cairn_worker **out);
const char *cairn_worker_errmsg(const cairn_worker *w);

/* The effective configuration, one NAME=value per line, password masked;
 * owned by w. */
const char *cairn_worker_config_text(cairn_worker *w);

/* The --help text of the worker's settings; static storage. */
const char *cairn_worker_settings_help(void);

/*
 * Runs the worker until SIGTERM or SIGINT (or cairn_worker_stop()), then
 * drains: stops taking work, lets in-flight work reach a durable point within
 * CAIRN_SHUTDOWN_TIMEOUT, releases everything and returns CAIRN_OK. A second
 * signal exits the process at once. Blocks SIGTERM and SIGINT in the calling
 * thread and every thread it starts. Returns an error only for a fatal
 * configuration mismatch found at run time (CAIRN_ESCHEMA) or if the HTTP
 * endpoint cannot listen (CAIRN_EINVAL).
 */
int cairn_worker_run(cairn_worker *w);

/* Asks a running worker to drain and return; safe from any thread. */
void cairn_worker_stop(cairn_worker *w);
void cairn_worker_free(cairn_worker *w);

#ifdef __cplusplus
}
#endif
#endif
