/*
 * workflows.c - `cairn workflows`: each workflow with the shard group(s)
 * that serve it, their runtimes, the live runners that serve it ("2 of 3"
 * of the group's), when it was last seen and how many of its runs wait
 * (routing by workflow, cairn_workflow_list).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

const cli_opt WORKFLOWS_OPTS[] = {{"ttl", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static cJSON *workflow_json(const cairn_workflow_info *w)
{
	char t[32];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "workflow", w->workflow);
	cJSON_AddStringToObject(o, "group", w->group);
	if (w->runtime)
		cJSON_AddStringToObject(o, "runtime", w->runtime);
	else
		cJSON_AddNullToObject(o, "runtime");
	cJSON_AddBoolToObject(o, "served", w->served);
	cJSON *rs = cJSON_AddArrayToObject(o, "runners");
	for (size_t k = 0; k < w->nrunners; k++) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddNumberToObject(r, "id", (double)w->runners[k].id);
		cJSON_AddStringToObject(r, "name", w->runners[k].name);
		cJSON_AddStringToObject(r, "runtime", w->runners[k].runtime);
		cJSON_AddItemToArray(rs, r);
	}
	cJSON_AddNumberToObject(o, "group_live_runners", w->group_live_runners);
	if (w->served) {
		cJSON_AddStringToObject(o, "first_seen", cli_time(w->first_seen_unix_ms, t));
		cJSON_AddStringToObject(o, "last_seen", cli_time(w->last_seen_unix_ms, t));
		cJSON_AddNumberToObject(o, "last_seen_age_ms", (double)w->last_seen_age_ms);
	} else {
		cJSON_AddNullToObject(o, "first_seen");
		cJSON_AddNullToObject(o, "last_seen");
		cJSON_AddNullToObject(o, "last_seen_age_ms");
	}
	cJSON_AddNumberToObject(o, "waiting", (double)w->waiting);
	return o;
}

/* The live runners that serve w: "4 host:12, 7 host:13", or "-". */
static void runners_text(const cairn_workflow_info *w, char *out, size_t n)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t k = 0; k < w->nrunners && used < n; k++)
		used += (size_t)snprintf(out + used, n - used, "%s%" PRId64 " %s", k ? ", " : "",
		                         w->runners[k].id, w->runners[k].name);
	if (!w->nrunners)
		snprintf(out, n, "-");
}

static void print_table(const cairn_workflow_info *w, size_t n)
{
	printf("%-24s %-12s %-16s %-9s %-13s %-8s %s\n", "WORKFLOW", "GROUP", "RUNTIME", "SERVING",
	       "LAST_SEEN", "WAITING", "RUNNERS");
	for (size_t i = 0; i < n; i++) {
		char serving[48], seen[40], age[32], who[512];
		snprintf(serving, sizeof serving, "%zu of %d", w[i].nrunners,
		         w[i].group_live_runners);
		if (w[i].served)
			snprintf(seen, sizeof seen, "%s ago", cli_age(w[i].last_seen_age_ms, age));
		else
			snprintf(seen, sizeof seen, "never");
		runners_text(&w[i], who, sizeof who);
		printf("%-24s %-12s %-16s %-9s %-13s %-8" PRId64 " %s\n", w[i].workflow, w[i].group,
		       w[i].runtime ? w[i].runtime : "-", serving, seen, w[i].waiting, who);
	}
}

int cmd_workflows(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn workflows [--ttl DURATION] [--json]\n"
	    "\n"
	    "Lists each workflow by shard group: every group whose workers have ever\n"
	    "served it, and any group where runs of it wait without ever having been\n"
	    "served there. For each: the runtime that serves it (c, python 3.11.2, ...),\n"
	    "how many of the group's live runners serve it (\"2 of 3\"), when a worker\n"
	    "serving it was last seen, how many of its runs are pending there, and the\n"
	    "live runners that serve it (id and name). A run enqueued without a group\n"
	    "goes to a group that serves its workflow (docs/sdks.md, routing by\n"
	    "workflow).\n"
	    "\n"
	    "  --ttl DURATION    heartbeat age after which a runner is not live\n"
	    "                    (1ms-365d; default 10s, as CAIRN_RUNNER_TTL)\n"
	    "  --json            print a JSON array\n" COMMON_HELP;
	cli_args a = {WORKFLOWS_OPTS, {0}, {0}, 0};
	if (cli_parse("workflows", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("workflows", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	char err[PARSE_ERR_MAX];
	int64_t ttl_ms = 10000;
	const char *ttl = cli_get(&a, "ttl");
	if (ttl && parse_duration_ms(ttl, &ttl_ms, err) < 0)
		return cli_error("workflows", EXIT_USAGE, "--ttl: %s", err);
	const cli_field fields[] = {{"ttl_ms", "--ttl", ttl}, {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("workflows", &a, &c);
	if (code)
		return code;
	cairn_workflow_info *w;
	size_t n;
	int rc = cairn_workflow_list(c, ttl_ms, &w, &n);
	if (rc) {
		code = cli_fail("workflows", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, workflow_json(&w[i]));
		cli_print_json(arr);
	} else {
		print_table(w, n);
	}
	cairn_workflow_list_free(w, n);
	cairn_client_free(c);
	return code;
}
