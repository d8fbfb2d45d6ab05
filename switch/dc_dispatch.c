/*
 * dc_dispatch.c - the filtered multicast of a dispatch: each chunk of rank s
 * (its rows' sets, then the rows that came with it) goes to every other rank
 * port its sets name, carrying only that rank's rows and their source row
 * numbers, at the position in that rank's block of s that the rows of s
 * before it leave; and over a tree (base/wire.h, "Switch trees") to every
 * other switch port whose side its sets name (and the last chunk of s to
 * every switch port), with all the sets and the rows for that side.  A chunk
 * from port q carries the rows whose set names a rank q does not cover (from
 * rank s: its network rows).  Positions need a source's chunks in chunk
 * order: a chunk whose bytes land before its predecessor's waits for it
 * (dc_advance).  What goes to a port is built from the chunk only when that
 * port's output queue takes it (tx.h, send_built), so the copies toward a
 * port are bounded by its queue, not by the number of ports a chunk goes to;
 * a chunk going up takes the parent's credits, one going down the child's
 * window (tree.c).  A source that sends one of this switch's ranks more or
 * fewer rows than its plan said fails the job: the receiver's buffer is
 * bounded by the plan.
 */
#include <string.h>

#include "dc_item.h"
#include "tree.h"

/* Rows of the chunk for each port but the one it came from (kd: whose set names a rank the
   port covers); *present_p the rows that came with it (whose set names a rank beyond that
   port).  0: a set names a rank >= N. */
static int count_rows(const dc_item_t *it, uint32_t *kd, uint64_t *present_p)
{
    const job_t *job = it->ci.job;
    const int n = job->nranks;
    const char *sets = it->contrib[it->from].data;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], present = 0;
    int ports[INCMOE_MAX_RANKS];
    memset(kd, 0, (size_t)n * sizeof(uint32_t));
    for (uint64_t j = 0; j < it->k; j++) {
        if (!dc_read_set(sets, j, it->words, n, set))
            return 0;
        const int np = dc_set_ports(job, set, it->words, it->from, ports);
        for (int i = 0; i < np; i++)
            kd[ports[i]]++;
        present += np > 0;
    }
    *present_p = present;
    return 1;
}

static int dispatch_admit(membership_t *m, job_t *job, coll_t *c, int me,
                          const struct inc_wire_dc_piece *p, int dtype, int redop)
{
    /* dtype and redop: a dispatch moves bytes, whatever its header says */
    dc_coll_t *dc = c->state;
    const int s = (int)p->root; /* admit checked it */
    const uint64_t rows = dc->post[s].rows;
    const uint64_t first = (uint64_t)p->chunk * dc->rows_per_chunk;
    /* A rank sends every chunk; a switch port only those that concern this side. */
    const int switch_port = dc_switch_port(job, me);
    const int in_order = switch_port ? p->chunk >= dc->next[s] : p->chunk == dc->next[s];
    if (job->rep[s] != me || !in_order || first >= rows || p->offset != first || p->total != rows) {
        const int shown = switch_port ? s : me;
        char who[48];
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "dispatch epoch %llu: %s sent chunk %u of root %u (rows %llu of %llu); its "
                "next is chunk %llu of its %llu rows",
                (unsigned long long)c->epoch, dc_port_name(job, me, who, sizeof(who)), p->chunk,
                p->root, (unsigned long long)p->offset, (unsigned long long)p->total,
                (unsigned long long)dc->next[shown], (unsigned long long)dc->post[shown].rows);
        return 0;
    }
    dc->next[s] = p->chunk + 1;
    return 1;
}

/* Build what goes to rank hdr->rank: the source row of each of its rows, then the rows. */
static void build_fwd(void *arg, const struct inc_wire_hdr *hdr, void *buf)
{
    const dc_item_t *it = arg;
    const job_t *job = it->ci.job;
    const int d = (int)hdr->rank, n = job->nranks;
    const uint64_t rb = it->row_bytes;
    const uint64_t kd = hdr->length / (4 + rb);
    const char *sets = it->contrib[it->from].data, *rows = sets + 8 * it->words * it->k;
    uint32_t *src = buf;
    char *out = (char *)buf + 4 * kd;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], in = 0, m = 0;
    for (uint64_t j = 0; j < it->k && m < kd; j++) {
        dc_read_set(sets, j, it->words, n, set); /* checked when the chunk came in */
        if ((set[d / 64] >> (d % 64)) & 1) {
            uint32_t row = (uint32_t)(it->first + j);
            memcpy(&src[m], &row, 4);
            memcpy(out + m * rb, rows + in * rb, (size_t)rb);
            m++;
        }
        in += (uint64_t)dc_set_beyond(job, set, it->words, it->from);
    }
}

/* Build the chunk a switch port gets (the parent, for the DATA going up): every set of the
   chunk, then the rows whose set names a rank on the port's side. */
static void build_chunk(void *arg, const struct inc_wire_hdr *hdr, void *buf)
{
    const dc_item_t *it = arg;
    const job_t *job = it->ci.job;
    const int p = hdr->msg == WIRE_MSG_DATA ? job->parent_rep : (int)hdr->rank;
    const uint64_t rb = it->row_bytes, sets_len = 8 * it->words * it->k;
    const char *sets = it->contrib[it->from].data, *rows = sets + sets_len;
    char *out = (char *)buf + sets_len;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], in = 0;
    memcpy(buf, sets, (size_t)sets_len);
    for (uint64_t j = 0; j < it->k; j++) {
        dc_read_set(sets, j, it->words, job->nranks, set); /* checked when the chunk came in */
        if (dc_set_meets(job, set, it->words, p)) {
            memcpy(out, rows + in * rb, (size_t)rb);
            out += rb;
        }
        in += (uint64_t)dc_set_beyond(job, set, it->words, it->from);
    }
}

/* The chunk to switch port p: its header as a source's DATA (up) or a FWD (down). */
static void send_chunk(coll_t *c, dc_item_t *it, int p)
{
    job_t *job = it->ci.job;
    const dc_coll_t *dc = c->state;
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_FWD, job, c);
    h.root = it->root;
    h.chunk = it->chunk;
    h.offset = it->first;
    h.total = dc->post[it->root].rows;
    h.length = 8 * it->words * it->k + it->kd[p] * it->row_bytes;
    if (p == job->parent_rep) {
        h.msg = WIRE_MSG_DATA;
        h.rank = (uint32_t)job->up_rank;
        tree_send_up(job->members, job, &it->ci, EGRESS_FORWARD, &h, NULL, build_chunk);
        return;
    }
    h.rank = (uint32_t)p; /* down: under the child's window */
    tree_send_down(job->members, job, p, &it->ci, EGRESS_FORWARD, &h, NULL, build_chunk);
}

/* A taken chunk's copies: what the loop may read without the collective. */
typedef struct {
    coll_t *c;
    int last; /* the root's last chunk: every switch port learns the source is done */
} take_t;

static int take_receives(const coll_item_t *ci, int p, const void *arg)
{
    const dc_item_t *it = (const dc_item_t *)ci;
    const take_t *t = arg;
    if (p == it->from)
        return 0;
    return it->kd[p] > 0 || (t->last && dc_switch_port(ci->job, p));
}

/* To a switch port the chunk; to a rank its rows, at the position its earlier rows of the
   root leave. */
static void take_copy(coll_item_t *ci, int p, void *arg)
{
    dc_item_t *it = (dc_item_t *)ci;
    job_t *job = ci->job;
    coll_t *c = ((take_t *)arg)->c;
    if (dc_switch_port(job, p)) {
        send_chunk(c, it, p);
        return;
    }
    dc_coll_t *dc = c->state;
    const size_t at = (size_t)it->root * (size_t)job->nranks + (size_t)p;
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_FWD, job, c);
    h.root = it->root;
    h.chunk = it->chunk;
    h.rank = (uint32_t)p;
    h.offset = dc->track[at];
    h.total = dc->count[at];
    h.length = it->kd[p] * (4 + it->row_bytes);
    dc->track[at] += it->kd[p]; /* before the send: it may finish the collective inline */
    coll_item_send_built(ci, job->conns[p], EGRESS_FORWARD, &h, build_fwd);
}

/* Does the chunk send some rank of this switch more rows than the plan gave it?  1: it
   does, and the job failed. */
static int take_overflows(coll_t *c, const dc_item_t *it)
{
    const dc_coll_t *dc = c->state;
    job_t *job = it->ci.job;
    const int n = job->nranks, s = (int)it->root;
    for (int p = 0; p < n; p++) {
        if (job->rep[p] != p || p == it->from || dc_switch_port(job, p) || it->kd[p] == 0)
            continue;
        uint32_t sent = dc->track[(size_t)s * n + p], planned = dc->count[(size_t)s * n + p];
        if (it->kd[p] > planned - sent) {
            job_fail(job->members, job, INCMOE_ERR_MISMATCH, s,
                     "dispatch epoch %llu: rank %d sends rank %d more rows than the %u of its "
                     "plan",
                     (unsigned long long)c->epoch, s, p, planned);
            return 1;
        }
    }
    return 0;
}

/* Forward a chunk taken in order: to each rank port its rows, to each switch port the chunk. */
static void dispatch_take(coll_t *c, dc_item_t *it)
{
    const dc_coll_t *dc = c->state;
    if (take_overflows(c, it))
        return;
    take_t t = {.c = c, .last = (uint64_t)it->chunk + 1 == dc_nchunks(dc, dc->post[it->root].rows)};
    coll_item_send_copies(&it->ci, take_receives, take_copy, &t);
}

/* The root's last chunk went: each of this switch's ranks got what the plan gave it; 0: the
   job failed. */
static int dispatch_source_done(coll_t *c, int s)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    const int n = job->nranks;
    for (int d = 0; d < n; d++) {
        if (d == s || job->rep[d] != d || dc_switch_port(job, d))
            continue; /* a rank beyond a switch port: its own switch checks */
        uint32_t sent = dc->track[(size_t)s * n + d], planned = dc->count[(size_t)s * n + d];
        if (sent != planned) {
            job_fail(job->members, job, INCMOE_ERR_MISMATCH, s,
                     "dispatch epoch %llu: rank %d's sets send rank %d %u rows, its plan %u",
                     (unsigned long long)c->epoch, s, d, sent, planned);
            return 0;
        }
    }
    return 1;
}

/* The chunk's bytes are in: check them, and forward what may go, in chunk order. */
static void dispatch_in(coll_t *c, dc_item_t *it, int from)
{
    (void)from; /* only the root's port sends a dispatch chunk */
    job_t *job = it->ci.job;
    const int s = (int)it->root;
    uint64_t present;
    if (!count_rows(it, it->kd, &present) ||
        it->contrib[it->from].length != 8 * it->words * it->k + present * it->row_bytes) {
        char who[48];
        JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, it->from,
                "dispatch epoch %llu: %s's chunk %u of %llu rows%s has %zu bytes, or a set "
                "naming a rank >= %d",
                (unsigned long long)c->epoch, dc_port_name(job, it->from, who, sizeof(who)),
                it->chunk, (unsigned long long)it->k, it->from == s ? "" : " of a rank it covers",
                it->contrib[it->from].length, job->nranks);
        return;
    }
    it->src_in = 1;
    dc_advance(c, s);
}

const dc_kind_t dc_dispatch_kind = {
    .admit = dispatch_admit,
    .in = dispatch_in,
    .take = dispatch_take,
    .source_done = dispatch_source_done,
};
