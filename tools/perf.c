/*
 * perf.c - incmoe-perf, the collective benchmark (flags and columns as in nccl-tests).
 *
 *   incmoe-perf [-N 4] [--op agrs] [--algo inc|ring|a2a] [-b 8] [-e 64M] [-f 2] [-n 20] [-w 5]
 *               [-c 1] [-d float] [-o sum] [--link-mbps BW]
 *   incmoe-perf --op dispatch|combine|dc [--tokens 2048] [--hidden 1024] [-E 64] [-k 8]
 *               [--route uniform|zipf:S] [--placement contiguous|strided] [--seed 1] ...
 *   incmoe-perf --switch HOST:PORT --rank R -N N [--job ID] ...   (one rank of a job)
 *
 * Without --rank it runs embedded: it starts incmoe-switchd on loopback (unless
 * --switch names one) and N rank processes of its own.  With --rank it is one
 * rank of a job whose ranks all run the same command; the ranks find each other
 * through the switch, which is the only address they need (tools/testbed run
 * passes it as {switch}).  Rank 0 prints the table.
 *
 * Sizes are bytes of the whole buffer, as in nccl-tests: the AllGather's
 * output, the ReduceScatter's input, the AllReduce's buffer.  --op agrs posts an
 * AllGather and a ReduceScatter of S bytes each at once and times both to
 * completion: eqbw = 2S / time (paper section 5.2), bound N/(N-1) BW for the
 * ring (and a2a, whose AllGather and ReduceScatter are the ring's) and 2 BW in
 * the network.  The routed collectives (dispatch, combine, and dc, the two of
 * an MoE layer's consecutive steps in flight together) are perf_dc.c's.
 * Collectives go through the public API (incmoe/incmoe.h) only; embedded runs
 * start the switch and the ranks with launch.h.
 */
#include "perf.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "launch.h"
#include "switchd_find.h"

#include "base/clock.h"
#include "incmoe/incmoe.h"

const char *const op_names[OP_COUNT] = {"allgather", "reducescatter", "allreduce", "agrs",
                                        "dispatch",  "combine",       "dc"};

/* ------------------------------------------------------------------------- */
/* Command line                                                               */
/* ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: incmoe-perf [options]\n"
               "  -b, --minbytes SIZE   smallest buffer, 1..1T (default 8; K, M, G, T suffixes)\n"
               "  -e, --maxbytes SIZE   largest buffer, -b..1T (default 64M)\n"
               "  -f, --stepfactor F    multiply the size by F, 2..1048576, each step (default 2)\n"
               "  -n, --iters N         timed iterations per size, 1..2^30 (default 20)\n"
               "  -w, --warmup_iters N  untimed iterations first, 0..2^30 (default 5)\n"
               "  -c, --check 0|1       check every byte of the results (default 1)\n"
               "  -d, --datatype T      int8 uint8 int32 uint32 int64 uint64 half float double\n"
               "                        bfloat16 (default float)\n"
               "  -o, --op_redop OP     sum prod max min (default sum)\n"
               "      --op OP           allgather reducescatter allreduce agrs, or the routed\n"
               "                        dispatch combine dc (default agrs)\n"
               "      --algo A          inc (in-network), ring, or a2a (the full mesh: point to\n"
               "                        point for dispatch and combine, the ring's collectives\n"
               "                        otherwise) (default inc)\n"
               "      --link-mbps BW    link rate per direction, 0 < BW <= 1e9: report eqbw as\n"
               "                        %% of its bound, and a routed op's time against its own\n"
               "  routed collectives (dispatch, combine, dc = dispatch of step i || combine of\n"
               "  step i-1), one size; with agrs & co, --tokens and --hidden set -b = -e to\n"
               "  N x tokens x hidden elements (the full collectives of the same tokens):\n"
               "      --tokens T        rows per rank, 1..16777216 (default 2048)\n"
               "      --hidden H        elements of -d per row, 1..16777216 (default 1024)\n"
               "  -E, --experts E       experts, N..65536 (default 64)\n"
               "  -k, --topk K          experts per token, 1..E (default 8)\n"
               "      --route R         uniform, or zipf:S (expert e drawn in proportion to\n"
               "                        (e+1)^-S, 0 <= S <= 100; default uniform)\n"
               "      --placement P     contiguous (rank r holds a block, rank 0 the most\n"
               "                        popular) or strided (expert e on rank e %% N); default\n"
               "                        contiguous, as incmoe-model's\n"
               "      --seed S          the routing's seed, 0..2^62 (default 1)\n"
               "      --extra-slots S   expert slots per rank beyond E/N for replicas,\n"
               "                        0..E-E/N (default 0: none); the placement is chosen by\n"
               "                        incmoe_moe_placement_choose from 256 tokens per rank of\n"
               "                        the routing on another seed, and each token goes to the\n"
               "                        ranks the MoE layer's per-token rule picks among its\n"
               "                        experts' replicas (contiguous base placement; E a\n"
               "                        multiple of N, k <= 64)\n"
               "      --placement-seed S  the sample's seed (default --seed + 1)\n"
               "      --low-latency     the low-latency form (decode): receive regions sized by\n"
               "                        max_tokens = --tokens, one message per rank and peer, no\n"
               "                        plan; checked as the bulk form is\n"
               "  -N, --nranks N        ranks, 1..256 (default 4)\n"
               "      --switch H:P      incmoe-switchd address (embedded mode starts one)\n"
               "      --rank R          run only rank R of the job (needs --switch)\n"
               "      --job ID          job id, the same on every rank (default 1)\n"
               "      --timeout S       embedded: stop the ranks after S seconds, 1..86400 (600)\n"
               "      --inject-error    self-test of the check: corrupt one result byte on rank 0\n"
               "  -h, --help\n");
}

/* A keyword or number the option does not take; -1. */
static int bad_value(const char *flag, const char *text, const char *allowed)
{
    fprintf(stderr, "incmoe-perf: bad value '%s' for %s (%s)\n", text, flag, allowed);
    return -1;
}

static int dtype_arg(void *dst, const char *flag, const char *text)
{
    static const struct {
        const char *name;
        incmoe_dtype_t dtype;
    } names[] = {
        {"int8", INCMOE_INT8},       {"uint8", INCMOE_UINT8},       {"int32", INCMOE_INT32},
        {"int", INCMOE_INT32},       {"uint32", INCMOE_UINT32},     {"int64", INCMOE_INT64},
        {"uint64", INCMOE_UINT64},   {"half", INCMOE_FLOAT16},      {"float16", INCMOE_FLOAT16},
        {"float", INCMOE_FLOAT32},   {"float32", INCMOE_FLOAT32},   {"double", INCMOE_FLOAT64},
        {"float64", INCMOE_FLOAT64}, {"bfloat16", INCMOE_BFLOAT16}, {"bf16", INCMOE_BFLOAT16}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(text, names[i].name) == 0) {
            *(incmoe_dtype_t *)dst = names[i].dtype;
            return 0;
        }
    }
    return bad_value(flag, text, "see --help");
}

static int redop_arg(void *dst, const char *flag, const char *text)
{
    static const char *const names[] = {"sum", "prod", "max", "min"};
    static const incmoe_redop_t ops[] = {INCMOE_SUM, INCMOE_PROD, INCMOE_MAX, INCMOE_MIN};
    for (size_t i = 0; i < 4; i++) {
        if (strcmp(text, names[i]) == 0) {
            *(incmoe_redop_t *)dst = ops[i];
            return 0;
        }
    }
    return bad_value(flag, text, "see --help");
}

static int op_arg(void *dst, const char *flag, const char *text)
{
    for (int k = 0; k < OP_COUNT; k++) {
        if (strcmp(text, op_names[k]) == 0) {
            *(op_t *)dst = (op_t)k;
            return 0;
        }
    }
    return bad_value(flag, text, "see --help");
}

static int algo_arg(void *dst, const char *flag, const char *text)
{
    int algo = inc_arg_algo(text);
    if (algo < 0)
        return bad_value(flag, text, "allowed: " INC_ARG_ALGO_NAMES);
    *(incmoe_algo_t *)dst = (incmoe_algo_t)algo;
    return 0;
}

/* --route, --placement and --seed go to opts_t.route; each one given is noted
   (routing_given), as -E and -k are by leaving 0. */
static int route_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    o->routing_given = 1;
    if (inc_route_parse(text, &o->route) != 0)
        return bad_value(flag, text, "allowed: uniform or zipf:S with 0 <= S <= 100");
    return 0;
}

static int placement_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    o->routing_given = 1;
    if (inc_placement_parse(text, &o->route.placement) != 0)
        return bad_value(flag, text, "allowed: contiguous or strided");
    return 0;
}

static int seed_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    o->routing_given = 1;
    if (inc_arg_u64(text, &o->route.seed) != 0 || o->route.seed > (1ull << 62))
        return bad_value(flag, text, "allowed: 0..2^62");
    return 0;
}

static int place_seed_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    o->place_seed_set = 1;
    if (inc_arg_u64(text, &o->place_seed) != 0 || o->place_seed > (1ull << 62))
        return bad_value(flag, text, "allowed: 0..2^62");
    return 0;
}

static int job_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_u64(text, dst) != 0)
        return bad_value(flag, text, "allowed: 0..2^64-1");
    return 0;
}

static int link_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_double(text, 0, 1e9, dst) != 0)
        return bad_value(flag, text, "allowed: 0 < BW <= 1e9 Mbit/s");
    return 0;
}

/* A routed op: one size, --tokens rows of --hidden elements, and its routing (defaults
   filled in). */
static int check_routed(opts_t *o)
{
    if (o->min_bytes != 0 || o->max_bytes != 0 || o->factor != 0) {
        fprintf(stderr,
                "incmoe-perf: -b, -e and -f size the full collectives; --op %s runs --tokens "
                "rows of --hidden elements\n",
                op_names[o->op]);
        return -1;
    }
    o->tokens = o->tokens ? o->tokens : 2048;
    o->hidden = o->hidden ? o->hidden : 1024;
    o->route.experts = o->route.experts ? o->route.experts : 64;
    o->route.k = o->route.k ? o->route.k : 8;
    o->route.nranks = o->nranks;
    if (o->route.experts < o->nranks) {
        fprintf(stderr,
                "incmoe-perf: -N %d ranks but -E %d experts: every rank must hold one "
                "(N <= E)\n",
                o->nranks, o->route.experts);
        return -1;
    }
    if (o->route.k > o->route.experts) {
        fprintf(stderr, "incmoe-perf: -k %d is more than the -E %d experts\n", o->route.k,
                o->route.experts);
        return -1;
    }
    if ((uint64_t)o->tokens * (uint64_t)o->hidden * incmoe_dtype_size(o->dtype) > 1ull << 40) {
        fprintf(stderr, "incmoe-perf: --tokens %d x --hidden %d %s is more than 1T bytes\n",
                o->tokens, o->hidden, incmoe_dtype_name(o->dtype));
        return -1;
    }
    return 0;
}

/* A full collective: -b, -e and -f (defaults filled in), or the gathered buffer of
   --tokens x --hidden elements per rank. */
static int check_full(opts_t *o)
{
    if (o->low_latency) {
        fprintf(stderr,
                "incmoe-perf: --low-latency is a form of dispatch, combine and dc, not --op "
                "%s\n",
                op_names[o->op]);
        return -1;
    }
    if (o->routing_given || o->route.experts != 0 || o->route.k != 0 || o->extra_slots != 0 ||
        o->place_seed_set) {
        fprintf(stderr,
                "incmoe-perf: -E, -k, --route, --placement, --seed, --extra-slots and "
                "--placement-seed route dispatch, combine and dc, not --op %s\n",
                op_names[o->op]);
        return -1;
    }
    if (o->tokens != 0 || o->hidden != 0) {
        if (o->tokens == 0 || o->hidden == 0 || o->min_bytes != 0 || o->max_bytes != 0) {
            fprintf(stderr,
                    "incmoe-perf: --op %s takes --tokens and --hidden together, "
                    "instead of -b and -e\n",
                    op_names[o->op]);
            return -1;
        }
        uint64_t bytes = (uint64_t)o->nranks * (uint64_t)o->tokens * (uint64_t)o->hidden *
                         incmoe_dtype_size(o->dtype);
        if (bytes > 1ull << 40) {
            fprintf(stderr,
                    "incmoe-perf: -N %d x --tokens %d x --hidden %d %s is more than 1T "
                    "bytes\n",
                    o->nranks, o->tokens, o->hidden, incmoe_dtype_name(o->dtype));
            return -1;
        }
        o->min_bytes = o->max_bytes = (size_t)bytes;
    }
    o->min_bytes = o->min_bytes ? o->min_bytes : 8;
    o->max_bytes = o->max_bytes ? o->max_bytes : 64u << 20;
    o->factor = o->factor ? o->factor : 2;
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, "incmoe-perf: need 0 < -b <= -e, got -b %zu -e %zu\n", o->min_bytes,
                o->max_bytes);
        return -1;
    }
    return 0;
}

/* What no single option can check: the options against each other. */
static int check_opts(opts_t *o)
{
    if (op_routed(o->op) ? check_routed(o) != 0 : check_full(o) != 0)
        return -1;
    if (o->rank >= 0 && o->switch_addr == NULL) {
        fprintf(stderr, "incmoe-perf: --rank needs --switch HOST:PORT (the job's switch)\n");
        return -1;
    }
    if (o->rank >= o->nranks) {
        fprintf(stderr, "incmoe-perf: --rank %d is not below -N %d\n", o->rank, o->nranks);
        return -1;
    }
    if (o->op == OP_AGRS && o->link_mbps > 0 && o->algo != INCMOE_ALGO_INC && o->nranks < 2) {
        fprintf(stderr, "incmoe-perf: the ring bound N/(N-1)*BW needs -N >= 2\n");
        return -1;
    }
    if (o->op != OP_ALLGATHER && o->op != OP_DISPATCH &&
        !incmoe_reduce_supported(o->dtype, o->redop)) {
        fprintf(stderr, "incmoe-perf: reducing %s with %s is not supported\n",
                incmoe_dtype_name(o->dtype), incmoe_redop_name(o->redop));
        return -1;
    }
    return op_routed(o->op) ? dc_placement_choose(o) : 0;
}

/* Returns 0 to run, 1 after --help, -1 on a bad command line (already reported). */
static int parse_args(int argc, char **argv, opts_t *o)
{
    /* -b, -e, -f, --tokens, --hidden, -E and -k stay 0 until check_opts fills them in, so
       that it knows which were given. */
    *o = (opts_t){.iters = 20,
                  .warmup = 5,
                  .check = 1,
                  .dtype = INCMOE_FLOAT32,
                  .redop = INCMOE_SUM,
                  .algo = INCMOE_ALGO_INC,
                  .op = OP_AGRS,
                  .nranks = 4,
                  .rank = -1,
                  .job_id = 1,
                  .timeout_s = 600,
                  .route = {.placement = INC_PLACE_CONTIGUOUS, .seed = 1}};
    const inc_arg_t args[] = {
        {"-b", "--minbytes", INC_ARG_SIZE, 1, 1ll << 40, &o->min_bytes},
        {"-e", "--maxbytes", INC_ARG_SIZE, 1, 1ll << 40, &o->max_bytes},
        {"-f", "--stepfactor", INC_ARG_INT, 2, 1 << 20, &o->factor},
        {"-n", "--iters", INC_ARG_INT, 1, 1 << 30, &o->iters},
        {"-w", "--warmup_iters", INC_ARG_INT, 0, 1 << 30, &o->warmup},
        {"-c", "--check", INC_ARG_INT, 0, 1, &o->check},
        {"-d", "--datatype", INC_ARG_FN, .dst = &o->dtype, .fn = dtype_arg},
        {"-o", "--op_redop", INC_ARG_FN, .dst = &o->redop, .fn = redop_arg},
        {"--op", NULL, INC_ARG_FN, .dst = &o->op, .fn = op_arg},
        {"--algo", NULL, INC_ARG_FN, .dst = &o->algo, .fn = algo_arg},
        {"--link-mbps", NULL, INC_ARG_FN, .dst = &o->link_mbps, .fn = link_arg},
        {"-N", "--nranks", INC_ARG_INT, 1, INCMOE_MAX_RANKS, &o->nranks},
        {"--switch", NULL, INC_ARG_TEXT, .dst = &o->switch_addr},
        {"--rank", NULL, INC_ARG_INT, 0, INCMOE_MAX_RANKS - 1, &o->rank},
        {"--job", NULL, INC_ARG_FN, .dst = &o->job_id, .fn = job_arg},
        {"--timeout", NULL, INC_ARG_INT, 1, 86400, &o->timeout_s},
        {"--inject-error", NULL, INC_ARG_SET, 1, .dst = &o->inject_error},
        {"--tokens", NULL, INC_ARG_INT, 1, 1 << 24, &o->tokens},
        {"--hidden", NULL, INC_ARG_INT, 1, 1 << 24, &o->hidden},
        {"-E", "--experts", INC_ARG_INT, 1, 65536, &o->route.experts},
        {"-k", "--topk", INC_ARG_INT, 1, 65536, &o->route.k},
        {"--route", NULL, INC_ARG_FN, .dst = o, .fn = route_arg},
        {"--placement", NULL, INC_ARG_FN, .dst = o, .fn = placement_arg},
        {"--seed", NULL, INC_ARG_FN, .dst = o, .fn = seed_arg},
        {"--extra-slots", NULL, INC_ARG_INT, 0, 1 << 16, &o->extra_slots},
        {"--placement-seed", NULL, INC_ARG_FN, .dst = o, .fn = place_seed_arg},
        {"--low-latency", NULL, INC_ARG_SET, 1, .dst = &o->low_latency},
        {"-h", "--help", INC_ARG_HELP},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        const inc_arg_t *opt = inc_arg_find(args, sizeof(args) / sizeof(args[0]), a);
        if (opt == NULL) {
            fprintf(stderr, "incmoe-perf: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (opt->kind == INC_ARG_HELP) {
            usage(stdout);
            return 1;
        }
        if (opt->kind != INC_ARG_SET) {
            if (i + 1 == argc) {
                fprintf(stderr, "incmoe-perf: option '%s' needs a value (see --help)\n", a);
                return -1;
            }
            v = argv[++i];
        }
        if (inc_arg_read("incmoe-perf", opt, a, v) != 0)
            return -1;
    }
    return check_opts(o);
}

/* ------------------------------------------------------------------------- */
/* Data pattern: small integers, so every reduction result is exact.         */
/* ------------------------------------------------------------------------- */

int dtype_signed(incmoe_dtype_t t)
{
    return t != INCMOE_UINT8 && t != INCMOE_UINT32 && t != INCMOE_UINT64;
}

/* Element j (of the N-block buffer) of rank r's input.  Sums of N values stay
   within +-120 (exact in every type, bf16 included); products are +-1 or +-2. */
int64_t pattern(const opts_t *o, int r, size_t j, unsigned seed)
{
    int n = o->nranks;
    if (o->redop == INCMOE_PROD && o->op != OP_ALLGATHER) {
        if (j % (size_t)n == (size_t)r && ((j / n + seed) & 1))
            return 2;
        return (dtype_signed(o->dtype) && (j * 7 + (size_t)r * 3 + seed) % 5 == 0) ? -1 : 1;
    }
    int64_t k = 120 / n < 1 ? 1 : 120 / n;
    if (k > 16)
        k = 16;
    int64_t m = (int64_t)((j * 7 + (size_t)r * 13 + seed) % (size_t)(2 * k + 1));
    return dtype_signed(o->dtype) ? m - k : m / 2;
}

int64_t combine(incmoe_redop_t op, int64_t a, int64_t b)
{
    switch (op) {
    case INCMOE_SUM:
        return a + b;
    case INCMOE_PROD:
        return a * b;
    case INCMOE_MAX:
        return a > b ? a : b;
    case INCMOE_MIN:
        return a < b ? a : b;
    default:
        return 0;
    }
}

/* Exact encodings of small integers (|v| < 2048) in the 16-bit float formats. */
static uint16_t half_of_int(int64_t v)
{
    if (v == 0)
        return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    uint64_t m = (uint64_t)(v < 0 ? -v : v);
    int e = 63 - __builtin_clzll(m);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((m << (10 - e)) & 0x3ff));
}

static uint16_t bf16_of_int(int64_t v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(u >> 16);
}

void store(incmoe_dtype_t t, void *base, size_t i, int64_t v)
{
    switch (t) {
    case INCMOE_INT8:
    case INCMOE_UINT8:
        ((uint8_t *)base)[i] = (uint8_t)v;
        break;
    case INCMOE_INT32:
    case INCMOE_UINT32:
        ((uint32_t *)base)[i] = (uint32_t)v;
        break;
    case INCMOE_INT64:
    case INCMOE_UINT64:
        ((uint64_t *)base)[i] = (uint64_t)v;
        break;
    case INCMOE_FLOAT16:
        ((uint16_t *)base)[i] = half_of_int(v);
        break;
    case INCMOE_BFLOAT16:
        ((uint16_t *)base)[i] = bf16_of_int(v);
        break;
    case INCMOE_FLOAT32:
        ((float *)base)[i] = (float)v;
        break;
    case INCMOE_FLOAT64:
        ((double *)base)[i] = (double)v;
        break;
    default:
        break;
    }
}

/* Whether element i of base holds exactly the encoding of v. */
int matches(incmoe_dtype_t t, const void *base, size_t i, int64_t v)
{
    size_t es = incmoe_dtype_size(t);
    uint8_t want[8];
    store(t, want, 0, v);
    return memcmp((const uint8_t *)base + i * es, want, es) == 0;
}

/* ------------------------------------------------------------------------- */
/* One rank                                                                   */
/* ------------------------------------------------------------------------- */

int fail(rank_t *rk, const char *what, incmoe_status_t st)
{
    char msg[256] = "";
    if (rk->comm != NULL)
        incmoe_comm_error(rk->comm, msg, sizeof(msg));
    fprintf(stderr, "incmoe-perf: rank %d: %s failed: %s%s%s\n", rk->rank, what,
            incmoe_strerror(st), msg[0] ? ": " : "", msg);
    return -1;
}

int alloc_reg(rank_t *rk, size_t bytes, void **buf_p, incmoe_mr_t **mr_p)
{
    bytes = bytes == 0 ? 4096 : (bytes + 4095) & ~(size_t)4095;
    if (posix_memalign(buf_p, 4096, bytes) != 0) {
        fprintf(stderr, "incmoe-perf: rank %d: cannot allocate %zu bytes\n", rk->rank, bytes);
        return -1;
    }
    memset(*buf_p, 0, bytes); /* touch every page outside the timed loop */
    CHECK(rk, "incmoe_mem_register", incmoe_mem_register(rk->comm, *buf_p, bytes, mr_p));
    return 0;
}

/* AllReduce of one uint64 per rank with op (MAX for times, SUM for error
   counts); the value is replicated over nranks elements so that every rank
   owns part of the buffer, whatever the algorithm. */
int ctl_allreduce(rank_t *rk, uint64_t v, incmoe_redop_t op, uint64_t *out)
{
    for (int i = 0; i < rk->n; i++)
        rk->ctl[i] = v;
    incmoe_req_t req;
    CHECK(rk, "incmoe_allreduce (control)",
          incmoe_allreduce(rk->comm, rk->mr_ctl, 0, rk->mr_ctl, rk->n * sizeof(uint64_t), rk->n,
                           INCMOE_UINT64, op, &req));
    CHECK(rk, "incmoe_wait (control)", incmoe_wait(rk->comm, &req));
    *out = rk->ctl[rk->n];
    return 0;
}

int barrier(rank_t *rk)
{
    incmoe_req_t req;
    CHECK(rk, "incmoe_barrier", incmoe_barrier(rk->comm, &req));
    CHECK(rk, "incmoe_wait (barrier)", incmoe_wait(rk->comm, &req));
    return 0;
}

/* Element counts of one size: total (the N-block buffer) and per block. */
static void counts_of(const rank_t *rk, size_t bytes, size_t *count, size_t *blk)
{
    size_t total = bytes / rk->es;
    if (rk->o->op == OP_ALLREDUCE) {
        *count = total;
        *blk = 0;
    } else {
        *blk = total / rk->n;
        *count = *blk * rk->n;
    }
}

static void fill(rank_t *rk, size_t count, size_t blk, unsigned seed)
{
    opts_t *o = rk->o;
    incmoe_dtype_t t = o->dtype;
    size_t es = rk->es;
    int r = rk->rank;
    if (o->op == OP_ALLGATHER || o->op == OP_AGRS) {
        for (size_t i = 0; i < blk; i++)
            store(t, rk->small_a, i, pattern(o, r, (size_t)r * blk + i, seed));
        memset(rk->big_a, 0x80, count * es); /* never a small integer in any type */
    }
    if (o->op == OP_REDUCESCATTER || o->op == OP_AGRS) {
        for (size_t j = 0; j < count; j++)
            store(t, rk->big_b, j, pattern(o, r, j, seed));
        memset(rk->small_b, 0x80, blk * es);
    }
    if (o->op == OP_ALLREDUCE) {
        for (size_t j = 0; j < count; j++)
            store(t, rk->big_b, j, pattern(o, r, j, seed));
        memset(rk->big_a, 0x80, count * es);
    }
}

static int64_t reduced(const rank_t *rk, size_t j, unsigned seed)
{
    int64_t v = pattern(rk->o, 0, j, seed);
    for (int s = 1; s < rk->n; s++)
        v = combine(rk->o->redop, v, pattern(rk->o, s, j, seed));
    return v;
}

/* The number of wrong elements in this rank's results. */
static uint64_t check(const rank_t *rk, size_t count, size_t blk, unsigned seed)
{
    const opts_t *o = rk->o;
    incmoe_dtype_t t = o->dtype;
    uint64_t wrong = 0;
    if (o->op == OP_ALLGATHER || o->op == OP_AGRS) {
        for (size_t j = 0; j < count; j++)
            wrong += !matches(t, rk->big_a, j, pattern(o, (int)(j / blk), j, seed));
    }
    if (o->op == OP_REDUCESCATTER || o->op == OP_AGRS) {
        for (size_t i = 0; i < blk; i++)
            wrong += !matches(t, rk->small_b, i, reduced(rk, (size_t)rk->rank * blk + i, seed));
    }
    if (o->op == OP_ALLREDUCE) {
        for (size_t j = 0; j < count; j++)
            wrong += !matches(t, rk->big_a, j, reduced(rk, j, seed));
    }
    return wrong;
}

static int post_and_wait(rank_t *rk, size_t count, size_t blk)
{
    opts_t *o = rk->o;
    size_t es = rk->es;
    incmoe_layout_t layout = {.block_stride = blk * es, .offset = 0, .length = blk * es};
    incmoe_req_t req[2];
    int nreq = 0;
    if (o->op == OP_ALLGATHER || o->op == OP_AGRS)
        CHECK(
            rk, "incmoe_allgather",
            incmoe_allgather(rk->comm, rk->mr_small_a, 0, rk->mr_big_a, 0, &layout, &req[nreq++]));
    if (o->op == OP_REDUCESCATTER || o->op == OP_AGRS)
        CHECK(rk, "incmoe_reducescatter",
              incmoe_reducescatter(rk->comm, rk->mr_big_b, 0, rk->mr_small_b, 0, &layout, o->dtype,
                                   o->redop, &req[nreq++]));
    if (o->op == OP_ALLREDUCE)
        CHECK(rk, "incmoe_allreduce",
              incmoe_allreduce(rk->comm, rk->mr_big_b, 0, rk->mr_big_a, 0, count, o->dtype,
                               o->redop, &req[nreq++]));
    for (int i = 0; i < nreq; i++)
        CHECK(rk, "incmoe_wait", incmoe_wait(rk->comm, &req[i]));
    return 0;
}

static void print_header(const opts_t *o)
{
    printf("# incmoe-perf: op %s, algo %s, nranks %d, iters %d, warmup %d, check %d\n",
           op_names[o->op], inc_arg_algo_name(o->algo), o->nranks, o->iters, o->warmup, o->check);
    if (op_routed(o->op)) {
        dc_print_header(o);
        return;
    }
    if (o->op == OP_AGRS) {
        printf("# agrs: an AllGather and a ReduceScatter of <size> bytes each, posted together; "
               "eqbw = 2*size/time\n");
        if (o->link_mbps > 0) {
            /* a2a runs the full collectives as the ring does */
            double bound = o->algo != INCMOE_ALGO_INC ? o->link_mbps * o->nranks / (o->nranks - 1)
                                                      : 2 * o->link_mbps;
            printf("# link %.0f Mbit/s per direction; bound %s = %.1f Mbit/s\n", o->link_mbps,
                   o->algo != INCMOE_ALGO_INC ? "N/(N-1)*BW" : "2*BW", bound);
        }
    }
    printf("#\n#%11s %12s %8s %6s %11s %8s %8s %8s", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    if (o->op == OP_AGRS)
        printf(" %11s %7s", "eqbw", "%bound");
    printf("\n#%11s %12s %8s %6s %11s %8s %8s %8s", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    if (o->op == OP_AGRS)
        printf(" %11s %7s", "(Mbit/s)", "");
    printf("\n");
    fflush(stdout);
}

/* The bus-bandwidth factor of nccl-tests: what each rank's link carries per byte of size. */
static double busbw_factor(const rank_t *rk)
{
    return rk->o->op == OP_ALLREDUCE ? 2.0 * (rk->n - 1) / rk->n : (double)(rk->n - 1) / rk->n;
}

/* Rank 0's row for one size: the slowest rank's time t_ns and every rank's wrong elements.
   Returns the row's bus bandwidth (GB/s). */
static double print_row(const rank_t *rk, size_t count, uint64_t t_ns, uint64_t wrong)
{
    const opts_t *o = rk->o;
    double t_us = t_ns * 1e-3;
    double sz = (double)count * rk->es;
    double algbw = (o->op == OP_AGRS ? 2 * sz : sz) / t_us * 1e-3; /* GB/s */
    double factor = busbw_factor(rk);
    printf(
        " %11zu %12zu %8s %6s %11.1f %8.4f %8.4f", (size_t)sz, count, incmoe_dtype_name(o->dtype),
        o->op == OP_ALLGATHER ? "none" : incmoe_redop_name(o->redop), t_us, algbw, algbw * factor);
    if (o->check)
        printf(" %8" PRIu64, wrong);
    else
        printf(" %8s", "N/A");
    if (o->op == OP_AGRS) {
        double eq = 2 * sz * 8 / t_us; /* Mbit/s */
        printf(" %11.1f", eq);
        if (o->link_mbps > 0) {
            double bound =
                o->algo != INCMOE_ALGO_INC ? o->link_mbps * rk->n / (rk->n - 1) : 2 * o->link_mbps;
            printf(" %7.1f", 100 * eq / bound);
        }
    }
    printf("\n");
    fflush(stdout);
    return algbw * factor;
}

/* One size: warm-up, timed iterations between barriers, the check.  *t_ns: the slowest rank's
   time per iteration; *wrong: the wrong elements of every rank. */
static int measure(rank_t *rk, size_t count, size_t blk, unsigned seed, uint64_t *t_ns,
                   uint64_t *wrong)
{
    const opts_t *o = rk->o;
    uint64_t mine = 0;
    if (o->check)
        fill(rk, count, blk, seed);
    for (int it = 0; it < o->warmup; it++)
        if (post_and_wait(rk, count, blk) != 0)
            return -1;
    if (barrier(rk) != 0)
        return -1;
    double t0 = (inc_now_s() * 1e6);
    for (int it = 0; it < o->iters; it++)
        if (post_and_wait(rk, count, blk) != 0)
            return -1;
    uint64_t t = (uint64_t)(((inc_now_s() * 1e6) - t0) * 1e3 / o->iters);
    if (ctl_allreduce(rk, t, INCMOE_MAX, t_ns) != 0)
        return -1;
    if (o->check) {
        if (o->inject_error && rk->rank == 0)
            ((uint8_t *)(o->op == OP_REDUCESCATTER || o->op == OP_AGRS ? rk->small_b
                                                                       : rk->big_a))[0] ^= 0x01;
        mine = check(rk, count, blk, seed);
    }
    return ctl_allreduce(rk, mine, INCMOE_SUM, wrong);
}

/* Every size from -b to -e; rank 0 prints the rows and the summary.  0 when every result was
   right, 1 when one was not, -1 when a call failed. */
static int run_sizes(rank_t *rk)
{
    const opts_t *o = rk->o;
    uint64_t wrong_all = 0;
    double busbw_sum = 0;
    int nsizes = 0;
    unsigned seed = 1;
    for (size_t bytes = o->min_bytes;; bytes *= o->factor, seed++) {
        size_t count, blk;
        uint64_t t_ns, wrong;
        counts_of(rk, bytes, &count, &blk);
        if (count > 0) {
            if (measure(rk, count, blk, seed, &t_ns, &wrong) != 0)
                return -1;
            wrong_all += wrong;
            if (rk->rank == 0)
                busbw_sum += print_row(rk, count, t_ns, wrong), nsizes++;
        }
        if (bytes > o->max_bytes / o->factor)
            break;
    }
    if (rk->rank == 0) {
        printf("# Out of bounds values : %" PRIu64 " %s\n", wrong_all, wrong_all ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.4f\n#\n", nsizes ? busbw_sum / nsizes : 0.0);
        fflush(stdout);
    }
    return wrong_all != 0 ? 1 : 0;
}

/* The registered buffers the op needs, sized for the largest size, and the control buffer
   (a routed op's own are dc_run's). */
static int rank_buffers(rank_t *rk)
{
    const opts_t *o = rk->o;
    size_t max_all = o->max_bytes / rk->es * rk->es;
    size_t max_blk = o->max_bytes / rk->es / rk->n * rk->es;
    int need_ag = o->op == OP_ALLGATHER || o->op == OP_AGRS;
    int need_rs = o->op == OP_REDUCESCATTER || o->op == OP_AGRS;
    int need_ar = o->op == OP_ALLREDUCE;
    if ((need_ag || need_ar) && alloc_reg(rk, max_all, &rk->big_a, &rk->mr_big_a) != 0)
        return -1;
    if ((need_rs || need_ar) && alloc_reg(rk, max_all, &rk->big_b, &rk->mr_big_b) != 0)
        return -1;
    if (need_ag && alloc_reg(rk, max_blk + 1, &rk->small_a, &rk->mr_small_a) != 0)
        return -1;
    if (need_rs && alloc_reg(rk, max_blk + 1, &rk->small_b, &rk->mr_small_b) != 0)
        return -1;
    return alloc_reg(rk, 2 * rk->n * sizeof(uint64_t), (void **)&rk->ctl, &rk->mr_ctl);
}

/* Undoes rank_buffers (whatever part of it was done) and closes the communicator; rc, or -1
   when it was 0 and the close failed. */
static int rank_close(rank_t *rk, int rc)
{
    if (rk->mr_ctl)
        incmoe_mem_deregister(rk->comm, rk->mr_ctl);
    if (rk->mr_small_b)
        incmoe_mem_deregister(rk->comm, rk->mr_small_b);
    if (rk->mr_small_a)
        incmoe_mem_deregister(rk->comm, rk->mr_small_a);
    if (rk->mr_big_b)
        incmoe_mem_deregister(rk->comm, rk->mr_big_b);
    if (rk->mr_big_a)
        incmoe_mem_deregister(rk->comm, rk->mr_big_a);
    incmoe_status_t st = incmoe_comm_destroy(rk->comm);
    if (st != INCMOE_OK && rc == 0) {
        fprintf(stderr, "incmoe-perf: rank %d: incmoe_comm_destroy failed: %s\n", rk->rank,
                incmoe_strerror(st));
        rc = -1;
    }
    free(rk->ctl);
    free(rk->small_b);
    free(rk->small_a);
    free(rk->big_b);
    free(rk->big_a);
    return rc;
}

/* 0 when every result was right, 1 when one was not, -1 when a call failed. */
static int run_rank(opts_t *o, int rank)
{
    rank_t rk = {.o = o, .rank = rank, .n = o->nranks, .es = incmoe_dtype_size(o->dtype)};
    incmoe_comm_params_t params = {.field_mask = INCMOE_COMM_PARAM_ALGO,
                                   .switch_addr = o->switch_addr,
                                   .job_id = o->job_id,
                                   .rank = rank,
                                   .nranks = o->nranks,
                                   .algo = o->algo};
    CHECK(&rk, "incmoe_comm_create", incmoe_comm_create(&params, &rk.comm));
    int rc = -1;
    if (rank_buffers(&rk) == 0) {
        if (rank == 0)
            print_header(o);
        rc = op_routed(o->op) ? dc_run(&rk) : run_sizes(&rk);
    }
    return rank_close(&rk, rc);
}

/* ------------------------------------------------------------------------- */
/* Embedded mode: a switch and N rank processes on this host                  */
/* ------------------------------------------------------------------------- */

/* Starts the switch on loopback; its first stdout line names the address. */
static int start_switch(inc_launch_switch_t *sw)
{
    char why[1024];
    const char *path = inc_switchd_find(why, sizeof(why));
    if (path == NULL) {
        fprintf(stderr, "incmoe-perf: %s, or pass --switch HOST:PORT\n", why);
        return -1;
    }
    if (inc_launch_switch_start(NULL, path, NULL, 20, sw) != 0) {
        fprintf(stderr, "incmoe-perf: %s did not report 'listening on HOST:PORT'\n", path);
        return -1;
    }
    return 0;
}

static int perf_rank(int rank, int nranks, const char *switch_addr, void *arg)
{
    (void)nranks;
    (void)switch_addr;
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL)
        return 2;
    int st = run_rank(arg, rank);
    return st == 0 ? 0 : st > 0 ? 1 : 2;
}

/* Exit code 1: a rank found wrong results; 2: anything else went wrong. */
static int run_embedded(opts_t *o)
{
    inc_launch_switch_t sw = {.pid = -1};
    if (o->switch_addr == NULL) {
        if (start_switch(&sw) != 0)
            return 2;
        o->switch_addr = sw.addr;
        if (o->job_id == 1)
            o->job_id = (uint64_t)getpid() << 16 | 1;
    }
    inc_launch_params_t p = {.nranks = o->nranks,
                             .fn = perf_rank,
                             .arg = o,
                             .switch_addr = o->switch_addr,
                             .timeout_s = o->timeout_s,
                             .prog = "incmoe-perf"};
    inc_launch_rank_t ranks[INCMOE_MAX_RANKS];
    inc_launch_result_t res;
    int rc = 0;
    if (inc_launch_ranks(&p, &sw, ranks, &res) != 0) {
        int st = res.failed_rank >= 0 ? ranks[res.failed_rank].status : -1;
        rc = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1 ? 1 : 2;
    }
    inc_launch_switch_stop(&sw, 5);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    int p = parse_args(argc, argv, &o);
    if (p != 0)
        return p > 0 ? 0 : 2;
    int rc;
    if (o.rank >= 0) {
        int st = run_rank(&o, o.rank);
        rc = st == 0 ? 0 : st > 0 ? 1 : 2;
    } else {
        rc = run_embedded(&o);
    }
    dc_placement_free(&o);
    return rc;
}
