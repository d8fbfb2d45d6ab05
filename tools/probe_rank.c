/*
 * probe_rank.c - one rank of tools/probe-killloop: joins a job and runs
 * collectives back to back until one fails, then says when it saw the error.
 *
 *   probe-rank SWITCH JOB RANK NRANKS BYTES SEED
 *
 * The secret comes from INCMOE_AUTH_KEY / INCMOE_AUTH_KEY_FILE as for any
 * rank.  Lines on stdout (the probe reads them):
 *   READY                      after the first collective completed
 *   ERROR <ns> <status> <text> when a collective failed; <ns> is CLOCK_MONOTONIC
 *                              in nanoseconds, the clock Python's
 *                              time.monotonic_ns() reads, so the probe can
 *                              subtract its own kill time
 *   JOINFAIL <status> <text>   incmoe_comm_create failed
 * A rank that is never killed and sees no error runs until killed.  SEED picks
 * the operation of each collective (AllReduce, AllGather, ReduceScatter), so
 * the kills land in all three.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "incmoe/incmoe.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t job, rank, nranks, bytes, seed;
    if (argc != 7 || parse_u64(argv[2], UINT64_MAX, &job) ||
        parse_u64(argv[3], INCMOE_MAX_RANKS - 1, &rank) ||
        parse_u64(argv[4], INCMOE_MAX_RANKS, &nranks) || nranks == 0 || rank >= nranks ||
        parse_u64(argv[5], (uint64_t)1 << 30, &bytes) || bytes < 4 * nranks ||
        parse_u64(argv[6], UINT32_MAX, &seed)) {
        fprintf(stderr,
                "usage: probe-rank SWITCH JOB RANK NRANKS BYTES SEED\n"
                "  RANK < NRANKS <= %d, 4*NRANKS <= BYTES <= 2^30, SEED < 2^32\n",
                INCMOE_MAX_RANKS);
        return 2;
    }
    /* Whole float elements, the same number per block on every rank. */
    size_t block = bytes / nranks / 4 * 4;
    size_t total = block * nranks;

    incmoe_comm_params_t p = {0};
    p.switch_addr = argv[1];
    p.job_id = job;
    p.rank = (int)rank;
    p.nranks = (int)nranks;
    incmoe_comm_t *comm;
    incmoe_status_t st = incmoe_comm_create(&p, &comm);
    if (st != INCMOE_OK) {
        printf("JOINFAIL %d %s\n", (int)st, incmoe_strerror(st));
        fflush(stdout);
        return 1;
    }
    float *send = calloc(total / 4, 4), *recv = calloc(total / 4, 4);
    incmoe_mr_t *smr = NULL, *rmr = NULL;
    if (send == NULL || recv == NULL)
        st = INCMOE_ERR_NO_MEMORY;
    if (st == INCMOE_OK)
        st = incmoe_mem_register(comm, send, total, &smr);
    if (st == INCMOE_OK)
        st = incmoe_mem_register(comm, recv, total, &rmr);

    /* Every rank draws the same sequence of operations from SEED. */
    unsigned state = (unsigned)seed;
    int ready = 0;
    incmoe_layout_t layout = {.block_stride = block, .offset = 0, .length = block, .valid = NULL};
    while (st == INCMOE_OK) {
        incmoe_req_t req;
        switch (rand_r(&state) % 3) {
        case 0:
            st =
                incmoe_allreduce(comm, smr, 0, rmr, 0, total / 4, INCMOE_FLOAT32, INCMOE_SUM, &req);
            break;
        case 1:
            st = incmoe_allgather(comm, smr, rank * block, rmr, 0, &layout, &req);
            break;
        default:
            st = incmoe_reducescatter(comm, smr, 0, rmr, 0, &layout, INCMOE_FLOAT32, INCMOE_SUM,
                                      &req);
            break;
        }
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &req);
        if (st == INCMOE_OK && !ready) {
            ready = 1;
            printf("READY\n");
            fflush(stdout);
        }
    }
    uint64_t when = mono_ns();
    char msg[256] = "";
    incmoe_comm_error(comm, msg, sizeof msg);
    for (char *c = msg; *c; c++)
        if (*c == '\n')
            *c = ' ';
    printf("ERROR %" PRIu64 " %d %s: %s\n", when, (int)st, incmoe_strerror(st), msg);
    fflush(stdout);
    incmoe_comm_destroy(comm);
    free(send);
    free(recv);
    return 1;
}
