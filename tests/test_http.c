/*
 * test_http.c - the http built-in is no way into the worker's network: it
 * refuses loopback and other non-public addresses at connect time (also
 * after a redirect), unless CAIRN_HTTP_ALLOW opens them; it keeps the
 * request's own headers from a host a redirect leads to; it ignores the
 * proxy environment variables and uses CAIRN_HTTP_PROXY; and a bad
 * CAIRN_HTTP_ALLOW, _PROXY or _TOKEN stops the worker. Against a local
 * server (libmicrohttpd, in this process) and real workers.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

/* ------------------------------------------------------ the local server */

/* What the server saw of the last request to /seen. */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static char seen_auth[256], seen_url[512];
static int seen_n;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
                             const char *location)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	if (location)
		MHD_add_response_header(r, "Location", location);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* GET /seen records the request; GET /to?u=URL redirects there (302);
 * anything else is 404. A request through a proxy names the whole URL. */
static enum MHD_Result serve(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *data,
                             size_t *size, void **state)
{
	if (strstr(url, "/seen")) {
		const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
		pthread_mutex_lock(&seen_mu);
		snprintf(seen_auth, sizeof seen_auth, "%s", auth ? auth : "");
		snprintf(seen_url, sizeof seen_url, "%s", url);
		seen_n++;
		pthread_mutex_unlock(&seen_mu);
		return reply(c, 200, "seen", NULL);
	}
	if (strstr(url, "/to")) {
		const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "u");
		return reply(c, 302, "", to ? to : "/");
	}
	return reply(c, 404, "no such page", NULL);
}

static struct MHD_Daemon *server;
static int server_port;

static void server_start(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	server = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
	                          NULL, serve, NULL, MHD_OPTION_SOCK_ADDR, &a, MHD_OPTION_END);
	cr_assert(server, "cannot start the local HTTP server");
	server_port = MHD_get_daemon_info(server, MHD_DAEMON_INFO_BIND_PORT)->port;
	seen_n = 0;
}

/* ------------------------------------------------------------- helpers */

static const char *db;
static cairn_client *client;
static pid_t worker_pid;
static char worker_log[64];

static void setup(void)
{
	db = tdb_new_migrated();
	cr_assert_eq(cairn_client_open(db, &client), CAIRN_OK, "%s", cairn_client_errmsg(client));
	server_start();
	tlog_file(worker_log);
	worker_pid = 0;
}

static void teardown(void)
{
	if (worker_pid > 0)
		tworker_stop(worker_pid, SIGTERM, 30000);
	MHD_stop_daemon(server);
	cairn_client_free(client);
}

TestSuite(http, .init = setup, .fini = teardown);

/* Starts a worker with up to three more NAME=value variables (NULL: none). */
static void worker(const char *a, const char *b, const char *c)
{
	int port;
	worker_pid =
	    tworker_start(db, &port, worker_log, "CAIRN_POLL_INTERVAL=100ms", a, b, c, NULL);
	cr_assert(worker_pid > 0 && thttp_wait(port, "/readyz", 200, 20000),
	          "the worker never became ready; log in %s", worker_log);
}

/* Runs the http workflow on input to its end; the run (cairn_run_free). */
static cairn_run *run_http(const char *input)
{
	cairn_enqueue_opts o = {.input = input};
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(client, "http", &o, &e), CAIRN_OK, "%s",
	             cairn_client_errmsg(client));
	cairn_enqueued_clear(&e);
	cairn_run *r = NULL;
	cr_assert_eq(cairn_run_wait(client, e.id, 30000), CAIRN_OK,
	             "the http run did not finish: %s (log in %s)", cairn_client_errmsg(client),
	             worker_log);
	cr_assert_eq(cairn_run_get(client, e.id, &r), CAIRN_OK, "%s", cairn_client_errmsg(client));
	return r;
}

static void assert_refused(const cairn_run *r, const char *address, const char *why)
{
	cr_assert_str_eq(r->status, "failed", "%s: %s", r->status, r->output ? r->output : "");
	cr_assert(r->error && strstr(r->error, address) && strstr(r->error, why) &&
	              strstr(r->error, "CAIRN_HTTP_ALLOW"),
	          "the error should name %s, %s and CAIRN_HTTP_ALLOW: %s", address, why,
	          r->error ? r->error : "(none)");
	cr_assert_eq(r->attempt, 1, "a refused address was retried (attempt %d)", r->attempt);
}

static int seen(void)
{
	pthread_mutex_lock(&seen_mu);
	int n = seen_n;
	pthread_mutex_unlock(&seen_mu);
	return n;
}

/* ----------------------------------------------------------------- tests */

Test(http, loopback_and_link_local_addresses_are_refused_by_default_naming_address_and_setting)
{
	worker(NULL, NULL, NULL);
	char in[256];
	snprintf(in, sizeof in, "{\"url\": \"http://127.0.0.1:%d/seen\"}", server_port);
	cairn_run *r = run_http(in);
	assert_refused(r, "127.0.0.1", "loopback");
	cairn_run_free(r);
	r = run_http(
	    "{\"url\": \"http://169.254.169.254/latest/meta-data/\", \"timeout_ms\": 2000}");
	assert_refused(r, "169.254.169.254", "link-local");
	cairn_run_free(r);
	snprintf(in, sizeof in, "{\"url\": \"http://[::1]:%d/seen\"}", server_port);
	r = run_http(in);
	assert_refused(r, "::1", "loopback");
	cairn_run_free(r);
	cr_assert_eq(seen(), 0, "the server was reached %d times", seen());
}

Test(http, documentation_addresses_are_refused_naming_address_and_rule_unless_allowed)
{
	/* The IANA registries' other blocks, documentation among them, are
	 * refused as loopback is: before a connection, with the rule named,
	 * directly and after a redirect from a host the allow list names. */
	worker("CAIRN_HTTP_ALLOW=localhost", NULL, NULL);
	cairn_run *r = run_http("{\"url\": \"http://192.0.2.2/seen\", \"timeout_ms\": 2000}");
	assert_refused(r, "192.0.2.2", "documentation address (192.0.2.0/24, RFC 5737)");
	cairn_run_free(r);
	r = run_http("{\"url\": \"http://[2001:db8::2]/seen\", \"timeout_ms\": 2000}");
	assert_refused(r, "2001:db8::2", "documentation address (2001:db8::/32, RFC 3849)");
	cairn_run_free(r);
	char in[512];
	snprintf(in, sizeof in,
	         "{\"url\": \"http://localhost:%d/to?u=http://203.0.113.9:%d/seen\", "
	         "\"timeout_ms\": 2000}",
	         server_port, server_port);
	r = run_http(in);
	assert_refused(r, "203.0.113.9", "documentation address (203.0.113.0/24, RFC 5737)");
	cairn_run_free(r);
	tworker_stop(worker_pid, SIGTERM, 30000);

	/* Named in CAIRN_HTTP_ALLOW, the block is tried: the run fails on the
	 * connection (nothing answers there), not on the policy. */
	worker("CAIRN_HTTP_ALLOW=192.0.2.0/24", NULL, NULL);
	r = run_http(
	    "{\"url\": \"http://192.0.2.2/seen\", \"timeout_ms\": 1000, \"max_attempts\": 1}");
	cr_assert_str_eq(r->status, "failed", "%s: %s", r->status, r->output ? r->output : "");
	cr_assert(r->error && strstr(r->error, "192.0.2.2") &&
	              !strstr(r->error, "refused to connect"),
	          "the allowed block was refused: %s", r->error ? r->error : "(none)");
	cairn_run_free(r);
	cr_assert_eq(seen(), 0, "the server was reached %d times", seen());
}

Test(http, an_allowed_host_that_redirects_to_a_refused_address_is_stopped_at_connect)
{
	/* localhost is allowed by name, 127.0.0.1 is not: the redirect's
	 * connection is checked, not the name the run asked for. */
	worker("CAIRN_HTTP_ALLOW=localhost", NULL, NULL);
	char in[512];
	snprintf(in, sizeof in, "{\"url\": \"http://localhost:%d/to?u=http://127.0.0.1:%d/seen\"}",
	         server_port, server_port);
	cairn_run *r = run_http(in);
	assert_refused(r, "127.0.0.1", "loopback");
	cairn_run_free(r);
	cr_assert_eq(seen(), 0, "the redirect's target was reached");
}

Test(http, an_allowed_cidr_is_reached_and_headers_stay_with_the_first_host_after_a_redirect)
{
	worker("CAIRN_HTTP_ALLOW=127.0.0.0/8, localhost", NULL, NULL);
	char in[768];
	/* Same host: the request's headers follow. */
	snprintf(in, sizeof in,
	         "{\"url\": \"http://127.0.0.1:%d/to?u=/seen\", \"headers\": {\"Authorization\": "
	         "\"Bearer secret\"}}",
	         server_port);
	cairn_run *r = run_http(in);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cr_assert(strstr(r->output, "seen"), "%s", r->output);
	cairn_run_free(r);
	pthread_mutex_lock(&seen_mu);
	cr_assert_str_eq(seen_auth, "Bearer secret", "a same-host redirect lost the header");
	pthread_mutex_unlock(&seen_mu);
	/* Another host (localhost, the same server): they stay behind. */
	snprintf(in, sizeof in,
	         "{\"url\": \"http://127.0.0.1:%d/to?u=http://localhost:%d/seen\", \"headers\": "
	         "{\"Authorization\": \"Bearer secret\"}}",
	         server_port, server_port);
	r = run_http(in);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	pthread_mutex_lock(&seen_mu);
	cr_assert_str_eq(seen_auth, "", "the Authorization header went to another host: %s",
	                 seen_auth);
	cr_assert_eq(seen_n, 2);
	pthread_mutex_unlock(&seen_mu);
}

Test(http, proxy_variables_are_ignored_and_cairn_http_proxy_is_used)
{
	/* A proxy from the environment that would refuse every request. */
	int closed_fd, closed = tclosed_port(&closed_fd);
	char http_proxy[64], all_proxy[64];
	snprintf(http_proxy, sizeof http_proxy, "http_proxy=http://127.0.0.1:%d", closed);
	snprintf(all_proxy, sizeof all_proxy, "ALL_PROXY=http://127.0.0.1:%d", closed);
	worker("CAIRN_HTTP_ALLOW=127.0.0.1", http_proxy, all_proxy);
	char in[256];
	snprintf(in, sizeof in, "{\"url\": \"http://127.0.0.1:%d/seen\"}", server_port);
	cairn_run *r = run_http(in);
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	pthread_mutex_lock(&seen_mu);
	cr_assert_str_eq(seen_url, "/seen", "not a direct request: %s", seen_url);
	pthread_mutex_unlock(&seen_mu);
	tworker_stop(worker_pid, SIGTERM, 30000);

	/* The configured proxy (the local server) gets the whole URL; the
	 * target is a public name, which the proxy, not the worker, reaches. */
	char proxy[80];
	snprintf(proxy, sizeof proxy, "CAIRN_HTTP_PROXY=http://127.0.0.1:%d", server_port);
	worker(proxy, NULL, NULL);
	r = run_http("{\"url\": \"http://example.com/seen\"}");
	cr_assert_str_eq(r->status, "completed", "%s: %s", r->status, r->error ? r->error : "");
	cairn_run_free(r);
	pthread_mutex_lock(&seen_mu);
	cr_assert_str_eq(seen_url, "http://example.com/seen", "not through the proxy: %s",
	                 seen_url);
	pthread_mutex_unlock(&seen_mu);
	/* Through a proxy, an address or localhost in the URL is still refused. */
	r = run_http("{\"url\": \"http://127.0.0.1/seen\"}");
	assert_refused(r, "127.0.0.1", "loopback");
	cairn_run_free(r);
	r = run_http("{\"url\": \"http://localhost/seen\"}");
	assert_refused(r, "localhost", "loopback");
	cairn_run_free(r);
	close(closed_fd);
}

Test(http, a_bad_allow_list_proxy_or_token_stops_the_worker_at_start_naming_the_setting)
{
	static const char *const bad[][2] = {
	    {"CAIRN_HTTP_ALLOW=10.0.0.0/33", "10.0.0.0/33"},
	    {"CAIRN_HTTP_ALLOW=127.0.0.1,,", "\"\""},
	    {"CAIRN_HTTP_ALLOW=bad host", "bad host"},
	    {"CAIRN_HTTP_PROXY=ftp://proxy:21", "ftp://proxy:21"},
	    {"CAIRN_HTTP_TOKEN=sh0rt", "16 to 256"},
	    {"CAIRN_HTTP_TOKEN=has a space in it, long enough", "16 to 256"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *out = NULL, *err = NULL;
		const char *argv[] = {tbin("cairn-worker"), "--check-config", NULL};
		char dburl[2200];
		snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
		const char *env[] = {dburl, bad[i][0], NULL};
		int rc = trun(argv, env, &out, &err);
		cr_assert_neq(rc, 0, "%s was accepted", bad[i][0]);
		char name[32];
		snprintf(name, sizeof name, "%.*s", (int)strcspn(bad[i][0], "="), bad[i][0]);
		cr_assert(err && strstr(err, name) && strstr(err, bad[i][1]),
		          "%s: the error should name %s and the value: %s", bad[i][0], name,
		          err ? err : "");
		free(out);
		free(err);
	}
}
