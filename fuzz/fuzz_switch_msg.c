/*
 * fuzz_switch_msg.c - libFuzzer target for the switch's message handling.
 *
 * What it drives (the product's own code, compiled with the sanitizers):
 * switch/demux.c (header check, JOIN-first rule), membership.c (join,
 * authentication, admission, failure, retirement), engine.c (the router and
 * its forms table), chunked.c (POST, DATA, reductions, FWD, CREDIT, DONE),
 * small.c (SMALL, SMALL_FWD), dc_form.c, dc_item.c, dc_dispatch.c and
 * dc_combine.c (dispatch and combine: POST with its plan, PLAN, SMALL pieces,
 * the filtered multicast, the masked reduction), ll_form.c (their low-latency
 * form: LL in, LL_FWD out, each LL_FWD checked by base/ll_wire.c's parser),
 * trips.c (the counts and their tx), coll_item.c (their items' lifetime) and
 * the base library under them.  Each
 * message goes to switch_demux() exactly as server.c's UCX receive
 * callback hands it over once it has found the connection.
 *
 * What it replaces: server.c.  The connections are conn_t's this file makes
 * and reaps the way server.c does; the switch_tx interface (tx.h) is a
 * recorder that checks every send the switch makes (a header that passes
 * inc_wire_hdr_check, a message type the switch may send, the destination's
 * job and rank, a payload that stays readable until the send completes) and
 * completes sends and rendezvous receives only when the input says so, in
 * order, so completions interleave with new messages as they do under UCX;
 * or, while the input asks for it, completes each send inside the call that
 * made it, as UCX does when a send can complete at once.
 * Reductions run inline (--threads 1); the clock is real, and liveness and
 * progress timeouts are reached by moving the recorded times back.
 *
 * Input: a sequence of records, each starting with a byte c:
 *   c % 8 in 0..3  a message from connection (c / 8) % NCONN:
 *                  u16 payload length (little-endian), the 72-byte header,
 *                  the payload.  0 and 3: eager, copied; 1: eager data UCX
 *                  lets the switch keep (UCP_AM_RECV_ATTR_FLAG_DATA);
 *                  2: rendezvous.
 *   4  next byte n: complete the n % 16 + 1 oldest sends (failed if n >= 128);
 *      n & 64 first turns completing new sends inline on (or back off)
 *   5  next byte n: complete the n % 16 + 1 oldest rendezvous receives (likewise)
 *   6  connection (c / 8) % NCONN is lost (its slot reconnects afresh)
 *   7  next byte n: a turn of the event loop; n & 1 ages every connection
 *      past its liveness timeout first, n & 2 every collective past the
 *      progress timeout
 * At the end the switch shuts down, everything pending completes (failed),
 * and the harness checks that every job, buffer, byte of accounted memory
 * and kept UCX buffer is gone.
 *
 * Switch trees (switch/tree.c): as built, the switch is a root, and a
 * connection whose first message is a TREE_JOIN is a child switch (TREE_POST,
 * its DATA and SMALL for the ranks beneath it, CREDIT of its window).  Built with FUZZ_SWITCH_CHILD
 * (fuzz_switch_child.c) the switch is a child: its link to the parent, opened
 * when a job's first rank joins, is connection NCONN - 1 from then on, so the
 * input speaks as the parent there (JOIN_ACK, FWD, CREDIT, TREE_POST,
 * SMALL_FWD, ERROR) and as ranks on the others.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fuzz_log.h"

#include "base/clock.h"
#include "base/ll_wire.h"
#include "base/log.h"
#include "base/shrink_wire.h"
#include "switch/coll_table.h"
#include "switch/demux.h"
#include "switch/engine.h"

#define NCONN 6

/* A broken invariant is a crash libFuzzer records, with the reason on stderr. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_switch_msg: " __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct pending_send {
    struct pending_send *next;
    conn_t *conn;
    struct inc_wire_hdr hdr;
    const void *payload;
    size_t length;
    switch_tx_cb_t cb;
    void *arg;
    void *owned; /* ERROR text, freed on completion */
} pending_send_t;

/* A rendezvous payload: what UCX's data descriptor stands for. */
typedef struct {
    size_t length;
    unsigned char bytes[];
} rndv_desc_t;

typedef struct pending_recv {
    struct pending_recv *next;
    rndv_desc_t *desc;
    void *buf;
    size_t length;
    switch_rx_t *rx;
} pending_recv_t;

/* The pending sends and receives are queues, first in first out: head is the first entry,
   tail the next field of the last (&head when empty). */
#define QUEUE_PUSH(tail, p)                                                                        \
    do {                                                                                           \
        *(tail) = (p);                                                                             \
        (tail) = &(p)->next;                                                                       \
    } while (0)
/* p = the first entry, taken off the queue (which must not be empty). */
#define QUEUE_POP(head, tail, p)                                                                   \
    do {                                                                                           \
        (p) = (head);                                                                              \
        (head) = (p)->next;                                                                        \
        if ((head) == NULL)                                                                        \
            (tail) = &(head);                                                                      \
    } while (0)

/* Eager payloads the switch kept (UCS_INPROGRESS) and must give back with release_data. */
typedef struct kept {
    struct kept *next;
    void *data;
} kept_t;

static struct {
    switch_settings_t set;
    switch_stats_t stats;
    engine_t eng;
    switch_demux_t demux;
    conn_t *conns;       /* the server's list, newest first */
    conn_t *slot[NCONN]; /* the connection each fake rank process is on now */
    pending_send_t *sends, **sends_tail;
    pending_recv_t *recvs, **recvs_tail;
    kept_t *kept;
    int recv_posted;  /* recv_data calls during the current message */
    int inline_sends; /* complete each send before the call that makes it returns */
} H;

/* ------------------------------------------------------------------------ */
/* the recorder behind switch_tx                                            */

/* Touch every payload byte: ASan reports a buffer that is gone or too short. */
static unsigned char touch(const void *p, size_t n)
{
    const volatile unsigned char *b = p;
    unsigned char x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= b[i];
    return x;
}

static void check_send(conn_t *conn, const struct inc_wire_hdr *hdr, const void *payload,
                       size_t length)
{
    char why[160];
    CHECK(inc_wire_hdr_check(hdr, sizeof(*hdr), length, why, sizeof(why)) == INCMOE_OK,
          "the switch sent a malformed %s: %s", inc_wire_msg_name(hdr->msg), why);
    if (conn->role == CONN_PARENT) { /* up the tree: what a rank sends, for the ranks beneath */
        CHECK(hdr->msg == WIRE_MSG_TREE_JOIN || hdr->msg == WIRE_MSG_TREE_POST ||
                  hdr->msg == WIRE_MSG_DATA || hdr->msg == WIRE_MSG_SMALL ||
                  (hdr->msg == WIRE_MSG_POST && inc_wire_is_dc(hdr->stream)) ||
                  hdr->msg == WIRE_MSG_ERROR || hdr->msg == WIRE_MSG_HEARTBEAT ||
                  hdr->msg == WIRE_MSG_LEAVE ||
                  /* the parent's FWDs of the streams with a window, its ReduceScatter
                     partials under a window per owner (switch/tree.c) and its combine set
                     chunks under one per owner too (switch/dc_window.c) */
                  (hdr->msg == WIRE_MSG_CREDIT && hdr->stream != INCMOE_STREAM_BARRIER),
              "the switch sent its parent %s", inc_wire_msg_name(hdr->msg));
        CHECK(hdr->msg == WIRE_MSG_TREE_JOIN || hdr->msg == WIRE_MSG_ERROR ||
                  hdr->msg == WIRE_MSG_HEARTBEAT || hdr->msg == WIRE_MSG_LEAVE ||
                  (conn->job != NULL && conn->job->id == hdr->job),
              "%s for job %llu up a link of another job", inc_wire_msg_name(hdr->msg),
              (unsigned long long)hdr->job);
        (void)touch(payload, length);
        return;
    }
    CHECK(hdr->msg == WIRE_MSG_JOIN_ACK || hdr->msg == WIRE_MSG_ERROR ||
              hdr->msg == WIRE_MSG_HEARTBEAT || hdr->msg == WIRE_MSG_FWD ||
              hdr->msg == WIRE_MSG_CREDIT || hdr->msg == WIRE_MSG_DONE ||
              hdr->msg == WIRE_MSG_SMALL_FWD || hdr->msg == WIRE_MSG_PLAN ||
              (conn->role == CONN_RANK &&
               (hdr->msg == WIRE_MSG_LL_FWD || hdr->msg == WIRE_MSG_SHRINK_ACK)) ||
              (conn->role == CONN_CHILD &&
               (hdr->msg == WIRE_MSG_TREE_POST ||
                /* a rank's dispatch or combine POST, relayed to every other switch port */
                (hdr->msg == WIRE_MSG_POST && inc_wire_is_dc(hdr->stream)))),
          "the switch sent %s, which it never sends", inc_wire_msg_name(hdr->msg));
    CHECK(length == 0 || payload != NULL, "%s of %zu bytes without a payload",
          inc_wire_msg_name(hdr->msg), length);
    if (hdr->msg == WIRE_MSG_FWD || hdr->msg == WIRE_MSG_CREDIT || hdr->msg == WIRE_MSG_DONE ||
        hdr->msg == WIRE_MSG_JOIN_ACK || hdr->msg == WIRE_MSG_SMALL_FWD ||
        hdr->msg == WIRE_MSG_PLAN || hdr->msg == WIRE_MSG_LL_FWD) {
        CHECK(conn->job != NULL && conn->job->id == hdr->job,
              "%s for job %llu to a connection that is not its member", inc_wire_msg_name(hdr->msg),
              (unsigned long long)hdr->job);
    }
    if (hdr->msg == WIRE_MSG_FWD && conn->role == CONN_CHILD) {
        /* to a child switch: by the ports, whose key the header names */
        const job_t *job = conn->job;
        CHECK(hdr->rank == (uint32_t)conn->rank, "FWD names port %u, sent to port %d", hdr->rank,
              conn->rank);
        CHECK(hdr->root < (uint32_t)job->nranks, "FWD of root %u in a job of %d", hdr->root,
              job->nranks);
        int home = job->rep[hdr->root] == conn->rank;
        CHECK(hdr->stream != INCMOE_STREAM_ALLGATHER || !home,
              "an AllGather block went back to the port of its root %u", hdr->root);
        CHECK(hdr->stream != INCMOE_STREAM_REDUCESCATTER || home,
              "a ReduceScatter result of root %u went to port %u", hdr->root, hdr->rank);
    } else if (hdr->msg == WIRE_MSG_FWD) {
        CHECK(hdr->rank == (uint32_t)conn->rank, "FWD names rank %u, sent to rank %d", hdr->rank,
              conn->rank);
        CHECK(hdr->stream != INCMOE_STREAM_ALLGATHER || hdr->root != hdr->rank,
              "an AllGather block went back to its root %u", hdr->root);
        CHECK(hdr->stream != INCMOE_STREAM_REDUCESCATTER || hdr->root == hdr->rank,
              "a ReduceScatter result of root %u went to rank %u", hdr->root, hdr->rank);
        CHECK(hdr->stream != INCMOE_STREAM_DISPATCH || hdr->root != hdr->rank,
              "dispatched rows of rank %u went back to it", hdr->root);
        CHECK(hdr->stream != INCMOE_STREAM_COMBINE || hdr->root == hdr->rank,
              "combined rows of rank %u went to rank %u", hdr->root, hdr->rank);
        CHECK(hdr->length <= H.set.chunk_size, "FWD of %llu bytes, chunks are %llu",
              (unsigned long long)hdr->length, (unsigned long long)H.set.chunk_size);
    }
    if (hdr->msg == WIRE_MSG_SHRINK_ACK) {
        struct inc_wire_shrink_ack ack;
        char bad[160];
        CHECK(inc_wire_shrink_ack_parse(hdr, payload, length, &ack, bad, sizeof(bad)) == INCMOE_OK,
              "the switch sent a SHRINK_ACK its ranks refuse: %s", bad);
    }
    if (hdr->msg == WIRE_MSG_SMALL_FWD) {
        CHECK(hdr->rank == (uint32_t)conn->rank, "SMALL_FWD names rank %u, sent to rank %d",
              hdr->rank, conn->rank);
        CHECK(hdr->length <= H.set.chunk_size, "SMALL_FWD of %llu bytes, chunks are %llu",
              (unsigned long long)hdr->length, (unsigned long long)H.set.chunk_size);
    }
    if (hdr->msg == WIRE_MSG_PLAN) {
        CHECK(hdr->rank == (uint32_t)conn->rank, "PLAN names rank %u, sent to rank %d", hdr->rank,
              conn->rank);
        CHECK(memchr(((const struct inc_wire_dc_plan *)payload)->reason, '\0',
                     INCMOE_WIRE_MAX_TEXT) != NULL,
              "PLAN reason without its NUL");
    }
    if (hdr->msg == WIRE_MSG_LL_FWD) {
        CHECK(hdr->rank == (uint32_t)conn->rank, "LL_FWD names rank %u, sent to rank %d", hdr->rank,
              conn->rank);
        inc_wire_ll_view_t v;
        CHECK(inc_wire_ll_parse(hdr, conn->job->nranks, payload, length, &v, why, sizeof(why)) ==
                  INCMOE_OK,
              "the switch sent an LL_FWD its ranks refuse: %s", why);
        CHECK(hdr->status != 0 || hdr->stream != INCMOE_STREAM_DISPATCH || hdr->root != hdr->rank,
              "rank %u's dispatch LL went back to it", hdr->root);
        CHECK(hdr->status != 0 || hdr->stream != INCMOE_STREAM_COMBINE || hdr->root == hdr->rank,
              "combined rows of rank %u went to rank %u", hdr->root, hdr->rank);
    }
    if (hdr->msg == WIRE_MSG_ERROR)
        CHECK(memchr(payload, '\0', length) != NULL, "ERROR reason without its NUL");
    (void)touch(payload, length);
}

static void queue_send(conn_t *conn, const struct inc_wire_hdr *hdr, const void *payload,
                       size_t length, switch_tx_cb_t cb, void *arg, void *owned)
{
    /* As the server: a connection that is gone fails the send at once. */
    if (conn == NULL || conn->closed) {
        free(owned);
        if (cb != NULL)
            cb(arg, UCS_ERR_NOT_CONNECTED);
        return;
    }
    check_send(conn, hdr, payload, length);
    if (H.inline_sends) {
        if (cb != NULL)
            cb(arg, UCS_OK);
        free(owned);
        return;
    }
    pending_send_t *p = calloc(1, sizeof(*p));
    CHECK(p != NULL, "out of memory");
    *p = (pending_send_t){.conn = conn,
                          .hdr = *hdr,
                          .payload = payload,
                          .length = length,
                          .cb = cb,
                          .arg = arg,
                          .owned = owned};
    conn->refs++;
    QUEUE_PUSH(H.sends_tail, p);
}

static void rec_send(void *server, conn_t *conn, const struct inc_wire_hdr *hdr,
                     const void *payload, size_t length, switch_tx_cb_t cb, void *arg)
{
    (void)server;
    queue_send(conn, hdr, payload, length, cb, arg, NULL);
}

static void rec_send_data(void *server, conn_t *conn, egress_class_t cls,
                          const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                          switch_tx_cb_t cb, void *arg)
{
    (void)server;
    CHECK(cls > EGRESS_CONTROL && cls < EGRESS_CLASSES, "send_data in class %d", (int)cls);
    CHECK(hdr->msg == WIRE_MSG_FWD || hdr->msg == WIRE_MSG_SMALL_FWD ||
              hdr->msg == WIRE_MSG_LL_FWD ||
              (hdr->msg == WIRE_MSG_DATA && conn->role == CONN_PARENT),
          "send_data of %s", inc_wire_msg_name(hdr->msg));
    queue_send(conn, hdr, payload, length, cb, arg, NULL);
}

/* As the server, but built at once rather than when an output queue takes it. */
static void rec_send_built(void *server, conn_t *conn, egress_class_t cls,
                           const struct inc_wire_hdr *hdr, switch_tx_build_t build,
                           switch_tx_cb_t cb, void *arg)
{
    (void)server;
    CHECK(cls > EGRESS_CONTROL && cls < EGRESS_CLASSES, "send_built in class %d", (int)cls);
    CHECK(hdr->msg == WIRE_MSG_FWD || hdr->msg == WIRE_MSG_SMALL_FWD ||
              hdr->msg == WIRE_MSG_LL_FWD ||
              ((hdr->msg == WIRE_MSG_SMALL || hdr->msg == WIRE_MSG_DATA) &&
               conn->role == CONN_PARENT),
          "send_built of %s", inc_wire_msg_name(hdr->msg));
    if (conn == NULL || conn->closed) {
        if (cb != NULL)
            cb(arg, UCS_ERR_NOT_CONNECTED);
        return;
    }
    void *buf = malloc(hdr->length ? (size_t)hdr->length : 1);
    CHECK(buf != NULL, "out of memory");
    build(arg, hdr, buf);
    queue_send(conn, hdr, buf, (size_t)hdr->length, cb, arg, buf);
}

/* The ERROR the server would build (server_send_error), checked and queued. */
static void rec_send_error(void *server, conn_t *conn, uint64_t job, incmoe_status_t status,
                           uint32_t rank, const char *text)
{
    (void)server;
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_ERROR, job);
    h.status = (int16_t)status;
    h.rank = rank;
    CHECK(status < 0, "ERROR with status %d", (int)status);
    size_t n = strlen(text) + 1;
    if (n > INCMOE_WIRE_MAX_TEXT)
        n = INCMOE_WIRE_MAX_TEXT;
    char *copy = malloc(n);
    CHECK(copy != NULL, "out of memory");
    memcpy(copy, text, n - 1);
    copy[n - 1] = '\0';
    h.length = n;
    queue_send(conn, &h, copy, n, NULL, NULL, copy);
}

static void rec_drop(void *server, conn_t *conn)
{
    (void)server;
    conn->state = CONN_DEAD;
}

static conn_t *conn_new(void);

/* The link to the parent (FUZZ_SWITCH_CHILD): a new connection on the last slot, from which the
   input speaks as the parent; its handshake, the server's states in the event loop, is done at
   once, so the link is up before connect_parent returns (as the server's is when its parent
   answers before the loop turns again). */
static void rec_connect_parent(void *server, uint64_t job, switch_parent_cb_t done, void *arg)
{
    (void)server;
    conn_t *c = conn_new();
    c->role = CONN_PARENT;
    c->state = CONN_JOINED;
    c->parent_job = job;
    H.slot[NCONN - 1] = c;
    done(arg, c, INCMOE_OK, NULL);
}

static void rec_recv_data(void *server, void *desc, void *buf, size_t length, switch_rx_t *rx)
{
    (void)server;
    rndv_desc_t *d = desc;
    CHECK(d != NULL && length == d->length, "rendezvous receive of %zu bytes, the message has %zu",
          length, d != NULL ? d->length : 0);
    CHECK(buf != NULL && rx != NULL && rx->done != NULL, "rendezvous receive without a target");
    pending_recv_t *p = calloc(1, sizeof(*p));
    CHECK(p != NULL, "out of memory");
    *p = (pending_recv_t){.desc = d, .buf = buf, .length = length, .rx = rx};
    QUEUE_PUSH(H.recvs_tail, p);
    H.recv_posted++;
}

static void rec_release_data(void *server, void *data)
{
    (void)server;
    for (kept_t **pp = &H.kept; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->data == data) {
            kept_t *k = *pp;
            *pp = k->next;
            free(k->data);
            free(k);
            return;
        }
    }
    CHECK(0, "release_data of %p, which the switch never kept", data);
}

static const switch_tx_ops_t recorder_ops = {
    .send = rec_send,
    .send_data = rec_send_data,
    .send_built = rec_send_built,
    .send_error = rec_send_error,
    .drop = rec_drop,
    .connect_parent = rec_connect_parent,
    .recv_data = rec_recv_data,
    .release_data = rec_release_data,
};

/* ------------------------------------------------------------------------ */
/* completions and connections                                              */

static int complete_sends(int n, ucs_status_t status)
{
    int done = 0;
    while (H.sends != NULL && done < n) {
        pending_send_t *p;
        QUEUE_POP(H.sends, H.sends_tail, p);
        (void)touch(p->payload, p->length); /* still alive until the completion */
        p->conn->refs--;
        if (p->cb != NULL)
            p->cb(p->arg, status);
        free(p->owned);
        free(p);
        done++;
    }
    return done;
}

static int complete_recvs(int n, ucs_status_t status)
{
    int done = 0;
    while (H.recvs != NULL && done < n) {
        pending_recv_t *p;
        QUEUE_POP(H.recvs, H.recvs_tail, p);
        if (status == UCS_OK)
            memcpy(p->buf, p->desc->bytes, p->length);
        free(p->desc);
        p->rx->done(p->rx, status);
        free(p);
        done++;
    }
    return done;
}

static conn_t *conn_new(void)
{
    conn_t *c = calloc(1, sizeof(*c));
    CHECK(c != NULL, "out of memory");
    c->rank = -1;
    c->created = c->last_rx = c->last_tx = inc_now_s();
    c->next = H.conns;
    H.conns = c;
    return c;
}

/* server.c's reap_conns: dead connections leave their jobs and go once no send names them;
   reopen: a fake rank whose connection went connects afresh. */
static void reap(int reopen)
{
    conn_t **pp = &H.conns;
    while (*pp != NULL) {
        conn_t *c = *pp;
        if (c->state != CONN_DEAD) {
            pp = &c->next;
            continue;
        }
        if (c->job != NULL)
            engine_ops.on_conn_lost(&H.eng, c, "its connection failed");
        c->closed = 1;
        if (c->refs > 0) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        for (int i = 0; i < NCONN; i++)
            if (H.slot[i] == c)
                H.slot[i] = NULL;
        free(c);
    }
    for (int i = 0; reopen && i < NCONN; i++)
        if (H.slot[i] == NULL || H.slot[i]->state == CONN_DEAD)
            H.slot[i] = conn_new(); /* the fake rank reconnects */
}

/* Accounting the membership keeps must add up at every step. */
static void check_accounting(void)
{
    const membership_t *m = &H.eng.members;
    size_t reserved = 0;
    for (const job_t *j = m->jobs; j != NULL; j = j->next) {
        CHECK(j->state != JOB_FAILED, "failed job %llu still in the live list",
              (unsigned long long)j->id);
        CHECK(j->mem_used <= j->mem_bound, "job %llu buffers %zu bytes over its bound %zu",
              (unsigned long long)j->id, j->mem_used, j->mem_bound);
        reserved += j->mem_bound;
    }
    CHECK(reserved == m->mem_reserved, "reserved %zu, the live jobs' bounds add up to %zu",
          m->mem_reserved, reserved);
    CHECK(m->mem_reserved <= H.set.max_memory, "reserved %zu over --max-memory %zu",
          m->mem_reserved, H.set.max_memory);
}

/* ------------------------------------------------------------------------ */
/* actions                                                                  */

static void deliver(conn_t *conn, int mode, const uint8_t *hdr, const uint8_t *payload,
                    size_t length)
{
    ucp_am_recv_param_t param = {.recv_attr = UCP_AM_RECV_ATTR_FIELD_REPLY_EP};
    void *data = NULL;
    rndv_desc_t *desc = NULL;
    if (mode == 2) {
        param.recv_attr |= UCP_AM_RECV_ATTR_FLAG_RNDV;
        desc = malloc(sizeof(*desc) + length);
        CHECK(desc != NULL, "out of memory");
        desc->length = length;
        memcpy(desc->bytes, payload, length);
        data = desc;
    } else {
        if (mode == 1)
            param.recv_attr |= UCP_AM_RECV_ATTR_FLAG_DATA;
        data = malloc(length ? length : 1); /* exactly the payload: ASan sees any overread */
        CHECK(data != NULL, "out of memory");
        memcpy(data, payload, length);
    }
    H.recv_posted = 0;
    ucs_status_t st =
        switch_demux(&H.demux, conn, hdr, sizeof(struct inc_wire_hdr), data, length, &param);
    if (mode == 2) {
        CHECK(H.recv_posted == (st == UCS_INPROGRESS),
              "rendezvous answered %d with %d receives posted", (int)st, H.recv_posted);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS || UCS_STATUS_IS_ERR(st),
              "rendezvous answered %d", (int)st);
        if (st != UCS_INPROGRESS)
            free(desc); /* refused or consumed: UCX drops it */
        return;
    }
    CHECK(H.recv_posted == 0, "a receive posted for eager data");
    CHECK(st == UCS_OK || (mode == 1 && st == UCS_INPROGRESS), "eager data (mode %d) answered %d",
          mode, (int)st);
    if (st == UCS_INPROGRESS) {
        kept_t *k = malloc(sizeof(*k));
        CHECK(k != NULL, "out of memory");
        *k = (kept_t){.next = H.kept, .data = data};
        H.kept = k;
    } else {
        free(data);
    }
}

static void age(int conns, int progress)
{
    const double now = inc_now_s();
    if (conns)
        for (conn_t *c = H.conns; c != NULL; c = c->next) {
            double back = (c->job != NULL ? c->job->timeout_ms : H.set.timeout_ms) / 1000.0 + 1;
            c->created = c->last_rx = c->last_tx = now - back;
        }
    if (progress) {
        for (job_t *j = H.eng.members.jobs; j != NULL; j = j->next)
            for (int s = 0; s < INC_STREAM_COUNT; s++) {
                double back = j->progress_timeout_ms / 1000.0 + 1; /* the job's, from its JOINs */
                j->all_posted_at[s] -= back;
                for (coll_t *c = j->colls[s]; c != NULL; c = c->next)
                    c->opened -= back;
            }
        H.eng.progress_checked = 0;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_log_quiet();
    return 0;
}

static void setup(void)
{
    memset(&H, 0, sizeof(H));
    H.sends_tail = &H.sends;
    H.recvs_tail = &H.recvs;
    /* Small chunks and few credits, so short inputs reach chunking, credits and the bounds;
       room for a few small jobs, so admission refuses big ones. */
    H.set.chunk_size = 64;
    H.set.credits = 3;
    H.set.link_window = 2;    /* as a child: the parent's FWDs reach the window soon */
    H.set.max_memory = 32768; /* a job of 3 that dispatches fits */
    H.set.timeout_ms = 10000;
    H.set.progress_timeout_ms = 60000;
    memcpy(H.set.secret, "fuzz-key", 8);
    H.set.secret_len = 8;
    H.set.have_secret = 1;
    H.set.rndv_thresh = SIZE_MAX;
    H.set.egress_limit = 2 * H.set.chunk_size;
    H.set.nthreads = 1;
#ifdef FUZZ_SWITCH_CHILD
    strcpy(H.set.parent, "parent.invalid:1");
#endif
    switch_tx_t tx = {.ops = &recorder_ops, .server = NULL};
    CHECK(engine_init(&H.eng, &H.set, &H.stats, tx) == 0, "engine_init failed");
    H.demux =
        (switch_demux_t){.engine_ops = &engine_ops, .engine = &H.eng, .tx = tx, .stats = &H.stats};
    reap(1); /* opens every slot */
}

/* server_stop's order: fail every job, let everything pending end, reap, then check. */
static void teardown(void)
{
    engine_ops.on_shutdown(&H.eng, "the fuzz input ended");
    for (conn_t *c = H.conns; c != NULL; c = c->next)
        c->state = CONN_DEAD;
    for (;;) {
        reap(0);
        int n = complete_recvs(1 << 30, UCS_ERR_CANCELED);
        n += complete_sends(1 << 30, UCS_ERR_NOT_CONNECTED);
        if (n == 0)
            break;
    }
    CHECK(H.conns == NULL, "a connection outlived the shutdown");
    const membership_t *m = &H.eng.members;
    CHECK(m->jobs == NULL, "a job is live after the shutdown");
    CHECK(m->orphans == NULL, "job %llu was never released", (unsigned long long)m->orphans->id);
    CHECK(m->mem_used == 0, "%zu bytes still accounted after every job ended", m->mem_used);
    CHECK(m->mem_reserved == 0, "%zu bytes still reserved", m->mem_reserved);
    CHECK(H.kept == NULL, "the switch never released a kept eager payload");
    engine_fini(&H.eng);
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size)
{
    setup();
    size_t pos = 0;
    while (pos < size) {
        uint8_t c = in[pos++];
        int action = c % 8;
        int slot = (c / 8) % NCONN;
        if (action <= 3) {
            fuzz_msg_t m;
            if (!fuzz_take_msg(in, size, &pos, &m))
                break;
            deliver(H.slot[slot], action == 3 ? 0 : action, m.hdr, m.payload, m.length);
        } else if (action == 6) {
            H.slot[slot]->state = CONN_DEAD;
        } else {
            uint8_t n = pos < size ? in[pos++] : 0;
            if (action == 4) {
                if (n & 64)
                    H.inline_sends = !H.inline_sends;
                complete_sends(n % 16 + 1, n >= 128 ? UCS_ERR_CONNECTION_RESET : UCS_OK);
            } else if (action == 5) {
                complete_recvs(n % 16 + 1, n >= 128 ? UCS_ERR_CONNECTION_RESET : UCS_OK);
            } else {
                age(n & 1, n & 2);
                engine_ops.on_wake(&H.eng);
                engine_ops.on_tick(&H.eng, H.conns);
            }
        }
        reap(1);
        check_accounting();
    }
    teardown();
    return 0;
}
