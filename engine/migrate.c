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

/*
 * `cairn migrate --citus` (docs/architecture.md, "On Citus"): the tables a
 * claim or a commit touches are distributed by part and colocated with
 * cairn.runs, the small ones every node's statements read are reference
 * tables, and schema_migrations and push_key (the key of the hand-overs
 * of one server, migration 0030) stay the coordinator's. A table of the
 * schema in neither list is refused, so that a new migration's table is
 * placed on purpose. Each step is done only if pg_dist_partition says it is
 * not: the keys with part (one server's keys leave it out, migration
 * 0025), the parts and the parts of the rows a single server stored (while
 * cairn.runs is not distributed), then each table (run_keys filled first
 * with the key of every run, migration 0038), then the foreign keys
 * that had to go while their tables were distributed, on (run_id, part),
 * then the functions of one part (cairn.signal_in and cairn.cancel_in,
 * migrations 0034 and 0035),
 * distributed by their part so that a call runs on the node of the part.
 * One transaction: a failure leaves the database as it was.
 */
static const char SQL_CITUS[] =
    /* In one transaction, Citus's statements that follow a write to a
     * reference table must run over one connection per node. */
    "SET LOCAL citus.multi_shard_modify_mode TO 'sequential';\n"
    "SET LOCAL client_min_messages TO warning;\n"
    "DO $$\n"
    "DECLARE\n"
    "    -- Every table of a claim, a commit or an enqueue, distributed by\n"
    "    -- part and colocated with runs (runs first: the others name it).\n"
    "    v_dist text[] := ARRAY['runs', 'steps', 'messages', 'signals', 'events', 'signal_links',\n"
    "                           'child_waits', 'child_awaited', 'shard_leases', 'run_keys'];\n"
    "    -- Small tables every node's statements read: a copy on every node.\n"
    "    v_ref text[] := ARRAY['settings', 'runners', 'parts', 'schedules', 'limits', 'rates',\n"
    "                          'slots', 'workflows', 'runner_workflows'];\n"
    "    -- Functions of one part, called with its key (p_part).\n"
    "    v_parts_fns text[] := ARRAY['cairn.signal_in(bigint, text, text, integer, text, "
    "integer)', 'cairn.cancel_in(bigint, integer, boolean)'];\n"
    "    v_n integer;\n"
    "    v_t text;\n"
    "    v_fk record;\n"
    "    v_fks text[] := '{}';\n"
    "BEGIN\n"
    "    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN\n"
    "        RAISE EXCEPTION 'Citus is not installed in this database'\n"
    "            USING HINT = 'CREATE EXTENSION citus on the coordinator and each worker node, '\n"
    "                         'and add the workers (SELECT citus_add_node(host, port)) first';\n"
    "    END IF;\n"
    "    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO v_t FROM pg_class c\n"
    "     WHERE c.relnamespace = 'cairn'::regnamespace AND c.relkind IN ('r', 'p')\n"
    "       AND c.relname <> ALL (v_dist || v_ref || '{schema_migrations,push_key}'::text[]);\n"
    "    IF v_t IS NOT NULL THEN\n"
    "        RAISE EXCEPTION 'cairn migrate --citus does not know where table(s) % belong', v_t\n"
    "            USING HINT = 'a table a claim or commit touches is distributed by part, a small "
    "'\n"
    "                         'one is a reference table: add it to one of the lists "
    "(engine/migrate.c)';\n"
    "    END IF;\n"
    "\n"
    "    -- The foreign keys of the tables not distributed yet are remade once\n"
    "    -- all are: Citus distributes a table only with foreign keys it can\n"
    "    -- keep (to a colocated table by part, or to a reference table).\n"
    "    FOR v_fk IN\n"
    "        SELECT k.conrelid::regclass AS t, k.conname, pg_get_constraintdef(k.oid) AS def\n"
    "          FROM pg_constraint k\n"
    "         WHERE k.contype = 'f' AND k.connamespace = 'cairn'::regnamespace\n"
    "           AND (NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = "
    "k.conrelid)\n"
    "             OR NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = "
    "k.confrelid))\n"
    "    LOOP\n"
    "        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk.t, v_fk.conname);\n"
    "        -- A foreign key to runs names its part (the keys below).\n"
    "        v_fks := v_fks || format('ALTER TABLE %s ADD CONSTRAINT %I %s', v_fk.t,\n"
    "            v_fk.conname, regexp_replace(v_fk.def,\n"
    "                '^FOREIGN KEY \\(run_id\\) REFERENCES (\\S*runs)\\(id\\)',\n"
    "                'FOREIGN KEY (run_id, part) REFERENCES \\1(id, part)'));\n"
    "    END LOOP;\n"
    "\n"
    "    -- The parts, once (before runs is distributed): one per Citus shard,\n"
    "    -- each with the smallest key that Citus hashes into that shard (the\n"
    "    -- shard's hash range: citus.shard_count equal slices of the int32\n"
    "    -- range, hashint4), so that no two parts share a Citus shard; then the\n"
    "    -- part of every row a single server stored in part 0.\n"
    "    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = "
    "'cairn.runs'::regclass)\n"
    "    THEN\n"
    "        -- Citus's keys: each unique key with part, under the name it\n"
    "        -- had (the statements upsert by name; migration 0025).\n"
    "        ALTER TABLE cairn.runs DROP CONSTRAINT runs_pkey,\n"
    "            ADD CONSTRAINT runs_pkey PRIMARY KEY (id, part),\n"
    "            DROP CONSTRAINT runs_workflow_key_key,\n"
    "            ADD CONSTRAINT runs_workflow_key_key UNIQUE (workflow, key, part);\n"
    "        ALTER TABLE cairn.steps DROP CONSTRAINT steps_pkey,\n"
    "            ADD CONSTRAINT steps_pkey PRIMARY KEY (run_id, seq, part);\n"
    "        ALTER TABLE cairn.signals DROP CONSTRAINT signals_pkey,\n"
    "            ADD CONSTRAINT signals_pkey PRIMARY KEY (id, part);\n"
    "        ALTER TABLE cairn.messages DROP CONSTRAINT messages_pkey,\n"
    "            ADD CONSTRAINT messages_pkey PRIMARY KEY (id, part);\n"
    "        ALTER TABLE cairn.signal_links DROP CONSTRAINT signal_links_pkey,\n"
    "            ADD CONSTRAINT signal_links_pkey PRIMARY KEY (nonce, part);\n"
    "        ALTER TABLE cairn.events DROP CONSTRAINT events_pkey,\n"
    "            ADD CONSTRAINT events_pkey PRIMARY KEY (run_id, key, part);\n"
    "        ALTER TABLE cairn.child_waits DROP CONSTRAINT child_waits_pkey,\n"
    "            ADD CONSTRAINT child_waits_pkey PRIMARY KEY (run_id, part);\n"
    "        ALTER TABLE cairn.child_awaited DROP CONSTRAINT child_awaited_pkey,\n"
    "            ADD CONSTRAINT child_awaited_pkey PRIMARY KEY (child_id, part);\n"
    "        ALTER TABLE cairn.shard_leases DROP CONSTRAINT shard_leases_pkey,\n"
    "            ADD CONSTRAINT shard_leases_pkey PRIMARY KEY (shard_group, shard, part);\n"
    "        v_n := current_setting('citus.shard_count')::integer;\n"
    "        IF v_n > 1024 THEN\n"
    "            RAISE EXCEPTION 'citus.shard_count is %: cairn takes at most 1024 parts', v_n;\n"
    "        END IF;\n"
    "        DELETE FROM cairn.parts;\n"
    "        INSERT INTO cairn.parts (part_no, key)\n"
    "        SELECT i, min(g) FROM (\n"
    "            SELECT g, least(((hashint4(g)::bigint + 2147483648) / (4294967296 / "
    "v_n))::integer,\n"
    "                            v_n - 1) AS i\n"
    "              FROM generate_series(0, v_n * 256) g) x\n"
    "         GROUP BY i;\n"
    "        IF (SELECT count(*) FROM cairn.parts) <> v_n THEN\n"
    "            RAISE EXCEPTION 'no key found for every one of % Citus shards', v_n;\n"
    "        END IF;\n"
    "        PERFORM cairn.define_part_of(); -- the keys written into it (0031)\n"
    "        UPDATE cairn.runs r SET part = cairn.part_of(r.shard) WHERE r.part <> "
    "cairn.part_of(r.shard);\n"
    "        UPDATE cairn.shard_leases l SET part = cairn.part_of(l.shard)\n"
    "         WHERE l.part <> cairn.part_of(l.shard);\n"
    "        UPDATE cairn.steps t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "        UPDATE cairn.messages t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "        UPDATE cairn.signals t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "        UPDATE cairn.events t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "        UPDATE cairn.signal_links t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "        UPDATE cairn.child_waits t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "        UPDATE cairn.child_awaited t SET part = r.part FROM cairn.runs r\n"
    "         WHERE r.id = t.run_id AND t.part <> r.part;\n"
    "    END IF;\n"
    "\n"
    "    FOREACH v_t IN ARRAY v_ref LOOP\n"
    "        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition\n"
    "                        WHERE logicalrelid = ('cairn.' || v_t)::regclass) THEN\n"
    "            PERFORM create_reference_table('cairn.' || v_t);\n"
    "            PERFORM truncate_local_data_after_distributing_table('cairn.' || v_t);\n"
    "        END IF;\n"
    "    END LOOP;\n"
    "    FOREACH v_t IN ARRAY v_dist LOOP\n"
    "        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition\n"
    "                        WHERE logicalrelid = ('cairn.' || v_t)::regclass) THEN\n"
    "            -- The key of every run, in the part of its key (migration\n"
    "            -- 0038), before its first write with more than one part.\n"
    "            IF v_t = 'run_keys' THEN\n"
    "                v_n := cairn.shards_per_group(); -- read here, not on the nodes\n"
    "                INSERT INTO cairn.run_keys (part, workflow, key, run_id)\n"
    "                SELECT cairn.part_of(cairn.shard_of(r.key, v_n)),\n"
    "                       r.workflow, r.key, r.id FROM cairn.runs r\n"
    "                ON CONFLICT ON CONSTRAINT run_keys_pkey DO NOTHING;\n"
    "            END IF;\n"
    "            PERFORM create_distributed_table('cairn.' || v_t, 'part',\n"
    "                colocate_with => CASE WHEN v_t = 'runs' THEN 'none' ELSE 'cairn.runs' END);\n"
    "            -- The rows were copied to the shards; the coordinator's own\n"
    "            -- copy would only take space.\n"
    "            PERFORM truncate_local_data_after_distributing_table('cairn.' || v_t);\n"
    "        END IF;\n"
    "    END LOOP;\n"
    "    FOREACH v_t IN ARRAY v_fks LOOP\n"
    "        EXECUTE v_t;\n"
    "    END LOOP;\n"
    "    -- The functions of one part: each call sent whole to the node of\n"
    "    -- its part (p_part), colocated with runs.\n"
    "    FOREACH v_t IN ARRAY v_parts_fns LOOP\n"
    "        IF NOT EXISTS (SELECT 1 FROM pg_dist_object\n"
    "                        WHERE objid = v_t::regprocedure\n"
    "                          AND distribution_argument_index IS NOT NULL) THEN\n"
    "            PERFORM create_distributed_function(v_t::regprocedure, 'p_part',\n"
    "                colocate_with => 'cairn.runs');\n"
    "        END IF;\n"
    "    END LOOP;\n"
    "END\n"
    "$$\n";

/* The counts of migrate_citus_report from pg_dist_partition and cairn.parts. */
static const char SQL_CITUS_STATE[] =
    "SELECT count(*) FILTER (WHERE p.partmethod = 'h'), count(*) FILTER (WHERE p.partmethod = "
    "'n'), "
    "  (SELECT count(*) FROM cairn.parts) "
    "FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
    "WHERE c.relnamespace = 'cairn'::regnamespace";

static int citus_state(cairn_client *c, migrate_citus_report *out)
{
	PGresult *r = db_exec(c->conn, &c->err, SQL_CITUS_STATE, 0, NULL);
	if (!r)
		return CAIRN_EDB;
	out->distributed = db_get_int(r, 0, 0);
	out->reference = db_get_int(r, 0, 1);
	out->parts = db_get_int(r, 0, 2);
	PQclear(r);
	return CAIRN_OK;
}

int migrate_citus(cairn_client *c, migrate_citus_report *out)
{
	*out = (migrate_citus_report){0};
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT count(*) FROM pg_extension WHERE extname = 'citus'", 0, NULL);
	if (!r)
		return CAIRN_EDB;
	int have = db_get_int(r, 0, 0);
	PQclear(r);
	if (!have)
		return client_fail(
		    c, CAIRN_EINVAL,
		    "Citus is not installed in this database: CREATE EXTENSION citus "
		    "on the coordinator and on each worker node, and add the workers "
		    "(SELECT citus_add_node(host, port)), before cairn migrate --citus");
	migrate_citus_report before;
	int rc = citus_state(c, &before);
	if (!rc)
		rc = locked_tx(c, SQL_CITUS);
	if (!rc)
		rc = citus_state(c, out);
	out->made_now = out->distributed + out->reference - before.distributed - before.reference;
	c->settings.shards = 0; /* the parts changed: read the settings again */
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
