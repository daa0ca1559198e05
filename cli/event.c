/*
 * event.c - `cairn event`: prints the latest JSON value a run published
 * under a key (cairn_set_event); --wait waits for one, or for a change of
 * it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

const cli_opt EVENT_OPTS[] = {{"wait", 0}, {"timeout", 1}, {"changed-from", 1},
                              {"json", 0}, {"db", 1},      {"help", 0},
                              {NULL, 0}};

int cmd_event(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn event RUN KEY [--wait] [--timeout D] [--changed-from JSON] [--json]\n"
	    "\n"
	    "Prints the JSON value RUN published under KEY (cairn_set_event): the\n"
	    "latest one. Without one yet, exits 3, or with --wait waits for it (woken\n"
	    "by notification) and exits 4 after the timeout.\n"
	    "\n"
	    "  --wait            wait until the run publishes the event\n"
	    "  --timeout D       with --wait: give up after D (default 30s)\n"
	    "  --changed-from J  with --wait: wait for a value other than J (to follow\n"
	    "                    progress: pass the value printed last)\n"
	    "  --json            print {\"run\", \"key\", \"value\"}\n" COMMON_HELP;
	cli_args a = {EVENT_OPTS, {0}, {0}, 0};
	if (cli_parse("event", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 2)
		return cli_error("event", EXIT_USAGE, "expected RUN and KEY (see --help)");
	char err[PARSE_ERR_MAX];
	int64_t timeout_ms = 30000;
	if (cli_has(&a, "timeout") &&
	    parse_duration_ms(cli_get(&a, "timeout"), &timeout_ms, err) < 0)
		return cli_error("event", EXIT_USAGE, "--timeout: %s", err);
	cairn_client *c;
	int64_t id;
	int code = cli_open_run("event", &a, &c, &id);
	if (code)
		return code;
	char *value;
	int rc = cairn_event_get(c, id, a.pos[1], cli_has(&a, "wait") ? timeout_ms : 0,
	                         cli_get(&a, "changed-from"), &value);
	const cli_field fields[] = {
	    {"key", "KEY", NULL}, {"changed_from", "--changed-from", NULL}, {NULL, NULL, NULL}};
	if (rc) {
		code = cli_fail("event", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "run", (double)id);
		cJSON_AddStringToObject(o, "key", a.pos[1]);
		cli_json_add_raw(o, "value", value);
		cli_print_json(o);
	} else {
		printf("%s\n", value);
	}
	free(value);
	cairn_client_free(c);
	return code;
}
