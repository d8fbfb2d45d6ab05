/*
 * soak_rank.c - incmoe-soak-rank, one rank of a fault-injection job (tools/faultsoak).
 *
 *   incmoe-soak-rank --switch HOST:PORT --rank R -N N --job ID [--steps S] [--bytes B]
 *                    [--op mix|agrs|allreduce] [--algo inc|ring|a2a] [--seed X] [--timeout-ms MS]
 *                    [--shrink]
 *
 * Runs S steps; each step fills fresh int32 data (a hash of seed, step, rank
 * and element, so no step can pass on a previous step's bytes), poisons every
 * output byte, posts the collectives, waits, and checks every element.  A step
 * is an AllGather and a ReduceScatter posted together (agrs), an AllReduce, or
 * (mix) the two in turn.  B is the bytes of the N-block buffer, as in
 * incmoe-perf.
 *
 * One line per event on stdout, flushed at once, so that whoever kills this
 * process still knows how far it got:
 *   joined                    the job formed
 *   step K ok                 step K (from 1) completed with every byte right
 *   WRONG step K: ...         a collective reported success with wrong data (exit 1)
 *   FAIL step K: CALL: ...    a call failed, with the library's reason (exit 2);
 *                             step 0 is the join; after step S, CALL "destroy: ..."
 *                             is the teardown
 *   DONE S steps              every step right and the communicator closed (exit 0)
 *
 * With --shrink, a step that fails is followed by incmoe_comm_shrink: the
 * survivors go on from that step on the new communicator, each with its new
 * rank and the new N (the data, and so the check, follow the new numbers):
 *   shrunk at step K: rank R of N (was R0 of N0), going on from step J
 * where J, agreed by an AllReduce (min) on the new communicator, is the lowest
 * step any survivor failed in.
 * A shrink that fails prints its FAIL line (exit 2).  A failed destroy after
 * the last step is not shrunk: there is nothing left to run.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

#include "incmoe/incmoe.h"

#define PROG "incmoe-soak-rank"

typedef enum { STEP_AGRS, STEP_ALLREDUCE } step_kind_t;

typedef struct {
    const char *switch_addr;
    int rank, nranks, steps, timeout_ms;
    size_t bytes;
    uint64_t job_id, seed;
    const char *op; /* mix, agrs, allreduce */
    incmoe_algo_t algo;
    int shrink; /* --shrink: go on without lost ranks */
} opts_t;

typedef struct {
    const opts_t *o;
    incmoe_comm_t *comm;
    int rank, nranks; /* in comm: the command line's until a shrink renumbers them */
    size_t blk;       /* elements of one rank's block (kept through a shrink) */
    int32_t *in_small, *out_small, *in_big, *out_big;
    incmoe_mr_t *mr_in_small, *mr_out_small, *mr_in_big, *mr_out_big;
} rank_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " --switch HOST:PORT --rank R -N N --job ID [options]\n"
               "  --steps S        steps to run, 1..1000000 (default 20)\n"
               "  --bytes B        bytes of the N-block buffer, 4N..1G (default 256K)\n"
               "  --op OP          agrs, allreduce or mix (default mix: one, then the other)\n"
               "  --algo A         inc, ring or a2a (default inc)\n"
               "  --algos          print every --algo name, one a line, and exit\n"
               "  --seed X         data seed, 0..2^62 (default 1)\n"
               "  --timeout-ms MS  join bound and the liveness timeout asked of the switch,\n"
               "                   1..86400000 (default INCMOE_TIMEOUT_MS)\n"
               "  --shrink         after a failed step, shrink the communicator to the survivors\n"
               "                   and go on from that step ('shrunk at step K: ...')\n"
               "Prints 'joined', 'step K ok' per verified step and 'DONE S steps'; a failure\n"
               "prints 'FAIL step K: ...' (exit 2), wrong data 'WRONG step K: ...' (exit 1).\n");
}

static int op_arg(void *dst, const char *flag, const char *text)
{
    if (strcmp(text, "mix") != 0 && strcmp(text, "agrs") != 0 && strcmp(text, "allreduce") != 0) {
        fprintf(stderr, PROG ": --op must be mix, agrs or allreduce, got '%s'\n", text);
        return -1;
    }
    *(const char **)dst = text;
    return 0;
}

static int algo_arg(void *dst, const char *flag, const char *text)
{
    int algo = inc_arg_algo(text);
    if (algo < 0) {
        fprintf(stderr, PROG ": --algo must be " INC_ARG_ALGO_NAMES ", got '%s'\n", text);
        return -1;
    }
    *(incmoe_algo_t *)dst = (incmoe_algo_t)algo;
    return 0;
}

/* What no single option can check: the required ones, and the options against each other. */
static int check_opts(const opts_t *o)
{
    if (o->switch_addr == NULL || o->rank < 0 || o->nranks == 0 || o->job_id == 0) {
        fprintf(stderr, PROG ": --switch, --rank, -N and --job are required (see --help)\n");
        return -1;
    }
    if (o->rank >= o->nranks) {
        fprintf(stderr, PROG ": --rank %d is not below -N %d\n", o->rank, o->nranks);
        return -1;
    }
    if (o->bytes < 4 * (size_t)o->nranks) {
        fprintf(stderr, PROG ": --bytes %zu is less than one int32 per rank (%d)\n", o->bytes,
                4 * o->nranks);
        return -1;
    }
    return 0;
}

/* 0 to run, 1 after --help, -1 on a bad command line (said). */
static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.rank = -1,
                  .nranks = 0,
                  .steps = 20,
                  .bytes = 256 << 10,
                  .seed = 1,
                  .op = "mix",
                  .algo = INCMOE_ALGO_INC};
    const inc_arg_t args[] = {
        {"--switch", NULL, INC_ARG_TEXT, .dst = &o->switch_addr},
        {"--rank", NULL, INC_ARG_INT, 0, INCMOE_MAX_RANKS - 1, &o->rank},
        {"-N", NULL, INC_ARG_INT, 1, INCMOE_MAX_RANKS, &o->nranks},
        {"--job", NULL, INC_ARG_U64, 1, 1ll << 62, &o->job_id}, /* 0: not given */
        {"--steps", NULL, INC_ARG_INT, 1, 1000000, &o->steps},
        {"--bytes", NULL, INC_ARG_SIZE, 4, 1ll << 30, &o->bytes},
        {"--seed", NULL, INC_ARG_U64, 0, 1ll << 62, &o->seed},
        {"--timeout-ms", NULL, INC_ARG_INT, 1, 86400000, &o->timeout_ms},
        {"--op", NULL, INC_ARG_FN, .dst = &o->op, .fn = op_arg},
        {"--algo", NULL, INC_ARG_FN, .dst = &o->algo, .fn = algo_arg},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(a, "--shrink") == 0) {
            o->shrink = 1;
            continue;
        }
        if (strcmp(a, "--algos") == 0) { /* tools/faultsoak's --algo mix draws from these */
            for (int k = 0; k < inc_arg_algo_count(); k++)
                printf("%s\n", inc_arg_algo_name(k));
            return 1;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (v == NULL) {
            fprintf(stderr, PROG ": '%s' needs a value (see --help)\n", a);
            return -1;
        }
        const inc_arg_t *opt = inc_arg_find(args, sizeof(args) / sizeof(args[0]), a);
        if (opt == NULL) {
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (inc_arg_read(PROG, opt, a, v) != 0)
            return -1;
    }
    return check_opts(o);
}

/* The value rank r contributes at element j of step k: below 2^16, so a sum
   over INCMOE_MAX_RANKS ranks fits an int32. */
static int32_t value(const opts_t *o, int step, int r, size_t j)
{
    uint64_t x = o->seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)step * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)r * 0x94D049BB133111EBull ^ (uint64_t)j;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return (int32_t)(x & 0xffff);
}

static int32_t sum_of(const opts_t *o, int nranks, int step, size_t j)
{
    int32_t s = 0;
    for (int r = 0; r < nranks; r++)
        s += value(o, step, r, j);
    return s;
}

static int fail(rank_t *rk, int step, const char *what, incmoe_status_t st)
{
    char msg[512] = "";
    if (rk->comm != NULL)
        incmoe_comm_error(rk->comm, msg, sizeof(msg));
    printf("FAIL step %d: %s: %s%s%s\n", step, what, incmoe_strerror(st), msg[0] ? ": " : "", msg);
    fflush(stdout);
    return 2;
}

/* Counts wrong elements of out[0..n) against want(j + base); reports the first. */
static size_t count_wrong(const rank_t *rk, const int32_t *out, size_t n, size_t first_j, int step,
                          int gathered, size_t *at, int32_t *got, int32_t *want)
{
    const opts_t *o = rk->o;
    const size_t blk = rk->blk;
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = first_j + i;
        int32_t w = gathered ? value(o, step, (int)(j / blk), j) : sum_of(o, rk->nranks, step, j);
        if (out[i] != w && wrong++ == 0) {
            *at = i;
            *got = out[i];
            *want = w;
        }
    }
    return wrong;
}

static int wrong_line(int step, const char *what, size_t wrong, size_t n, size_t at, int32_t got,
                      int32_t want)
{
    printf("WRONG step %d: %s: %zu of %zu elements wrong, first at element %zu: got %" PRId32
           " want %" PRId32 "\n",
           step, what, wrong, n, at, got, want);
    fflush(stdout);
    return 1;
}

#define CALL(rk, step, what, call)                                                                 \
    do {                                                                                           \
        incmoe_status_t st_ = (call);                                                              \
        if (st_ != INCMOE_OK)                                                                      \
            return fail(rk, step, what, st_);                                                      \
    } while (0)

static int run_step(rank_t *rk, int step, step_kind_t kind)
{
    const opts_t *o = rk->o;
    size_t blk = rk->blk, all = blk * (size_t)rk->nranks, es = sizeof(int32_t);
    int r = rk->rank;
    incmoe_req_t req[2];
    int nreq = 0;
    if (kind == STEP_AGRS) {
        for (size_t i = 0; i < blk; i++)
            rk->in_small[i] = value(o, step, r, (size_t)r * blk + i);
        for (size_t j = 0; j < all; j++)
            rk->in_big[j] = value(o, step, r, j);
        memset(rk->out_big, 0xA5, all * es);
        memset(rk->out_small, 0xA5, blk * es);
        incmoe_layout_t layout = {.block_stride = blk * es, .offset = 0, .length = blk * es};
        CALL(rk, step, "incmoe_allgather",
             incmoe_allgather(rk->comm, rk->mr_in_small, 0, rk->mr_out_big, 0, &layout,
                              &req[nreq++]));
        CALL(rk, step, "incmoe_reducescatter",
             incmoe_reducescatter(rk->comm, rk->mr_in_big, 0, rk->mr_out_small, 0, &layout,
                                  INCMOE_INT32, INCMOE_SUM, &req[nreq++]));
    } else {
        for (size_t j = 0; j < all; j++)
            rk->in_big[j] = value(o, step, r, j);
        memset(rk->out_big, 0xA5, all * es);
        CALL(rk, step, "incmoe_allreduce",
             incmoe_allreduce(rk->comm, rk->mr_in_big, 0, rk->mr_out_big, 0, all, INCMOE_INT32,
                              INCMOE_SUM, &req[nreq++]));
    }
    for (int i = 0; i < nreq; i++)
        CALL(rk, step, "incmoe_wait", incmoe_wait(rk->comm, &req[i]));

    size_t at = 0, wrong;
    int32_t got = 0, want = 0;
    if (kind == STEP_AGRS) {
        wrong = count_wrong(rk, rk->out_big, all, 0, step, 1, &at, &got, &want);
        if (wrong)
            return wrong_line(step, "allgather", wrong, all, at, got, want);
        wrong = count_wrong(rk, rk->out_small, blk, (size_t)r * blk, step, 0, &at, &got, &want);
        if (wrong)
            return wrong_line(step, "reducescatter", wrong, blk, at, got, want);
    } else {
        wrong = count_wrong(rk, rk->out_big, all, 0, step, 0, &at, &got, &want);
        if (wrong)
            return wrong_line(step, "allreduce", wrong, all, at, got, want);
    }
    printf("step %d ok\n", step);
    fflush(stdout);
    return 0;
}

static size_t buf_bytes(size_t elems)
{
    return (elems * sizeof(int32_t) + 4095) & ~(size_t)4095;
}

static int alloc_buf(size_t elems, int32_t **buf_p)
{
    size_t bytes = buf_bytes(elems);
    if (posix_memalign((void **)buf_p, 4096, bytes) != 0) {
        printf("FAIL step 0: cannot allocate %zu bytes\n", bytes);
        fflush(stdout);
        return 2;
    }
    memset(*buf_p, 0, bytes);
    return 0;
}

/* The four buffers, sized for the command line's N, registered with rk->comm. */
static int register_bufs(rank_t *rk, int step)
{
    size_t all = rk->blk * (size_t)rk->o->nranks;
    CALL(rk, step, "incmoe_mem_register",
         incmoe_mem_register(rk->comm, rk->in_small, buf_bytes(rk->blk), &rk->mr_in_small));
    CALL(rk, step, "incmoe_mem_register",
         incmoe_mem_register(rk->comm, rk->out_small, buf_bytes(rk->blk), &rk->mr_out_small));
    CALL(rk, step, "incmoe_mem_register",
         incmoe_mem_register(rk->comm, rk->in_big, buf_bytes(all), &rk->mr_in_big));
    CALL(rk, step, "incmoe_mem_register",
         incmoe_mem_register(rk->comm, rk->out_big, buf_bytes(all), &rk->mr_out_big));
    return 0;
}

/* The survivors' first step on their new communicator: the lowest step any of them failed in (a
   rank may have finished a step another failed; all must run the same next collective). */
static int resume_step(rank_t *rk, int *step)
{
    incmoe_req_t req;
    rk->in_small[0] = *step;
    CALL(rk, *step, "incmoe_allreduce (the step to resume at)",
         incmoe_allreduce(rk->comm, rk->mr_in_small, 0, rk->mr_out_small, 0, 1, INCMOE_INT32,
                          INCMOE_MIN, &req));
    CALL(rk, *step, "incmoe_wait (the step to resume at)", incmoe_wait(rk->comm, &req));
    *step = rk->out_small[0];
    return 0;
}

/* After a failed step: the survivors' communicator replaces rk->comm (the old one is destroyed:
   it failed, so its result says nothing new), the buffers are registered with it, and *step
   becomes the step all survivors go on from. */
static int shrink(rank_t *rk, int *step_p)
{
    const int step = *step_p;
    incmoe_comm_t *next = NULL;
    incmoe_status_t st = incmoe_comm_shrink(rk->comm, &next);
    if (st != INCMOE_OK)
        return fail(rk, step, "incmoe_comm_shrink", st);
    int was = rk->rank, of = rk->nranks;
    incmoe_comm_destroy(rk->comm);
    rk->comm = next;
    rk->rank = incmoe_comm_rank(next);
    rk->nranks = incmoe_comm_nranks(next);
    int rc = register_bufs(rk, step);
    if (rc == 0)
        rc = resume_step(rk, step_p);
    if (rc == 0) {
        printf("shrunk at step %d: rank %d of %d (was %d of %d), going on from step %d\n", step,
               rk->rank, rk->nranks, was, of, *step_p);
        fflush(stdout);
    }
    return rc;
}

static int run(rank_t *rk)
{
    const opts_t *o = rk->o;
    incmoe_comm_params_t params = {.field_mask = INCMOE_COMM_PARAM_ALGO,
                                   .switch_addr = o->switch_addr,
                                   .job_id = o->job_id,
                                   .rank = o->rank,
                                   .nranks = o->nranks,
                                   .algo = o->algo};
    if (o->timeout_ms > 0) {
        params.field_mask |= INCMOE_COMM_PARAM_TIMEOUT;
        params.timeout_ms = o->timeout_ms;
    }
    CALL(rk, 0, "incmoe_comm_create", incmoe_comm_create(&params, &rk->comm));
    printf("joined\n");
    fflush(stdout);
    size_t all = rk->blk * (size_t)o->nranks;
    int rc, shrinks = 0;
    if ((rc = alloc_buf(rk->blk, &rk->in_small)) != 0 ||
        (rc = alloc_buf(rk->blk, &rk->out_small)) != 0 || (rc = alloc_buf(all, &rk->in_big)) != 0 ||
        (rc = alloc_buf(all, &rk->out_big)) != 0 || (rc = register_bufs(rk, 0)) != 0)
        return rc;
    for (int step = 1; step <= o->steps; step++) {
        step_kind_t kind = strcmp(o->op, "agrs") == 0        ? STEP_AGRS
                           : strcmp(o->op, "allreduce") == 0 ? STEP_ALLREDUCE
                           : step % 2                        ? STEP_AGRS
                                                             : STEP_ALLREDUCE;
        rc = run_step(rk, step, kind);
        /* At most N shrinks: one that loses nobody (a fault that only stalled) must not loop. */
        if (rc == 2 && o->shrink && shrinks++ < o->nranks && (rc = shrink(rk, &step)) == 0) {
            step--; /* the loop's step++ comes back to the step to resume at */
            continue;
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    int p = parse_args(argc, argv, &o);
    if (p != 0)
        return p > 0 ? 0 : 2;
    rank_t rk = {.o = &o,
                 .rank = o.rank,
                 .nranks = o.nranks,
                 .blk = (size_t)o.bytes / sizeof(int32_t) / (size_t)o.nranks};
    int rc = run(&rk);
    if (rk.comm != NULL) {
        /* Destroy deregisters every region still registered; the buffers
           outlive it. */
        incmoe_status_t st = incmoe_comm_destroy(rk.comm);
        rk.comm = NULL;
        if (st != INCMOE_OK && rc == 0)
            rc = fail(&rk, o.steps, "destroy: incmoe_comm_destroy", st);
    }
    if (rc == 0) {
        printf("DONE %d steps\n", o.steps);
        fflush(stdout);
    }
    free(rk.in_small);
    free(rk.out_small);
    free(rk.in_big);
    free(rk.out_big);
    return rc;
}
