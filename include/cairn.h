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
	CAIRN_SUSPENDED = 8, /* the run must wait (sleep, signal, step backoff): return it */
	CAIRN_CANCELLED = 9, /* the run was cancelled: return it */
	CAIRN_ERETRY = 10,   /* a step failed and may be retried (see cairn_retryable) */
	CAIRN_EFAIL = 11,    /* a step or workflow failed for good (see cairn_fail) */
	CAIRN_ENONDET = 12,  /* replay found a different durable call than the journal */
	CAIRN_ESTOP = 13, /* the worker is handing the run over (shard moved, drain): return it */
	CAIRN_EINTR = 14, /* cairn_worker_run: a second signal cut the drain short */
	CAIRN_CONTINUED =
	    15, /* the run continues as a new run (cairn_continue_as_new): return it */
} cairn_status;

/*
 * Returns from the enclosing workflow function with the status of expr unless
 * it is CAIRN_OK. Suspension, cancellation and hand-over travel up this way.
 */
#define CAIRN_TRY(expr)                                                                            \
	do {                                                                                       \
		int cairn_try_rc_ = (expr);                                                        \
		if (cairn_try_rc_ != CAIRN_OK)                                                     \
			return cairn_try_rc_;                                                      \
	} while (0)

/* A short, constant English name for a status code ("not found"). */
const char *cairn_strstatus(int status);

/* ---------------------------------------------------------------- client */

typedef struct cairn_client cairn_client;

/*
 * Opens a client on the database named by conninfo (a libpq connection string
 * or URL; NULL means $DATABASE_URL). On CAIRN_OK, CAIRN_EDB or CAIRN_EINVAL
 * *out is set to a handle the caller frees with cairn_client_free(); on
 * CAIRN_EDB its errmsg says why the connection failed, on CAIRN_EINVAL that
 * no database was given (conninfo NULL and $DATABASE_URL unset or empty).
 * *out is NULL only on CAIRN_ENOMEM.
 */
int cairn_client_open(const char *conninfo, cairn_client **out);
void cairn_client_free(cairn_client *c);

/* The message of the last failed call on c; owned by c, valid until the next call. */
const char *cairn_client_errmsg(const cairn_client *c);

/*
 * After a call returned CAIRN_EINVAL: the name of the argument or option
 * field that was rejected, spelled as in this header ("workflow", "key",
 * "group", "input", "delay_ms", "at_unix_ms", "max_attempts", "n", "run",
 * "signal", "payload", "status", "limit", "ttl_ms", "created_from_unix_ms",
 * "created_to_unix_ms", "before_id"), so a caller can say which
 * of its own inputs was bad without parsing the message. NULL when the last
 * call did not fail that way or the error concerns no single field. Static
 * storage; meaningful only until the next call on c.
 */
const char *cairn_client_errfield(const cairn_client *c);

/* Largest accepted input/payload in bytes (default 1 MiB). */
void cairn_client_set_max_payload(cairn_client *c, size_t bytes);

/*
 * Encryption at rest. With keys, the client encrypts what it writes (run
 * inputs, signal payloads) with XChaCha20-Poly1305 under the first key, and
 * decrypts what it reads with whichever key a stored value names; without,
 * it writes plaintext and reads encrypted values as locked (below). spec is
 * "ID=BASE64,ID=BASE64,...": ids of 1 to CAIRN_KEY_ID_MAX of A-Z a-z 0-9 _ -,
 * each key 32 random bytes in base64 (`openssl rand -base64 32`), the first
 * the one new values are written with. NULL or "" removes the keys.
 * CAIRN_EINVAL (field "keys") with a message that never shows a key.
 */
#define CAIRN_KEY_ID_MAX 32
/* cairn_enqueue_opts.priority lies in -CAIRN_PRIORITY_MAX..CAIRN_PRIORITY_MAX. */
#define CAIRN_PRIORITY_MAX 1000
int cairn_client_set_keys(cairn_client *c, const char *spec);
/* The keys of $CAIRN_ENCRYPTION_KEYS, or of the file $CAIRN_ENCRYPTION_KEYS_FILE
 * names (not both); neither set leaves c without keys. As cairn_client_set_keys. */
int cairn_client_keys_from_env(cairn_client *c);

/*
 * A field the client could not decrypt is NULL and its bit is set in
 * `locked`; the rest of the record reads as usual. Either the key the value
 * names is not among the client's (`locked_key` names it), or that key is
 * configured but the value does not authenticate under it: the key's bytes
 * differ from the ones it was written with (an id reused for another key),
 * or the stored value was altered. Such a field's bit is set in
 * `unauthentic` too, and `unauthentic_key` names its key. (Keys are
 * NUL-terminated; of several fields under different keys of one kind, the
 * last one's is named.) cairn_unreadable_why() says which, in words.
 */
#define CAIRN_LOCKED_INPUT  1u
#define CAIRN_LOCKED_OUTPUT 2u
#define CAIRN_LOCKED_ERROR  4u

/*
 * Why the field of bit is unreadable, given a record's locked, unauthentic,
 * locked_key and unauthentic_key: its cause, "missing_key" or
 * "not_authentic", with the reason in words in out (n bytes;
 * CAIRN_UNREADABLE_MAX is enough), e.g. `it is encrypted with key "k1",
 * which is not configured (CAIRN_ENCRYPTION_KEYS)`. NULL, with out "",
 * when bit is not set in locked. The key it names is *key.
 */
#define CAIRN_UNREADABLE_MAX 320
const char *cairn_unreadable_why(unsigned locked, unsigned unauthentic, const char *locked_key,
                                 const char *unauthentic_key, unsigned bit, char *out, size_t n,
                                 const char **key);
/* cairn_unreadable_why of record rec (a cairn_run *, cairn_step_info * ...). */
#define CAIRN_UNREADABLE_WHY(rec, bit, out, n)                                                     \
	cairn_unreadable_why((rec)->locked, (rec)->unauthentic, (rec)->locked_key,                 \
	                     (rec)->unauthentic_key, bit, out, n, NULL)

/*
 * JSON text given to the client (inputs, signal payloads, changed_from,
 * schedule inputs) must be UTF-8 without the escape \u0000 (PostgreSQL's
 * jsonb cannot store the NUL character, and cJSON would cut a string there):
 * otherwise CAIRN_EINVAL, with cairn_client_errfield() naming the field and
 * the message the byte and where in the value ("in $.items[2].name").
 */

/* Options of cairn_enqueue(); zero-initialise and set what you need. */
typedef struct cairn_enqueue_opts {
	const char *key;    /* idempotency key; NULL: a UUIDv7 in hex */
	const char *input;  /* JSON text; NULL means null */
	int64_t delay_ms;   /* start no earlier than now + delay_ms (0: now) */
	int64_t at_unix_ms; /* or: start no earlier than this time (0: unset);
	                       setting both is CAIRN_EINVAL */
	int max_attempts;   /* attempts before the run fails for good, 1-1000; 0 = default 3 */
	/* Shard group. NULL: the group whose workers serve the workflow (one with
	 * a live worker first, then the most recently seen; 'default' and then
	 * the lowest name among equals), or "default" when no worker has ever
	 * served it (routing by workflow, docs/sdks.md). A group named is kept. */
	const char *group;
	/* Flow control (`cairn limit`): runs that share a concurrency key live
	 * in the shard of the key, so one worker at a time enforces its limits.
	 * NULL: none (the run's shard is that of its key). */
	const char *concurrency_key;
	int priority; /* -1000 to 1000, higher starts first among due runs; 0 default */
	/* 1: refuse the run when its group has never served the workflow (a typo
	 * caught): CAIRN_ENOTFOUND naming the workflow, nothing written. 0: it
	 * is accepted with a warning (cairn_enqueued.warning). */
	int require_served;
	/* W3C trace context (OpenTelemetry): the caller's span, as a
	 * `traceparent` header value ("00-<trace id>-<span id>-<flags>"). The
	 * run's span becomes its child, in its trace, on every worker that
	 * executes the run; flags without the sampled bit (00) keep the run's
	 * spans from being exported. NULL: the run starts a trace of its own.
	 * One that does not parse is CAIRN_EINVAL. */
	const char *traceparent;
} cairn_enqueue_opts;

/*
 * What an enqueue found or wrote. status is the run's status when the
 * statement ran: "pending" for a new run, else the existing run's
 * (pending running sleeping waiting completed failed cancelled).
 *
 * output and error are filled only by cairn_enqueue(), and only for an
 * existing run that has finished: the output JSON text of a completed run and
 * the error of a failed or cancelled one (each NULL when the run has none).
 * They are malloc'd, owned by the caller and released with
 * cairn_enqueued_clear(). cairn_enqueue_batch() always leaves both NULL;
 * read a batch run's result with cairn_run_get().
 *
 * warning is set for a new run whose group has never served its workflow
 * (no worker has ever served it, or the group named has not): the run is
 * accepted and waits, and the text names the workflow and what happens
 * (`no worker has ever served workflow "x": the run waits in group
 * "default" until one does, ...`). NULL otherwise, and for an existing run.
 * Owned like output and error: cairn_enqueued_clear() frees it.
 * cairn_enqueue_batch() leaves it NULL too (its results need no clearing):
 * a batch's warnings are cairn_client_warning()'s.
 */
typedef struct cairn_enqueued {
	int64_t id;      /* the run's id */
	int existed;     /* 1 if (workflow, key) was already enqueued: id is that run */
	char status[16]; /* NUL-terminated */
	char *output;    /* see above; JSON text or NULL */
	char *error;     /* see above; or NULL */
	unsigned locked; /* CAIRN_LOCKED_OUTPUT, CAIRN_LOCKED_ERROR */
	char locked_key[CAIRN_KEY_ID_MAX + 1];
	unsigned unauthentic; /* of locked: those that do not authenticate */
	char unauthentic_key[CAIRN_KEY_ID_MAX + 1];
	int held;      /* pending, waiting for a slot of its concurrency key */
	char *warning; /* see above; or NULL */
} cairn_enqueued;

/*
 * Enqueues one run of workflow (one INSERT, its own transaction), then (in
 * the same round trip) wakes the owner of its shard. Enqueueing the same (workflow, key) again
 * writes nothing and returns the existing run with existed = 1, its status
 * and, if it has finished, its output or error, read by the same statement.
 * Validation errors return CAIRN_EINVAL (see cairn_client_errfield()) and
 * write nothing. *out is zeroed first, so cairn_enqueued_clear(out) is right
 * after any return; call it once done with out->output and out->error.
 */
int cairn_enqueue(cairn_client *c, const char *workflow, const cairn_enqueue_opts *opts,
                  cairn_enqueued *out);

/* Frees e->output, e->error and e->warning and sets them to NULL; the
 * rest of e stays. */
void cairn_enqueued_clear(cairn_enqueued *e);

/*
 * The warnings of the new runs of the last cairn_enqueue() or
 * cairn_enqueue_batch() on c (see cairn_enqueued.warning), distinct ones
 * joined by "; ", or NULL when there were none. Owned by c, valid until the
 * next call on c.
 */
const char *cairn_client_warning(const cairn_client *c);

/*
 * Enqueues n runs of one workflow in one transaction (one statement). opts[i]
 * is run i; out[i] receives its id, existed and status (output and error stay
 * NULL). Either every run is validated and written or, on an error, nothing
 * is. Each run is routed as cairn_enqueue routes it, and the warnings of
 * its new runs are cairn_client_warning()'s; its results need no clearing.
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
 * CAIRN_CANCELLED. A pending run that never started is cancelled at once
 * (a child tells its parent then, as a child's end always does).
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
	char *status; /* completed, failed, retrying, waiting, timed_out (a signal wait) */
	char *output; /* JSON text or NULL */
	char *error;  /* or NULL */
	int attempts;
	int64_t started_unix_ms, finished_unix_ms; /* 0 when unset */
	unsigned locked;                           /* CAIRN_LOCKED_OUTPUT, CAIRN_LOCKED_ERROR */
	char locked_key[CAIRN_KEY_ID_MAX + 1];
	unsigned unauthentic; /* of locked: those that do not authenticate */
	char unauthentic_key[CAIRN_KEY_ID_MAX + 1];
} cairn_step_info;

/* A run's child (cairn_child_start). */
typedef struct cairn_child_info {
	int64_t id;
	char *workflow, *status;
} cairn_child_info;

typedef struct cairn_run {
	int64_t id;
	int64_t parent_id;  /* the run that started it as a child, or 0 */
	char *code_version; /* of the worker that started it (CAIRN_CODE_VERSION), or NULL */
	char *workflow, *key, *group;
	int shard;
	char *status; /* pending running sleeping waiting completed failed cancelled */
	int attempt, max_attempts;
	int cancel_requested;
	char *input;     /* JSON text */
	char *output;    /* JSON text or NULL */
	char *error;     /* or NULL */
	unsigned locked; /* CAIRN_LOCKED_INPUT, _OUTPUT, _ERROR (input is then NULL too) */
	char locked_key[CAIRN_KEY_ID_MAX + 1];
	unsigned unauthentic; /* of locked: those that do not authenticate */
	char unauthentic_key[CAIRN_KEY_ID_MAX + 1];
	int64_t created_unix_ms, scheduled_unix_ms, started_unix_ms, updated_unix_ms,
	    finished_unix_ms; /* 0 when unset */
	size_t nsteps;
	cairn_step_info *steps; /* the journal, by seq; only from cairn_run_get */
	size_t nchildren;
	cairn_child_info *children; /* by id; only from cairn_run_get */
	char *concurrency_key;      /* or NULL */
	int priority;
	int held; /* pending, waiting for a slot of its concurrency key */
	/* Of a pending run that a limit (cairn limit) holds back: what it waits
	 * for, in words; else NULL. Only from cairn_run_get. */
	char *waiting_for;
	/* A chain of runs that continued as new (cairn_continue_as_new): the
	 * run this one continues, and the run that continues it (0: none; only
	 * from cairn_run_get), which may have been removed by the janitor. */
	int64_t continued_from, continued_to;
	/* The runtime that serves the run's workflow ("c", "python 3.11.2"):
	 * its group's, else that of the group that served it last; NULL when no
	 * worker has ever served it. Only from cairn_run_get. */
	char *runtime;
	/* Of a run that has not finished and that no live worker of its group
	 * serves: why it waits, in words (`no live worker serves workflow "x"
	 * (never served)`, `... (last seen 5m ago in group python)`); else NULL.
	 * Only from cairn_run_get. */
	char *unserved;
} cairn_run;

/*
 * Flow control: a workflow's limits (`cairn limit`), held in the database and
 * read by every claim, so a change holds fleet-wide from the next claim of
 * each worker. 0 in a field is no limit.
 *   key_concurrency  runs of one concurrency key executing at once; a run in
 *                    a durable sleep or waiting for a signal holds no slot;
 *                    runs past the limit wait, pending and held
 *   concurrency      runs of the workflow executing at once, fleet-wide
 *   rate             starts of the workflow per rate_period_ms, fleet-wide
 *   key_rate         starts of one concurrency key per key_rate_period_ms
 */
typedef struct cairn_limit {
	char *workflow; /* cairn_limit_set only reads it */
	int key_concurrency;
	int concurrency;
	int rate;
	int64_t rate_period_ms;
	int key_rate;
	int64_t key_rate_period_ms;
	int64_t updated_unix_ms; /* from cairn_limit_list */
} cairn_limit;

/* Sets (replaces) the limits of l->workflow, then lets go the held runs that
 * now have a free slot. */
int cairn_limit_set(cairn_client *c, const cairn_limit *l);
/* Removes the workflow's limits (CAIRN_ENOTFOUND: it had none); its held
 * runs go. */
int cairn_limit_delete(cairn_client *c, const char *workflow);
/* Every workflow's limits, by name. Free with cairn_limit_list_free(). */
int cairn_limit_list(cairn_client *c, cairn_limit **out, size_t *n);
void cairn_limit_list_free(cairn_limit *l, size_t n);

/* Loads a run and its journal. The caller frees *out with cairn_run_free(). */
int cairn_run_get(cairn_client *c, int64_t id, cairn_run **out);
void cairn_run_free(cairn_run *run);

typedef struct cairn_list_filter {
	const char *workflow;     /* NULL: any */
	const char *status;       /* NULL: any */
	const char *code_version; /* NULL: any (CAIRN_CODE_VERSION of the worker that started it) */
	int limit;                /* 0: 50 */
	const char *key;          /* NULL: any; else exactly this key */
	int64_t created_from_unix_ms, created_to_unix_ms; /* created in [from, to); 0: open */
	/* The next page: only runs listed after run before_id (0: from the newest). */
	int64_t before_id;
} cairn_list_filter;

/*
 * Lists runs, newest (highest id) first, without journals; with a creation
 * range, newest by (creation time, id). For the next page pass the last id
 * seen as before_id. Free with cairn_run_list_free().
 */
int cairn_run_list(cairn_client *c, const cairn_list_filter *f, cairn_run **runs, size_t *n);
void cairn_run_list_free(cairn_run *runs, size_t n);

/*
 * Waits until the run has finished (completed, failed or cancelled), and a
 * run that continued as new until the last run of its chain has, or until
 * timeout_ms passes (CAIRN_ETIMEOUT); woken by notification with a polling
 * fallback (at least every second). Through a pooler (PgBouncer in any mode)
 * it does not LISTEN and polls, 20 ms growing to 500 ms. timeout_ms < 0
 * waits forever.
 */
int cairn_run_wait(cairn_client *c, int64_t id, int64_t timeout_ms);
/*
 * The last run of id's chain (cairn_continue_as_new) into *last: id itself
 * when it never continued. cairn_run_wait waits for that run: a run that
 * continued as new has finished only once its chain's last run has.
 */
int cairn_run_last(cairn_client *c, int64_t id, int64_t *last);

/*
 * The value a run published under key (cairn_set_event) into *value (JSON
 * text, malloc'd: free it). CAIRN_ENOTFOUND when the run has published
 * nothing under key; with timeout_ms > 0 (< 0: forever) it waits for it,
 * woken by notification (CAIRN_ETIMEOUT). With changed_from (NULL: any
 * value), it waits until the value differs from that text.
 */
int cairn_event_get(cairn_client *c, int64_t run_id, const char *key, int64_t timeout_ms,
                    const char *changed_from, char **value);

/* What cairn_reencrypt() did, as it goes. */
#define CAIRN_REENCRYPT_LIST_MAX 256
typedef struct cairn_reencrypt_stats {
	int64_t rows_total;  /* rows of runs, steps, signals, events and schedules at the start */
	int64_t rows_done;   /* rows looked at so far */
	int64_t rewritten;   /* values now under the current key (plaintext ones included) */
	int64_t current;     /* values that already were */
	int64_t missing_key; /* values under a key the client lacks: left as they are */
	int64_t unreadable;  /* values under a key the client has that do not authenticate
	                        under it (other key bytes, or altered): left as they are */
	int64_t changed;     /* rows a worker wrote while they were being rewritten: left
	                        for the next pass */
	/* The ids of the keys of the missing_key values and of the unreadable
	 * ones ("k1,k3"), and where the first unreadable values are ("run 42
	 * input, step 42/0 output, ..."); NUL-terminated, "..." ending a list
	 * cut short. */
	char missing_keys[CAIRN_REENCRYPT_LIST_MAX];
	char unreadable_keys[CAIRN_REENCRYPT_LIST_MAX];
	char unreadable_at[CAIRN_REENCRYPT_LIST_MAX];
} cairn_reencrypt_stats;

/*
 * Moves every stored value (run inputs, outputs and errors, step results and
 * errors, signal payloads, event values, schedule inputs) to the client's
 * current key, batch rows at a time
 * (1-100000; 0 means 500), each batch its own transaction; a value written
 * meanwhile is never overwritten (each write compares it first). progress,
 * when not NULL, is called after each batch. CAIRN_EINVAL if the client has no
 * keys. CAIRN_OK once every table was walked, even when values were left
 * (see *out).
 */
int cairn_reencrypt(cairn_client *c, int batch,
                    void (*progress)(const cairn_reencrypt_stats *s, void *arg), void *arg,
                    cairn_reencrypt_stats *out);

/*
 * The operator console's reads (`cairn ui`). cairn_run_counts counts the runs
 * f selects (its status, limit and before_id ignored) per status, in the
 * order of CAIRN_RUN_STATUSES: pending running sleeping waiting completed
 * failed cancelled.
 */
#define CAIRN_RUN_STATUSES 7
int cairn_run_counts(cairn_client *c, const cairn_list_filter *f,
                     int64_t counts[CAIRN_RUN_STATUSES]);

/* A signal sent to a run; consumed_by_seq is the step that took it, or -1
 * while it waits. */
typedef struct cairn_signal_info {
	int64_t id;
	char *name;
	char *payload;   /* JSON text; NULL when locked */
	unsigned locked; /* CAIRN_LOCKED_INPUT when the payload does not open */
	char locked_key[CAIRN_KEY_ID_MAX + 1];
	unsigned unauthentic; /* CAIRN_LOCKED_INPUT when it does not authenticate */
	char unauthentic_key[CAIRN_KEY_ID_MAX + 1];
	int64_t created_unix_ms;
	int consumed_by_seq;
} cairn_signal_info;

/* The run's signals in the order they were sent. Free with cairn_signal_list_free(). */
int cairn_signal_list(cairn_client *c, int64_t run_id, cairn_signal_info **out, size_t *n);
void cairn_signal_list_free(cairn_signal_info *s, size_t n);

/* An event a run published (cairn_set_event). */
typedef struct cairn_event_info {
	char *key;
	char *value;     /* JSON text; NULL when locked */
	unsigned locked; /* CAIRN_LOCKED_OUTPUT when the value does not open */
	char locked_key[CAIRN_KEY_ID_MAX + 1];
	unsigned unauthentic; /* CAIRN_LOCKED_OUTPUT when it does not authenticate */
	char unauthentic_key[CAIRN_KEY_ID_MAX + 1];
	int64_t updated_unix_ms;
} cairn_event_info;

/* The run's events by key. Free with cairn_event_list_free(). */
int cairn_event_list(cairn_client *c, int64_t run_id, cairn_event_info **out, size_t *n);
void cairn_event_list_free(cairn_event_info *e, size_t n);

/*
 * The last hour of work, minute by minute (minute[0] the oldest, each
 * starting at minute_unix_ms[i]): runs completed and failed, and of the runs
 * that finished, the percentiles of their wait from due (scheduled) to
 * start. queue_depth is the number of pending runs now.
 */
#define CAIRN_STATS_MINUTES 60
typedef struct cairn_run_stats {
	int64_t minute_unix_ms[CAIRN_STATS_MINUTES];
	int64_t completed[CAIRN_STATS_MINUTES], failed[CAIRN_STATS_MINUTES];
	double latency_p50_ms, latency_p90_ms, latency_p99_ms;
	int64_t latency_samples;
	int64_t queue_depth;
} cairn_run_stats;
int cairn_run_stats_get(cairn_client *c, cairn_run_stats *out);

/* A built-in singleton (cairn.health, cairn.janitor, cairn.scheduler,
 * cairn.backlog) of group "default": it runs on the owner of its shard. */
typedef struct cairn_singleton_info {
	const char *name; /* static */
	int shard;
	int64_t owner; /* 0: no runner owns the shard */
	char *owner_name;
} cairn_singleton_info;
int cairn_singleton_list(cairn_client *c, cairn_singleton_info **out, size_t *n);
void cairn_singleton_list_free(cairn_singleton_info *s, size_t n);

/* ------------------------------------------------------------- schedules */

/*
 * A schedule starts a run of workflow at every time its cron expression
 * names, in its time zone: cron is 5 fields (minute hour day-of-month month
 * day-of-week) or 6 with seconds first, each *, N, A-B, a step (A-B/S,
 * A/S, or S after a star) or a list of those, month and weekday names; or
 * @hourly @daily @weekly @monthly @yearly. Each wall time fires once: one skipped by a
 * daylight-saving jump at the instant it would have had, one repeated at its first
 * occurrence. The singleton cairn.scheduler fires it; each fire is a
 * run keyed "cairn.schedule:NAME:DUE_MS", so no fire happens twice, whatever crashes.
 */
typedef struct cairn_schedule_opts {
	const char *cron;     /* required */
	const char *tz;       /* a tz database zone or a POSIX TZ string; NULL: "UTC" */
	const char *workflow; /* required */
	const char *input;    /* JSON text; NULL: null */
	const char *group;    /* shard group of the runs; NULL: "default" */
	const char
	    *overlap; /* "skip" (NULL: no fire while its last run is unfinished) or "allow" */
	const char *catchup; /* fires missed while no scheduler ran: "latest" (NULL: the last of
	                        them), "all" (each, at most 1000 at a time) or "none" */
} cairn_schedule_opts;

/* Creates schedule name (CAIRN_ESTATE if it exists); *next_unix_ms (may be
 * NULL) is its first fire. */
int cairn_schedule_create(cairn_client *c, const char *name, const cairn_schedule_opts *o,
                          int64_t *next_unix_ms);

typedef struct cairn_schedule_info {
	char *name, *cron, *tz, *workflow, *group, *overlap, *catchup;
	int paused;
	int64_t next_unix_ms, last_unix_ms; /* last: 0 before the first fire */
	int64_t last_run_id;                /* the run of the last fire, or 0 */
	int64_t fires, skipped;             /* runs started; fires skipped (overlap, catch-up) */
} cairn_schedule_info;

int cairn_schedule_list(cairn_client *c, cairn_schedule_info **out, size_t *n);
void cairn_schedule_list_free(cairn_schedule_info *s, size_t n);
/* Pauses (pause 1) or resumes (0) it: a resumed schedule fires next at its
 * first time after now (what fell in the pause is not fired).
 * CAIRN_ENOTFOUND for no such schedule. */
int cairn_schedule_pause(cairn_client *c, const char *name, int pause);
int cairn_schedule_delete(cairn_client *c, const char *name);

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
	char *checksum; /* hex SHA-256 of the file */
	int applied;    /* 1 if recorded in cairn.schema_migrations */
	int64_t applied_unix_ms;
	int changed; /* applied, but the file's checksum differs */
} cairn_migration_info;

/* Lists known and applied migrations in version order. Free with cairn_migration_list_free(). */
int cairn_migration_list(cairn_client *c, const char *dir, cairn_migration_info **out, size_t *n);
void cairn_migration_list_free(cairn_migration_info *m, size_t n);

/* ------------------------------------------------------------- visibility */

/* One row of cairn.runners, as `cairn runners` shows it. */
typedef struct cairn_runner_info {
	int64_t id;
	char *name, *address, *version;
	char *groups; /* the runner's shard groups, comma-separated */
	int weight;
	int healthy;              /* not marked unhealthy by the health checker */
	int live;                 /* heartbeat younger than the TTL and lease backend connected */
	int64_t heartbeat_age_ms; /* now() - heartbeat_at, measured by PostgreSQL */
	int64_t started_unix_ms;
	int shards;     /* cairn.shard_leases rows it owns */
	char *runtimes; /* the runtimes of the workflows it serves, comma-separated ("c",
	                   "python 3.11.2"); "" when it serves none */
} cairn_runner_info;

/*
 * Lists every registered runner in id order. A runner is live when its
 * heartbeat is younger than ttl_ms and its lease connection (lease_pid) is in
 * pg_stat_activity of this database: the test the workers themselves use,
 * except that health is reported separately. CAIRN_EINVAL unless ttl_ms is
 * from 1 ms to 365 days. The caller frees *out with cairn_runner_list_free().
 */
int cairn_runner_list(cairn_client *c, int64_t ttl_ms, cairn_runner_info **out, size_t *n);
void cairn_runner_list_free(cairn_runner_info *r, size_t n);

/* A live runner that serves a workflow (cairn_workflow_info). */
typedef struct cairn_workflow_runner {
	int64_t id;
	char *name;    /* host:pid, as cairn.runners has it */
	char *runtime; /* what runs the workflow there */
} cairn_workflow_runner;

/*
 * A workflow in a shard group, as `cairn workflows` shows it: one entry per
 * (workflow, group) that a worker has ever served (cairn.workflows), and one
 * per (workflow, group) that has waiting runs and was never served there.
 */
typedef struct cairn_workflow_info {
	char *workflow;
	char *group;
	char *runtime;                  /* the runtime last recorded; NULL: never served here */
	int64_t first_seen_unix_ms;     /* 0: never served in this group */
	int64_t last_seen_unix_ms;      /* refreshed every 15 s while a worker serves it */
	int64_t last_seen_age_ms;       /* now() - last seen, measured by PostgreSQL; 0: never */
	int served;                     /* a worker has served it in this group */
	size_t nrunners;                /* the live runners of the group that serve it */
	cairn_workflow_runner *runners; /* by id */
	int group_live_runners;         /* the group's live runners: nrunners of them serve it */
	int64_t waiting;                /* its runs in this group that are pending */
} cairn_workflow_info;

/*
 * Lists every workflow by name, then group: what serves it (the runners
 * live as cairn_runner_list judges them with ttl_ms) and how many of its runs
 * wait. CAIRN_EINVAL unless ttl_ms is from 1 ms to 365 days. The caller frees
 * *out with cairn_workflow_list_free().
 */
int cairn_workflow_list(cairn_client *c, int64_t ttl_ms, cairn_workflow_info **out, size_t *n);
void cairn_workflow_list_free(cairn_workflow_info *w, size_t n);

/* One row of cairn.shard_leases, or a shard whose lock an outsider holds. */
typedef struct cairn_shard_info {
	char *group;
	int shard;
	int64_t owner;            /* runner id, or 0 when no runner owns the shard */
	char *owner_name;         /* or NULL */
	int64_t epoch;            /* fencing epoch, bumped on every acquisition; 0 if never */
	int64_t acquired_unix_ms; /* 0 if never acquired */
	/* An outsider: a backend of this database that holds the shard's lock
	 * and is no registered runner's lease backend (runners.lease_pid), so
	 * that no runner can take the shard. 0 and NULLs when none. */
	int outsider_pid;
	char *outsider_user;             /* its role (usename), or NULL if not known */
	char *outsider_application_name; /* or NULL if not known */
} cairn_shard_info;

/*
 * Lists the shard leases of group (NULL: every group) by group and shard,
 * with the outsider that holds a shard's lock, if any (see
 * cairn_shard_info): a shard that was never acquired has no row unless an
 * outsider holds its lock. The groups looked at for outsiders are those of
 * the lease rows and of the registered runners (or group). CAIRN_EINVAL for
 * a bad group name. The caller frees *out with cairn_shard_list_free().
 */
int cairn_shard_list(cairn_client *c, const char *group, cairn_shard_info **out, size_t *n);
void cairn_shard_list_free(cairn_shard_info *s, size_t n);

/* ---------------------------------------------------------------- worker */

typedef struct cairn_worker cairn_worker;

/*
 * Creates a worker from the environment (DATABASE_URL, CAIRN_*) overridden by
 * flags in argv (argv[0] is the program name; see `cairn-worker --help`):
 * the constructor of the stock daemon. Nothing is started yet. On
 * CAIRN_EINVAL *out is still set and cairn_worker_errmsg() names the bad
 * variable, its value and what is accepted. *out is NULL only on
 * CAIRN_ENOMEM. Free with cairn_worker_free().
 */
int cairn_worker_new(int argc, char **argv, cairn_worker **out);

/* The settings of a worker built into a program of its own. */
typedef struct cairn_worker_settings {
	const char *database_url; /* libpq URL or conninfo; NULL: from settings or environment */
	/* NULL-terminated "NAME=value" strings naming the variables that
	 * `cairn-worker --help` lists ("CAIRN_CONCURRENCY=8",
	 * "CAIRN_HTTP_ADDR=127.0.0.1:0"), or NULL; validated as the daemon
	 * validates them. The array and strings are copied. */
	const char *const *settings;
	int from_environment; /* 1: read DATABASE_URL and CAIRN_* first, as the daemon does */
} cairn_worker_settings;

/*
 * Creates a worker from settings (NULL: defaults, which need a database URL
 * from somewhere), with no argv to fake. The environment is read only when
 * from_environment is set; settings override it, and database_url overrides
 * both. Errors and ownership as cairn_worker_new().
 */
int cairn_worker_new_with(const cairn_worker_settings *settings, cairn_worker **out);
const char *cairn_worker_errmsg(const cairn_worker *w);

/* The effective configuration, one NAME=value per line, without secrets
 * (of the database only host, port, database and user);
 * owned by w. */
const char *cairn_worker_config_text(cairn_worker *w);

/* The value of a text setting of w ("CAIRN_HTTP_ALLOW"; "" when unset), as
 * loaded; NULL for a name that is no text setting. Owned by w. */
const char *cairn_worker_setting(const cairn_worker *w, const char *name);

/* The --help text of the worker's settings; static storage. */
const char *cairn_worker_settings_help(void);

/*
 * Runs the worker until SIGTERM or SIGINT (or cairn_worker_stop()), then
 * drains: stops taking work, lets in-flight work reach a durable point within
 * CAIRN_SHUTDOWN_TIMEOUT, releases everything and returns CAIRN_OK. Blocks
 * SIGTERM and SIGINT in the calling thread and every thread it starts. It
 * never exits the process. Other returns:
 *   CAIRN_ESCHEMA  a fatal configuration mismatch found at run time;
 *   CAIRN_EINVAL   a plugin could not be loaded or the HTTP endpoint cannot
 *                  listen (nothing was left running);
 *   CAIRN_ETIMEOUT the shutdown timeout passed with a step still running,
 *                  or a singleton ignored its cancel flag and still runs;
 *   CAIRN_EINTR    a second signal came during the drain.
 * After CAIRN_ETIMEOUT and CAIRN_EINTR threads of the worker may still be
 * running: do not call cairn_worker_free(); exit the process (the stock
 * daemon exits 0 and 1). cairn_worker_errmsg() says what happened.
 */
int cairn_worker_run(cairn_worker *w);

/* Asks a running worker to drain and return; safe from any thread. */
void cairn_worker_stop(cairn_worker *w);
void cairn_worker_free(cairn_worker *w);

/*
 * A plugin is a shared object loaded with `cairn-worker --plugin flows.so`
 * (or CAIRN_PLUGINS=a.so:b.so). The plugin, not libcairn, defines and
 * exports
 *
 *     int cairn_plugin_init(cairn_worker *w);
 *
 * which the worker looks up with dlsym() and calls once before it starts. It
 * registers the plugin's workflows and singletons; a non-zero return stops the
 * worker from starting. cairn_plugin_init_fn is its type.
 */
typedef int (*cairn_plugin_init_fn)(cairn_worker *w);

/* -------------------------------------------------------------- workflows */

/*
 * A workflow is a plain C function. Every durable call it makes (cairn_step,
 * cairn_sleep, cairn_await_signal, cairn_now, cairn_random) takes the next
 * sequence number of the run's journal. When a run resumes after a sleep, a
 * signal or a crash, the function is called again from the top and each
 * journaled call returns its recorded result at once, so the code must make
 * the same durable calls in the same order every time (no branching on the
 * wall clock or on rand(); use cairn_now and cairn_random).
 *
 *     static int charge(cairn_ctx *ctx, void *arg, cJSON **result)
 *     {
 *             *result = cJSON_CreateString("ch_123"); // call the payment API here
 *             return CAIRN_OK;
 *     }
 *
 *     static int order(cairn_ctx *ctx, const cJSON *input, cJSON **output)
 *     {
 *             cJSON *charge_id, *approval;
 *             CAIRN_TRY(cairn_step(ctx, "charge", charge, NULL, &charge_id));
 *             int rc = cairn_await_signal(ctx, "approval", 3600 * 1000, &approval);
 *             if (rc == CAIRN_ETIMEOUT)
 *                     return cairn_fail(ctx, "nobody approved within an hour");
 *             CAIRN_TRY(rc);
 *             CAIRN_TRY(cairn_sleep(ctx, "cool-off", 2000));
 *             *output = cJSON_CreateObject();
 *             cJSON_AddItemToObject(*output, "charge", cJSON_Duplicate(charge_id, 1));
 *             return CAIRN_OK;
 *     }
 *
 *     cairn_workflow_register(w, "order", order, NULL);
 *
 * JSON values are cJSON (#include <cjson/cJSON.h>). A result handed back by a
 * durable call is owned by ctx and valid until the workflow function returns;
 * *output, when set, is taken over by the engine. A string in a step's
 * result, an event's value or the output must be UTF-8 (cJSON copies its
 * bytes as they are): one that is not fails the step (or the run) with an
 * error naming the byte and where it is, and nothing of it is stored.
 */
struct cJSON;
typedef struct cairn_ctx cairn_ctx;

/*
 * Return values of a workflow function: CAIRN_OK (the run completes with
 * *output, NULL meaning null), CAIRN_SUSPENDED / CAIRN_CANCELLED /
 * CAIRN_ESTOP as handed back by a durable call, CAIRN_CONTINUED as handed
 * back by cairn_continue_as_new, CAIRN_ERETRY (the whole run
 * is retried from its journal per the workflow's policy while the run's
 * attempts remain; steps that did not complete run again) or CAIRN_EFAIL and
 * any other error, CAIRN_ENONDET included (the run fails for good).
 */
typedef int (*cairn_workflow_fn)(cairn_ctx *ctx, const struct cJSON *input, struct cJSON **output);

/*
 * Exponential backoff with jitter. Zero fields take the defaults:
 * max_attempts 3 (1 = no retries), initial_ms 1000, multiplier 2.0,
 * max_ms 60000, jitter 0.2 (each wait is drawn from +-20% of its nominal).
 * Set jitter to a negative value for none.
 *
 * timeout_ms (0: none) bounds each attempt of a step: at the deadline
 * cairn_should_stop() turns true, and a result the step returns after it is
 * discarded, the attempt counting as timed out (retried while attempts
 * remain). C cannot kill a step that never returns: /status (each run in
 * flight with its step and how long it has run) and the metrics
 * cairn_steps_overdue and cairn_step_longest_running_seconds show one.
 */
typedef struct cairn_retry_policy {
	int max_attempts;
	int64_t initial_ms;
	double multiplier;
	int64_t max_ms;
	double jitter;
	int64_t timeout_ms;
} cairn_retry_policy;

typedef struct cairn_workflow_opts {
	cairn_retry_policy retry; /* between attempts of the whole run; max_attempts
	                             is the run's own (set at enqueue, default 3) */
	void *arg;                /* handed to the function by cairn_workflow_arg() */
	const char *runtime;      /* what runs the workflow, shown by `cairn workflows`,
	                             `cairn status` and the console: NULL for "c"; an SDK's
	                             engine sets its language ("python 3.11.2"); copied */
} cairn_workflow_opts;

/*
 * Registers a workflow before cairn_worker_run(). name follows the run-name
 * rules ([A-Za-z0-9_.:-], 1-128 bytes). CAIRN_EINVAL for a bad or repeated
 * name. opts may be NULL.
 */
int cairn_workflow_register(cairn_worker *w, const char *name, cairn_workflow_fn fn,
                            const cairn_workflow_opts *opts);

/*
 * A step function does the side-effecting work (call an API, write a row).
 * It returns CAIRN_OK with *result set (or NULL for null), CAIRN_ERETRY for a
 * failure worth retrying (cairn_retryable) or CAIRN_EFAIL for one that is not
 * (cairn_fail). It may run more than once if the worker dies before its result
 * is journaled; once journaled it never runs again.
 */
typedef int (*cairn_step_fn)(cairn_ctx *ctx, void *arg, struct cJSON **result);

/*
 * Runs fn once and journals its result under name, retrying with the default
 * policy (3 attempts, 1s, x2). The wait between attempts is a durable timer:
 * the run suspends (CAIRN_SUSPENDED) and resumes when it is due. Returns
 * CAIRN_OK with *result, CAIRN_EFAIL when the attempts are used up or the
 * step failed permanently (the error is journaled and becomes the run's),
 * CAIRN_SUSPENDED, CAIRN_CANCELLED, CAIRN_ESTOP or CAIRN_ENONDET.
 */
int cairn_step(cairn_ctx *ctx, const char *name, cairn_step_fn fn, void *arg,
               struct cJSON **result);
/* As cairn_step with its own retry policy (NULL: the default). */
int cairn_step_retry(cairn_ctx *ctx, const char *name, const cairn_retry_policy *policy,
                     cairn_step_fn fn, void *arg, struct cJSON **result);

/*
 * A transactional step: fn gets a libpq connection (PGconn *) inside a
 * transaction, and its result is journaled in that same transaction, fenced
 * by the run's lease. So the rows fn writes in cairn's PostgreSQL and the
 * step's journal entry commit together or not at all: the effect happens
 * exactly once, even when the worker is killed at any point (a crash before
 * the commit rolls both back, and the step runs again). fn must not commit,
 * roll back or keep the connection; returning an error rolls back what it
 * did (then retried as cairn_step's are). A step that fails after a
 * rollback or a lost lease writes nothing.
 */
struct pg_conn;
typedef int (*cairn_tx_fn)(cairn_ctx *ctx, struct pg_conn *conn, void *arg, struct cJSON **result);
int cairn_tx_step(cairn_ctx *ctx, const char *name, cairn_tx_fn fn, void *arg,
                  struct cJSON **result);

/* Durable sleep: CAIRN_SUSPENDED until the time has come, then CAIRN_OK. */
int cairn_sleep(cairn_ctx *ctx, const char *name, int64_t duration_ms);
int cairn_sleep_until(cairn_ctx *ctx, const char *name, int64_t unix_ms);

/*
 * Waits for the signal name (`cairn signal RUN name PAYLOAD`). A signal sent
 * before the call is buffered and returned at once; signals of one name are
 * consumed in the order they were sent. CAIRN_OK with *payload, or
 * CAIRN_SUSPENDED, or CAIRN_ETIMEOUT once timeout_ms has passed since the
 * first call (timeout_ms < 0: no timeout), or CAIRN_CANCELLED.
 */
int cairn_await_signal(cairn_ctx *ctx, const char *name, int64_t timeout_ms,
                       struct cJSON **payload);

/* The wall clock (Unix ms) and a random 64-bit number, journaled so a replay
 * sees the same values. */
int cairn_now(cairn_ctx *ctx, int64_t *unix_ms);
int cairn_random(cairn_ctx *ctx, uint64_t *value);

/*
 * Composition. Each call below is a durable call with a name (the rules of
 * step names) whose effect happens exactly once: a replay, or the run's next
 * worker after a crash, finds it in the journal and does not repeat it.
 *
 * cairn_child_start starts a child run of workflow with input (NULL: null)
 * in this run's shard group if that group serves the workflow, else in the
 * group that serves it (routed as cairn_enqueue routes: a workflow never
 * served stays in this run's group, and the worker logs the warning), keyed
 * by this run and this call's position, and gives its id. The child is
 * written with this run's next commit (the commit before its next step, its
 * wait, or its end, or one for every 1,000 children started in a row), so
 * starting many costs a statement per thousand, not one each. When the
 * child finishes, the commit that finishes it sends its outcome to this
 * run, which is woken only when a wait of it can be met: a fan-out of N
 * children costs one wake, not N. A parent that ends cancelled asks its
 * unfinished children to cancel (their next durable call returns
 * CAIRN_CANCELLED); a parent that completes or fails leaves them running.
 */
int cairn_child_start(cairn_ctx *ctx, const char *name, const char *workflow,
                      const struct cJSON *input, int64_t *child);
/*
 * Waits for the child started as child (its id) to finish: CAIRN_OK with
 * *output (its output; owned by ctx) once it completed; CAIRN_EFAIL once it
 * failed or was cancelled, the error saying which and why (a failure the
 * workflow may handle); CAIRN_ETIMEOUT once timeout_ms (< 0: none) passed
 * since the first call; else CAIRN_SUSPENDED, and the run is woken when that
 * child ends. Children may be waited for in any order, and one already
 * waited for gives the same outcome again. A child not started by this run
 * is CAIRN_EINVAL, and so is every later durable call of the execution: a
 * workflow that returns it fails.
 */
int cairn_child_wait(cairn_ctx *ctx, int64_t child, int64_t timeout_ms, struct cJSON **output);

/* One child's outcome in a wait for many (cairn_child_wait_all and the
 * like). Its pointers are owned by ctx, valid until the workflow returns. */
typedef struct cairn_child_result {
	int64_t child;              /* the child's id, as given */
	int done;                   /* 1: it finished, and the fields below say how; 0: not yet */
	int status;                 /* CAIRN_OK (completed), CAIRN_EFAIL (failed) or
	                               CAIRN_CANCELLED (cancelled) */
	const struct cJSON *output; /* completed: its output */
	const char *error;          /* failed or cancelled: why */
} cairn_child_result;

/*
 * Waits until k of the n children (their ids, each started by this run, none
 * twice) have finished, as one durable call journaled "children": the run
 * is suspended and woken once, when the k-th ends, however many there are.
 * results (n of them) then say, in the order given, which finished and how
 * (those that ended by then, k or more). Returns CAIRN_OK when every child
 * that finished completed; CAIRN_EFAIL when one failed or was cancelled
 * (the error names the first, results say which: the workflow may handle
 * it); CAIRN_ETIMEOUT once timeout_ms (< 0: none) passed since the first
 * call (results say nothing then, and the children's ends stay for a later
 * wait); else CAIRN_SUSPENDED. A child's end that a wait took is there for
 * later waits too: cairn_child_wait_any, then cairn_child_wait_all of the
 * same children, collects the rest. 1 <= k <= n <= 1,000,000; a child not
 * started by this run, or named twice, is CAIRN_EINVAL (as for
 * cairn_child_wait).
 */
int cairn_child_wait_first(cairn_ctx *ctx, const int64_t *children, int n, int k,
                           int64_t timeout_ms, cairn_child_result *results);
/* cairn_child_wait_first with k = n: every child (map-reduce). */
int cairn_child_wait_all(cairn_ctx *ctx, const int64_t *children, int n, int64_t timeout_ms,
                         cairn_child_result *results);
/* cairn_child_wait_first with k = 1: the first to finish. */
int cairn_child_wait_any(cairn_ctx *ctx, const int64_t *children, int n, int64_t timeout_ms,
                         cairn_child_result *results);
/* Sends signal with payload (NULL: null) to run, once. CAIRN_EFAIL when run
 * does not exist or has finished (the error says which). */
int cairn_send(cairn_ctx *ctx, const char *name, int64_t run, const char *signal,
               const struct cJSON *payload);
/* Enqueues an independent run of workflow with input (NULL: null), once,
 * routed as a child is; *id is its id. It is no child: nobody waits for it
 * or cancels it. */
int cairn_enqueue_from(cairn_ctx *ctx, const char *name, const char *workflow,
                       const struct cJSON *input, int64_t *id);
/* Publishes value under key on this run (a durable call named
 * "event:KEY"): readers see the latest value (cairn_event_get, `cairn
 * event`), each change woken by notification. */
int cairn_set_event(cairn_ctx *ctx, const char *key, const struct cJSON *value);

/*
 * Versioned code. A deploy that changes the durable calls of a workflow
 * must not fail the runs already inside it (their journals were written by
 * the old code). Guard the change:
 *
 *     if (cairn_patched(ctx, "charge-in-two-steps")) { new calls } else { old calls }
 *
 * cairn_patched returns 1 on a run that reaches this point with the patched
 * code (it journals a marker, and a replay finds the marker and returns 1
 * again), and 0 on a run whose journal, written before the patch, has
 * another call at this position (the old path; nothing is journaled). Once
 * no run started before the patch is left (`cairn list --code-version`),
 * the old branch and then the call can go.
 */
int cairn_patched(cairn_ctx *ctx, const char *patch);

/*
 * Continue as new: ends this run and starts its successor, a new run of the
 * same workflow with input (NULL: null) and a fresh journal, in the run's
 * final commit, so that a crash at any point leaves either this run going on
 * or exactly one successor. A workflow that loops without end (a
 * subscription, a poller, an agent) calls it every so many iterations, so
 * that its journal stays small:
 *
 *     for (int i = 0; i < 100; i++) { ...durable calls of one iteration... }
 *     return cairn_continue_as_new(ctx, next_state);
 *
 * Returns CAIRN_CONTINUED (return it from the workflow; every durable call
 * after it returns it too), or CAIRN_CANCELLED when the run was cancelled,
 * CAIRN_ESTOP, or CAIRN_EFAIL for an input that cannot be stored (too large,
 * too deep, not UTF-8). This run ends completed with a null output, and
 * names its successor: the successor (key "cairn.next:ID" of this run) keeps
 * the shard, group, max_attempts, concurrency key, priority and parent, and
 * the chain's first run (whose key is the one enqueued) names the chain.
 * cairn_run_wait and `cairn result` follow a chain to its last run, and a
 * signal or a cancel sent to a run that continued goes to the chain's last
 * run; signals this run had not consumed carry over to the successor. A
 * child run that continues as new reports to its parent when its chain
 * ends, as the child the parent started. The janitor removes finished links
 * after CAIRN_RETENTION, and the chain's first run once the others are gone.
 */
int cairn_continue_as_new(cairn_ctx *ctx, const struct cJSON *input);

/*
 * Record an error message on ctx and return CAIRN_EFAIL (permanent) or
 * CAIRN_ERETRY (retryable), printf-style. Use them as `return cairn_fail(...)`
 * from a step or a workflow.
 */
int cairn_fail(cairn_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cairn_retryable(cairn_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 once the run is cancelled or the worker is handing it over: a long step
 * should check this and return early. */
int cairn_should_stop(const cairn_ctx *ctx);

int64_t cairn_ctx_run_id(const cairn_ctx *ctx);
const char *cairn_ctx_workflow(const cairn_ctx *ctx);
int cairn_ctx_attempt(const cairn_ctx *ctx); /* 1 for the first attempt of the run */
/* Inside a step function: its attempt (1 for the first); 0 outside one. */
int cairn_ctx_step_attempt(const cairn_ctx *ctx);
/*
 * The W3C `traceparent` of where the workflow is now (OpenTelemetry,
 * docs/monitoring.md#traces): inside a step function, its attempt's span;
 * elsewhere, the run's span. The same in every replay and on every worker,
 * so a step may pass it on (as the http built-in does in its requests).
 * Its flags end in 01 when the run's spans are exported. Owned by ctx and
 * valid until the next call of this function or the end of the execution.
 */
const char *cairn_ctx_traceparent(cairn_ctx *ctx);
/* The message of the error the last durable call returned (the step's
 * journaled failure, a child's, a bad argument), or ""; owned by ctx and
 * valid until the next durable call. */
const char *cairn_ctx_error(const cairn_ctx *ctx);
void *cairn_workflow_arg(const cairn_ctx *ctx);

/* ------------------------------------------------------------- singletons */

/*
 * A singleton is a named background task that runs on exactly one worker: the
 * owner of the shard hash(name) in its group. It runs in its own thread and
 * must check cairn_singleton_cancelled() often (or sleep with
 * cairn_singleton_sleep()); when the shard moves or the runner loses its
 * lease, the worker sets the flag. A copy runs only while its worker holds
 * the singleton's fence (an advisory lock on a connection of its own), which
 * is let go only after the function returned, so another worker's copy
 * starts only then. cairn_singleton_cancelled() is also true once that
 * connection is lost. A function still running min(max(
 * CAIRN_SHUTDOWN_TIMEOUT, 1 s), 10 s) after its cancel is a zombie: logged,
 * its fence released (another worker may then run it alongside), never
 * started again in this process until it returns. Returning CAIRN_OK ends it
 * until the shard is acquired again; returning an error restarts it after
 * backoff_ms * 2^min(failures - 1, 10).
 */
typedef struct cairn_singleton cairn_singleton;
typedef int (*cairn_singleton_fn)(cairn_singleton *s, void *arg);

typedef struct cairn_singleton_opts {
	const char *group;  /* shard group; NULL: the worker's first */
	int64_t backoff_ms; /* restart backoff base; 0: CAIRN_SINGLETON_BACKOFF */
} cairn_singleton_opts;

int cairn_singleton_register(cairn_worker *w, const char *name, cairn_singleton_fn fn, void *arg,
                             const cairn_singleton_opts *opts);
int cairn_singleton_cancelled(cairn_singleton *s);
/* Sleeps up to ms; returns 1 if cancelled meanwhile, else 0. */
int cairn_singleton_sleep(cairn_singleton *s, int64_t ms);
/* The database the worker uses (a libpq conninfo), to open a connection. */
const char *cairn_singleton_conninfo(const cairn_singleton *s);
/* The id of this runner in cairn.runners. */
int64_t cairn_singleton_runner_id(const cairn_singleton *s);

#ifdef __cplusplus
}
#endif
#endif
