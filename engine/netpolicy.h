/*
 * netpolicy.h - where the http built-in may connect (CAIRN_HTTP_ALLOW).
 * Pure: no I/O.
 *
 * By default an address is refused when it is not globally reachable:
 * every block of the IANA IPv4 and IPv6 Special-Purpose Address Registries
 * that the registry does not mark globally reachable (loopback, private,
 * shared, link-local, unique-local, documentation, benchmarking, discard,
 * the IETF's protocol blocks but for their global exceptions, ...), plus
 * multicast, broadcast, reserved 240.0.0.0/4 and the deprecated site-local
 * fec0::/10; one table in netpolicy.c lists them with their RFCs. An
 * address that carries an IPv4 address (IPv4-mapped ::ffff:0:0/96,
 * IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged by
 * that address; Teredo (2001::/32) is refused outright. The allow list
 * opens exceptions, comma-separated: an address or CIDR (10.1.2.3,
 * 10.0.0.0/8, fd00::/8) allows the addresses connected to that it holds
 * (an IPv4 one also in its IPv4-mapped form, not inside NAT64 or 6to4); a
 * host name (api.internal) allows every address that name connects to,
 * and a leading dot or "*." (.internal, *.internal) every name under it.
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
/* Room for netpolicy_refuses's reason. */
#define NETPOLICY_WHY_MAX 256

/* Whether a connection to sa is refused: NULL when it is allowed, else why,
 * the reason written into why (len bytes, NETPOLICY_WHY_MAX is enough): what
 * the address is and the rule, "a TEST-NET-1 documentation address
 * (192.0.2.0/24, RFC 5737)". p may be NULL (no exceptions). */
const char *netpolicy_refuses(const netpolicy *p, const struct sockaddr *sa, char *why, size_t len);
/* Whether the list names host (case-insensitive; an IP literal is checked
 * with netpolicy_refuses instead). */
int netpolicy_allows_host(const netpolicy *p, const char *host);
#endif
