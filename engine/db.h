/*
 * db.h - thin helpers over libpq: connect, parameterised statements with
 * error capture, typed column reads, the shard count every component needs,
 * and the reconnect backoff. One PGconn per thread, never shared.
 */
#ifndef CAIRN_DB_H
#define CAIRN_DB_H
#include <libpq-fe.h>
#include <stdint.h>

#include "buf.h"

/*
 * TCP settings of every connection cairn opens (client side through libpq,
 * and, for the worker's sessions, the server side too): an idle connection
 * whose peer vanished is noticed after DB_KEEPALIVES_IDLE_S +
 * DB_KEEPALIVES_COUNT * DB_KEEPALIVES_INTERVAL_S = 11 s, and one with data
 * unacknowledged for DB_TCP_USER_TIMEOUT_MS = 10 s is dropped. A URL or
 * conninfo that sets keepalives* or tcp_user_timeout wins on the client
 * side. Unix-socket connections ignore them.
 */
#define DB_KEEPALIVES_IDLE_S     5
#define DB_KEEPALIVES_INTERVAL_S 2
#define DB_KEEPALIVES_COUNT      3
#define DB_TCP_USER_TIMEOUT_MS   10000

/* Connects (with the TCP settings above and a 5 s connect timeout); on
 * failure returns NULL and puts the reason into err. */
PGconn *db_connect(const char *conninfo, const char *app_name, buf *err);
/* What else db_session_limits sets (flags). */
enum {
	DB_SESSION_GENERIC_PLANS = 1, /* plan_cache_mode force_generic_plan: each prepared
	                                 statement is planned once */
	DB_SESSION_NO_DISK_WAIT = 2,  /* synchronous_commit off */
};
/*
 * Sets the session's statement_timeout and lock_timeout (ms; 0 is none),
 * the server side's keepalives and tcp_user_timeout as above, and what
 * flags ask for, in one statement. 0, or -CAIRN_EDB with the reason in err.
 * A statement that hits a timeout fails with SQLSTATE 57014 or 55P03; the
 * connection stays usable.
 */
int db_session_limits(PGconn *c, int64_t statement_ms, int64_t lock_ms, int flags, buf *err);
/*
 * The calling thread's wait limit for db_exec and db_cmd (0, the default:
 * none). A statement with no answer within it fails with "no answer within
 * N ms", and its connection is shut down: db_ok() is false from then on, so
 * the owner reconnects. For connections whose peer may hang without a TCP
 * error (the lease connection: a frozen proxy, a stuck server).
 */
void db_set_wait_limit(int64_t ms);

/*
 * Runs sql with text parameters. Returns the result if its status is
 * COMMAND_OK or TUPLES_OK; otherwise clears it, writes the server's message
 * into err (if err) and returns NULL. The caller PQclear()s the result.
 */
PGresult *db_exec(PGconn *c, buf *err, const char *sql, int n, const char *const *params);
/*
 * A statement a client sends often: prepared once per session under name,
 * so the server plans it once; sent as text where that cannot be known to
 * last (behind a pooler the next statement may reach another session,
 * which never saw the name).
 */
typedef struct db_stmt {
	const char *name, *sql;
} db_stmt;
/* How db_exec_then sends a statement: as text, by the name the session
 * prepared, or preparing it first in the same round trip. */
typedef enum db_send { DB_TEXT, DB_NAMED, DB_PREPARE } db_send;
/*
 * db_exec of s, then of `then` in a transaction of its own, sent together
 * (one round trip, libpq's pipeline mode): the second runs after the first
 * has committed, whatever its outcome, and its result is dropped (*then_ok
 * says whether it succeeded). For a wake-up sent after the write it
 * announces. Not for a thread with a wait limit (it then runs them one
 * after the other, as text).
 */
PGresult *db_exec_then(PGconn *c, buf *err, const db_stmt *s, db_send how, int n,
                       const char *const *params, const db_stmt *then, db_send then_how, int tn,
                       const char *const *tparams, int *then_ok);
/* Prepares the n statements (name, SQL) in one round trip and one
 * transaction: 0, or -CAIRN_EDB with the first error in err. */
int db_prepare(PGconn *c, const db_stmt *s, int n, buf *err);
/* The prepared statement name, like db_exec. */
PGresult *db_exec_prepared(PGconn *c, buf *err, const char *name, int n, const char *const *params);
/*
 * The prepared statement name executed count times, with params[i] (n
 * each) the i-th time, each in a transaction of its own, sent together
 * (libpq's pipeline mode: one round trip for up to DB_PIPELINE_MAX, few
 * enough that their parameters and results fit in the socket's buffers,
 * since a blocking connection reads no result while it sends):
 * out[i] is the i-th result, or NULL where it failed. 0, or -1 when one
 * failed (err says how the first did); those that did not fail ran and
 * committed whatever happened to the others. Not for a thread with a wait
 * limit (it then runs them one after the other).
 */
#define DB_PIPELINE_MAX 16
int db_exec_prepared_each(PGconn *c, buf *err, const char *name, int count, int n,
                          const char *const *const *params, PGresult **out);
/* db_exec for statements whose result is not needed: 0 or -1. */
int db_cmd(PGconn *c, buf *err, const char *sql, int n, const char *const *params);
/*
 * ANALYZE of tables (a constant list: "cairn.a, cairn.b") unless one of
 * them was analyzed, by anyone (autovacuum too), in the last within_ms,
 * under the transaction advisory lock lock_key: of the sessions of a fleet
 * that ask at once, one analyzes and the others find it done. An ANALYZE
 * makes every session plan its statements on those tables again, so a
 * worker never runs one that another just ran. 1: analyzed; 0: analyzed
 * within the time; -1: another session holds the lock (it is analyzing),
 * or the database failed.
 */
int db_analyze_unless_recent(PGconn *c, int64_t lock_key, const char *tables, int64_t within_ms);
/* Its lock keys (one-bigint advisory locks; migrate.c's is 7233373717601141521). */
#define DB_LOCK_ANALYZE_QUEUE  7233373717601141522 /* cairn.messages, cairn.runs */
#define DB_LOCK_ANALYZE_LEASES 7233373717601141523 /* cairn.shard_leases */
/* SQLSTATE of the last error copied by db_exec (5 chars) or "". */
const char *db_last_sqlstate(void);
/* Its primary message, without severity, detail or context (cut at 511
 * bytes), or "": what a caller shows when the message is the database's
 * answer to the user (a refusal raised by a cairn function). */
const char *db_last_message(void);
/* ROLLBACK, keeping what db_last_sqlstate and db_last_message say of the
 * statement that failed before it. */
void db_rollback(PGconn *c);

/* The connection is still usable (not CONNECTION_BAD). */
int db_ok(PGconn *c);

/* libpq keeps a connection's input and output buffers at the size of the
 * largest message it read or sent, for the life of the connection: a
 * parent of 100,000 children claimed with its journal in one value (20 MB)
 * left its worker 80 MB larger for good. A long-lived connection that
 * moved a message larger than this is closed and opened again by its
 * owner, after that message. */
#define DB_BUFFER_KEEP_MAX (8 * 1024 * 1024)

/* Parses a timestamptz column rendered by SQL as epoch milliseconds (bigint). */
int64_t db_get_i64(const PGresult *r, int row, int col);
int db_get_int(const PGresult *r, int row, int col);
/* 1 for a boolean column that is true, 0 otherwise (false or NULL). */
int db_get_bool(const PGresult *r, int row, int col);
/* strdup of the value, or NULL when the column is NULL. */
char *db_get_str(const PGresult *r, int row, int col);

/* What cairn.settings records for every front door and worker. */
#define DB_DEFAULT_MAX_PENDING_SIGNALS 1000
#define DB_DEFAULT_MAX_JOURNAL_BYTES   (64LL * 1024 * 1024)
/* The most parts (cairn.parts) a database may have: `cairn migrate --citus`
 * makes one per Citus shard (citus.shard_count, 32 by default). */
#define DB_PARTS_MAX 1024
typedef struct db_settings {
	int shards;                  /* shards_per_group */
	int max_pending_signals;     /* unconsumed signals one run may hold */
	int64_t max_journal_bytes;   /* stored size of one run's journal */
	int pooled;                  /* the connection reaches its server through a pooler */
	int schema_version;          /* the newest migration applied (schema_migrations) */
	int nparts;                  /* cairn.parts: how many (1 on one server) */
	int part_keys[DB_PARTS_MAX]; /* the key of part_no i, stored in the rows' part */
	int64_t first_placed_id;     /* runs from this id on carry their shard (migration 0025) */
} db_settings;

/* The key of the part of shard (the value stored in its rows' part). */
int db_part_key(const db_settings *s, int shard);

/*
 * Reads cairn.settings (limits not recorded take their defaults): 0;
 * -CAIRN_ESCHEMA when the schema is missing or the shard count is not
 * recorded (err says to run `cairn migrate`); -CAIRN_EDB when the statement
 * failed.
 */
int db_read_settings(PGconn *c, db_settings *out, buf *err);

/* Appends msg to out without the passwords of conninfo (a URL's userinfo,
 * password= and sslpassword=, raw and percent-decoded), each replaced by
 * ****: libpq's messages quote a conninfo it cannot parse whole. */
void db_scrub(const char *conninfo, const char *msg, buf *out);

/* The wait before reconnecting after `failures` failed attempts: capped
 * exponential backoff (100 ms up to 15 s) with full jitter. */
int64_t db_backoff_ms(int failures);

/* pg_backend_pid() on c: its server process, also behind a pooler; or -1
 * (the error in err). */
int64_t db_server_pid(PGconn *c, buf *err);
/*
 * 1 when c reaches its server through a pooler (the backend key libpq got
 * is not the server's pg_backend_pid(): PgBouncer hands out its own), 0
 * when it is direct, -CAIRN_EDB when the query failed (err says why).
 */
int db_behind_pooler(PGconn *c, buf *err);
/*
 * Whether statements on a keep one server session, found by opening a
 * second connection to conninfo and comparing server pids (db.c explains
 * how): 0 when they do (direct, or session pooling); -CAIRN_ESTATE when a
 * pooler moves a between server sessions (transaction or statement
 * pooling; err names it and says what cairn-worker needs); -CAIRN_EDB when
 * the check could not be made (err says why). Each statement waits at most
 * 5 s.
 */
int db_check_session_pooling(PGconn *a, const char *conninfo, buf *err);

/* Decimal text of v in out (at least 24 bytes); returns out. */
char *db_i64(char out[24], int64_t v);
#endif
