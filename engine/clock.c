/*
 * clock.c - monotonic and wall clocks, and monotonic condition-variable
 * waits (see clock.h). Used by every module that sleeps, times out or stamps.
 */
#include "clock.h"

#include <time.h>

#include "cairn.h"

static int64_t read_ms(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_ms(void)
{
	return read_ms(CLOCK_MONOTONIC);
}

int64_t clock_unix_ms(void)
{
	return read_ms(CLOCK_REALTIME);
}

int clock_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0)
		return -CAIRN_ENOMEM;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
	return rc ? -CAIRN_ENOMEM : 0;
}

void clock_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	if (ms <= 0)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}
