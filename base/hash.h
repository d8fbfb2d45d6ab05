/* hash.h - the hashes: 64-bit FNV-1a, for signatures every rank must compute
   alike, and a 64-bit mixer, for ids drawn from others (cheap and deterministic;
   not for anything an attacker chooses). */
#ifndef INC_HASH_H
#define INC_HASH_H

#include <stddef.h>
#include <stdint.h>

#define INC_FNV1A_INIT 0xcbf29ce484222325ull

static inline uint64_t inc_fnv1a(uint64_t h, const void *data, size_t n)
{
    const uint8_t *b = (const uint8_t *)data;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* v's eight bytes least significant first, whatever the host's byte order. */
static inline uint64_t inc_fnv1a_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return inc_fnv1a(h, b, sizeof(b));
}

/* x's bits mixed over all 64 (splitmix64's finalizer): a job id derived from another
   lands far from it and from its neighbours. */
static inline uint64_t inc_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
