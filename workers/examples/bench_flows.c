/*
 * bench_flows.c - the workflows `make bench` needs beyond the built-ins,
 * loaded into cairn-worker as a plugin (--plugin build/examples/bench_flows.so):
 *
 *   bench3   three journaled steps, each returning a small JSON object;
 *            returns {"steps": 3}. Measures the cost of a step's journal write.
 *   stamp    takes {"i": k} and, as its first instruction, writes
 *            clock_gettime(CLOCK_MONOTONIC) in nanoseconds into int64 slot k
 *            of the file named by $BENCH_STAMPS (mapped MAP_SHARED once, on
 *            first use); the bench reads the same clock just before it
 *            enqueues run k, so slot k minus that is the enqueue-to-first-
 *            instruction latency the client sees. Without $BENCH_STAMPS, or
 *            with k outside the file, it writes nothing. Returns null.
 *   long     {"steps": N, "every": K, "sleep_ms": S}: N journaled steps, a
 *            durable sleep of S ms after every K-th (a journal that grows
 *            to N + N / K entries); returns {"steps": N}.
 *   chain    {"n", "until", "sleep_ms"}: a step, a durable sleep of S ms,
 *            then continues as new with n + 1 until n reaches until;
 *            returns {"n": until}.
 *
 * Build: make examples. See workers/examples/greet.c for how plugins work.
 */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"

static int small_step(cairn_ctx *ctx, void *arg, cJSON **result)
{
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddNumberToObject(o, "n", (double)(int)(long)arg)) {
		cJSON_Delete(o);
		return cairn_retryable(ctx, "bench3: out of memory");
	}
	*result = o;
	return CAIRN_OK;
}

static int bench3(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	static const char *const names[] = {"one", "two", "three"};
	for (long i = 0; i < 3; i++) {
		cJSON *r;
		CAIRN_TRY(cairn_step(ctx, names[i], small_step, (void *)i, &r));
	}
	*output = cJSON_CreateObject();
	if (*output)
		cJSON_AddNumberToObject(*output, "steps", 3);
	return CAIRN_OK;
}

static pthread_once_t stamps_once = PTHREAD_ONCE_INIT;
static int64_t *stamps; /* NULL when $BENCH_STAMPS is unset or unusable */
static size_t stamps_n;

static void stamps_map(void)
{
	const char *path = getenv("BENCH_STAMPS");
	if (!path || !*path)
		return;
	int fd = open(path, O_RDWR);
	struct stat st;
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(int64_t)) {
		void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED) {
			stamps = p;
			stamps_n = (size_t)st.st_size / sizeof(int64_t);
		}
	}
	close(fd);
}

static int stamp(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	pthread_once(&stamps_once, stamps_map);
	const cJSON *i = cJSON_GetObjectItemCaseSensitive(input, "i");
	if (stamps && cJSON_IsNumber(i) && i->valuedouble >= 0 && i->valuedouble < (double)stamps_n)
		__atomic_store_n(&stamps[(size_t)i->valuedouble],
		                 (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, __ATOMIC_RELEASE);
	*output = NULL;
	return CAIRN_OK;
}

static int64_t int_in(const cJSON *input, const char *name, int64_t dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(input, name);
	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

static int long_run(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t n = int_in(input, "steps", 10000), every = int_in(input, "every", 10);
	int64_t ms = int_in(input, "sleep_ms", 2);
	for (int64_t i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof name, "s%lld", (long long)i);
		CAIRN_TRY(cairn_step(ctx, name, small_step, (void *)(long)(i % 1000), NULL));
		if (every > 0 && (i + 1) % every == 0) {
			snprintf(name, sizeof name, "nap%lld", (long long)i);
			CAIRN_TRY(cairn_sleep(ctx, name, ms));
		}
	}
	*output = cJSON_CreateObject();
	if (*output)
		cJSON_AddNumberToObject(*output, "steps", (double)n);
	return CAIRN_OK;
}

static int chain(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	int64_t n = int_in(input, "n", 0), until = int_in(input, "until", 1);
	int64_t ms = int_in(input, "sleep_ms", 2);
	CAIRN_TRY(cairn_step(ctx, "work", small_step, (void *)(long)(n % 1000), NULL));
	if (ms > 0)
		CAIRN_TRY(cairn_sleep(ctx, "nap", ms));
	cJSON *out = cJSON_CreateObject();
	if (!out)
		return cairn_retryable(ctx, "chain: out of memory");
	cJSON_AddNumberToObject(out, "n", (double)(n < until ? n + 1 : n));
	if (n >= until) {
		*output = out;
		return CAIRN_OK;
	}
	cJSON_AddNumberToObject(out, "until", (double)until);
	cJSON_AddNumberToObject(out, "sleep_ms", (double)ms);
	int rc = cairn_continue_as_new(ctx, out);
	cJSON_Delete(out);
	return rc;
}

int cairn_plugin_init(cairn_worker *w)
{
	static const struct {
		const char *name;
		cairn_workflow_fn fn;
	} flows[] = {{"bench3", bench3}, {"stamp", stamp}, {"long", long_run}, {"chain", chain}};
	for (size_t i = 0; i < sizeof flows / sizeof flows[0]; i++) {
		int rc = cairn_workflow_register(w, flows[i].name, flows[i].fn, NULL);
		if (rc != CAIRN_OK)
			return rc;
	}
	return 0;
}
