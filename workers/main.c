/*
 * main.c - the stock cairn-worker: parses its flags, builds a worker with
 * cairn_worker_new(), registers the built-in workflows (builtins.c) and runs
 * it; plugins named by CAIRN_PLUGINS / --plugin are loaded by
 * cairn_worker_run(). Everything else lives in libcairn so a user can build
 * the same daemon with their own workflows linked in.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builtins.h"
#include "cairn.h"
#include "notify.h"
#include "sdk.h"

static const char USAGE[] =
    "usage: cairn-worker [--help] [--version] [--check-config] [--NAME VALUE ...]\n"
    "\n"
    "Runs a cairn worker against a shared PostgreSQL: leases shards, executes\n"
    "workflow runs, and serves /healthz, /readyz, /metrics and /status over HTTP.\n"
    "SIGTERM or SIGINT drains (a second signal exits at once). Under systemd\n"
    "(Type=notify) it sends READY=1 once ready, WATCHDOG=1 while its loops are\n"
    "alive when the unit sets WatchdogSec=, and STOPPING=1 when it drains.\n"
    "\n"
    "  --help            show this help\n"
    "  --version         print the version and whether it speaks to systemd\n"
    "  --check-config    validate the configuration, print it (no secrets), exit\n"
    "  --sdk-fds FDS     serve the workflows of the language SDK process that\n"
    "                    started this worker over descriptors FDS (3-19, 5,7,9:\n"
    "                    the control lane first, then the execution lanes)\n"
    "  --sdk-connect P   the same over 1 + CAIRN_CONCURRENCY connections to the\n"
    "                    Unix socket P (docs/protocol.md)\n"
    "\n"
    "Exit codes: 0 drained, 1 a runtime error (the database, a cut-off second\n"
    "signal), 2 a configuration error (a bad setting, a plugin that does not load,\n"
    "a shard count or a schema that does not match the database's).\n"
    "\n"
    "Built-in workflows: noop, sleep {\"ms\": N}, http {\"url\": ...}, order (the demo).\n"
    "\n"
    "Settings come from the environment, overridden by the flag beside each;\n"
    "durations take 500ms, 2s, 1m, 1.5h, 7d:\n";

int main(int argc, char **argv)
{
	int check = 0;
	const char *sdk_fds = NULL, *sdk_path = NULL;
	/* The SDK's options are this program's, not the worker's settings:
	 * take them out of what cairn_worker_new parses. */
	int n = 1;
	for (int i = 1; i < argc; i++) {
		const char **opt = strcmp(argv[i], "--sdk-fds") == 0       ? &sdk_fds
		                   : strcmp(argv[i], "--sdk-connect") == 0 ? &sdk_path
		                                                           : NULL;
		if (opt && i + 1 < argc)
			*opt = argv[++i];
		else
			argv[n++] = argv[i];
	}
	argc = n;
	argv[argc] = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(USAGE, stdout);
			fputs(cairn_worker_settings_help(), stdout);
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("cairn-worker %s (service manager notification: %s)\n",
			       CAIRN_VERSION, notify_support());
			return 0;
		}
		check |= strcmp(argv[i], "--check-config") == 0;
	}
	/* A SIGTERM that comes while the worker starts (loading plugins,
	 * checking the database) waits for cairn_worker_run, which drains at
	 * once, instead of killing the process by default: every thread the
	 * worker starts inherits this mask. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	sdk *lang = NULL;
	if (sdk_fds || sdk_path) {
		char err[512], lanes[16];
		if (sdk_open(sdk_fds, sdk_path, &lang, err, sizeof err) < 0) {
			if (lang)
				sdk_refuse(lang, err);
			sdk_free(lang);
			fprintf(stderr, "cairn-worker: %s\n", err);
			return 2;
		}
		/* One executor per lane. */
		snprintf(lanes, sizeof lanes, "%d", sdk_lanes(lang));
		setenv("CAIRN_CONCURRENCY", lanes, 1);
	}
	cairn_worker *w;
	int rc = cairn_worker_new(argc, argv, &w);
	if (rc) {
		fprintf(stderr, "cairn-worker: %s\n", cairn_worker_errmsg(w));
		if (lang)
			sdk_refuse(lang, cairn_worker_errmsg(w));
		sdk_free(lang);
		cairn_worker_free(w);
		return 2;
	}
	if (check) {
		fputs(cairn_worker_config_text(w), stdout);
		cairn_worker_free(w);
		return 0;
	}
	rc = builtins_register(w);
	if (rc) {
		fprintf(stderr, "cairn-worker: cannot register the built-in workflows: %s: %s\n",
		        cairn_strstatus(rc), cairn_worker_errmsg(w));
		cairn_worker_free(w);
		builtins_shutdown();
		return 1;
	}
	if (lang && (rc = sdk_attach(lang, w)) != CAIRN_OK) {
		sdk_free(lang);
		cairn_worker_free(w);
		builtins_shutdown();
		return 2;
	}
	rc = cairn_worker_run(w);
	if (rc)
		fprintf(stderr, "cairn-worker: %s\n", cairn_worker_errmsg(w));
	/* A cut-off drain or a second signal leaves threads running: exit now,
	 * without freeing what they use (a cut-off drain still exits 0). */
	if (rc == CAIRN_ETIMEOUT || rc == CAIRN_EINTR)
		_exit(rc == CAIRN_EINTR ? 1 : 0);
	cairn_worker_free(w);
	builtins_shutdown();
	/* A setting that cannot work (a plugin that does not load, say) is
	 * exit 2: the systemd unit does not restart it (RestartPreventExitStatus). */
	return rc == CAIRN_EINVAL || rc == CAIRN_ESCHEMA ? 2 : rc ? 1 : 0;
}
