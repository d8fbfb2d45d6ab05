/*
 * ll_shared.c - a low-latency dispatch or combine taking the others' messages
 * (incmoe.h, "The low-latency form"), whichever algorithm brought them.  Each
 * message is checked whole (base/ll_wire.h) and kept as it arrives; once every
 * other rank's is in, the verdict is drawn from the N descriptions, the same on
 * every rank (inc_wire_ll_verdict), and only an OK one writes anything: a
 * dispatch's rows go to their regions (ll_place.c), an owner's combined rows
 * are reduced over their contributors in ascending rank order with its own
 * partial last, as the bulk form does, so the results are bitwise the same.
 * A failed verdict fails the collective alone with nothing written.
 */
#include "ll_shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll_place.h"
#include "notify.h"

#include "base/reduce.h"
#include "base/text.h"

void client_ll_free(client_ll_t *ll, int nranks)
{
    if (ll == NULL)
        return;
    for (int r = 0; ll->payload != NULL && r < nranks; r++)
        free(ll->payload[r]);
    free(ll->payload);
    free(ll->view);
    free(ll->fold);
    free(ll);
}

int client_ll_start(incmoe_comm_t *comm, coll_op_t *op)
{
    client_ll_t *ll = calloc(1, sizeof(*ll));
    op->ll = ll;
    if (ll != NULL) {
        ll->payload = calloc((size_t)comm->nranks, sizeof(void *));
        ll->view = calloc((size_t)comm->nranks, sizeof(inc_wire_ll_view_t));
    }
    if (ll == NULL || ll->payload == NULL || ll->view == NULL ||
        (op->stream == INCMOE_STREAM_COMBINE && op->refused == NULL && !client_ll_fold(comm, op))) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "%s epoch %llu: out of memory",
                    inc_wire_stream_name(op->stream), (unsigned long long)op->epoch);
        return 0;
    }
    return 1;
}

/* A broken message fails the job: the others wait for this rank's part. */
static incmoe_status_t broken(incmoe_comm_t *comm, const coll_op_t *op, int from, const char *what)
{
    char text[320];
    snprintf(text, sizeof(text), "%s epoch %llu: a message from %s%d: %s",
             inc_wire_stream_name(op->stream), (unsigned long long)op->epoch,
             from < 0 ? "the switch for rank " : "rank ", from < 0 ? -1 - from : from, what);
    client_fail_job(comm, INCMOE_ERR_PROTOCOL, text);
    return INCMOE_ERR_PROTOCOL;
}

/* The N descriptions (this rank's made here) and the refusals' reasons, for the verdict. */
static void gather_said(const incmoe_comm_t *comm, const coll_op_t *op, struct inc_wire_ll *said,
                        const char **reason)
{
    for (int r = 0; r < comm->nranks; r++) {
        said[r] = op->ll->view[r].ll;
        reason[r] = op->ll->view[r].reason;
    }
    client_ll_describe(comm, op, &said[comm->rank]);
    reason[comm->rank] = op->refused;
}

/* The collective fails alone with the verdict: nothing was written. */
static void fail_alone(coll_op_t *op, const inc_dc_verdict_t *v)
{
    op->status = v->status;
    free(op->why);
    op->why = strdup(v->reason);
}

/* Owner: every contributor gives exactly the partials of the rows of this rank whose set holds
   it; only a broken peer gets here otherwise (the library keeps dispatches). */
static int counts_agree(incmoe_comm_t *comm, coll_op_t *op)
{
    const client_dc_t *dc = op->dc;
    for (int d = 0; d < comm->nranks; d++) {
        if (d == comm->rank || op->ll->view[d].n == dc->sent[d])
            continue;
        char what[160];
        snprintf(what, sizeof(what), "%llu partials for the %u rows of this rank it holds",
                 (unsigned long long)op->ll->view[d].n, dc->sent[d]);
        broken(comm, op, d, what);
        return 0;
    }
    return 1;
}

/* Owner: each row of this rank, the reduction of its other contributors' partials in ascending
   rank order, then its own partial last; a row nobody else holds is its own partial or zeros. */
static void reduce_owned(incmoe_comm_t *comm, coll_op_t *op)
{
    const client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    const size_t count = op->row_bytes / incmoe_dtype_size(op->dtype);
    uint64_t next[INCMOE_MAX_RANKS] = {0};
    const void *srcs[INCMOE_MAX_RANKS];
    for (size_t i = 0; i < dc->nrows; i++) {
        int k = 0;
        for (int d = 0; d < n; d++)
            if (d != me && client_dc_in_set(dc, i, d))
                srcs[k++] = op->ll->view[d].rows + next[d]++ * op->row_bytes;
        char *dst = op_recv_at(op, i * op->row_bytes);
        if (k > 0)
            inc_reduce_ordered(dst, srcs, k, count, op->dtype, op->redop);
        client_ll_own_last(comm, op, i, k > 0 ? dst : NULL);
    }
}

/* Every other rank's message is in: the verdict, and what it lets happen. */
static void decide(incmoe_comm_t *comm, coll_op_t *op)
{
    struct inc_wire_ll said[INCMOE_MAX_RANKS];
    const char *reason[INCMOE_MAX_RANKS];
    inc_dc_verdict_t v;
    gather_said(comm, op, said, reason);
    inc_wire_ll_verdict(op->stream, op->epoch, comm->nranks, said, reason, &v);
    op->ll->decided = 1;
    op->planned = 1;
    if (v.status != INCMOE_OK) {
        if (op->stream == INCMOE_STREAM_DISPATCH)
            client_ll_count_would(comm, op);
        fail_alone(op, &v);
    } else if (op->stream == INCMOE_STREAM_DISPATCH) {
        char what[200] = "";
        int bad = client_ll_place(comm, op, what, sizeof(what));
        if (bad >= 0)
            broken(comm, op, bad, what);
    } else if (counts_agree(comm, op)) {
        reduce_owned(comm, op);
    }
    for (int r = 0; r < comm->nranks; r++) { /* what was kept for the verdict goes */
        free(op->ll->payload[r]);
        op->ll->payload[r] = NULL;
    }
}

void client_ll_alone(incmoe_comm_t *comm, coll_op_t *op)
{
    if (client_ll_start(comm, op))
        decide(comm, op);
}

incmoe_status_t client_ll_take(incmoe_comm_t *comm, coll_op_t *op, int from,
                               const struct inc_wire_hdr *h, void *payload, size_t length)
{
    char why[200];
    inc_wire_ll_view_t view;
    struct inc_wire_hdr hdr = *h;
    if (from >= 0)
        hdr.rank = (uint32_t)from; /* the mesh bound the sender: its header does not choose */
    const char *bad = NULL;
    if (inc_wire_ll_parse(&hdr, comm->nranks, payload, length, &view, why, sizeof(why)) !=
        INCMOE_OK)
        bad = why;
    else if ((from >= 0 && view.sender != from) || view.sender == comm->rank)
        bad = "for another rank's part";
    else if (op->ll->decided || op->ll->payload[view.sender] != NULL)
        bad = "a second message of the collective";
    if (bad != NULL) {
        free(payload);
        return broken(comm, op, from >= 0 ? from : -1 - (int)h->root, bad);
    }
    op->ll->payload[view.sender] = payload;
    op->ll->view[view.sender] = view;
    if (++op->ll->nin == comm->nranks - 1)
        decide(comm, op);
    return (incmoe_status_t)atomic_load(&comm->error);
}

incmoe_status_t client_ll_take_result(incmoe_comm_t *comm, coll_op_t *op,
                                      const struct inc_wire_hdr *h, void *payload, size_t length)
{
    char why[200];
    inc_wire_ll_view_t view;
    const char *bad = NULL;
    if (inc_wire_ll_parse(h, comm->nranks, payload, length, &view, why, sizeof(why)) != INCMOE_OK)
        bad = why;
    else if (view.sender != comm->rank || op->ll->decided)
        bad = "a result this rank does not await";
    else if (view.verdict == INCMOE_OK && view.n != client_ll_rows_with_others(comm, op))
        bad = "a result of another number of rows";
    if (bad != NULL) {
        free(payload);
        return broken(comm, op, -1 - comm->rank, bad);
    }
    op->ll->decided = 1;
    op->planned = 1;
    if (view.verdict != INCMOE_OK) {
        inc_dc_verdict_t v = {.status = view.verdict};
        /* The switch relays a reason it made: printable and bounded before anyone reads it. */
        inc_text_sanitize(v.reason, sizeof(v.reason), view.reason, view.reason_len);
        fail_alone(op, &v);
    } else {
        client_ll_apply_result(comm, op, view.rows);
    }
    free(payload);
    return INCMOE_OK;
}
