/*
 * proxy.h - a TCP proxy in front of the test PostgreSQL that can freeze
 * connections: it stops forwarding without closing anything, so both ends
 * see a connection that is open and silent, as across a network partition
 * or a NAT that dropped its state. It listens on 127.0.0.1 with a port the
 * kernel picks and forwards to the server of a conninfo (its Unix socket,
 * or host:port).
 */
#ifndef CAIRN_TEST_PROXY_H
#define CAIRN_TEST_PROXY_H

typedef struct tproxy tproxy;

/* Starts a proxy to the server of conninfo; cr_asserts on failure. */
tproxy *tproxy_start(const char *conninfo);
/* conninfo with host and port replaced by the proxy's (static storage per
 * proxy; SSL and GSS encryption off, so the startup packet is plain). */
const char *tproxy_conninfo(tproxy *p);
/*
 * Freezes connections: every one when match is NULL, else those whose
 * startup packet contains match (e.g. an application_name such as
 * "cairn-worker commit"), including connections made later. Data already
 * read is held, not dropped.
 */
void tproxy_freeze(tproxy *p, const char *match);
/* Forwards again everything held and everything after. */
void tproxy_thaw(tproxy *p);
/* Connections accepted so far whose startup packet contains match (NULL: all). */
int tproxy_count(tproxy *p, const char *match);
/*
 * Cuts those connections on the client's side only: the client sees its
 * connection closed at once, while the server sees the end only when it
 * next reads (a statement waiting for a lock goes on), as when a connection
 * breaks between the two.
 */
void tproxy_cut(tproxy *p, const char *match);
/* Closes every connection and the listener and joins the threads. */
void tproxy_stop(tproxy *p);
#endif
