/*
 * bandmodel.c - the band count of a pipelined forward (bandmodel.h).
 */
#include "bandmodel.h"

#include <math.h>

double bandmodel_stage_s(const bandmodel_in_t *in)
{
    const routing_load_t *l = &in->load;
    double link_s;
    if (in->masked && l->N > 0 && l->tokens > 0) {
        /* routing_bytes averages over the ranks; scaled to the largest rank's tokens. */
        double full, masked;
        routing_bytes(l, &full, &masked);
        double mean_t = (double)l->tokens / l->N;
        link_s = masked * ((double)in->tmax / mean_t) * in->byte_s;
    } else {
        /* Full: each direction carries every other rank's rows (gather in, reduce out). */
        double others = (double)(l->N - 1) * (double)in->tmax;
        double row = (double)(l->grow > l->zrow ? l->grow : l->zrow);
        link_s = others * row * in->byte_s;
    }
    /* Each rank runs its experts over about tmax * k routed rows. */
    double ffn_s = (double)in->tmax * in->k * in->row_flops * in->flop_s;
    return link_s > ffn_s ? link_s : ffn_s;
}

double bandmodel_overhead_s(const bandmodel_in_t *in)
{
    if (!in->masked)
        return in->band_s;
    return in->seen_s > 0 ? in->seen_s : in->band_s + in->sync_s;
}

double bandmodel_seen_s(const bandmodel_in_t *in, int nb, double seconds)
{
    if (nb < 1)
        return 0;
    double left = seconds - (double)(nb + 2) / nb * bandmodel_stage_s(in);
    return left > 0 ? left / nb : 0;
}

int bandmodel_count(const bandmodel_in_t *in)
{
    double ovh = bandmodel_overhead_s(in);
    double nb = ovh > 0 ? sqrt(2 * bandmodel_stage_s(in) / ovh) : 8;
    long long most = (long long)((in->tmax + 7) / 8);
    if (most > 64)
        most = 64;
    long long v = llround(nb);
    return (int)(v < 1 ? 1 : v > most ? (most < 1 ? 1 : most) : v);
}
