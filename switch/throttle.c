/* throttle.c - a bounded table of failing source addresses and their refusal periods. */
#include "throttle.h"

#include <netinet/in.h>
#include <string.h>

static void ip_key(const struct sockaddr *sa, uint8_t key[16])
{
    memset(key, 0, 16);
    if (sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

static int live(const throttle_slot_t *s, double now)
{
    return s->used && now - s->last_failure < THROTTLE_FORGET_S;
}

static throttle_slot_t *find(const throttle_t *t, const uint8_t key[16], double now)
{
    for (int i = 0; i < THROTTLE_SLOTS; i++)
        if (live(&t->slot[i], now) && memcmp(t->slot[i].ip, key, 16) == 0)
            return (throttle_slot_t *)&t->slot[i];
    return NULL;
}

double throttle_refused_for(const throttle_t *t, const struct sockaddr *src, double now)
{
    uint8_t key[16];
    ip_key(src, key);
    const throttle_slot_t *s = find(t, key, now);
    return s != NULL && s->refused_until > now ? s->refused_until - now : 0;
}

double throttle_failure(throttle_t *t, const struct sockaddr *src, double now)
{
    uint8_t key[16];
    ip_key(src, key);
    throttle_slot_t *s = find(t, key, now);
    if (s == NULL) {
        /* A free slot, else the longest-quiet one. */
        s = &t->slot[0];
        for (int i = 0; i < THROTTLE_SLOTS; i++) {
            if (!live(&t->slot[i], now)) {
                s = &t->slot[i];
                break;
            }
            if (t->slot[i].last_failure < s->last_failure)
                s = &t->slot[i];
        }
        memset(s, 0, sizeof(*s));
        memcpy(s->ip, key, 16);
        s->used = 1;
    }
    s->failures++;
    s->last_failure = now;
    if (s->failures <= THROTTLE_FREE_FAILURES)
        return 0;
    unsigned k = s->failures - THROTTLE_FREE_FAILURES - 1;
    double period = k >= 6 ? THROTTLE_MAX_S : THROTTLE_FIRST_S * (double)(1u << k);
    if (period > THROTTLE_MAX_S)
        period = THROTTLE_MAX_S;
    s->refused_until = now + period;
    return period;
}

void throttle_success(throttle_t *t, const struct sockaddr *src)
{
    uint8_t key[16];
    ip_key(src, key);
    for (int i = 0; i < THROTTLE_SLOTS; i++)
        if (t->slot[i].used && memcmp(t->slot[i].ip, key, 16) == 0)
            t->slot[i].used = 0;
}
