/*
 * dc_combine.c - the masked reduction of a combine: item (s, c) holds owner
 * s's set chunk c (the sets of its rows in that chunk: the switch keeps
 * nothing of them between dispatch and combine) and, from each other rank d
 * its sets name, d's partials of those rows.  The set chunk says who must
 * contribute and how many rows each; once all are in, each row that has a
 * contributor besides s is reduced over them in ascending rank order (fp32
 * accumulation for 16-bit types, base/reduce.c) and the reduced rows go to s
 * in row order, which applies its own partial last.
 */
#include "dc.h"
#include "base/dtype.h"
#include "base/reduce.h"

#include <string.h>

int dc_combine_admit(membership_t *m, job_t *job, coll_t *c, int me,
                     const struct inc_wire_dc_piece *p, int dtype, int redop)
{
    dc_coll_t *dc = c->state;
    const int n = job->nranks, s = (int)p->root;
    const uint64_t rows = dc->post[s].rows, first = (uint64_t)p->chunk * dc->rows_per_chunk;
    const uint64_t k =
        first < rows && rows - first < dc->rows_per_chunk ? rows - first : dc->rows_per_chunk;
    uint32_t *next = &dc->track[(size_t)s * n + me];
    const uint32_t owner_next = dc->track[(size_t)s * n + s];
    int ok = dtype == dc->post[me].dtype && redop == dc->post[me].redop && first < rows &&
             p->offset == first && p->chunk >= *next;
    if (s == me)
        ok = ok && p->chunk == *next && p->total == rows && p->length == 8 * dc->words * k;
    else
        ok = ok && p->total == dc->recvd[(size_t)me * n + s] && p->length > 0 &&
             p->length % dc->row_bytes == 0 && p->length <= k * dc->row_bytes &&
             (p->chunk >= owner_next || dc_item_find(dc, (uint32_t)s, p->chunk) != NULL);
    if (!ok) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "combine epoch %llu: rank %d sent %llu bytes (%s %s) for chunk %u of rank %d "
                "(rows %llu of %llu), out of its order or shape",
                (unsigned long long)c->epoch, me, (unsigned long long)p->length,
                dtype < INC_DTYPE_COUNT ? incmoe_dtype_name((incmoe_dtype_t)dtype) : "?",
                redop < INC_REDOP_COUNT ? incmoe_redop_name((incmoe_redop_t)redop) : "?", p->chunk,
                s, (unsigned long long)p->offset, (unsigned long long)p->total);
        return 0;
    }
    *next = p->chunk + 1;
    return 1;
}

/* Is a contributor's partial the length the set chunk gives it?  0: the job failed. */
static int partial_fits(coll_t *c, dc_item_t *it, int d)
{
    job_t *job = it->ci.job;
    if (it->kd[d] > 0 && it->contrib[d].length == (size_t)it->kd[d] * it->row_bytes)
        return 1;
    JOB_BAD(job->members, job, INCMOE_ERR_MISMATCH, d,
            "combine epoch %llu: rank %d gives %zu partial rows for chunk %u of rank %u, whose "
            "sets give it %u",
            (unsigned long long)c->epoch, d, it->contrib[d].length / it->row_bytes, it->chunk,
            it->root, it->kd[d]);
    return 0;
}

/* The owner's set chunk is in: who contributes how many rows.  0: the job failed. */
static int take_sets(coll_t *c, dc_item_t *it)
{
    job_t *job = it->ci.job;
    const int n = job->nranks, s = (int)it->root;
    const char *sets = it->contrib[s].data;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64];
    for (uint64_t j = 0; j < it->k; j++) {
        if (!dc_read_set(sets, j, it->words, n, set)) {
            JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, s,
                    "combine epoch %llu: rank %d's set of row %llu names a rank >= %d",
                    (unsigned long long)c->epoch, s, (unsigned long long)(it->first + j), n);
            return 0;
        }
        set[s / 64] &= ~((uint64_t)1 << (s % 64));
        for (size_t w = 0; w < it->words; w++)
            for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1)
                it->kd[w * 64 + (size_t)__builtin_ctzll(bits)]++;
    }
    it->have_sets = 1;
    it->nexpected = 1;
    it->nin = 1;
    for (int d = 0; d < n; d++) {
        it->nexpected += d != s && it->kd[d] > 0;
        if (d != s && it->contrib[d].data != NULL) {
            if (!partial_fits(c, it, d))
                return 0;
            it->nin += it->contrib[d].in;
        }
    }
    return 1;
}

/* Reduce each row with a contributor besides the owner into it->out, in row order; the
   number of such rows. */
static uint64_t reduce_rows(dc_item_t *it, int nranks, incmoe_dtype_t dtype, incmoe_redop_t op)
{
    const int s = (int)it->root;
    const size_t pb = (size_t)it->row_bytes, count = pb / incmoe_dtype_size(dtype);
    const char *sets = it->contrib[s].data;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], out = 0;
    uint32_t at[INCMOE_MAX_RANKS] = {0};
    const void *srcs[INCMOE_MAX_RANKS];
    for (uint64_t j = 0; j < it->k; j++) {
        dc_read_set(sets, j, it->words, nranks, set);
        set[s / 64] &= ~((uint64_t)1 << (s % 64));
        int ns = 0;
        /* Ascending rank order, as every reduction of the switch. */
        for (size_t w = 0; w < it->words; w++) {
            for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1) {
                int d = (int)(w * 64 + (size_t)__builtin_ctzll(bits));
                srcs[ns++] = it->contrib[d].data + (size_t)at[d]++ * pb;
            }
        }
        if (ns > 0 && it->out != NULL)
            inc_reduce_ordered(it->out + out * pb, srcs, ns, count, dtype, op);
        out += ns > 0;
    }
    return out;
}

/* Everything is in: reduce and send the owner its rows (none: the item is done). */
static void reduce_and_send(coll_t *c, dc_item_t *it)
{
    dc_coll_t *dc = c->state;
    job_t *job = it->ci.job;
    const int n = job->nranks, s = (int)it->root;
    const incmoe_dtype_t dtype = (incmoe_dtype_t)dc->post[s].dtype;
    const incmoe_redop_t op = (incmoe_redop_t)dc->post[s].redop;
    it->started = 1;
    uint64_t rows = reduce_rows(it, n, dtype, op); /* counts only: out is not there yet */
    if (rows == 0) {
        dc_item_finish(it);
        return;
    }
    it->out_len = (size_t)(rows * it->row_bytes);
    it->out = job_alloc(job->members, job, it->out_len);
    if (it->out == NULL) {
        it->out_len = 0;
        job_fail(job->members, job, INCMOE_ERR_NO_MEMORY, s,
                 "switch memory bound reached for a combine");
        return;
    }
    reduce_rows(it, n, dtype, op);
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_FWD, job->id);
    h.stream = (uint8_t)c->stream;
    h.epoch = c->epoch;
    h.rank = (uint32_t)s;
    h.root = (uint32_t)s;
    h.chunk = it->chunk;
    h.offset = it->first;
    h.total = dc->post[s].rows;
    h.length = it->out_len;
    h.dtype = (uint8_t)dtype;
    h.redop = (uint8_t)op;
    it->ci.sending = 1;
    /* It unblocks the contributors' credits: a result, ahead of multicast copies. */
    coll_item_send(&it->ci, job->conns[s], EGRESS_RESULT, &h, it->out);
}

void dc_combine_in(coll_t *c, dc_item_t *it, int from)
{
    if (from == (int)it->root) {
        if (!take_sets(c, it))
            return;
    } else if (it->have_sets) {
        if (!partial_fits(c, it, from))
            return;
        it->nin++;
    }
    if (it->have_sets && it->nin == it->nexpected && !it->started)
        reduce_and_send(c, it);
}
