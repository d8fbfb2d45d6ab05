/*
 * moe_bench_data.c - incmoe-moe-bench's problem data: weights and token inputs
 * any rank can recompute from (stream, index), and the routing (--route:
 * uniform, or zipf:S by popularity (e+1)^-S, seeded by --seed), with the
 * routing's statistics given the rank serving each pair.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_bench.h"

#include "base/dtype.h"

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A uniform value in [-1, 1) that any rank can recompute from (stream, index). */
static double uval(uint64_t stream, uint64_t i)
{
    return (double)(mix(stream * 0x100000001b3ull ^ mix(i)) >> 11) * (2.0 / 9007199254740992.0) -
           1.0;
}

static void put(void *base, size_t i, double v, incmoe_dtype_t dt)
{
    if (dt == INCMOE_FLOAT16)
        ((uint16_t *)base)[i] = inc_dtype_float_to_half((float)v);
    else if (dt == INCMOE_BFLOAT16)
        ((uint16_t *)base)[i] = inc_dtype_float_to_bf16((float)v);
    else
        ((float *)base)[i] = (float)v;
}

double mb_get(const void *base, size_t i, incmoe_dtype_t dt)
{
    if (dt == INCMOE_FLOAT16)
        return inc_dtype_half_to_float(((const uint16_t *)base)[i]);
    if (dt == INCMOE_BFLOAT16)
        return inc_dtype_bf16_to_float(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}

/* Weight streams: expert e's gate, up and down matrices. */
static uint64_t wstream(int e, int which)
{
    return 1000u + (uint64_t)e * 3u + (uint64_t)which;
}

static double wscale(const opts_t *o, int which)
{
    return which == 2 ? 2.0 / sqrt(o->I) : 2.0 / sqrt(o->H);
}

void mb_fill_weights(const opts_t *o, int e, int which, void *dst)
{
    size_t n = (size_t)o->H * o->I;
    double s = wscale(o, which);
    for (size_t i = 0; i < n; i++)
        put(dst, i, uval(wstream(e, which), i) * s, o->dtype);
}

/* Token t's k distinct experts by popularity (e+1)^-S, without replacement, into id[]. */
static void zipf_experts(const opts_t *o, uint64_t sx, int t, int32_t *id)
{
    double total = 0;
    for (int e = 0; e < o->E; e++)
        total += pow(e + 1, -o->zipf);
    for (int a = 0; a < o->k; a++) {
        double left = total * (0.5 + 0.5 * uval(sx + 2, (uint64_t)t * o->k + a));
        int32_t pick = -1;
        for (int e = 0; e < o->E; e++) {
            int taken = 0;
            for (int b = 0; b < a; b++)
                taken |= id[b] == e;
            if (taken)
                continue;
            pick = e; /* the last one left, should rounding leave some weight over */
            if ((left -= pow(e + 1, -o->zipf)) < 0)
                break;
        }
        id[a] = pick;
        total -= pow(pick + 1, -o->zipf);
    }
}

/* Token t's k distinct experts uniformly, into id[]. */
static void uniform_experts(const opts_t *o, uint64_t sx, int t, int32_t *id)
{
    for (int a = 0; a < o->k; a++) {
        int32_t e;
        int dup;
        uint64_t c = 0;
        do {
            e = (int32_t)(mix(sx ^ mix(((uint64_t)t << 8 | (uint64_t)a) + (c++ << 40))) %
                          (uint64_t)o->E);
            dup = 0;
            for (int b = 0; b < a; b++)
                dup |= id[b] == e;
        } while (dup);
        id[a] = e;
    }
}

/* Token inputs and routing of rank r at token count T (deterministic for the seed). */
void mb_make_tokens(const opts_t *o, int r, int T, void *x, int32_t *ids, float *w)
{
    uint64_t sx = mix(77 + (uint64_t)r * 1315423911u + (uint64_t)T + o->seed * 0x9e3779b9u);
    for (size_t i = 0; i < (size_t)T * o->H; i++)
        put(x, i, uval(sx, i), o->dtype);
    for (int t = 0; t < T; t++) {
        if (o->zipf > 0)
            zipf_experts(o, sx, t, ids + (size_t)t * o->k);
        else
            uniform_experts(o, sx, t, ids + (size_t)t * o->k);
        /* Weights as a router's softmax would give (not renormalised here). */
        for (int a = 0; a < o->k; a++)
            w[(size_t)t * o->k + a] =
                (float)(0.5 + 0.5 * uval(sx + 1, (uint64_t)t * o->k + a)) / (float)o->k;
    }
}

/* This rank's T tokens, served by serve[T][k] (mb_serving_ranks): the other ranks a token
   goes to, on average (k-bar), and the share of tokens some other rank needs (u). */
void mb_routing_stats(const opts_t *o, int rank, int T, const int32_t *serve, double *kbar_p,
                      double *ufrac_p)
{
    uint64_t pairs = 0, routed = 0;
    for (int t = 0; t < T; t++) {
        char seen[MAX_RANKS] = {0};
        int others = 0;
        for (int a = 0; a < o->k; a++) {
            int r = serve[(size_t)t * o->k + a];
            if (r != rank && !seen[r])
                seen[r] = 1, others++;
        }
        pairs += (uint64_t)others;
        routed += others > 0;
    }
    *kbar_p = T > 0 ? (double)pairs / T : 0;
    *ufrac_p = T > 0 ? (double)routed / T : 0;
}
