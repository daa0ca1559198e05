/* cli.h - option parsing and output helpers shared by the cairn commands. */
#ifndef CAIRN_CLI_H
#define CAIRN_CLI_H
#include <cjson/cJSON.h>
#include <stdint.h>

#include "cairn.h"

#define COMMON_HELP                                                                                \
	"  --db URL          database (default: $DATABASE_URL)\n"                                  \
	"  -h, --help        show this help\n"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_NOTFOUND = 3, EXIT_TIMEOUT = 4 };

/* One option of a command: its name without the leading "--", and whether
 * it takes a value. Each command has one table of them, ended by {NULL}:
 * the parser, `cairn completion` and the test that compares them with the
 * command's --help all read it. */
typedef struct cli_opt {
	const char *name;
	int has_arg;
} cli_opt;

#define CLI_OPTS_MAX 16

typedef struct cli_args {
	const cli_opt *opts;             /* the command's table */
	const char *value[CLI_OPTS_MAX]; /* by index in opts: set by cli_parse to the
	                                  * argument, or "" for a flag; NULL if absent */
	const char *pos[8];
	int npos;
} cli_args;

/* Parses argv (after the command name). Returns 0, or EXIT_USAGE after printing why. */
int cli_parse(const char *cmd, int argc, char **argv, cli_args *a);
const char *cli_get(const cli_args *a, const char *name);
int cli_has(const cli_args *a, const char *name);
/* Prints "cairn CMD: msg" to stderr and returns code. */
int cli_error(const char *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Which command-line argument carries a client API field: field as
 * cairn_client_errfield() spells it ("key"), arg as the user knows it
 * ("--key", "WORKFLOW") and, when the command converted the argument's text
 * before handing it over (a duration, a time), that text so the error can
 * show it; else NULL. Tables end with {NULL}.
 */
typedef struct cli_field {
	const char *field, *arg, *text;
} cli_field;

/*
 * Maps a cairn status to an exit code, printing the client's message. For
 * CAIRN_EINVAL (exit 2) the message is prefixed with the argument that
 * fields (may be NULL) maps the client's error field to.
 */
int cli_fail(const char *cmd, cairn_client *c, int rc, const cli_field *fields);
/* A positive decimal integer that fits in an int: 0, or -1 with a message
 * naming s and what is accepted in err (PARSE_ERR_MAX bytes). The client
 * checks each option's upper bound. */
int cli_count(const char *s, int *out, char *err);
/* Prints a JSON document on stdout and frees it. */
void cli_print_json(cJSON *doc);
/* Formats unix ms as RFC 3339 UTC into out (at least 32 bytes); "-" for 0. */
const char *cli_time(int64_t ms, char out[32]);
/* An age for a table: 350ms, 4.2s, 3m12s, 2h5m. */
const char *cli_age(int64_t ms, char out[32]);
/* Adds text JSON as a value (or null) under key. */
void cli_json_add_raw(cJSON *obj, const char *key, const char *json_text);
/* What of a record (cairn.h: cairn_run, cairn_step_info ...) did not
 * open: its locked and unauthentic bits and their keys. */
typedef struct cli_lock {
	unsigned locked, unauthentic;
	const char *locked_key, *unauthentic_key;
} cli_lock;
#define CLI_LOCK(rec)                                                                              \
	((cli_lock){(rec)->locked, (rec)->unauthentic, (rec)->locked_key, (rec)->unauthentic_key})
/* The field of bit as text: v, or "unreadable: " and why when it did not
 * open (its key is not configured, or it does not authenticate under it).
 * out: CLI_SHOWN_MAX bytes. */
#define CLI_SHOWN_MAX (CAIRN_UNREADABLE_MAX + 16)
const char *cli_shown(const char *v, cli_lock l, unsigned bit, char *out);
/* For --json: the fields that did not open are null in the document, and
 * "unreadable" says which and why (client_json_unreadable; names as there). */
void cli_json_add_unreadable(cJSON *obj, cli_lock l, const char *const names[3]);
/* Opens the client from --db / $DATABASE_URL, $CAIRN_MAX_PAYLOAD and the
 * encryption keys ($CAIRN_ENCRYPTION_KEYS or $CAIRN_ENCRYPTION_KEYS_FILE). */
int cli_open(const char *cmd, const cli_args *a, cairn_client **c);

/* Shared by several commands. */

/* The index in subs (ended by NULL) of the subcommand a->pos[0]; or -1
 * after printing that it is missing or unknown and which are expected. */
int cli_sub(const char *cmd, const cli_args *a, const char *const *subs);

/* Reads --input's text: the JSON as given, or the contents of the file that
 * @FILE names. *owned is set when the text was read (the caller frees it).
 * 0, or EXIT_USAGE after printing why. */
int cli_read_input(const char *cmd, const char *arg, const char **text, char **owned);
/* Whether a run's status is final: completed, failed or cancelled. */
int cli_finished(const char *status);
/* Opens the client (cli_open) and resolves the RUN argument (a->pos[0], an
 * id or WORKFLOW/KEY) into *id. 0, or the exit code after printing why; on
 * failure *c is NULL. */
int cli_open_run(const char *cmd, const cli_args *a, cairn_client **c, int64_t *id);
/* A run as the JSON object `cairn status` and `cairn list` print. */
cJSON *cli_run_json(const cairn_run *r);
/* Prints a run's outcome: a completed run's output (exit 0), a failed or
 * cancelled run's error (exit 1), or that it has not finished (exit 4);
 * with json, as {"id", "status", "output", "error"}. */
int cli_print_outcome(const char *cmd, int64_t id, const char *status, const char *output,
                      const char *error, cli_lock l, int json);
/* Loads the run and prints its outcome (cli_print_outcome). */
int cli_print_result(const char *cmd, cairn_client *c, int64_t id, int json);

/* A command that acts on one run, cancel and retry: its options and their
 * help, and its body. fn acts on the run and puts its status after into
 * status (CLIENT_OUTCOME_MAX bytes); done is what the text output says. */
extern const cli_opt CLI_RUN_ACTION_OPTS[];
#define CLI_RUN_ACTION_HELP                                                                        \
	"  --json            print {\"id\", \"status\"}: the run's status right after\n"           \
	"                    the command\n" COMMON_HELP
int cli_run_action(int argc, char **argv, const char *cmd, const char *help,
                   int (*fn)(cairn_client *, int64_t, char *), const char *done);
#endif
