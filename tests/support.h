/*
 * support.h - helpers for cairn's Criterion tests: a fresh database per test
 * on the harness's PostgreSQL, running the cairn binaries as real processes,
 * and waiting for conditions with a deadline (never a fixed sleep).
 */
#ifndef CAIRN_TEST_SUPPORT_H
#define CAIRN_TEST_SUPPORT_H
#include <libpq-fe.h>
#include <stdint.h>
#include <sys/types.h>

/* Creates an empty database and returns its conninfo (static storage per process). */
const char *tdb_new(void);
/* tdb_new() plus `cairn migrate` (and on Citus `cairn migrate --citus`): a
 * copy of a database migrated once per build. */
const char *tdb_new_migrated(void);
/* Makes database name on the harness's Citus cluster (tests/citus.sh
 * createdb), its URL into url; skips the test without a cluster. */
void tcitus_createdb(const char *name, char *url, size_t n);
PGconn *tdb_connect(const char *conninfo);
/* First column of the first row as a number / string (NULL -> -1 / NULL). */
int64_t tdb_int(PGconn *c, const char *sql);
char *tdb_str(PGconn *c, const char *sql); /* caller frees */
void tdb_exec(PGconn *c, const char *sql);

/* The path of a built binary (bin/cairn ...) under $CAIRN_BIN_DIR. */
const char *tbin(const char *name);

/* Runs bin/cairn with DATABASE_URL=db and the NULL-terminated args; captures
 * stdout and stderr (caller frees; either may be NULL). Returns the exit code. */
int tcli(const char *db, char **out, char **err, ...);
/* Runs argv[0] (a path) with argv, after setting the child's environment from
 * env ("NAME=value" sets, a bare "NAME" unsets; NULL-terminated, may be
 * NULL); captures stdout and stderr as tcli does. Returns the exit code. */
int trun(const char *const *argv, const char *const *env, char **out, char **err);
/* As tcli, with an argv array. */
int tcli_argv(const char *db, char **out, char **err, const char *const *argv);

/* Milliseconds on the monotonic clock. */
int64_t tnow_ms(void);
/* Polls cond(arg) every 10 ms until it returns nonzero or timeout_ms passes. */
int twait(int (*cond)(void *), void *arg, int64_t timeout_ms);

/* A TCP port on 127.0.0.1 that refuses connections: a socket bound to it that
 * never listens, so connecting gets ECONNREFUSED and nobody else can bind the
 * port while *fd stays open. Close *fd when the test no longer needs it. */
int tclosed_port(int *fd);

/* Starts bin/cairn-worker with DATABASE_URL=db, CAIRN_HTTP_ADDR=127.0.0.1:0 (the
 * kernel picks a free port; the advertised address follows it) and the
 * NULL-terminated "NAME=value" settings; stderr goes to log_path, or to a
 * temporary file of its own when log_path is NULL. Waits (give-up bound 60 s)
 * for the worker's "cairn-worker started" log line and stores the port it
 * bound in *port (port may be NULL). Fails the test, showing the log, if the
 * worker exits first or never logs it. Settings must keep CAIRN_LOG_LEVEL at
 * info or debug. Returns the pid. */
pid_t tworker_start(const char *db, int *port, const char *log_path, ...);
/* As tworker_start, but returns at once without waiting for the start line:
 * for a worker that is expected to stop on its own. */
pid_t tworker_spawn(const char *db, const char *log_path, ...);
/* Sends sig and waits up to timeout_ms for the exit; returns the exit code or -1. */
int tworker_stop(pid_t pid, int sig, int64_t timeout_ms);
/* Processes a test started and has not ended yet (workers, language
 * processes), at most 8: tlive_kill, a suite's .fini, kills them, so a
 * failed assertion never leaves one running. tlive_del(0) does nothing. */
void tlive_add(pid_t pid);
void tlive_del(pid_t pid);
void tlive_kill(void);
/* GET (or another method) http://127.0.0.1:port/path; returns the status or 0. */
long thttp(int port, const char *method, const char *path, char **body, char **ctype);
/* thttp with an Authorization header (NULL: none). */
long thttp_auth(int port, const char *method, const char *path, const char *authorization,
                char **body, char **ctype);
/* method path on 127.0.0.1:port with the NULL-terminated "Name: value"
 * headers (may be NULL) and body (NULL: none); the reply's body and
 * Content-Type as thttp gives them (either may be NULL). The status or 0. */
long thttp_req(int port, const char *method, const char *path, const char *const *headers,
               const char *body, char **resp, char **ctype);
/* thttp_req with a body of len bytes, which may hold NUL bytes. */
long thttp_req_n(int port, const char *method, const char *path, const char *const *headers,
                 const char *body, size_t len, char **resp, char **ctype);
/* thttp_auth with a request body (NULL: none), sent as application/json. */
long thttp_send(int port, const char *method, const char *path, const char *authorization,
                const char *request, char **body, char **ctype);
/* thttp_send with a body of len bytes, which may hold NUL bytes. */
long thttp_send_n(int port, const char *method, const char *path, const char *authorization,
                  const char *request, size_t len, char **body, char **ctype);
/* Waits until GET path answers want_status. */
int thttp_wait(int port, const char *path, long want_status, int64_t timeout_ms);
/* Creates an empty temporary file for a worker log; returns its path in out. */
const char *tlog_file(char out[64]);
/* The whole file as a string (caller frees), then the file is removed. */
char *tfile_take(const char *path);
/* The whole file as a string (caller frees); the file stays. */
char *tfile_read(const char *path);
/* Polls the file every 10 ms until it contains text; 1 if it did within timeout_ms. */
int tfile_wait(const char *path, const char *text, int64_t timeout_ms);

/* tdb_new_migrated() with `cairn migrate --shards N` (0: the default): fewer
 * shards keep lease tests light. A copy of a template made once per number
 * of shards. */
const char *tdb_new_migrated_shards(int shards);
/* The value of a metric on the worker's /metrics (the sum of its samples,
 * one per label set), or -1 when the endpoint does not answer or has no
 * such metric. */
double tmetric(int port, const char *name);
/* The sum of the samples of metric name in a /metrics page whose labels
 * contain labels (e.g. "workflow=\"order\""; NULL: every sample), or -1
 * when there is none. */
double tmetric_in(const char *text, const char *name, const char *labels);
/* The path of the test plugin (tests/plugin_test.so): $CAIRN_TEST_PLUGIN. */
const char *tplugin_path(void);
/* The path of the execution tests' plugin (tests/plugin_flows.so): $CAIRN_TEST_FLOWS. */
const char *tflows_path(void);
/* What a test of plugin_flows.so's workflows works with: a new database of
 * shards shards, migrated, with the tables those workflows write
 * (t_counter, t_flags, t_attempts, t_exec, t_hits), a connection and a
 * client (cairn.h's cairn_client). */
typedef struct tflows_env {
	const char *db;
	PGconn *c;
	struct cairn_client *cl;
} tflows_env;
void tflows_setup(tflows_env *e, int shards);
void tflows_teardown(tflows_env *e);
/* Polls the number sql returns (tdb_int) every 10 ms until it is at least want;
 * 1 if it got there within timeout_ms, else 0. */
int tdb_wait_at_least(PGconn *c, const char *sql, int64_t want, int64_t timeout_ms);
/* A counter of the statistics views (stat_sql, e.g. a seq_tup_read of
 * pg_stat_user_tables) once the other sessions of c's database whose
 * application_name is LIKE app (every other one when app is NULL) have
 * ended, and c's own counts are flushed: a session's counts reach the views
 * as it ends. -1 when they did not end within timeout_ms. */
int64_t tdb_stat_after_sessions(PGconn *c, const char *app, const char *stat_sql,
                                int64_t timeout_ms);
/* The payload of the next notification on c (LISTEN) within timeout_ms
 * (caller frees), or NULL. */
char *tdb_next_notification(PGconn *c, int64_t timeout_ms);
/* tdb_int and tdb_wait_at_least with the SQL built printf-style. */
int64_t tdb_intf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The part of run id: its rows of other tables are in the same part, and
 * on Citus a statement locks or writes them only by it. */
int64_t tdb_run_part(PGconn *c, int64_t id);
int tdb_wait_at_leastf(PGconn *c, int64_t want, int64_t timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A PgBouncer (Debian's /usr/sbin/pgbouncer) in front of the harness's
 * PostgreSQL, for one test. */
typedef struct tpgbouncer {
	pid_t pid;
	char dir[64];    /* its config, log and Unix socket */
	char url[2048];  /* the conninfo of the test's database through it */
	char admin[640]; /* the conninfo of its admin console */
} tpgbouncer;
/* Starts pgbouncer with pool_mode = mode ("session" or "transaction"),
 * listening only on a Unix socket in a temporary directory of its own and
 * forwarding every database (`* =`) to the server of $DATABASE_URL, with
 * auth_type = trust. As root it runs as the postgres user (setpriv, with
 * SIGKILL when the test process dies). Waits (give-up bound 10 s) until it
 * answers, and returns b->url: db (a tdb_new conninfo) with host and port
 * replaced by the pooler's. Stopped by tpgbouncer_stop, and at exit. */
const char *tpgbouncer_start(tpgbouncer *b, const char *mode, const char *db);
/* Runs an admin console command ("DISABLE db", "ENABLE db", ...). */
void tpgbouncer_admin(tpgbouncer *b, const char *command);
/* Kills it, waits for it and removes its directory; a second call does nothing. */
void tpgbouncer_stop(tpgbouncer *b);

/* The FROM and WHERE of the worker commit sessions of the current database
 * that wait for a lock: SELECT count(*) TDB_COMMIT_WAITING. */
#define TDB_COMMIT_WAITING                                                                         \
	"FROM pg_stat_activity WHERE datname = current_database() "                                \
	"AND application_name = 'cairn-worker commit' AND wait_event_type = 'Lock'"

/* Whether the tests run on the harness's Citus cluster (CAIRN_TEST_CITUS=1,
 * tests/run.sh's second run of the engine's suites): every database a test
 * makes is then distributed once migrated. */
int tdb_on_citus(void);

/* The count of the worker commit sessions of the current database that
 * wait for a lock, as a whole statement: SELECT count(*) TDB_COMMIT_WAITING
 * on one server; on Citus (CAIRN_TEST_CITUS) the lock is waited for on the
 * node of the row's part, where citus_lock_waits shows the wait, and the
 * commit session is the coordinator's backend of the waiter's global pid. */
const char *tdb_commit_waiting(void);
/* The same sessions terminated, as a whole statement that returns their
 * count: SELECT count(pg_terminate_backend(pid)) TDB_COMMIT_WAITING on one
 * server. */
const char *tdb_commit_waiting_terminate(void);

/* cr_assert(cond, ...) that first calls dump(), which prints what explains a
 * failure (the workers' logs, say). */
#define tcheck(dump, cond, ...)                                                                    \
	do {                                                                                       \
		int tcheck_ok_ = (cond);                                                           \
		if (!tcheck_ok_) {                                                                 \
			dump();                                                                    \
			cr_assert(tcheck_ok_, __VA_ARGS__);                                        \
		}                                                                                  \
	} while (0)
#endif
