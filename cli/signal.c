/*
 * signal.c - `cairn signal`: sends a named signal with a JSON payload to a
 * run; the run takes it when it awaits that name, at once if it is waiting
 * for it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cairn.h"
#include "client.h"
#include "commands.h"

const cli_opt SIGNAL_OPTS[] = {{"input", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cmd_signal(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn signal RUN NAME [--input JSON | --input @FILE] [--json]\n"
	    "\n"
	    "Sends signal NAME to RUN. The signal is buffered until the run awaits it.\n"
	    "\n"
	    "  --input JSON      the signal's payload as JSON text, or @FILE (default "
	    "null)\n"
	    "  --json            print {\"id\", \"signal\", \"delivered\"}: delivered is true\n"
	    "                    when the run was waiting for NAME (it is woken to take\n"
	    "                    it), false when the signal is buffered until it awaits\n"
	    "                    NAME\n" COMMON_HELP;
	cli_args a = {SIGNAL_OPTS, {0}, {0}, 0};
	if (cli_parse("signal", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 2)
		return cli_error("signal", EXIT_USAGE, "expected RUN and NAME (see --help)");
	const char *payload;
	char *owned;
	if (cli_read_input("signal", cli_get(&a, "input"), &payload, &owned))
		return EXIT_USAGE;
	cairn_client *c;
	int64_t id;
	int code = cli_open_run("signal", &a, &c, &id);
	if (!code) {
		static const cli_field fields[] = {
		    {"signal", "NAME", NULL}, {"payload", "--input", NULL}, {NULL, NULL, NULL}};
		int delivered;
		int rc = client_signal_outcome(c, id, a.pos[1], payload, &delivered);
		if (rc) {
			code = cli_fail("signal", c, rc, fields);
		} else if (cli_has(&a, "json")) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "id", (double)id);
			cJSON_AddStringToObject(o, "signal", a.pos[1]);
			cJSON_AddBoolToObject(o, "delivered", delivered);
			cli_print_json(o);
		} else {
			printf("signal %s sent to run %" PRId64 "\n", a.pos[1], id);
		}
	}
	free(owned);
	cairn_client_free(c);
	return code;
}
