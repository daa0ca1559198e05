/*
 * clock.h - the one place cairn reads clocks: the monotonic clock for
 * intervals and deadlines, the wall clock for timestamps people read, and
 * condition variables that wait on the monotonic clock (so a wall-clock jump
 * never stretches or cuts a wait). Pure: no state of its own.
 */
#ifndef CAIRN_CLOCK_H
#define CAIRN_CLOCK_H
#include <pthread.h>
#include <stdint.h>

/* Milliseconds on the monotonic clock (for intervals and deadlines only). */
int64_t clock_mono_ms(void);
/* Milliseconds since the Unix epoch (for timestamps). */
int64_t clock_unix_ms(void);
/* Initialises cv to time its waits on the monotonic clock; 0 or -CAIRN_ENOMEM. */
int clock_cond_init(pthread_cond_t *cv);
/* Waits on cv (mu held) for at most ms; returns at once when ms <= 0. */
void clock_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);
#endif
