/*
 * dc_peer_plan.c - the plans of dispatch and combine between the ranks: at
 * start every rank sends every other a PEER_PLAN, rows or not, and waits for
 * the N - 1 others'; from the N plans each computes the same verdict
 * (base/dc_plan.h) and applies it (dc_shared.c).  A dispatch's plan lists the
 * source rows the peer gets, so the rows themselves travel bare.  Once decided,
 * the messages kept for the collective go back up to dc_peer.c through the
 * replay it handed down (dcp->replay).
 */
#include "dc_peer_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dc_peer_land.h"
#include "dc_peer_rec.h"
#include "dc_shared.h"
#include "mesh.h"
#include "send.h"

#include "base/dc_plan.h"

static const struct inc_wire_dc_post *plan_head(const char *plan)
{
    return (const struct inc_wire_dc_post *)plan;
}

static const uint32_t *plan_count(const char *plan)
{
    return (const uint32_t *)(plan + sizeof(struct inc_wire_dc_post));
}

/* After count[N]: the dispatch's source rows for the receiver, or the combine's recvd[N]. */
static const uint32_t *plan_tail(const char *plan, int nranks)
{
    return plan_count(plan) + nranks;
}

/* After the tail: a refusal's reason, head->refused bytes (incmoe.h, "A refusal"). */
static const char *plan_refusal(const char *plan, int nranks, size_t tail)
{
    return (const char *)(plan_tail(plan, nranks) + tail);
}

void client_dcp_send_plan(incmoe_comm_t *comm, coll_op_t *op, int peer)
{
    const client_dc_t *dc = op->dc;
    const int n = comm->nranks;
    size_t tail = client_dcp_is_dispatch(op) ? dc->sent[peer] : (size_t)n;
    size_t refused = op->refused != NULL ? strlen(op->refused) : 0;
    size_t len = sizeof(struct inc_wire_dc_post) + ((size_t)n + tail) * sizeof(uint32_t) + refused;
    char *payload = malloc(len);
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_PEER_PLAN);
    if (payload == NULL || ctx == NULL) {
        free(payload);
        free(ctx);
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_PLAN");
        return;
    }
    struct inc_wire_dc_post head = {.rows = dc->nrows,
                                    .row_bytes = op->row_bytes,
                                    .nranks = (uint32_t)n,
                                    .refused = (uint16_t)refused};
    if (client_dcp_is_dispatch(op)) {
        head.capacity = op->capacity;
    } else {
        head.dispatch_epoch = dc->epoch;
        head.row_count = op->row_bytes / incmoe_dtype_size(op->dtype);
        head.dtype = (uint8_t)op->dtype;
        head.redop = (uint8_t)op->redop;
    }
    memcpy(payload, &head, sizeof(head));
    uint32_t *count = (uint32_t *)(payload + sizeof(head)), *rows = count + n;
    memcpy(count, dc->sent, (size_t)n * sizeof(uint32_t));
    if (client_dcp_is_dispatch(op)) {
        size_t k = 0;
        for (size_t i = 0; i < dc->nrows && k < tail; i++)
            if (client_dc_in_set(dc, i, peer))
                rows[k++] = (uint32_t)i;
    } else {
        memcpy(rows, dc->recvd, (size_t)n * sizeof(uint32_t));
    }
    if (refused > 0)
        memcpy((char *)(rows + tail), op->refused, refused);
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.length = len;
    ctx->payload_owned = payload;
    ctx->to = peer;
    client_send_ep(comm, client_mesh_ep(comm, peer), ctx, payload, len, NULL, &op->sent);
}

/* A peer's plan, whole, checked against this rank's view; NULL (nothing changed) or a reason
   in why. */
static const char *check_plan(const incmoe_comm_t *comm, const coll_op_t *op, const char *plan,
                              size_t len, char *why, size_t why_len)
{
    const int n = comm->nranks, me = comm->rank;
    const struct inc_wire_dc_post *head = plan_head(plan);
    size_t fixed = sizeof(*head) + (size_t)n * sizeof(uint32_t);
    if (head->nranks != (uint32_t)n || len < fixed) {
        snprintf(why, why_len, "a plan for %u ranks in %zu bytes, this job has %d", head->nranks,
                 len, n);
        return why;
    }
    const uint32_t *count = plan_count(plan), *tail = plan_tail(plan, n);
    if (head->refused >= INCMOE_REFUSAL_MAX || (head->refused > 0 && head->rows != 0)) {
        snprintf(why, why_len, "a refusal of %u bytes with %llu rows", head->refused,
                 (unsigned long long)head->rows);
        return why;
    }
    size_t want = fixed +
                  (client_dcp_is_dispatch(op) ? (size_t)count[me] : (size_t)n) * sizeof(uint32_t) +
                  head->refused;
    if (len != want) {
        snprintf(why, why_len, "a plan of %zu bytes, its counts make it %zu", len, want);
        return why;
    }
    if (!client_dcp_is_dispatch(op))
        return NULL;
    for (uint32_t k = 0; k < count[me]; k++) {
        if (tail[k] >= head->rows || (k > 0 && tail[k] <= tail[k - 1])) {
            snprintf(why, why_len,
                     "source row %u (the %u-th for this rank) of %llu rows is out "
                     "of order or range",
                     tail[k], k, (unsigned long long)head->rows);
            return why;
        }
    }
    return NULL;
}

/* The owner's chunks of a combine: which peers hold how many rows of each. */
static int owner_chunks(incmoe_comm_t *comm, client_dcp_rec_t *rec)
{
    const client_dc_t *dc = rec->op->dc;
    const int n = comm->nranks, me = comm->rank;
    rec->nchunks = (dc->nrows + rec->rpc - 1) / rec->rpc;
    rec->cnt = calloc(rec->nchunks * (size_t)n + 1, sizeof(uint32_t));
    rec->chunks = calloc(rec->nchunks + 1, sizeof(client_dcp_chunk_t));
    if (rec->cnt == NULL || rec->chunks == NULL)
        return 0;
    for (size_t i = 0; i < dc->nrows; i++)
        for (int d = 0; d < n; d++)
            if (d != me && client_dc_in_set(dc, i, d))
                rec->cnt[(i / rec->rpc) * (size_t)n + (size_t)d]++;
    return 1;
}

/* The lowest rank that refused its arguments (this one's op->refused, the others' from their
   plans), its reason into buf: the verdict names no other.  -1 when none did. */
static int first_refusal(const incmoe_comm_t *comm, const client_dcp_rec_t *rec, char *buf)
{
    const int n = comm->nranks, me = comm->rank;
    for (int r = 0; r < n; r++) {
        if (r == me) {
            if (rec->op->refused == NULL)
                continue;
            snprintf(buf, INCMOE_REFUSAL_MAX, "%s", rec->op->refused);
            return r;
        }
        const struct inc_wire_dc_post *head = plan_head(rec->plan[r]);
        if (head->refused == 0)
            continue;
        size_t tail = client_dcp_is_dispatch(rec->op) ? plan_count(rec->plan[r])[me] : (size_t)n;
        memcpy(buf, plan_refusal(rec->plan[r], n, tail), head->refused);
        buf[head->refused] = '\0';
        return r;
    }
    return -1;
}

/* The dispatch's verdict from the N plans, applied (dc_shared.c); the sources of the rows to come.
 */
static int decide_dispatch(incmoe_comm_t *comm, client_dcp_rec_t *rec)
{
    coll_op_t *op = rec->op;
    client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    inc_dc_dispatch_in_t in[INCMOE_MAX_RANKS] = {{0}};
    uint32_t recvd[INCMOE_MAX_RANKS];
    inc_dc_verdict_t v;
    char refused[INCMOE_REFUSAL_MAX];
    int refuser = first_refusal(comm, rec, refused);
    for (int s = 0; s < n; s++) {
        if (s == me) {
            in[s] = (inc_dc_dispatch_in_t){op->row_bytes, op->capacity, dc->sent};
        } else {
            const struct inc_wire_dc_post *head = plan_head(rec->plan[s]);
            in[s] =
                (inc_dc_dispatch_in_t){head->row_bytes, head->capacity, plan_count(rec->plan[s])};
        }
        recvd[s] = in[s].count[me];
    }
    if (refuser >= 0)
        in[refuser].refused = refused;
    inc_dc_dispatch_verdict(op->epoch, n, in, &v);
    if (client_dc_plan_dispatch(comm, op, recvd, &v) != INCMOE_OK)
        return 0;
    rec->ok = v.status == INCMOE_OK;
    for (int s = 0; rec->ok && s < n; s++)
        if (s != me && recvd[s] > 0)
            client_dc_set_sources(op, s, 0, recvd[s], plan_tail(rec->plan[s], n));
    return 1;
}

/* The combine's verdict from the N plans, applied (dc_shared.c); the owner's chunks. */
static int decide_combine(incmoe_comm_t *comm, client_dcp_rec_t *rec)
{
    coll_op_t *op = rec->op;
    client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    inc_dc_combine_in_t in[INCMOE_MAX_RANKS] = {{0}};
    inc_dc_verdict_t v;
    char refused[INCMOE_REFUSAL_MAX];
    int refuser = first_refusal(comm, rec, refused);
    for (int r = 0; r < n; r++) {
        if (r == me) {
            in[r] = (inc_dc_combine_in_t){dc->epoch,
                                          op->row_bytes / incmoe_dtype_size(op->dtype),
                                          (uint32_t)op->dtype,
                                          (uint32_t)op->redop,
                                          dc->sent,
                                          dc->recvd};
        } else {
            const struct inc_wire_dc_post *head = plan_head(rec->plan[r]);
            in[r] = (inc_dc_combine_in_t){
                head->dispatch_epoch, head->row_count,          head->dtype,
                head->redop,          plan_count(rec->plan[r]), plan_tail(rec->plan[r], n)};
        }
    }
    if (refuser >= 0)
        in[refuser].refused = refused;
    inc_dc_combine_verdict(op->epoch, n, in, &v);
    client_dc_plan_combine(comm, op, &v);
    rec->ok = v.status == INCMOE_OK;
    if (rec->ok && !owner_chunks(comm, rec)) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "combine epoch %llu: no memory for its chunks",
                        (unsigned long long)op->epoch);
        return 0;
    }
    return 1;
}

static void rec_decide(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec)
{
    rec->decided = 1;
    if (client_dcp_is_dispatch(rec->op) ? decide_dispatch(comm, rec) : decide_combine(comm, rec))
        dcp->replay(comm, dcp, rec->op->stream, rec->op->epoch);
}

/* A peer's plan landed in rec->plan[from]: checked; the verdict once all are in. */
static void plan_arrived(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                         int from, size_t len)
{
    char why[160];
    const char *bad = check_plan(comm, rec->op, rec->plan[from], len, why, sizeof(why));
    if (bad != NULL) {
        client_dcp_fail(comm, INCMOE_ERR_PROTOCOL, "PEER_PLAN from rank %d for %s epoch %llu: %s",
                        from, inc_wire_stream_name(rec->op->stream),
                        (unsigned long long)rec->op->epoch, bad);
        return;
    }
    if (++rec->nplans == comm->nranks - 1)
        rec_decide(comm, dcp, rec);
}

/* A rendezvous PEER_PLAN is in rec->plan[from]. */
static void plan_landed(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_recv_t *rr,
                        size_t length)
{
    plan_arrived(comm, dcp, rr->rec, rr->from, length);
}

ucs_status_t client_dcp_on_plan(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                                int from, const struct inc_wire_hdr *h, void *data, size_t length,
                                int rndv)
{
    if (rec->plan[from] != NULL)
        return client_dcp_refuse(comm, h, from, "a second plan");
    char *plan = malloc(length);
    if (plan == NULL) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_PLAN");
        return UCS_ERR_NO_MEMORY;
    }
    rec->plan[from] = plan; /* from here the record's, landed or not: a second one is refused */
    client_dcp_recv_t *rr = client_dcp_recv_ctx(comm, dcp, rec, from, h, plan_landed);
    if (rr == NULL)
        return UCS_ERR_NO_MEMORY;
    if (!client_dcp_land(comm, data, length, rndv, plan, NULL, rr))
        return UCS_INPROGRESS;
    plan_arrived(comm, dcp, rec, from, length);
    return UCS_OK;
}
