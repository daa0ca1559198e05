/*
 * list.c - `cairn list`: lists runs newest first, filtered by workflow,
 * status or code version, as a table or a JSON array.
 */
#include <inttypes.h>
#include <stdio.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

const cli_opt LIST_OPTS[] = {{"workflow", 1}, {"status", 1}, {"limit", 1},        {"json", 0},
                             {"db", 1},       {"help", 0},   {"code-version", 1}, {NULL, 0}};

int cmd_list(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn list [--workflow W] [--status S] [--code-version V] [--limit N]\n"
	    "                  [--json]\n"
	    "\n"
	    "Lists runs, newest first.\n"
	    "\n"
	    "  --workflow W      only runs of workflow W\n"
	    "  --code-version V  only runs started by workers with CAIRN_CODE_VERSION V\n"
	    "  --status S        only runs in status S: pending, running, sleeping,\n"
	    "                    waiting, completed, failed or cancelled\n"
	    "  --limit N         at most N runs (1-10000; default 50)\n"
	    "  --json            print a JSON array\n" COMMON_HELP;
	cli_args a = {LIST_OPTS, {0}, {0}, 0};
	if (cli_parse("list", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("list", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	char err[PARSE_ERR_MAX];
	cairn_list_filter f = {.workflow = cli_get(&a, "workflow"),
	                       .status = cli_get(&a, "status"),
	                       .code_version = cli_get(&a, "code-version")};
	if (cli_has(&a, "limit") && cli_count(cli_get(&a, "limit"), &f.limit, err) < 0)
		return cli_error("list", EXIT_USAGE, "--limit: %s", err);
	cairn_client *c;
	int code = cli_open("list", &a, &c);
	if (code)
		return code;
	cairn_run *runs;
	size_t n;
	static const cli_field fields[] = {{"workflow", "--workflow", NULL},
	                                   {"status", "--status", NULL},
	                                   {"limit", "--limit", NULL},
	                                   {"code_version", "--code-version", NULL},
	                                   {NULL, NULL, NULL}};
	int rc = cairn_run_list(c, &f, &runs, &n);
	if (rc) {
		code = cli_fail("list", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, cli_run_json(&runs[i]));
		cli_print_json(arr);
	} else {
		printf("%-10s %-16s %-24s %-10s %-7s %s\n", "ID", "WORKFLOW", "KEY", "STATUS",
		       "ATTEMPT", "CREATED");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			printf("%-10" PRId64 " %-16s %-24s %-10s %-7d %s\n", runs[i].id,
			       runs[i].workflow, runs[i].key, runs[i].status, runs[i].attempt,
			       cli_time(runs[i].created_unix_ms, t));
		}
	}
	if (!rc)
		cairn_run_list_free(runs, n);
	cairn_client_free(c);
	return code;
}
