/*
 * reencrypt.c - `cairn reencrypt`: rewrites every stored payload that is
 * plaintext or under an older key under the current encryption key, batch by
 * batch, with a progress bar on a terminal, and says what it could not open
 * and why.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "commands.h"
#include "parse.h"

/* Adds name: the items of list (separated by sep) as an array of strings. */
static void add_list(cJSON *o, const char *name, const char *list, const char *sep)
{
	cJSON *a = cJSON_AddArrayToObject(o, name);
	for (const char *p = list; *p;) {
		const char *end = strstr(p, sep);
		size_t n = end ? (size_t)(end - p) : strlen(p);
		cJSON *item = cJSON_CreateString("");
		if (item && n) {
			char *v = strndup(p, n);
			if (v)
				cJSON_SetValuestring(item, v);
			free(v);
		}
		cJSON_AddItemToArray(a, item);
		p += n + (end ? strlen(sep) : 0);
	}
}

/* The progress bar, redrawn on stderr after every batch (only on a terminal). */
static void show_progress(const cairn_reencrypt_stats *s, void *arg)
{
	(void)arg;
	int64_t total = s->rows_total > s->rows_done ? s->rows_total : s->rows_done;
	int width = 30, filled = total ? (int)(s->rows_done * width / total) : width;
	fprintf(stderr, "\r[%.*s%*s] %3d%% %" PRId64 "/%" PRId64 " rows", filled,
	        "##############################", width - filled, "",
	        total ? (int)(s->rows_done * 100 / total) : 100, s->rows_done, total);
	fflush(stderr);
}

const cli_opt REENCRYPT_OPTS[] = {{"batch", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cmd_reencrypt(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn reencrypt [--batch N] [--json]\n"
	    "\n"
	    "Rewrites every stored payload (run inputs, outputs and errors, step results\n"
	    "and errors, signal payloads, event values, schedule inputs) that is\n"
	    "plaintext or encrypted with an older key under the current key: the first\n"
	    "of CAIRN_ENCRYPTION_KEYS (or of the file CAIRN_ENCRYPTION_KEYS_FILE names).\n"
	    "Keep the older keys listed after it until this reports nothing left under\n"
	    "them. Workers may run meanwhile: a value one writes during the pass is never\n"
	    "overwritten. A progress bar is drawn on a terminal. Exits 1 when values were\n"
	    "left: under keys it does not have (add them), or under keys it has but not\n"
	    "authenticating (other key bytes, or altered): each kind is counted and named\n"
	    "apart, with what to do.\n"
	    "\n"
	    "  --batch N         rows per transaction (1-100000; default 500)\n"
	    "  --json            print the counts as JSON\n" COMMON_HELP;
	cli_args a = {REENCRYPT_OPTS, {0}, {0}, 0};
	if (cli_parse("reencrypt", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("reencrypt", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	int batch = 0;
	char err[PARSE_ERR_MAX];
	if (cli_has(&a, "batch") && cli_count(cli_get(&a, "batch"), &batch, err) < 0)
		return cli_error("reencrypt", EXIT_USAGE, "--batch: %s", err);
	cairn_client *c;
	int code = cli_open("reencrypt", &a, &c);
	if (code)
		return code;
	cairn_reencrypt_stats s;
	int tty = isatty(STDERR_FILENO);
	int rc = cairn_reencrypt(c, batch, tty ? show_progress : NULL, NULL, &s);
	if (tty && s.rows_done)
		fputs("\n", stderr);
	const cli_field fields[] = {{"batch", "--batch", NULL},
	                            {"keys", "CAIRN_ENCRYPTION_KEYS", NULL},
	                            {NULL, NULL, NULL}};
	if (rc) {
		code = cli_fail("reencrypt", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "rows", (double)s.rows_done);
		cJSON_AddNumberToObject(o, "rewritten", (double)s.rewritten);
		cJSON_AddNumberToObject(o, "current", (double)s.current);
		cJSON_AddNumberToObject(o, "missing_key", (double)s.missing_key);
		cJSON_AddNumberToObject(o, "unreadable", (double)s.unreadable);
		cJSON_AddNumberToObject(o, "changed_rows", (double)s.changed);
		add_list(o, "missing_keys", s.missing_keys, ",");
		add_list(o, "unreadable_keys", s.unreadable_keys, ",");
		add_list(o, "unreadable_values", s.unreadable_at, ", ");
		cli_print_json(o);
	} else {
		printf("%" PRId64 " rows: %" PRId64 " values re-encrypted, %" PRId64
		       " already under the current key, %" PRId64
		       " under keys not configured%s%s%s, %" PRId64
		       " that do not authenticate%s%s%s; %" PRId64 " rows changed meanwhile\n",
		       s.rows_done, s.rewritten, s.current, s.missing_key,
		       *s.missing_keys ? " (" : "", s.missing_keys, *s.missing_keys ? ")" : "",
		       s.unreadable, *s.unreadable_keys ? " (under " : "", s.unreadable_keys,
		       *s.unreadable_keys ? ")" : "", s.changed);
	}
	if (!rc && s.missing_key)
		code = cli_error(
		    "reencrypt", EXIT_RUNTIME,
		    "%" PRId64 " %s under keys that are not configured (%s): add them to "
		    "CAIRN_ENCRYPTION_KEYS (after the current one) and run it again; "
		    "those values are left as they are",
		    s.missing_key, s.missing_key == 1 ? "value is" : "values are", s.missing_keys);
	if (!rc && s.unreadable)
		code = cli_error(
		    "reencrypt", EXIT_RUNTIME,
		    "%" PRId64
		    " %s not authenticate under keys that are configured (%s): %s. Either "
		    "a key's bytes differ from the ones they were written with (check that each of "
		    "those ids holds the same bytes as where the values were written: an id must "
		    "never be reused for another key), or they were altered in the database "
		    "(restore them from a backup). Those values are left as they are; `cairn "
		    "status` shows their runs with the field unreadable",
		    s.unreadable, s.unreadable == 1 ? "value does" : "values do",
		    *s.unreadable_keys ? s.unreadable_keys : "none named: malformed",
		    s.unreadable_at);
	if (!rc && s.changed && !s.missing_key && !s.unreadable)
		fprintf(stderr,
		        "%" PRId64 " rows were written by a worker during the pass: run it again "
		        "to check them\n",
		        s.changed);
	cairn_client_free(c);
	return code;
}
