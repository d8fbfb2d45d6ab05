/*
 * moe_bench_ref.c - incmoe-moe-bench's independent reference: Equation (1) of
 * the paper for one token in fp64, its experts' weights recomputed from the
 * problem data (moe_bench_data.c), not read from the layer.
 */
#include <math.h>
#include <string.h>

#include "moe_bench.h"

/* fp64 Equation (1) for token t of the inputs, recomputing the experts' weights into s. */
void mb_reference_token(const opts_t *o, const void *x, const int32_t *ids, const float *w, int t,
                        const ref_scratch_t *s, double *y)
{
    double *g = s->g, *a = s->a;
    void *m = s->m;
    memset(y, 0, sizeof(double) * (size_t)o->H);
    for (int c = 0; c < o->k; c++) {
        int e = ids[(size_t)t * o->k + c];
        mb_fill_weights(o, e, 0, m);
        memset(g, 0, sizeof(double) * (size_t)o->I);
        for (int i = 0; i < o->I; i++)
            for (int h = 0; h < o->H; h++)
                g[i] += mb_get(m, (size_t)i * o->H + h, o->dtype) *
                        mb_get(x, (size_t)t * o->H + h, o->dtype);
        mb_fill_weights(o, e, 1, m);
        for (int i = 0; i < o->I; i++) {
            double u = 0;
            for (int h = 0; h < o->H; h++)
                u += mb_get(m, (size_t)i * o->H + h, o->dtype) *
                     mb_get(x, (size_t)t * o->H + h, o->dtype);
            a[i] = g[i] / (1.0 + exp(-g[i])) * u;
        }
        mb_fill_weights(o, e, 2, m);
        for (int h = 0; h < o->H; h++) {
            double acc = 0;
            for (int i = 0; i < o->I; i++)
                acc += mb_get(m, (size_t)h * o->I + i, o->dtype) * a[i];
            y[h] += w[(size_t)t * o->k + c] * acc;
        }
    }
}
