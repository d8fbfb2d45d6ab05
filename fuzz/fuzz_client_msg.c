/*
 * fuzz_client_msg.c - libFuzzer target for the client's handling of what the
 * switch sends.
 *
 * What it drives (the product's own code, compiled with the sanitizers):
 * client_am_cb (comm.c) with every message, and under it the JOIN_ACK parser
 * (join.c), ERROR/HEARTBEAT/DONE handling (comm.c, coll.c), the in-network
 * algorithm's FWD, SMALL_FWD and CREDIT handling and its DATA and SMALL
 * pump (innet.c, send.c), dispatch and combine's PLAN and FWD handling and
 * their POST, SMALL and DATA (innet_dc.c, dc_shared.c), their low-latency
 * form's LL and LL_FWD (innet_ll.c, ll_shared.c, ll_pack.c, ll_place.c),
 * the posting API (post.c: incmoe_allgather, incmoe_reducescatter,
 * incmoe_allreduce, incmoe_barrier; dc_post.c: incmoe_dispatch,
 * incmoe_combine; with their argument checks), retirement (coll.c), and at
 * the end incmoe_comm_destroy with whatever is in flight.
 *
 * What it replaces: UCX, by ucx_fake.c, whose requests complete when the
 * input says so; and the three things that need it to exist.  The
 * communicator is filled in the way comm_open() fills it, with fake UCX
 * handles and no message handler (this harness calls client_am_cb itself),
 * and joins through a JOIN_ACK this harness delivers;
 * incmoe_mem_register would map memory on the proxy thread, so the two
 * regions are linked in as it leaves them (no UCX mapping); and this thread
 * stands in for the proxy thread, doing what one turn of its loop does after
 * progressing the worker: start queued collectives, then let the algorithm
 * move data while the communicator is healthy (the liveness check is left
 * out: it depends on the clock).  destroy joins a proxy thread that has
 * nothing to do.
 *
 * Every message the client sends is checked (ucx_fake's send hook): a header
 * that passes inc_wire_hdr_check, this rank and job, a message type ranks
 * send, DATA read from inside the registered send region; and every
 * rendezvous receive lands inside the receive region or in memory of its own.
 *
 * Input: 5 setup bytes (nranks = 2 + b0 % 3, rank = b1 % nranks, credits =
 * 1 + b2 % 4, chunk size = 8 * (1 + b3 % 8), b4 & 1: send DATA rendezvous),
 * a byte n and n % 5 collective descriptors of 3 bytes (see post()), then
 * records, each starting with a byte c:
 *   c % 8 in 0..2  a message from the switch: u16 payload length, the 72-byte
 *                  header, the payload; 0 and 1 eager, 2 rendezvous
 *   3  next byte n: complete the n % 16 + 1 oldest sends (failed if n >= 128)
 *   4  next byte n: complete the n % 16 + 1 oldest receives (likewise)
 *   5  next 3 bytes: post one more collective
 *   6  next byte n: the next n % 4 + 1 sends fail at once
 *   7  a local failure the job must hear about (client_fail_job)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "fuzz_input.h"
#include "fuzz_log.h"
#include "ucx_fake.h"

#include "base/ll_wire.h"
#include "base/log.h"
#include "incmoe/incmoe.h"
#include "plugin/algo.h"
#include "plugin/comm.h"
#include "plugin/dc_shared.h"
#include "plugin/mr.h"
#include "plugin/notify.h"
#include "plugin/post.h"

#define JOB_ID 0x1234
#define REGION 512 /* bytes of each registered region: N blocks of up to 128 */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_client_msg: " __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static struct {
    incmoe_comm_t *comm;
    char *send_buf, *recv_buf;
    struct incmoe_mr *send_mr, *recv_mr;
} H;

static int inside(const void *p, size_t n, const char *base)
{
    const char *c = p;
    return c >= base && c <= base + REGION && n <= (size_t)(base + REGION - c);
}

static int overlaps(const void *p, size_t n, const char *base)
{
    const char *c = p;
    return n > 0 && c < base + REGION && c + n > base;
}

static void on_send(ucp_ep_h ep, const void *header, size_t header_length, const void *payload,
                    size_t length, const ucp_request_param_t *param)
{
    (void)param;
    incmoe_comm_t *comm = H.comm;
    char why[160];
    CHECK(ep == FAKE_UCX_EP, "a send on an endpoint that is not the switch's");
    CHECK(inc_wire_hdr_check(header, header_length, length, why, sizeof(why)) == INCMOE_OK,
          "the client sent a malformed message: %s", why);
    struct inc_wire_hdr h;
    memcpy(&h, header, sizeof(h));
    CHECK(h.job == JOB_ID && h.rank == (uint32_t)comm->rank, "%s for job %llu rank %u",
          inc_wire_msg_name(h.msg), (unsigned long long)h.job, h.rank);
    CHECK(h.msg == WIRE_MSG_POST || h.msg == WIRE_MSG_DATA || h.msg == WIRE_MSG_HEARTBEAT ||
              h.msg == WIRE_MSG_LEAVE || h.msg == WIRE_MSG_ERROR || h.msg == WIRE_MSG_SMALL ||
              h.msg == WIRE_MSG_LL,
          "the client sent %s to the switch", inc_wire_msg_name(h.msg));
    if (h.msg == WIRE_MSG_LL) { /* what the switch's parser takes, within the credits */
        inc_wire_ll_view_t v;
        CHECK(inc_wire_ll_parse(&h, comm->nranks, payload, length, &v, why, sizeof(why)) ==
                  INCMOE_OK,
              "the client sent an LL the switch refuses: %s", why);
        CHECK((length + comm->chunk_size - 1) / comm->chunk_size <= comm->credits,
              "an LL of %zu bytes, beyond %u credits of %llu bytes", length, comm->credits,
              (unsigned long long)comm->chunk_size);
    }
    if (h.msg == WIRE_MSG_DATA && inc_wire_is_dc(h.stream)) {
        /* A dispatch's chunk is built, a combine's set chunk comes from the kept sets; its
           partials come from the send region. */
        CHECK(h.stream != INCMOE_STREAM_COMBINE || h.root == h.rank ||
                  inside(payload, length, H.send_buf),
              "combine partials of %zu bytes from outside the send region", length);
        CHECK(h.length <= comm->chunk_size, "DATA of %llu bytes, chunks are %llu",
              (unsigned long long)h.length, (unsigned long long)comm->chunk_size);
    } else if (h.msg == WIRE_MSG_DATA) {
        CHECK(inside(payload, length, H.send_buf), "DATA of %zu bytes from outside the send region",
              length);
        CHECK(h.length <= comm->chunk_size, "DATA of %llu bytes, chunks are %llu",
              (unsigned long long)h.length, (unsigned long long)comm->chunk_size);
        CHECK(h.offset % comm->chunk_size == 0 && h.chunk == h.offset / comm->chunk_size,
              "DATA chunk %u at offset %llu", h.chunk, (unsigned long long)h.offset);
    }
    uint64_t fields = 0;
    if (h.msg == WIRE_MSG_SMALL && inc_wire_is_dc(h.stream))
        fields =
            inc_wire_dc_fields_length((incmoe_stream_t)h.stream, comm->nranks, payload, length);
    if (h.msg == WIRE_MSG_SMALL && inc_wire_is_dc(h.stream))
        CHECK(length >= fields && inc_wire_dc_is_small(length - fields, comm->chunk_size),
              "%s SMALL of %zu bytes, chunks are %llu", inc_wire_stream_name(h.stream), length,
              (unsigned long long)comm->chunk_size);
    else if (h.msg == WIRE_MSG_SMALL)
        CHECK(length >= 8 * (size_t)comm->nranks &&
                  length - 8 * (size_t)comm->nranks <= comm->chunk_size,
              "SMALL of %zu bytes: a table of %d sizes and at most %llu bytes of data", length,
              comm->nranks, (unsigned long long)comm->chunk_size);
    if (h.msg == WIRE_MSG_ERROR)
        CHECK(memchr(payload, '\0', length) != NULL, "ERROR reason without its NUL");
}

static void on_recv(void *buf, size_t length, ucp_mem_h memh)
{
    (void)memh;
    CHECK(inside(buf, length, H.recv_buf) ||
              (!overlaps(buf, length, H.recv_buf) && !overlaps(buf, length, H.send_buf)),
          "a rendezvous receive of %zu bytes lands across a region's edge", length);
}

/* ------------------------------------------------------------------------ */
/* the communicator                                                         */

static void *idle_proxy(void *arg)
{
    return arg;
}

/* What comm_open() leaves, with fake UCX handles, and what the JOIN_ACK and connect add. */
static void comm_setup(const uint8_t *b)
{
    incmoe_comm_t *comm = calloc(1, sizeof(*comm));
    CHECK(comm != NULL, "out of memory");
    H.comm = comm;
    comm->nranks = 2 + b[0] % 3;
    comm->rank = b[1] % comm->nranks;
    comm->job_id = JOB_ID;
    comm->ops = &client_innet_ops;
    comm->timeout_ms = 10000;
    comm->rndv_thresh = (b[4] & 1) ? 16 : SIZE_MAX;
    comm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(comm->wake_fd >= 0, "eventfd failed");
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->cond, NULL);
    comm->node =
        (inc_ucx_node_t){.context = FAKE_UCX_CONTEXT, .worker = FAKE_UCX_WORKER, .event_fd = -1};
    comm->ep = FAKE_UCX_EP;
    int share_addr;
    CHECK(comm->ops->open(comm, &share_addr) == INCMOE_OK, "open failed");

    /* The switch's JOIN_ACK: the grant, and an empty address per rank (in-network). */
    size_t len = sizeof(struct inc_wire_join_ack) + (size_t)comm->nranks * sizeof(uint32_t);
    char payload[sizeof(struct inc_wire_join_ack) + 4 * sizeof(uint32_t)] = {0};
    struct inc_wire_join_ack ack = {.nranks = (uint32_t)comm->nranks,
                                    .credits = 1 + b[2] % 4,
                                    .chunk_size = 8 * (1 + b[3] % 8),
                                    .timeout_ms = 10000};
    memcpy(payload, &ack, sizeof(ack));
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_JOIN_ACK, JOB_ID);
    h.rank = (uint32_t)comm->rank;
    h.length = len;
    ucp_am_recv_param_t param = {.recv_attr = 0};
    client_am_cb(comm, &h, sizeof(h), payload, len, &param);
    CHECK(comm->joined && atomic_load(&comm->error) == 0, "the harness's JOIN_ACK was refused");
    CHECK(comm->ops->connect(comm) == INCMOE_OK, "connect failed");
    CHECK(pthread_create(&comm->proxy, NULL, idle_proxy, NULL) == 0, "pthread_create failed");

    /* The two regions, as incmoe_mem_register leaves them but unmapped; exactly REGION bytes,
       so ASan sees any write past them. */
    H.send_buf = calloc(1, REGION);
    H.recv_buf = calloc(1, REGION);
    H.send_mr = calloc(1, sizeof(*H.send_mr));
    H.recv_mr = calloc(1, sizeof(*H.recv_mr));
    CHECK(H.send_buf && H.recv_buf && H.send_mr && H.recv_mr, "out of memory");
    *H.send_mr = (struct incmoe_mr){.base = H.send_buf, .length = REGION};
    *H.recv_mr = (struct incmoe_mr){.next = H.send_mr, .base = H.recv_buf, .length = REGION};
    comm->mrs = H.recv_mr;
}

/* One turn of the proxy's loop, after the worker's progress (proxy_main in comm.c). */
static void proxy_turn(void)
{
    incmoe_comm_t *comm = H.comm;
    client_drain_submissions(comm);
    if (atomic_load(&comm->error) == 0 && comm->ops->progress != NULL)
        comm->ops->progress(comm);
}

/*
 * A dispatch from 3 bytes: nrows = b1 % 8 rows of 8 * (1 + (b1 >> 3) % 4) bytes, row i's set
 * (b2 >> 4) + i over the ranks' bits, capacity b2 % 16 rows.  A combine: of the oldest kept
 * dispatch (the first if none is kept, which is refused), rows of 1 + b1 % 8 elements of a
 * dtype and op as for ReduceScatter.
 */
static void post_dc(const uint8_t *b, incmoe_stream_t stream, incmoe_dtype_t dtype,
                    incmoe_redop_t redop)
{
    incmoe_comm_t *comm = H.comm;
    incmoe_req_t req;
    if (stream == INCMOE_STREAM_DISPATCH) {
        uint64_t sets[8];
        incmoe_dispatch_params_t p = {.send_mr = H.send_mr,
                                      .nrows = b[1] % 8,
                                      .row_bytes = 8 * (1 + (size_t)(b[1] >> 3) % 4),
                                      .sets = sets,
                                      .recv_mr = H.recv_mr,
                                      .capacity = b[2] % 16};
        if ((b[0] / 6) % 2) { /* the low-latency form (its combine follows it) */
            p.field_mask = INCMOE_DISPATCH_PARAM_LOW_LATENCY;
            p.max_tokens = 2 + (size_t)(b[2] & 3);
            p.capacity = (size_t)comm->nranks * p.max_tokens;
        }
        for (size_t i = 0; i < p.nrows; i++)
            sets[i] = ((uint64_t)(b[2] >> 4) + i) % ((uint64_t)1 << comm->nranks);
        (void)incmoe_dispatch(comm, &p, &req);
        return;
    }
    incmoe_combine_params_t p = {.send_mr = H.send_mr,
                                 .recv_mr = H.recv_mr,
                                 .row_count = 1 + b[1] % 8,
                                 .dtype = dtype,
                                 .op = redop};
    uint64_t oldest = 0;
    pthread_mutex_lock(&comm->lock);
    for (const client_dc_t *dc = comm->dcs; dc != NULL; dc = dc->next)
        if (oldest == 0 || dc->epoch < oldest)
            oldest = dc->epoch;
    pthread_mutex_unlock(&comm->lock);
    p.dispatch = (incmoe_req_t){INCMOE_STREAM_DISPATCH, oldest != 0 ? oldest : 1};
    (void)incmoe_combine(comm, &p, &req);
}

/*
 * One collective from 3 bytes: k = b0 % 6 the stream (4, 5: post_dc, a dispatch in the
 * low-latency form if b0 / 6 is odd: max_tokens 2 + b2 % 4, capacity N x max_tokens); AllGather and
 * ReduceScatter: block stride 8 * (1 + b1 % 16), window offset 8 * (b2 % 4),
 * the rest of the block its length, every rank's valid bytes the whole block
 * or (b2 & 8) less for odd ranks; ReduceScatter and AllReduce: dtype from
 * b2 >> 4 and redop from b1 >> 6; AllReduce: 1 + b1 % 64 elements.
 */
static void post(const uint8_t *b)
{
    static const incmoe_dtype_t dtypes[] = {INCMOE_FLOAT32,  INCMOE_INT32,   INCMOE_FLOAT16,
                                            INCMOE_BFLOAT16, INCMOE_FLOAT64, INCMOE_UINT8,
                                            INCMOE_INT64,    INCMOE_UINT32};
    incmoe_comm_t *comm = H.comm;
    incmoe_stream_t stream = (incmoe_stream_t)(b[0] % 6);
    if (client_stream_room(comm, stream) == 0)
        return; /* a post would wait for the window */
    incmoe_dtype_t dtype = dtypes[(b[2] >> 4) % 8];
    incmoe_redop_t redop = (incmoe_redop_t)(b[1] >> 6);
    if (inc_wire_is_dc(stream)) {
        post_dc(b, stream, dtype, redop);
        return;
    }
    incmoe_req_t req;
    size_t valid[4];
    incmoe_layout_t layout = {.block_stride = 8 * (1 + b[1] % 16), .offset = 8 * (b[2] % 4)};
    if (layout.offset > layout.block_stride)
        layout.offset = layout.block_stride;
    layout.length = layout.block_stride - layout.offset;
    if (b[2] & 8) {
        for (int r = 0; r < comm->nranks; r++)
            valid[r] = (r & 1) ? layout.block_stride / 2 : layout.block_stride;
        layout.valid = valid;
    }
    switch (stream) {
    case INCMOE_STREAM_ALLGATHER:
        (void)incmoe_allgather(comm, H.send_mr, 0, H.recv_mr, 0, &layout, &req);
        break;
    case INCMOE_STREAM_REDUCESCATTER:
        (void)incmoe_reducescatter(comm, H.send_mr, 0, H.recv_mr, 0, &layout, dtype, redop, &req);
        break;
    case INCMOE_STREAM_ALLREDUCE:
        (void)incmoe_allreduce(comm, H.send_mr, 0, H.recv_mr, 0, 1 + b[1] % 64, dtype, redop, &req);
        break;
    default:
        (void)incmoe_barrier(comm, &req);
        break;
    }
}

static void deliver(int rndv, const uint8_t *hdr, const uint8_t *payload, size_t length)
{
    ucp_am_recv_param_t param = {.recv_attr = rndv ? UCP_AM_RECV_ATTR_FLAG_RNDV : 0};
    void *data;
    if (rndv) {
        data = fake_ucx_desc_new(payload, length);
    } else {
        data = malloc(length ? length : 1); /* exactly the payload: ASan sees any overread */
        CHECK(data != NULL, "out of memory");
        memcpy(data, payload, length);
    }
    (void)fake_ucx_take_recvs_posted();
    ucs_status_t st = client_am_cb(H.comm, hdr, sizeof(struct inc_wire_hdr), data, length, &param);
    int posted = fake_ucx_take_recvs_posted();
    if (rndv) {
        CHECK(posted == (st == UCS_INPROGRESS), "rendezvous answered %d with %d receives posted",
              (int)st, posted);
        if (st != UCS_INPROGRESS)
            fake_ucx_desc_free(data);
    } else {
        CHECK(posted == 0 && st == UCS_OK, "eager data answered %d, %d receives posted", (int)st,
              posted);
        free(data);
    }
}

/* Per stream: active collectives in epoch order, none ahead of what was posted. */
static void check_streams(void)
{
    incmoe_comm_t *comm = H.comm;
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        const client_stream_t *st = &comm->streams[s];
        uint64_t completed = atomic_load(&st->completed), last = completed;
        CHECK(completed <= st->posted, "%s completed %llu of %llu posted", inc_wire_stream_name(s),
              (unsigned long long)completed, (unsigned long long)st->posted);
        for (const coll_op_t *op = st->head; op != NULL; op = op->next) {
            CHECK(op->epoch > last, "%s epoch %llu out of order", inc_wire_stream_name(s),
                  (unsigned long long)op->epoch);
            CHECK(op->recv_done <= op->recv_expected, "%s epoch %llu received %llu of %llu",
                  inc_wire_stream_name(s), (unsigned long long)op->epoch,
                  (unsigned long long)op->recv_done, (unsigned long long)op->recv_expected);
            last = op->epoch;
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_log_quiet();
    fake_ucx_set_hooks(on_send, on_recv);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size)
{
    if (size < 6)
        return 0;
    comm_setup(in);
    size_t pos = 5;
    int nposts = in[pos++] % 5;
    for (int i = 0; i < nposts && size - pos >= 3; i++, pos += 3)
        post(in + pos);
    proxy_turn();
    while (pos < size) {
        uint8_t c = in[pos++];
        int action = c % 8;
        if (action <= 2) {
            fuzz_msg_t m;
            if (!fuzz_take_msg(in, size, &pos, &m))
                break;
            deliver(action == 2, m.hdr, m.payload, m.length);
        } else if (action == 5) {
            if (size - pos < 3)
                break;
            post(in + pos);
            pos += 3;
        } else if (action == 7) {
            client_fail_job(H.comm, INCMOE_ERR_INVALID_ARG, "the fuzz input failed this rank");
        } else {
            uint8_t n = pos < size ? in[pos++] : 0;
            ucs_status_t st = n >= 128 ? UCS_ERR_CONNECTION_RESET : UCS_OK;
            if (action == 3)
                fake_ucx_complete_sends(n % 16 + 1, st);
            else if (action == 4)
                fake_ucx_complete_recvs(n % 16 + 1, st);
            else
                fake_ucx_fail_sends(n % 4 + 1, UCS_ERR_NOT_CONNECTED);
        }
        proxy_turn();
        check_streams();
    }

    /* The end: collectives still in flight would make destroy wait out the timeout for them,
       as it would for a switch that went quiet; fail them the way that timeout does. */
    incmoe_comm_t *comm = H.comm;
    uint64_t left = 0;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        left += comm->streams[s].posted - atomic_load(&comm->streams[s].completed);
    if (left > 0 && atomic_load(&comm->error) == 0)
        client_fail(comm, INCMOE_ERR_TIMEOUT, "the fuzz input ended with collectives in flight");
    fake_ucx_fail_sends(0, UCS_OK);
    incmoe_comm_destroy(comm);
    CHECK(fake_ucx_pending() == 0, "%d UCX requests outlived the communicator", fake_ucx_pending());
    CHECK(fake_ucx_unfreed() == 0, "%d UCX requests never freed", fake_ucx_unfreed());
    /* destroy freed the regions' records (client_mr_close_all); the memory is the caller's. */
    free(H.send_buf);
    free(H.recv_buf);
    memset(&H, 0, sizeof(H));
    return 0;
}
