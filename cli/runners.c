/*
 * runners.c - `cairn runners`: lists the runners registered in
 * cairn.runners, whether each is healthy and live, the age of its heartbeat
 * and its shard count.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

/* A comma-separated list (groups, runtimes) as a JSON array of strings. */
static cJSON *groups_json(const char *groups)
{
	cJSON *arr = cJSON_CreateArray();
	for (const char *p = groups; p && *p;) {
		size_t len = strcspn(p, ",");
		char *g = strndup(p, len);
		if (g)
			cJSON_AddItemToArray(arr, cJSON_CreateString(g));
		free(g);
		p += len + (p[len] == ',');
	}
	return arr;
}

const cli_opt RUNNERS_OPTS[] = {{"ttl", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cmd_runners(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn runners [--ttl DURATION] [--json]\n"
	    "\n"
	    "Lists the runners registered in cairn.runners: id, name, address,\n"
	    "version, whether the health checker holds it healthy, whether it is\n"
	    "live (heartbeat younger than the TTL and its lease connection present\n"
	    "in pg_stat_activity), the age of its last heartbeat, how many shards\n"
	    "it owns and the runtimes of the workflows it serves (c, python 3.11.2).\n"
	    "\n"
	    "  --ttl DURATION    heartbeat age after which a runner is not live\n"
	    "                    (1ms-365d; default 10s, as CAIRN_RUNNER_TTL)\n"
	    "  --json            print a JSON array\n" COMMON_HELP;
	cli_args a = {RUNNERS_OPTS, {0}, {0}, 0};
	if (cli_parse("runners", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("runners", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	char err[PARSE_ERR_MAX];
	int64_t ttl_ms = 10000;
	const char *ttl = cli_get(&a, "ttl");
	if (ttl && parse_duration_ms(ttl, &ttl_ms, err) < 0)
		return cli_error("runners", EXIT_USAGE, "--ttl: %s", err);
	const cli_field fields[] = {{"ttl_ms", "--ttl", ttl}, {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("runners", &a, &c);
	if (code)
		return code;
	cairn_runner_info *r;
	size_t n;
	int rc = cairn_runner_list(c, ttl_ms, &r, &n);
	if (rc) {
		code = cli_fail("runners", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++) {
			char t[32];
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "id", (double)r[i].id);
			cJSON_AddStringToObject(o, "name", r[i].name);
			cJSON_AddStringToObject(o, "address", r[i].address);
			cJSON_AddStringToObject(o, "version", r[i].version);
			cJSON_AddItemToObject(o, "groups", groups_json(r[i].groups));
			cJSON_AddNumberToObject(o, "weight", r[i].weight);
			cJSON_AddBoolToObject(o, "healthy", r[i].healthy);
			cJSON_AddBoolToObject(o, "live", r[i].live);
			cJSON_AddNumberToObject(o, "heartbeat_age_ms",
			                        (double)r[i].heartbeat_age_ms);
			cJSON_AddStringToObject(o, "started_at", cli_time(r[i].started_unix_ms, t));
			cJSON_AddNumberToObject(o, "shards", r[i].shards);
			cJSON_AddItemToObject(o, "runtimes", groups_json(r[i].runtimes));
			cJSON_AddItemToArray(arr, o);
		}
		cli_print_json(arr);
	} else {
		printf("%-8s %-20s %-22s %-8s %-7s %-4s %-13s %-6s %s\n", "ID", "NAME", "ADDRESS",
		       "VERSION", "HEALTHY", "LIVE", "HEARTBEAT_AGE", "SHARDS", "RUNTIMES");
		for (size_t i = 0; i < n; i++) {
			char age[32];
			printf("%-8" PRId64 " %-20s %-22s %-8s %-7s %-4s %-13s %-6d %s\n", r[i].id,
			       r[i].name, r[i].address, r[i].version, r[i].healthy ? "yes" : "no",
			       r[i].live ? "yes" : "no", cli_age(r[i].heartbeat_age_ms, age),
			       r[i].shards, *r[i].runtimes ? r[i].runtimes : "-");
		}
	}
	cairn_runner_list_free(r, n);
	cairn_client_free(c);
	return code;
}
