/* metrics.c - the step-duration histogram (see metrics.h). */
#include "metrics.h"

const double METRICS_STEP_BOUNDS_S[METRICS_STEP_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                            0.1,   0.25,   0.5,   1,    2.5,   10};

void metrics_observe_step(metrics *m, int64_t us)
{
	atomic_fetch_add(&m->step_count, 1);
	atomic_fetch_add(&m->step_sum_us, (uint64_t)(us > 0 ? us : 0));
	for (int i = 0; i < METRICS_STEP_BUCKETS; i++)
		if ((double)us / 1e6 <= METRICS_STEP_BOUNDS_S[i])
			atomic_fetch_add(&m->step_buckets[i], 1);
}
