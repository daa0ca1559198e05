/*
 * slow.h - slow HTTP clients for the tests (slowloris): connections that
 * send a request line and then one header line every so often, never ending
 * their headers, from several loopback source addresses; and a probe timed
 * on the client's clock.
 */
#ifndef CAIRN_TEST_SLOW_H
#define CAIRN_TEST_SLOW_H
#include <stdint.h>

typedef struct tslow tslow;

/* Opens n connections to 127.0.0.1:port, bound in turn to the source
 * addresses 127.0.0.10, 127.0.0.11, ... (sources of them), each sending
 * "GET / HTTP/1.1" and then a header line every interval_ms (spread over
 * the interval); one the server closes or refuses is opened again, as an
 * attacker would. Runs on a thread of its own until tslow_stop. */
tslow *tslow_start(int port, int n, int sources, int64_t interval_ms);
/* How many are connected and have sent their request line now. */
int tslow_open(tslow *t);
/* How many of the n have been connected (or tried to be) at least once. */
int tslow_tried(tslow *t);
/* How many of the n have sent their request line at least once. */
int tslow_started(tslow *t);
/* How many times the server closed one (or refused it). */
int tslow_closed(tslow *t);
/* Stops the thread and closes every connection. */
void tslow_stop(tslow *t);

/* GET path on 127.0.0.1:port with headers (NULL-terminated "Name: value",
 * may be NULL), giving up after giveup_ms; the status (0: no answer) and,
 * in *took_ms, how long it took on the client's clock. */
long thttp_timed(int port, const char *path, const char *const *headers, int64_t giveup_ms,
                 int64_t *took_ms);
#endif
