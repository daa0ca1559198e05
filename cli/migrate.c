/*
 * migrate.c - `cairn migrate`: applies the pending schema migrations, built
 * into cairn or read from --dir, in order (migrate_apply in the client), or
 * lists them with --status; --shards records the shards per group on a fresh
 * database; --citus then distributes the schema over a Citus cluster
 * (migrate_citus).
 */
#include <stdio.h>

#include "cairn.h"
#include "client.h"
#include "commands.h"
#include "parse.h"

const cli_opt MIGRATE_OPTS[] = {{"status", 0}, {"dir", 1}, {"shards", 1}, {"citus", 0},
                                {"json", 0},   {"db", 1},  {"help", 0},   {NULL, 0}};

int cmd_migrate(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn migrate [--status] [--dir DIR] [--shards N] [--citus] [--json]\n"
	    "\n"
	    "Applies the pending migrations in order, each in its own transaction.\n"
	    "Concurrent migrators are serialized; running it again is a no-op. An\n"
	    "applied migration whose file changed since is refused.\n"
	    "\n"
	    "  --status          list applied and pending migrations; change nothing\n"
	    "  --dir DIR         read NNNN_name.sql files from DIR instead of the ones\n"
	    "                    built into cairn\n"
	    "  --shards N        shards per group (1-65536; default 4096), recorded on\n"
	    "                    a fresh database; must match the recorded value after\n"
	    "  --citus           on the coordinator of a Citus cluster, after the\n"
	    "                    migrations: distribute the tables of runs by part\n"
	    "                    (one part per Citus shard) and make the small ones\n"
	    "                    reference tables; converts a database that has runs\n"
	    "                    in place; does only what is not done yet\n"
	    "  --json            print {\"applied\": [versions this run applied],\n"
	    "                    \"version_before\", \"version_after\"} (the newest applied\n"
	    "                    migration before and after; 0: none; with --citus,\n"
	    "                    \"citus\": {\"distributed\", \"reference\", \"made_now\",\n"
	    "                    \"parts\"}); with --status,\n"
	    "                    an array of {\"version\", \"name\", \"checksum\",\n"
	    "                    \"applied\", \"applied_at\", \"changed\"}\n" COMMON_HELP;
	cli_args a = {MIGRATE_OPTS, {0}, {0}, 0};
	if (cli_parse("migrate", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("migrate", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	int64_t shards = 0;
	char err[PARSE_ERR_MAX];
	if (cli_has(&a, "shards") && parse_int(cli_get(&a, "shards"), 1, 65536, &shards, err) < 0)
		return cli_error("migrate", EXIT_USAGE, "--shards: %s", err);
	cairn_client *c;
	int code = cli_open("migrate", &a, &c);
	if (code)
		return code;
	const char *dir = cli_get(&a, "dir");
	int rc;
	if (cli_has(&a, "status")) {
		cairn_migration_info *m;
		size_t n;
		if ((rc = cairn_migration_list(c, dir, &m, &n))) {
			code = cli_fail("migrate", c, rc, NULL);
		} else if (cli_has(&a, "json")) {
			cJSON *arr = cJSON_CreateArray();
			for (size_t i = 0; i < n; i++) {
				cJSON *o = cJSON_CreateObject();
				char t[32];
				cJSON_AddNumberToObject(o, "version", m[i].version);
				cJSON_AddStringToObject(o, "name", m[i].name);
				cJSON_AddStringToObject(o, "checksum", m[i].checksum);
				cJSON_AddBoolToObject(o, "applied", m[i].applied);
				if (m[i].applied)
					cJSON_AddStringToObject(o, "applied_at",
					                        cli_time(m[i].applied_unix_ms, t));
				cJSON_AddBoolToObject(o, "changed", m[i].changed);
				cJSON_AddItemToArray(arr, o);
			}
			cli_print_json(arr);
		} else {
			printf("%-8s %-28s %-10s %s\n", "VERSION", "NAME", "STATE", "APPLIED AT");
			for (size_t i = 0; i < n; i++) {
				char t[32];
				printf("%04d     %-28s %-10s %s\n", m[i].version, m[i].name,
				       m[i].changed   ? "CHANGED"
				       : m[i].applied ? "applied"
				                      : "pending",
				       m[i].applied ? cli_time(m[i].applied_unix_ms, t) : "-");
			}
		}
		if (!rc)
			cairn_migration_list_free(m, n);
	} else {
		migrate_report m;
		migrate_citus_report ct = {0};
		int citus = cli_has(&a, "citus");
		if ((rc = migrate_apply(c, dir, (int)shards, &m)) ||
		    (citus && (rc = migrate_citus(c, &ct)))) {
			code = cli_fail("migrate", c, rc, NULL);
		} else if (cli_has(&a, "json")) {
			cJSON *o = cJSON_CreateObject();
			cJSON *v = cJSON_AddArrayToObject(o, "applied");
			for (size_t i = 0; i < m.n; i++)
				cJSON_AddItemToArray(v, cJSON_CreateNumber(m.versions[i]));
			cJSON_AddNumberToObject(o, "version_before", m.before);
			cJSON_AddNumberToObject(o, "version_after", m.after);
			if (citus) {
				cJSON *t = cJSON_AddObjectToObject(o, "citus");
				cJSON_AddNumberToObject(t, "distributed", ct.distributed);
				cJSON_AddNumberToObject(t, "reference", ct.reference);
				cJSON_AddNumberToObject(t, "made_now", ct.made_now);
				cJSON_AddNumberToObject(t, "parts", ct.parts);
			}
			cli_print_json(o);
		} else {
			if (m.n)
				printf("applied %zu migration%s\n", m.n, m.n == 1 ? "" : "s");
			else
				printf("schema is up to date\n");
			if (citus)
				printf("citus: %d tables distributed by part in %d parts, %d "
				       "reference "
				       "tables (%d made now)\n",
				       ct.distributed, ct.parts, ct.reference, ct.made_now);
		}
		migrate_report_clear(&m);
	}
	cairn_client_free(c);
	return code;
}
