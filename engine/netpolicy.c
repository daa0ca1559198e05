/*
 * netpolicy.c - see netpolicy.h. Every address is handled as 16 bytes of
 * IPv6, an IPv4 address as ::ffff:a.b.c.d, so one CIDR check covers both.
 */
#include "netpolicy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HOST_MAX 253

typedef struct cidr {
	uint8_t a[16];
	int bits; /* of the 128 */
} cidr;

struct netpolicy {
	cidr *nets;
	int nnets;
	char **hosts; /* lowercased; ".x" matches every name under x */
	int nhosts;
};

static const uint8_t MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* Why an IPv4 address (host order) is not a public unicast one, or NULL. */
static const char *v4_class(uint32_t v)
{
	if (v >> 24 == 0)
		return "an unspecified address";
	if (v >> 24 == 127)
		return "a loopback address";
	if (v >> 24 == 10 || v >> 20 == (172u << 4 | 1) || v >> 16 == (192u << 8 | 168))
		return "a private address";
	if (v >> 22 == (100u << 2 | 1))
		return "a shared address (carrier-grade NAT)";
	if (v >> 16 == (169u << 8 | 254))
		return "a link-local address";
	if (v >> 28 == 14)
		return "a multicast address";
	if (v == 0xffffffffu)
		return "the broadcast address";
	if (v >> 28 == 15 || v >> 8 == (192u << 16) || v >> 17 == (198u << 7 | 9))
		return "a reserved address";
	return NULL;
}

static uint32_t v4_at(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Why an address is not a public unicast one, or NULL. */
static const char *v6_class(const uint8_t a[16])
{
	static const uint8_t zero[16] = {0};
	static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
	if (memcmp(a, MAPPED, 12) == 0 || memcmp(a, nat64, 12) == 0)
		return v4_class(v4_at(a + 12));
	if (a[0] == 0x20 && a[1] == 0x02) /* 6to4 */
		return v4_class(v4_at(a + 2));
	if (memcmp(a, zero, 15) == 0)
		return a[15] == 0   ? "an unspecified address"
		       : a[15] == 1 ? "a loopback address"
		                    : "a reserved address";
	if (memcmp(a, zero, 12) == 0)
		return "a reserved address"; /* IPv4-compatible, deprecated */
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return "a link-local address";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
		return "a site-local address";
	if ((a[0] & 0xfe) == 0xfc)
		return "a unique-local address";
	if (a[0] == 0xff)
		return "a multicast address";
	return NULL;
}

static int in_cidr(const cidr *c, const uint8_t a[16])
{
	int full = c->bits / 8, rest = c->bits % 8;
	if (memcmp(c->a, a, (size_t)full) != 0)
		return 0;
	if (!rest)
		return 1;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (c->a[full] & mask) == (a[full] & mask);
}

/* "10.0.0.0/8", "::1", "fd00::/8" into c; 0 or -1. */
static int parse_cidr(const char *s, cidr *c)
{
	char addr[64];
	const char *slash = strchr(s, '/');
	size_t len = slash ? (size_t)(slash - s) : strlen(s);
	if (len == 0 || len >= sizeof addr)
		return -1;
	memcpy(addr, s, len);
	addr[len] = '\0';
	int v4 = 0, max = 128;
	struct in_addr a4;
	if (inet_pton(AF_INET, addr, &a4) == 1) {
		memcpy(c->a, MAPPED, 12);
		memcpy(c->a + 12, &a4, 4);
		v4 = 1;
		max = 32;
	} else if (inet_pton(AF_INET6, addr, c->a) != 1) {
		return -1;
	}
	long bits = max;
	if (slash) {
		char *end;
		if (!isdigit((unsigned char)slash[1]) || strlen(slash + 1) > 3)
			return -1;
		bits = strtol(slash + 1, &end, 10);
		if (*end || bits > max)
			return -1;
	}
	c->bits = (int)bits + (v4 ? 96 : 0);
	return 0;
}

/* A host name: letters, digits, '-' and '.', no empty label. */
static int host_ok(const char *h)
{
	size_t n = strlen(h);
	if (n == 0 || n > HOST_MAX || h[0] == '.' || h[n - 1] == '.' || strstr(h, ".."))
		return 0;
	for (const char *p = h; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
			return 0;
	return 1;
}

static int add_host(netpolicy *p, const char *entry)
{
	int suffix = entry[0] == '.' || strncmp(entry, "*.", 2) == 0;
	const char *name = entry + (entry[0] == '.' ? 1 : suffix ? 2 : 0);
	if (!host_ok(name))
		return -1;
	char **hs = realloc(p->hosts, (size_t)(p->nhosts + 1) * sizeof *hs);
	if (!hs)
		return -2;
	p->hosts = hs;
	char *h = malloc(strlen(name) + 2);
	if (!h)
		return -2;
	snprintf(h, strlen(name) + 2, "%s%s", suffix ? "." : "", name);
	for (char *c = h; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	p->hosts[p->nhosts++] = h;
	return 0;
}

int netpolicy_parse(const char *list, netpolicy **out, char *err, size_t errlen)
{
	*out = NULL;
	netpolicy *p = calloc(1, sizeof *p);
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	const char *s = list ? list : "";
	while (*s) {
		size_t len = strcspn(s, ",");
		char entry[HOST_MAX + 8];
		const char *b = s, *e = s + len;
		while (b < e && isspace((unsigned char)*b))
			b++;
		while (e > b && isspace((unsigned char)e[-1]))
			e--;
		int rc = -1;
		if (e > b && (size_t)(e - b) < sizeof entry) {
			memcpy(entry, b, (size_t)(e - b));
			entry[e - b] = '\0';
			cidr c;
			if (parse_cidr(entry, &c) == 0) {
				cidr *ns = realloc(p->nets, (size_t)(p->nnets + 1) * sizeof *ns);
				rc = ns ? 0 : -2;
				if (ns) {
					p->nets = ns;
					p->nets[p->nnets++] = c;
				}
			} else if (!strchr(entry, '/') && !strchr(entry, ':')) {
				rc = add_host(p, entry);
			}
		}
		if (rc == -2)
			snprintf(err, errlen, "out of memory");
		else if (rc)
			snprintf(
			    err, errlen,
			    "\"%.*s\" is not an address, a CIDR (10.0.0.0/8, fd00::/8) or a host "
			    "name (api.internal, .internal for every name under it)",
			    (int)len > 300 ? 300 : (int)len, s);
		if (rc) {
			netpolicy_free(p);
			return -1;
		}
		s += len;
		if (*s == ',')
			s++;
	}
	*out = p;
	return 0;
}

void netpolicy_free(netpolicy *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->nhosts; i++)
		free(p->hosts[i]);
	free(p->hosts);
	free(p->nets);
	free(p);
}

const char *netpolicy_refuses(const netpolicy *p, const struct sockaddr *sa)
{
	uint8_t a[16];
	if (sa->sa_family == AF_INET) {
		memcpy(a, MAPPED, 12);
		memcpy(a + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		return "not an internet address";
	}
	const char *why = v6_class(a);
	for (int i = 0; why && p && i < p->nnets; i++)
		if (in_cidr(&p->nets[i], a))
			why = NULL;
	return why;
}

int netpolicy_allows_host(const netpolicy *p, const char *host)
{
	size_t n = strlen(host);
	for (int i = 0; p && i < p->nhosts; i++) {
		const char *h = p->hosts[i];
		size_t hl = strlen(h);
		if (h[0] == '.' ? n > hl && strcasecmp(host + n - hl, h) == 0
		                : strcasecmp(host, h) == 0)
			return 1;
	}
	return 0;
}
