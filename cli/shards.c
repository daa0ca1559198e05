/*
 * shards.c - `cairn shards`: shows the owner and fencing epoch of each
 * shard, which shard locks an outsider holds, and how many shards each
 * runner owns.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cairn.h"
#include "commands.h"

/* Shards per owner; owner 0 is "unowned". */
typedef struct owner_count {
	int64_t owner;
	const char *name; /* borrowed from the shard list */
	size_t shards;
} owner_count;

static int owner_cmp(const void *a, const void *b)
{
	int64_t x = ((const owner_count *)a)->owner, y = ((const owner_count *)b)->owner;
	return (x > y) - (x < y);
}

/* Counts the shards of each owner; returns the number of entries (the
 * unowned one first and always present, then owners by id) or 0 when out of
 * memory. */
static size_t summarize(const cairn_shard_info *s, size_t n, owner_count **out)
{
	owner_count *v = calloc(n + 1, sizeof *v);
	*out = v;
	if (!v)
		return 0;
	size_t k = 1;
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		if (s[i].owner)
			for (j = 1; j < k && v[j].owner != s[i].owner; j++)
				;
		if (j == k) {
			v[k].owner = s[i].owner;
			v[k++].name = s[i].owner_name;
		}
		v[j].shards++;
	}
	qsort(v + 1, k - 1, sizeof *v, owner_cmp);
	return k;
}

static const char *or_unknown(const char *s)
{
	return s ? s : "?";
}

/* The outsider holding a shard's lock: {pid, user, application_name}, or null. */
static cJSON *outsider_json(const cairn_shard_info *s)
{
	if (!s->outsider_pid)
		return cJSON_CreateNull();
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "pid", s->outsider_pid);
	cJSON_AddItemToObject(o, "user",
	                      s->outsider_user ? cJSON_CreateString(s->outsider_user)
	                                       : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "application_name",
	                      s->outsider_application_name
	                          ? cJSON_CreateString(s->outsider_application_name)
	                          : cJSON_CreateNull());
	return o;
}

const cli_opt SHARDS_OPTS[] = {{"group", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cmd_shards(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn shards [--group G] [--json]\n"
	    "\n"
	    "Shows who owns each shard and its fencing epoch (one line per shard in\n"
	    "cairn.shard_leases; a shard never acquired has no line), then the\n"
	    "number of shards each runner owns and how many have no owner. A shard\n"
	    "whose lock is held by an outsider (a backend that is no runner's lease\n"
	    "backend, so no runner can take the shard) says so with the backend's\n"
	    "pid, user and application_name, and has a line even if never acquired.\n"
	    "\n"
	    "  --group G         only shards of group G\n"
	    "  --json            print {\"shards\": [...], \"summary\": [...]}\n" COMMON_HELP;
	cli_args a = {SHARDS_OPTS, {0}, {0}, 0};
	if (cli_parse("shards", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("shards", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	const char *group = cli_get(&a, "group");
	static const cli_field fields[] = {{"group", "--group", NULL}, {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("shards", &a, &c);
	if (code)
		return code;
	cairn_shard_info *s;
	size_t n;
	owner_count *sum = NULL;
	int rc = cairn_shard_list(c, group, &s, &n);
	size_t nsum = rc ? 0 : summarize(s, n, &sum);
	if (rc) {
		code = cli_fail("shards", c, rc, fields);
	} else if (!nsum) {
		code = cli_error("shards", EXIT_RUNTIME, "out of memory");
	} else if (cli_has(&a, "json")) {
		cJSON *doc = cJSON_CreateObject();
		cJSON *arr = cJSON_AddArrayToObject(doc, "shards");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "group", s[i].group);
			cJSON_AddNumberToObject(o, "shard", s[i].shard);
			if (s[i].owner)
				cJSON_AddNumberToObject(o, "owner", (double)s[i].owner);
			else
				cJSON_AddNullToObject(o, "owner");
			if (s[i].owner_name)
				cJSON_AddStringToObject(o, "owner_name", s[i].owner_name);
			else
				cJSON_AddNullToObject(o, "owner_name");
			cJSON_AddNumberToObject(o, "epoch", (double)s[i].epoch);
			if (s[i].acquired_unix_ms)
				cJSON_AddStringToObject(o, "acquired_at",
				                        cli_time(s[i].acquired_unix_ms, t));
			else
				cJSON_AddNullToObject(o, "acquired_at");
			cJSON_AddItemToObject(o, "outsider", outsider_json(&s[i]));
			cJSON_AddItemToArray(arr, o);
		}
		arr = cJSON_AddArrayToObject(doc, "summary");
		for (size_t i = 0; i < nsum; i++) {
			/* Owners first, the unowned count last, as in the table. */
			const owner_count *oc = &sum[(i + 1) % nsum];
			cJSON *o = cJSON_CreateObject();
			if (oc->owner)
				cJSON_AddNumberToObject(o, "owner", (double)oc->owner);
			else
				cJSON_AddNullToObject(o, "owner");
			if (oc->name)
				cJSON_AddStringToObject(o, "owner_name", oc->name);
			else
				cJSON_AddNullToObject(o, "owner_name");
			cJSON_AddNumberToObject(o, "shards", (double)oc->shards);
			cJSON_AddItemToArray(arr, o);
		}
		cli_print_json(doc);
	} else {
		size_t outsiders = 0;
		for (size_t i = 0; i < n; i++)
			outsiders += s[i].outsider_pid != 0;
		int w = outsiders ? 8 : 0; /* the EPOCH column, padded only when one follows */
		printf("%-20s %-6s %-28s %-*s%s\n", "GROUP", "SHARD", "OWNER", w, "EPOCH",
		       outsiders ? " LOCK_HELD_BY" : "");
		for (size_t i = 0; i < n; i++) {
			char owner[160] = "-", held[320] = "";
			if (s[i].owner)
				snprintf(owner, sizeof owner, "%" PRId64 ":%s", s[i].owner,
				         s[i].owner_name ? s[i].owner_name : "?");
			if (s[i].outsider_pid)
				snprintf(held, sizeof held,
				         " outsider pid=%d user=%s application_name=%s",
				         s[i].outsider_pid, or_unknown(s[i].outsider_user),
				         or_unknown(s[i].outsider_application_name));
			printf("%-20s %-6d %-28s %-*" PRId64 "%s\n", s[i].group, s[i].shard, owner,
			       w, s[i].epoch, held);
		}
		printf("\n%-28s %s\n", "OWNER", "SHARDS");
		for (size_t i = 1; i < nsum; i++) {
			char owner[160];
			snprintf(owner, sizeof owner, "%" PRId64 ":%s", sum[i].owner,
			         sum[i].name ? sum[i].name : "?");
			printf("%-28s %zu\n", owner, sum[i].shards);
		}
		printf("%-28s %zu\n", "unowned", sum[0].shards);
		if (outsiders)
			printf("%-28s %zu\n", "lock held by an outsider", outsiders);
	}
	free(sum);
	cairn_shard_list_free(s, n);
	cairn_client_free(c);
	return code;
}
