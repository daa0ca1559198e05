/*
 * hash.c - pure hash functions. The shard function is part of cairn's on-disk
 * contract (a run's shard is computed at enqueue by clients in any language),
 * so it is FNV-1a-64 exactly, pinned by a golden-value test.
 */
#include "hash.h"

#include <string.h>

uint64_t hash_fnv1a64(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t h = HASH_FNV64_OFFSET;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= HASH_FNV64_PRIME;
	}
	return h;
}

int hash_shard(const char *key, int shards_per_group)
{
	if (shards_per_group <= 0)
		return 0;
	return (int)(hash_fnv1a64(key, strlen(key)) % (uint64_t)shards_per_group);
}

int32_t hash_group_lock_key(const char *group)
{
	/* Prefixed so cairn's locks are unlikely to collide with an application's. */
	uint64_t h = hash_fnv1a64("cairn.group:", 12);
	for (const unsigned char *p = (const unsigned char *)group; *p; p++) {
		h ^= *p;
		h *= HASH_FNV64_PRIME;
	}
	return (int32_t)(uint32_t)(h ^ (h >> 32));
}

int64_t hash_singleton_lock_key(const char *group, const char *name)
{
	uint64_t h = hash_fnv1a64("cairn.singleton:", 16);
	for (const unsigned char *p = (const unsigned char *)group; *p; p++) {
		h ^= *p;
		h *= HASH_FNV64_PRIME;
	}
	h ^= ':';
	h *= HASH_FNV64_PRIME;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h ^= *p;
		h *= HASH_FNV64_PRIME;
	}
	return (int64_t)h;
}

uint64_t hash_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}
