/*
 * choose.c - measuring the candidate paths (choose.h).
 *
 * A path's cost is measured by running it: forwards on the caller's own
 * inputs take in every cost a model would have to add up (the link, the
 * collectives' fixed costs, the FFN at this machine's rate, the switch and
 * the ranks sharing cores) and the outputs are the forward's anyway.  Every
 * candidate runs once; those within MOE_PRUNE_RATIO of the fastest of that
 * round run again, up to MOE_MEASURE_ROUNDS times, round after round, and
 * the smallest median among them decides.  Each run's time on each rank goes through an
 * AllReduce(max) on the layer's communicator: every rank then holds the same times (the slowest
 * rank's, which is the forward's) and picks the same path, and no rank
 * starts the next candidate before every rank finished this one (the next
 * one's data must not land in buffers a slower rank still reads).  The first
 * baseline forward with full routing also gives the FFN's rate (its FFN time
 * over the model's flops, autotune.c), which then sizes the bands of the
 * pipelined candidates after it and of every later forward.
 *
 * Test hook (not a setting, not exported): INCMOE_MOE_TEST_PATH_MS, e.g.
 * "inc=200,pipelined=50", adds that many milliseconds to this rank's measured
 * time of every candidate whose algorithm, mode or routing has that name, so
 * a test can make a path slower without a slower network.
 */
#include "choose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "lanes.h"
#include "wait.h"

#include "base/clock.h"
#include "base/hash.h"
#include "base/log.h"

#define SUBSYS        "moe"
#define MOE_MAX_PATHS (MOE_MAX_LANES * 5) /* two modes x two routings, and decode */
/* Runs of each candidate: one sample of a path is as noisy as the difference between two
   paths on a shared machine (testbed, N=4 @600 Mbit/s: one forward's min-max spread
   exceeded the gap between the fastest paths); the median of three is not fooled by one
   slow run. */
#define MOE_MEASURE_ROUNDS 3
/* A candidate whose first run took this many times the fastest first run is not run again
   (nor chosen): on the testbed a path's runs spread by up to 1.7x between runs of one job
   under load (BENCHMARKS.md, "The layer's path"), but within one measuring forward, its
   candidates interleaved, a 1.5x gap was never closed by the later rounds; the paths that
   matter to the choice are the close ones, and a far one costs a whole forward a round. */
#define MOE_PRUNE_RATIO 1.5
#define FS_PER_S        1e15

typedef struct {
    moe_path_t p[MOE_MAX_PATHS];
    int n;
} cands_t;

void choose_lanes(const incmoe_moe_t *L, int *first_p, int *n_p)
{
    *first_p = 0;
    *n_p = 1;
    if (!L->has_path || L->path.algo == INCMOE_MOE_ALGO_COMM)
        return;
    if (L->path.algo == INCMOE_MOE_ALGO_AUTO) {
        *n_p = L->nlanes;
        return;
    }
    int i = lanes_find(L, L->path.algo);
    *first_p = i < 0 ? 0 : i; /* not found: the layer's own runs it (lanes_open) */
}

/* The routings lane i may run for the routing asked; masked where it has no dispatch and
   combine fails alike on every rank. */
static incmoe_status_t lane_routings(incmoe_moe_t *L, int i, incmoe_moe_routing_t asked,
                                     incmoe_moe_routing_t out[2], int *n_p)
{
    *n_p = 0;
    if (asked != INCMOE_MOE_ROUTING_MASKED)
        out[(*n_p)++] = INCMOE_MOE_ROUTING_FULL;
    if (asked == INCMOE_MOE_ROUTING_FULL)
        return INCMOE_OK;
    incmoe_status_t st = lanes_dc_probe(L, i);
    if (st != INCMOE_OK)
        return st;
    if (L->lanes[i].dc_support)
        out[(*n_p)++] = INCMOE_MOE_ROUTING_MASKED;
    else if (asked == INCMOE_MOE_ROUTING_MASKED) {
        log_error(SUBSYS,
                  "rank %d: forward: routing masked needs dispatch and combine, which the %s "
                  "algorithm does not have",
                  L->rank, lanes_algo_name(L->lanes[i].algo));
        return INCMOE_ERR_UNSUPPORTED;
    }
    return INCMOE_OK;
}

/* The paths that may run: the bulk modes asked on each lane with the routings it may run,
   and where the counts fit, the decode step on each lane that has it (mode decode, or mode
   auto where the routing asked is not full: the decode step is dispatch and combine). */
static incmoe_status_t candidates(incmoe_moe_t *L, incmoe_moe_mode_t mode,
                                  incmoe_moe_routing_t routing, const int *counts, cands_t *c)
{
    static const incmoe_moe_mode_t both[] = {INCMOE_MOE_BASELINE, INCMOE_MOE_PIPELINED};
    int first, n;
    choose_lanes(L, &first, &n);
    c->n = 0;
    if (mode == INCMOE_MOE_DECODE ||
        (mode == INCMOE_MOE_AUTO && routing != INCMOE_MOE_ROUTING_FULL))
        for (int i = first; i < first + n; i++)
            if (decode_fits(L, i, counts))
                c->p[c->n++] = (moe_path_t){
                    .lane = i, .mode = INCMOE_MOE_DECODE, .routing = INCMOE_MOE_ROUTING_MASKED};
    for (int i = first; i < first + n && mode != INCMOE_MOE_DECODE; i++) {
        incmoe_moe_routing_t r[2];
        int nr;
        incmoe_status_t st = lane_routings(L, i, routing, r, &nr);
        if (st != INCMOE_OK)
            return st;
        for (int m = 0; m < 2; m++) {
            if (mode != INCMOE_MOE_AUTO && mode != both[m])
                continue;
            for (int j = 0; j < nr; j++)
                c->p[c->n++] = (moe_path_t){.lane = i, .mode = both[m], .routing = r[j]};
        }
    }
    return INCMOE_OK;
}

static uint32_t cands_key(const cands_t *c)
{
    uint64_t h = INC_FNV1A_INIT;
    for (int i = 0; i < c->n; i++)
        h = inc_fnv1a(h, &c->p[i], sizeof(c->p[i]));
    return (uint32_t)(h ^ (h >> 32));
}

/* Whether some rank's count moved more than 2x from the one choice i was made for. */
static int counts_moved(const incmoe_moe_t *L, int i, const int *counts)
{
    for (int s = 0; s < L->N; s++) {
        size_t was = L->choices->c[i].counts[s], now = (size_t)counts[s];
        if (now > 2 * was || was > 2 * now)
            return 1;
    }
    return 0;
}

/* The kept choice for these asks and counts, or -1 (every rank keeps the same ones). */
static int choice_find(const incmoe_moe_t *L, uint32_t key, const int *counts)
{
    for (int i = 0; i < MOE_MAX_CHOICES; i++)
        if (L->choices->c[i].valid && L->choices->c[i].asked == key && !counts_moved(L, i, counts))
            return i;
    return -1;
}

/* The test hook's milliseconds for path p on this rank (see the top). */
static double hook_ms(const incmoe_moe_t *L, const moe_path_t *p)
{
    const char *v = getenv("INCMOE_MOE_TEST_PATH_MS");
    double add = 0;
    while (v != NULL && *v != '\0') {
        char name[16];
        double ms;
        int used = 0;
        if (sscanf(v, "%15[a-z0-9]=%lf%n", name, &ms, &used) != 2)
            break;
        if (strcmp(name, lanes_algo_name(L->lanes[p->lane].algo)) == 0 ||
            strcmp(name, incmoe_moe_mode_name(p->mode)) == 0 ||
            strcmp(name, incmoe_moe_routing_name(p->routing)) == 0)
            add += ms;
        v += used;
        v += *v == ',';
    }
    return add;
}

/* Every rank's (time, FFN seconds per flop) to the largest of each; fences the candidates. */
static incmoe_status_t agree(incmoe_moe_t *L, double *ms, double *flop_s)
{
    uint64_t *in = (uint64_t *)L->hdr, *out = in + 2;
    in[0] = (uint64_t)(*ms * 1e6 + 0.5);
    in[1] = (uint64_t)(*flop_s * FS_PER_S + 0.5);
    incmoe_req_t req;
    incmoe_status_t st = incmoe_allreduce(L->comm, L->hdr_mr, 0, L->hdr_mr, 2 * sizeof(uint64_t), 2,
                                          INCMOE_UINT64, INCMOE_MAX, &req);
    if (st == INCMOE_OK)
        st = moe_wait_bounded(L->comm, L->timeout_ms, &req);
    if (st != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(L->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: forward: agreeing on the paths' times failed: %s (%s)", L->rank,
                  incmoe_strerror(st), why);
        L->failed = 1;
        return st;
    }
    *ms = (double)out[0] / 1e6;
    *flop_s = (double)out[1] / FS_PER_S;
    return INCMOE_OK;
}

/* This rank's FFN seconds per model flop in the forward just run (0: not a full baseline). */
static double ffn_rate(const incmoe_moe_t *L, const moe_path_t *p, size_t tmax)
{
    double flops = (double)tmax * L->k * 6.0 * L->H * L->I;
    if (p->mode != INCMOE_MOE_BASELINE || p->routing != INCMOE_MOE_ROUTING_FULL || flops <= 0)
        return 0;
    return L->timing.ffn_ms * 1e-3 / flops;
}

static void log_choice(const incmoe_moe_t *L, const cands_t *c, const double *ms, const int *nrun,
                       int best, size_t tmax)
{
    char list[1024];
    size_t at = 0;
    list[0] = '\0';
    for (int i = 0; i < c->n && at < sizeof(list); i++)
        at += (size_t)snprintf(
            list + at, sizeof(list) - at, "%s%s/%s/%s %.1f%s", i ? ", " : "",
            lanes_algo_name(L->lanes[c->p[i].lane].algo), incmoe_moe_mode_name(c->p[i].mode),
            incmoe_moe_routing_name(c->p[i].routing), ms[i], nrun[i] > 1 ? "" : " (once)");
    const moe_path_t *b = &c->p[best];
    log_info(SUBSYS, "rank %d: path %s %s %s for up to %zu tokens a rank (measured, ms: %s)",
             L->rank, lanes_algo_name(L->lanes[b->lane].algo), incmoe_moe_mode_name(b->mode),
             incmoe_moe_routing_name(b->routing), tmax, list);
}

/* The median of n values (1 <= n <= MOE_MEASURE_ROUNDS). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Runs candidate i once and agrees its time; the first full baseline run also gives the
   FFN's rate (*ffn: 0 until then). */
static incmoe_status_t run_candidate(incmoe_moe_t *L, const moe_inputs_t *in, const cands_t *c,
                                     int i, double *ms_p, double *ffn, int *again_p)
{
    double t0 = inc_now_ms();
    incmoe_status_t st = run_path(L, &c->p[i], in, again_p);
    if (st != INCMOE_OK)
        return st;
    double flop_s = *ffn > 0 ? 0 : ffn_rate(L, &c->p[i], in->tmax);
    *ms_p = inc_now_ms() - t0 + hook_ms(L, &c->p[i]);
    if ((st = agree(L, ms_p, &flop_s)) != INCMOE_OK)
        return st;
    if (*ffn <= 0 && flop_s > 0) {
        *ffn = flop_s;
        calib_ffn_measured(L, flop_s);
    }
    return INCMOE_OK;
}

/* Keeps the candidates whose first run is within MOE_PRUNE_RATIO of the fastest first run
   (the same on every rank: the times are agreed); returns how many. */
static int prune(int n, double ms[][MOE_MEASURE_ROUNDS], int *keep)
{
    double fastest = ms[0][0];
    for (int i = 1; i < n; i++)
        if (ms[i][0] < fastest)
            fastest = ms[i][0];
    int kept = 0;
    for (int i = 0; i < n; i++) {
        keep[i] = ms[i][0] < MOE_PRUNE_RATIO * fastest || ms[i][0] == fastest;
        kept += keep[i];
    }
    return kept;
}

/* Runs every candidate once, then the close ones (prune) again, round after round (so a
   slow spell of the machine falls on every candidate alike, not on one), while two or
   more are close; picks the smallest median of the agreed times among the close ones.
   *runs_p: the forwards it ran. */
static incmoe_status_t measure(incmoe_moe_t *L, const moe_inputs_t *in, const cands_t *c,
                               int *best_p, int *runs_p, int *again_p)
{
    double ms[MOE_MAX_PATHS][MOE_MEASURE_ROUNDS], med[MOE_MAX_PATHS], ffn = 0;
    int keep[MOE_MAX_PATHS], nrun[MOE_MAX_PATHS] = {0}, kept = c->n;
    *runs_p = 0;
    for (int r = 0; r < MOE_MEASURE_ROUNDS && (r == 0 || kept > 1); r++) {
        for (int i = 0; i < c->n; i++) {
            if (r > 0 && !keep[i])
                continue;
            incmoe_status_t st = run_candidate(L, in, c, i, &ms[i][r], &ffn, again_p);
            if (st != INCMOE_OK)
                return st;
            nrun[i]++;
            (*runs_p)++;
        }
        if (r == 0)
            kept = prune(c->n, ms, keep);
    }
    int best = -1;
    for (int i = 0; i < c->n; i++) {
        med[i] = median(ms[i], nrun[i]);
        if (keep[i] && (best < 0 || med[i] < med[best]))
            best = i;
    }
    log_choice(L, c, med, nrun, best, in->tmax);
    *best_p = best;
    return INCMOE_OK;
}

/* The path of c that runs without measuring: its one candidate, or the choice kept for it
   and these counts; 0 when there is none. */
static int known(const incmoe_moe_t *L, const cands_t *c, const int *counts, moe_path_t *path_p)
{
    if (c->n == 1) {
        *path_p = c->p[0];
        return 1;
    }
    int kept = choice_find(L, cands_key(c), counts);
    if (kept >= 0)
        *path_p = L->choices->c[kept].path;
    return kept >= 0;
}

incmoe_status_t choose_known(incmoe_moe_t *L, const int *counts, incmoe_moe_mode_t mode,
                             incmoe_moe_routing_t routing, moe_path_t *path_p, int *known_p)
{
    cands_t c;
    incmoe_status_t st = candidates(L, mode, routing, counts, &c);
    *known_p = st == INCMOE_OK && known(L, &c, counts, path_p);
    return st;
}

incmoe_status_t choose_path(incmoe_moe_t *L, const moe_inputs_t *in, incmoe_moe_mode_t mode,
                            incmoe_moe_routing_t routing, moe_path_t *path_p, int *ran_p,
                            int *runs_p, int *again_p)
{
    *again_p = 0;
    cands_t c;
    incmoe_status_t st = candidates(L, mode, routing, in->counts, &c);
    if (st != INCMOE_OK)
        return st;
    *ran_p = *runs_p = 0;
    uint32_t key = cands_key(&c);
    if (known(L, &c, in->counts, path_p))
        return INCMOE_OK;
    int best, runs;
    if ((st = measure(L, in, &c, &best, &runs, again_p)) != INCMOE_OK)
        return st;
    unsigned at = L->choices->next++ % MOE_MAX_CHOICES;
    L->choices->c[at].valid = 1;
    L->choices->c[at].asked = key;
    L->choices->c[at].path = c.p[best];
    for (int s = 0; s < L->N; s++)
        L->choices->c[at].counts[s] = (size_t)in->counts[s];
    *path_p = c.p[best];
    *ran_p = c.n;
    *runs_p = runs;
    return INCMOE_OK;
}
