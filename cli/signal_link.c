/*
 * signal_link.c - `cairn signal-link`: prints a URL that sends a signal to a
 * run when POSTed, its token signed here with CAIRN_SIGNING_KEY (the
 * workers' key), on CAIRN_PUBLIC_URL or else a live worker's address. The
 * link itself needs no database access to work.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn.h"
#include "commands.h"
#include "link.h"
#include "parse.h"

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

const cli_opt SIGNAL_LINK_OPTS[] = {{"ttl", 1}, {"once", 0}, {"db", 1}, {"help", 0}, {NULL, 0}};

int cmd_signal_link(int argc, char **argv)
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
	int code = cli_open_run("signal-link", &a, &c, &id);
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
