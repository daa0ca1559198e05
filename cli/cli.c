/*
 * cli.c - argument parsing and output helpers for the cairn commands:
 * long options (--name value or --name=value), errors that name the argument,
 * and exit codes mapped from cairn_status. The client API validates the
 * values and says which field it rejected; cli_fail maps that field back to
 * the command's argument.
 */
#include "cli.h"
#include "client.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parse.h"

int cli_error(const char *cmd, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "cairn %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return code;
}

int cli_parse(const char *cmd, int argc, char **argv, cli_args *a)
{
	int only_pos = 0;
	for (int i = 0; i < argc; i++) {
		const char *arg = argv[i];
		if (only_pos || arg[0] != '-' || strcmp(arg, "-") == 0) {
			if (a->npos == (int)(sizeof a->pos / sizeof a->pos[0]))
				return cli_error(cmd, EXIT_USAGE,
				                 "too many arguments (see cairn %s --help)", cmd);
			a->pos[a->npos++] = arg;
			continue;
		}
		if (strcmp(arg, "--") == 0) {
			only_pos = 1;
			continue;
		}
		if (strcmp(arg, "-h") == 0)
			arg = "--help";
		if (strncmp(arg, "--", 2) != 0)
			return cli_error(cmd, EXIT_USAGE,
			                 "unknown option \"%s\" (see cairn %s --help)", arg, cmd);
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const cli_opt *o = NULL;
		const char **value = NULL;
		for (int k = 0; k < CLI_OPTS_MAX && a->opts[k].name; k++)
			if (strlen(a->opts[k].name) == len &&
			    strncmp(a->opts[k].name, name, len) == 0) {
				o = &a->opts[k];
				value = &a->value[k];
			}
		if (!o)
			return cli_error(cmd, EXIT_USAGE,
			                 "unknown option \"%.*s\" (see cairn %s --help)",
			                 (int)len + 2, arg, cmd);
		if (!o->has_arg) {
			if (eq)
				return cli_error(cmd, EXIT_USAGE, "option --%s takes no value",
				                 o->name);
			*value = "";
		} else if (eq) {
			*value = eq + 1;
		} else if (i + 1 < argc) {
			*value = argv[++i];
		} else {
			return cli_error(cmd, EXIT_USAGE, "option --%s needs a value", o->name);
		}
	}
	return 0;
}

const char *cli_get(const cli_args *a, const char *name)
{
	for (int k = 0; k < CLI_OPTS_MAX && a->opts[k].name; k++)
		if (strcmp(a->opts[k].name, name) == 0)
			return a->value[k];
	return NULL;
}

int cli_has(const cli_args *a, const char *name)
{
	return cli_get(a, name) != NULL;
}

int cli_fail(const char *cmd, cairn_client *c, int rc, const cli_field *fields)
{
	int code = rc == CAIRN_EINVAL      ? EXIT_USAGE
	           : rc == CAIRN_ENOTFOUND ? EXIT_NOTFOUND
	           : rc == CAIRN_ETIMEOUT  ? EXIT_TIMEOUT
	                                   : EXIT_RUNTIME;
	const char *msg = c ? cairn_client_errmsg(c) : cairn_strstatus(rc);
	const char *field = rc == CAIRN_EINVAL ? cairn_client_errfield(c) : NULL;
	for (const cli_field *f = fields; field && f && f->field; f++) {
		if (strcmp(f->field, field) != 0)
			continue;
		if (f->text)
			return cli_error(cmd, code, "%s \"%s\": %s", f->arg, f->text, msg);
		return cli_error(cmd, code, "%s: %s", f->arg, msg);
	}
	return cli_error(cmd, code, "%s", msg);
}

int cli_count(const char *s, int *out, char *err)
{
	int64_t v;
	if (parse_int(s, 1, INT_MAX, &v, err) < 0) {
		snprintf(err, PARSE_ERR_MAX, "invalid number \"%s\": expected a positive integer",
		         s ? s : "");
		return -1;
	}
	*out = (int)v;
	return 0;
}

void cli_print_json(cJSON *doc)
{
	char *s = cJSON_Print(doc);
	if (s) {
		puts(s);
		free(s);
	}
	cJSON_Delete(doc);
}

const char *cli_time(int64_t ms, char out[32])
{
	if (ms == 0)
		return "-";
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
	return out;
}

void cli_json_add_raw(cJSON *obj, const char *key, const char *json_text)
{
	cJSON *v = json_text ? cJSON_Parse(json_text) : NULL;
	cJSON_AddItemToObject(obj, key, v ? v : cJSON_CreateNull());
}

int cli_open(const char *cmd, const cli_args *a, cairn_client **c)
{
	const char *maxs = getenv("CAIRN_MAX_PAYLOAD");
	size_t max = 0;
	char err[PARSE_ERR_MAX];
	if (maxs && parse_size_bytes(maxs, &max, err) < 0)
		return cli_error(cmd, EXIT_USAGE, "CAIRN_MAX_PAYLOAD: %s", err);
	int rc = cairn_client_open(cli_get(a, "db"), c);
	if (rc) {
		int code = cli_fail(cmd, *c, rc, NULL);
		cairn_client_free(*c);
		*c = NULL;
		return code;
	}
	if (maxs)
		cairn_client_set_max_payload(*c, max);
	/* `cairn migrate` refuses such a database itself. The settings read
	 * here serve the command's own calls too. */
	int applied = strcmp(cmd, "migrate") != 0 ? client_schema_version(*c) : 0;
	if (applied > migrate_newest_version())
		fprintf(stderr,
		        "cairn %s: warning: the database's schema is at migration %04d, newer than "
		        "this cairn, which knows migrations up to %04d\n",
		        cmd, applied, migrate_newest_version());
	if ((rc = cairn_client_keys_from_env(*c))) {
		int code = cli_error(cmd, EXIT_USAGE, "%s", cairn_client_errmsg(*c));
		cairn_client_free(*c);
		*c = NULL;
		return code;
	}
	return 0;
}

const char *cli_shown(const char *v, cli_lock l, unsigned bit, char *out)
{
	char why[CAIRN_UNREADABLE_MAX];
	if (!cairn_unreadable_why(l.locked, l.unauthentic, l.locked_key, l.unauthentic_key, bit,
	                          why, sizeof why, NULL))
		return v;
	snprintf(out, CLI_SHOWN_MAX, "unreadable: %s", why);
	return out;
}

void cli_json_add_unreadable(cJSON *obj, cli_lock l, const char *const names[3])
{
	client_json_unreadable(obj, l.locked, l.unauthentic, l.locked_key, l.unauthentic_key,
	                       names);
}
