/*
 * probe_addr.c - mutated copies of this UCX's own worker address handed to
 * ucp_ep_create(), one child process each, with or without
 * inc_ucx_addr_check first: what UCX itself does with them, the measurement
 * behind base/ucx_addr.c (RELIABILITY.md, "A peer's worker address").
 *
 *   probe-addr [--no-check] COUNT SEED
 *
 * Each child opens a context and worker as the switch does (active messages,
 * wakeup, one thread, peer error handling), mutates its own address (bits
 * flipped, bytes set to random or boundary values, the header rewritten, cut
 * short, grown, a span deleted or repeated), checks it unless --no-check,
 * creates an endpoint, sends one active message and progresses 150 ms, then
 * closes.  The parent counts how each child ended: the check refused it, UCX
 * refused it (ucp_ep_create's status), it went through, or the child died by
 * a signal (an abort: UCX's assertion or a crash), whose first UCX line is
 * printed.  Exit status 1 when a child the check passed died.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "base/ucx_addr.h"

enum { ENDED_OK, ENDED_REFUSED_BY_CHECK = 3, ENDED_REFUSED_BY_UCX = 4, ENDED_SETUP = 5 };

#define AM_ID 17

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Mutates the n bytes at a (room for cap) in place; the new length. */
static size_t mutate(uint8_t *a, size_t n, size_t cap)
{
    static const uint8_t boundary[] = {0, 0xff, 0x7f, 0x80, 0x1f, 0x3f, 0x40, 0x20};
    switch (rnd() % 7) {
    case 0: /* flip 1..4 bits */
        for (int k = 1 + (int)(rnd() % 4); k > 0; k--)
            a[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
        return n;
    case 1: /* 1..4 random bytes */
        for (int k = 1 + (int)(rnd() % 4); k > 0; k--)
            a[rnd() % n] = (uint8_t)rnd();
        return n;
    case 2: /* 1..2 boundary values */
        for (int k = 1 + (int)(rnd() % 2); k > 0; k--)
            a[rnd() % n] = boundary[rnd() % sizeof(boundary)];
        return n;
    case 3: /* the header */
        a[rnd() % 2] = (uint8_t)rnd();
        return n;
    case 4: /* cut short */
        return 1 + rnd() % (n - 1);
    case 5: { /* grown by 1..64 random bytes */
        size_t m = n + 1 + rnd() % 64;
        m = m < cap ? m : cap;
        for (size_t i = n; i < m; i++)
            a[i] = (uint8_t)rnd();
        return m;
    }
    default: { /* a span of 1..8 deleted or repeated */
        size_t at = rnd() % n, span = 1 + rnd() % 8;
        if (rnd() & 1) {
            span = at + span > n ? n - at : span;
            memmove(a + at, a + at + span, n - at - span);
            return n - span > 0 ? n - span : 1;
        }
        if (n + span > cap)
            return n;
        memmove(a + at + span, a + at, n - at);
        return n + span;
    }
    }
}

static ucs_status_t drop(void *arg, const void *header, size_t header_length, void *data,
                         size_t length, const ucp_am_recv_param_t *param)
{
    return UCS_OK;
}

/* One child: mutation i of the worker's own address into ucp_ep_create.  Its exit status
   says how it ended (the ENDED_* values). */
static int child(int i, uint64_t seed, int check)
{
    ucp_config_t *config;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP};
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK ||
        ucp_init(&params, config, &ctx) != UCS_OK ||
        ucp_worker_create(ctx, &wparams, &worker) != UCS_OK)
        return ENDED_SETUP;
    ucp_config_release(config);
    /* Messages to an id without a handler crash UCX 1.13: the endpoint may reach itself. */
    ucp_am_handler_param_t hp = {.field_mask =
                                     UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = AM_ID,
                                 .cb = drop};
    ucp_address_t *own;
    size_t own_len;
    if (ucp_worker_set_am_recv_handler(worker, &hp) != UCS_OK ||
        ucp_worker_get_address(worker, &own, &own_len) != UCS_OK)
        return ENDED_SETUP;
    /* Zeroed slack after the address, as every caller of the check keeps. */
    static uint8_t a[8192];
    memcpy(a, own, own_len);
    rng_state = seed * 1000003u + (uint64_t)i * 7919u + 1;
    for (int k = 0; k < 20; k++)
        rnd();
    size_t n = mutate(a, own_len, sizeof(a) - INC_UCX_ADDR_SLACK);
    if (check && inc_ucx_addr_check(a, n, own, own_len, NULL, 0) != INCMOE_OK)
        return ENDED_REFUSED_BY_CHECK;
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                                 .address = (ucp_address_t *)a,
                                 .err_mode = UCP_ERR_HANDLING_MODE_PEER};
    ucp_ep_h ep;
    if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK)
        return ENDED_REFUSED_BY_UCX;
    static char msg[64];
    ucp_request_param_t rp = {.op_attr_mask = 0};
    ucs_status_ptr_t req = ucp_am_send_nbx(ep, AM_ID, NULL, 0, msg, sizeof(msg), &rp);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        ucp_worker_progress(worker);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 150);
    if (req != NULL && !UCS_PTR_IS_ERR(req)) {
        ucp_request_cancel(worker, req);
        ucp_request_free(req);
    }
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t close_req = ucp_ep_close_nbx(ep, &cp);
    for (int k = 0; k < 1000 && close_req != NULL && !UCS_PTR_IS_ERR(close_req) &&
                    ucp_request_check_status(close_req) == UCS_INPROGRESS;
         k++)
        ucp_worker_progress(worker);
    return ENDED_OK;
}

/* The first line of UCX's that says why a child died, from its captured output. */
static void first_reason(int fd, char *out, size_t out_len)
{
    static char buf[65536];
    out[0] = '\0';
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"))
        if (strstr(line, "Assertion") != NULL || strstr(line, "Caught signal") != NULL) {
            snprintf(out, out_len, "%s", line);
            return;
        }
}

int main(int argc, char **argv)
{
    int check = 1, argi = 1;
    if (argi < argc && strcmp(argv[argi], "--no-check") == 0) {
        check = 0;
        argi++;
    }
    if (argc - argi != 2 || atoi(argv[argi]) < 1) {
        fprintf(stderr, "usage: probe-addr [--no-check] COUNT SEED\n");
        return 2;
    }
    int count = atoi(argv[argi]);
    uint64_t seed = strtoull(argv[argi + 1], NULL, 10);
    int ended[8] = {0}, died = 0;
    for (int i = 0; i < count; i++) {
        char path[] = "/tmp/probe-addr-XXXXXX";
        int out = mkstemp(path);
        if (out < 0) {
            perror("mkstemp");
            return 2;
        }
        unlink(path);
        fflush(stdout); /* or the child inherits the unwritten lines and writes them out */
        pid_t pid = fork();
        if (pid == 0) {
            dup2(out, 1);
            dup2(out, 2);
            alarm(30);
            _exit(child(i, seed, check));
        }
        int status;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status)) {
            char why[512];
            first_reason(out, why, sizeof(why));
            printf("mutation %d: signal %d %s\n", i, WTERMSIG(status), why);
            died++;
        } else {
            ended[WEXITSTATUS(status) & 7]++;
        }
        close(out);
    }
    printf("probe-addr: %d mutations (seed %llu, %s): %d refused by the check, %d refused by "
           "UCX, %d went through, %d set-up failures, %d died by a signal\n",
           count, (unsigned long long)seed, check ? "checked" : "unchecked",
           ended[ENDED_REFUSED_BY_CHECK], ended[ENDED_REFUSED_BY_UCX], ended[ENDED_OK],
           ended[ENDED_SETUP], died);
    return check && died > 0 ? 1 : 0;
}
