/* test_config.c - worker configuration parsing and registration input: pure, no database. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "config.h"
#include "log.h"
#include "support.h"

static int load(config *c, buf *err, int argc, char **argv)
{
	return config_load(c, argc, argv, err);
}

static void env_reset(void)
{
	setenv("DATABASE_URL", "postgresql://u:pw@localhost/db", 1);
	unsetenv("CAIRN_HTTP_ADDR");
	unsetenv("CAIRN_ADVERTISE_ADDR");
	unsetenv("CAIRN_CONCURRENCY");
	unsetenv("CAIRN_POLL_INTERVAL");
	unsetenv("CAIRN_LOG_FORMAT");
	unsetenv("CAIRN_SHARD_GROUPS");
}

Test(config, defaults)
{
	env_reset();
	config c;
	buf err = BUF_INIT;
	char *argv[] = {"w"};
	cr_assert_eq(load(&c, &err, 1, argv), 0, "%s", buf_str(&err));
	cr_assert_str_eq(c.http_addr, "127.0.0.1:8080");
	cr_assert_eq(c.concurrency, 16);
	cr_assert_eq(c.poll_interval_ms, 5000);
	cr_assert_eq(c.shutdown_timeout_ms, 30000);
	cr_assert_eq(c.log_format, LOG_LOGFMT);
	cr_assert_eq(c.ngroups, 1);
	cr_assert_str_eq(c.groups[0], "default");
	cr_assert_eq(c.retention_ms, 7LL * 86400000);
	config_free(&c);
	buf_free(&err);
}

Test(config, flags_override_environment)
{
	env_reset();
	setenv("CAIRN_CONCURRENCY", "4", 1);
	setenv("CAIRN_POLL_INTERVAL", "2s", 1);
	config c;
	buf err = BUF_INIT;
	char *argv[] = {"w", "--concurrency", "8", "--log-format=json", "--shard-groups", "a,b,a"};
	cr_assert_eq(load(&c, &err, 6, argv), 0, "%s", buf_str(&err));
	cr_assert_eq(c.concurrency, 8);
	cr_assert_eq(c.poll_interval_ms, 2000);
	cr_assert_eq(c.log_format, LOG_JSON);
	cr_assert_eq(c.ngroups, 2);
	config_free(&c);
	buf_free(&err);
}

static void rejects(const char *var, const char *value, const char *expect)
{
	env_reset();
	setenv(var, value, 1);
	config c;
	buf err = BUF_INIT;
	char *argv[] = {"w"};
	cr_assert_eq(load(&c, &err, 1, argv), -1, "%s=%s accepted", var, value);
	cr_assert(strstr(buf_str(&err), var), "error does not name %s: %s", var, buf_str(&err));
	cr_assert(strstr(buf_str(&err), expect), "error lacks \"%s\": %s", expect, buf_str(&err));
	config_free(&c);
	buf_free(&err);
	unsetenv(var);
}

Test(config, each_bad_value_is_named_with_what_is_accepted)
{
	rejects("CAIRN_CONCURRENCY", "0", "from 1 to 1024");
	rejects("CAIRN_CONCURRENCY", "many", "\"many\"");
	rejects("CAIRN_POLL_INTERVAL", "fast", "500ms");
	rejects("CAIRN_POLL_INTERVAL", "1ms", "from 10ms");
	rejects("CAIRN_SHUTDOWN_TIMEOUT", "-3s", "duration");
	rejects("CAIRN_LOG_LEVEL", "loud", "error, warn, info or debug");
	rejects("CAIRN_LOG_FORMAT", "xml", "logfmt or json");
	rejects("CAIRN_HTTP_ADDR", "localhost", "HOST:PORT");
	rejects("CAIRN_HTTP_ADDR", "127.0.0.1:99999", "0 to 65535");
	rejects("CAIRN_HTTP_ADDR", "example.com:80", "IP address");
	rejects("CAIRN_SHARD_GROUPS", "ok,bad group", "group");
	rejects("CAIRN_SHARDS", "70000", "65536");
	rejects("CAIRN_MAX_PAYLOAD", "1TB", "size");
	rejects("CAIRN_RUNNER_TTL", "1s", "twice");
	rejects("CAIRN_STATEMENT_TIMEOUT", "50ms", "from 100ms");
	rejects("DATABASE_URL", "postgresql://[oops", "DATABASE_URL");
}

Test(config, missing_database_url_is_an_error)
{
	env_reset();
	unsetenv("DATABASE_URL");
	config c;
	buf err = BUF_INIT;
	char *argv[] = {"w"};
	cr_assert_eq(load(&c, &err, 1, argv), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), "DATABASE_URL is not set"));
	config_free(&c);
	buf_free(&err);
}

Test(config, unknown_flag_and_missing_value)
{
	env_reset();
	config c;
	buf err = BUF_INIT;
	char *argv[] = {"w", "--speed", "9"};
	cr_assert_eq(load(&c, &err, 3, argv), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), "unknown option \"--speed\""), "%s", buf_str(&err));
	config_free(&c);
	char *argv2[] = {"w", "--concurrency"};
	cr_assert_eq(load(&c, &err, 2, argv2), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), "needs a value"), "%s", buf_str(&err));
	config_free(&c);
	buf_free(&err);
}

Test(config, ipv6_and_wildcard_addresses)
{
	env_reset();
	config c;
	buf err = BUF_INIT;
	char *argv[] = {"w", "--http-addr", "[::1]:9000"};
	cr_assert_eq(load(&c, &err, 3, argv), 0, "%s", buf_str(&err));
	cr_assert_eq(c.http_sa.ss_family, AF_INET6);
	config_free(&c);
	char *argv2[] = {"w", "--http-addr", ":9000", "--advertise-addr", "worker-1:9000"};
	cr_assert_eq(load(&c, &err, 5, argv2), 0, "%s", buf_str(&err));
	cr_assert_eq(c.http_sa.ss_family, AF_INET);
	config_free(&c);
	buf_free(&err);
}

/* Loads with CAIRN_HTTP_ADDR=http and CAIRN_ADVERTISE_ADDR=adv (NULL: unset);
 * 0 or the error, whose text is left in err. */
static int load_addrs(const char *http, const char *adv, buf *err)
{
	env_reset();
	setenv("CAIRN_HTTP_ADDR", http, 1);
	if (adv)
		setenv("CAIRN_ADVERTISE_ADDR", adv, 1);
	config c;
	char *argv[] = {"w"};
	buf_reset(err);
	int rc = load(&c, err, 1, argv);
	config_free(&c);
	env_reset();
	return rc;
}

Test(config, listening_on_every_interface_requires_an_advertised_address)
{
	buf err = BUF_INIT;
	const char *wild[] = {":8080", "0.0.0.0:8080", "[::]:8080", ":0"};
	for (size_t i = 0; i < sizeof wild / sizeof wild[0]; i++) {
		cr_assert_eq(load_addrs(wild[i], NULL, &err), -CAIRN_EINVAL, "%s accepted",
		             wild[i]);
		const char *m = buf_str(&err);
		cr_assert(strstr(m, "CAIRN_ADVERTISE_ADDR") && strstr(m, "CAIRN_HTTP_ADDR") &&
		              strstr(m, wild[i]) && strstr(m, "HOST:PORT"),
		          "%s: %s", wild[i], m);
		cr_assert_eq(load_addrs(wild[i], "worker-1:8080", &err), 0, "%s: %s", wild[i],
		             buf_str(&err));
	}
	/* One address of this host, port 0 included, needs none. */
	cr_assert_eq(load_addrs("127.0.0.1:0", NULL, &err), 0, "%s", buf_str(&err));
	cr_assert_eq(load_addrs("[::1]:8080", NULL, &err), 0, "%s", buf_str(&err));
	buf_free(&err);
}

Test(config, advertised_address_must_be_a_callable_host_and_port)
{
	buf err = BUF_INIT;
	const char *good[] = {"worker-1:8080", "10.0.0.5:8080", "[fd00::5]:8080",
	                      "host.example.com:0", "worker_2:65535"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		cr_assert_eq(load_addrs("0.0.0.0:8080", good[i], &err), 0, "%s refused: %s",
		             good[i], buf_str(&err));
	const char *bad[] = {"worker-1",     ":8080",          "0.0.0.0:8080",
	                     "[::]:8080",    "worker-1:99999", "worker-1:http",
	                     "fd00::5:8080", "[fd00::5:8080",  "bad host:80"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(load_addrs("127.0.0.1:8080", bad[i], &err), -CAIRN_EINVAL,
		             "%s accepted", bad[i]);
		const char *m = buf_str(&err);
		cr_assert(strstr(m, "CAIRN_ADVERTISE_ADDR") && strstr(m, bad[i]) &&
		              strstr(m, "HOST:PORT") && strstr(m, "not a wildcard"),
		          "%s: %s", bad[i], m);
	}
	buf_free(&err);
}

Test(config, describe_shows_only_host_port_database_and_user_of_the_database)
{
	buf b = BUF_INIT;
	config_describe_db("postgresql://app:s3cret@db:6432/cairn?sslpassword=k3y&sslmode=require"
	                   "&application_name=x",
	                   &b);
	cr_assert_str_eq(buf_str(&b), "host=db port=6432 dbname=cairn user=app");
	buf_reset(&b);
	config_describe_db("host=db password='it s' dbname=x sslkey=/k sslpassword=p", &b);
	cr_assert_str_eq(buf_str(&b), "host=db dbname=x");
	buf_free(&b);
	/* And a proxy URL keeps its user but not its password. */
	config cfg;
	const char *const set[] = {"CAIRN_HTTP_PROXY=http://u:pr0xy@proxy:3128", NULL};
	buf err = BUF_INIT, text = BUF_INIT;
	cr_assert_eq(config_load_settings(&cfg, "postgresql://app:s3cret@db/cairn", set, 0, &err),
	             0, "%s", buf_str(&err));
	config_describe(&cfg, &text);
	cr_assert(!strstr(buf_str(&text), "s3cret") && !strstr(buf_str(&text), "pr0xy") &&
	              strstr(buf_str(&text), "CAIRN_HTTP_PROXY=http://u:****@proxy:3128"),
	          "%s", buf_str(&text));
	config_free(&cfg);
	buf_free(&err);
	buf_free(&text);
}

Test(log, logfmt_quotes_values_and_json_escapes)
{
	char path[] = "/tmp/cairn-log-XXXXXX";
	int fd = mkstemp(path);
	logger lg = {LOG_INFO, LOG_LOGFMT, fd};
	log_kv(&lg, LOG_INFO, "hello world", "k", "plain", "q", "two words", NULL);
	log_kv(&lg, LOG_DEBUG, "hidden", NULL);
	lg.format = LOG_JSON;
	log_kv(&lg, LOG_WARN, "quote \"x\"", "k", "v\n", NULL);
	close(fd);
	char *text = tfile_take(path);
	cr_assert(strstr(text, "level=info msg=\"hello world\" k=plain q=\"two words\"\n"), "%s",
	          text);
	cr_assert(!strstr(text, "hidden"));
	cr_assert(
	    strstr(text, "\"level\":\"warn\",\"msg\":\"quote \\\"x\\\"\",\"k\":\"v\\u000a\"}"),
	    "%s", text);
	free(text);
}

/* ------------------------------------------------ registration input */

static int noop_flow(cairn_ctx *ctx, const struct cJSON *in, struct cJSON **out)
{
	return CAIRN_OK;
}
static int noop_singleton(cairn_singleton *s, void *arg)
{
	return CAIRN_OK;
}

static cairn_worker *worker_for_registration(void)
{
	env_reset();
	setenv("CAIRN_SHARD_GROUPS", "default,billing", 1);
	cairn_worker *w;
	char *argv[] = {"w"};
	cr_assert_eq(cairn_worker_new(1, argv, &w), CAIRN_OK, "%s", cairn_worker_errmsg(w));
	return w;
}

Test(register, workflow_names_are_validated_and_unique)
{
	cairn_worker *w = worker_for_registration();
	cr_assert_eq(cairn_workflow_register(w, "orders.v2", noop_flow, NULL), CAIRN_OK);
	cr_assert_eq(cairn_workflow_register(w, "orders.v2", noop_flow, NULL), CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), "orders.v2 is registered twice"), "%s",
	          cairn_worker_errmsg(w));
	cr_assert_eq(cairn_workflow_register(w, "bad name", noop_flow, NULL), CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), "workflow name"), "%s", cairn_worker_errmsg(w));
	cr_assert_eq(cairn_workflow_register(w, "", noop_flow, NULL), CAIRN_EINVAL);
	cr_assert_eq(cairn_workflow_register(w, "nofn", NULL, NULL), CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), "NULL"), "%s", cairn_worker_errmsg(w));
	cairn_worker_free(w);
}

Test(register, singleton_groups_and_backoff_are_validated)
{
	cairn_worker *w = worker_for_registration();
	cairn_singleton_opts billing = {.group = "billing", .backoff_ms = 50};
	cr_assert_eq(cairn_singleton_register(w, "sweeper", noop_singleton, NULL, &billing),
	             CAIRN_OK);
	cr_assert_eq(cairn_singleton_register(w, "sweeper", noop_singleton, NULL, NULL),
	             CAIRN_EINVAL);
	cairn_singleton_opts nogroup = {.group = "shipping"};
	cr_assert_eq(cairn_singleton_register(w, "other", noop_singleton, NULL, &nogroup),
	             CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), "\"shipping\" is not one of CAIRN_SHARD_GROUPS"),
	          "%s", cairn_worker_errmsg(w));
	cairn_singleton_opts negative = {.backoff_ms = -1};
	cr_assert_eq(cairn_singleton_register(w, "other", noop_singleton, NULL, &negative),
	             CAIRN_EINVAL);
	cr_assert(strstr(cairn_worker_errmsg(w), "backoff_ms is -1"), "%s", cairn_worker_errmsg(w));
	cr_assert_eq(cairn_singleton_register(w, "bad/name", noop_singleton, NULL, NULL),
	             CAIRN_EINVAL);
	cairn_worker_free(w);
}
