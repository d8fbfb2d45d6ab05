/*
 * perf_dc.c - incmoe-perf's routed collectives: dispatch, combine, and dc, an
 * MoE layer's case, the dispatch of step i in flight with the combine of step
 * i-1 (incmoe.h, "Dispatch and combine").
 *
 * Every rank has --tokens rows of --hidden elements.  route.h draws each
 * token's experts, so its destination set, the same on every rank for any
 * rank's token: each rank computes its own reference (the rows it must
 * receive, their sources, and the reduced rows it must get back) without an
 * exchange, and rank 0 computes every rank's traffic.  One size is measured.
 * Besides today's columns a row gives the rows and bytes the busiest rank
 * sent and received per step and, with --link-mbps, the time against the
 * bound for those bytes; every rank's follow below the row.
 *
 * What a rank's link carries is counted from the routing as the algorithms
 * move it (and as tools/incmoe-model counts it, so the two bounds agree):
 *   inc       dispatch: each row whose set holds another rank goes up once,
 *             with its set (8 x INCMOE_SET_WORDS(N) bytes); each row for this
 *             rank comes down once, counted with a set too.  combine: each
 *             partial goes up once, and the owner's sets again; each row that
 *             another rank contributes to comes down once, reduced;
 *   a2a, ring dispatch: a row goes to each other rank of its set; combine:
 *             the partials come back the same way, rows only.
 * Rows a rank holds for itself are copied locally and counted nowhere; the
 * plans' and headers' bytes are left out.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dc_columns.h"
#include "perf.h"

#include "base/clock.h"

typedef struct {
    rank_t *rk;
    const opts_t *o;
    inc_route_t route;
    size_t T, H, rb;             /* tokens, elements and bytes of a row */
    uint64_t *count;             /* [N x N]: count[s * N + d], rows of s whose set holds d */
    size_t nrecv;                /* R of this rank, from the reference */
    uint32_t *src;               /* [2 R]: the reference's (rank, row) of each received row */
    uint32_t *got;               /* [2 R]: incmoe_dispatch_result's */
    size_t got_rows;             /* its R */
    size_t *at;                  /* [R]: the row of the p-th received row in the receive range
                                    (and of its partial): p, or in the low-latency form's regions
                                    s * T + its rank among the rows from s */
    void *x, *recv, *part, *out; /* T rows; R rows; R partials; T results */
    incmoe_mr_t *mr_x, *mr_recv, *mr_part, *mr_out;
} dc_t;

/* One rank's traffic per step: rows and bytes sent (up) and received (down). */
typedef struct {
    uint64_t rows_up, rows_down, up, down;
} traffic_t;

/* ------------------------------------------------------------------------- */
/* The header                                                                 */
/* ------------------------------------------------------------------------- */

void dc_print_header(const opts_t *o)
{
    const size_t rb = (size_t)o->hidden * incmoe_dtype_size(o->dtype);
    char route[64];
    inc_route_text(&o->route, route, sizeof(route));
    static const char *const what[] = {
        [OP_DISPATCH] = "dispatch: each row to the ranks of its set",
        [OP_COMBINE] = "combine: the partials of each row reduced back to its owner",
        [OP_DC] = "dc: the dispatch of step i in flight with the combine of step i-1, per step"};
    printf("# %s%s\n", what[o->op],
           o->low_latency ? " (the low-latency form, max_tokens = tokens)" : "");
    /* tools/incmoe-model reads this line (its `check` and `fit`). */
    printf("# tokens %d, hidden %d, row %zu B, E %d, k %d, route %s, placement %s, seed %" PRIu64
           "\n",
           o->tokens, o->hidden, rb, o->route.experts, o->route.k, route,
           inc_placement_names[o->route.placement], o->route.seed);
    dc_placement_print(o);
    printf("# rows/bytes: per step, of the network only (own rows are copied locally); on inc a\n"
           "# row carries its %zu-byte set up (dispatch, combine) and down (dispatch), as\n"
           "# incmoe-model counts it; busbw = the busiest rank and direction's bytes / time\n",
           8 * (size_t)INCMOE_SET_WORDS(o->nranks));
    dc_print_columns(o->link_mbps);
    fflush(stdout);
}

/* ------------------------------------------------------------------------- */
/* The reference                                                              */
/* ------------------------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Element j of rank s's row i: a small integer (exact in every type) that differs from row
   to row, so a row in the wrong place is seen. */
static int64_t row_value(const dc_t *dc, int s, size_t i, size_t j)
{
    uint64_t z = mix(dc->o->route.seed + (uint64_t)s * 0x9e3779b97f4a7c15ull +
                     (uint64_t)i * 0xd1b54a32d192ed03ull + (uint64_t)j * 0x8cb92ba72f3d8dd7ull);
    int64_t v = (int64_t)(z % 241);
    return dtype_signed(dc->o->dtype) ? v - 120 : v;
}

/* Element j of rank d's partial of rank s's row i: perf.c's pattern, whose reduction over any
   set of ranks is exact. */
static int64_t partial_value(const dc_t *dc, int d, int s, size_t i, size_t j)
{
    size_t flat = ((size_t)s * dc->T + i) * dc->H + j;
    return pattern(dc->o, d, flat, (unsigned)dc->o->route.seed);
}

/* Element j of what rank s gets back for its row i: the partials of its set's ranks, the
   others in ascending order and its own last (the order does not change these integers'
   result; it is the library's); 0 for an empty set. */
static int64_t combined_value(const dc_t *dc, int s, size_t i, size_t j)
{
    const uint64_t *set = inc_route_set(&dc->route, s, i);
    int64_t v = 0;
    int any = 0;
    for (size_t w = 0; w < dc->route.words; w++) {
        for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1) {
            int d = (int)(w * 64) + __builtin_ctzll(bits);
            if (d == s)
                continue;
            int64_t p = partial_value(dc, d, s, i, j);
            v = any ? combine(dc->o->redop, v, p) : p;
            any = 1;
        }
    }
    if (inc_route_has(set, s)) {
        int64_t p = partial_value(dc, s, s, i, j);
        v = any ? combine(dc->o->redop, v, p) : p;
    }
    return v;
}

/* The routing, the counts and this rank's received rows in order: source rank, then row. */
static int make_reference(dc_t *dc)
{
    const int n = dc->rk->n, me = dc->rk->rank;
    if (inc_route_make(&dc->o->route, dc->T, &dc->route) != 0)
        return -1;
    dc_route_replicate(dc->o, &dc->route);
    dc->count = calloc((size_t)n * n, sizeof(uint64_t));
    if (dc->count == NULL)
        return -1;
    for (int s = 0; s < n; s++)
        for (size_t i = 0; i < dc->T; i++)
            for (int d = 0; d < n; d++)
                dc->count[(size_t)s * n + d] += inc_route_has(inc_route_set(&dc->route, s, i), d);
    for (int s = 0; s < n; s++)
        dc->nrecv += dc->count[(size_t)s * n + me];
    dc->src = malloc(2 * dc->nrecv * sizeof(uint32_t) + 1);
    dc->got = malloc(2 * dc->nrecv * sizeof(uint32_t) + 1);
    if (dc->src == NULL || dc->got == NULL)
        return -1;
    dc->at = malloc(dc->nrecv * sizeof(size_t) + 1);
    if (dc->at == NULL)
        return -1;
    size_t p = 0;
    for (int s = 0; s < n; s++) {
        size_t k = 0;
        for (size_t i = 0; i < dc->T; i++) {
            if (inc_route_has(inc_route_set(&dc->route, s, i), me)) {
                dc->src[2 * p] = (uint32_t)s;
                dc->src[2 * p + 1] = (uint32_t)i;
                dc->at[p] = dc->o->low_latency ? (size_t)s * dc->T + k : p;
                p++;
                k++;
            }
        }
    }
    return 0;
}

/* Rank r's traffic per step of the op on the algorithm (see the top of this file). */
static traffic_t traffic_of(const dc_t *dc, int r)
{
    const int n = dc->rk->n;
    const uint64_t rb = dc->rb, set = 8 * (uint64_t)dc->route.words;
    uint64_t mine = 0, out = 0, in = 0; /* rows of r with another rank; to others; from others */
    for (size_t i = 0; i < dc->T; i++) {
        const uint64_t *s = inc_route_set(&dc->route, r, i);
        for (int d = 0; d < n; d++) {
            if (d != r && inc_route_has(s, d)) {
                mine++;
                break;
            }
        }
    }
    for (int d = 0; d < n; d++) {
        if (d == r)
            continue;
        out += dc->count[(size_t)r * n + d];
        in += dc->count[(size_t)d * n + r];
    }
    traffic_t disp, comb;
    if (dc->o->algo == INCMOE_ALGO_INC) {
        disp = (traffic_t){mine, in, mine * (rb + set), in * (rb + set)};
        comb = (traffic_t){in, mine, in * rb + mine * set, mine * rb};
    } else {
        disp = (traffic_t){out, in, out * rb, in * rb};
        comb = (traffic_t){in, out, in * rb, out * rb};
    }
    if (dc->o->op == OP_DISPATCH)
        return disp;
    if (dc->o->op == OP_COMBINE)
        return comb;
    return (traffic_t){disp.rows_up + comb.rows_up, disp.rows_down + comb.rows_down,
                       disp.up + comb.up, disp.down + comb.down};
}

/* ------------------------------------------------------------------------- */
/* Buffers and the collectives                                                */
/* ------------------------------------------------------------------------- */

/* Rows of the receive range (and of the partials): R, or the low-latency form's N regions of
   max_tokens = T rows. */
static size_t recv_rows(const dc_t *dc)
{
    return dc->o->low_latency ? (size_t)dc->rk->n * dc->T : dc->nrecv;
}

static int dc_buffers(dc_t *dc)
{
    rank_t *rk = dc->rk;
    const size_t T = dc->T, R = recv_rows(dc), H = dc->H;
    const incmoe_dtype_t t = dc->o->dtype;
    if (alloc_reg(rk, T * dc->rb, &dc->x, &dc->mr_x) != 0 ||
        alloc_reg(rk, R * dc->rb, &dc->recv, &dc->mr_recv) != 0 ||
        alloc_reg(rk, R * dc->rb, &dc->part, &dc->mr_part) != 0 ||
        alloc_reg(rk, T * dc->rb, &dc->out, &dc->mr_out) != 0)
        return -1;
    for (size_t i = 0; i < T; i++)
        for (size_t j = 0; j < H; j++)
            store(t, dc->x, i * H + j, row_value(dc, rk->rank, i, j));
    /* The partials in the received order, from the reference's sources (not the library's). */
    for (size_t p = 0; p < dc->nrecv; p++)
        for (size_t j = 0; j < H; j++)
            store(t, dc->part, dc->at[p] * H + j,
                  partial_value(dc, rk->rank, (int)dc->src[2 * p], dc->src[2 * p + 1], j));
    memset(dc->recv, 0x80, R * dc->rb); /* never a small integer in any type */
    memset(dc->out, 0x80, T * dc->rb);
    return 0;
}

static int post_dispatch(dc_t *dc, incmoe_req_t *req)
{
    incmoe_dispatch_params_t p = {.send_mr = dc->mr_x,
                                  .nrows = dc->T,
                                  .row_bytes = dc->rb,
                                  .sets = inc_route_set(&dc->route, dc->rk->rank, 0),
                                  .recv_mr = dc->mr_recv,
                                  .capacity = recv_rows(dc)};
    if (dc->o->low_latency) {
        p.field_mask = INCMOE_DISPATCH_PARAM_LOW_LATENCY;
        p.max_tokens = dc->T;
    }
    CHECK(dc->rk, "incmoe_dispatch", incmoe_dispatch(dc->rk->comm, &p, req));
    return 0;
}

static int post_combine(dc_t *dc, const incmoe_req_t *dispatch, incmoe_req_t *req)
{
    incmoe_combine_params_t p = {.dispatch = *dispatch,
                                 .send_mr = dc->mr_part,
                                 .recv_mr = dc->mr_out,
                                 .row_count = dc->H,
                                 .dtype = dc->o->dtype,
                                 .op = dc->o->redop};
    CHECK(dc->rk, "incmoe_combine", incmoe_combine(dc->rk->comm, &p, req));
    return 0;
}

/* A request waited for; a dispatch or combine that failed alone names its own reason. */
static int wait_req(dc_t *dc, const incmoe_req_t *req, const char *what)
{
    incmoe_status_t st = incmoe_wait(dc->rk->comm, req);
    if (st == INCMOE_OK)
        return 0;
    char why[512] = "";
    incmoe_req_error(dc->rk->comm, req, why, sizeof(why));
    fprintf(stderr, "incmoe-perf: rank %d: %s failed: %s%s%s\n", dc->rk->rank, what,
            incmoe_strerror(st), why[0] ? ": " : "", why);
    return -1;
}

/* The dispatch's R and source table, for the check. */
static int take_result(dc_t *dc, const incmoe_req_t *dispatch)
{
    CHECK(dc->rk, "incmoe_dispatch_result",
          incmoe_dispatch_result(dc->rk->comm, dispatch, &dc->got_rows, dc->got, dc->nrecv));
    return 0;
}

/* ------------------------------------------------------------------------- */
/* The runs of each op: warm-up, timed steps, and the results left to check   */
/* ------------------------------------------------------------------------- */

/* Dispatches one after the other, each released but the last (its result is checked). */
static int run_dispatch(dc_t *dc, uint64_t *t_ns)
{
    const opts_t *o = dc->o;
    incmoe_req_t d;
    for (int it = 0; it < o->warmup; it++) {
        if (post_dispatch(dc, &d) != 0 || wait_req(dc, &d, "dispatch") != 0)
            return -1;
        CHECK(dc->rk, "incmoe_dispatch_release", incmoe_dispatch_release(dc->rk->comm, &d));
    }
    if (barrier(dc->rk) != 0)
        return -1;
    double t0 = inc_now_s();
    for (int it = 0; it < o->iters; it++) {
        if (post_dispatch(dc, &d) != 0 || wait_req(dc, &d, "dispatch") != 0)
            return -1;
        if (it + 1 < o->iters)
            CHECK(dc->rk, "incmoe_dispatch_release", incmoe_dispatch_release(dc->rk->comm, &d));
    }
    *t_ns = (uint64_t)((inc_now_s() - t0) * 1e9 / o->iters);
    if (take_result(dc, &d) != 0)
        return -1;
    CHECK(dc->rk, "incmoe_dispatch_release", incmoe_dispatch_release(dc->rk->comm, &d));
    return 0;
}

/* Each combine needs a dispatch of its own (a combine releases the one it names): each step
   dispatches untimed, meets the others at a barrier and times its combine alone. */
static int run_combine(dc_t *dc, uint64_t *t_ns)
{
    const opts_t *o = dc->o;
    double timed = 0;
    for (int it = 0; it < o->warmup + o->iters; it++) {
        incmoe_req_t d, c;
        if (post_dispatch(dc, &d) != 0 || wait_req(dc, &d, "dispatch") != 0 || barrier(dc->rk) != 0)
            return -1;
        double t0 = inc_now_s();
        if (post_combine(dc, &d, &c) != 0 || wait_req(dc, &c, "combine") != 0)
            return -1;
        if (it >= o->warmup)
            timed += inc_now_s() - t0;
    }
    *t_ns = (uint64_t)(timed * 1e9 / o->iters);
    return 0;
}

/* One step of dc: the next dispatch posted, then the combine of the previous, both waited. */
static int dc_step(dc_t *dc, incmoe_req_t *prev)
{
    incmoe_req_t d, c;
    if (post_dispatch(dc, &d) != 0 || post_combine(dc, prev, &c) != 0 ||
        wait_req(dc, &d, "dispatch") != 0 || wait_req(dc, &c, "combine") != 0)
        return -1;
    *prev = d;
    return 0;
}

/* Step 0 dispatches alone; each step after it overlaps its dispatch with the combine of the
   step before; the last dispatch is combined after the clock stopped (its result checked). */
static int run_dc(dc_t *dc, uint64_t *t_ns)
{
    const opts_t *o = dc->o;
    incmoe_req_t prev, c;
    if (post_dispatch(dc, &prev) != 0 || wait_req(dc, &prev, "dispatch") != 0)
        return -1;
    for (int it = 0; it < o->warmup; it++)
        if (dc_step(dc, &prev) != 0)
            return -1;
    if (barrier(dc->rk) != 0)
        return -1;
    double t0 = inc_now_s();
    for (int it = 0; it < o->iters; it++)
        if (dc_step(dc, &prev) != 0)
            return -1;
    *t_ns = (uint64_t)((inc_now_s() - t0) * 1e9 / o->iters);
    if (take_result(dc, &prev) != 0 || post_combine(dc, &prev, &c) != 0 ||
        wait_req(dc, &c, "combine") != 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* The check and the row                                                      */
/* ------------------------------------------------------------------------- */

/* Wrong elements of this rank's results (a wrong R or source counts its rows). */
static uint64_t check(const dc_t *dc)
{
    const incmoe_dtype_t t = dc->o->dtype;
    const size_t H = dc->H;
    uint64_t wrong = 0;
    if (dc->o->op != OP_COMBINE) {
        size_t n = dc->got_rows < dc->nrecv ? dc->got_rows : dc->nrecv;
        wrong += dc->got_rows > dc->nrecv ? dc->got_rows - n : dc->nrecv - n;
        for (size_t p = 0; p < n; p++) {
            int s = (int)dc->src[2 * p];
            size_t i = dc->src[2 * p + 1];
            wrong += dc->got[2 * p] != dc->src[2 * p] || dc->got[2 * p + 1] != dc->src[2 * p + 1];
            for (size_t j = 0; j < H; j++)
                wrong += !matches(t, dc->recv, dc->at[p] * H + j, row_value(dc, s, i, j));
        }
    }
    if (dc->o->op != OP_DISPATCH) {
        for (size_t i = 0; i < dc->T; i++)
            for (size_t j = 0; j < H; j++)
                wrong += !matches(t, dc->out, i * H + j, combined_value(dc, dc->rk->rank, i, j));
    }
    return wrong;
}

/* Rank 0's row (the slowest rank's time per step, every rank's wrong elements) and every
   rank's traffic below it; the row's busbw. */
static double print_row(const dc_t *dc, uint64_t t_ns, uint64_t wrong)
{
    const opts_t *o = dc->o;
    const int n = dc->rk->n;
    traffic_t most = {0, 0, 0, 0};
    for (int r = 0; r < n; r++) {
        traffic_t t = traffic_of(dc, r);
        most.rows_up = t.rows_up > most.rows_up ? t.rows_up : most.rows_up;
        most.rows_down = t.rows_down > most.rows_down ? t.rows_down : most.rows_down;
        most.up = t.up > most.up ? t.up : most.up;
        most.down = t.down > most.down ? t.down : most.down;
    }
    const uint64_t busiest = most.up > most.down ? most.up : most.down;
    const double t_us = t_ns * 1e-3, size = (double)(dc->T * dc->rb);
    const double algbw = size / t_us * 1e-3, busbw = busiest / t_us * 1e-3;
    printf(" %11zu %12zu %8s %6s %11.1f %8.4f %8.4f", dc->T * dc->rb, dc->T * dc->H,
           incmoe_dtype_name(o->dtype), o->op == OP_DISPATCH ? "none" : incmoe_redop_name(o->redop),
           t_us, algbw, busbw);
    if (o->check)
        printf(" %8" PRIu64, wrong);
    else
        printf(" %8s", "N/A");
    printf(" %10" PRIu64 " %10" PRIu64 " %12" PRIu64 " %12" PRIu64, most.rows_up, most.rows_down,
           most.up, most.down);
    dc_print_bound(o->link_mbps, (double)busiest, t_us);
    printf("\n");
    for (int r = 0; r < n; r++) {
        traffic_t t = traffic_of(dc, r);
        printf("#   rank %d: sent %" PRIu64 " rows, %" PRIu64 " B; received %" PRIu64
               " rows, %" PRIu64 " B\n",
               r, t.rows_up, t.up, t.rows_down, t.down);
    }
    fflush(stdout);
    return busbw;
}

/* ------------------------------------------------------------------------- */

static void dc_close(dc_t *dc)
{
    incmoe_comm_t *comm = dc->rk->comm;
    incmoe_mr_t *mrs[] = {dc->mr_out, dc->mr_part, dc->mr_recv, dc->mr_x};
    for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
        if (mrs[i] != NULL)
            incmoe_mem_deregister(comm, mrs[i]);
    free(dc->out);
    free(dc->part);
    free(dc->recv);
    free(dc->x);
    free(dc->got);
    free(dc->at);
    free(dc->src);
    free(dc->count);
    inc_route_free(&dc->route);
}

int dc_run(rank_t *rk)
{
    const opts_t *o = rk->o;
    dc_t dc = {.rk = rk, .o = o, .T = (size_t)o->tokens, .H = (size_t)o->hidden};
    dc.rb = dc.H * rk->es;
    int rc = -1;
    uint64_t t_ns, wrong = 0, mine = 0;
    if (make_reference(&dc) != 0) {
        fprintf(stderr, "incmoe-perf: rank %d: out of memory for the routing of %zu tokens\n",
                rk->rank, dc.T);
        goto out;
    }
    if (dc_buffers(&dc) != 0)
        goto out;
    int st = o->op == OP_DISPATCH  ? run_dispatch(&dc, &t_ns)
             : o->op == OP_COMBINE ? run_combine(&dc, &t_ns)
                                   : run_dc(&dc, &t_ns);
    if (st != 0 || ctl_allreduce(rk, t_ns, INCMOE_MAX, &t_ns) != 0)
        goto out;
    if (o->check) {
        if (o->inject_error && rk->rank == 0) {
            if (o->op != OP_DISPATCH && dc.T > 0)
                ((uint8_t *)dc.out)[0] ^= 0x01;
            else if (o->op == OP_DISPATCH && dc.nrecv > 0)
                ((uint8_t *)dc.recv)[dc.at[0] * dc.rb] ^= 0x01;
        }
        mine = check(&dc);
    }
    if (ctl_allreduce(rk, mine, INCMOE_SUM, &wrong) != 0)
        goto out;
    if (rk->rank == 0) {
        double busbw = print_row(&dc, t_ns, wrong);
        printf("# Out of bounds values : %" PRIu64 " %s\n", wrong, wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.4f\n#\n", busbw);
        fflush(stdout);
    }
    rc = wrong != 0 ? 1 : 0;
out:
    dc_close(&dc);
    return rc;
}
