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

/* A command of cairn. One table of them (main.c) is what main dispatches
 * on, what `cairn --help` lists and what `cairn completion` completes. */
typedef struct cli_cmd {
	const char *name;
	const char *summary; /* its line in `cairn --help` */
	int (*fn)(int argc, char **argv);
	const cli_opt *opts;
	const char *const *subs; /* its subcommands, ended by NULL; or NULL */
} cli_cmd;

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
/* Prints the completion script of shell ("bash" or "zsh") for the n
 * commands of cmds on stdout: 0, or -1 for a shell it does not know
 * (complete.c). */
int cli_completion(const char *shell, const cli_cmd *cmds, size_t n);
#endif
