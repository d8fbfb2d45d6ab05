/*
 * job.c - the switch engine.
 *
 * A job forms when its N ranks have joined.  Each collective (stream, epoch)
 * is a coll_t; each chunk of a window is an item_t that collects the
 * contributions it needs (AllGather: the root's block; ReduceScatter: the
 * N-1 partials of everyone but the root; AllReduce: all N).  Once every rank
 * has POSTed the collective (so every receiver knows where results go), a
 * complete item is forwarded at once: multicast to the N-1 others, reduced in
 * rank order and sent to the root, or reduced and multicast.  All roots and
 * all chunks proceed independently, so the N rooted reductions of a
 * ReduceScatter run concurrently.  When the forward completes the buffers are
 * freed and the contributors get their credits back.
 *
 * Anything malformed, out of range or inconsistent fails the job with a
 * reason sent to every rank, never the switch: other jobs carry on.
 */
#include "job.h"
#include "base/log.h"
#include "base/reduce.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/clock.h"

#define SUBSYS "switch"

/* Collectives a stream may have open at once (bounds the switch's bookkeeping). */
#define JOB_MAX_OPEN_EPOCHS 4096

static void job_release(server_t *srv, job_t *job);

/* ------------------------------------------------------------------------ */
/* memory accounting                                                         */

/* Count n more bytes buffered by the job (and the switch). */
static void job_account(server_t *srv, job_t *job, size_t n)
{
    job->mem_used += n;
    srv->mem_used += n;
    if (job->mem_used > job->mem_peak)
        job->mem_peak = job->mem_used;
    if (srv->mem_used > srv->stats.mem_peak)
        srv->stats.mem_peak = srv->mem_used;
}

static void *job_alloc(server_t *srv, job_t *job, size_t n)
{
    if (job->mem_used + n > job->mem_bound) {
        /* Credits make this impossible for a rank that follows the protocol. */
        log_error(SUBSYS, "job %llu: %zu more bytes would exceed its bound of %zu",
                  (unsigned long long)job->id, n, job->mem_bound);
        return NULL;
    }
    void *p = malloc(n ? n : 1);
    if (p != NULL)
        job_account(srv, job, n);
    return p;
}

static void job_unaccount(server_t *srv, job_t *job, size_t n)
{
    job->mem_used -= n;
    srv->mem_used -= n;
}

static void job_free_mem(server_t *srv, job_t *job, void *p, size_t n)
{
    if (p == NULL)
        return;
    free(p);
    job_unaccount(srv, job, n);
}

/* ------------------------------------------------------------------------ */
/* failure                                                                   */

static void item_free(server_t *srv, item_t *it);

static void coll_free(server_t *srv, job_t *job, coll_t *c)
{
    item_t **pp = &c->items;
    while (*pp != NULL) {
        item_t *it = *pp;
        /* Items with UCX or a reduction thread still using their buffers stay until those end. */
        if (it->sends_pending > 0 || it->nreceiving > 0 || it->reducing) {
            it->coll = NULL;
            *pp = it->next;
            it->next = NULL;
            continue;
        }
        *pp = it->next;
        item_free(srv, it);
    }
    free(c->posted);
    free(c->bytes);
    free(c);
}

static void job_unlink(server_t *srv, job_t *job);

/* The job is over: drop its collectives, free its id and its memory reservation. */
static void job_retire(server_t *srv, job_t *job)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        while (job->colls[s] != NULL) {
            coll_t *c = job->colls[s];
            job->colls[s] = c->next;
            coll_free(srv, job, c);
        }
    }
    job_unlink(srv, job);
    srv->mem_reserved -= job->mem_bound;
}

static void job_unlink(server_t *srv, job_t *job)
{
    for (job_t **pp = &srv->jobs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == job) {
            *pp = job->next;
            job->next = srv->orphans;
            srv->orphans = job;
            return;
        }
    }
}

/* End a job: every member hears why, the job's state is freed, its id can be reused. */
static void job_fail(server_t *srv, job_t *job, incmoe_status_t status, int rank, const char *fmt,
                     ...) __attribute__((format(printf, 5, 6)));
static void job_fail(server_t *srv, job_t *job, incmoe_status_t status, int rank, const char *fmt,
                     ...)
{
    if (job->state == JOB_FAILED)
        return;
    char text[INCMOE_WIRE_MAX_TEXT - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    log_warn(SUBSYS, "job %llu failed: %s (%s)", (unsigned long long)job->id, text,
             incmoe_strerror(status));
    srv->stats.jobs_failed++;
    job->state = JOB_FAILED;
    for (int r = 0; r < job->nranks; r++) {
        conn_t *c = job->conns[r];
        if (c != NULL && c->state == CONN_JOINED && !c->left)
            server_send_error(srv, c, job->id, status, (uint32_t)(rank < 0 ? 0 : rank), text);
    }
    job_retire(srv, job);
    job->mem_bound = (size_t)-1; /* buffers still in flight are freed later */
}

/* A message that breaks the protocol: counted, and the job ends. */
#define BAD(srv, job, status, rank, ...)                                                           \
    do {                                                                                           \
        (srv)->stats.bad_messages++;                                                               \
        job_fail((srv), (job), (status), (rank), __VA_ARGS__);                                     \
    } while (0)

/* ------------------------------------------------------------------------ */
/* joining                                                                   */

static int secret_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Constant time in the secret's content, so timing does not leak it. */
    unsigned diff = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

static void refuse(server_t *srv, conn_t *conn, uint64_t job, incmoe_status_t st, const char *text)
{
    log_warn(SUBSYS, "refused a rank of job %llu: %s", (unsigned long long)job, text);
    srv->stats.jobs_refused++;
    server_send_error(srv, conn, job, st, 0, text);
    server_drop_conn(srv, conn);
}

static job_t *job_find(server_t *srv, uint64_t id)
{
    for (job_t *j = srv->jobs; j != NULL; j = j->next)
        if (j->id == id)
            return j;
    return NULL;
}

static size_t job_memory_bound(const server_t *srv, int nranks)
{
    /* Contributions: N ranks x credits in each of the 3 data streams.  Results exist only for
       complete items: a ReduceScatter item holds N-1 contributions, so at most 2 x credits
       results (N >= 2), an AllReduce item N, so at most credits. */
    return (size_t)srv->chunk_size * srv->credits * ((size_t)nranks * 3 + 3);
}

static job_t *job_new(server_t *srv, uint64_t id, int nranks)
{
    job_t *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return NULL;
    job->id = id;
    job->nranks = nranks;
    job->conns = calloc((size_t)nranks, sizeof(conn_t *));
    job->addr = calloc((size_t)nranks, sizeof(void *));
    job->addr_len = calloc((size_t)nranks, sizeof(uint32_t));
    job->inflight = calloc((size_t)nranks, sizeof(*job->inflight));
    job->timeout_ms = srv->timeout_ms;
    if (job->conns == NULL || job->addr == NULL || job->addr_len == NULL || job->inflight == NULL) {
        free(job->conns);
        free(job->addr);
        free(job->addr_len);
        free(job->inflight);
        free(job);
        return NULL;
    }
    job->mem_bound = job_memory_bound(srv, nranks);
    job->next = srv->jobs;
    srv->jobs = job;
    srv->mem_reserved += job->mem_bound;
    srv->stats.jobs_started++;
    return job;
}

static void job_send_ack(server_t *srv, job_t *job)
{
    size_t len = sizeof(struct inc_wire_join_ack);
    for (int r = 0; r < job->nranks; r++)
        len += sizeof(uint32_t) + job->addr_len[r];
    char *payload = malloc(len);
    if (payload == NULL) {
        job_fail(srv, job, INCMOE_ERR_NO_MEMORY, 0, "switch out of memory");
        return;
    }
    struct inc_wire_join_ack ack = {
        .nranks = (uint32_t)job->nranks, .credits = srv->credits, .chunk_size = srv->chunk_size};
    memcpy(payload, &ack, sizeof(ack));
    size_t pos = sizeof(ack);
    for (int r = 0; r < job->nranks; r++) {
        memcpy(payload + pos, &job->addr_len[r], sizeof(uint32_t));
        pos += sizeof(uint32_t);
        memcpy(payload + pos, job->addr[r], job->addr_len[r]);
        pos += job->addr_len[r];
    }
    /* One payload shared by the N sends; it lives as long as the job. */
    job->ack_payload = payload;
    for (int r = 0; r < job->nranks; r++) {
        struct inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_JOIN_ACK, job->id);
        h.rank = (uint32_t)r;
        h.length = len;
        server_send(srv, job->conns[r], &h, payload, len, NULL, NULL);
    }
    job->state = JOB_ACTIVE;
    log_info(SUBSYS, "job %llu formed: %d ranks", (unsigned long long)job->id, job->nranks);
}

void job_on_join(server_t *srv, conn_t *conn, const struct inc_wire_hdr *hdr, const char *payload,
                 size_t length)
{
    struct inc_wire_join join;
    memcpy(&join, payload, sizeof(join));
    char text[200];
    if (join.secret_len > INCMOE_MAX_SECRET || join.addr_len > INCMOE_WIRE_MAX_ADDR ||
        sizeof(join) + join.secret_len + join.addr_len != length) {
        srv->stats.bad_messages++;
        refuse(srv, conn, hdr->job, INCMOE_ERR_PROTOCOL, "malformed JOIN");
        return;
    }
    const char *secret = payload + sizeof(join);
    const char *addr = secret + join.secret_len;
    if (srv->have_secret && !secret_equal(secret, join.secret_len, srv->secret, srv->secret_len)) {
        srv->stats.bad_messages++;
        refuse(srv, conn, hdr->job, INCMOE_ERR_AUTH,
               join.secret_len ? "wrong shared secret" : "this switch requires a shared secret");
        return;
    }
    if (join.nranks < 1 || join.nranks > INCMOE_MAX_RANKS) {
        snprintf(text, sizeof(text), "job size %u out of range 1..%d", join.nranks,
                 INCMOE_MAX_RANKS);
        refuse(srv, conn, hdr->job, INCMOE_ERR_JOB, text);
        return;
    }
    if (hdr->rank >= join.nranks) {
        snprintf(text, sizeof(text), "rank %u is not below the job size %u", hdr->rank,
                 join.nranks);
        refuse(srv, conn, hdr->job, INCMOE_ERR_JOB, text);
        return;
    }
    job_t *job = job_find(srv, hdr->job);
    if (job == NULL) {
        size_t bound = job_memory_bound(srv, (int)join.nranks);
        if (srv->mem_reserved + bound > srv->max_memory) {
            snprintf(text, sizeof(text),
                     "switch memory: job needs %zu bytes, %zu of %zu already reserved", bound,
                     srv->mem_reserved, srv->max_memory);
            refuse(srv, conn, hdr->job, INCMOE_ERR_NO_MEMORY, text);
            return;
        }
        job = job_new(srv, hdr->job, (int)join.nranks);
        if (job == NULL) {
            refuse(srv, conn, hdr->job, INCMOE_ERR_NO_MEMORY, "switch out of memory");
            return;
        }
    }
    if ((int)join.nranks != job->nranks) {
        snprintf(text, sizeof(text), "rank %u says the job has %u ranks, others said %d", hdr->rank,
                 join.nranks, job->nranks);
        refuse(srv, conn, hdr->job, INCMOE_ERR_MISMATCH, text);
        return;
    }
    if (job->state != JOB_FORMING || job->conns[hdr->rank] != NULL) {
        snprintf(text, sizeof(text), "rank %u of job %llu has already joined", hdr->rank,
                 (unsigned long long)hdr->job);
        refuse(srv, conn, hdr->job, INCMOE_ERR_JOB, text);
        return;
    }
    job->addr[hdr->rank] = malloc(join.addr_len ? join.addr_len : 1);
    if (job->addr[hdr->rank] == NULL) {
        refuse(srv, conn, hdr->job, INCMOE_ERR_NO_MEMORY, "switch out of memory");
        return;
    }
    memcpy(job->addr[hdr->rank], addr, join.addr_len);
    job->addr_len[hdr->rank] = join.addr_len;
    if (join.timeout_ms > 0 && (int)join.timeout_ms < job->timeout_ms)
        job->timeout_ms = (int)join.timeout_ms;
    job->conns[hdr->rank] = conn;
    conn->job = job;
    conn->rank = (int)hdr->rank;
    conn->state = CONN_JOINED;
    job->njoined++;
    log_debug(SUBSYS, "job %llu: rank %u joined (%d of %d)", (unsigned long long)job->id, hdr->rank,
              job->njoined, job->nranks);
    if (job->njoined == job->nranks)
        job_send_ack(srv, job);
}

/* ------------------------------------------------------------------------ */
/* collectives                                                               */

static coll_t *coll_get(server_t *srv, job_t *job, conn_t *conn, int stream, uint64_t epoch)
{
    coll_t **pp = &job->colls[stream];
    for (; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->epoch == epoch)
            return *pp;
    if (epoch <= job->retired[stream] || epoch > job->retired[stream] + JOB_MAX_OPEN_EPOCHS) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, conn->rank,
            "rank %d sent %s epoch %llu; open epochs are %llu..%llu", conn->rank,
            inc_wire_stream_name(stream), (unsigned long long)epoch,
            (unsigned long long)job->retired[stream] + 1,
            (unsigned long long)job->retired[stream] + JOB_MAX_OPEN_EPOCHS);
        return NULL;
    }
    if (job->nleft > 0) {
        for (int r = 0; r < job->nranks; r++) {
            if (job->conns[r] != NULL && job->conns[r]->left) {
                job_fail(srv, job, INCMOE_ERR_PEER_FAILED, r,
                         "rank %d left the job; %s epoch %llu can never complete", r,
                         inc_wire_stream_name(stream), (unsigned long long)epoch);
                return NULL;
            }
        }
    }
    coll_t *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->posted = calloc((size_t)job->nranks, 1);
        c->bytes = calloc((size_t)job->nranks, sizeof(uint64_t));
    }
    if (c == NULL || c->posted == NULL || c->bytes == NULL) {
        if (c != NULL) {
            free(c->posted);
            free(c->bytes);
        }
        free(c);
        job_fail(srv, job, INCMOE_ERR_NO_MEMORY, conn->rank, "switch out of memory");
        return NULL;
    }
    c->stream = stream;
    c->epoch = epoch;
    /* Keep the list in epoch order: retirement walks it from the front. */
    pp = &job->colls[stream];
    while (*pp != NULL && (*pp)->epoch < epoch)
        pp = &(*pp)->next;
    c->next = *pp;
    *pp = c;
    return c;
}

static void coll_retire(server_t *srv, job_t *job, int stream)
{
    while (job->colls[stream] != NULL && job->colls[stream]->done &&
           job->colls[stream]->epoch == job->retired[stream] + 1) {
        coll_t *c = job->colls[stream];
        job->colls[stream] = c->next;
        job->retired[stream] = c->epoch;
        coll_free(srv, job, c);
    }
}

static void coll_check_done(server_t *srv, job_t *job, coll_t *c)
{
    if (c->armed && c->remaining == 0 && !c->done && c->holds == 0) {
        c->done = 1;
        coll_retire(srv, job, c->stream);
    }
}

static void item_free(server_t *srv, item_t *it)
{
    job_t *job = it->job;
    for (int r = 0; r < job->nranks; r++) {
        if (it->ucx_owned[r] && it->contrib[r] != NULL) {
            ucp_am_data_release(srv->node.worker, it->contrib[r]);
            job_unaccount(srv, job, it->length);
        } else {
            job_free_mem(srv, job, it->contrib[r], it->length);
        }
    }
    job_free_mem(srv, job, it->out, it->length);
    free(it->contrib);
    free(it->arrived);
    free(it->ucx_owned);
    free(it);
}

static void item_unlink(item_t *it)
{
    if (it->coll == NULL)
        return;
    for (item_t **pp = &it->coll->items; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == it) {
            *pp = it->next;
            break;
        }
    }
    it->coll = NULL;
}

/* The forward of an item completed: free it and give the contributors their credits back. */
static void item_sent_cb(server_t *srv, void *arg, ucs_status_t status)
{
    item_t *it = arg;
    job_t *job = it->job;
    it->sends_pending--;
    job->refs--;
    if (it->sends_pending > 0)
        return;
    coll_t *c = it->coll;
    if (c != NULL && job->state == JOB_ACTIVE) {
        for (int r = 0; r < job->nranks; r++) {
            if (!it->arrived[r])
                continue;
            job->inflight[r][c->stream]--;
            struct inc_wire_hdr h;
            inc_wire_hdr_init(&h, WIRE_MSG_CREDIT, job->id);
            h.stream = (uint8_t)c->stream;
            h.epoch = c->epoch;
            h.length = 1;
            server_send(srv, job->conns[r], &h, NULL, 0, NULL, NULL);
        }
        c->remaining -= it->length;
        item_unlink(it);
        if (it->nreceiving == 0) /* else on_data still holds it and frees it */
            item_free(srv, it);
        coll_check_done(srv, job, c);
    } else {
        item_unlink(it);
        if (it->nreceiving == 0) {
            item_free(srv, it);
            job_release(srv, job);
        }
    }
}

static void item_send(server_t *srv, item_t *it, int to, const void *payload)
{
    job_t *job = it->job;
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_FWD, job->id);
    h.stream = (uint8_t)it->coll->stream;
    h.epoch = it->coll->epoch;
    h.rank = (uint32_t)to;
    h.root = it->root;
    h.offset = it->offset;
    h.length = it->length;
    h.total = it->total;
    h.chunk = it->chunk;
    h.dtype = (uint8_t)it->coll->dtype;
    h.redop = (uint8_t)it->coll->redop;
    it->sends_pending++;
    job->refs++;
    srv->stats.bytes_out += it->length;
    /* Results unblock the contributors' credits: they overtake multicast copies. */
    server_send_data(srv, job->conns[to],
                     it->coll->stream == INCMOE_STREAM_ALLGATHER ? EGRESS_FORWARD : EGRESS_RESULT,
                     &h, payload, it->length, item_sent_cb, it);
}

void job_item_compute(item_t *it)
{
    job_t *job = it->job;
    const void *srcs[INCMOE_MAX_RANKS];
    int n = 0;
    /* Ascending rank order whatever the arrival order: bitwise reproducible. */
    for (int r = 0; r < job->nranks; r++)
        if (it->contrib[r] != NULL)
            srcs[n++] = it->contrib[r];
    size_t esize = incmoe_dtype_size((incmoe_dtype_t)it->coll->dtype);
    inc_reduce_ordered(it->out, srcs, n, it->length / esize, (incmoe_dtype_t)it->coll->dtype,
                       (incmoe_redop_t)it->coll->redop);
}

static void item_forward_result(server_t *srv, item_t *it)
{
    job_t *job = it->job;
    /* Hold a reference across the sends so an immediate completion cannot free it early. */
    it->sends_pending++;
    if (it->coll->stream == INCMOE_STREAM_REDUCESCATTER) {
        item_send(srv, it, (int)it->root, it->out);
    } else {
        for (int r = 0; r < job->nranks; r++)
            item_send(srv, it, r, it->out);
    }
    job->refs++;
    item_sent_cb(srv, it, UCS_OK);
}

void job_item_reduced(server_t *srv, item_t *it)
{
    job_t *job = it->job;
    it->reducing = 0;
    job->refs--;
    if (it->coll == NULL || job->state != JOB_ACTIVE) {
        item_free(srv, it);
        job_release(srv, job);
        return;
    }
    item_forward_result(srv, it);
}

/* Forward an item whose contributions are all here, if everyone has posted. */
static void item_try_forward(server_t *srv, item_t *it)
{
    coll_t *c = it->coll;
    job_t *job = it->job;
    if (!c->armed || it->forwarded || it->narrived < it->nexpected)
        return;
    it->forwarded = 1;
    if (c->stream == INCMOE_STREAM_ALLGATHER) {
        it->sends_pending++; /* see item_forward_result */
        for (int r = 0; r < job->nranks; r++)
            if (r != (int)it->root)
                item_send(srv, it, r, it->contrib[it->root]);
        job->refs++;
        item_sent_cb(srv, it, UCS_OK);
        return;
    }
    it->out = job_alloc(srv, job, it->length);
    if (it->out == NULL) {
        job_fail(srv, job, INCMOE_ERR_NO_MEMORY, 0, "switch out of memory for a reduction");
        return;
    }
    if (server_pool_submit(srv, it)) {
        it->reducing = 1;
        job->refs++;
        return;
    }
    job_item_compute(it);
    item_forward_result(srv, it);
}

/* Is an item consistent with what its root announced? */
static int item_matches_post(server_t *srv, job_t *job, coll_t *c, item_t *it)
{
    int owner = c->stream == INCMOE_STREAM_ALLREDUCE ? -1 : (int)it->root;
    for (int r = 0; r < job->nranks; r++) {
        if (!c->posted[r] || (owner >= 0 && r != owner))
            continue;
        if (c->bytes[r] != it->total) {
            BAD(srv, job, INCMOE_ERR_MISMATCH, r,
                "%s epoch %llu: rank %d announced %llu bytes, a contribution for root %u says "
                "%llu",
                inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, r,
                (unsigned long long)c->bytes[r], it->root, (unsigned long long)it->total);
            return 0;
        }
    }
    return 1;
}

static void coll_arm(server_t *srv, job_t *job, coll_t *c)
{
    c->armed = 1;
    c->remaining = 0;
    if (c->stream == INCMOE_STREAM_ALLREDUCE) {
        c->remaining = c->bytes[0];
    } else {
        for (int r = 0; r < job->nranks; r++)
            c->remaining += c->bytes[r];
    }
    for (item_t *it = c->items; it != NULL; it = it->next)
        if (!item_matches_post(srv, job, c, it))
            return;
    /* Forwards may complete inline and free items: walk a snapshot, and hold c. */
    c->holds++;
    item_t *it = c->items;
    while (it != NULL && job->state == JOB_ACTIVE) {
        item_t *next = it->next;
        item_try_forward(srv, it);
        it = next;
    }
    if (job->state != JOB_ACTIVE)
        return; /* job_fail() has freed c */
    c->holds--;
    coll_check_done(srv, job, c);
}

static int coll_describe(server_t *srv, job_t *job, conn_t *conn, coll_t *c,
                         const struct inc_wire_hdr *h)
{
    if (!c->has_desc) {
        c->has_desc = 1;
        c->sig = h->sig;
        c->dtype = h->dtype;
        c->redop = h->redop;
        return 1;
    }
    if (c->dtype != h->dtype || c->redop != h->redop) {
        BAD(srv, job, INCMOE_ERR_MISMATCH, conn->rank,
            "ranks disagree on %s epoch %llu: rank %d has %s %s, others %s %s",
            inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, conn->rank,
            incmoe_dtype_name(h->dtype), incmoe_redop_name(h->redop), incmoe_dtype_name(c->dtype),
            incmoe_redop_name(c->redop));
        return 0;
    }
    if (c->sig != h->sig) {
        BAD(srv, job, INCMOE_ERR_MISMATCH, conn->rank,
            "ranks disagree on %s epoch %llu: rank %d's byte counts differ from the others'",
            inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, conn->rank);
        return 0;
    }
    return 1;
}

static void on_post(server_t *srv, job_t *job, conn_t *conn, const struct inc_wire_hdr *h)
{
    coll_t *c = coll_get(srv, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(srv, job, conn, c, h))
        return;
    if (c->posted[conn->rank]) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, conn->rank, "rank %d posted %s epoch %llu twice",
            conn->rank, inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return;
    }
    c->posted[conn->rank] = 1;
    c->bytes[conn->rank] = h->total;
    c->nposted++;
    if (c->nposted < job->nranks)
        return;
    if (c->stream == INCMOE_STREAM_BARRIER) {
        for (int r = 0; r < job->nranks; r++) {
            struct inc_wire_hdr d;
            inc_wire_hdr_init(&d, WIRE_MSG_DONE, job->id);
            d.stream = INCMOE_STREAM_BARRIER;
            d.epoch = c->epoch;
            server_send(srv, job->conns[r], &d, NULL, 0, NULL, NULL);
        }
        c->armed = 1;
        coll_check_done(srv, job, c);
        return;
    }
    if (c->stream == INCMOE_STREAM_ALLREDUCE) {
        for (int r = 1; r < job->nranks; r++) {
            if (c->bytes[r] != c->bytes[0]) {
                BAD(srv, job, INCMOE_ERR_MISMATCH, r,
                    "allreduce epoch %llu: rank %d has %llu bytes, rank 0 has %llu",
                    (unsigned long long)c->epoch, r, (unsigned long long)c->bytes[r],
                    (unsigned long long)c->bytes[0]);
                return;
            }
        }
    }
    coll_arm(srv, job, c);
}

/* A contribution has fully arrived (eager at once, rendezvous when its receive ends). */
static void item_arrived(server_t *srv, item_t *it, int from)
{
    it->arrived[from] = 1;
    it->narrived++;
    if (it->coll != NULL && it->job->state == JOB_ACTIVE)
        item_try_forward(srv, it);
}

typedef struct {
    server_t *srv;
    item_t *it;
    int from;
} recv_arg_t;

static void data_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    recv_arg_t *ra = user_data;
    item_t *it = ra->it;
    job_t *job = it->job;
    server_t *srv = ra->srv;
    it->nreceiving--;
    job->refs--;
    if (status != UCS_OK && job->state == JOB_ACTIVE)
        job_fail(srv, job, INCMOE_ERR_PEER_FAILED, ra->from, "receiving rank %d's data failed: %s",
                 ra->from, ucs_status_string(status));
    if (job->state == JOB_ACTIVE && it->coll != NULL) {
        item_arrived(srv, it, ra->from);
    } else if (it->coll == NULL && it->sends_pending == 0 && it->nreceiving == 0 && !it->reducing) {
        item_free(srv, it);
        job_release(srv, job);
    }
    free(ra);
    if (request != NULL)
        ucp_request_free(request);
}

static ucs_status_t on_data(server_t *srv, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                            void *data, size_t length, const ucp_am_recv_param_t *param)
{
    const int me = conn->rank;
    const int stream = h->stream;
    /* Who may send what. */
    if ((stream == INCMOE_STREAM_ALLGATHER && h->root != (uint32_t)me) ||
        (stream == INCMOE_STREAM_REDUCESCATTER &&
         (h->root == (uint32_t)me || h->root >= (uint32_t)job->nranks)) ||
        (stream == INCMOE_STREAM_ALLREDUCE && h->root != 0)) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, me, "rank %d sent %s data for root %u", me,
            inc_wire_stream_name(stream), h->root);
        return UCS_ERR_INVALID_PARAM;
    }
    if (h->offset % srv->chunk_size != 0 || h->chunk != h->offset / srv->chunk_size ||
        h->length !=
            (h->total - h->offset < srv->chunk_size ? h->total - h->offset : srv->chunk_size)) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, me,
            "rank %d: chunk %u [%llu,+%llu) of %llu bytes does not follow the %llu-byte chunking",
            me, h->chunk, (unsigned long long)h->offset, (unsigned long long)h->length,
            (unsigned long long)h->total, (unsigned long long)srv->chunk_size);
        return UCS_ERR_INVALID_PARAM;
    }
    if (job->inflight[me][stream] >= srv->credits) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, me, "rank %d exceeded its %u credits on %s", me,
            srv->credits, inc_wire_stream_name(stream));
        return UCS_ERR_INVALID_PARAM;
    }
    coll_t *c = coll_get(srv, job, conn, stream, h->epoch);
    if (c == NULL || !coll_describe(srv, job, conn, c, h))
        return UCS_ERR_INVALID_PARAM;
    item_t *it = c->items;
    while (it != NULL && !(it->root == h->root && it->chunk == h->chunk))
        it = it->next;
    if (it == NULL) {
        it = calloc(1, sizeof(*it));
        if (it != NULL) {
            it->contrib = calloc((size_t)job->nranks, sizeof(void *));
            it->arrived = calloc((size_t)job->nranks, 1);
            it->ucx_owned = calloc((size_t)job->nranks, 1);
        }
        if (it == NULL || it->contrib == NULL || it->arrived == NULL || it->ucx_owned == NULL) {
            if (it != NULL) {
                free(it->contrib);
                free(it->arrived);
                free(it->ucx_owned);
            }
            free(it);
            job_fail(srv, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
            return UCS_ERR_NO_MEMORY;
        }
        it->coll = c;
        it->job = job;
        it->root = h->root;
        it->chunk = h->chunk;
        it->offset = h->offset;
        it->length = h->length;
        it->total = h->total;
        it->nexpected = stream == INCMOE_STREAM_ALLGATHER       ? 1
                        : stream == INCMOE_STREAM_REDUCESCATTER ? job->nranks - 1
                                                                : job->nranks;
        it->next = c->items;
        c->items = it;
        if (c->armed && !item_matches_post(srv, job, c, it))
            return UCS_ERR_INVALID_PARAM;
    } else if (it->total != h->total || it->length != h->length) {
        BAD(srv, job, INCMOE_ERR_MISMATCH, me,
            "%s epoch %llu root %u: rank %d sends a window of %llu bytes, others %llu",
            inc_wire_stream_name(stream), (unsigned long long)h->epoch, h->root, me,
            (unsigned long long)h->total, (unsigned long long)it->total);
        return UCS_ERR_INVALID_PARAM;
    }
    if (it->contrib[me] != NULL) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, me, "rank %d sent chunk %u of root %u twice", me,
            h->chunk, h->root);
        return UCS_ERR_INVALID_PARAM;
    }
    if (job->mem_used + length > job->mem_bound) {
        job_fail(srv, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        /* Eager data UCX lets us keep: hold its buffer instead of copying it. */
        it->contrib[me] = data;
        it->ucx_owned[me] = 1;
        job_account(srv, job, length);
        job->inflight[me][stream]++;
        srv->stats.bytes_in += length;
        it->nreceiving++; /* a failure inside may detach the item: keep it until we know */
        job->refs++;
        item_arrived(srv, it, me);
        it->nreceiving--;
        job->refs--;
        if ((it->coll != NULL && job->state == JOB_ACTIVE) || it->sends_pending > 0 || it->reducing)
            return UCS_INPROGRESS; /* in use: released with the item */
        /* Detached (the job failed, or it all went out at once): UCX takes its buffer back
           when we return, so the item must not release it. */
        it->contrib[me] = NULL;
        it->ucx_owned[me] = 0;
        job_unaccount(srv, job, length);
        if (it->nreceiving == 0) {
            item_free(srv, it);
            job_release(srv, job);
        }
        return UCS_OK;
    }
    it->contrib[me] = job_alloc(srv, job, length);
    if (it->contrib[me] == NULL) {
        job_fail(srv, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    job->inflight[me][stream]++;
    srv->stats.bytes_in += length;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(it->contrib[me], data, length);
        item_arrived(srv, it, me);
        return UCS_OK;
    }
    recv_arg_t *ra = malloc(sizeof(*ra));
    if (ra == NULL) {
        job_fail(srv, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
        return UCS_ERR_NO_MEMORY;
    }
    ra->srv = srv;
    ra->it = it;
    ra->from = me;
    it->nreceiving++;
    job->refs++;
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv_am = data_recv_cb,
        .user_data = ra,
        .datatype = ucp_dt_make_contig(1),
    };
    ucs_status_ptr_t req =
        ucp_am_recv_data_nbx(srv->node.worker, data, it->contrib[me], length, &rp);
    if (UCS_PTR_IS_ERR(req))
        data_recv_cb(NULL, UCS_PTR_STATUS(req), 0, ra);
    return UCS_INPROGRESS;
}

/* A collective others have started that rank r has not posted, or NULL. */
static const coll_t *job_collective_owed(const job_t *job, int r)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        for (const coll_t *c = job->colls[s]; c != NULL; c = c->next)
            if (!c->done && !c->posted[r])
                return c;
    return NULL;
}

ucs_status_t job_on_message(server_t *srv, conn_t *conn, const struct inc_wire_hdr *h, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    job_t *job = conn->job;
    if (job->state == JOB_FAILED)
        return UCS_ERR_CANCELED; /* the ranks already know; drop what is still coming */
    if (h->job != job->id || h->rank != (uint32_t)conn->rank) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, conn->rank,
            "rank %d sent a message claiming job %llu rank %u", conn->rank,
            (unsigned long long)h->job, h->rank);
        return UCS_ERR_INVALID_PARAM;
    }
    if (job->state != JOB_ACTIVE && h->msg != WIRE_MSG_HEARTBEAT && h->msg != WIRE_MSG_LEAVE) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, conn->rank, "rank %d sent %s before the job formed",
            conn->rank, inc_wire_msg_name(h->msg));
        return UCS_ERR_INVALID_PARAM;
    }
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (rndv && h->msg != WIRE_MSG_DATA) {
        BAD(srv, job, INCMOE_ERR_PROTOCOL, conn->rank, "rank %d sent %s rendezvous", conn->rank,
            inc_wire_msg_name(h->msg));
        return UCS_ERR_INVALID_PARAM;
    }
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_HEARTBEAT:
        return UCS_OK;
    case WIRE_MSG_LEAVE: {
        /* Leaving is orderly only if nobody still waits on this rank. */
        const coll_t *owed = job_collective_owed(job, conn->rank);
        if (owed != NULL) {
            job_fail(srv, job, INCMOE_ERR_PEER_FAILED, conn->rank,
                     "rank %d left the job without posting %s epoch %llu", conn->rank,
                     inc_wire_stream_name(owed->stream), (unsigned long long)owed->epoch);
            return UCS_OK;
        }
        if (!conn->left) {
            conn->left = 1;
            job->nleft++;
        }
        return UCS_OK;
    }
    case WIRE_MSG_ERROR: {
        char text[INCMOE_WIRE_MAX_TEXT + 1];
        memcpy(text, data, length);
        text[length] = '\0';
        incmoe_status_t st = h->status < 0 ? (incmoe_status_t)h->status : INCMOE_ERR_PROTOCOL;
        job_fail(srv, job, st, conn->rank, "%s", text);
        return UCS_OK;
    }
    case WIRE_MSG_POST:
        on_post(srv, job, conn, h);
        return UCS_OK;
    case WIRE_MSG_DATA:
        return on_data(srv, job, conn, h, data, length, param);
    default:
        BAD(srv, job, INCMOE_ERR_PROTOCOL, conn->rank, "rank %d sent %s, which ranks never send",
            conn->rank, inc_wire_msg_name(h->msg));
        return UCS_ERR_INVALID_PARAM;
    }
}

void job_on_conn_lost(server_t *srv, conn_t *conn, const char *why)
{
    job_t *job = conn->job;
    if (job == NULL)
        return;
    job->conns[conn->rank] = NULL;
    conn->job = NULL;
    if (job->state != JOB_FAILED && !conn->left) {
        srv->stats.peers_lost++;
        job_fail(srv, job, INCMOE_ERR_PEER_FAILED, conn->rank, "rank %d of job %llu is gone: %s",
                 conn->rank, (unsigned long long)job->id, why);
    }
    job_release(srv, job);
}

/* Free a job once no connection, send, receive or reduction refers to it. */
static void job_release(server_t *srv, job_t *job)
{
    int members = 0;
    for (int r = 0; r < job->nranks; r++)
        members += job->conns[r] != NULL;
    if (members > 0 || job->refs > 0)
        return;
    if (job->state != JOB_FAILED) {
        /* Everyone left in order. */
        job->state = JOB_FAILED;
        job_retire(srv, job);
        if (job->refs > 0)
            return;
    }
    for (job_t **pp = &srv->orphans; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == job) {
            *pp = job->next;
            break;
        }
    }
    log_info(SUBSYS, "job %llu released (peak %zu bytes buffered)", (unsigned long long)job->id,
             job->mem_peak);
    for (int r = 0; r < job->nranks; r++)
        free(job->addr[r]);
    free(job->addr);
    free(job->addr_len);
    free(job->ack_payload);
    free(job->conns);
    free(job->inflight);
    free(job);
}

void job_tick(server_t *srv)
{
    double now = inc_now_s();
    for (conn_t *c = srv->conns; c != NULL; c = c->next) {
        if (c->state == CONN_DEAD)
            continue;
        int timeout_ms = c->job != NULL ? c->job->timeout_ms : srv->timeout_ms;
        if (c->state == CONN_NEW) {
            if (now - c->created > srv->timeout_ms / 1000.0) {
                log_warn(SUBSYS, "a connection sent no JOIN within %d ms", srv->timeout_ms);
                server_drop_conn(srv, c);
            }
            continue;
        }
        if (now - c->last_rx > timeout_ms / 1000.0) {
            char why[96];
            snprintf(why, sizeof(why), "silent for %.1f s (bound %d ms)", now - c->last_rx,
                     timeout_ms);
            server_drop_conn(srv, c);
            job_on_conn_lost(srv, c, why);
            continue;
        }
        if (now - c->last_tx > timeout_ms / 4000.0) {
            struct inc_wire_hdr h;
            inc_wire_hdr_init(&h, WIRE_MSG_HEARTBEAT, c->job != NULL ? c->job->id : 0);
            server_send(srv, c, &h, NULL, 0, NULL, NULL);
        }
    }
}

void job_fail_all(server_t *srv, const char *why)
{
    while (srv->jobs != NULL)
        job_fail(srv, srv->jobs, INCMOE_ERR_PEER_FAILED, 0, "%s", why);
}
