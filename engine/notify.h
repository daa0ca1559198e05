/*
 * notify.h - the worker's messages to its service manager (systemd's
 * sd_notify protocol, through libsystemd): READY=1 once /readyz would answer
 * 200, WATCHDOG=1 while every loop of the watchdog (watchdog.h) is alive,
 * STOPPING=1 when the drain begins. Each is a no-op when the process was not
 * started by a service manager ($NOTIFY_SOCKET unset) and when cairn was
 * built without libsystemd.
 *
 * Owns nothing: libsystemd keeps no state between calls.
 */
#ifndef CAIRN_NOTIFY_H
#define CAIRN_NOTIFY_H
#include <stdint.h>

/* Whether this build speaks to systemd: "systemd" or "none". */
const char *notify_support(void);
/* Sends one state line ("READY=1"): 1 sent, 0 nobody listens, <0 failed. */
int notify_send(const char *state);
/* The watchdog interval the service manager asked for ($WATCHDOG_USEC), in
 * ms; 0 when it asked for none. */
int64_t notify_watchdog_ms(void);
#endif
