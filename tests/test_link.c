/*
 * test_link.c - signals by signed link: `cairn signal-link` prints a URL on a
 * live worker, a POST of it delivers the signal once (with --once), and a
 * tampered, expired, foreign or wrong-run token, a GET, a body that is no
 * JSON or too big, each get their own answer and deliver nothing. Against a
 * real worker running the `order` demo, which waits for its approval.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn.h"
#include "link.h"
#include "support.h"

#define KEY       "q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="
#define OTHER_KEY "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

static const char *db;
static cairn_client *client;
static pid_t worker_pid;
static int port;
static char worker_log[64];

static void setup(void)
{
	db = tdb_new_migrated_shards(16);
	cr_assert_eq(cairn_client_open(db, &client), CAIRN_OK, "%s", cairn_client_errmsg(client));
	tlog_file(worker_log);
	worker_pid = tworker_start(db, &port, worker_log, "CAIRN_SIGNING_KEY=" KEY,
	                           "CAIRN_POLL_INTERVAL=100ms", NULL);
	cr_assert(thttp_wait(port, "/readyz", 200, 20000),
	          "the worker never became ready; log in %s", worker_log);
}

static void teardown(void)
{
	tworker_stop(worker_pid, SIGTERM, 30000);
	cairn_client_free(client);
}

TestSuite(link, .init = setup, .fini = teardown);

static size_t keep(char *p, size_t size, size_t n, void *arg)
{
	buf_append(arg, p, size * n);
	return size * n;
}

/* method url with body (NULL: none) of len bytes: the status, the reply in
 * *reply. */
static long call_n(const char *method, const char *url, const char *body, size_t len, buf *reply)
{
	CURL *h = curl_easy_init();
	buf_reset(reply);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 15000L);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, reply);
	struct curl_slist *hd = curl_slist_append(NULL, "Expect:");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
	}
	long status = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hd);
	curl_easy_cleanup(h);
	return status;
}

static long call(const char *method, const char *url, const char *body, buf *reply)
{
	return call_n(method, url, body, body ? strlen(body) : 0, reply);
}

/* An order run, waiting for its approval. */
static int64_t waiting_order(void)
{
	cairn_enqueue_opts o = {.input = "{\"item\": \"book\", \"amount\": 12}"};
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(client, "order", &o, &e), CAIRN_OK, "%s",
	             cairn_client_errmsg(client));
	PGconn *c = tdb_connect(db);
	cr_assert(tdb_wait_at_leastf(c, 1, 20000,
	                             "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	                             " AND status = 'waiting'",
	                             e.id),
	          "the order never waited for its approval; log in %s", worker_log);
	PQfinish(c);
	return e.id;
}

/* `cairn signal-link` with extra arguments; its URL (caller frees). */
static char *cli_link(int64_t run, const char *a, const char *b)
{
	char ref[32], dburl[2200];
	snprintf(ref, sizeof ref, "%" PRId64, run);
	snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
	const char *argv[] = {tbin("cairn"), "signal-link", ref, "approval", a, b, NULL};
	const char *env[] = {dburl, "CAIRN_SIGNING_KEY=" KEY, "CAIRN_PUBLIC_URL", NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(argv, env, &out, &err);
	cr_assert_eq(rc, 0, "cairn signal-link: %s", err);
	free(err);
	out[strcspn(out, "\n")] = '\0';
	return out;
}

/* A URL on the worker for a token made here. */
static void url_of(const char *key_b64, link_claims *c, char *url, size_t n)
{
	unsigned char key[LINK_KEY_BYTES];
	char err[256];
	cr_assert_eq(link_key_parse(key_b64, key, err, sizeof err), 0, "%s", err);
	buf tok = BUF_INIT;
	cr_assert_eq(link_make(key, c, &tok), 0);
	snprintf(url, n, "http://127.0.0.1:%d/signal/%s", port, buf_str(&tok));
	buf_free(&tok);
}

static void run_is(int64_t id, const char *status, const char *in_output)
{
	cr_assert_eq(cairn_run_wait(client, id, 20000), CAIRN_OK, "%s",
	             cairn_client_errmsg(client));
	cairn_run *r;
	cr_assert_eq(cairn_run_get(client, id, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, status, "%s", r->error ? r->error : "");
	cr_assert(strstr(r->output, in_output), "%s", r->output);
	cairn_run_free(r);
}

Test(link, a_once_link_delivers_its_signal_once_and_a_second_post_gets_409)
{
	int64_t id = waiting_order();
	char *url = cli_link(id, "--once", "--ttl=1h");
	char prefix[64];
	snprintf(prefix, sizeof prefix, "http://127.0.0.1:%d/signal/v1.", port);
	cr_assert(strncmp(url, prefix, strlen(prefix)) == 0, "not on the live worker: %s", url);
	buf reply = BUF_INIT;
	cr_assert_eq(call("GET", url, NULL, &reply), 405, "%s", buf_str(&reply));
	cr_assert_eq(call("POST", url, "{not json", &reply), 400, "%s", buf_str(&reply));
	cr_assert_eq(call("POST", url, "{\"approved\": true, \"by\": \"ana\"}", &reply), 202, "%s",
	             buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "\"delivered\":true"), "%s", buf_str(&reply));
	run_is(id, "completed", "\"approved_by\": \"ana\"");
	cr_assert_eq(call("POST", url, "{\"approved\": false}", &reply), 409, "%s",
	             buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "used already"), "%s", buf_str(&reply));
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64, id),
	             1, "the second POST wrote a signal");
	PQfinish(c);
	free(url);
	buf_free(&reply);
}

Test(link, tampered_expired_foreign_and_wrong_run_tokens_get_403_and_deliver_nothing)
{
	int64_t id = waiting_order();
	char *good = cli_link(id, NULL, NULL);
	buf reply = BUF_INIT;
	char url[1024];
	/* One character of the signature changed. */
	snprintf(url, sizeof url, "%s", good);
	char *last = url + strlen(url) - 2;
	*last = *last == 'A' ? 'B' : 'A';
	cr_assert_eq(call("POST", url, "true", &reply), 403, "%s", buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "signature"), "%s", buf_str(&reply));
	link_claims c = {.run_id = id, .signal = "approval", .expires_unix = time(NULL) - 5};
	url_of(KEY, &c, url, sizeof url);
	cr_assert_eq(call("POST", url, "true", &reply), 403, "%s", buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "expired"), "%s", buf_str(&reply));
	c.expires_unix = time(NULL) + 600;
	url_of(OTHER_KEY, &c, url, sizeof url);
	cr_assert_eq(call("POST", url, "true", &reply), 403, "%s", buf_str(&reply));
	c.run_id = id + 1000;
	url_of(KEY, &c, url, sizeof url);
	cr_assert_eq(call("POST", url, "true", &reply), 403, "%s", buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "not found"), "%s", buf_str(&reply));
	snprintf(url, sizeof url, "http://127.0.0.1:%d/signal/v1.garbage", port);
	cr_assert_eq(call("POST", url, "true", &reply), 403, "%s", buf_str(&reply));
	/* A body over 64 KiB. */
	char *big = malloc(70000);
	memset(big, ' ', 69999);
	big[0] = '1';
	big[69999] = '\0';
	cr_assert_eq(call("POST", good, big, &reply), 413, "%s", buf_str(&reply));
	free(big);
	PGconn *pg = tdb_connect(db);
	cr_assert_eq(tdb_intf(pg, "SELECT count(*) FROM cairn.signals"), 0,
	             "a refused link wrote a signal");
	PQfinish(pg);
	/* The link that may be used again works, and after the run finished
	 * answers 409. */
	cr_assert_eq(call("POST", good, "true", &reply), 202, "%s", buf_str(&reply));
	run_is(id, "completed", "\"approved_by\": null");
	cr_assert_eq(call("POST", good, "true", &reply), 409, "%s", buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "finished"), "%s", buf_str(&reply));
	free(good);
	buf_free(&reply);
}

Test(link, a_worker_without_a_signing_key_refuses_links_and_the_cli_needs_the_key)
{
	int other;
	char log[64];
	tlog_file(log);
	pid_t w = tworker_start(db, &other, log, NULL);
	cr_assert(thttp_wait(other, "/readyz", 200, 20000));
	link_claims c = {.run_id = 1, .signal = "approval", .expires_unix = time(NULL) + 60};
	char url[1024];
	url_of(KEY, &c, url, sizeof url);
	char *p = strstr(url, "/signal/");
	char moved[1100];
	snprintf(moved, sizeof moved, "http://127.0.0.1:%d%s", other, p);
	buf reply = BUF_INIT;
	cr_assert_eq(call("POST", moved, "true", &reply), 404, "%s", buf_str(&reply));
	cr_assert(strstr(buf_str(&reply), "CAIRN_SIGNING_KEY"), "%s", buf_str(&reply));
	buf_free(&reply);
	tworker_stop(w, SIGTERM, 30000);
	/* The CLI refuses without a key, with a bad one, and a bad --ttl. */
	char dburl[2200];
	snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
	static const char *const bad[][3] = {
	    {"CAIRN_SIGNING_KEY", "--ttl=1h", "CAIRN_SIGNING_KEY: it is not set"},
	    {"CAIRN_SIGNING_KEY=c2hvcnQ=", "--ttl=1h", "32 random bytes"},
	    {"CAIRN_SIGNING_KEY=" KEY, "--ttl=400d", "--ttl \"400d\""},
	    {"CAIRN_SIGNING_KEY=" KEY, "--ttl=0s", "1s to 365d"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *argv[] = {tbin("cairn"), "signal-link", "1",
		                      "approval",    bad[i][1],     NULL};
		const char *env[] = {dburl, bad[i][0], NULL};
		char *out = NULL, *err = NULL;
		cr_assert_eq(trun(argv, env, &out, &err), 2, "%s %s was accepted", bad[i][0],
		             bad[i][1]);
		cr_assert(strstr(err, bad[i][2]), "%s: %s", bad[i][0], err);
		free(out);
		free(err);
	}
}

/*
 * Before, a worker without encryption keys answered such a payload 503
 * (PostgreSQL refused it), and one with keys delivered it, sealed, to a run
 * that would read "a\u0000b" as "a".
 */
Test(link, a_payload_that_is_not_utf8_or_holds_nul_gets_400_and_delivers_nothing)
{
	int64_t id = waiting_order();
	char *url = cli_link(id, "--ttl=1h", NULL);
	const char *token = strstr(url, "/signal/");
	cr_assert(token, "%s", url);
	char keyed_log[64];
	int keyed_port;
	pid_t keyed =
	    tworker_start(db, &keyed_port, tlog_file(keyed_log), "CAIRN_SIGNING_KEY=" KEY,
	                  "CAIRN_ENCRYPTION_KEYS=k1=" OTHER_KEY, "CAIRN_POLL_INTERVAL=100ms", NULL);
	static const char nul[] = "{\"approved\": true}\0 and more";
	const struct {
		const char *body;
		size_t len;
		const char *says;
	} bad[] = {
	    {"\"\xff\xfe\"", 4, "signal payload is not valid UTF-8 (0xff) at byte 2"},
	    {"{\"approved\": true, \"by\": \"a\\u0000b\"}", 36,
	     "signal payload holds \\\\u0000 (the NUL character) at byte 28, in $.by:"},
	    {nul, sizeof nul - 1, "signal payload holds a NUL byte at byte 19"},
	};
	buf reply = BUF_INIT;
	int ports[] = {port, keyed_port};
	for (size_t w = 0; w < 2; w++) {
		char at[1200];
		snprintf(at, sizeof at, "http://127.0.0.1:%d%s", ports[w], token);
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			long st = call_n("POST", at, bad[i].body, bad[i].len, &reply);
			cr_assert_eq(st, 400, "worker %zu, case %zu: %ld %s", w, i, st,
			             buf_str(&reply));
			cr_assert(strstr(buf_str(&reply), bad[i].says), "worker %zu, case %zu: %s",
			          w, i, buf_str(&reply));
		}
	}
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_intf(c, "SELECT count(*) FROM cairn.signals WHERE run_id = %" PRId64, id),
	             0, "a refused payload was delivered");
	PQfinish(c);
	tworker_stop(keyed, SIGTERM, 30000);
	free(url);
	buf_free(&reply);
}
