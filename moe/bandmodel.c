/*
 * bandmodel.c - the band count of a pipelined forward (bandmodel.h).
 */
#include "bandmodel.h"

double bandmodel_stage_s(const bandmodel_in_t *in, int nb)
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
    /* Each rank runs its experts over about tmax * k routed rows, and every band reads their
       weights once more. */
    double rows = (double)in->tmax * in->k + (double)(nb > 1 ? nb : 1) * in->pass_rows;
    double ffn_s = rows * in->row_flops * in->flop_s;
    return link_s > ffn_s ? link_s : ffn_s;
}

double bandmodel_overhead_s(const bandmodel_in_t *in)
{
    if (!in->masked)
        return in->band_s;
    return in->seen_s > 0 ? in->seen_s : in->band_s + in->sync_s;
}

double bandmodel_time_s(const bandmodel_in_t *in, int nb)
{
    nb = nb > 1 ? nb : 1;
    return (double)(nb + 2) / nb * bandmodel_stage_s(in, nb) + nb * bandmodel_overhead_s(in);
}

double bandmodel_seen_s(const bandmodel_in_t *in, int nb, double seconds)
{
    if (nb < 1)
        return 0;
    double left = seconds - (double)(nb + 2) / nb * bandmodel_stage_s(in, nb);
    return left > 0 ? left / nb : 0;
}

int bandmodel_count(const bandmodel_in_t *in)
{
    size_t most = (in->tmax + 7) / 8;
    most = most > 64 ? 64 : most < 1 ? 1 : most;
    if (bandmodel_overhead_s(in) <= 0 && in->pass_rows <= 0)
        return most < 8 ? (int)most : 8;
    int best = 1;
    double best_s = bandmodel_time_s(in, 1);
    for (int nb = 2; nb <= (int)most; nb++) {
        double t = bandmodel_time_s(in, nb);
        if (t < best_s)
            best = nb, best_s = t;
    }
    return best;
}
