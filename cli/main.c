/*
 * main.c - the cairn command: its table of commands and main, which
 * dispatches on it (as git.c's commands[] and builtin/). Each command lives
 * in a file of its own (commands.h lists them); the option parsing and
 * output helpers they share are in cli.c. A command parses its arguments,
 * then makes one or two calls of the public client API (include/cairn.h),
 * which validates the values; a rejected value comes back with the name of
 * its field, which the command maps to its own argument (cli_field tables).
 * Nothing under cli/ talks SQL.
 */
#include <stdio.h>
#include <string.h>

#include "cairn.h"
#include "commands.h"

/* `cairn --help`: this, one line per command of CLI_CMDS (below), then USAGE_TAIL. */
static const char USAGE_HEAD[] = "usage: cairn [--version] [--help] COMMAND [ARGS]\n"
                                 "\n"
                                 "cairn is a durable workflow engine on PostgreSQL. Commands:\n";
static const char USAGE_TAIL[] =
    "\n"
    "RUN is a numeric id or WORKFLOW/KEY. Every command takes --db URL (default\n"
    "$DATABASE_URL); read commands take --json, and so do migrate, signal, cancel\n"
    "and retry. `cairn COMMAND --help` for details.\n"
    "\n"
    "Exit codes: 0 success, 1 runtime error, 2 usage error, 3 not found, 4 timeout.\n"
    "Environment: DATABASE_URL, CAIRN_MAX_PAYLOAD (largest input or payload,\n"
    "default 1MiB), CAIRN_ENCRYPTION_KEYS or CAIRN_ENCRYPTION_KEYS_FILE (keys that\n"
    "encrypt inputs and payloads and decrypt what is read: ID=BASE64,...).\n";

/* Every command, in the order `cairn --help` lists them. */
const cli_cmd CLI_CMDS[] = {
    {"migrate", "apply the database schema (--status lists migrations)", cmd_migrate, MIGRATE_OPTS,
     NULL},
    {"enqueue", "start a run of a workflow", cmd_enqueue, ENQUEUE_OPTS, NULL},
    {"signal", "send a signal to a run", cmd_signal, SIGNAL_OPTS, NULL},
    {"signal-link", "print a signed URL that sends a signal to a run when POSTed", cmd_signal_link,
     SIGNAL_LINK_OPTS, NULL},
    {"cancel", "cancel a run", cmd_cancel, CLI_RUN_ACTION_OPTS, NULL},
    {"retry", "re-drive a failed or cancelled run", cmd_retry, CLI_RUN_ACTION_OPTS, NULL},
    {"status", "show a run and its journal", cmd_status, STATUS_OPTS, NULL},
    {"result", "print a run's output (--wait to wait for it)", cmd_result, RESULT_OPTS, NULL},
    {"event", "print an event a run published (--wait to wait for it)", cmd_event, EVENT_OPTS,
     NULL},
    {"list", "list runs", cmd_list, LIST_OPTS, NULL},
    {"runners", "list the registered runners and whether they are live", cmd_runners, RUNNERS_OPTS,
     NULL},
    {"shards", "show the owner and epoch of each shard", cmd_shards, SHARDS_OPTS, NULL},
    {"workflows", "list the workflows, the groups and runners that serve them", cmd_workflows,
     WORKFLOWS_OPTS, NULL},
    {"schedule", "create, list, pause, resume and delete cron schedules", cmd_schedule,
     SCHEDULE_OPTS, SCHEDULE_SUBS},
    {"limit", "flow control: per-key concurrency and rate limits of a workflow", cmd_limit,
     LIMIT_OPTS, LIMIT_SUBS},
    {"reencrypt", "move every stored payload to the current encryption key", cmd_reencrypt,
     REENCRYPT_OPTS, NULL},
    {"ui", "serve the operator console (a web page and a JSON API)", cmd_ui, UI_OPTS, NULL},
    {"completion", "print the bash or zsh completion script", cmd_completion, COMPLETION_OPTS,
     COMPLETION_SUBS},
};
const size_t CLI_NCMDS = sizeof CLI_CMDS / sizeof *CLI_CMDS;

static void print_usage(FILE *f)
{
	fputs(USAGE_HEAD, f);
	for (size_t i = 0; i < CLI_NCMDS; i++)
		fprintf(f, "  %-12s %s\n", CLI_CMDS[i].name, CLI_CMDS[i].summary);
	fputs(USAGE_TAIL, f);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		print_usage(stdout);
		return EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("cairn %s\n", CAIRN_VERSION);
		return EXIT_OK;
	}
	for (size_t i = 0; i < CLI_NCMDS; i++)
		if (strcmp(argv[1], CLI_CMDS[i].name) == 0)
			return CLI_CMDS[i].fn(argc - 2, argv + 2);
	fprintf(stderr, "cairn: unknown command \"%s\"; expected one of ", argv[1]);
	for (size_t i = 0; i < CLI_NCMDS; i++)
		fprintf(stderr, "%s%s", i ? ", " : "", CLI_CMDS[i].name);
	fputs(" (see cairn --help)\n", stderr);
	return EXIT_USAGE;
}
