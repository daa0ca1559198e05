/*
 * bench_load.c - the enqueuing half of `make bench`'s comparison with an
 * older build (BENCH_BASELINE, see tests/bench.c). It is compiled against
 * each build's own include/cairn.h and lib/libcairn.a, so that a build's
 * runs are written by that build's client into that build's schema; it uses
 * only the client calls every build since the batch enqueue has
 * (cairn_client_open, cairn_enqueue, cairn_enqueue_batch), and keeps to
 * their oldest form.
 *
 *   bench_load batch WORKFLOW N PREFIX    N runs keyed PREFIX0.. in batches
 *                                         of 5,000; prints the seconds
 *   bench_load one WORKFLOW N PREFIX T    N runs one by one from T threads,
 *                                         a client each; prints runs/s
 *
 * The database is $DATABASE_URL. Exit 0, or 1 with the client's message.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn.h"

enum { BATCH = 5000, MAX_THREADS = 64 };

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int enqueue_batched(cairn_client *c, const char *workflow, int n, const char *prefix)
{
	cairn_enqueue_opts *o = calloc(BATCH, sizeof *o);
	cairn_enqueued *out = calloc(BATCH, sizeof *out);
	char(*k)[64] = calloc(BATCH, sizeof *k);
	int rc = o && out && k ? 0 : -1;
	for (int i = 0; rc == 0 && i < n; i += BATCH) {
		int m = n - i < BATCH ? n - i : BATCH;
		memset(o, 0, BATCH * sizeof *o);
		for (int j = 0; j < m; j++) {
			snprintf(k[j], sizeof k[j], "%s%d", prefix, i + j);
			o[j].key = k[j];
			o[j].input = "{}";
		}
		if (cairn_enqueue_batch(c, workflow, (size_t)m, o, out) != CAIRN_OK)
			rc = -1;
	}
	free(o);
	free(out);
	free(k);
	return rc;
}

typedef struct one_arg {
	const char *url, *workflow, *prefix;
	int from, to, failed;
	char err[256];
} one_arg;

static void *enqueue_one_by_one(void *p)
{
	one_arg *a = p;
	cairn_client *c = NULL;
	if (cairn_client_open(a->url, &c) != CAIRN_OK) {
		snprintf(a->err, sizeof a->err, "%s", c ? cairn_client_errmsg(c) : "out of memory");
		a->failed = 1;
		cairn_client_free(c);
		return NULL;
	}
	char key[64];
	for (int i = a->from; i < a->to && !a->failed; i++) {
		cairn_enqueue_opts o;
		cairn_enqueued e;
		memset(&o, 0, sizeof o);
		memset(&e, 0, sizeof e);
		snprintf(key, sizeof key, "%s%d", a->prefix, i);
		o.key = key;
		o.input = "{}";
		if (cairn_enqueue(c, a->workflow, &o, &e) != CAIRN_OK) {
			snprintf(a->err, sizeof a->err, "%s", cairn_client_errmsg(c));
			a->failed = 1;
		}
	}
	cairn_client_free(c);
	return NULL;
}

static int usage(void)
{
	fprintf(stderr,
	        "usage: bench_load batch WORKFLOW N PREFIX | one WORKFLOW N PREFIX THREADS\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *url = getenv("DATABASE_URL");
	if (argc < 5 || !url)
		return usage();
	int n = atoi(argv[3]);
	if (n <= 0)
		return usage();
	if (strcmp(argv[1], "batch") == 0) {
		cairn_client *c = NULL;
		if (cairn_client_open(url, &c) != CAIRN_OK) {
			fprintf(stderr, "bench_load: %s\n",
			        c ? cairn_client_errmsg(c) : "out of memory");
			cairn_client_free(c);
			return 1;
		}
		double t0 = now_s();
		int rc = enqueue_batched(c, argv[2], n, argv[4]);
		double secs = now_s() - t0;
		if (rc)
			fprintf(stderr, "bench_load: %s\n", cairn_client_errmsg(c));
		else
			printf("%.6f\n", secs);
		cairn_client_free(c);
		return rc ? 1 : 0;
	}
	if (strcmp(argv[1], "one") != 0 || argc < 6)
		return usage();
	int t = atoi(argv[5]);
	if (t <= 0 || t > MAX_THREADS)
		return usage();
	one_arg a[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	double t0 = now_s();
	for (int i = 0; i < t; i++) {
		a[i] = (one_arg){.url = url,
		                 .workflow = argv[2],
		                 .prefix = argv[4],
		                 .from = (int)((int64_t)n * i / t),
		                 .to = (int)((int64_t)n * (i + 1) / t)};
		pthread_create(&th[i], NULL, enqueue_one_by_one, &a[i]);
	}
	int failed = 0;
	for (int i = 0; i < t; i++) {
		pthread_join(th[i], NULL);
		if (a[i].failed) {
			fprintf(stderr, "bench_load: %s\n", a[i].err);
			failed = 1;
		}
	}
	double secs = now_s() - t0;
	if (!failed)
		printf("%.1f\n", n / secs);
	return failed;
}
