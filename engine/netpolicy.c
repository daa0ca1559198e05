/*
 * netpolicy.c - see netpolicy.h. Every address is handled as 16 bytes of
 * IPv6, an IPv4 address as ::ffff:a.b.c.d, so one CIDR check covers both,
 * and one table (SPECIAL) says which addresses are not public.
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

/* What a row of SPECIAL says of the addresses in its block. */
enum reach {
	REFUSED, /* not globally reachable */
	GLOBAL,  /* globally reachable: an exception inside a refused block */
	EMBEDS,  /* judged by the IPv4 address it carries, at byte `at` */
};

/*
 * Which addresses are not public, in one table: the most specific row whose
 * block holds an address judges it; an address no row holds is public.
 *
 * The rows are the IANA IPv4 and IPv6 Special-Purpose Address Registries
 * (iana-ipv4-special-registry, iana-ipv6-special-registry, RFC 6890 and
 * RFC 8190; as updated to 2025-04, 100:0:0:1::/64 the latest), every entry
 * whatever its "Globally Reachable" value, each with the RFC the registry
 * names: False, or no value (a terminated entry), is REFUSED; True is
 * GLOBAL, which matters where the block lies inside a refused one
 * (192.0.0.9 in 192.0.0.0/24, 2001:3::/32 in 2001::/23) and changes
 * nothing elsewhere. Then what those registries leave out and is no
 * unicast destination either: IPv4 multicast (RFC 5771), IPv6 multicast,
 * the deprecated site-local fec0::/10 and the IPv4-compatible ::/96.
 *
 * EMBEDS rows are where the registry's value does not say where a
 * connection ends up. IPv4-mapped (False; but it is how this module writes
 * an IPv4 address), IPv4-compatible (deprecated, not in the registry),
 * NAT64's well-known prefix (True, through a translator to the IPv4
 * address it carries) and 6to4 (N/A) are judged by the IPv4 address they
 * carry. Teredo (N/A) is refused whatever it carries: it leads through a
 * relay to a host behind a NAT, named by an obfuscated address, which is
 * no target an http step needs.
 */
static const struct special {
	const char *block;
	enum reach reach;
	int at; /* EMBEDS: the byte of the 16 where the IPv4 address starts */
	const char *what;
	const char *rfc;
} SPECIAL[] = {
    /* IPv4 Special-Purpose Address Registry */
    {"0.0.0.0/8", REFUSED, 0, "a \"this network\" address", "RFC 791"},
    {"0.0.0.0/32", REFUSED, 0, "the unspecified address", "RFC 1122"},
    {"10.0.0.0/8", REFUSED, 0, "a private address", "RFC 1918"},
    {"100.64.0.0/10", REFUSED, 0, "a shared (carrier-grade NAT) address", "RFC 6598"},
    {"127.0.0.0/8", REFUSED, 0, "a loopback address", "RFC 1122"},
    {"169.254.0.0/16", REFUSED, 0, "a link-local address", "RFC 3927"},
    {"172.16.0.0/12", REFUSED, 0, "a private address", "RFC 1918"},
    {"192.0.0.0/24", REFUSED, 0, "an IETF protocol assignment", "RFC 6890"},
    {"192.0.0.0/29", REFUSED, 0, "an IPv4 service continuity address", "RFC 7335"},
    {"192.0.0.8/32", REFUSED, 0, "the IPv4 dummy address", "RFC 7600"},
    {"192.0.0.9/32", GLOBAL, 0, "the Port Control Protocol anycast address", "RFC 7723"},
    {"192.0.0.10/32", GLOBAL, 0, "the TURN anycast address", "RFC 8155"},
    {"192.0.0.170/32", REFUSED, 0, "a NAT64/DNS64 discovery address", "RFC 8880, RFC 7050"},
    {"192.0.0.171/32", REFUSED, 0, "a NAT64/DNS64 discovery address", "RFC 8880, RFC 7050"},
    {"192.0.2.0/24", REFUSED, 0, "a TEST-NET-1 documentation address", "RFC 5737"},
    {"192.31.196.0/24", GLOBAL, 0, "an AS112 address", "RFC 7535"},
    {"192.52.193.0/24", GLOBAL, 0, "an AMT address", "RFC 7450"},
    {"192.88.99.0/24", REFUSED, 0, "a deprecated 6to4 relay anycast address", "RFC 7526"},
    {"192.88.99.2/32", REFUSED, 0, "the 6a44 relay anycast address", "RFC 6751"},
    {"192.168.0.0/16", REFUSED, 0, "a private address", "RFC 1918"},
    {"192.175.48.0/24", GLOBAL, 0, "an AS112 direct delegation address", "RFC 7534"},
    {"198.18.0.0/15", REFUSED, 0, "a benchmarking address", "RFC 2544"},
    {"198.51.100.0/24", REFUSED, 0, "a TEST-NET-2 documentation address", "RFC 5737"},
    {"203.0.113.0/24", REFUSED, 0, "a TEST-NET-3 documentation address", "RFC 5737"},
    {"240.0.0.0/4", REFUSED, 0, "a reserved address", "RFC 1112"},
    {"255.255.255.255/32", REFUSED, 0, "the limited broadcast address", "RFC 919, RFC 8190"},
    /* IPv4 Multicast Address Space Registry */
    {"224.0.0.0/4", REFUSED, 0, "a multicast address", "RFC 5771"},
    /* IPv6 Special-Purpose Address Registry */
    {"::1/128", REFUSED, 0, "the loopback address", "RFC 4291"},
    {"::/128", REFUSED, 0, "the unspecified address", "RFC 4291"},
    {"::ffff:0:0/96", EMBEDS, 12, "an IPv4-mapped address", "RFC 4291"},
    {"64:ff9b::/96", EMBEDS, 12, "a NAT64 address", "RFC 6052"},
    {"64:ff9b:1::/48", REFUSED, 0, "a local-use NAT64 address", "RFC 8215"},
    {"100::/64", REFUSED, 0, "a discard-only address", "RFC 6666"},
    {"100:0:0:1::/64", REFUSED, 0, "a dummy-prefix address", "RFC 9780"},
    {"2001::/23", REFUSED, 0, "an IETF protocol assignment", "RFC 2928"},
    {"2001::/32", REFUSED, 0, "a Teredo address, refused whatever IPv4 addresses it carries",
     "RFC 4380, RFC 8190"},
    {"2001:1::1/128", GLOBAL, 0, "the Port Control Protocol anycast address", "RFC 7723"},
    {"2001:1::2/128", GLOBAL, 0, "the TURN anycast address", "RFC 8155"},
    {"2001:1::3/128", GLOBAL, 0, "the DNS-SD service registration anycast address", "RFC 9665"},
    {"2001:2::/48", REFUSED, 0, "a benchmarking address", "RFC 5180"},
    {"2001:3::/32", GLOBAL, 0, "an AMT address", "RFC 7450"},
    {"2001:4:112::/48", GLOBAL, 0, "an AS112 address", "RFC 7535"},
    {"2001:10::/28", REFUSED, 0, "a deprecated ORCHID address", "RFC 4843"},
    {"2001:20::/28", GLOBAL, 0, "an ORCHIDv2 address", "RFC 7343"},
    {"2001:30::/28", GLOBAL, 0, "a drone remote ID (DET) address", "RFC 9374"},
    {"2001:db8::/32", REFUSED, 0, "a documentation address", "RFC 3849"},
    {"2002::/16", EMBEDS, 2, "a 6to4 address", "RFC 3056"},
    {"2620:4f:8000::/48", GLOBAL, 0, "an AS112 direct delegation address", "RFC 7534"},
    {"3fff::/20", REFUSED, 0, "a documentation address", "RFC 9637"},
    {"5f00::/16", REFUSED, 0, "a segment routing (SRv6) SID", "RFC 9602"},
    {"fc00::/7", REFUSED, 0, "a unique-local address", "RFC 4193, RFC 8190"},
    {"fe80::/10", REFUSED, 0, "a link-local address", "RFC 4291"},
    /* IPv6 Addressing Architecture (RFC 4291 2.5.5.1, 2.7), RFC 3879 */
    {"::/96", EMBEDS, 12, "a deprecated IPv4-compatible address", "RFC 4291"},
    {"ff00::/8", REFUSED, 0, "a multicast address", "RFC 4291"},
    {"fec0::/10", REFUSED, 0, "a deprecated site-local address", "RFC 3879"},
};

#define NSPECIAL (int)(sizeof SPECIAL / sizeof SPECIAL[0])

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

/* The most specific row of SPECIAL whose block holds a, or NULL; *broken
 * set when a row does not parse. The rows are parsed on every check (a few
 * microseconds beside a connection's setup) so that the table stays text a
 * reader can hold against the registries, and no state is shared between
 * threads. */
static const struct special *special_of(const uint8_t a[16], int *broken)
{
	const struct special *best = NULL;
	int best_bits = -1;
	for (int i = 0; i < NSPECIAL; i++) {
		cidr c;
		if (parse_cidr(SPECIAL[i].block, &c) < 0) {
			*broken = 1;
			continue;
		}
		if (c.bits > best_bits && in_cidr(&c, a)) {
			best = &SPECIAL[i];
			best_bits = c.bits;
		}
	}
	return best;
}

/* Why a is no public address, written into why ("a TEST-NET-1 documentation
 * address (192.0.2.0/24, RFC 5737)"), or NULL when it is one. */
static const char *judge(const uint8_t a[16], char *why, size_t len)
{
	int broken = 0;
	const struct special *s = special_of(a, &broken), *e = NULL;
	uint8_t v4[16];
	if (s && s->reach == EMBEDS) {
		memcpy(v4, MAPPED, 12);
		memcpy(v4 + 12, a + s->at, 4);
		/* An IPv4 address no row of its own holds lands on ::ffff:0:0/96
		 * again, which is no reason to refuse it. */
		e = special_of(v4, &broken);
	}
	if (broken) {
		snprintf(why, len,
		         "not judged: a row of cairn's table of special-purpose "
		         "addresses does not parse");
		return why;
	}
	if (!s || s->reach == GLOBAL || (s->reach == EMBEDS && (!e || e->reach != REFUSED)))
		return NULL;
	if (s->reach == REFUSED) {
		snprintf(why, len, "%s (%s, %s)", s->what, s->block, s->rfc);
		return why;
	}
	char ip[INET_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET, v4 + 12, ip, sizeof ip);
	snprintf(why, len, "%s (%s, %s) carrying %s, %s (%s, %s)", s->what, s->block, s->rfc, ip,
	         e->what, e->block, e->rfc);
	return why;
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

const char *netpolicy_refuses(const netpolicy *p, const struct sockaddr *sa, char *why, size_t len)
{
	uint8_t a[16];
	if (sa->sa_family == AF_INET) {
		memcpy(a, MAPPED, 12);
		memcpy(a + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		snprintf(why, len, "not an internet address");
		return why;
	}
	for (int i = 0; p && i < p->nnets; i++)
		if (in_cidr(&p->nets[i], a))
			return NULL;
	return judge(a, why, len);
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
