/*
 * schedule.c - `cairn schedule`: the cron schedules: create, list, pause,
 * resume and delete them. A running worker's cairn.scheduler singleton fires
 * them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cairn.h"
#include "commands.h"

static const char SCHEDULE_HELP[] =
    "usage: cairn schedule create NAME --cron EXPR --workflow W [--tz ZONE]\n"
    "                      [--input JSON | --input @FILE] [--group G]\n"
    "                      [--overlap skip|allow] [--catchup none|latest|all] [--json]\n"
    "       cairn schedule list [--json]\n"
    "       cairn schedule pause NAME | resume NAME | delete NAME [--json]\n"
    "\n"
    "A schedule starts a run of W at every time EXPR names, in ZONE (a tz\n"
    "database zone or a POSIX TZ string, default UTC). Each wall time fires once\n"
    "across daylight-saving changes, steps and * too: one the clocks skip fires\n"
    "at the instant it would have had (shifted forward by the jump), one they\n"
    "repeat at its first occurrence. EXPR: minute hour day-of-month month\n"
    "day-of-week, or six fields with seconds first; each *, N, A-B, a step (*/S,\n"
    "A-B/S, A/S) or a list, month and day names (JAN, MON); or @hourly, @daily,\n"
    "@weekly, @monthly, @yearly. The cairn.scheduler singleton of a running\n"
    "worker fires it; each fire is a run keyed cairn.schedule:NAME:DUE_MS, so\n"
    "none happens twice.\n"
    "\n"
    "  --overlap skip    no fire while the last fire's run is unfinished (default)\n"
    "  --overlap allow   fire regardless\n"
    "  --catchup latest  of the times missed while no scheduler ran, fire the last\n"
    "                    (default); all: each (1000 at a time); none: none\n"
    "  resume            fires next at the first time from now\n"
    "  --json            print JSON\n" COMMON_HELP;

static cJSON *schedule_json(const cairn_schedule_info *s)
{
	char t[32];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddStringToObject(o, "cron", s->cron);
	cJSON_AddStringToObject(o, "tz", s->tz);
	cJSON_AddStringToObject(o, "workflow", s->workflow);
	cJSON_AddStringToObject(o, "group", s->group);
	cJSON_AddStringToObject(o, "overlap", s->overlap);
	cJSON_AddStringToObject(o, "catchup", s->catchup);
	cJSON_AddBoolToObject(o, "paused", s->paused);
	cJSON_AddStringToObject(o, "next_at", cli_time(s->next_unix_ms, t));
	if (s->last_unix_ms)
		cJSON_AddStringToObject(o, "last_at", cli_time(s->last_unix_ms, t));
	else
		cJSON_AddNullToObject(o, "last_at");
	if (s->last_run_id)
		cJSON_AddNumberToObject(o, "last_run", (double)s->last_run_id);
	else
		cJSON_AddNullToObject(o, "last_run");
	cJSON_AddNumberToObject(o, "fires", (double)s->fires);
	cJSON_AddNumberToObject(o, "skipped", (double)s->skipped);
	return o;
}

static int schedule_list(cairn_client *c, int json)
{
	cairn_schedule_info *s;
	size_t n;
	int rc = cairn_schedule_list(c, &s, &n);
	if (rc)
		return cli_fail("schedule", c, rc, NULL);
	if (json) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, schedule_json(&s[i]));
		cli_print_json(arr);
	} else {
		printf("%-20s %-16s %-16s %-14s %-7s %-24s %s\n", "NAME", "CRON", "TZ", "WORKFLOW",
		       "STATE", "NEXT", "FIRES");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			printf("%-20s %-16s %-16s %-14s %-7s %-24s %" PRId64 "\n", s[i].name,
			       s[i].cron, s[i].tz, s[i].workflow, s[i].paused ? "paused" : "active",
			       cli_time(s[i].next_unix_ms, t), s[i].fires);
		}
	}
	cairn_schedule_list_free(s, n);
	return EXIT_OK;
}

const char *const SCHEDULE_SUBS[] = {"create", "list", "pause", "resume", "delete", NULL};
const cli_opt SCHEDULE_OPTS[] = {{"cron", 1},  {"workflow", 1}, {"tz", 1},      {"input", 1},
                                 {"group", 1}, {"overlap", 1},  {"catchup", 1}, {"json", 0},
                                 {"db", 1},    {"help", 0},     {NULL, 0}};

int cmd_schedule(int argc, char **argv)
{
	cli_args a = {SCHEDULE_OPTS, {0}, {0}, 0};
	if (cli_parse("schedule", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(SCHEDULE_HELP, stdout), EXIT_OK;
	const char *const *subs = SCHEDULE_SUBS;
	int sub = cli_sub("schedule", &a, subs);
	if (sub < 0)
		return EXIT_USAGE;
	if (a.npos != (sub == 1 ? 1 : 2))
		return cli_error("schedule", EXIT_USAGE, "schedule %s takes %s (see --help)",
		                 subs[sub], sub == 1 ? "no NAME" : "one NAME");
	if (sub == 0 && (!cli_has(&a, "cron") || !cli_has(&a, "workflow")))
		return cli_error("schedule", EXIT_USAGE,
		                 "schedule create needs --cron and --workflow");
	const char *input = NULL;
	char *owned = NULL;
	if (sub == 0 && cli_read_input("schedule", cli_get(&a, "input"), &input, &owned))
		return EXIT_USAGE;
	cairn_client *c;
	int code = cli_open("schedule", &a, &c);
	if (code) {
		free(owned);
		return code;
	}
	const cli_field fields[] = {{"name", "NAME", NULL},
	                            {"cron", "--cron", NULL},
	                            {"tz", "--tz", NULL},
	                            {"workflow", "--workflow", NULL},
	                            {"input", "--input", NULL},
	                            {"group", "--group", NULL},
	                            {"overlap", "--overlap", NULL},
	                            {"catchup", "--catchup", NULL},
	                            {NULL, NULL, NULL}};
	int rc = CAIRN_OK, json = cli_has(&a, "json");
	int64_t next = 0;
	if (sub == 0) {
		cairn_schedule_opts o = {.cron = cli_get(&a, "cron"),
		                         .tz = cli_get(&a, "tz"),
		                         .workflow = cli_get(&a, "workflow"),
		                         .input = input,
		                         .group = cli_get(&a, "group"),
		                         .overlap = cli_get(&a, "overlap"),
		                         .catchup = cli_get(&a, "catchup")};
		rc = cairn_schedule_create(c, a.pos[1], &o, &next);
	} else if (sub == 1) {
		code = schedule_list(c, json);
	} else if (sub == 4) {
		rc = cairn_schedule_delete(c, a.pos[1]);
	} else {
		rc = cairn_schedule_pause(c, a.pos[1], sub == 2);
	}
	if (rc) {
		code = cli_fail("schedule", c, rc, fields);
	} else if (sub != 1 && json) {
		cJSON *o = cJSON_CreateObject();
		char t[32];
		cJSON_AddStringToObject(o, "name", a.pos[1]);
		cJSON_AddStringToObject(o, "done", subs[sub]);
		if (next)
			cJSON_AddStringToObject(o, "next_at", cli_time(next, t));
		cli_print_json(o);
	} else if (sub == 0) {
		char t[32];
		printf("schedule %s created; first fire at %s\n", a.pos[1], cli_time(next, t));
	} else if (sub != 1) {
		printf("schedule %s %s\n", a.pos[1],
		       sub == 2   ? "paused"
		       : sub == 3 ? "resumed"
		                  : "deleted");
	}
	free(owned);
	cairn_client_free(c);
	return code;
}
