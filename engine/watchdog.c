/* watchdog.c - loop heartbeats for /healthz (see watchdog.h). */
#include "watchdog.h"

#include "clock.h"

watch *watchdog_add(watchdog *d, const char *name, int64_t interval_ms)
{
	if (d->n >= WATCHDOG_MAX)
		return NULL;
	watch *w = &d->w[d->n++];
	w->name = name;
	w->interval_ms = interval_ms;
	watch_stamp(w);
	return w;
}

void watch_stamp(watch *w)
{
	atomic_store(&w->stamp_ms, clock_mono_ms());
}

const char *watchdog_stale(watchdog *d)
{
	int64_t now = clock_mono_ms();
	for (int i = 0; i < d->n; i++) {
		int64_t stamp = atomic_load(&d->w[i].stamp_ms);
		if (now - stamp > 3 * d->w[i].interval_ms + 1000)
			return d->w[i].name;
	}
	return NULL;
}
