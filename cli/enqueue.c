/*
 * enqueue.c - `cairn enqueue`: starts a run of a workflow, once per
 * (workflow, key): the same key again names the existing run and says how it
 * stands. Its start can be delayed (--delay, --at), and --wait waits for its
 * result.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

const cli_opt ENQUEUE_OPTS[] = {{"key", 1},      {"input", 1},          {"delay", 1},
                                {"at", 1},       {"max-attempts", 1},   {"group", 1},
                                {"wait", 0},     {"timeout", 1},        {"json", 0},
                                {"db", 1},       {"help", 0},           {"concurrency-key", 1},
                                {"priority", 1}, {"require-served", 0}, {"traceparent", 1},
                                {NULL, 0}};

int cmd_enqueue(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn enqueue WORKFLOW [--key K] [--input JSON | --input @FILE]\n"
	    "                     [--delay DURATION | --at TIME] [--max-attempts N]\n"
	    "                     [--group G] [--concurrency-key K] [--priority P]\n"
	    "                     [--require-served] [--traceparent TP]\n"
	    "                     [--wait [--timeout DURATION]] [--json]\n"
	    "\n"
	    "Enqueues a run of WORKFLOW and prints its id. The same (WORKFLOW, KEY)\n"
	    "again writes nothing, prints the id of the existing run and says so on\n"
	    "stderr with its status and, if it has finished, its output or error\n"
	    "(exit 0).\n"
	    "\n"
	    "Without --group the run goes to the shard group whose workers serve\n"
	    "WORKFLOW (`cairn workflows`). A workflow that no worker has ever served\n"
	    "(in the group named) is accepted with a warning on stderr that names it,\n"
	    "and waits; --require-served refuses it instead (exit 3, nothing written).\n"
	    "\n"
	    "  --key K           idempotency key (default: a unique generated key)\n"
	    "  --input JSON      the run's input as JSON text, or @FILE to read it\n"
	    "  --delay DURATION  start no earlier than now + DURATION (500ms, 30s, 5m, 1h)\n"
	    "  --at TIME         start no earlier than TIME (RFC 3339, 2026-12-24T10:00:00Z)\n"
	    "  --max-attempts N  attempts before the run fails for good (1-1000; default 3)\n"
	    "  --group G         shard group (default: the group that serves WORKFLOW,\n"
	    "                    else default)\n"
	    "  --require-served  refuse the run if its group has never served WORKFLOW\n"
	    "  --concurrency-key K\n"
	    "                    flow control: the run lives in the shard of K, and the\n"
	    "                    workflow's key limits (cairn limit) count it under K\n"
	    "  --priority P      -1000 to 1000 (default 0): among due runs of a worker,\n"
	    "                    higher starts first\n"
	    "  --traceparent TP  W3C trace context (OpenTelemetry) of the caller's span,\n"
	    "                    00-<32 hex trace id>-<16 hex span id>-<2 hex flags>: the\n"
	    "                    run's spans join that trace as its children (default: the\n"
	    "                    run starts a trace of its own)\n"
	    "  --wait            wait for the run to finish and print its result (exit 0\n"
	    "                    completed, 1 failed or cancelled); an existing run that\n"
	    "                    has finished returns its result at once\n"
	    "  --timeout D       with --wait: give up after D (default 30s; exit 4)\n"
	    "  --json            print {\"id\", \"existed\", \"status\", \"held\", \"output\",\n"
	    "                    \"error\", \"warning\"} (held: waiting for a slot of its\n"
	    "                    concurrency key; output and error: of an existing finished\n"
	    "                    run, else null; warning: the one above, else null; with\n"
	    "                    --wait: the result)\n" COMMON_HELP;
	cli_args a = {ENQUEUE_OPTS, {0}, {0}, 0};
	if (cli_parse("enqueue", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error("enqueue", EXIT_USAGE,
		                 "expected exactly one WORKFLOW (see --help)");
	/* Names, key, group, input and the ranges are the client's to check;
	 * here only what the command line alone knows: its own spellings. */
	char err[PARSE_ERR_MAX];
	cairn_enqueue_opts o = {0};
	const char *workflow = a.pos[0];
	o.key = cli_get(&a, "key");
	o.group = cli_get(&a, "group");
	o.concurrency_key = cli_get(&a, "concurrency-key");
	o.require_served = cli_has(&a, "require-served");
	o.traceparent = cli_get(&a, "traceparent");
	int64_t prio = 0;
	if (cli_has(&a, "priority") && parse_int(cli_get(&a, "priority"), -CAIRN_PRIORITY_MAX,
	                                         CAIRN_PRIORITY_MAX, &prio, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--priority: %s", err);
	o.priority = (int)prio;
	/* Checked as flags, not values: --delay 0 --at TIME is just as ambiguous. */
	if (cli_has(&a, "delay") && cli_has(&a, "at"))
		return cli_error("enqueue", EXIT_USAGE, "--delay and --at cannot be used together");
	if (cli_has(&a, "delay") && parse_duration_ms(cli_get(&a, "delay"), &o.delay_ms, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--delay: %s", err);
	if (cli_has(&a, "at") && parse_timestamp_ms(cli_get(&a, "at"), &o.at_unix_ms, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--at: %s", err);
	if (cli_has(&a, "max-attempts") &&
	    cli_count(cli_get(&a, "max-attempts"), &o.max_attempts, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--max-attempts: %s", err);
	int64_t timeout_ms = 30000;
	if (cli_has(&a, "timeout") &&
	    parse_duration_ms(cli_get(&a, "timeout"), &timeout_ms, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--timeout: %s", err);
	char *owned;
	if (cli_read_input("enqueue", cli_get(&a, "input"), &o.input, &owned))
		return EXIT_USAGE;
	const cli_field fields[] = {{"workflow", "WORKFLOW", NULL},
	                            {"key", "--key", NULL},
	                            {"group", "--group", NULL},
	                            {"input", "--input", NULL},
	                            {"delay_ms", "--delay", cli_get(&a, "delay")},
	                            {"at_unix_ms", "--at", cli_get(&a, "at")},
	                            {"max_attempts", "--max-attempts", NULL},
	                            {"concurrency_key", "--concurrency-key", NULL},
	                            {"priority", "--priority", NULL},
	                            {"traceparent", "--traceparent", NULL},
	                            {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("enqueue", &a, &c);
	if (code) {
		free(owned);
		return code;
	}
	cairn_enqueued res;
	int rc = cairn_enqueue(c, workflow, &o, &res);
	int json = cli_has(&a, "json");
	if (!rc && res.warning)
		fprintf(stderr, "cairn enqueue: warning: %s\n", res.warning);
	if (rc) {
		code = cli_fail("enqueue", c, rc, fields);
	} else if (cli_has(&a, "wait")) {
		if (res.existed)
			fprintf(stderr, "run %" PRId64 " already existed (status %s)\n", res.id,
			        res.status);
		int64_t last = res.id;
		/* A run that continued as new has finished only with its chain. */
		if (res.existed && cli_finished(res.status) &&
		    cairn_run_last(c, res.id, &last) == CAIRN_OK && last == res.id) {
			code = cli_print_outcome("enqueue", res.id, res.status, res.output,
			                         res.error, CLI_LOCK(&res), json);
		} else {
			rc = cairn_run_wait(c, res.id, timeout_ms);
			code = rc ? cli_fail("enqueue", c, rc, NULL)
			          : cli_print_result("enqueue", c, res.id, json);
		}
	} else if (json) {
		cJSON *d = cJSON_CreateObject();
		cJSON_AddNumberToObject(d, "id", (double)res.id);
		cJSON_AddBoolToObject(d, "existed", res.existed);
		cJSON_AddStringToObject(d, "status", res.status);
		cJSON_AddBoolToObject(d, "held", res.held);
		cli_json_add_raw(d, "output", res.output);
		if (res.error)
			cJSON_AddStringToObject(d, "error", res.error);
		else
			cJSON_AddNullToObject(d, "error");
		if (res.warning)
			cJSON_AddStringToObject(d, "warning", res.warning);
		else
			cJSON_AddNullToObject(d, "warning");
		cli_json_add_unreadable(d, CLI_LOCK(&res), NULL);
		cli_print_json(d);
	} else {
		char shown[CLI_SHOWN_MAX];
		printf("%" PRId64 "\n", res.id);
		if (res.existed && strcmp(res.status, "completed") == 0)
			fprintf(
			    stderr,
			    "run %" PRId64 " already existed for %s with this key: status "
			    "completed, output %s\n",
			    res.id, workflow,
			    res.output || (res.locked & CAIRN_LOCKED_OUTPUT)
			        ? cli_shown(res.output, CLI_LOCK(&res), CAIRN_LOCKED_OUTPUT, shown)
			        : "null");
		else if (res.existed && cli_finished(res.status))
			fprintf(
			    stderr,
			    "run %" PRId64 " already existed for %s with this key: status %s, "
			    "error: %s\n",
			    res.id, workflow, res.status,
			    res.error || (res.locked & CAIRN_LOCKED_ERROR)
			        ? cli_shown(res.error, CLI_LOCK(&res), CAIRN_LOCKED_ERROR, shown)
			        : "none recorded");
		else if (res.existed)
			fprintf(stderr,
			        "run %" PRId64 " already existed for %s with this key: status %s\n",
			        res.id, workflow, res.status);
	}
	cairn_enqueued_clear(&res);
	free(owned);
	cairn_client_free(c);
	return code;
}
