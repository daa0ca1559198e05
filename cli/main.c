/*
 * main.c - the cairn command: migrate the schema, enqueue runs, send signals,
 * cancel, retry, inspect and wait for results, and show runners and shards.
 * Each command parses its arguments (flags, durations, times, @FILE input),
 * then makes one or two calls of the public client API (include/cairn.h),
 * which validates the values; a rejected value comes back with the name of
 * its field, which each command maps to its own argument (cli_field tables).
 * Nothing here talks SQL.
 */
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "cli.h"
#include "client.h"
#include "link.h"
#include "parse.h"
#include "state.h"
#include "ui.h"

/* `cairn --help`: this, one line per command of CMDS (at the end of the
 * file), then USAGE_TAIL. */
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

/* --------------------------------------------------------------- migrate */

static const cli_opt MIGRATE_OPTS[] = {{"status", 0}, {"dir", 1},  {"shards", 1}, {"json", 0},
                                       {"db", 1},     {"help", 0}, {NULL, 0}};

static int cmd_migrate(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn migrate [--status] [--dir DIR] [--shards N] [--json]\n"
	    "\n"
	    "Applies the pending migrations in order, each in its own transaction.\n"
	    "Concurrent migrators are serialized; running it again is a no-op. An\n"
	    "applied migration whose file changed since is refused.\n"
	    "\n"
	    "  --status          list applied and pending migrations; change nothing\n"
	    "  --dir DIR         read NNNN_name.sql files from DIR instead of the ones\n"
	    "                    built into cairn\n"
	    "  --shards N        shards per group (1-65536; default 4096), recorded on\n"
	    "                    a fresh database; must match the recorded value after\n"
	    "  --json            print {\"applied\": [versions this run applied],\n"
	    "                    \"version_before\", \"version_after\"} (the newest applied\n"
	    "                    migration before and after; 0: none); with --status,\n"
	    "                    an array of {\"version\", \"name\", \"checksum\",\n"
	    "                    \"applied\", \"applied_at\", \"changed\"}\n" COMMON_HELP;
	cli_args a = {MIGRATE_OPTS, {0}, {0}, 0};
	if (cli_parse("migrate", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("migrate", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	int64_t shards = 0;
	char err[PARSE_ERR_MAX];
	if (cli_has(&a, "shards") && parse_int(cli_get(&a, "shards"), 1, 65536, &shards, err) < 0)
		return cli_error("migrate", EXIT_USAGE, "--shards: %s", err);
	cairn_client *c;
	int code = cli_open("migrate", &a, &c);
	if (code)
		return code;
	const char *dir = cli_get(&a, "dir");
	int rc;
	if (cli_has(&a, "status")) {
		cairn_migration_info *m;
		size_t n;
		if ((rc = cairn_migration_list(c, dir, &m, &n))) {
			code = cli_fail("migrate", c, rc, NULL);
		} else if (cli_has(&a, "json")) {
			cJSON *arr = cJSON_CreateArray();
			for (size_t i = 0; i < n; i++) {
				cJSON *o = cJSON_CreateObject();
				char t[32];
				cJSON_AddNumberToObject(o, "version", m[i].version);
				cJSON_AddStringToObject(o, "name", m[i].name);
				cJSON_AddStringToObject(o, "checksum", m[i].checksum);
				cJSON_AddBoolToObject(o, "applied", m[i].applied);
				if (m[i].applied)
					cJSON_AddStringToObject(o, "applied_at",
					                        cli_time(m[i].applied_unix_ms, t));
				cJSON_AddBoolToObject(o, "changed", m[i].changed);
				cJSON_AddItemToArray(arr, o);
			}
			cli_print_json(arr);
		} else {
			printf("%-8s %-28s %-10s %s\n", "VERSION", "NAME", "STATE", "APPLIED AT");
			for (size_t i = 0; i < n; i++) {
				char t[32];
				printf("%04d     %-28s %-10s %s\n", m[i].version, m[i].name,
				       m[i].changed   ? "CHANGED"
				       : m[i].applied ? "applied"
				                      : "pending",
				       m[i].applied ? cli_time(m[i].applied_unix_ms, t) : "-");
			}
		}
		if (!rc)
			cairn_migration_list_free(m, n);
	} else {
		migrate_report m;
		if ((rc = migrate_apply(c, dir, (int)shards, &m))) {
			code = cli_fail("migrate", c, rc, NULL);
		} else if (cli_has(&a, "json")) {
			cJSON *o = cJSON_CreateObject();
			cJSON *v = cJSON_AddArrayToObject(o, "applied");
			for (size_t i = 0; i < m.n; i++)
				cJSON_AddItemToArray(v, cJSON_CreateNumber(m.versions[i]));
			cJSON_AddNumberToObject(o, "version_before", m.before);
			cJSON_AddNumberToObject(o, "version_after", m.after);
			cli_print_json(o);
		} else if (m.n) {
			printf("applied %zu migration%s\n", m.n, m.n == 1 ? "" : "s");
		} else {
			printf("schema is up to date\n");
		}
		migrate_report_clear(&m);
	}
	cairn_client_free(c);
	return code;
}

/* --------------------------------------------------------------- enqueue */

/* Reads --input: JSON text, or @file. *owned is set when the text was read. */
static int read_input(const char *cmd, const char *arg, const char **text, char **owned)
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

static int print_result(const char *cmd, cairn_client *c, int64_t id, int json);
static int print_outcome(const char *cmd, int64_t id, const char *status, const char *output,
                         const char *error, cli_lock l, int json);

static int finished(const char *status)
{
	return strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
	       strcmp(status, "cancelled") == 0;
}

static const cli_opt ENQUEUE_OPTS[] = {
    {"key", 1},          {"input", 1}, {"delay", 1}, {"at", 1},
    {"max-attempts", 1}, {"group", 1}, {"wait", 0},  {"timeout", 1},
    {"json", 0},         {"db", 1},    {"help", 0},  {"concurrency-key", 1},
    {"priority", 1},     {NULL, 0}};

static int cmd_enqueue(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn enqueue WORKFLOW [--key K] [--input JSON | --input @FILE]\n"
	    "                     [--delay DURATION | --at TIME] [--max-attempts N]\n"
	    "                     [--group G] [--concurrency-key K] [--priority P]\n"
	    "                     [--wait [--timeout DURATION]] [--json]\n"
	    "\n"
	    "Enqueues a run of WORKFLOW and prints its id. The same (WORKFLOW, KEY)\n"
	    "again writes nothing, prints the id of the existing run and says so on\n"
	    "stderr with its status and, if it has finished, its output or error\n"
	    "(exit 0).\n"
	    "\n"
	    "  --key K           idempotency key (default: a unique generated key)\n"
	    "  --input JSON      the run's input as JSON text, or @FILE to read it\n"
	    "  --delay DURATION  start no earlier than now + DURATION (500ms, 30s, 5m, 1h)\n"
	    "  --at TIME         start no earlier than TIME (RFC 3339, 2026-12-24T10:00:00Z)\n"
	    "  --max-attempts N  attempts before the run fails for good (1-1000; default 3)\n"
	    "  --group G         shard group (default: default)\n"
	    "  --concurrency-key K\n"
	    "                    flow control: the run lives in the shard of K, and the\n"
	    "                    workflow's key limits (cairn limit) count it under K\n"
	    "  --priority P      -1000 to 1000 (default 0): among due runs of a worker,\n"
	    "                    higher starts first\n"
	    "  --wait            wait for the run to finish and print its result (exit 0\n"
	    "                    completed, 1 failed or cancelled); an existing run that\n"
	    "                    has finished returns its result at once\n"
	    "  --timeout D       with --wait: give up after D (default 30s; exit 4)\n"
	    "  --json            print {\"id\", \"existed\", \"status\", \"held\", \"output\",\n"
	    "                    \"error\"} (held: waiting for a slot of its concurrency key;\n"
	    "                    output and error: of an existing finished run, else\n"
	    "                    null; with --wait: the result)\n" COMMON_HELP;
	cli_args a = {ENQUEUE_OPTS, {0}, {0}, 0};
	if (cli_parse("enqueue", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error("enqueue", EXIT_USAGE,
		                 "expected exactly one WORKFLOW (see --help)");
	/* Names, key, group, input and the ranges are the client's to check;
	 * here only what the command line alone knows: its own spellings. */
	char err[PARSE_ERR_MAX];
	cairn_enqueue_opts o = {0};
	const char *workflow = a.pos[0];
	o.key = cli_get(&a, "key");
	o.group = cli_get(&a, "group");
	o.concurrency_key = cli_get(&a, "concurrency-key");
	int64_t prio = 0;
	if (cli_has(&a, "priority") && parse_int(cli_get(&a, "priority"), -CAIRN_PRIORITY_MAX,
	                                         CAIRN_PRIORITY_MAX, &prio, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--priority: %s", err);
	o.priority = (int)prio;
	/* Checked as flags, not values: --delay 0 --at TIME is just as ambiguous. */
	if (cli_has(&a, "delay") && cli_has(&a, "at"))
		return cli_error("enqueue", EXIT_USAGE, "--delay and --at cannot be used together");
	if (cli_has(&a, "delay") && parse_duration_ms(cli_get(&a, "delay"), &o.delay_ms, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--delay: %s", err);
	if (cli_has(&a, "at") && parse_timestamp_ms(cli_get(&a, "at"), &o.at_unix_ms, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--at: %s", err);
	if (cli_has(&a, "max-attempts") &&
	    cli_count(cli_get(&a, "max-attempts"), &o.max_attempts, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--max-attempts: %s", err);
	int64_t timeout_ms = 30000;
	if (cli_has(&a, "timeout") &&
	    parse_duration_ms(cli_get(&a, "timeout"), &timeout_ms, err) < 0)
		return cli_error("enqueue", EXIT_USAGE, "--timeout: %s", err);
	char *owned;
	if (read_input("enqueue", cli_get(&a, "input"), &o.input, &owned))
		return EXIT_USAGE;
	const cli_field fields[] = {{"workflow", "WORKFLOW", NULL},
	                            {"key", "--key", NULL},
	                            {"group", "--group", NULL},
	                            {"input", "--input", NULL},
	                            {"delay_ms", "--delay", cli_get(&a, "delay")},
	                            {"at_unix_ms", "--at", cli_get(&a, "at")},
	                            {"max_attempts", "--max-attempts", NULL},
	                            {"concurrency_key", "--concurrency-key", NULL},
	                            {"priority", "--priority", NULL},
	                            {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("enqueue", &a, &c);
	if (code) {
		free(owned);
		return code;
	}
	cairn_enqueued res;
	int rc = cairn_enqueue(c, workflow, &o, &res);
	int json = cli_has(&a, "json");
	if (rc) {
		code = cli_fail("enqueue", c, rc, fields);
	} else if (cli_has(&a, "wait")) {
		if (res.existed)
			fprintf(stderr, "run %" PRId64 " already existed (status %s)\n", res.id,
			        res.status);
		if (res.existed && finished(res.status)) {
			code = print_outcome("enqueue", res.id, res.status, res.output, res.error,
			                     CLI_LOCK(&res), json);
		} else {
			rc = cairn_run_wait(c, res.id, timeout_ms);
			code = rc ? cli_fail("enqueue", c, rc, NULL)
			          : print_result("enqueue", c, res.id, json);
		}
	} else if (json) {
		cJSON *d = cJSON_CreateObject();
		cJSON_AddNumberToObject(d, "id", (double)res.id);
		cJSON_AddBoolToObject(d, "existed", res.existed);
		cJSON_AddStringToObject(d, "status", res.status);
		cJSON_AddBoolToObject(d, "held", res.held);
		cli_json_add_raw(d, "output", res.output);
		if (res.error)
			cJSON_AddStringToObject(d, "error", res.error);
		else
			cJSON_AddNullToObject(d, "error");
		cli_json_add_unreadable(d, CLI_LOCK(&res), NULL);
		cli_print_json(d);
	} else {
		char shown[CLI_SHOWN_MAX];
		printf("%" PRId64 "\n", res.id);
		if (res.existed && strcmp(res.status, "completed") == 0)
			fprintf(
			    stderr,
			    "run %" PRId64 " already existed for %s with this key: status "
			    "completed, output %s\n",
			    res.id, workflow,
			    res.output || (res.locked & CAIRN_LOCKED_OUTPUT)
			        ? cli_shown(res.output, CLI_LOCK(&res), CAIRN_LOCKED_OUTPUT, shown)
			        : "null");
		else if (res.existed && finished(res.status))
			fprintf(
			    stderr,
			    "run %" PRId64 " already existed for %s with this key: status %s, "
			    "error: %s\n",
			    res.id, workflow, res.status,
			    res.error || (res.locked & CAIRN_LOCKED_ERROR)
			        ? cli_shown(res.error, CLI_LOCK(&res), CAIRN_LOCKED_ERROR, shown)
			        : "none recorded");
		else if (res.existed)
			fprintf(stderr,
			        "run %" PRId64 " already existed for %s with this key: status %s\n",
			        res.id, workflow, res.status);
	}
	cairn_enqueued_clear(&res);
	free(owned);
	cairn_client_free(c);
	return code;
}

/* ------------------------------------------------- signal, cancel, retry */

static const cli_field RUN_FIELDS[] = {{"run", "RUN", NULL}, {NULL, NULL, NULL}};

static int open_and_resolve(const char *cmd, const cli_args *a, cairn_client **c, int64_t *id)
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

static const cli_opt SIGNAL_OPTS[] = {{"input", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static int cmd_signal(int argc, char **argv)
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
	if (read_input("signal", cli_get(&a, "input"), &payload, &owned))
		return EXIT_USAGE;
	cairn_client *c;
	int64_t id;
	int code = open_and_resolve("signal", &a, &c, &id);
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

#define LINK_TTL_MAX_MS (365LL * 86400000)

/* Where links point: CAIRN_PUBLIC_URL, else a live worker's address. */
static int link_base(cairn_client *c, char *out, size_t n)
{
	const char *pub = getenv("CAIRN_PUBLIC_URL");
	if (pub && *pub) {
		size_t len = strlen(pub);
		while (len && pub[len - 1] == '/')
			len--;
		if ((strncmp(pub, "http://", 7) != 0 && strncmp(pub, "https://", 8) != 0) ||
		    len >= n || strpbrk(pub, " \t\n?#"))
			return cli_error(
			    "signal-link", EXIT_USAGE,
			    "CAIRN_PUBLIC_URL \"%s\": expected http:// or https:// and a "
			    "host, without a query",
			    pub);
		snprintf(out, n, "%.*s", (int)len, pub);
		return EXIT_OK;
	}
	cairn_runner_info *rs;
	size_t nr;
	if (cairn_runner_list(c, 10000, &rs, &nr))
		return cli_fail("signal-link", c, CAIRN_EDB, NULL);
	out[0] = '\0';
	for (size_t i = 0; i < nr && !out[0]; i++)
		if (rs[i].live && rs[i].address && *rs[i].address)
			snprintf(out, n, "http://%s", rs[i].address);
	cairn_runner_list_free(rs, nr);
	if (!out[0])
		return cli_error("signal-link", EXIT_RUNTIME,
		                 "no live worker to point the link at: set CAIRN_PUBLIC_URL to the "
		                 "address that reaches the workers (a proxy in front of them)");
	return EXIT_OK;
}

static const cli_opt SIGNAL_LINK_OPTS[] = {
    {"ttl", 1}, {"once", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static int cmd_signal_link(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn signal-link RUN NAME [--ttl DURATION] [--once]\n"
	    "\n"
	    "Prints a URL that sends signal NAME to RUN when POSTed with the signal's JSON\n"
	    "payload (an empty body is null), with no database access: for an approval link\n"
	    "in an e-mail, or a webhook. Its token names the run, the signal and the expiry,\n"
	    "signed with CAIRN_SIGNING_KEY, which must be the workers' key. The URL is on\n"
	    "CAIRN_PUBLIC_URL (the address that reaches the workers), else a live worker's\n"
	    "advertised address. Whoever has the link can send that signal: treat it as a\n"
	    "secret.\n"
	    "\n"
	    "  --ttl DURATION    how long the link works (default 24h, at most 365d)\n"
	    "  --once            the link works once; another POST gets 409\n" COMMON_HELP;
	cli_args a = {SIGNAL_LINK_OPTS, {0}, {0}, 0};
	if (cli_parse("signal-link", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 2)
		return cli_error("signal-link", EXIT_USAGE, "expected RUN and NAME (see --help)");
	char err[512];
	if (parse_check_name("signal name", a.pos[1], err) < 0)
		return cli_error("signal-link", EXIT_USAGE, "NAME: %s", err);
	int64_t ttl_ms = 86400000;
	const char *ttl = cli_get(&a, "ttl");
	if (ttl &&
	    (parse_duration_ms(ttl, &ttl_ms, err) < 0 || ttl_ms < 1000 || ttl_ms > LINK_TTL_MAX_MS))
		return cli_error(
		    "signal-link", EXIT_USAGE,
		    "--ttl \"%s\": expected a duration from 1s to 365d, like 30m or 2d", ttl);
	unsigned char key[LINK_KEY_BYTES];
	if (link_key_parse(getenv("CAIRN_SIGNING_KEY"), key, err, sizeof err) < 0)
		return cli_error("signal-link", EXIT_USAGE,
		                 "CAIRN_SIGNING_KEY: %s (the workers' signing key)", err);
	cairn_client *c;
	int64_t id;
	char base[1024];
	int code = open_and_resolve("signal-link", &a, &c, &id);
	if (!code)
		code = link_base(c, base, sizeof base);
	if (!code) {
		link_claims cl = {.run_id = id};
		snprintf(cl.signal, sizeof cl.signal, "%s", a.pos[1]);
		snprintf(cl.nonce, sizeof cl.nonce, "%s", cli_has(&a, "once") ? "new" : "");
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		cl.expires_unix = now.tv_sec + ttl_ms / 1000;
		buf tok = BUF_INIT;
		if (link_make(key, &cl, &tok) < 0)
			code = cli_error("signal-link", EXIT_RUNTIME, "out of memory");
		else
			printf("%s/signal/%s\n", base, buf_str(&tok));
		buf_free(&tok);
	}
	sodium_memzero(key, sizeof key);
	cairn_client_free(c);
	return code;
}

static const cli_opt RUN_ACTION_OPTS[] = {{"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

#define RUN_ACTION_HELP                                                                            \
	"  --json            print {\"id\", \"status\"}: the run's status right after\n"           \
	"                    the command\n" COMMON_HELP

/* cancel and retry: fn acts on the run and puts its status after into
 * status (CLIENT_OUTCOME_MAX bytes). */
static int cmd_run_action(int argc, char **argv, const char *cmd, const char *help,
                          int (*fn)(cairn_client *, int64_t, char *), const char *done)
{
	cli_args a = {RUN_ACTION_OPTS, {0}, {0}, 0};
	if (cli_parse(cmd, argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error(cmd, EXIT_USAGE, "expected exactly one RUN (see --help)");
	cairn_client *c;
	int64_t id;
	int code = open_and_resolve(cmd, &a, &c, &id);
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

/* A retried run is pending again: the statement sets it so. */
static int retry_outcome(cairn_client *c, int64_t id, char *status)
{
	int rc = cairn_retry(c, id);
	if (!rc)
		snprintf(status, CLIENT_OUTCOME_MAX, "%s", run_status_name(RUN_PENDING));
	return rc;
}

static int cmd_cancel(int argc, char **argv)
{
	return cmd_run_action(
	    argc, argv, "cancel",
	    "usage: cairn cancel RUN [--json]\n\n"
	    "Cancels RUN. A run that has not started ends cancelled at once (status\n"
	    "cancelled); a started one ends cancelled at its next durable call, and\n"
	    "keeps its status until then.\n\n" RUN_ACTION_HELP,
	    client_cancel_outcome, "cancel requested");
}

static int cmd_retry(int argc, char **argv)
{
	return cmd_run_action(
	    argc, argv, "retry",
	    "usage: cairn retry RUN [--json]\n\n"
	    "Re-drives a failed or cancelled RUN with a fresh attempt count (status\n"
	    "pending). Its completed steps are replayed from the journal, not run\n"
	    "again.\n\n" RUN_ACTION_HELP,
	    retry_outcome, "re-driven");
}

/* -------------------------------------------------------------- reading */

static cJSON *run_json(const cairn_run *r)
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

static void print_journal_text(const cairn_run *r)
{
	printf("journal (%zu step%s):\n", r->nsteps, r->nsteps == 1 ? "" : "s");
	if (r->nsteps)
		printf("  %-4s %-20s %-7s %-10s %-8s %-9s %s\n", "SEQ", "NAME", "KIND", "STATUS",
		       "ATTEMPTS", "DURATION", "RESULT");
	for (size_t i = 0; i < r->nsteps; i++) {
		const cairn_step_info *s = &r->steps[i];
		char dur[24] = "-";
		if (s->finished_unix_ms)
			snprintf(dur, sizeof dur, "%" PRId64 "ms",
			         s->finished_unix_ms - s->started_unix_ms);
		char shown[CLI_SHOWN_MAX];
		unsigned err = CAIRN_LOCKED_ERROR, out = CAIRN_LOCKED_OUTPUT;
		printf("  %-4d %-20s %-7s %-10s %-8d %-9s %s%s\n", s->seq, s->name, s->kind,
		       s->status, s->attempts, dur, s->error || (s->locked & err) ? "error: " : "",
		       s->error || (s->locked & err) ? cli_shown(s->error, CLI_LOCK(s), err, shown)
		       : s->output || (s->locked & out)
		           ? cli_shown(s->output, CLI_LOCK(s), out, shown)
		           : "-");
	}
}

static const cli_opt STATUS_OPTS[] = {{"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static int cmd_status(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn status RUN [--json]\n"
	    "\n"
	    "Shows RUN: workflow, key, shard, status, attempts, timestamps, input,\n"
	    "output or error, its parent and children, and its journal so far. A value\n"
	    "that does not open (its key is not configured, or it does not authenticate\n"
	    "under it) shows as unreadable, and why (--json: null, named in\n"
	    "\"unreadable\"); the rest of the run reads as usual, and it exits 0.\n"
	    "\n"
	    "  --json            print one JSON document\n" COMMON_HELP;
	cli_args a = {STATUS_OPTS, {0}, {0}, 0};
	if (cli_parse("status", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1)
		return cli_error("status", EXIT_USAGE, "expected exactly one RUN (see --help)");
	cairn_client *c;
	int64_t id;
	int code = open_and_resolve("status", &a, &c, &id);
	if (code)
		return code;
	cairn_run *r;
	int rc = cairn_run_get(c, id, &r);
	if (rc) {
		code = cli_fail("status", c, rc, NULL);
	} else if (cli_has(&a, "json")) {
		cJSON *o = run_json(r);
		if (r->parent_id)
			cJSON_AddNumberToObject(o, "parent", (double)r->parent_id);
		else
			cJSON_AddNullToObject(o, "parent");
		cJSON *kids = cJSON_AddArrayToObject(o, "children");
		for (size_t i = 0; i < r->nchildren; i++) {
			cJSON *k = cJSON_CreateObject();
			cJSON_AddNumberToObject(k, "id", (double)r->children[i].id);
			cJSON_AddStringToObject(k, "workflow", r->children[i].workflow);
			cJSON_AddStringToObject(k, "status", r->children[i].status);
			cJSON_AddItemToArray(kids, k);
		}
		cJSON *steps = cJSON_AddArrayToObject(o, "journal");
		for (size_t i = 0; i < r->nsteps; i++) {
			const cairn_step_info *s = &r->steps[i];
			char t[32];
			cJSON *so = cJSON_CreateObject();
			cJSON_AddNumberToObject(so, "seq", s->seq);
			cJSON_AddStringToObject(so, "name", s->name);
			cJSON_AddStringToObject(so, "kind", s->kind);
			cJSON_AddStringToObject(so, "status", s->status);
			cJSON_AddNumberToObject(so, "attempts", s->attempts);
			cli_json_add_raw(so, "output", s->output);
			if (s->error)
				cJSON_AddStringToObject(so, "error", s->error);
			else
				cJSON_AddNullToObject(so, "error");
			cli_json_add_unreadable(so, CLI_LOCK(s), NULL);
			cJSON_AddStringToObject(so, "started_at", cli_time(s->started_unix_ms, t));
			if (s->finished_unix_ms) {
				cJSON_AddStringToObject(so, "finished_at",
				                        cli_time(s->finished_unix_ms, t));
				cJSON_AddNumberToObject(
				    so, "duration_ms",
				    (double)(s->finished_unix_ms - s->started_unix_ms));
			} else {
				cJSON_AddNullToObject(so, "finished_at");
				cJSON_AddNullToObject(so, "duration_ms");
			}
			cJSON_AddItemToArray(steps, so);
		}
		cli_print_json(o);
	} else {
		char t[32];
		printf("run %" PRId64 "\n", r->id);
		printf("  workflow   %s\n  key        %s\n  shard      %s/%d\n", r->workflow,
		       r->key, r->group, r->shard);
		printf("  status     %s%s%s (attempt %d of %d)\n", r->status,
		       r->held ? ", held: waiting for a slot of its concurrency key" : "",
		       r->cancel_requested && !r->finished_unix_ms ? ", cancel requested" : "",
		       r->attempt, r->max_attempts);
		if (r->waiting_for)
			printf("  waiting    for %s\n", r->waiting_for);
		if (r->concurrency_key)
			printf("  conc. key  %s\n", r->concurrency_key);
		if (r->priority)
			printf("  priority   %d\n", r->priority);
		printf("  created    %s\n", cli_time(r->created_unix_ms, t));
		printf("  scheduled  %s\n", cli_time(r->scheduled_unix_ms, t));
		printf("  started    %s\n", cli_time(r->started_unix_ms, t));
		printf("  updated    %s\n", cli_time(r->updated_unix_ms, t));
		printf("  finished   %s\n", cli_time(r->finished_unix_ms, t));
		char shown[CLI_SHOWN_MAX];
		printf("  input      %s\n",
		       cli_shown(r->input, CLI_LOCK(r), CAIRN_LOCKED_INPUT, shown));
		if (r->output || (r->locked & CAIRN_LOCKED_OUTPUT))
			printf("  output     %s\n",
			       cli_shown(r->output, CLI_LOCK(r), CAIRN_LOCKED_OUTPUT, shown));
		if (r->error || (r->locked & CAIRN_LOCKED_ERROR))
			printf("  error      %s\n",
			       cli_shown(r->error, CLI_LOCK(r), CAIRN_LOCKED_ERROR, shown));
		if (r->code_version)
			printf("  code       %s\n", r->code_version);
		if (r->parent_id)
			printf("  parent     %" PRId64 "\n", r->parent_id);
		for (size_t i = 0; i < r->nchildren; i++)
			printf("  %-10s %" PRId64 " %s %s\n", i ? "" : "children",
			       r->children[i].id, r->children[i].workflow, r->children[i].status);
		print_journal_text(r);
	}
	cairn_run_free(r);
	cairn_client_free(c);
	return code;
}

/* Prints a run's outcome: a completed run's output (exit 0), a failed or
 * cancelled run's error (exit 1), or that it has not finished (exit 4). */
static int print_outcome(const char *cmd, int64_t id, const char *status, const char *output,
                         const char *error, cli_lock l, int json)
{
	int done = finished(status), ok = strcmp(status, "completed") == 0;
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

/* Loads the run and prints its outcome (print_outcome). */
static int print_result(const char *cmd, cairn_client *c, int64_t id, int json)
{
	cairn_run *r;
	int rc = cairn_run_get(c, id, &r);
	if (rc)
		return cli_fail(cmd, c, rc, NULL);
	int code = print_outcome(cmd, id, r->status, r->output, r->error, CLI_LOCK(r), json);
	cairn_run_free(r);
	return code;
}

static const cli_opt RESULT_OPTS[] = {{"wait", 0}, {"timeout", 1}, {"json", 0},
                                      {"db", 1},   {"help", 0},    {NULL, 0}};

static int cmd_result(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn result RUN [--wait] [--timeout DURATION] [--json]\n"
	    "\n"
	    "Prints the output JSON of a completed RUN (exit 0); for a failed or\n"
	    "cancelled run prints its error (exit 1). A run that has not finished\n"
	    "exits 4, at once or, with --wait, after the timeout.\n"
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
	int code = open_and_resolve("result", &a, &c, &id);
	if (code)
		return code;
	int rc = cli_has(&a, "wait") ? cairn_run_wait(c, id, timeout_ms) : CAIRN_OK;
	code = rc ? cli_fail("result", c, rc, NULL)
	          : print_result("result", c, id, cli_has(&a, "json"));
	cairn_client_free(c);
	return code;
}

static const cli_opt LIST_OPTS[] = {{"workflow", 1},     {"status", 1}, {"limit", 1},
                                    {"json", 0},         {"db", 1},     {"help", 0},
                                    {"code-version", 1}, {NULL, 0}};

static int cmd_list(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn list [--workflow W] [--status S] [--code-version V] [--limit N]\n"
	    "                  [--json]\n"
	    "\n"
	    "Lists runs, newest first.\n"
	    "\n"
	    "  --workflow W      only runs of workflow W\n"
	    "  --code-version V  only runs started by workers with CAIRN_CODE_VERSION V\n"
	    "  --status S        only runs in status S: pending, running, sleeping,\n"
	    "                    waiting, completed, failed or cancelled\n"
	    "  --limit N         at most N runs (1-10000; default 50)\n"
	    "  --json            print a JSON array\n" COMMON_HELP;
	cli_args a = {LIST_OPTS, {0}, {0}, 0};
	if (cli_parse("list", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("list", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	char err[PARSE_ERR_MAX];
	cairn_list_filter f = {.workflow = cli_get(&a, "workflow"),
	                       .status = cli_get(&a, "status"),
	                       .code_version = cli_get(&a, "code-version")};
	if (cli_has(&a, "limit") && cli_count(cli_get(&a, "limit"), &f.limit, err) < 0)
		return cli_error("list", EXIT_USAGE, "--limit: %s", err);
	cairn_client *c;
	int code = cli_open("list", &a, &c);
	if (code)
		return code;
	cairn_run *runs;
	size_t n;
	static const cli_field fields[] = {{"workflow", "--workflow", NULL},
	                                   {"status", "--status", NULL},
	                                   {"limit", "--limit", NULL},
	                                   {"code_version", "--code-version", NULL},
	                                   {NULL, NULL, NULL}};
	int rc = cairn_run_list(c, &f, &runs, &n);
	if (rc) {
		code = cli_fail("list", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, run_json(&runs[i]));
		cli_print_json(arr);
	} else {
		printf("%-10s %-16s %-24s %-10s %-7s %s\n", "ID", "WORKFLOW", "KEY", "STATUS",
		       "ATTEMPT", "CREATED");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			printf("%-10" PRId64 " %-16s %-24s %-10s %-7d %s\n", runs[i].id,
			       runs[i].workflow, runs[i].key, runs[i].status, runs[i].attempt,
			       cli_time(runs[i].created_unix_ms, t));
		}
	}
	if (!rc)
		cairn_run_list_free(runs, n);
	cairn_client_free(c);
	return code;
}

/* ----------------------------------------------------------- visibility */

/* A heartbeat age for a table: 350ms, 4.2s, 3m12s, 2h5m. */
static const char *fmt_age(int64_t ms, char out[32])
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

/* The comma-separated groups of a runner as a JSON array of strings. */
static cJSON *groups_json(const char *groups)
{
	cJSON *arr = cJSON_CreateArray();
	for (const char *p = groups; p && *p;) {
		size_t len = strcspn(p, ",");
		char *g = strndup(p, len);
		if (g)
			cJSON_AddItemToArray(arr, cJSON_CreateString(g));
		free(g);
		p += len + (p[len] == ',');
	}
	return arr;
}

static const cli_opt RUNNERS_OPTS[] = {{"ttl", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static int cmd_runners(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn runners [--ttl DURATION] [--json]\n"
	    "\n"
	    "Lists the runners registered in cairn.runners: id, name, address,\n"
	    "version, whether the health checker holds it healthy, whether it is\n"
	    "live (heartbeat younger than the TTL and its lease connection present\n"
	    "in pg_stat_activity), the age of its last heartbeat and how many shards\n"
	    "it owns.\n"
	    "\n"
	    "  --ttl DURATION    heartbeat age after which a runner is not live\n"
	    "                    (1ms-365d; default 10s, as CAIRN_RUNNER_TTL)\n"
	    "  --json            print a JSON array\n" COMMON_HELP;
	cli_args a = {RUNNERS_OPTS, {0}, {0}, 0};
	if (cli_parse("runners", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("runners", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	char err[PARSE_ERR_MAX];
	int64_t ttl_ms = 10000;
	const char *ttl = cli_get(&a, "ttl");
	if (ttl && parse_duration_ms(ttl, &ttl_ms, err) < 0)
		return cli_error("runners", EXIT_USAGE, "--ttl: %s", err);
	const cli_field fields[] = {{"ttl_ms", "--ttl", ttl}, {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("runners", &a, &c);
	if (code)
		return code;
	cairn_runner_info *r;
	size_t n;
	int rc = cairn_runner_list(c, ttl_ms, &r, &n);
	if (rc) {
		code = cli_fail("runners", c, rc, fields);
	} else if (cli_has(&a, "json")) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++) {
			char t[32];
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "id", (double)r[i].id);
			cJSON_AddStringToObject(o, "name", r[i].name);
			cJSON_AddStringToObject(o, "address", r[i].address);
			cJSON_AddStringToObject(o, "version", r[i].version);
			cJSON_AddItemToObject(o, "groups", groups_json(r[i].groups));
			cJSON_AddNumberToObject(o, "weight", r[i].weight);
			cJSON_AddBoolToObject(o, "healthy", r[i].healthy);
			cJSON_AddBoolToObject(o, "live", r[i].live);
			cJSON_AddNumberToObject(o, "heartbeat_age_ms",
			                        (double)r[i].heartbeat_age_ms);
			cJSON_AddStringToObject(o, "started_at", cli_time(r[i].started_unix_ms, t));
			cJSON_AddNumberToObject(o, "shards", r[i].shards);
			cJSON_AddItemToArray(arr, o);
		}
		cli_print_json(arr);
	} else {
		printf("%-8s %-20s %-22s %-8s %-7s %-4s %-13s %s\n", "ID", "NAME", "ADDRESS",
		       "VERSION", "HEALTHY", "LIVE", "HEARTBEAT_AGE", "SHARDS");
		for (size_t i = 0; i < n; i++) {
			char age[32];
			printf("%-8" PRId64 " %-20s %-22s %-8s %-7s %-4s %-13s %d\n", r[i].id,
			       r[i].name, r[i].address, r[i].version, r[i].healthy ? "yes" : "no",
			       r[i].live ? "yes" : "no", fmt_age(r[i].heartbeat_age_ms, age),
			       r[i].shards);
		}
	}
	cairn_runner_list_free(r, n);
	cairn_client_free(c);
	return code;
}

/* Shards per owner; owner 0 is "unowned". */
typedef struct owner_count {
	int64_t owner;
	const char *name; /* borrowed from the shard list */
	size_t shards;
} owner_count;

static int owner_cmp(const void *a, const void *b)
{
	int64_t x = ((const owner_count *)a)->owner, y = ((const owner_count *)b)->owner;
	return (x > y) - (x < y);
}

/* Counts the shards of each owner; returns the number of entries (the
 * unowned one first and always present, then owners by id) or 0 when out of
 * memory. */
static size_t summarize(const cairn_shard_info *s, size_t n, owner_count **out)
{
	owner_count *v = calloc(n + 1, sizeof *v);
	*out = v;
	if (!v)
		return 0;
	size_t k = 1;
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		if (s[i].owner)
			for (j = 1; j < k && v[j].owner != s[i].owner; j++)
				;
		if (j == k) {
			v[k].owner = s[i].owner;
			v[k++].name = s[i].owner_name;
		}
		v[j].shards++;
	}
	qsort(v + 1, k - 1, sizeof *v, owner_cmp);
	return k;
}

static const char *or_unknown(const char *s)
{
	return s ? s : "?";
}

/* The outsider holding a shard's lock: {pid, user, application_name}, or null. */
static cJSON *outsider_json(const cairn_shard_info *s)
{
	if (!s->outsider_pid)
		return cJSON_CreateNull();
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "pid", s->outsider_pid);
	cJSON_AddItemToObject(o, "user",
	                      s->outsider_user ? cJSON_CreateString(s->outsider_user)
	                                       : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "application_name",
	                      s->outsider_application_name
	                          ? cJSON_CreateString(s->outsider_application_name)
	                          : cJSON_CreateNull());
	return o;
}

static const cli_opt SHARDS_OPTS[] = {{"group", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static int cmd_shards(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn shards [--group G] [--json]\n"
	    "\n"
	    "Shows who owns each shard and its fencing epoch (one line per shard in\n"
	    "cairn.shard_leases; a shard never acquired has no line), then the\n"
	    "number of shards each runner owns and how many have no owner. A shard\n"
	    "whose lock is held by an outsider (a backend that is no runner's lease\n"
	    "backend, so no runner can take the shard) says so with the backend's\n"
	    "pid, user and application_name, and has a line even if never acquired.\n"
	    "\n"
	    "  --group G         only shards of group G\n"
	    "  --json            print {\"shards\": [...], \"summary\": [...]}\n" COMMON_HELP;
	cli_args a = {SHARDS_OPTS, {0}, {0}, 0};
	if (cli_parse("shards", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("shards", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	const char *group = cli_get(&a, "group");
	static const cli_field fields[] = {{"group", "--group", NULL}, {NULL, NULL, NULL}};
	cairn_client *c;
	int code = cli_open("shards", &a, &c);
	if (code)
		return code;
	cairn_shard_info *s;
	size_t n;
	owner_count *sum = NULL;
	int rc = cairn_shard_list(c, group, &s, &n);
	size_t nsum = rc ? 0 : summarize(s, n, &sum);
	if (rc) {
		code = cli_fail("shards", c, rc, fields);
	} else if (!nsum) {
		code = cli_error("shards", EXIT_RUNTIME, "out of memory");
	} else if (cli_has(&a, "json")) {
		cJSON *doc = cJSON_CreateObject();
		cJSON *arr = cJSON_AddArrayToObject(doc, "shards");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "group", s[i].group);
			cJSON_AddNumberToObject(o, "shard", s[i].shard);
			if (s[i].owner)
				cJSON_AddNumberToObject(o, "owner", (double)s[i].owner);
			else
				cJSON_AddNullToObject(o, "owner");
			if (s[i].owner_name)
				cJSON_AddStringToObject(o, "owner_name", s[i].owner_name);
			else
				cJSON_AddNullToObject(o, "owner_name");
			cJSON_AddNumberToObject(o, "epoch", (double)s[i].epoch);
			if (s[i].acquired_unix_ms)
				cJSON_AddStringToObject(o, "acquired_at",
				                        cli_time(s[i].acquired_unix_ms, t));
			else
				cJSON_AddNullToObject(o, "acquired_at");
			cJSON_AddItemToObject(o, "outsider", outsider_json(&s[i]));
			cJSON_AddItemToArray(arr, o);
		}
		arr = cJSON_AddArrayToObject(doc, "summary");
		for (size_t i = 0; i < nsum; i++) {
			/* Owners first, the unowned count last, as in the table. */
			const owner_count *oc = &sum[(i + 1) % nsum];
			cJSON *o = cJSON_CreateObject();
			if (oc->owner)
				cJSON_AddNumberToObject(o, "owner", (double)oc->owner);
			else
				cJSON_AddNullToObject(o, "owner");
			if (oc->name)
				cJSON_AddStringToObject(o, "owner_name", oc->name);
			else
				cJSON_AddNullToObject(o, "owner_name");
			cJSON_AddNumberToObject(o, "shards", (double)oc->shards);
			cJSON_AddItemToArray(arr, o);
		}
		cli_print_json(doc);
	} else {
		size_t outsiders = 0;
		for (size_t i = 0; i < n; i++)
			outsiders += s[i].outsider_pid != 0;
		int w = outsiders ? 8 : 0; /* the EPOCH column, padded only when one follows */
		printf("%-20s %-6s %-28s %-*s%s\n", "GROUP", "SHARD", "OWNER", w, "EPOCH",
		       outsiders ? " LOCK_HELD_BY" : "");
		for (size_t i = 0; i < n; i++) {
			char owner[160] = "-", held[320] = "";
			if (s[i].owner)
				snprintf(owner, sizeof owner, "%" PRId64 ":%s", s[i].owner,
				         s[i].owner_name ? s[i].owner_name : "?");
			if (s[i].outsider_pid)
				snprintf(held, sizeof held,
				         " outsider pid=%d user=%s application_name=%s",
				         s[i].outsider_pid, or_unknown(s[i].outsider_user),
				         or_unknown(s[i].outsider_application_name));
			printf("%-20s %-6d %-28s %-*" PRId64 "%s\n", s[i].group, s[i].shard, owner,
			       w, s[i].epoch, held);
		}
		printf("\n%-28s %s\n", "OWNER", "SHARDS");
		for (size_t i = 1; i < nsum; i++) {
			char owner[160];
			snprintf(owner, sizeof owner, "%" PRId64 ":%s", sum[i].owner,
			         sum[i].name ? sum[i].name : "?");
			printf("%-28s %zu\n", owner, sum[i].shards);
		}
		printf("%-28s %zu\n", "unowned", sum[0].shards);
		if (outsiders)
			printf("%-28s %zu\n", "lock held by an outsider", outsiders);
	}
	free(sum);
	cairn_shard_list_free(s, n);
	cairn_client_free(c);
	return code;
}

static const cli_opt EVENT_OPTS[] = {{"wait", 0}, {"timeout", 1}, {"changed-from", 1},
                                     {"json", 0}, {"db", 1},      {"help", 0},
                                     {NULL, 0}};

static int cmd_event(int argc, char **argv)
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
	int code = open_and_resolve("event", &a, &c, &id);
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

/* -------------------------------------------------------------- schedule */

static const char SCHEDULE_HELP[] =
    "usage: cairn schedule create NAME --cron EXPR --workflow W [--tz ZONE]\n"
    "                      [--input JSON | --input @FILE] [--group G]\n"
    "                      [--overlap skip|allow] [--catchup none|latest|all] [--json]\n"
    "       cairn schedule list [--json]\n"
    "       cairn schedule pause NAME | resume NAME | delete NAME [--json]\n"
    "\n"
    "A schedule starts a run of W at every time EXPR names, in ZONE (a tz\n"
    "database zone or a POSIX TZ string, default UTC). Each wall time fires once\n"
    "across daylight-saving changes, steps and * too: one the clocks skip fires\n"
    "at the instant it would have had (shifted forward by the jump), one they\n"
    "repeat at its first occurrence. EXPR: minute hour day-of-month month\n"
    "day-of-week, or six fields with seconds first; each *, N, A-B, a step (*/S,\n"
    "A-B/S, A/S) or a list, month and day names (JAN, MON); or @hourly, @daily,\n"
    "@weekly, @monthly, @yearly. The cairn.scheduler singleton of a running\n"
    "worker fires it; each fire is a run keyed cairn.schedule:NAME:DUE_MS, so\n"
    "none happens twice.\n"
    "\n"
    "  --overlap skip    no fire while the last fire's run is unfinished (default)\n"
    "  --overlap allow   fire regardless\n"
    "  --catchup latest  of the times missed while no scheduler ran, fire the last\n"
    "                    (default); all: each (1000 at a time); none: none\n"
    "  resume            fires next at the first time from now\n"
    "  --json            print JSON\n" COMMON_HELP;

static cJSON *schedule_json(const cairn_schedule_info *s)
{
	char t[32];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddStringToObject(o, "cron", s->cron);
	cJSON_AddStringToObject(o, "tz", s->tz);
	cJSON_AddStringToObject(o, "workflow", s->workflow);
	cJSON_AddStringToObject(o, "group", s->group);
	cJSON_AddStringToObject(o, "overlap", s->overlap);
	cJSON_AddStringToObject(o, "catchup", s->catchup);
	cJSON_AddBoolToObject(o, "paused", s->paused);
	cJSON_AddStringToObject(o, "next_at", cli_time(s->next_unix_ms, t));
	if (s->last_unix_ms)
		cJSON_AddStringToObject(o, "last_at", cli_time(s->last_unix_ms, t));
	else
		cJSON_AddNullToObject(o, "last_at");
	if (s->last_run_id)
		cJSON_AddNumberToObject(o, "last_run", (double)s->last_run_id);
	else
		cJSON_AddNullToObject(o, "last_run");
	cJSON_AddNumberToObject(o, "fires", (double)s->fires);
	cJSON_AddNumberToObject(o, "skipped", (double)s->skipped);
	return o;
}

static int schedule_list(cairn_client *c, int json)
{
	cairn_schedule_info *s;
	size_t n;
	int rc = cairn_schedule_list(c, &s, &n);
	if (rc)
		return cli_fail("schedule", c, rc, NULL);
	if (json) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, schedule_json(&s[i]));
		cli_print_json(arr);
	} else {
		printf("%-20s %-16s %-16s %-14s %-7s %-24s %s\n", "NAME", "CRON", "TZ", "WORKFLOW",
		       "STATE", "NEXT", "FIRES");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			printf("%-20s %-16s %-16s %-14s %-7s %-24s %" PRId64 "\n", s[i].name,
			       s[i].cron, s[i].tz, s[i].workflow, s[i].paused ? "paused" : "active",
			       cli_time(s[i].next_unix_ms, t), s[i].fires);
		}
	}
	cairn_schedule_list_free(s, n);
	return EXIT_OK;
}

static const char *const SCHEDULE_SUBS[] = {"create", "list", "pause", "resume", "delete", NULL};
static const cli_opt SCHEDULE_OPTS[] = {{"cron", 1},  {"workflow", 1}, {"tz", 1},      {"input", 1},
                                        {"group", 1}, {"overlap", 1},  {"catchup", 1}, {"json", 0},
                                        {"db", 1},    {"help", 0},     {NULL, 0}};

static int cmd_schedule(int argc, char **argv)
{
	cli_args a = {SCHEDULE_OPTS, {0}, {0}, 0};
	if (cli_parse("schedule", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(SCHEDULE_HELP, stdout), EXIT_OK;
	const char *const *subs = SCHEDULE_SUBS;
	int sub = -1;
	for (int i = 0; a.npos && i < 5; i++)
		if (strcmp(a.pos[0], subs[i]) == 0)
			sub = i;
	if (sub < 0)
		return cli_error(
		    "schedule", EXIT_USAGE,
		    "%s%s%s: expected create, list, pause, resume or delete (see --help)",
		    a.npos ? "unknown subcommand \"" : "missing subcommand", a.npos ? a.pos[0] : "",
		    a.npos ? "\"" : "");
	if (a.npos != (sub == 1 ? 1 : 2))
		return cli_error("schedule", EXIT_USAGE, "schedule %s takes %s (see --help)",
		                 subs[sub], sub == 1 ? "no NAME" : "one NAME");
	if (sub == 0 && (!cli_has(&a, "cron") || !cli_has(&a, "workflow")))
		return cli_error("schedule", EXIT_USAGE,
		                 "schedule create needs --cron and --workflow");
	const char *input = NULL;
	char *owned = NULL;
	if (sub == 0 && read_input("schedule", cli_get(&a, "input"), &input, &owned))
		return EXIT_USAGE;
	cairn_client *c;
	int code = cli_open("schedule", &a, &c);
	if (code) {
		free(owned);
		return code;
	}
	const cli_field fields[] = {{"name", "NAME", NULL},
	                            {"cron", "--cron", NULL},
	                            {"tz", "--tz", NULL},
	                            {"workflow", "--workflow", NULL},
	                            {"input", "--input", NULL},
	                            {"group", "--group", NULL},
	                            {"overlap", "--overlap", NULL},
	                            {"catchup", "--catchup", NULL},
	                            {NULL, NULL, NULL}};
	int rc = CAIRN_OK, json = cli_has(&a, "json");
	int64_t next = 0;
	if (sub == 0) {
		cairn_schedule_opts o = {.cron = cli_get(&a, "cron"),
		                         .tz = cli_get(&a, "tz"),
		                         .workflow = cli_get(&a, "workflow"),
		                         .input = input,
		                         .group = cli_get(&a, "group"),
		                         .overlap = cli_get(&a, "overlap"),
		                         .catchup = cli_get(&a, "catchup")};
		rc = cairn_schedule_create(c, a.pos[1], &o, &next);
	} else if (sub == 1) {
		code = schedule_list(c, json);
	} else if (sub == 4) {
		rc = cairn_schedule_delete(c, a.pos[1]);
	} else {
		rc = cairn_schedule_pause(c, a.pos[1], sub == 2);
	}
	if (rc) {
		code = cli_fail("schedule", c, rc, fields);
	} else if (sub != 1 && json) {
		cJSON *o = cJSON_CreateObject();
		char t[32];
		cJSON_AddStringToObject(o, "name", a.pos[1]);
		cJSON_AddStringToObject(o, "done", subs[sub]);
		if (next)
			cJSON_AddStringToObject(o, "next_at", cli_time(next, t));
		cli_print_json(o);
	} else if (sub == 0) {
		char t[32];
		printf("schedule %s created; first fire at %s\n", a.pos[1], cli_time(next, t));
	} else if (sub != 1) {
		printf("schedule %s %s\n", a.pos[1],
		       sub == 2   ? "paused"
		       : sub == 3 ? "resumed"
		                  : "deleted");
	}
	free(owned);
	cairn_client_free(c);
	return code;
}

/* ----------------------------------------------------------------- limit */

static const char LIMIT_HELP[] =
    "usage: cairn limit set WORKFLOW [--key-concurrency N|off] [--concurrency N|off]\n"
    "                                [--rate N/PERIOD|off] [--key-rate N/PERIOD|off]\n"
    "                                [--json]\n"
    "       cairn limit list [--json]\n"
    "       cairn limit delete WORKFLOW [--json]\n"
    "\n"
    "Flow control for a workflow's runs, fleet-wide, held in the database: every\n"
    "worker's next claim applies a change. set changes only the limits it names.\n"
    "Runs take a concurrency key with `cairn enqueue --concurrency-key K`.\n"
    "\n"
    "  --key-concurrency N  at most N runs of one concurrency key execute at once\n"
    "                       (1-100000); a run in a durable sleep or waiting for a\n"
    "                       signal holds no slot. Runs past it stay pending, held,\n"
    "                       and go in priority order as slots free\n"
    "  --concurrency N      at most N runs of the workflow execute at once across\n"
    "                       the fleet (1-100000), with or without keys\n"
    "  --rate N/PERIOD      at most N runs of the workflow start per PERIOD, across\n"
    "                       the fleet: 10/s, 600/m, 5/500ms (a unit s, m, h, d or a\n"
    "                       duration up to 1d); N at once, then evenly spread\n"
    "  --key-rate N/PERIOD  the same for the runs of one concurrency key\n"
    "  off                  removes that limit\n"
    "  --json               print JSON\n" COMMON_HELP;

/* "off" (0), or a count from 1 to max into *n; otherwise a usage error. */
static int limit_count(const char *opt, const char *v, int *n)
{
	int64_t x;
	char err[PARSE_ERR_MAX];
	if (strcmp(v, "off") == 0)
		return *n = 0, 0;
	if (parse_int(v, 1, 100000, &x, err) < 0)
		return cli_error("limit", EXIT_USAGE, "--%s: %s, or off", opt, err);
	*n = (int)x;
	return 0;
}

static int limit_rate(const char *opt, const char *v, int *n, int64_t *ms)
{
	char err[PARSE_ERR_MAX];
	if (strcmp(v, "off") == 0)
		return *n = 0, *ms = 0, 0;
	if (parse_rate(v, n, ms, err) < 0)
		return cli_error("limit", EXIT_USAGE, "--%s: %s, or off", opt, err);
	return 0;
}

static cJSON *limit_json(const cairn_limit *l)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "workflow", l->workflow);
	const struct {
		const char *name;
		int n;
	} counts[] = {{"key_concurrency", l->key_concurrency}, {"concurrency", l->concurrency}};
	for (int i = 0; i < 2; i++)
		if (counts[i].n)
			cJSON_AddNumberToObject(o, counts[i].name, counts[i].n);
		else
			cJSON_AddNullToObject(o, counts[i].name);
	const struct {
		const char *name;
		int n;
		int64_t ms;
	} rates[] = {{"rate", l->rate, l->rate_period_ms},
	             {"key_rate", l->key_rate, l->key_rate_period_ms}};
	for (int i = 0; i < 2; i++) {
		if (!rates[i].n) {
			cJSON_AddNullToObject(o, rates[i].name);
			continue;
		}
		cJSON *r = cJSON_AddObjectToObject(o, rates[i].name);
		cJSON_AddNumberToObject(r, "starts", rates[i].n);
		cJSON_AddNumberToObject(r, "period_ms", (double)rates[i].ms);
	}
	return o;
}

/* "10/1000ms" or "-". */
static const char *rate_text(int n, int64_t ms, char out[48])
{
	if (!n)
		return "-";
	snprintf(out, 48, "%d/%" PRId64 "ms", n, ms);
	return out;
}

static int limit_list(cairn_client *c, int json)
{
	cairn_limit *l;
	size_t n;
	int rc = cairn_limit_list(c, &l, &n);
	if (rc)
		return cli_fail("limit", c, rc, NULL);
	if (json) {
		cJSON *arr = cJSON_CreateArray();
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, limit_json(&l[i]));
		cli_print_json(arr);
	} else {
		printf("%-24s %-16s %-12s %-16s %-16s\n", "WORKFLOW", "KEY CONCURRENCY",
		       "CONCURRENCY", "RATE", "KEY RATE");
		for (size_t i = 0; i < n; i++) {
			char kc[24], gc[24], r1[48], r2[48];
			snprintf(kc, sizeof kc, "%d", l[i].key_concurrency);
			snprintf(gc, sizeof gc, "%d", l[i].concurrency);
			printf("%-24s %-16s %-12s %-16s %-16s\n", l[i].workflow,
			       l[i].key_concurrency ? kc : "-", l[i].concurrency ? gc : "-",
			       rate_text(l[i].rate, l[i].rate_period_ms, r1),
			       rate_text(l[i].key_rate, l[i].key_rate_period_ms, r2));
		}
	}
	cairn_limit_list_free(l, n);
	return EXIT_OK;
}

/* set: the workflow's limits as they are, changed by the options given. */
static int limit_set(cairn_client *c, const cli_args *a, const char *workflow, cairn_limit *out)
{
	cairn_limit *l;
	size_t n;
	int rc = cairn_limit_list(c, &l, &n);
	if (rc)
		return cli_fail("limit", c, rc, NULL);
	*out = (cairn_limit){.workflow = (char *)workflow};
	for (size_t i = 0; i < n; i++)
		if (strcmp(l[i].workflow, workflow) == 0) {
			*out = l[i];
			out->workflow = (char *)workflow;
		}
	cairn_limit_list_free(l, n);
	if ((cli_has(a, "key-concurrency") &&
	     limit_count("key-concurrency", cli_get(a, "key-concurrency"),
	                 &out->key_concurrency)) ||
	    (cli_has(a, "concurrency") &&
	     limit_count("concurrency", cli_get(a, "concurrency"), &out->concurrency)) ||
	    (cli_has(a, "rate") &&
	     limit_rate("rate", cli_get(a, "rate"), &out->rate, &out->rate_period_ms)) ||
	    (cli_has(a, "key-rate") && limit_rate("key-rate", cli_get(a, "key-rate"),
	                                          &out->key_rate, &out->key_rate_period_ms)))
		return EXIT_USAGE;
	const cli_field fields[] = {
	    {"workflow", "WORKFLOW", NULL},         {"key_concurrency", "--key-concurrency", NULL},
	    {"concurrency", "--concurrency", NULL}, {"rate", "--rate", NULL},
	    {"key_rate", "--key-rate", NULL},       {NULL, NULL, NULL}};
	rc = cairn_limit_set(c, out);
	return rc ? cli_fail("limit", c, rc, fields) : EXIT_OK;
}

static const char *const LIMIT_SUBS[] = {"set", "list", "delete", NULL};
static const cli_opt LIMIT_OPTS[] = {
    {"key-concurrency", 1}, {"rate", 1}, {"key-rate", 1}, {"json", 0}, {"db", 1}, {"help", 0},
    {"concurrency", 1},     {NULL, 0}};

static int cmd_limit(int argc, char **argv)
{
	cli_args a = {LIMIT_OPTS, {0}, {0}, 0};
	if (cli_parse("limit", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(LIMIT_HELP, stdout), EXIT_OK;
	const char *const *subs = LIMIT_SUBS;
	int sub = -1;
	for (int i = 0; a.npos && i < 3; i++)
		if (strcmp(a.pos[0], subs[i]) == 0)
			sub = i;
	if (sub < 0)
		return cli_error("limit", EXIT_USAGE,
		                 "%s%s%s: expected set, list or delete (see --help)",
		                 a.npos ? "unknown subcommand \"" : "missing subcommand",
		                 a.npos ? a.pos[0] : "", a.npos ? "\"" : "");
	if (a.npos != (sub == 1 ? 1 : 2))
		return cli_error("limit", EXIT_USAGE, "limit %s takes %s (see --help)", subs[sub],
		                 sub == 1 ? "no WORKFLOW" : "one WORKFLOW");
	if (sub == 0 && !cli_has(&a, "key-concurrency") && !cli_has(&a, "concurrency") &&
	    !cli_has(&a, "rate") && !cli_has(&a, "key-rate"))
		return cli_error("limit", EXIT_USAGE,
		                 "limit set needs --key-concurrency, --concurrency, --rate or "
		                 "--key-rate");
	cairn_client *c;
	int code = cli_open("limit", &a, &c);
	if (code)
		return code;
	int json = cli_has(&a, "json");
	cairn_limit l = {0};
	if (sub == 1) {
		code = limit_list(c, json);
	} else if (sub == 0) {
		code = limit_set(c, &a, a.pos[1], &l);
	} else {
		int rc = cairn_limit_delete(c, a.pos[1]);
		code = rc ? cli_fail("limit", c, rc, NULL) : EXIT_OK;
	}
	if (!code && sub != 1) {
		if (json && sub == 0) {
			cli_print_json(limit_json(&l));
		} else if (json) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "workflow", a.pos[1]);
			cJSON_AddStringToObject(o, "done", "delete");
			cli_print_json(o);
		} else {
			printf("limits of %s %s\n", a.pos[1], sub == 0 ? "set" : "deleted");
		}
	}
	cairn_client_free(c);
	return code;
}

/* ------------------------------------------------------------- reencrypt */

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

static const cli_opt REENCRYPT_OPTS[] = {
    {"batch", 1}, {"json", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

static int cmd_reencrypt(int argc, char **argv)
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

/* ------------------------------------------------------------ completion */

static int cmd_completion(int argc, char **argv);

static const char *const COMPLETION_SUBS[] = {"bash", "zsh", NULL};
static const cli_opt COMPLETION_OPTS[] = {{"help", 0}, {NULL, 0}};

/* Every command, in the order `cairn --help` lists them. */
static const cli_cmd CMDS[] = {
    {"migrate", "apply the database schema (--status lists migrations)", cmd_migrate, MIGRATE_OPTS,
     NULL},
    {"enqueue", "start a run of a workflow", cmd_enqueue, ENQUEUE_OPTS, NULL},
    {"signal", "send a signal to a run", cmd_signal, SIGNAL_OPTS, NULL},
    {"signal-link", "print a signed URL that sends a signal to a run when POSTed", cmd_signal_link,
     SIGNAL_LINK_OPTS, NULL},
    {"cancel", "cancel a run", cmd_cancel, RUN_ACTION_OPTS, NULL},
    {"retry", "re-drive a failed or cancelled run", cmd_retry, RUN_ACTION_OPTS, NULL},
    {"status", "show a run and its journal", cmd_status, STATUS_OPTS, NULL},
    {"result", "print a run's output (--wait to wait for it)", cmd_result, RESULT_OPTS, NULL},
    {"event", "print an event a run published (--wait to wait for it)", cmd_event, EVENT_OPTS,
     NULL},
    {"list", "list runs", cmd_list, LIST_OPTS, NULL},
    {"runners", "list the registered runners and whether they are live", cmd_runners, RUNNERS_OPTS,
     NULL},
    {"shards", "show the owner and epoch of each shard", cmd_shards, SHARDS_OPTS, NULL},
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
#define NCMDS (sizeof CMDS / sizeof *CMDS)

static int cmd_completion(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn completion bash|zsh\n"
	    "\n"
	    "Prints the completion script of the shell, made from the same tables of\n"
	    "commands and options that `cairn --help` and the commands read. The\n"
	    "package and `make install` put them where bash-completion and zsh find\n"
	    "them; for a shell of your own:\n"
	    "\n"
	    "  bash  source <(cairn completion bash)     (in ~/.bashrc)\n"
	    "  zsh   cairn completion zsh > ~/.zfunc/_cairn, with ~/.zfunc in $fpath\n"
	    "        before compinit\n"
	    "\n"
	    "  -h, --help        show this help\n";
	cli_args a = {COMPLETION_OPTS, {0}, {0}, 0};
	if (cli_parse("completion", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1 || cli_completion(a.pos[0], CMDS, NCMDS) < 0)
		return cli_error("completion", EXIT_USAGE, "%s%s%s: expected bash or zsh",
		                 a.npos ? "unknown shell \"" : "missing shell",
		                 a.npos ? a.pos[0] : "", a.npos ? "\"" : "");
	return EXIT_OK;
}

static void print_usage(FILE *f)
{
	fputs(USAGE_HEAD, f);
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %-12s %s\n", CMDS[i].name, CMDS[i].summary);
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
	for (size_t i = 0; i < NCMDS; i++)
		if (strcmp(argv[1], CMDS[i].name) == 0)
			return CMDS[i].fn(argc - 2, argv + 2);
	fprintf(stderr, "cairn: unknown command \"%s\"; expected one of ", argv[1]);
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(stderr, "%s%s", i ? ", " : "", CMDS[i].name);
	fputs(" (see cairn --help)\n", stderr);
	return EXIT_USAGE;
}
