/*
 * moe_bench_args.c - incmoe-moe-bench's command line (the option table of
 * args.h), the checks no single option can make, and the settings the layer
 * reads from the environment.
 */
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "moe_bench.h"

#include "base/config.h"

void mb_usage(void)
{
    printf("usage: incmoe-moe-bench [options]\n"
           "  -N RANKS           ranks, 1..64 (default 4)\n"
           "  -t T1,T2,...       tokens per rank (default 64,256,1024)\n"
           "  -E, -k, -H, -I     experts, top-k, hidden, intermediate (default 16, 4, 512, 256;\n"
           "                     E a multiple of N, 1 <= k <= min(E, 64), H and I 1..65536)\n"
           "  -d TYPE            float, half or bfloat16 (default float)\n"
           "  -b BANDS           bands of the pipeline, 1..256 (default 0: chosen automatically)\n"
           "  --model olmoe      OLMoE-1B-7B's shape: E=64 k=8 H=2048 I=1024\n"
           "  --algo LIST        collective algorithms to run, of inc, ring, a2a, and auto:\n"
           "                     the layer's measured choice among the three (default\n"
           "                     inc,ring)\n"
           "  --mode LIST        the layer's modes, of baseline, pipelined, auto: the\n"
           "                     faster of the two, measured by the layer on the first\n"
           "                     forward, a warm-up with -w 1 or more, and decode: the\n"
           "                     layer's decode step for counts within its capacity\n"
           "                     (default baseline,pipelined)\n"
           "  --decode-tokens C  the layer's decode capacity, tokens per rank, 1..max of -t\n"
           "                     (default: the layer's, min(max of -t, 32))\n"
           "  --routing LIST     the layer's routings, of full, masked, auto (default full)\n"
           "  --route R          expert choice: uniform, or zipf:S (popularity (e+1)^-S);\n"
           "                     experts placed contiguously, rank 0 holding the most popular\n"
           "  --seed S           seed of the tokens and their routing (default 0)\n"
           "  --extra-slots S    expert slots per rank beyond E/N for replicas, 0..E-E/N\n"
           "                     (default 0: contiguous, no replicas); the placement is\n"
           "                     chosen by incmoe_moe_placement_choose from a routing sample\n"
           "                     of every rank's tokens on another seed, the same on every rank\n"
           "  --placement-seed S the sample's seed (default --seed + 1)\n"
           "  --placement-tokens T  the sample's tokens per rank, 1..1048576 (default 256)\n"
           "  -n ITERS, -w WARM  timed and warm-up forwards per point (default 5, 2)\n"
           "  --link-mbps BW     per-rank link rate for the configuration model (default:\n"
           "                     measured when the layer is created, INCMOE_MOE_CALIBRATE)\n"
           "                     and the decode rows' bound (default: the testbed's,\n"
           "                     TESTBED_MBPS; without either the bound is not shown)\n"
           "  --depth D          collectives each poster keeps in flight, 1..8 (default\n"
           "                     INCMOE_MOE_DEPTH, 4)\n"
           "  --no-verify        skip the output checks\n"
           "  --backend cpu|cuda the layer's backend (default cpu)\n"
           "  --ranks-in-process the ranks as threads of this process (with cuda: concurrent\n"
           "                     kernels on one GPU, one stream and 1/N of the SMs each)\n"
           "  --switch HOST:PORT --rank R [--job ID]   run as one rank of a job\n");
}

/* -t: token counts, each 0..2^20, at most MAX_T of them. */
static int tokens_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    char *copy = strdup(text), *save = NULL;
    if (copy == NULL) {
        fprintf(stderr, "incmoe-moe-bench: out of memory reading %s\n", flag);
        return -1;
    }
    o->ntokens = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long x;
        if (inc_parse_int(tok, 0, 1 << 20, 0, &x, NULL, 0) != 0 || o->ntokens == MAX_T) {
            o->ntokens = 0;
            break;
        }
        o->tokens[o->ntokens++] = (int)x;
    }
    free(copy);
    if (o->ntokens > 0)
        return 0;
    fprintf(stderr,
            "incmoe-moe-bench: bad value '%s' for -t: want token counts like 64,256,1024 (each "
            "0..1048576, at most %d)\n",
            text, MAX_T);
    return -1;
}

static int dtype_arg(void *dst, const char *flag, const char *text)
{
    incmoe_dtype_t *dt = dst;
    if (!strcmp(text, "float") || !strcmp(text, "fp32"))
        *dt = INCMOE_FLOAT32;
    else if (!strcmp(text, "half") || !strcmp(text, "fp16"))
        *dt = INCMOE_FLOAT16;
    else if (!strcmp(text, "bfloat16") || !strcmp(text, "bf16"))
        *dt = INCMOE_BFLOAT16;
    else {
        fprintf(stderr, "incmoe-moe-bench: -d takes float, half or bfloat16\n");
        return -1;
    }
    return 0;
}

static int model_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    if (strcmp(text, "olmoe") != 0) {
        fprintf(stderr, "incmoe-moe-bench: the only --model is olmoe\n");
        return -1;
    }
    o->model = "olmoe-1b-7b", o->E = 64, o->k = 8, o->H = 2048, o->I = 1024;
    return 0;
}

/* A comma-separated list of names into out[] (the index of each name in names[], each at most
   once, in the order given): how many, or -1 for a word that is none of them. */
static int name_list(const char *text, const char *const *names, int nnames, int *out)
{
    int n = 0;
    for (const char *p = text; *p != '\0';) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < nnames; i++)
            if (strlen(names[i]) == len && strncmp(p, names[i], len) == 0)
                found = i;
        for (int i = 0; i < n && found >= 0; i++)
            if (out[i] == found)
                found = -1;
        if (found < 0)
            return -1;
        out[n++] = found;
        p += len + (p[len] == ',');
    }
    return n;
}

static int algo_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    /* By incmoe_algo_t. */
    static const char *const names[NALGO] = {"inc", "ring", "a2a", "auto"};
    o->nalgos = name_list(text, names, NALGO, o->algos);
    if (o->nalgos <= 0) {
        fprintf(stderr, "incmoe-moe-bench: --algo takes a list of inc, ring and a2a, or auto "
                        "(the layer's choice), e.g. inc,a2a,auto\n");
        return -1;
    }
    return 0;
}

/* By incmoe_moe_mode_t. */
const char *const mb_mode_names[NMODE] = {"baseline", "pipelined", "auto", "decode"};

static int mode_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    o->nmodes = name_list(text, mb_mode_names, NMODE, o->modes);
    if (o->nmodes <= 0) {
        fprintf(stderr, "incmoe-moe-bench: --mode takes a list of baseline, pipelined, auto "
                        "and decode, e.g. baseline,decode\n");
        return -1;
    }
    return 0;
}

static int routing_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    /* By incmoe_moe_routing_t. */
    static const char *const names[NROUTING] = {"full", "masked", "auto"};
    o->nroutings = name_list(text, names, NROUTING, o->routings);
    if (o->nroutings <= 0) {
        fprintf(stderr, "incmoe-moe-bench: --routing takes a list of full, masked and auto, e.g. "
                        "full,masked\n");
        return -1;
    }
    return 0;
}

static int seed_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_u64(text, dst) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for --seed: want 0..2^64-1\n", text);
        return -1;
    }
    return 0;
}

static int place_seed_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    if (inc_arg_u64(text, &o->place_seed) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for %s: want 0..2^64-1\n", text, flag);
        return -1;
    }
    o->place_seed_set = 1;
    return 0;
}

static int job_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_u64(text, dst) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for --job: want 0..2^64-1\n", text);
        return -1;
    }
    return 0;
}

static int link_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_double(text, 0, 1e9, dst) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for --link-mbps: want 0 < BW <= 1e9\n",
                text);
        return -1;
    }
    return 0;
}

static int backend_arg(void *dst, const char *flag, const char *text)
{
    incmoe_moe_backend_t *b = dst;
    if (!strcmp(text, "cpu"))
        *b = INCMOE_MOE_BACKEND_CPU;
    else if (!strcmp(text, "cuda"))
        *b = INCMOE_MOE_BACKEND_CUDA;
    else {
        fprintf(stderr, "incmoe-moe-bench: --backend takes cpu or cuda\n");
        return -1;
    }
    return 0;
}

/* As inc_arg_getopt: 0 to run, 1 for --help, -1 or -2 on a bad command line (said). */
int mb_parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.nranks = 4,
                  .rank = -1,
                  .E = 16,
                  .k = 4,
                  .H = 512,
                  .I = 256,
                  .dtype = INCMOE_FLOAT32,
                  .tokens = {64, 256, 1024},
                  .ntokens = 3,
                  .iters = 5,
                  .warmup = 2,
                  .verify = 1,
                  .algos = {INCMOE_ALGO_RING, INCMOE_ALGO_INC},
                  .nalgos = 2,
                  .routings = {INCMOE_MOE_ROUTING_FULL},
                  .nroutings = 1,
                  .modes = {INCMOE_MOE_BASELINE, INCMOE_MOE_PIPELINED},
                  .nmodes = 2,
                  .place_tokens = 256};
    const inc_arg_t args[] = {
        {"-N", NULL, INC_ARG_INT, 1, MAX_RANKS, &o->nranks},
        {"-t", NULL, INC_ARG_FN, .dst = o, .fn = tokens_arg},
        {"-E", NULL, INC_ARG_INT, 1, 1 << 16, &o->E},
        {"-k", NULL, INC_ARG_INT, 1, INCMOE_MOE_MAX_TOPK, &o->k},
        {"-H", NULL, INC_ARG_INT, 1, 1 << 16, &o->H},
        {"-I", NULL, INC_ARG_INT, 1, 1 << 16, &o->I},
        {"-d", NULL, INC_ARG_FN, .dst = &o->dtype, .fn = dtype_arg},
        {"-b", NULL, INC_ARG_INT, 0, INCMOE_MOE_MAX_BANDS, &o->bands},
        {"--decode-tokens", NULL, INC_ARG_INT, 1, 1 << 20, &o->decode_tokens},
        {"-n", NULL, INC_ARG_INT, 1, 1 << 20, &o->iters},
        {"-w", NULL, INC_ARG_INT, 0, 1 << 20, &o->warmup},
        {"--model", NULL, INC_ARG_FN, .dst = o, .fn = model_arg},
        {"--algo", NULL, INC_ARG_FN, .dst = o, .fn = algo_arg},
        {"--routing", NULL, INC_ARG_FN, .dst = o, .fn = routing_arg},
        {"--mode", NULL, INC_ARG_FN, .dst = o, .fn = mode_arg},
        {"--route", NULL, INC_ARG_ZIPF, .dst = &o->zipf},
        {"--seed", NULL, INC_ARG_FN, .dst = &o->seed, .fn = seed_arg},
        {"--extra-slots", NULL, INC_ARG_INT, 0, 1 << 16, &o->extra_slots},
        {"--placement-seed", NULL, INC_ARG_FN, .dst = o, .fn = place_seed_arg},
        {"--placement-tokens", NULL, INC_ARG_INT, 1, 1 << 20, &o->place_tokens},
        {"--switch", NULL, INC_ARG_TEXT, .dst = &o->switch_addr},
        {"--rank", NULL, INC_ARG_INT, 0, MAX_RANKS - 1, &o->rank},
        {"--job", NULL, INC_ARG_FN, .dst = &o->job, .fn = job_arg},
        {"--link-mbps", NULL, INC_ARG_FN, .dst = &o->link_mbps, .fn = link_arg},
        {"--depth", NULL, INC_ARG_INT, 1, 8, &o->depth},
        {"--no-verify", NULL, INC_ARG_SET, 0, .dst = &o->verify},
        {"--backend", NULL, INC_ARG_FN, .dst = &o->backend, .fn = backend_arg},
        {"--ranks-in-process", NULL, INC_ARG_SET, 1, .dst = &o->in_process},
        {"-h", "--help", INC_ARG_HELP},
    };
    return inc_arg_getopt("incmoe-moe-bench", args, sizeof(args) / sizeof(args[0]), argc, argv);
}

/* What no single option can check: the options against each other and this build. */
int mb_check_opts(const opts_t *o)
{
    if (o->nranks < 1 || o->nranks > MAX_RANKS || o->E < o->nranks || o->E % o->nranks != 0 ||
        o->k < 1 || o->k > o->E || o->H < 1 || o->I < 1 || o->iters < 1 || o->warmup < 0 ||
        o->bands < 0) {
        fprintf(stderr,
                "incmoe-moe-bench: need 1 <= N <= %d, E a multiple of N, 1 <= k <= E, "
                "H, I, -n >= 1 (got N=%d E=%d k=%d H=%d I=%d n=%d)\n",
                MAX_RANKS, o->nranks, o->E, o->k, o->H, o->I, o->iters);
        return -1;
    }
#ifndef INCMOE_MOE_CUDA
    if (o->backend == INCMOE_MOE_BACKEND_CUDA) {
        fprintf(stderr, "incmoe-moe-bench: --backend cuda: this build has no CUDA backend "
                        "(configure found no CUDA toolkit)\n");
        return -1;
    }
#endif
    for (int i = 0; i < o->nalgos; i++)
        if (o->algos[i] == MB_ALGO_AUTO && o->backend != INCMOE_MOE_BACKEND_CPU) {
            fprintf(stderr, "incmoe-moe-bench: --algo auto: only the cpu backend runs other "
                            "algorithms than its communicator's\n");
            return -1;
        }
    int max_t = 0;
    for (int i = 0; i < o->ntokens; i++)
        max_t = o->tokens[i] > max_t ? o->tokens[i] : max_t;
    if (o->decode_tokens > max_t) {
        fprintf(stderr,
                "incmoe-moe-bench: --decode-tokens %d is over the largest -t, %d (the layer's "
                "max_tokens)\n",
                o->decode_tokens, max_t);
        return -1;
    }
    if (mb_link_mbps(o) < 0) {
        fprintf(stderr,
                "incmoe-moe-bench: TESTBED_MBPS='%s' is not a link rate (0 < Mbit/s <= 1e9); "
                "give --link-mbps\n",
                getenv("TESTBED_MBPS"));
        return -1;
    }
    if (o->extra_slots > o->E - o->E / o->nranks) {
        fprintf(stderr,
                "incmoe-moe-bench: --extra-slots %d is more than E - E/N = %d (a rank "
                "holds at most all E experts)\n",
                o->extra_slots, o->E - o->E / o->nranks);
        return -1;
    }
    if (o->place_seed_set && o->extra_slots == 0) {
        fprintf(stderr, "incmoe-moe-bench: --placement-seed seeds --extra-slots's sample\n");
        return -1;
    }
    if (o->extra_slots > 0 && o->backend != INCMOE_MOE_BACKEND_CPU) {
        fprintf(stderr, "incmoe-moe-bench: --extra-slots: replicated experts run on the cpu "
                        "backend only (incmoe_moe.h, \"Replicas\")\n");
        return -1;
    }
    if (o->in_process && o->rank >= 0) {
        fprintf(stderr, "incmoe-moe-bench: --ranks-in-process runs every rank; drop --rank\n");
        return -1;
    }
    if (o->rank >= 0 && (o->switch_addr == NULL || o->rank >= o->nranks)) {
        fprintf(stderr, "incmoe-moe-bench: --rank needs --switch and a rank below -N\n");
        return -1;
    }
    return 0;
}

/* The settings the layer reads from the environment. */
void mb_set_environment(const opts_t *o)
{
    /* One BLAS thread per rank: the ranks share the machine's cores. */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    if (o->link_mbps > 0) {
        char v[32];
        snprintf(v, sizeof(v), "%.0f", o->link_mbps);
        setenv("INCMOE_MOE_LINK_MBPS", v, 1);
    }
    if (o->depth > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", o->depth);
        setenv("INCMOE_MOE_DEPTH", v, 1);
    }
}
