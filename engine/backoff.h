/* backoff.h - retry policies: defaults and the wait before an attempt. Pure. */
#ifndef CAIRN_BACKOFF_H
#define CAIRN_BACKOFF_H
#include <stdint.h>

#include "cairn.h"

/* The policy with every zero field replaced by its default (cairn.h); a
 * negative jitter (none) becomes -1. Applied to its own result it changes
 * nothing. */
cairn_retry_policy backoff_policy(const cairn_retry_policy *p);

/*
 * The wait after the failed attempt number `attempt` (1-based):
 * initial * multiplier^(attempt-1), capped at max, then spread by the jitter
 * fraction using u in [0, 1) (0.5 gives the nominal value). Never negative.
 */
int64_t backoff_ms(const cairn_retry_policy *p, int attempt, double u);

/*
 * The wait before reconnecting after `failures` failed attempts (0-based):
 * capped exponential backoff from 100 ms with full jitter, u in [0, 1)
 * spreading it over [cap/2, cap] where cap = min(100 ms * 2^failures, cap_ms).
 */
int64_t backoff_reconnect_ms(int failures, int64_t cap_ms, double u);
#endif
