/*
 * commands.h - the commands of cairn, as git's builtin.h is for builtin/:
 * each lives in a file of its own under cli/ (migrate.c, enqueue.c ...,
 * schedule.c and limit.c for those families, ui.c, complete.c for
 * `completion`), which defines its entry point and its table of options.
 * main.c's table CLI_CMDS registers them: main dispatches on it, `cairn
 * --help` lists it (and so the man page, scripts/man.sh), and `cairn
 * completion` turns it into bash and zsh completion. A new command is a new
 * file, its two declarations here and its row in that table.
 */
#ifndef CAIRN_COMMANDS_H
#define CAIRN_COMMANDS_H
#include <stddef.h>

#include "cli.h"

/* A command of cairn: its row in CLI_CMDS. */
typedef struct cli_cmd {
	const char *name;
	const char *summary;              /* its line in `cairn --help` */
	int (*fn)(int argc, char **argv); /* argv after the name; returns the exit code */
	const cli_opt *opts;              /* its options, which fn parses with */
	const char *const *subs;          /* its subcommands, ended by NULL; or NULL */
} cli_cmd;

/* Every command, in the order `cairn --help` lists them (main.c). */
extern const cli_cmd CLI_CMDS[];
extern const size_t CLI_NCMDS;

/* Each command's entry point and options, by file. cancel and retry share
 * CLI_RUN_ACTION_OPTS (cli.h). */
int cmd_migrate(int argc, char **argv); /* migrate.c */
extern const cli_opt MIGRATE_OPTS[];
int cmd_enqueue(int argc, char **argv); /* enqueue.c */
extern const cli_opt ENQUEUE_OPTS[];
int cmd_signal(int argc, char **argv); /* signal.c */
extern const cli_opt SIGNAL_OPTS[];
int cmd_signal_link(int argc, char **argv); /* signal_link.c */
extern const cli_opt SIGNAL_LINK_OPTS[];
int cmd_cancel(int argc, char **argv); /* cancel.c */
int cmd_retry(int argc, char **argv);  /* retry.c */
int cmd_status(int argc, char **argv); /* status.c */
extern const cli_opt STATUS_OPTS[];
int cmd_result(int argc, char **argv); /* result.c */
extern const cli_opt RESULT_OPTS[];
int cmd_event(int argc, char **argv); /* event.c */
extern const cli_opt EVENT_OPTS[];
int cmd_list(int argc, char **argv); /* list.c */
extern const cli_opt LIST_OPTS[];
int cmd_runners(int argc, char **argv); /* runners.c */
extern const cli_opt RUNNERS_OPTS[];
int cmd_shards(int argc, char **argv); /* shards.c */
extern const cli_opt SHARDS_OPTS[];
int cmd_workflows(int argc, char **argv); /* workflows.c */
extern const cli_opt WORKFLOWS_OPTS[];
int cmd_schedule(int argc, char **argv); /* schedule.c */
extern const cli_opt SCHEDULE_OPTS[];
extern const char *const SCHEDULE_SUBS[];
int cmd_limit(int argc, char **argv); /* limit.c */
extern const cli_opt LIMIT_OPTS[];
extern const char *const LIMIT_SUBS[];
int cmd_reencrypt(int argc, char **argv); /* reencrypt.c */
extern const cli_opt REENCRYPT_OPTS[];
int cmd_ui(int argc, char **argv); /* ui.c */
extern const cli_opt UI_OPTS[];
int cmd_completion(int argc, char **argv); /* complete.c */
extern const cli_opt COMPLETION_OPTS[];
extern const char *const COMPLETION_SUBS[];
#endif
