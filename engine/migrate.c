/*
 * migrate.c - applies sql/migrations/NNNN_name.sql in version order. The
 * files are embedded into the library at build time (gen/migrations.c), or
 * read from a directory. Each migration runs in its own transaction that
 * first takes an advisory transaction lock, so concurrent migrators queue up
 * and the later ones find the work done. Every applied file's SHA-256 is
 * recorded; a changed file is refused before anything runs.
 */
#include <dirent.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "db.h"
#include "parse.h"

/* From the generated gen/migrations.c. */
struct embedded_migration {
	const char *file;
	const char *sql;
};
extern const struct embedded_migration cairn_embedded_migrations[];
extern const size_t cairn_embedded_migrations_count;

#define MIGRATE_LOCK "SELECT pg_advisory_xact_lock(7233373717601141521)"

typedef struct migration {
	int version;
	char *name;
	char *sql;
	char checksum[65];
} migration;

static const char SQL_BOOTSTRAP[] = "CREATE SCHEMA IF NOT EXISTS cairn; "
                                    "CREATE TABLE IF NOT EXISTS cairn.schema_migrations ("
                                    "  version integer PRIMARY KEY CHECK (version > 0),"
                                    "  name text NOT NULL,"
                                    "  checksum text NOT NULL CHECK (length(checksum) = 64),"
                                    "  applied_at timestamptz NOT NULL DEFAULT now())";

static void migrations_free(migration *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(m[i].name);
		free(m[i].sql);
	}
	free(m);
}

int migrate_newest_version(void)
{
	int newest = 0;
	for (size_t i = 0; i < cairn_embedded_migrations_count; i++) {
		int v = atoi(cairn_embedded_migrations[i].file); /* "0018_name.sql" */
		if (v > newest)
			newest = v;
	}
	return newest;
}

static int cmp_version(const void *a, const void *b)
{
	return ((const migration *)a)->version - ((const migration *)b)->version;
}

/* "0001_init.sql" -> version 1, name "init". */
static int parse_filename(const char *file, int *version, char **name)
{
	size_t n = strlen(file);
	if (n < 10 || strcmp(file + n - 4, ".sql") != 0 || file[4] != '_')
		return -CAIRN_EINVAL;
	int v = 0;
	for (int i = 0; i < 4; i++) {
		if (file[i] < '0' || file[i] > '9')
			return -CAIRN_EINVAL;
		v = v * 10 + (file[i] - '0');
	}
	if (v == 0)
		return -CAIRN_EINVAL;
	*version = v;
	*name = strndup(file + 5, n - 9);
	return *name ? 0 : -CAIRN_ENOMEM;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	buf b = BUF_INIT;
	char chunk[8192];
	size_t r;
	while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
		buf_append(&b, chunk, r);
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		buf_free(&b);
		return NULL;
	}
	return buf_detach(&b);
}

static int add_migration(cairn_client *c, migration **ms, size_t *n, const char *file, char *sql)
{
	migration m = {0};
	if (parse_filename(file, &m.version, &m.name) < 0) {
		free(sql);
		return client_fail(c, CAIRN_EINVAL,
		                   "invalid migration file name \"%s\": expected NNNN_name.sql",
		                   file);
	}
	m.sql = sql;
	unsigned char hash[crypto_hash_sha256_BYTES];
	crypto_hash_sha256(hash, (const unsigned char *)sql, strlen(sql));
	sodium_bin2hex(m.checksum, sizeof m.checksum, hash, sizeof hash);
	migration *grown = realloc(*ms, (*n + 1) * sizeof **ms);
	if (!grown) {
		free(m.name);
		free(sql);
		return CAIRN_ENOMEM;
	}
	*ms = grown;
	(*ms)[(*n)++] = m;
	return CAIRN_OK;
}

/* Loads the migrations, sorted, with checksums. */
static int load(cairn_client *c, const char *dir, migration **out, size_t *count)
{
	migration *ms = NULL;
	size_t n = 0;
	int rc = CAIRN_OK;
	if (!dir) {
		for (size_t i = 0; i < cairn_embedded_migrations_count && !rc; i++) {
			char *sql = strdup(cairn_embedded_migrations[i].sql);
			rc = sql ? add_migration(c, &ms, &n, cairn_embedded_migrations[i].file, sql)
			         : CAIRN_ENOMEM;
		}
	} else {
		DIR *d = opendir(dir);
		if (!d)
			return client_fail(c, CAIRN_EINVAL,
			                   "cannot open migrations directory \"%s\"", dir);
		struct dirent *e;
		while (!rc && (e = readdir(d))) {
			size_t len = strlen(e->d_name);
			if (len < 4 || strcmp(e->d_name + len - 4, ".sql") != 0)
				continue;
			buf path = BUF_INIT;
			buf_printf(&path, "%s/%s", dir, e->d_name);
			char *sql = read_file(buf_str(&path));
			rc = sql ? add_migration(c, &ms, &n, e->d_name, sql)
			         : client_fail(c, CAIRN_EINVAL, "cannot read \"%s\"",
			                       buf_str(&path));
			buf_free(&path);
		}
		closedir(d);
	}
	if (rc) {
		migrations_free(ms, n);
		return rc;
	}
	qsort(ms, n, sizeof *ms, cmp_version);
	for (size_t i = 1; i < n; i++)
		if (ms[i].version == ms[i - 1].version) {
			rc = client_fail(c, CAIRN_EINVAL,
			                 "two migration files have version %04d: %s and %s",
			                 ms[i].version, ms[i - 1].name, ms[i].name);
			migrations_free(ms, n);
			return rc;
		}
	*out = ms;
	*count = n;
	return CAIRN_OK;
}

/* Runs one locked transaction: BEGIN, lock, sql, COMMIT. */
static int locked_tx(cairn_client *c, const char *sql)
{
	if (db_cmd(c->conn, &c->err, "BEGIN", 0, NULL) < 0 ||
	    db_cmd(c->conn, &c->err, MIGRATE_LOCK, 0, NULL) < 0)
		goto fail;
	PGresult *r = PQexec(c->conn, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
		client_fail(c, CAIRN_EDB, "database error: %s", PQresultErrorMessage(r));
		PQclear(r);
		goto fail;
	}
	PQclear(r);
	if (db_cmd(c->conn, &c->err, "COMMIT", 0, NULL) < 0)
		goto fail;
	return CAIRN_OK;
fail:
	PQclear(PQexec(c->conn, "ROLLBACK"));
	return CAIRN_EDB;
}

typedef struct applied {
	int version;
	char checksum[65];
	int64_t at_ms;
} applied;

static int read_applied(cairn_client *c, applied **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	PGresult *r =
	    db_exec(c->conn, &c->err,
	            "SELECT version, checksum, (extract(epoch FROM applied_at) * 1000)::bigint "
	            "FROM cairn.schema_migrations ORDER BY version",
	            0, NULL);
	if (!r)
		return CAIRN_EDB;
	size_t rows = (size_t)PQntuples(r);
	applied *a = rows ? calloc(rows, sizeof *a) : NULL;
	if (rows && !a) {
		PQclear(r);
		return CAIRN_ENOMEM;
	}
	for (int i = 0; i < (int)rows; i++) {
		a[i].version = db_get_int(r, i, 0);
		snprintf(a[i].checksum, sizeof a[i].checksum, "%s", PQgetvalue(r, i, 1));
		a[i].at_ms = db_get_i64(r, i, 2);
	}
	PQclear(r);
	*out = a;
	*n = rows;
	return CAIRN_OK;
}

static const applied *find_applied(const applied *a, size_t n, int version)
{
	for (size_t i = 0; i < n; i++)
		if (a[i].version == version)
			return &a[i];
	return NULL;
}

/* Refuses a database whose applied migrations do not match the files. */
static int verify(cairn_client *c, const migration *ms, size_t n, const applied *a, size_t na)
{
	for (size_t i = 0; i < na; i++) {
		const migration *m = NULL;
		for (size_t j = 0; j < n; j++)
			if (ms[j].version == a[i].version)
				m = &ms[j];
		if (!m)
			return client_fail(
			    c, CAIRN_ESCHEMA,
			    "migration %04d is applied in the database but unknown to this "
			    "cairn: the database is newer than this binary",
			    a[i].version);
		if (strcmp(m->checksum, a[i].checksum) != 0)
			return client_fail(
			    c, CAIRN_ESCHEMA,
			    "migration %04d_%s.sql was changed after it was applied: "
			    "checksum %.12s... in the database, %.12s... in the file; restore "
			    "the file and put the change in a new migration",
			    m->version, m->name, a[i].checksum, m->checksum);
	}
	return CAIRN_OK;
}

static int apply_one(cairn_client *c, const migration *m, int *did)
{
	*did = 0;
	char v[24];
	db_i64(v, m->version);
	const char *p[] = {v, m->name, m->checksum};
	if (db_cmd(c->conn, &c->err, "BEGIN", 0, NULL) < 0 ||
	    db_cmd(c->conn, &c->err, MIGRATE_LOCK, 0, NULL) < 0)
		goto fail;
	PGresult *r =
	    db_exec(c->conn, &c->err,
	            "SELECT checksum FROM cairn.schema_migrations WHERE version = $1", 1, p);
	if (!r)
		goto fail;
	int done = PQntuples(r) == 1;
	PQclear(r);
	if (!done) {
		r = PQexec(c->conn, m->sql);
		if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
			client_fail(c, CAIRN_EDB, "migration %04d_%s.sql failed: %s", m->version,
			            m->name, PQresultErrorMessage(r));
			PQclear(r);
			goto fail;
		}
		PQclear(r);
		if (db_cmd(c->conn, &c->err,
		           "INSERT INTO cairn.schema_migrations (version, name, checksum) VALUES "
		           "($1, $2, $3)",
		           3, p) < 0)
			goto fail;
		*did = 1;
	}
	if (db_cmd(c->conn, &c->err, "COMMIT", 0, NULL) < 0)
		goto fail;
	return CAIRN_OK;
fail:
	PQclear(PQexec(c->conn, "ROLLBACK"));
	return CAIRN_EDB;
}

static int record_shards(cairn_client *c, int shards)
{
	char v[24];
	const char *p[] = {db_i64(v, shards > 0 ? shards : CAIRN_DEFAULT_SHARDS)};
	PGresult *r = db_exec(
	    c->conn, &c->err,
	    "WITH ins AS (INSERT INTO cairn.settings (name, value) "
	    "  VALUES ('shards_per_group', $1) ON CONFLICT (name) DO NOTHING RETURNING value) "
	    "SELECT value FROM ins UNION ALL "
	    "SELECT value FROM cairn.settings WHERE name = 'shards_per_group'",
	    1, p);
	if (!r)
		return CAIRN_EDB;
	int recorded = PQntuples(r) ? db_get_int(r, 0, 0) : 0;
	PQclear(r);
	if (shards > 0 && recorded != shards)
		return client_fail(
		    c, CAIRN_ESCHEMA,
		    "shards_per_group is %d in the database, not %d: the shard count "
		    "cannot change once runs are stored",
		    recorded, shards);
	c->settings.shards = 0; /* migrations may have changed the settings: read them again */
	return CAIRN_OK;
}

int migrate_apply(cairn_client *c, const char *dir, int shards_per_group, migrate_report *out)
{
	*out = (migrate_report){0};
	if (shards_per_group < 0 || shards_per_group > 65536)
		return client_fail(c, CAIRN_EINVAL, "invalid shards %d: expected 1 to 65536",
		                   shards_per_group);
	migration *ms;
	size_t n;
	int rc = load(c, dir, &ms, &n);
	if (rc)
		return rc;
	applied *a = NULL;
	size_t na = 0;
	if ((rc = locked_tx(c, SQL_BOOTSTRAP)) || (rc = read_applied(c, &a, &na)) ||
	    (rc = verify(c, ms, n, a, na)))
		goto done;
	/* read_applied orders by version; verify refused versions without a
	 * file, so once every file is applied the newest file is the schema's. */
	out->before = na ? a[na - 1].version : 0;
	out->after = out->before;
	if (n && !(out->versions = calloc(n, sizeof *out->versions))) {
		rc = CAIRN_ENOMEM;
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		if (find_applied(a, na, ms[i].version))
			continue;
		int did;
		if ((rc = apply_one(c, &ms[i], &did)))
			goto done;
		if (did)
			out->versions[out->n++] = ms[i].version;
	}
	if (n && ms[n - 1].version > out->after)
		out->after = ms[n - 1].version;
	rc = record_shards(c, shards_per_group);
done:
	free(a);
	migrations_free(ms, n);
	return rc;
}

void migrate_report_clear(migrate_report *r)
{
	free(r->versions);
	*r = (migrate_report){0};
}

int cairn_migrate(cairn_client *c, const char *dir, int shards_per_group, int *applied_count)
{
	migrate_report r;
	int rc = migrate_apply(c, dir, shards_per_group, &r);
	*applied_count = (int)r.n;
	migrate_report_clear(&r);
	return rc;
}

int cairn_migration_list(cairn_client *c, const char *dir, cairn_migration_info **out,
                         size_t *count)
{
	*out = NULL;
	*count = 0;
	migration *ms;
	size_t n;
	int rc = load(c, dir, &ms, &n);
	if (rc)
		return rc;
	applied *a = NULL;
	size_t na = 0;
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT to_regclass('cairn.schema_migrations') IS NOT NULL", 0, NULL);
	if (!r) {
		rc = CAIRN_EDB;
		goto done;
	}
	int exists = db_get_bool(r, 0, 0);
	PQclear(r);
	if (exists && (rc = read_applied(c, &a, &na)))
		goto done;
	/* Known files plus applied versions this binary has no file for. */
	cairn_migration_info *info = calloc(n + na + 1, sizeof *info);
	if (!info) {
		rc = CAIRN_ENOMEM;
		goto done;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const applied *ap = find_applied(a, na, ms[i].version);
		info[k].version = ms[i].version;
		info[k].name = strdup(ms[i].name);
		info[k].checksum = strdup(ms[i].checksum);
		info[k].applied = ap != NULL;
		info[k].applied_unix_ms = ap ? ap->at_ms : 0;
		info[k].changed = ap && strcmp(ap->checksum, ms[i].checksum) != 0;
		k++;
	}
	for (size_t i = 0; i < na; i++) {
		int known = 0;
		for (size_t j = 0; j < n; j++)
			known |= ms[j].version == a[i].version;
		if (known)
			continue;
		info[k].version = a[i].version;
		info[k].name = strdup("(unknown to this binary)");
		info[k].checksum = strdup(a[i].checksum);
		info[k].applied = 1;
		info[k].applied_unix_ms = a[i].at_ms;
		k++;
	}
	*out = info;
	*count = k;
done:
	free(a);
	migrations_free(ms, n);
	return rc;
}

void cairn_migration_list_free(cairn_migration_info *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(m[i].name);
		free(m[i].checksum);
	}
	free(m);
}
