/* backoff.c - exponential backoff with jitter; see backoff.h. */
#include "backoff.h"

cairn_retry_policy backoff_policy(const cairn_retry_policy *p)
{
	cairn_retry_policy d = p ? *p : (cairn_retry_policy){0};
	if (d.max_attempts <= 0)
		d.max_attempts = 3;
	if (d.initial_ms <= 0)
		d.initial_ms = 1000;
	if (d.multiplier < 1.0)
		d.multiplier = 2.0;
	if (d.max_ms <= 0)
		d.max_ms = 60000;
	if (d.max_ms < d.initial_ms)
		d.max_ms = d.initial_ms;
	/* None stays negative, so that a policy this returned comes back the
	 * same: a 0 would be read as "the default" by the next call. */
	if (d.jitter == 0)
		d.jitter = 0.2;
	if (d.jitter < 0)
		d.jitter = -1;
	if (d.jitter > 1)
		d.jitter = 1;
	return d;
}

int64_t backoff_reconnect_ms(int failures, int64_t cap_ms, double u)
{
	int64_t cap = 100LL << (failures < 10 ? (failures > 0 ? failures : 0) : 10);
	if (cap > cap_ms)
		cap = cap_ms;
	return cap / 2 + (int64_t)((double)(cap / 2) * u);
}

int64_t backoff_ms(const cairn_retry_policy *p, int attempt, double u)
{
	cairn_retry_policy d = backoff_policy(p);
	double wait = (double)d.initial_ms;
	for (int i = 1; i < attempt && wait < (double)d.max_ms; i++)
		wait *= d.multiplier;
	if (wait > (double)d.max_ms)
		wait = (double)d.max_ms;
	if (d.jitter > 0)
		wait *= 1.0 + d.jitter * (2.0 * u - 1.0);
	return wait < 0 ? 0 : (int64_t)wait;
}
