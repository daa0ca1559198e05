/*
 * notify.c - sd_notify for the worker (see notify.h). worker.c calls it from
 * the main thread's wait loop: once ready, every half watchdog interval, and
 * when the drain begins.
 */
#include "notify.h"

#ifdef CAIRN_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

const char *notify_support(void)
{
	return "systemd";
}

int notify_send(const char *state)
{
	return sd_notify(0, state);
}

int64_t notify_watchdog_ms(void)
{
	uint64_t usec = 0;
	return sd_watchdog_enabled(0, &usec) > 0 ? (int64_t)(usec / 1000) : 0;
}
#else
const char *notify_support(void)
{
	return "none";
}

int notify_send(const char *state)
{
	(void)state;
	return 0;
}

int64_t notify_watchdog_ms(void)
{
	return 0;
}
#endif
