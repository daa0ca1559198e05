/*
 * cli.c - what the cairn commands share: argument parsing (long options,
 * --name value or --name=value), errors that name the argument, exit codes
 * mapped from cairn_status, output (JSON, times, values that did not open),
 * and the pieces several commands are made of: --input @FILE, resolving a
 * RUN, a run's JSON and outcome, and the body of cancel and retry. The
 * client API validates the values and says which field it rejected;
 * cli_fail maps that field back to the command's argument. Each command is
 * in a file of its own (commands.h).
 */
#include "cli.h"
#include "client.h"

#include <inttypes.h>
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

const char *cli_age(int64_t ms, char out[32])
{
	if (ms < 1000)
		snprintf(out, 32, "%" PRId64 "ms", ms);
	else if (ms < 60000)
		snprintf(out, 32, "%" PRId64 ".%" PRId64 "s", ms / 1000, ms % 1000 / 100);
	else if (ms < 3600000)
		snprintf(out, 32, "%" PRId64 "m%" PRId64 "s", ms / 60000, ms % 60000 / 1000);
	else
		snprintf(out, 32, "%" PRId64 "h%" PRId64 "m", ms / 3600000, ms % 3600000 / 60000);
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

/* ------------------------------------------ shared by several commands */

int cli_sub(const char *cmd, const cli_args *a, const char *const *subs)
{
	size_t n = 0;
	for (; subs[n]; n++)
		if (a->npos && strcmp(a->pos[0], subs[n]) == 0)
			return (int)n;
	/* "set, list or delete" */
	char expected[256] = "";
	for (size_t i = 0, len = 0; i < n && len < sizeof expected; i++) {
		const char *sep = i == 0 ? "" : i + 1 < n ? ", " : " or ";
		len +=
		    (size_t)snprintf(expected + len, sizeof expected - len, "%s%s", sep, subs[i]);
	}
	cli_error(cmd, EXIT_USAGE, "%s%s%s: expected %s (see --help)",
	          a->npos ? "unknown subcommand \"" : "missing subcommand",
	          a->npos ? a->pos[0] : "", a->npos ? "\"" : "", expected);
	return -1;
}

int cli_read_input(const char *cmd, const char *arg, const char **text, char **owned)
{
	*owned = NULL;
	*text = arg;
	if (!arg || arg[0] != '@')
		return 0;
	FILE *f = fopen(arg + 1, "rb");
	if (!f)
		return cli_error(cmd, EXIT_USAGE, "--input: cannot read file \"%s\"", arg + 1);
	size_t cap = 4096, len = 0;
	char *s = malloc(cap);
	size_t r;
	while (s && (r = fread(s + len, 1, cap - len - 1, f)) > 0) {
		len += r;
		if (len + 1 == cap) {
			char *g = cap > (64u << 20) ? NULL : realloc(s, cap *= 2);
			if (!g)
				free(s);
			s = g;
		}
	}
	fclose(f);
	if (!s)
		return cli_error(cmd, EXIT_USAGE, "--input: file \"%s\" is too large", arg + 1);
	s[len] = '\0';
	if (strlen(s) != len) {
		free(s);
		return cli_error(cmd, EXIT_USAGE, "--input: file \"%s\" contains a NUL byte",
		                 arg + 1);
	}
	*text = *owned = s;
	return 0;
}

int cli_finished(const char *status)
{
	return strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
	       strcmp(status, "cancelled") == 0;
}

static const cli_field RUN_FIELDS[] = {{"run", "RUN", NULL}, {NULL, NULL, NULL}};

int cli_open_run(const char *cmd, const cli_args *a, cairn_client **c, int64_t *id)
{
	int code = cli_open(cmd, a, c);
	if (code)
		return code;
	int rc = cairn_run_resolve(*c, a->pos[0], id);
	if (rc) {
		code = cli_fail(cmd, *c, rc, RUN_FIELDS);
		cairn_client_free(*c);
		*c = NULL;
	}
	return code;
}

const cli_opt CLI_RUN_ACTION_OPTS[] = {{"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cli_run_action(int argc, char **argv, const char *cmd, const char *help,
                   int (*fn)(cairn_client *, int64_t, char *), const char *done)
{
	cli_args a = {CLI_RUN_ACTION_OPTS, {0}, {0}, 0};
	if (cli_parse(cmd, argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error(cmd, EXIT_USAGE, "expected exactly one RUN (see --help)");
	cairn_client *c;
	int64_t id;
	int code = cli_open_run(cmd, &a, &c, &id);
	if (!code) {
		char status[CLIENT_OUTCOME_MAX] = "";
		int rc = fn(c, id, status);
		if (rc) {
			code = cli_fail(cmd, c, rc, NULL);
		} else if (cli_has(&a, "json")) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "id", (double)id);
			cJSON_AddStringToObject(o, "status", status);
			cli_print_json(o);
		} else {
			printf("run %" PRId64 " %s\n", id, done);
		}
	}
	cairn_client_free(c);
	return code;
}

cJSON *cli_run_json(const cairn_run *r)
{
	char t[32];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)r->id);
	cJSON_AddStringToObject(o, "workflow", r->workflow);
	cJSON_AddStringToObject(o, "key", r->key);
	cJSON_AddStringToObject(o, "group", r->group);
	cJSON_AddNumberToObject(o, "shard", r->shard);
	cJSON_AddStringToObject(o, "status", r->status);
	cJSON_AddNumberToObject(o, "attempt", r->attempt);
	cJSON_AddNumberToObject(o, "max_attempts", r->max_attempts);
	cJSON_AddBoolToObject(o, "cancel_requested", r->cancel_requested);
	if (r->concurrency_key)
		cJSON_AddStringToObject(o, "concurrency_key", r->concurrency_key);
	else
		cJSON_AddNullToObject(o, "concurrency_key");
	cJSON_AddNumberToObject(o, "priority", r->priority);
	cJSON_AddBoolToObject(o, "held", r->held);
	if (r->waiting_for)
		cJSON_AddStringToObject(o, "waiting_for", r->waiting_for);
	cli_json_add_raw(o, "input", r->input);
	cli_json_add_raw(o, "output", r->output);
	if (r->error)
		cJSON_AddStringToObject(o, "error", r->error);
	else
		cJSON_AddNullToObject(o, "error");
	cli_json_add_unreadable(o, CLI_LOCK(r), NULL);
	if (r->code_version)
		cJSON_AddStringToObject(o, "code_version", r->code_version);
	else
		cJSON_AddNullToObject(o, "code_version");
	const struct {
		const char *k;
		int64_t v;
	} times[] = {{"created_at", r->created_unix_ms},
	             {"scheduled_at", r->scheduled_unix_ms},
	             {"started_at", r->started_unix_ms},
	             {"updated_at", r->updated_unix_ms},
	             {"finished_at", r->finished_unix_ms}};
	for (size_t i = 0; i < sizeof times / sizeof *times; i++) {
		if (times[i].v)
			cJSON_AddStringToObject(o, times[i].k, cli_time(times[i].v, t));
		else
			cJSON_AddNullToObject(o, times[i].k);
	}
	return o;
}

int cli_print_outcome(const char *cmd, int64_t id, const char *status, const char *output,
                      const char *error, cli_lock l, int json)
{
	int done = cli_finished(status), ok = strcmp(status, "completed") == 0;
	char shown[CLI_SHOWN_MAX];
	if (json) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "id", (double)id);
		cJSON_AddStringToObject(o, "status", status);
		cli_json_add_raw(o, "output", output);
		if (error)
			cJSON_AddStringToObject(o, "error", error);
		else
			cJSON_AddNullToObject(o, "error");
		cli_json_add_unreadable(o, l, NULL);
		cli_print_json(o);
	} else if (ok && !(l.locked & CAIRN_LOCKED_OUTPUT)) {
		printf("%s\n", output ? output : "null");
	}
	if (!done)
		return cli_error(cmd, EXIT_TIMEOUT, "run %" PRId64 " has not finished: it is %s",
		                 id, status);
	if (ok && (l.locked & CAIRN_LOCKED_OUTPUT))
		return cli_error(cmd, EXIT_RUNTIME, "run %" PRId64 " completed; its output is %s",
		                 id, cli_shown(output, l, CAIRN_LOCKED_OUTPUT, shown));
	if (!ok)
		return cli_error(cmd, EXIT_RUNTIME, "run %" PRId64 " %s: %s", id, status,
		                 error || (l.locked & CAIRN_LOCKED_ERROR)
		                     ? cli_shown(error, l, CAIRN_LOCKED_ERROR, shown)
		                     : "no error recorded");
	return EXIT_OK;
}

int cli_print_result(const char *cmd, cairn_client *c, int64_t id, int json)
{
	cairn_run *r;
	/* A run that continued as new: the result is its chain's. */
	int rc = cairn_run_last(c, id, &id);
	if (!rc)
		rc = cairn_run_get(c, id, &r);
	if (rc)
		return cli_fail(cmd, c, rc, NULL);
	int code = cli_print_outcome(cmd, id, r->status, r->output, r->error, CLI_LOCK(r), json);
	cairn_run_free(r);
	return code;
}
