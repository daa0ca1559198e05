/*
 * status.c - `cairn status`: shows a run (workflow, key, shard, status,
 * times, input, output or error), its parent and children, the runs before
 * and after it in a chain of runs that continued as new, and its journal;
 * a value that does not open is shown as unreadable and why.
 */
#include <inttypes.h>
#include <stdio.h>

#include "cairn.h"
#include "commands.h"

static void print_journal_text(const cairn_run *r)
{
	printf("journal (%zu step%s):\n", r->nsteps, r->nsteps == 1 ? "" : "s");
	if (r->nsteps)
		printf("  %-4s %-20s %-7s %-10s %-8s %-9s %s\n", "SEQ", "NAME", "KIND", "STATUS",
		       "ATTEMPTS", "DURATION", "RESULT");
	for (size_t i = 0; i < r->nsteps; i++) {
		const cairn_step_info *s = &r->steps[i];
		char dur[24] = "-";
		if (s->finished_unix_ms)
			snprintf(dur, sizeof dur, "%" PRId64 "ms",
			         s->finished_unix_ms - s->started_unix_ms);
		char shown[CLI_SHOWN_MAX];
		unsigned err = CAIRN_LOCKED_ERROR, out = CAIRN_LOCKED_OUTPUT;
		printf("  %-4d %-20s %-7s %-10s %-8d %-9s %s%s\n", s->seq, s->name, s->kind,
		       s->status, s->attempts, dur, s->error || (s->locked & err) ? "error: " : "",
		       s->error || (s->locked & err) ? cli_shown(s->error, CLI_LOCK(s), err, shown)
		       : s->output || (s->locked & out)
		           ? cli_shown(s->output, CLI_LOCK(s), out, shown)
		           : "-");
	}
}

/* A link of a chain of runs that continued as new: its id, or null. */
static void add_link(cJSON *o, const char *name, int64_t id)
{
	if (id)
		cJSON_AddNumberToObject(o, name, (double)id);
	else
		cJSON_AddNullToObject(o, name);
}

const cli_opt STATUS_OPTS[] = {{"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cmd_status(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn status RUN [--json]\n"
	    "\n"
	    "Shows RUN: workflow, key, shard, status, attempts, timestamps, input,\n"
	    "output or error, its parent and children, the previous and next runs of\n"
	    "its chain when it continues one or continued as new, and its journal so\n"
	    "far; the runtime that serves its workflow (c, python 3.11.2, ...) and,\n"
	    "for a run that no live worker of its group serves, why it waits. A value\n"
	    "that does not open (its key is not configured, or it does not authenticate\n"
	    "under it) shows as unreadable, and why (--json: null, named in\n"
	    "\"unreadable\"); the rest of the run reads as usual, and it exits 0.\n"
	    "\n"
	    "  --json            print one JSON document\n" COMMON_HELP;
	cli_args a = {STATUS_OPTS, {0}, {0}, 0};
	if (cli_parse("status", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error("status", EXIT_USAGE, "expected exactly one RUN (see --help)");
	cairn_client *c;
	int64_t id;
	int code = cli_open_run("status", &a, &c, &id);
	if (code)
		return code;
	cairn_run *r;
	int rc = cairn_run_get(c, id, &r);
	if (rc) {
		code = cli_fail("status", c, rc, NULL);
	} else if (cli_has(&a, "json")) {
		cJSON *o = cli_run_json(r);
		if (r->runtime)
			cJSON_AddStringToObject(o, "runtime", r->runtime);
		else
			cJSON_AddNullToObject(o, "runtime");
		if (r->unserved)
			cJSON_AddStringToObject(o, "unserved", r->unserved);
		else
			cJSON_AddNullToObject(o, "unserved");
		if (r->parent_id)
			cJSON_AddNumberToObject(o, "parent", (double)r->parent_id);
		else
			cJSON_AddNullToObject(o, "parent");
		add_link(o, "previous", r->continued_from);
		add_link(o, "next", r->continued_to);
		cJSON *kids = cJSON_AddArrayToObject(o, "children");
		for (size_t i = 0; i < r->nchildren; i++) {
			cJSON *k = cJSON_CreateObject();
			cJSON_AddNumberToObject(k, "id", (double)r->children[i].id);
			cJSON_AddStringToObject(k, "workflow", r->children[i].workflow);
			cJSON_AddStringToObject(k, "status", r->children[i].status);
			cJSON_AddItemToArray(kids, k);
		}
		cJSON *steps = cJSON_AddArrayToObject(o, "journal");
		for (size_t i = 0; i < r->nsteps; i++) {
			const cairn_step_info *s = &r->steps[i];
			char t[32];
			cJSON *so = cJSON_CreateObject();
			cJSON_AddNumberToObject(so, "seq", s->seq);
			cJSON_AddStringToObject(so, "name", s->name);
			cJSON_AddStringToObject(so, "kind", s->kind);
			cJSON_AddStringToObject(so, "status", s->status);
			cJSON_AddNumberToObject(so, "attempts", s->attempts);
			cli_json_add_raw(so, "output", s->output);
			if (s->error)
				cJSON_AddStringToObject(so, "error", s->error);
			else
				cJSON_AddNullToObject(so, "error");
			cli_json_add_unreadable(so, CLI_LOCK(s), NULL);
			cJSON_AddStringToObject(so, "started_at", cli_time(s->started_unix_ms, t));
			if (s->finished_unix_ms) {
				cJSON_AddStringToObject(so, "finished_at",
				                        cli_time(s->finished_unix_ms, t));
				cJSON_AddNumberToObject(
				    so, "duration_ms",
				    (double)(s->finished_unix_ms - s->started_unix_ms));
			} else {
				cJSON_AddNullToObject(so, "finished_at");
				cJSON_AddNullToObject(so, "duration_ms");
			}
			cJSON_AddItemToArray(steps, so);
		}
		cli_print_json(o);
	} else {
		char t[32];
		printf("run %" PRId64 "\n", r->id);
		printf("  workflow   %s\n  key        %s\n  shard      %s/%d\n", r->workflow,
		       r->key, r->group, r->shard);
		printf("  status     %s%s%s (attempt %d of %d)\n", r->status,
		       r->held ? ", held: waiting for a slot of its concurrency key" : "",
		       r->cancel_requested && !r->finished_unix_ms ? ", cancel requested" : "",
		       r->attempt, r->max_attempts);
		printf("  runtime    %s\n",
		       r->runtime ? r->runtime : "- (no worker has served it)");
		if (r->unserved)
			printf("  waiting    %s\n", r->unserved);
		if (r->waiting_for)
			printf("  waiting    for %s\n", r->waiting_for);
		if (r->concurrency_key)
			printf("  conc. key  %s\n", r->concurrency_key);
		if (r->priority)
			printf("  priority   %d\n", r->priority);
		printf("  created    %s\n", cli_time(r->created_unix_ms, t));
		printf("  scheduled  %s\n", cli_time(r->scheduled_unix_ms, t));
		printf("  started    %s\n", cli_time(r->started_unix_ms, t));
		printf("  updated    %s\n", cli_time(r->updated_unix_ms, t));
		printf("  finished   %s\n", cli_time(r->finished_unix_ms, t));
		char shown[CLI_SHOWN_MAX];
		printf("  input      %s\n",
		       cli_shown(r->input, CLI_LOCK(r), CAIRN_LOCKED_INPUT, shown));
		if (r->output || (r->locked & CAIRN_LOCKED_OUTPUT))
			printf("  output     %s\n",
			       cli_shown(r->output, CLI_LOCK(r), CAIRN_LOCKED_OUTPUT, shown));
		if (r->error || (r->locked & CAIRN_LOCKED_ERROR))
			printf("  error      %s\n",
			       cli_shown(r->error, CLI_LOCK(r), CAIRN_LOCKED_ERROR, shown));
		if (r->code_version)
			printf("  code       %s\n", r->code_version);
		if (r->parent_id)
			printf("  parent     %" PRId64 "\n", r->parent_id);
		if (r->continued_from)
			printf("  previous   %" PRId64 " (this run continues it as new)\n",
			       r->continued_from);
		if (r->continued_to)
			printf("  next       %" PRId64 " (this run continued as new)\n",
			       r->continued_to);
		for (size_t i = 0; i < r->nchildren; i++)
			printf("  %-10s %" PRId64 " %s %s\n", i ? "" : "children",
			       r->children[i].id, r->children[i].workflow, r->children[i].status);
		print_journal_text(r);
	}
	cairn_run_free(r);
	cairn_client_free(c);
	return code;
}
