/*
 * plugin_conn.h - what the test plugins (plugin_flows.c, plugin_chaos.c)
 * share: one libpq connection per executor thread (DATABASE_URL of the
 * worker process), opened on first use, reopened after it broke, and closed
 * by a thread-specific-data destructor when the thread ends; and a nap.
 * Static functions, included by one plugin each: the plugins are built
 * without libcairn and must not depend on each other.
 */
#ifndef CAIRN_TEST_PLUGIN_CONN_H
#define CAIRN_TEST_PLUGIN_CONN_H
#include <libpq-fe.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static pthread_key_t conn_key;
static pthread_once_t conn_once = PTHREAD_ONCE_INIT;

static void conn_close(void *c)
{
	PQfinish(c);
}

static void conn_key_make(void)
{
	pthread_key_create(&conn_key, conn_close);
}

/* This thread's connection, named app_name, (re)opened when needed; NULL if
 * the database is unreachable. */
static PGconn *conn_named(const char *app_name)
{
	pthread_once(&conn_once, conn_key_make);
	PGconn *c = pthread_getspecific(conn_key);
	if (c && PQstatus(c) == CONNECTION_OK)
		return c;
	PQfinish(c);
	pthread_setspecific(conn_key, NULL);
	const char *url = getenv("DATABASE_URL");
	const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
	const char *vals[] = {url ? url : "", "3", app_name, NULL};
	c = PQconnectdbParams(keys, vals, 1);
	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	pthread_setspecific(conn_key, c);
	return c;
}

static void nap_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}
#endif
