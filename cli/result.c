/*
 * result.c - `cairn result`: prints a run's output (exit 0) or its error
 * (exit 1), or says it has not finished (exit 4); --wait waits for it to
 * finish. A run that continued as new is followed to the last run of its
 * chain.
 */
#include <stdio.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

const cli_opt RESULT_OPTS[] = {{"wait", 0}, {"timeout", 1}, {"json", 0},
                               {"db", 1},   {"help", 0},    {NULL, 0}};

int cmd_result(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn result RUN [--wait] [--timeout DURATION] [--json]\n"
	    "\n"
	    "Prints the output JSON of a completed RUN (exit 0); for a failed or\n"
	    "cancelled run prints its error (exit 1). A run that has not finished\n"
	    "exits 4, at once or, with --wait, after the timeout. A run that\n"
	    "continued as new is followed to the last run of its chain: its outcome\n"
	    "is printed (--json: its id), and waited for.\n"
	    "\n"
	    "  --wait            wait until the run finishes\n"
	    "  --timeout D       with --wait: give up after D (default 30s)\n"
	    "  --json            print {\"id\", \"status\", \"output\", \"error\"}\n" COMMON_HELP;
	cli_args a = {RESULT_OPTS, {0}, {0}, 0};
	if (cli_parse("result", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error("result", EXIT_USAGE, "expected exactly one RUN (see --help)");
	char err[PARSE_ERR_MAX];
	int64_t timeout_ms = 30000;
	if (cli_has(&a, "timeout") &&
	    parse_duration_ms(cli_get(&a, "timeout"), &timeout_ms, err) < 0)
		return cli_error("result", EXIT_USAGE, "--timeout: %s", err);
	cairn_client *c;
	int64_t id;
	int code = cli_open_run("result", &a, &c, &id);
	if (code)
		return code;
	int rc = cli_has(&a, "wait") ? cairn_run_wait(c, id, timeout_ms) : CAIRN_OK;
	code = rc ? cli_fail("result", c, rc, NULL)
	          : cli_print_result("result", c, id, cli_has(&a, "json"));
	cairn_client_free(c);
	return code;
}
