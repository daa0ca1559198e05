/*
 * netpolicy.h - where the http built-in may connect (CAIRN_HTTP_ALLOW).
 * Pure: no I/O.
 *
 * By default an address is refused when it is not a public unicast one:
 * loopback, private (RFC 1918, shared 100.64/10), link-local, unique-local,
 * multicast, unspecified, broadcast or reserved, IPv4 also when embedded in
 * IPv6 (::ffff:a.b.c.d, 64:ff9b::/96, 2002::/16). The allow list opens
 * exceptions, comma-separated: an address or CIDR (10.1.2.3, 10.0.0.0/8,
 * fd00::/8) allows those addresses; a host name (api.internal) allows every
 * address that name connects to, and a leading dot or "*." (.internal,
 * *.internal) every name under it.
 */
#ifndef CAIRN_NETPOLICY_H
#define CAIRN_NETPOLICY_H
#include <stddef.h>
#include <sys/socket.h>

typedef struct netpolicy netpolicy;

/* Parses an allow list ("" or NULL: no exceptions) into *out; 0, or -1 with
 * err naming the entry that is neither an address, a CIDR nor a host name
 * (or out of memory). */
int netpolicy_parse(const char *list, netpolicy **out, char *err, size_t errlen);
void netpolicy_free(netpolicy *p);
/* Why a connection to sa is refused ("a loopback address", ...), or NULL
 * when it is allowed. p may be NULL (no exceptions). */
const char *netpolicy_refuses(const netpolicy *p, const struct sockaddr *sa);
/* Whether the list names host (case-insensitive; an IP literal is checked
 * with netpolicy_refuses instead). */
int netpolicy_allows_host(const netpolicy *p, const char *host);
#endif
