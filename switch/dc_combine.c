/*
 * dc_combine.c - the masked reduction of a combine: item (s, c) holds owner
 * s's set chunk c (the sets of its rows in that chunk: the switch keeps
 * nothing of them between dispatch and combine), which comes from the port
 * covering s, and from each other port whose side the sets name, that port's
 * partials of those rows: a rank d's of the rows whose set holds d, a switch
 * port's the reduction its switch made of the rows whose set names a rank on
 * its side.  The set chunk says who must contribute and how many rows each;
 * taken in chunk order it goes on to every other switch port whose side the
 * sets name (the owner's last to every switch port), so those switches can
 * contribute.  Once all are in, each row that has a contribution is reduced
 * over them in ascending port-key order (fp32 accumulation for 16-bit types,
 * base/reduce.c) and the reduced rows go toward s in row order: to s itself,
 * which applies its own partial last, or to the switch port covering s,
 * which takes them as that port's contribution.  On one switch every port is
 * a rank: ascending rank order.  Between switches the set chunks take a
 * window per owner and link, and the partials answer them (dc_window.c says
 * why that cannot deadlock, job_dc_memory_bound in membership.c what it
 * bounds).
 */
#include <string.h>

#include "dc_item.h"
#include "dc_window.h"

#include "base/dtype.h"
#include "base/reduce.h"

/* The header of a combine set chunk or partial from port me; 0 if not (the job failed). */
static int combine_admit(membership_t *m, job_t *job, coll_t *c, int me,
                         const struct inc_wire_dc_piece *p, int dtype, int redop)
{
    dc_coll_t *dc = c->state;
    const int n = job->nranks, s = (int)p->root, switch_port = dc_switch_port(job, me);
    const uint64_t rows = dc->post[s].rows, first = (uint64_t)p->chunk * dc->rows_per_chunk;
    const uint64_t k =
        first < rows && rows - first < dc->rows_per_chunk ? rows - first : dc->rows_per_chunk;
    /* The owner's port (s itself, or the switch port covering it) sends its set chunks in
       order; a rank its partials in order of the owner's chunks. */
    uint32_t *next = &dc->track[(size_t)s * n + me];
    const uint32_t owner_next = dc->track[(size_t)s * n + job->rep[s]];
    int ok = dtype == dc->post[s].dtype && redop == dc->post[s].redop && first < rows &&
             p->offset == first;
    if (job->rep[s] == me) {
        ok = ok && (switch_port ? p->chunk >= *next : p->chunk == *next) && p->total == rows &&
             p->length == 8 * dc->words * k;
    } else if (!switch_port) {
        ok = ok && p->chunk >= *next && p->total == dc->recvd[(size_t)me * n + s] &&
             p->length > 0 && p->length % dc->row_bytes == 0 && p->length <= k * dc->row_bytes &&
             (p->chunk >= owner_next || dc_item_find(dc, (uint32_t)s, p->chunk) != NULL);
    } else {
        /* A switch port's partials answer a set chunk this switch sent it, in any order. */
        const dc_item_t *it = dc_item_find(dc, (uint32_t)s, p->chunk);
        ok = ok && p->total == rows && it != NULL && it->taken && it->kd[me] > 0 &&
             it->contrib[me].data == NULL && p->length == it->kd[me] * dc->row_bytes;
    }
    if (!ok) {
        char who[48];
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "combine epoch %llu: %s sent %llu bytes (%s %s) for chunk %u of rank %d "
                "(rows %llu of %llu), out of its order or shape",
                (unsigned long long)c->epoch, dc_port_name(job, me, who, sizeof(who)),
                (unsigned long long)p->length,
                dtype < INC_DTYPE_COUNT ? incmoe_dtype_name((incmoe_dtype_t)dtype) : "?",
                redop < INC_REDOP_COUNT ? incmoe_redop_name((incmoe_redop_t)redop) : "?", p->chunk,
                s, (unsigned long long)p->offset, (unsigned long long)p->total);
        return 0;
    }
    if (job->rep[s] == me && switch_port && !dc_window_in(m, job, me, (uint32_t)s))
        return 0;
    if (job->rep[s] == me || !switch_port)
        *next = p->chunk + 1;
    return 1;
}

/* Is a contributor's partial the length the set chunk gives it?  0: the job failed. */
static int partial_fits(coll_t *c, dc_item_t *it, int d)
{
    job_t *job = it->ci.job;
    if (it->kd[d] > 0 && it->contrib[d].length == (size_t)it->kd[d] * it->row_bytes)
        return 1;
    char who[48];
    JOB_BAD(job->members, job, INCMOE_ERR_MISMATCH, d,
            "combine epoch %llu: %s gives %zu partial rows for chunk %u of rank %u, whose "
            "sets give it %u",
            (unsigned long long)c->epoch, dc_port_name(job, d, who, sizeof(who)),
            it->contrib[d].length / it->row_bytes, it->chunk, it->root, it->kd[d]);
    return 0;
}

/* The owner's set chunk is in: who contributes how many rows.  0: the job failed. */
static int take_sets(coll_t *c, dc_item_t *it)
{
    job_t *job = it->ci.job;
    const int n = job->nranks, s = (int)it->root;
    const char *sets = it->contrib[it->from].data;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64];
    int ports[INCMOE_MAX_RANKS];
    for (uint64_t j = 0; j < it->k; j++) {
        if (!dc_read_set(sets, j, it->words, n, set)) {
            JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, it->from,
                    "combine epoch %llu: rank %d's set of row %llu names a rank >= %d",
                    (unsigned long long)c->epoch, s, (unsigned long long)(it->first + j), n);
            return 0;
        }
        const int np = dc_set_ports(job, set, it->words, it->from, ports);
        for (int i = 0; i < np; i++)
            it->kd[ports[i]]++;
    }
    it->src_in = 1;
    it->nexpected = 1;
    it->nin = 1;
    for (int d = 0; d < n; d++) {
        it->nexpected += d != it->from && it->kd[d] > 0;
        if (d != it->from && it->contrib[d].data != NULL) {
            if (!partial_fits(c, it, d))
                return 0;
            it->nin += it->contrib[d].in;
        }
    }
    return 1;
}

/* Reduce each row with a contribution (from a port but the owner's) into it->out, in row
   order; the number of such rows. */
static uint64_t reduce_rows(dc_item_t *it, incmoe_dtype_t dtype, incmoe_redop_t op)
{
    const job_t *job = it->ci.job;
    const size_t pb = (size_t)it->row_bytes, count = pb / incmoe_dtype_size(dtype);
    const char *sets = it->contrib[it->from].data;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], out = 0;
    uint32_t at[INCMOE_MAX_RANKS] = {0};
    const void *srcs[INCMOE_MAX_RANKS];
    int ports[INCMOE_MAX_RANKS];
    for (uint64_t j = 0; j < it->k; j++) {
        dc_read_set(sets, j, it->words, job->nranks, set);
        /* Ascending port key, as every reduction of the switch (on one switch: rank order). */
        const int np = dc_set_ports(job, set, it->words, it->from, ports);
        for (int i = 0; i < np; i++)
            srcs[i] = it->contrib[ports[i]].data + (size_t)at[ports[i]]++ * pb;
        if (np > 0 && it->out != NULL)
            inc_reduce_ordered(it->out + out * pb, srcs, np, count, dtype, op);
        out += np > 0;
    }
    return out;
}

/* Everything is in: reduce and send the rows toward the owner (none: nothing goes). */
static void reduce_and_send(coll_t *c, dc_item_t *it)
{
    dc_coll_t *dc = c->state;
    job_t *job = it->ci.job;
    const int s = (int)it->root, o = it->from;
    const incmoe_dtype_t dtype = (incmoe_dtype_t)dc->post[s].dtype;
    const incmoe_redop_t op = (incmoe_redop_t)dc->post[s].redop;
    it->reduced = 1;
    uint64_t rows = reduce_rows(it, dtype, op); /* counts only: out is not there yet */
    if (rows == 0) {
        dc_item_try_finish(it);
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
    reduce_rows(it, dtype, op);
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_FWD, job, c);
    h.rank = (uint32_t)o;
    h.root = (uint32_t)s;
    h.chunk = it->chunk;
    h.offset = it->first;
    h.total = dc->post[s].rows;
    h.length = it->out_len;
    h.dtype = (uint8_t)dtype;
    h.redop = (uint8_t)op;
    it->ci.sending++;
    /* It unblocks the contributors' credits: a result, ahead of multicast copies.  Up, it is
       the parent's contribution of this side (a DATA, under no credit). */
    conn_t *to = job->conns[o];
    if (o == job->parent_rep) {
        h.msg = WIRE_MSG_DATA;
        h.rank = (uint32_t)job->up_rank;
    }
    coll_item_send(&it->ci, to, EGRESS_RESULT, &h, it->out);
}

/* Reduce once the set chunk and every contribution it names are in. */
static void try_reduce(coll_t *c, dc_item_t *it)
{
    if (it->src_in && it->nin == it->nexpected && !it->reduced)
        reduce_and_send(c, it);
}

/* A set chunk's copies: the header, and what the loop may read without the collective. */
typedef struct {
    struct inc_wire_hdr h;
    int last; /* the owner's last set chunk: every switch port learns the owner is done */
} take_t;

static int take_receives(const coll_item_t *ci, int p, const void *arg)
{
    const dc_item_t *it = (const dc_item_t *)ci;
    const take_t *t = arg;
    return p != it->from && dc_switch_port(ci->job, p) && (it->kd[p] > 0 || t->last);
}

static void take_copy(coll_item_t *ci, int p, void *arg)
{
    dc_item_t *it = (dc_item_t *)ci;
    job_t *job = ci->job;
    struct inc_wire_hdr to = ((take_t *)arg)->h;
    to.rank = (uint32_t)p;
    if (p == job->parent_rep) { /* up: the owner's set chunk, as the owner's DATA */
        to.msg = WIRE_MSG_DATA;
        to.rank = (uint32_t)job->up_rank;
    }
    dc_window_send(job->members, job, p, ci, &to, it->contrib[it->from].data);
}

/* Forward a set chunk taken in order toward the switch ports it concerns. */
static void combine_take(coll_t *c, dc_item_t *it)
{
    const dc_coll_t *dc = c->state;
    const int s = (int)it->root;
    take_t t = {.last = (uint64_t)it->chunk + 1 == dc_nchunks(dc, dc->post[s].rows)};
    coll_hdr_init(&t.h, WIRE_MSG_FWD, it->ci.job, c);
    t.h.root = (uint32_t)s;
    t.h.chunk = it->chunk;
    t.h.offset = it->first;
    t.h.total = dc->post[s].rows;
    t.h.length = it->contrib[it->from].length;
    t.h.dtype = dc->post[s].dtype;
    t.h.redop = dc->post[s].redop;
    coll_item_send_copies(&it->ci, take_receives, take_copy, &t);
}

/* The owner's last set chunk is in: every item of it has its sets; 0: the job failed. */
static int combine_source_done(coll_t *c, int s)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    for (dc_item_t *it = dc->items; it != NULL; it = it->next) {
        if (it->root != (uint32_t)s || it->src_in)
            continue;
        /* Every set chunk of s that comes here has come: these partials answer none. */
        int d = 0;
        while (d < job->nranks && it->contrib[d].data == NULL)
            d++;
        char who[48];
        JOB_BAD(job->members, job, INCMOE_ERR_MISMATCH, d,
                "combine epoch %llu: %s gives partial rows for chunk %u of rank %d, whose sets "
                "give it none",
                (unsigned long long)c->epoch,
                dc_port_name(job, d < job->nranks ? d : 0, who, sizeof(who)), it->chunk, s);
        return 0;
    }
    return 1;
}

/* Port from's bytes are in: check them, and reduce and forward once all are. */
static void combine_in(coll_t *c, dc_item_t *it, int from)
{
    job_t *job = it->ci.job;
    if (from == it->from) {
        if (!take_sets(c, it))
            return;
        dc_advance(c, (int)it->root); /* the set chunk goes on first: the far side waits */
        if (job->state != JOB_ACTIVE || it->ci.coll == NULL)
            return;
    } else if (it->src_in) {
        if (!partial_fits(c, it, from))
            return;
        it->nin++;
    }
    try_reduce(c, it);
}

const dc_kind_t dc_combine_kind = {
    .admit = combine_admit,
    .in = combine_in,
    .take = combine_take,
    .source_done = combine_source_done,
};
