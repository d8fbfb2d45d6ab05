/*
 * dc_dispatch.c - the filtered multicast of a dispatch: each chunk of rank s
 * (its rows' sets, then its network rows) goes to every other rank its sets
 * name, carrying only that rank's rows and their source row numbers, at the
 * position in that rank's block of s that the rows of s before it leave.
 * Positions need a source's chunks in chunk order: a chunk whose bytes land
 * before its predecessor's waits for it.  What goes to a rank is built from
 * the chunk only when that rank's output queue takes it (tx.h, send_built),
 * so the copies toward a rank are bounded by its queue, not by the number of
 * ranks a chunk goes to.  A source that sends a rank more or fewer rows than
 * its plan said fails the job: the receiver's buffer is bounded by the plan.
 */
#include "dc.h"

#include <string.h>

/* Rows of the chunk whose set holds d, for every d but the source; *net_p its network rows
   (those with any other rank).  0: a set names a rank >= N. */
static int count_rows(const dc_item_t *it, int nranks, uint32_t *kd, uint64_t *net_p)
{
    const char *sets = it->contrib[it->root].data;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], net = 0;
    memset(kd, 0, (size_t)nranks * sizeof(uint32_t));
    for (uint64_t j = 0; j < it->k; j++) {
        if (!dc_read_set(sets, j, it->words, nranks, set))
            return 0;
        set[it->root / 64] &= ~((uint64_t)1 << (it->root % 64));
        int any = 0;
        for (size_t w = 0; w < it->words; w++) {
            for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1)
                kd[w * 64 + (size_t)__builtin_ctzll(bits)]++;
            any |= set[w] != 0;
        }
        net += (uint64_t)any;
    }
    *net_p = net;
    return 1;
}

int dc_dispatch_admit(membership_t *m, job_t *job, coll_t *c, int me,
                      const struct inc_wire_dc_piece *p)
{
    dc_coll_t *dc = c->state;
    const uint64_t rows = dc->post[me].rows;
    const uint64_t first = (uint64_t)p->chunk * dc->rows_per_chunk;
    if (p->root != (uint32_t)me || p->chunk != dc->next[me] || first >= rows ||
        p->offset != first || p->total != rows) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "dispatch epoch %llu: rank %d sent chunk %u of root %u (rows %llu of %llu); its "
                "next is chunk %llu of its %llu rows",
                (unsigned long long)c->epoch, me, p->chunk, p->root, (unsigned long long)p->offset,
                (unsigned long long)p->total, (unsigned long long)dc->next[me],
                (unsigned long long)rows);
        return 0;
    }
    dc->next[me]++;
    return 1;
}

/* Build what goes to rank hdr->rank: the source row of each of its rows, then the rows. */
static void build_fwd(void *arg, const struct inc_wire_hdr *hdr, void *buf)
{
    const dc_item_t *it = arg;
    const int d = (int)hdr->rank, s = (int)it->root, n = it->ci.job->nranks;
    const uint64_t rb = it->row_bytes;
    const uint64_t kd = hdr->length / (4 + rb);
    const char *sets = it->contrib[s].data, *rows = sets + 8 * it->words * it->k;
    uint32_t *src = buf;
    char *out = (char *)buf + 4 * kd;
    uint64_t set[(INCMOE_MAX_RANKS + 63) / 64], net = 0, m = 0;
    for (uint64_t j = 0; j < it->k && m < kd; j++) {
        dc_read_set(sets, j, it->words, n, set); /* checked when the chunk came in */
        int for_d = (int)((set[d / 64] >> (d % 64)) & 1);
        set[s / 64] &= ~((uint64_t)1 << (s % 64));
        int any = 0;
        for (size_t w = 0; w < it->words; w++)
            any |= set[w] != 0;
        if (for_d) {
            uint32_t row = (uint32_t)(it->first + j);
            memcpy(&src[m], &row, 4);
            memcpy(out + m * rb, rows + net * rb, (size_t)rb);
            m++;
        }
        net += (uint64_t)any;
    }
}

/* Forward a chunk taken in order: positions advance as it goes. */
static void forward(coll_t *c, dc_item_t *it)
{
    dc_coll_t *dc = c->state;
    job_t *job = it->ci.job;
    const int n = job->nranks, s = (int)it->root;
    uint64_t net;
    count_rows(it, n, it->kd, &net); /* checked when the chunk came in */
    int nsend = 0;
    for (int d = 0; d < n; d++) {
        uint32_t *sent = &dc->track[(size_t)s * n + d], planned = dc->count[(size_t)s * n + d];
        if (d == s || it->kd[d] == 0)
            continue;
        if (it->kd[d] > planned - *sent) {
            job_fail(job->members, job, INCMOE_ERR_MISMATCH, s,
                     "dispatch epoch %llu: rank %d sends rank %d more rows than the %u of its "
                     "plan",
                     (unsigned long long)c->epoch, s, d, planned);
            return;
        }
        nsend++;
    }
    it->started = 1;
    if (nsend == 0) {
        dc_item_finish(it);
        return;
    }
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_FWD, job->id);
    h.stream = (uint8_t)c->stream;
    h.epoch = c->epoch;
    h.root = (uint32_t)s;
    h.chunk = it->chunk;
    it->ci.sending = nsend;
    coll_item_hold(&it->ci); /* the sends may all complete inline and finish it */
    for (int d = 0; d < n; d++) {
        if (d == s || it->kd[d] == 0)
            continue;
        uint32_t *sent = &dc->track[(size_t)s * n + d];
        h.rank = (uint32_t)d;
        h.offset = *sent;
        h.total = dc->count[(size_t)s * n + d];
        h.length = it->kd[d] * (4 + it->row_bytes);
        *sent += it->kd[d]; /* before the send: it may finish the collective inline */
        coll_item_send_built(&it->ci, job->conns[d], EGRESS_FORWARD, &h, build_fwd);
    }
    coll_item_put(&it->ci);
}

/* Every chunk of s went: each rank got exactly the rows the plan gave it. */
static int source_complete(coll_t *c, int s)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    const int n = job->nranks;
    for (int d = 0; d < n; d++) {
        uint32_t sent = dc->track[(size_t)s * n + d], planned = dc->count[(size_t)s * n + d];
        if (d != s && sent != planned) {
            job_fail(job->members, job, INCMOE_ERR_MISMATCH, s,
                     "dispatch epoch %llu: rank %d's sets send rank %d %u rows, its plan %u",
                     (unsigned long long)c->epoch, s, d, sent, planned);
            return 0;
        }
    }
    return 1;
}

/* Forward the chunks of s that are in, in chunk order.  One chunk more is counted while it
   walks, so the collective cannot be done (and freed) under it. */
static void advance(coll_t *c, int s)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    const uint64_t nch = dc_nchunks(dc, dc->post[s].rows);
    c->remaining++;
    while (job->state == JOB_ACTIVE) {
        dc_item_t *it = dc_item_find(dc, (uint32_t)s, (uint32_t)dc->taken[s]);
        if (it == NULL || it->nin == 0 || it->started)
            break;
        dc->taken[s]++;
        forward(c, it);
        if (job->state == JOB_ACTIVE && dc->taken[s] == nch)
            source_complete(c, s);
    }
    if (job->state != JOB_ACTIVE)
        return; /* job_fail() has dropped c */
    c->remaining--;
    coll_check_done(job, c);
}

void dc_dispatch_in(coll_t *c, dc_item_t *it)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    const int s = (int)it->root;
    uint64_t net;
    if (!count_rows(it, job->nranks, it->kd, &net) ||
        it->contrib[s].length != 8 * it->words * it->k + net * it->row_bytes) {
        JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, s,
                "dispatch epoch %llu: rank %d's chunk %u of %llu rows has %zu bytes, or a set "
                "naming a rank >= %d",
                (unsigned long long)c->epoch, s, it->chunk, (unsigned long long)it->k,
                it->contrib[s].length, job->nranks);
        return;
    }
    it->nin = 1;
    advance(c, s);
}
