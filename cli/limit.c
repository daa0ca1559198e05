/*
 * limit.c - `cairn limit`: flow control of a workflow's runs, fleet-wide:
 * set, list and delete its concurrency and rate limits, overall and per
 * concurrency key. Every worker's next claim applies a change.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

static const char LIMIT_HELP[] =
    "usage: cairn limit set WORKFLOW [--key-concurrency N|off] [--concurrency N|off]\n"
    "                                [--rate N/PERIOD|off] [--key-rate N/PERIOD|off]\n"
    "                                [--json]\n"
    "       cairn limit list [--json]\n"
    "       cairn limit delete WORKFLOW [--json]\n"
    "\n"
    "Flow control for a workflow's runs, fleet-wide, held in the database: every\n"
    "worker's next claim applies a change. set changes only the limits it names.\n"
    "Runs take a concurrency key with `cairn enqueue --concurrency-key K`.\n"
    "\n"
    "  --key-concurrency N  at most N runs of one concurrency key execute at once\n"
    "                       (1-100000); a run in a durable sleep or waiting for a\n"
    "                       signal holds no slot. Runs past it stay pending, held,\n"
    "                       and go in priority order as slots free\n"
    "  --concurrency N      at most N runs of the workflow execute at once across\n"
    "                       the fleet (1-100000), with or without keys\n"
    "  --rate N/PERIOD      at most N runs of the workflow start per PERIOD, across\n"
    "                       the fleet: 10/s, 600/m, 5/500ms (a unit s, m, h, d or a\n"
    "                       duration up to 1d); N at once, then evenly spread\n"
    "  --key-rate N/PERIOD  the same for the runs of one concurrency key\n"
    "  off                  removes that limit\n"
    "  --json               print JSON\n" COMMON_HELP;

/* "off" (0), or a count from 1 to max into *n; otherwise a usage error. */
static int limit_count(const char *opt, const char *v, int *n)
{
	int64_t x;
	char err[PARSE_ERR_MAX];
	if (strcmp(v, "off") == 0)
		return *n = 0, 0;
	if (parse_int(v, 1, 100000, &x, err) < 0)
		return cli_error("limit", EXIT_USAGE, "--%s: %s, or off", opt, err);
	*n = (int)x;
	return 0;
}

static int limit_rate(const char *opt, const char *v, int *n, int64_t *ms)
{
	char err[PARSE_ERR_MAX];
	if (strcmp(v, "off") == 0)
		return *n = 0, *ms = 0, 0;
	if (parse_rate(v, n, ms, err) < 0)
		return cli_error("limit", EXIT_USAGE, "--%s: %s, or off", opt, err);
	return 0;
}

static cJSON *limit_json(const cairn_limit *l)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "workflow", l->workflow);
	const struct {
		const char *name;
		int n;
	} counts[] = {{"key_concurrency", l->key_concurrency}, {"concurrency", l->concurrency}};
	for (int i = 0; i < 2; i++)
		if (counts[i].n)
			cJSON_AddNumberToObject(o, counts[i].name, counts[i].n);
		else
			cJSON_AddNullToObject(o, counts[i].name);
	const struct {
		const char *name;
		int n;
		int64_t ms;
	} rates[] = {{"rate", l->rate, l->rate_period_ms},
	             {"key_rate", l->key_rate, l->key_rate_period_ms}};
	for (int i = 0; i < 2; i++) {
		if (!rates[i].n) {
			cJSON_AddNullToObject(o, rates[i].name);
			continue;
		}
		cJSON *r = cJSON_AddObjectToObject(o, rates[i].name);
		cJSON_AddNumberToObject(r, "starts", rates[i].n);
		cJSON_AddNumberToObject(r, "period_ms", (double)rates[i].ms);
	}
	return o;
}

/* "10/1000ms" or "-". */
static const char *rate_text(int n, int64_t ms, char out[48])
{
	if (!n)
		return "-";
	snprintf(out, 48, "%d/%" PRId64 "ms", n, ms);
	return out;
}

static int limit_list(cairn_client *c, int json)
{
	cairn_limit *l;
	size_t n;
	int rc = cairn_limit_list(c, &l, &n);
	if (rc)
		return cli_fail("limit", c, rc, NULL);
	if (json) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, limit_json(&l[i]));
		cli_print_json(arr);
	} else {
		printf("%-24s %-16s %-12s %-16s %-16s\n", "WORKFLOW", "KEY CONCURRENCY",
		       "CONCURRENCY", "RATE", "KEY RATE");
		for (size_t i = 0; i < n; i++) {
			char kc[24], gc[24], r1[48], r2[48];
			snprintf(kc, sizeof kc, "%d", l[i].key_concurrency);
			snprintf(gc, sizeof gc, "%d", l[i].concurrency);
			printf("%-24s %-16s %-12s %-16s %-16s\n", l[i].workflow,
			       l[i].key_concurrency ? kc : "-", l[i].concurrency ? gc : "-",
			       rate_text(l[i].rate, l[i].rate_period_ms, r1),
			       rate_text(l[i].key_rate, l[i].key_rate_period_ms, r2));
		}
	}
	cairn_limit_list_free(l, n);
	return EXIT_OK;
}

/* set: the workflow's limits as they are, changed by the options given. */
static int limit_set(cairn_client *c, const cli_args *a, const char *workflow, cairn_limit *out)
{
	cairn_limit *l;
	size_t n;
	int rc = cairn_limit_list(c, &l, &n);
	if (rc)
		return cli_fail("limit", c, rc, NULL);
	*out = (cairn_limit){.workflow = (char *)workflow};
	for (size_t i = 0; i < n; i++)
		if (strcmp(l[i].workflow, workflow) == 0) {
			*out = l[i];
			out->workflow = (char *)workflow;
		}
	cairn_limit_list_free(l, n);
	if ((cli_has(a, "key-concurrency") &&
	     limit_count("key-concurrency", cli_get(a, "key-concurrency"),
	                 &out->key_concurrency)) ||
	    (cli_has(a, "concurrency") &&
	     limit_count("concurrency", cli_get(a, "concurrency"), &out->concurrency)) ||
	    (cli_has(a, "rate") &&
	     limit_rate("rate", cli_get(a, "rate"), &out->rate, &out->rate_period_ms)) ||
	    (cli_has(a, "key-rate") && limit_rate("key-rate", cli_get(a, "key-rate"),
	                                          &out->key_rate, &out->key_rate_period_ms)))
		return EXIT_USAGE;
	const cli_field fields[] = {
	    {"workflow", "WORKFLOW", NULL},         {"key_concurrency", "--key-concurrency", NULL},
	    {"concurrency", "--concurrency", NULL}, {"rate", "--rate", NULL},
	    {"key_rate", "--key-rate", NULL},       {NULL, NULL, NULL}};
	rc = cairn_limit_set(c, out);
	return rc ? cli_fail("limit", c, rc, fields) : EXIT_OK;
}

const char *const LIMIT_SUBS[] = {"set", "list", "delete", NULL};
const cli_opt LIMIT_OPTS[] = {
    {"key-concurrency", 1}, {"rate", 1}, {"key-rate", 1}, {"json", 0}, {"db", 1}, {"help", 0},
    {"concurrency", 1},     {NULL, 0}};

int cmd_limit(int argc, char **argv)
{
	cli_args a = {LIMIT_OPTS, {0}, {0}, 0};
	if (cli_parse("limit", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(LIMIT_HELP, stdout), EXIT_OK;
	const char *const *subs = LIMIT_SUBS;
	int sub = cli_sub("limit", &a, subs);
	if (sub < 0)
		return EXIT_USAGE;
	if (a.npos != (sub == 1 ? 1 : 2))
		return cli_error("limit", EXIT_USAGE, "limit %s takes %s (see --help)", subs[sub],
		                 sub == 1 ? "no WORKFLOW" : "one WORKFLOW");
	if (sub == 0 && !cli_has(&a, "key-concurrency") && !cli_has(&a, "concurrency") &&
	    !cli_has(&a, "rate") && !cli_has(&a, "key-rate"))
		return cli_error("limit", EXIT_USAGE,
		                 "limit set needs --key-concurrency, --concurrency, --rate or "
		                 "--key-rate");
	cairn_client *c;
	int code = cli_open("limit", &a, &c);
	if (code)
		return code;
	int json = cli_has(&a, "json");
	cairn_limit l = {0};
	if (sub == 1) {
		code = limit_list(c, json);
	} else if (sub == 0) {
		code = limit_set(c, &a, a.pos[1], &l);
	} else {
		int rc = cairn_limit_delete(c, a.pos[1]);
		code = rc ? cli_fail("limit", c, rc, NULL) : EXIT_OK;
	}
	if (!code && sub != 1) {
		if (json && sub == 0) {
			cli_print_json(limit_json(&l));
		} else if (json) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "workflow", a.pos[1]);
			cJSON_AddStringToObject(o, "done", "delete");
			cli_print_json(o);
		} else {
			printf("limits of %s %s\n", a.pos[1], sub == 0 ? "set" : "deleted");
		}
	}
	cairn_client_free(c);
	return code;
}
