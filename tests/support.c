/*
 * support.c - test helpers; see support.h. Each test gets its own database
 * (CREATE DATABASE on the harness's server, dropped at exit), so tests run
 * in parallel and never touch data they did not create; a migrated one is
 * a copy of a template migrated once per build (migrated_template).
 */
#include "support.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"

static char db_name[64];
static char db_conninfo[2048];

static void drop_db(void)
{
	if (!db_name[0])
		return;
	PGconn *c = PQconnectdb(getenv("DATABASE_URL"));
	if (PQstatus(c) == CONNECTION_OK) {
		char sql[128];
		snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", db_name);
		PQclear(PQexec(c, sql));
	}
	PQfinish(c);
}

int tdb_on_citus(void)
{
	const char *v = getenv("CAIRN_TEST_CITUS");
	return v && strcmp(v, "1") == 0;
}

const char *tdb_commit_waiting(void)
{
	if (!tdb_on_citus())
		return "SELECT count(*) " TDB_COMMIT_WAITING;
	return "SELECT count(*) FROM citus_lock_waits w WHERE EXISTS (SELECT 1 FROM "
	       "citus_stat_activity a WHERE a.global_pid = w.waiting_gpid AND NOT "
	       "a.is_worker_query AND a.datname = current_database() "
	       "AND a.application_name = 'cairn-worker commit')";
}

/* On Citus the session to end is the coordinator's backend of the waiter,
 * the one the worker is connected to (ending the node's backend would fail
 * the statement, not lose the connection), by its global pid, which
 * Citus's pg_terminate_backend takes. */
const char *tdb_commit_waiting_terminate(void)
{
	if (!tdb_on_citus())
		return "SELECT count(pg_terminate_backend(pid)) " TDB_COMMIT_WAITING;
	return "SELECT count(pg_terminate_backend(a.global_pid)) FROM citus_stat_activity a "
	       "WHERE NOT a.is_worker_query AND a.datname = current_database() "
	       "AND a.application_name = 'cairn-worker commit' AND EXISTS (SELECT 1 FROM "
	       "citus_lock_waits w WHERE w.waiting_gpid = a.global_pid)";
}

/* The databases this process made on the harness's cluster, dropped at
 * its exit (drop_citus_dbs). One left behind keeps a Citus maintenance
 * daemon, a background worker, on each node. */
static char citus_dbs[16][64];
static int ncitus_dbs;

static void drop_citus_dbs(void)
{
	for (int i = 0; i < ncitus_dbs; i++) {
		const char *argv[] = {"/bin/sh",    getenv("CAIRN_CITUS_SH"),
		                      "dropdb",     getenv("CAIRN_CITUS_DIR"),
		                      citus_dbs[i], NULL};
		trun(argv, NULL, NULL, NULL);
	}
}

/* citus.sh CMD DIR NAME [TEMPLATE] on the harness's cluster: its output
 * (caller frees). */
static char *citus_sh(const char *cmd, const char *name, const char *template)
{
	const char *sh = getenv("CAIRN_CITUS_SH"), *dir = getenv("CAIRN_CITUS_DIR");
	if (!sh || !dir || !getenv("CAIRN_CITUS_URL"))
		cr_skip_test("no Citus cluster of the harness (tests/run.sh starts one when Citus "
		             "is installed)");
	const char *argv[] = {"/bin/sh", sh, cmd, dir, name, template, NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(argv, NULL, &out, &err);
	cr_assert_eq(rc, 0, "citus.sh %s %s: %s", cmd, name, err ? err : "");
	free(err);
	return out;
}

/* Database name of the cluster (a copy of template, or NULL): its URL. */
static void citus_createdb_from(const char *name, const char *template, char *url, size_t n)
{
	char *out = citus_sh("createdb", name, template);
	snprintf(url, n, "%s", out ? out : "");
	url[strcspn(url, "\n")] = '\0';
	free(out);
}

/* Database name, which citus_createdb_from is to make, is dropped when
 * the process exits. */
static void citus_drop_at_exit(const char *name)
{
	cr_assert_lt(ncitus_dbs, 16, "too many databases on the cluster in one test");
	if (ncitus_dbs == 0)
		atexit(drop_citus_dbs);
	snprintf(citus_dbs[ncitus_dbs++], sizeof citus_dbs[0], "%s", name);
}

void tcitus_createdb(const char *name, char *url, size_t n)
{
	citus_drop_at_exit(name);
	citus_createdb_from(name, NULL, url, n);
}

static void conninfo_of(const char *admin, const char *name, char *out, size_t size);

/* As the one server's (tdb_new_from), the conninfo is keywords and values,
 * to which a test may append its own ("password=..."), not citus.sh's URL. */
static const char *tdb_new_citus(const char *template)
{
	static unsigned seq;
	char url[2048];
	snprintf(db_name, sizeof db_name, "cairn_test_%d_%u", (int)getpid(), seq++);
	citus_drop_at_exit(db_name);
	citus_createdb_from(db_name, template, url, sizeof url);
	conninfo_of(url, db_name, db_conninfo, sizeof db_conninfo);
	return db_conninfo;
}

/* conninfo of database name on the server of conninfo admin: the same
 * server and credentials. */
static void conninfo_of(const char *admin, const char *name, char *out, size_t size)
{
	PQconninfoOption *opts = PQconninfoParse(admin, NULL);
	cr_assert(opts);
	size_t n = 0;
	out[0] = '\0';
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		const char *v = strcmp(o->keyword, "dbname") == 0 ? name : o->val;
		if (!v || !*v)
			continue;
		n += (size_t)snprintf(out + n, size - n, "%s%s='%s'", n ? " " : "", o->keyword, v);
	}
	if (!strstr(out, "dbname="))
		snprintf(out + n, size - n, " dbname='%s'", name);
	PQconninfoFree(opts);
}

static void admin_exec(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
	          "%s: %s", sql, PQerrorMessage(c));
	PQclear(r);
}

/* A new database of the harness's server, a copy of template (NULL:
 * template1's), dropped at exit: its conninfo. */
static const char *tdb_new_from(const char *template)
{
	const char *admin = getenv("DATABASE_URL");
	cr_assert(admin && *admin, "DATABASE_URL is not set: run the tests with `make test`");
	PGconn *c = PQconnectdb(admin);
	cr_assert(PQstatus(c) == CONNECTION_OK, "cannot connect to %s: %s", admin,
	          PQerrorMessage(c));
	static unsigned seq;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(db_name, sizeof db_name, "cairn_test_%d_%ld_%u", (int)getpid(), (long)ts.tv_nsec,
	         seq++);
	char sql[256];
	snprintf(sql, sizeof sql, "CREATE DATABASE %s%s%s", db_name, template ? " TEMPLATE " : "",
	         template ? template : "");
	admin_exec(c, sql);
	PQfinish(c);
	atexit(drop_db);
	conninfo_of(admin, db_name, db_conninfo, sizeof db_conninfo);
	return db_conninfo;
}

const char *tdb_new(void)
{
	return tdb_on_citus() ? tdb_new_citus(NULL) : tdb_new_from(NULL);
}

/*
 * The database the migrated databases of one server are copies of:
 * `cairn migrate` runs once per server, build of cairn and number of
 * shards per group (its name carries the binary's size and time, whose
 * migrations it embeds, and that number), not once per test. The first test that needs it makes it,
 * under an advisory lock of the server, as a database of another name renamed once migrated, so
 * that no test copies half of one; those of other builds are dropped then.
 */
static void template_name(char name[64], int shards)
{
	struct stat st;
	cr_assert_eq(stat(tbin("cairn"), &st), 0, "%s: %s", tbin("cairn"), strerror(errno));
	snprintf(name, 64, "cairn_template_%llx_%llx_%d", (unsigned long long)st.st_size,
	         (unsigned long long)st.st_mtime, shards);
}

/* `cairn migrate` of url, with --shards when shards is not 0 (the
 * default). */
static void migrate_shards(const char *url, int shards)
{
	char n[16], *err = NULL;
	snprintf(n, sizeof n, "%d", shards);
	int rc = shards ? tcli(url, NULL, &err, "migrate", "--shards", n, NULL)
	                : tcli(url, NULL, &err, "migrate", NULL);
	cr_assert_eq(rc, 0, "cairn migrate --shards %d failed: %s", shards, err ? err : "");
	free(err);
}

/* The template of databases migrated with shards per group (0: the
 * default), one per number a test asks for. */
static const char *migrated_template(int shards)
{
	static char name[64];
	template_name(name, shards);
	const char *admin = getenv("DATABASE_URL");
	cr_assert(admin && *admin, "DATABASE_URL is not set: run the tests with `make test`");
	PGconn *c = PQconnectdb(admin);
	cr_assert(PQstatus(c) == CONNECTION_OK, "cannot connect to %s: %s", admin,
	          PQerrorMessage(c));
	admin_exec(c, "SELECT pg_advisory_lock(hashtext('cairn tests: the migrated template'))");
	const char *v[] = {name};
	PGresult *r = PQexecParams(c, "SELECT 1 FROM pg_database WHERE datname = $1", 1, NULL, v,
	                           NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
	int have = PQntuples(r) > 0;
	PQclear(r);
	if (!have) {
		char sql[256], building[80], url[2048];
		/* Those of this build: the name up to its shards. */
		size_t build = (size_t)(strrchr(name, '_') - name);
		r = PQexec(
		    c, "SELECT datname FROM pg_database WHERE datname LIKE 'cairn\\_template\\_%'");
		for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
			if (strncmp(PQgetvalue(r, i, 0), name, build + 1) == 0)
				continue;
			snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s",
			         PQgetvalue(r, i, 0));
			PQclear(PQexec(c, sql)); /* one in use by another build's run stays */
		}
		PQclear(r);
		snprintf(building, sizeof building, "%s_new", name);
		snprintf(sql, sizeof sql, "CREATE DATABASE %s", building);
		admin_exec(c, sql);
		conninfo_of(admin, building, url, sizeof url);
		migrate_shards(url, shards);
		snprintf(sql, sizeof sql, "ALTER DATABASE %s RENAME TO %s", building, name);
		admin_exec(c, sql);
	}
	PQfinish(c); /* and the lock with it */
	return name;
}

/*
 * The same on the harness's Citus cluster: a database migrated and
 * distributed once, then sealed on every node (citus.sh seal: no session
 * of it left or to come, not even Citus's own), which each test's database
 * copies node by node, Citus's metadata of its nodes and shards with it.
 * Sealing is its last step: one found unsealed was left half made, and is
 * made again.
 */
static const char *citus_migrated_template(int shards)
{
	static char name[64];
	template_name(name, shards);
	const char *admin = getenv("CAIRN_CITUS_URL");
	if (!admin)
		cr_skip_test("no Citus cluster of the harness (tests/run.sh starts one when Citus "
		             "is installed)");
	PGconn *c = PQconnectdb(admin);
	cr_assert(PQstatus(c) == CONNECTION_OK, "cannot connect to %s: %s", admin,
	          PQerrorMessage(c));
	admin_exec(c, "SELECT pg_advisory_lock(hashtext('cairn tests: the migrated template'))");
	const char *v[] = {name};
	PGresult *r = PQexecParams(c, "SELECT datallowconn FROM pg_database WHERE datname = $1", 1,
	                           NULL, v, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
	int found = PQntuples(r) > 0, sealed = found && strcmp(PQgetvalue(r, 0, 0), "f") == 0;
	PQclear(r);
	if (!sealed) {
		if (found)
			free(citus_sh("dropdb", name, NULL));
		char url[2048], *err = NULL;
		citus_createdb_from(name, NULL, url, sizeof url);
		migrate_shards(url, shards);
		int rc = tcli(url, NULL, &err, "migrate", "--citus", NULL);
		cr_assert_eq(rc, 0, "cairn migrate --citus failed: %s", err ? err : "");
		free(err);
		free(citus_sh("seal", name, NULL));
	}
	PQfinish(c); /* and the lock with it */
	return name;
}

const char *tdb_new_migrated(void)
{
	return tdb_new_migrated_shards(0);
}

const char *tdb_new_migrated_shards(int shards)
{
	return tdb_on_citus() ? tdb_new_citus(citus_migrated_template(shards))
	                      : tdb_new_from(migrated_template(shards));
}

PGconn *tdb_connect(const char *conninfo)
{
	PGconn *c = PQconnectdb(conninfo);
	cr_assert(PQstatus(c) == CONNECTION_OK, "connect: %s", PQerrorMessage(c));
	return c;
}

static PGresult *query(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK,
	          "%s: %s", sql, PQerrorMessage(c));
	return r;
}

int64_t tdb_int(PGconn *c, const char *sql)
{
	PGresult *r = query(c, sql);
	int64_t v =
	    PQntuples(r) && !PQgetisnull(r, 0, 0) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
	PQclear(r);
	return v;
}

char *tdb_str(PGconn *c, const char *sql)
{
	PGresult *r = query(c, sql);
	char *v = PQntuples(r) && !PQgetisnull(r, 0, 0) ? strdup(PQgetvalue(r, 0, 0)) : NULL;
	PQclear(r);
	return v;
}

void tdb_exec(PGconn *c, const char *sql)
{
	PQclear(query(c, sql));
}

const char *tbin(const char *name)
{
	static char path[4][1024];
	static int k;
	const char *dir = getenv("CAIRN_BIN_DIR");
	char *p = path[k++ % 4];
	snprintf(p, sizeof path[0], "%s/%s", dir ? dir : "bin", name);
	return p;
}

/* Reads both pipes until EOF without deadlocking on either. */
static void drain(int fo, int fe, char **out, char **err)
{
	char *bufs[2] = {NULL, NULL};
	size_t lens[2] = {0, 0};
	struct pollfd p[2] = {{fo, POLLIN, 0}, {fe, POLLIN, 0}};
	int open_ = 2;
	while (open_) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char chunk[4096];
			ssize_t r = read(p[i].fd, chunk, sizeof chunk);
			if (r <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				open_--;
				continue;
			}
			bufs[i] = realloc(bufs[i], lens[i] + (size_t)r + 1);
			memcpy(bufs[i] + lens[i], chunk, (size_t)r);
			lens[i] += (size_t)r;
			bufs[i][lens[i]] = '\0';
		}
	}
	for (int i = 0; i < 2; i++)
		if (!bufs[i])
			bufs[i] = strdup("");
	if (out)
		*out = bufs[0];
	else
		free(bufs[0]);
	if (err)
		*err = bufs[1];
	else
		free(bufs[1]);
}

int trun(const char *const *argv, const char *const *env, char **out, char **err)
{
	int po[2], pe[2];
	cr_assert(pipe(po) == 0 && pipe(pe) == 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close(po[0]);
		close(pe[0]);
		close(po[1]);
		close(pe[1]);
		for (int i = 0; env && env[i]; i++) {
			const char *eq = strchr(env[i], '=');
			char name[128];
			snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - env[i]) : 127, env[i]);
			if (eq)
				setenv(name, eq + 1, 1);
			else
				unsetenv(name);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	drain(po[0], pe[0], out, err);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tcli_argv(const char *db, char **out, char **err, const char *const *argv)
{
	const char *args[64];
	int n = 0;
	args[n++] = tbin("cairn");
	for (int i = 0; argv[i] && n < 63; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	char url[1100];
	snprintf(url, sizeof url, "DATABASE_URL=%s", db ? db : "");
	const char *env[] = {db ? url : "DATABASE_URL", NULL};
	return trun(args, env, out, err);
}

int tcli(const char *db, char **out, char **err, ...)
{
	const char *argv[64];
	int n = 0;
	va_list ap;
	va_start(ap, err);
	const char *a;
	while ((a = va_arg(ap, const char *)) && n < 63)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return tcli_argv(db, out, err, argv);
}

int64_t tnow_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int twait(int (*cond)(void *), void *arg, int64_t timeout_ms)
{
	int64_t deadline = tnow_ms() + timeout_ms;
	for (;;) {
		if (cond(arg))
			return 1;
		if (tnow_ms() >= deadline)
			return 0;
		struct timespec ts = {0, 10 * 1000000};
		nanosleep(&ts, NULL);
	}
}

int tclosed_port(int *fd)
{
	/* No SO_REUSEADDR: while this socket holds the port nobody else can bind
	 * it, and as it never listens, a SYN to it is answered with a reset. */
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(s >= 0, "socket: %s", strerror(errno));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert(bind(s, (struct sockaddr *)&a, sizeof a) == 0, "bind: %s", strerror(errno));
	socklen_t len = sizeof a;
	cr_assert(getsockname(s, (struct sockaddr *)&a, &len) == 0, "getsockname: %s",
	          strerror(errno));
	*fd = s;
	return ntohs(a.sin_port);
}

#include <curl/curl.h>

static pid_t spawn(const char *db, const char *log_path, va_list ap)
{
	const char *envs[32];
	int n = 0;
	const char *e;
	while ((e = va_arg(ap, const char *)) && n < 31)
		envs[n++] = e;
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		/* A worker never outlives the test that started it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (log_path) {
			FILE *f = freopen(log_path, "a", stderr);
			(void)f;
		}
		setenv("DATABASE_URL", db, 1);
		/* Port 0: the kernel picks a free port, and the worker logs it. The
		 * advertised address defaults to this one, ":0" becoming the port. */
		setenv("CAIRN_HTTP_ADDR", "127.0.0.1:0", 1);
		unsetenv("CAIRN_ADVERTISE_ADDR");
		/* The start line that tells the port is logged at info. */
		const char *lv = getenv("CAIRN_LOG_LEVEL");
		if (!lv || (strcmp(lv, "info") != 0 && strcmp(lv, "debug") != 0))
			setenv("CAIRN_LOG_LEVEL", "info", 1);
		setenv("CAIRN_SHUTDOWN_TIMEOUT", "10s", 0);
		for (int i = 0; i < n; i++)
			putenv((char *)envs[i]);
		execl(tbin("cairn-worker"), "cairn-worker", (char *)NULL);
		_exit(127);
	}
	return pid;
}

pid_t tworker_spawn(const char *db, const char *log_path, ...)
{
	va_list ap;
	va_start(ap, log_path);
	pid_t pid = spawn(db, log_path, ap);
	va_end(ap);
	return pid;
}

/* The port of the first complete "cairn-worker started" line in text, in
 * logfmt (http_port=N) or JSON ("http_port":"N"); 0 if there is none yet. */
static int started_port(const char *text)
{
	for (const char *p = text; (p = strstr(p, "cairn-worker started")); p++) {
		const char *eol = strchr(p, '\n');
		if (!eol)
			return 0; /* not completely written yet */
		const char *k = strstr(p, "http_port");
		if (!k || k > eol)
			continue;
		k += strlen("http_port");
		while (*k == '"' || *k == ':' || *k == '=')
			k++;
		long port = strtol(k, NULL, 10);
		if (port > 0 && port < 65536)
			return (int)port;
	}
	return 0;
}

/* 1 if pid has exited (it is left to be reaped by tworker_stop). */
static int exited(pid_t pid)
{
	siginfo_t si = {0};
	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

pid_t tworker_start(const char *db, int *port, const char *log_path, ...)
{
	char own[64] = "";
	if (!log_path)
		log_path = tlog_file(own);
	/* Only what this worker writes counts: the file may hold an earlier log. */
	struct stat st;
	off_t from = stat(log_path, &st) == 0 ? st.st_size : 0;
	va_list ap;
	va_start(ap, log_path);
	pid_t pid = spawn(db, log_path, ap);
	va_end(ap);

	int64_t deadline = tnow_ms() + 60000;
	int got = 0, gone = 0;
	for (;;) {
		char *text = tfile_read(log_path);
		size_t len = strlen(text);
		got = started_port(text + ((size_t)from < len ? (size_t)from : len));
		free(text);
		if (got || gone || tnow_ms() >= deadline)
			break;
		/* Read once more after an exit: the line may have come just before. */
		gone = exited(pid);
		if (!gone) {
			struct timespec ts = {0, 10 * 1000000};
			nanosleep(&ts, NULL);
		}
	}
	if (!got) {
		char *text = own[0] ? tfile_take(log_path) : tfile_read(log_path);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		cr_assert_fail("cairn-worker %s before it logged \"cairn-worker started\" with its "
		               "port; log %s:\n%s",
		               gone ? "exited" : "did not start within 60 s", log_path, text);
	}
	if (own[0])
		unlink(own); /* the worker writes on into the open, unlinked file */
	if (port)
		*port = got;
	return pid;
}

int tworker_stop(pid_t pid, int sig, int64_t timeout_ms)
{
	kill(pid, sig);
	int64_t deadline = tnow_ms() + timeout_ms;
	while (tnow_ms() < deadline) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		struct timespec ts = {0, 10 * 1000000};
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
	char **s = arg;
	size_t old = *s ? strlen(*s) : 0;
	*s = realloc(*s, old + size * n + 1);
	memcpy(*s + old, data, size * n);
	(*s)[old + size * n] = '\0';
	return size * n;
}

long thttp(int port, const char *method, const char *path, char **body, char **ctype)
{
	return thttp_auth(port, method, path, NULL, body, ctype);
}

long thttp_auth(int port, const char *method, const char *path, const char *authorization,
                char **body, char **ctype)
{
	return thttp_send(port, method, path, authorization, NULL, body, ctype);
}

long thttp_send(int port, const char *method, const char *path, const char *authorization,
                const char *request, char **body, char **ctype)
{
	return thttp_send_n(port, method, path, authorization, request,
	                    request ? strlen(request) : 0, body, ctype);
}

long thttp_send_n(int port, const char *method, const char *path, const char *authorization,
                  const char *request, size_t len, char **body, char **ctype)
{
	char auth[512];
	snprintf(auth, sizeof auth, "Authorization: %s", authorization ? authorization : "");
	const char *headers[3] = {0};
	int n = 0;
	if (authorization)
		headers[n++] = auth;
	if (request)
		headers[n++] = "Content-Type: application/json";
	return thttp_req_n(port, method, path, headers, request, len, body, ctype);
}

long thttp_req(int port, const char *method, const char *path, const char *const *headers,
               const char *body, char **resp, char **ctype)
{
	return thttp_req_n(port, method, path, headers, body, body ? strlen(body) : 0, resp, ctype);
}

long thttp_req_n(int port, const char *method, const char *path, const char *const *headers,
                 const char *body, size_t len, char **resp, char **ctype)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hl = NULL;
	for (int i = 0; headers && headers[i]; i++)
		hl = curl_slist_append(hl, headers[i]);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	char url[512];
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
	char *b = NULL;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
	}
	/* A give-up bound for a worker slowed down by a loaded machine, not a
	 * measurement: waits retry, so a generous bound costs nothing (a long
	 * poll of the HTTP API takes up to 60 s). */
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 75000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	long status = 0;
	if (curl_easy_perform(c) == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		char *ct = NULL;
		curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
		if (ctype)
			*ctype = strdup(ct ? ct : "");
	} else if (ctype) {
		*ctype = strdup("");
	}
	curl_easy_cleanup(c);
	curl_slist_free_all(hl);
	if (resp)
		*resp = b ? b : strdup("");
	else
		free(b);
	return status;
}

struct http_want {
	int port;
	const char *path;
	long status;
};

static int http_is(void *arg)
{
	struct http_want *h = arg;
	return thttp(h->port, "GET", h->path, NULL, NULL) == h->status;
}

int thttp_wait(int port, const char *path, long want_status, int64_t timeout_ms)
{
	struct http_want h = {port, path, want_status};
	return twait(http_is, &h, timeout_ms);
}

char *tfile_take(const char *path)
{
	char *s = tfile_read(path);
	unlink(path);
	return s;
}

char *tfile_read(const char *path)
{
	FILE *f = fopen(path, "r");
	cr_assert(f, "cannot open %s", path);
	char *s = NULL;
	size_t n = 0, r;
	char chunk[4096];
	while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
		s = realloc(s, n + r + 1);
		memcpy(s + n, chunk, r);
		n += r;
	}
	fclose(f);
	if (!s)
		s = calloc(1, 1);
	s[n] = '\0';
	return s;
}

struct file_want {
	const char *path, *text;
};

static int file_has(void *arg)
{
	struct file_want *f = arg;
	char *s = tfile_read(f->path);
	int found = strstr(s, f->text) != NULL;
	free(s);
	return found;
}

int tfile_wait(const char *path, const char *text, int64_t timeout_ms)
{
	struct file_want f = {path, text};
	return twait(file_has, &f, timeout_ms);
}

const char *tlog_file(char out[64])
{
	snprintf(out, 64, "/tmp/cairn-test-log-XXXXXX");
	int fd = mkstemp(out);
	cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
	close(fd);
	return out;
}

double tmetric_in(const char *text, const char *name, const char *labels)
{
	double v = -1;
	size_t n = strlen(name);
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
		if (strncmp(p, name, n) == 0 && (p[n] == ' ' || p[n] == '{')) {
			/* The value follows the line's last space (label values may have some). */
			const char *sp = end;
			while (sp > p + n && *sp != ' ')
				sp--;
			if (!labels || (p[n] == '{' && memmem(p + n, (size_t)(sp - (p + n)), labels,
			                                      strlen(labels))))
				v = (v < 0 ? 0 : v) + strtod(sp + 1, NULL);
		}
		p = nl ? nl + 1 : NULL;
	}
	return v;
}

double tmetric(int port, const char *name)
{
	char *body = NULL;
	double v = -1;
	if (thttp(port, "GET", "/metrics", &body, NULL) == 200)
		v = tmetric_in(body, name, NULL);
	free(body);
	return v;
}

const char *tplugin_path(void)
{
	static char path[1024];
	const char *p = getenv("CAIRN_TEST_PLUGIN");
	if (p && *p)
		return p;
	const char *dir = getenv("CAIRN_BIN_DIR");
	snprintf(path, sizeof path, "%s/../tests/plugin_test.so", dir ? dir : "bin");
	return path;
}

const char *tflows_path(void)
{
	static char path[1024];
	const char *p = getenv("CAIRN_TEST_FLOWS");
	if (p && *p)
		return p;
	const char *dir = getenv("CAIRN_BIN_DIR");
	snprintf(path, sizeof path, "%s/../tests/plugin_flows.so", dir ? dir : "bin");
	return path;
}

/* The tables plugin_flows.c's workflows write. */
static const char TFLOWS_TABLES[] =
    "CREATE TABLE t_counter (run_id bigint PRIMARY KEY, n integer NOT NULL);"
    "CREATE TABLE t_flags (run_id bigint NOT NULL);"
    "CREATE TABLE t_attempts (run_id bigint NOT NULL, at timestamptz NOT NULL);"
    "CREATE TABLE t_exec (id bigserial, run_id bigint, t_enter timestamptz, t_exit timestamptz);"
    "CREATE TABLE t_hits (run_id bigint NOT NULL, step text NOT NULL);";

void tflows_setup(tflows_env *e, int shards)
{
	e->db = tdb_new_migrated_shards(shards);
	e->c = tdb_connect(e->db);
	tdb_exec(e->c, TFLOWS_TABLES);
	int rc = cairn_client_open(e->db, &e->cl);
	cr_assert_eq(rc, CAIRN_OK, "client: %s", e->cl ? cairn_client_errmsg(e->cl) : "no memory");
}

void tflows_teardown(tflows_env *e)
{
	cairn_client_free(e->cl);
	PQfinish(e->c);
}

struct sql_want {
	PGconn *c;
	const char *sql;
	int64_t want;
};

static int sql_at_least(void *arg)
{
	struct sql_want *w = arg;
	return tdb_int(w->c, w->sql) >= w->want;
}

int tdb_wait_at_least(PGconn *c, const char *sql, int64_t want, int64_t timeout_ms)
{
	struct sql_want w = {c, sql, want};
	return twait(sql_at_least, &w, timeout_ms);
}

int64_t tdb_stat_after_sessions(PGconn *c, const char *app, const char *stat_sql,
                                int64_t timeout_ms)
{
	char sql[512];
	snprintf(sql, sizeof sql,
	         "SELECT (count(*) = 0)::int FROM pg_stat_activity WHERE datname = "
	         "current_database() AND pid <> pg_backend_pid() AND application_name LIKE '%s'",
	         app ? app : "%");
	if (!tdb_wait_at_least(c, sql, 1, timeout_ms))
		return -1;
	tdb_exec(c, "SELECT pg_stat_force_next_flush()");
	return tdb_int(c, stat_sql);
}

/* The next notification on c within timeout_ms (caller frees its payload), or NULL. */
char *tdb_next_notification(PGconn *c, int64_t timeout_ms)
{
	int64_t deadline = tnow_ms() + timeout_ms;
	for (;;) {
		PQconsumeInput(c);
		PGnotify *n = PQnotifies(c);
		if (n) {
			char *p = strdup(n->extra);
			PQfreemem(n);
			return p;
		}
		int64_t left = deadline - tnow_ms();
		if (left <= 0)
			return NULL;
		struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
		poll(&pfd, 1, (int)(left > 100 ? 100 : left));
	}
}

int64_t tdb_intf(PGconn *c, const char *fmt, ...)
{
	char sql[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sql, sizeof sql, fmt, ap);
	va_end(ap);
	return tdb_int(c, sql);
}

int64_t tdb_run_part(PGconn *c, int64_t id)
{
	return tdb_intf(c, "SELECT part FROM cairn.runs WHERE id = %" PRId64, id);
}

int tdb_wait_at_leastf(PGconn *c, int64_t want, int64_t timeout_ms, const char *fmt, ...)
{
	char sql[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sql, sizeof sql, fmt, ap);
	va_end(ap);
	return tdb_wait_at_least(c, sql, want, timeout_ms);
}

/* ------------------------------------------------------------ pgbouncer */

#define PGB_MAX 4
static tpgbouncer *pgb_live[PGB_MAX];

static void pgb_stop_all(void)
{
	for (int i = 0; i < PGB_MAX; i++)
		if (pgb_live[i])
			tpgbouncer_stop(pgb_live[i]);
}

/* conninfo with host and port replaced (or added). */
static void conninfo_with(char *out, size_t cap, const char *conninfo, const char *host,
                          const char *port)
{
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
	cr_assert(opts, "cannot parse the conninfo %s", conninfo);
	size_t n = (size_t)snprintf(out, cap, "host='%s' port='%s'", host, port);
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (!o->val || !*o->val || strcmp(o->keyword, "host") == 0 ||
		    strcmp(o->keyword, "port") == 0 || strcmp(o->keyword, "hostaddr") == 0)
			continue;
		n += (size_t)snprintf(out + n, cap - n, " %s='%s'", o->keyword, o->val);
		cr_assert(n < cap, "conninfo too long");
	}
	PQconninfoFree(opts);
}

const char *tpgbouncer_start(tpgbouncer *b, const char *mode, const char *db)
{
	memset(b, 0, sizeof *b);
	const char *admin = getenv("DATABASE_URL");
	cr_assert(admin && *admin, "DATABASE_URL is not set: run the tests with `make test`");
	PQconninfoOption *opts = PQconninfoParse(admin, NULL);
	cr_assert(opts, "cannot parse DATABASE_URL %s", admin);
	char host[512] = "", port[16] = "5432", user[128] = "";
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (!o->val || !*o->val)
			continue;
		if (strcmp(o->keyword, "host") == 0)
			snprintf(host, sizeof host, "%s", o->val);
		else if (strcmp(o->keyword, "port") == 0)
			snprintf(port, sizeof port, "%s", o->val);
		else if (strcmp(o->keyword, "user") == 0)
			snprintf(user, sizeof user, "%s", o->val);
	}
	PQconninfoFree(opts);
	cr_assert(host[0], "DATABASE_URL %s names no host (the harness's socket directory)", admin);
	if (!user[0]) {
		const char *u = getenv("USER");
		snprintf(user, sizeof user, "%s", u ? u : "postgres");
	}

	snprintf(b->dir, sizeof b->dir, "/tmp/cairn-pgb.XXXXXX");
	cr_assert(mkdtemp(b->dir), "mkdtemp: %s", strerror(errno));
	int root = getuid() == 0;
	struct passwd *pw = root ? getpwnam("postgres") : NULL;
	cr_assert(!root || pw, "running as root, but there is no postgres user to run pgbouncer");
	if (pw)
		cr_assert(chown(b->dir, pw->pw_uid, pw->pw_gid) == 0, "chown %s: %s", b->dir,
		          strerror(errno));
	chmod(b->dir, 0755);

	char path[128];
	snprintf(path, sizeof path, "%s/users.txt", b->dir);
	FILE *f = fopen(path, "w");
	cr_assert(f, "%s: %s", path, strerror(errno));
	fprintf(f, "\"%s\" \"\"\n", user);
	fclose(f);
	char ini[128];
	snprintf(ini, sizeof ini, "%s/pgbouncer.ini", b->dir);
	f = fopen(ini, "w");
	cr_assert(f, "%s: %s", ini, strerror(errno));
	fprintf(f,
	        "[databases]\n"
	        "* = host=%s port=%s\n"
	        "[pgbouncer]\n"
	        "listen_addr =\n"
	        "listen_port = 6432\n"
	        "unix_socket_dir = %s\n"
	        "auth_type = trust\n"
	        "auth_file = %s\n"
	        "admin_users = %s\n"
	        "pool_mode = %s\n"
	        "max_client_conn = 500\n"
	        "default_pool_size = 40\n"
	        "logfile = %s/pgbouncer.log\n",
	        host, port, b->dir, path, user, mode, b->dir);
	fclose(f);

	b->pid = fork();
	cr_assert(b->pid >= 0, "fork: %s", strerror(errno));
	if (b->pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2); /* it logs to its logfile */
		if (root)
			execl("/usr/bin/setpriv", "setpriv", "--reuid=postgres", "--regid=postgres",
			      "--clear-groups", "--pdeathsig=KILL", "/usr/sbin/pgbouncer", ini,
			      (char *)NULL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl("/usr/sbin/pgbouncer", "pgbouncer", ini, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < PGB_MAX; i++)
		if (!pgb_live[i]) {
			pgb_live[i] = b;
			break;
		}
	static int hooked;
	if (!hooked++)
		atexit(pgb_stop_all);

	conninfo_with(b->url, sizeof b->url, db, b->dir, "6432");
	snprintf(b->admin, sizeof b->admin, "host='%s' port='6432' dbname='pgbouncer' user='%s'",
	         b->dir, user);
	int64_t deadline = tnow_ms() + 10000;
	for (;;) {
		int st;
		if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
			b->pid = 0;
			char logp[128];
			snprintf(logp, sizeof logp, "%s/pgbouncer.log", b->dir);
			char *text = tfile_read(logp);
			cr_assert_fail("pgbouncer exited at start (status %d): %s", st,
			               text ? text : "");
		}
		if (PQping(b->url) == PQPING_OK)
			break;
		cr_assert(tnow_ms() < deadline, "pgbouncer did not answer on %s within 10 s",
		          b->dir);
		struct timespec ts = {0, 10 * 1000000};
		nanosleep(&ts, NULL);
	}
	return b->url;
}

void tpgbouncer_stop(tpgbouncer *b)
{
	for (int i = 0; i < PGB_MAX; i++)
		if (pgb_live[i] == b)
			pgb_live[i] = NULL;
	if (b->pid > 0) {
		kill(b->pid, SIGKILL);
		while (waitpid(b->pid, NULL, 0) < 0 && errno == EINTR)
			;
		b->pid = 0;
	}
	if (b->dir[0]) {
		const char *names[] = {"pgbouncer.ini", "pgbouncer.log", "users.txt",
		                       ".s.PGSQL.6432", ".s.PGSQL.6432.lock"};
		char p[160];
		for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
			snprintf(p, sizeof p, "%s/%s", b->dir, names[i]);
			unlink(p);
		}
		rmdir(b->dir);
		b->dir[0] = '\0';
	}
}

void tpgbouncer_admin(tpgbouncer *b, const char *command)
{
	PGconn *c = PQconnectdb(b->admin);
	cr_assert(PQstatus(c) == CONNECTION_OK, "pgbouncer console: %s", PQerrorMessage(c));
	PGresult *r = PQexec(c, command);
	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
	          "pgbouncer console: %s: %s", command, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
}

static pid_t tlive[8];

void tlive_add(pid_t pid)
{
	for (size_t i = 0; i < sizeof tlive / sizeof tlive[0]; i++)
		if (!tlive[i]) {
			tlive[i] = pid;
			return;
		}
}

void tlive_del(pid_t pid)
{
	for (size_t i = 0; pid && i < sizeof tlive / sizeof tlive[0]; i++)
		if (tlive[i] == pid)
			tlive[i] = 0;
}

void tlive_kill(void)
{
	for (size_t i = 0; i < sizeof tlive / sizeof tlive[0]; i++)
		if (tlive[i]) {
			tworker_stop(tlive[i], SIGKILL, 5000);
			tlive[i] = 0;
		}
}
