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
 *
 * Build: make examples. See workers/examples/greet.c for how plugins work.
 */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
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

int cairn_plugin_init(cairn_worker *w)
{
	int rc = cairn_workflow_register(w, "bench3", bench3, NULL);
	return rc != CAIRN_OK ? rc : cairn_workflow_register(w, "stamp", stamp, NULL);
}
