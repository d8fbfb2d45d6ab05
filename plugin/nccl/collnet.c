/*
 * collnet.c - NCCL's CollNet over the incmoe client API.
 *
 * The CollNet communicator (one head rank per node) is one incmoe job on the
 * switch named by INCMOE_SWITCH.  Every rank derives the same job id: from
 * INCMOE_JOB_ID when set, else from NCCL's commId (v11) and the nonce rank 0
 * put in its listen handle, which all ranks receive alike.
 *
 * NCCL's AllGather / ReduceScatter windows are cut into at most three pieces
 * (window.h) and posted as that many collectives, in the same order on every
 * rank; a request is done when all its pieces are.  NCCL's addresses may lie
 * anywhere inside a registered region, and the logical N-block base of a
 * window (address - windowOffset) may lie before it: offsets are therefore
 * computed modulo 2^64 and only the bytes actually moved are in range.
 *
 * The client library validates again, but a collective it rejects fails the
 * whole job, so every argument is checked here first and a bad one returns
 * ncclInvalidArgument without touching the job.
 *
 * NCCL's calls here must not block, but a stream takes only
 * INCMOE_STREAM_WINDOW collectives in flight (a post beyond waits for the
 * oldest).  So when the stream has no room for all the pieces of a call, the
 * call returns ncclSuccess with *request = NULL, which NCCL's CollNet proxy
 * takes as "not posted yet" and retries (src/transport/coll_net.cc,
 * sendProxyProgress).  NCCL's proxy thread is the only poster on this
 * communicator, so room it saw cannot shrink before it posts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "plugin.h"
#include "window.h"

#include "base/config.h"
#include "base/hash.h"
#include "base/keyfile.h"
#include "plugin/post.h"

#define HANDLE_MAGIC 0x43434e49u /* "INCC" */
#define MR_MAGIC     0x524d4343u

typedef struct {
    uint32_t magic;
    int32_t dev;
    uint64_t comm_id;
    uint64_t nonce;
} collnet_handle_t;
_Static_assert(sizeof(collnet_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds 128 bytes");

typedef struct {
    uint64_t comm_id;
    uint64_t nonce;
} collnet_listen_t;

/* What a CollNet comm hands NCCL (registrations, requests) is listed on the comm,
   so that closing it releases what NCCL never deregistered or completed. */
typedef struct collnet_link {
    struct collnet_link *prev, *next;
} collnet_link_t;

typedef struct {
    incmoe_comm_t *comm;
    int rank, nranks;
    int failure_reported;
    collnet_link_t mrs, reqs; /* list heads */
} collnet_comm_t;

typedef struct {
    collnet_link_t link; /* first: the list links back to the object */
    uint32_t magic;
    collnet_comm_t *cc;
    incmoe_mr_t *mr;
    char *base;
    size_t size;
} collnet_mr_t;

typedef struct {
    collnet_link_t link; /* first: the list links back to the object */
    collnet_comm_t *cc;
    int n;
    int size;
    incmoe_req_t reqs[WINDOW_MAX_PIECES];
} collnet_req_t;

static void link_init(collnet_link_t *head)
{
    head->prev = head->next = head;
}

static void link_add(collnet_link_t *head, collnet_link_t *l)
{
    l->next = head->next;
    l->prev = head;
    head->next->prev = l;
    head->next = l;
}

static void link_del(collnet_link_t *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
}

static void req_free(collnet_req_t *r)
{
    link_del(&r->link);
    free(r);
}

static void mr_free(collnet_mr_t *m)
{
    link_del(&m->link);
    m->magic = 0;
    free(m);
}

static const char *switch_addr;

ncclResult_t collnet_init(void)
{
    switch_addr = inc_config_get_str("INCMOE_SWITCH");
    if (switch_addr == NULL)
        PWARN("INCMOE_SWITCH is not set: the CollNet offers no device and NCCL will not use it");
    else
        PINFO("CollNet through incmoe-switchd at %s", switch_addr);
    return ncclSuccess;
}

ncclResult_t collnet_devices(int *ndev)
{
    if (ndev == NULL)
        return ncclInvalidArgument;
    *ndev = switch_addr != NULL ? 1 : 0;
    return ncclSuccess;
}

ncclResult_t collnet_listen(uint64_t comm_id, int dev, void *handle, void **listen_comm)
{
    if (plugin_check_dev(dev) != ncclSuccess || handle == NULL || listen_comm == NULL)
        return ncclInvalidArgument;
    collnet_listen_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return ncclSystemError;
    l->comm_id = comm_id;
    if (getrandom(&l->nonce, sizeof(l->nonce), 0) != (ssize_t)sizeof(l->nonce)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        l->nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 20;
    }
    collnet_handle_t *h = handle;
    memset(h, 0, sizeof(*h));
    h->magic = HANDLE_MAGIC;
    h->dev = dev;
    h->comm_id = comm_id;
    h->nonce = l->nonce;
    *listen_comm = l;
    return ncclSuccess;
}

/* The shared secret: INCMOE_AUTH_KEY, else the first line of INCMOE_AUTH_KEY_FILE. */
static ncclResult_t read_secret(char *buf, size_t *len)
{
    const char *key = inc_config_get_str("INCMOE_AUTH_KEY");
    const char *file = inc_config_get_str("INCMOE_AUTH_KEY_FILE");
    *len = 0;
    if (key == NULL && file == NULL)
        return ncclSuccess;
    if (key == NULL) {
        char why[256];
        if (inc_keyfile_read(file, buf, len, why, sizeof(why)) != INCMOE_OK) {
            PWARN("INCMOE_AUTH_KEY_FILE: %s", why);
            return ncclInvalidArgument;
        }
        return ncclSuccess;
    }
    size_t n = strlen(key);
    if (n > INCMOE_MAX_SECRET) {
        PWARN("INCMOE_AUTH_KEY is %zu bytes: it must be 1..%d bytes", n, INCMOE_MAX_SECRET);
        return ncclInvalidArgument;
    }
    memcpy(buf, key, n);
    *len = n;
    return ncclSuccess;
}

ncclResult_t collnet_connect(void *handles[], int nranks, int rank, void *listen_comm,
                             void **coll_comm)
{
    if (handles == NULL || coll_comm == NULL || listen_comm == NULL || nranks < 1 ||
        nranks > INCMOE_MAX_RANKS || rank < 0 || rank >= nranks) {
        PWARN("connect: rank %d of %d is out of range (1..%d ranks)", rank, nranks,
              INCMOE_MAX_RANKS);
        return ncclInvalidArgument;
    }
    for (int r = 0; r < nranks; r++) {
        const collnet_handle_t *h = handles[r];
        if (h == NULL || h->magic != HANDLE_MAGIC) {
            PWARN("connect: handle of rank %d is not an incmoe CollNet handle", r);
            return ncclInvalidArgument;
        }
    }
    if (switch_addr == NULL) {
        PWARN("connect: INCMOE_SWITCH is not set; NCCL falls back to point-to-point");
        return ncclSystemError;
    }
    const collnet_handle_t *h0 = handles[0];
    uint64_t job_id = inc_mix64(h0->nonce ^ inc_mix64(h0->comm_id + 0x9e3779b97f4a7c15ull));
    const char *job = inc_config_get_str("INCMOE_JOB_ID");
    if (job != NULL) {
        char *end;
        errno = 0;
        job_id = strtoull(job, &end, 0);
        if (errno != 0 || *end != '\0' || end == job || job[0] == '-') {
            PWARN("INCMOE_JOB_ID=%s is not a number in 0..2^64-1", job);
            return ncclInvalidArgument;
        }
    }
    char secret[INCMOE_MAX_SECRET];
    size_t secret_len;
    ncclResult_t res = read_secret(secret, &secret_len);
    if (res != ncclSuccess)
        return res;

    collnet_comm_t *cc = calloc(1, sizeof(*cc));
    if (cc == NULL)
        return ncclSystemError;
    link_init(&cc->mrs);
    link_init(&cc->reqs);
    incmoe_comm_params_t prm = {
        .switch_addr = switch_addr,
        .job_id = job_id,
        .rank = rank,
        .nranks = nranks,
    };
    if (secret_len > 0) {
        prm.field_mask |= INCMOE_COMM_PARAM_SECRET;
        prm.secret = secret;
        prm.secret_len = secret_len;
    }
    incmoe_status_t st = incmoe_comm_create(&prm, &cc->comm);
    memset(secret, 0, sizeof(secret));
    if (st != INCMOE_OK) {
        PWARN("connect: rank %d of %d could not join job %#llx on switch %s: %s; "
              "NCCL falls back to the point-to-point network",
              rank, nranks, (unsigned long long)job_id, switch_addr, incmoe_strerror(st));
        free(cc);
        return plugin_result(st) == ncclInvalidArgument ? ncclInvalidArgument : ncclSystemError;
    }
    cc->rank = rank;
    cc->nranks = nranks;
    PINFO("CollNet rank %d of %d joined job %#llx on %s", rank, nranks, (unsigned long long)job_id,
          switch_addr);
    *coll_comm = cc;
    return ncclSuccess;
}

/* NCCL's datatype / operation -> ours; -1 where there is none. */
static int map_dtype(ncclDataType_t t)
{
    return (int)t >= ncclInt8 && (int)t <= ncclBfloat16 ? (int)t : -1;
}

static int map_op(ncclRedOp_t op)
{
    return (int)op >= ncclSum && (int)op <= ncclMin ? (int)op : -1;
}

ncclResult_t collnet_reduce_support(ncclDataType_t dtype, ncclRedOp_t op, int *supported)
{
    if (supported == NULL)
        return ncclInvalidArgument;
    int t = map_dtype(dtype), o = map_op(op);
    *supported = t >= 0 && o >= 0 && incmoe_reduce_supported((incmoe_dtype_t)t, (incmoe_redop_t)o);
    return ncclSuccess;
}

/* ---- memory ----------------------------------------------------------- */

ncclResult_t collnet_reg_mr(void *coll_comm, void *data, size_t size, int type, void **mhandle)
{
    collnet_comm_t *cc = coll_comm;
    if (cc == NULL || mhandle == NULL || data == NULL || size == 0) {
        PWARN("regMr: invalid arguments (comm %p, data %p, %zu bytes)", coll_comm, data, size);
        return ncclInvalidArgument;
    }
    /* Host memory only (ptr_support.h): NCCL stages GPU data in its own host buffers. */
    int supported = plugin_collnet_ptr_support();
    if ((type & supported) == 0 || type != NCCL_PTR_HOST) {
        PWARN("regMr: memory type %d is not supported (ptrSupport %#x)", type, supported);
        return ncclInvalidArgument;
    }
    collnet_mr_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return ncclSystemError;
    incmoe_status_t st = incmoe_mem_register(cc->comm, data, size, &m->mr);
    if (st != INCMOE_OK) {
        PWARN("regMr: registering %zu bytes at %p failed: %s", size, data, incmoe_strerror(st));
        free(m);
        return plugin_result(st);
    }
    m->magic = MR_MAGIC;
    m->cc = cc;
    m->base = data;
    m->size = size;
    link_add(&cc->mrs, &m->link);
    *mhandle = m;
    return ncclSuccess;
}

ncclResult_t collnet_reg_mr_dmabuf(void *coll_comm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, void **mhandle)
{
    PWARN("regMrDmaBuf: DMA-BUF memory is not supported (ptrSupport has no NCCL_PTR_DMABUF)");
    return ncclInvalidArgument;
}

ncclResult_t collnet_dereg_mr(void *coll_comm, void *mhandle)
{
    collnet_mr_t *m = mhandle;
    if (coll_comm == NULL || m == NULL || m->magic != MR_MAGIC || m->cc != coll_comm)
        return ncclInvalidArgument;
    incmoe_status_t st = incmoe_mem_deregister(m->cc->comm, m->mr);
    if (st == INCMOE_ERR_BUSY) { /* the handle stays valid: NCCL may retry after the test */
        PWARN("deregMr: %p is still in use by a collective in flight", m->base);
        return plugin_result(st);
    }
    mr_free(m);
    return st == INCMOE_OK ? ncclSuccess : plugin_result(st);
}

/* The registration behind mhandle, if [p, p+len) lies inside it. */
static collnet_mr_t *mr_for(collnet_comm_t *cc, void *mhandle, const void *p, size_t len,
                            const char *what)
{
    collnet_mr_t *m = mhandle;
    if (m == NULL || m->magic != MR_MAGIC || m->cc != cc) {
        PWARN("%s: mhandle %p is not a registration of this CollNet comm", what, mhandle);
        return NULL;
    }
    const char *c = p;
    if (len > 0 && (c < m->base || len > m->size || (size_t)(c - m->base) > m->size - len)) {
        PWARN("%s: [%p, +%zu) is outside the registered [%p, +%zu)", what, p, len, (void *)m->base,
              m->size);
        return NULL;
    }
    return m;
}

/* ---- collectives ------------------------------------------------------ */

/* Can the stream take n more collectives now?  If not, NCCL is told to retry. */
static int stream_has_room(collnet_comm_t *cc, incmoe_stream_t stream, int n, void **request)
{
    if (client_stream_room(cc->comm, stream) >= (unsigned)n)
        return 1;
    *request = NULL;
    return 0;
}

static ncclResult_t post_failed(collnet_comm_t *cc, const char *what, incmoe_status_t st)
{
    char msg[256] = "";
    incmoe_comm_error(cc->comm, msg, sizeof(msg));
    PWARN("%s: posting failed: %s%s%s", what, incmoe_strerror(st), msg[0] ? ": " : "", msg);
    return plugin_result(st);
}

ncclResult_t collnet_iallreduce(void *coll_comm, void *send, void *recv, size_t count,
                                ncclDataType_t dtype, ncclRedOp_t op, void *send_mh, void *recv_mh,
                                void **request)
{
    collnet_comm_t *cc = coll_comm;
    if (cc == NULL || request == NULL)
        return ncclInvalidArgument;
    int t = map_dtype(dtype), o = map_op(op);
    if (t < 0 || o < 0 || !incmoe_reduce_supported((incmoe_dtype_t)t, (incmoe_redop_t)o)) {
        PWARN("iallreduce: datatype %d with operation %d is not reduced by the switch", (int)dtype,
              (int)op);
        return ncclInvalidArgument;
    }
    size_t esize = incmoe_dtype_size((incmoe_dtype_t)t);
    if (count > PLUGIN_MAX_BYTES / esize) {
        PWARN("iallreduce: %zu elements exceed maxCollBytes %zu", count, PLUGIN_MAX_BYTES);
        return ncclInvalidArgument;
    }
    size_t bytes = count * esize;
    collnet_mr_t *sm = mr_for(cc, send_mh, send, bytes, "iallreduce send");
    collnet_mr_t *rm = mr_for(cc, recv_mh, recv, bytes, "iallreduce recv");
    if (sm == NULL || rm == NULL)
        return ncclInvalidArgument;
    if (!stream_has_room(cc, INCMOE_STREAM_ALLREDUCE, 1, request))
        return ncclSuccess;
    collnet_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ncclSystemError;
    r->cc = cc;
    link_add(&cc->reqs, &r->link);
    r->n = 1;
    r->size = (int)bytes;
    incmoe_status_t st = incmoe_allreduce(cc->comm, sm->mr, (size_t)((char *)send - sm->base),
                                          rm->mr, (size_t)((char *)recv - rm->base), count,
                                          (incmoe_dtype_t)t, (incmoe_redop_t)o, &r->reqs[0]);
    if (st != INCMOE_OK) {
        req_free(r);
        return post_failed(cc, "iallreduce", st);
    }
    *request = r;
    return ncclSuccess;
}

/* Common checks of the window arguments; fills the pieces. */
static int window_args(collnet_comm_t *cc, const char *what, int n_parts, ncclNetSGE_t *parts,
                       size_t bytes_per_rank, size_t win_offset, size_t win_bytes, size_t esize,
                       window_piece_t pieces[WINDOW_MAX_PIECES])
{
    if (n_parts != 1 || parts == NULL) {
        PWARN("%s: %d scatter-gather parts; this plugin takes exactly 1 (as NCCL posts)", what,
              n_parts);
        return -1;
    }
    if (parts[0].size < win_bytes) {
        PWARN("%s: the part holds %zu bytes, less than the window's %zu", what, parts[0].size,
              win_bytes);
        return -1;
    }
    if (win_bytes > PLUGIN_MAX_BYTES || bytes_per_rank % esize != 0 || win_offset % esize != 0 ||
        win_bytes % esize != 0) {
        PWARN("%s: window [%zu, +%zu) of %zu bytes per rank is not whole %zu-byte elements "
              "or exceeds maxCollBytes",
              what, win_offset, win_bytes, bytes_per_rank, esize);
        return -1;
    }
    int n = window_split(cc->nranks, bytes_per_rank, win_offset, win_bytes, pieces);
    if (n < 0)
        PWARN("%s: window [%zu, +%zu) does not fit %d ranks x %zu bytes", what, win_offset,
              win_bytes, cc->nranks, bytes_per_rank);
    return n;
}

/* Post one collective per piece: the same sequence on every rank. */
static ncclResult_t post_pieces(collnet_comm_t *cc, const char *what, int reduce,
                                const window_piece_t *pieces, int n, size_t bytes_per_rank,
                                collnet_mr_t *send_mr, size_t send_off_own, size_t send_off_base,
                                collnet_mr_t *recv_mr, size_t recv_off_own, size_t recv_off_base,
                                incmoe_dtype_t dtype, incmoe_redop_t op, int size, void **request)
{
    collnet_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ncclSystemError;
    r->cc = cc;
    link_add(&cc->reqs, &r->link);
    r->size = size;
    size_t valid[INCMOE_MAX_RANKS]; /* copied by the library at post time */
    for (int i = 0; i < n; i++) {
        const window_piece_t *p = &pieces[i];
        for (int k = 0; k < cc->nranks; k++)
            valid[k] = k >= p->first_block && k <= p->last_block ? bytes_per_rank : 0;
        incmoe_layout_t layout = {.block_stride = bytes_per_rank,
                                  .offset = p->offset,
                                  .length = p->length,
                                  .valid = valid};
        int mine = cc->rank >= p->first_block && cc->rank <= p->last_block;
        incmoe_status_t st;
        if (!reduce)
            st = incmoe_allgather(cc->comm, send_mr->mr, mine ? send_off_own : 0, recv_mr->mr,
                                  recv_off_base, &layout, &r->reqs[i]);
        else
            st = incmoe_reducescatter(cc->comm, send_mr->mr, send_off_base, recv_mr->mr,
                                      mine ? recv_off_own : 0, &layout, dtype, op, &r->reqs[i]);
        if (st != INCMOE_OK) {
            /* Earlier pieces stay posted; the job is unusable now anyway. */
            req_free(r);
            return post_failed(cc, what, st);
        }
        r->n++;
    }
    *request = r;
    return ncclSuccess;
}

ncclResult_t collnet_iallgather(void *coll_comm, void *send, int n_parts, ncclNetSGE_t *parts,
                                size_t bytes_per_rank, size_t win_offset, size_t win_bytes,
                                void *send_mh, void **request)
{
    collnet_comm_t *cc = coll_comm;
    window_piece_t pieces[WINDOW_MAX_PIECES];
    if (cc == NULL || request == NULL)
        return ncclInvalidArgument;
    int n = window_args(cc, "iallgather", n_parts, parts, bytes_per_rank, win_offset, win_bytes, 1,
                        pieces);
    if (n < 0)
        return ncclInvalidArgument;
    size_t own = window_block_bytes(bytes_per_rank, win_offset, win_bytes, cc->rank);
    collnet_mr_t *sm = mr_for(cc, send_mh, send, own, "iallgather send");
    collnet_mr_t *rm = mr_for(cc, parts[0].mhandle, parts[0].address, win_bytes, "iallgather recv");
    if (sm == NULL || rm == NULL)
        return ncclInvalidArgument;
    /* Block r's window bytes land at address + (r*B + offset - win_offset): the N-block base
       is address - win_offset, possibly before the region (wraps; see the file comment). */
    size_t recv_base = (size_t)((char *)parts[0].address - rm->base) - win_offset;
    size_t send_own = own > 0 ? (size_t)((char *)send - sm->base) : 0;
    if (!stream_has_room(cc, INCMOE_STREAM_ALLGATHER, n, request))
        return ncclSuccess;
    return post_pieces(cc, "iallgather", 0, pieces, n, bytes_per_rank, sm, send_own, 0, rm, 0,
                       recv_base, INCMOE_UINT8, INCMOE_SUM, (int)win_bytes, request);
}

ncclResult_t collnet_ireducescatter(void *coll_comm, int n_parts, ncclNetSGE_t *parts, void *recv,
                                    size_t bytes_per_rank, size_t win_offset, size_t win_bytes,
                                    ncclDataType_t dtype, ncclRedOp_t op, void *recv_mh,
                                    void **request)
{
    collnet_comm_t *cc = coll_comm;
    window_piece_t pieces[WINDOW_MAX_PIECES];
    if (cc == NULL || request == NULL)
        return ncclInvalidArgument;
    int t = map_dtype(dtype), o = map_op(op);
    if (t < 0 || o < 0 || !incmoe_reduce_supported((incmoe_dtype_t)t, (incmoe_redop_t)o)) {
        PWARN("ireducescatter: datatype %d with operation %d is not reduced by the switch",
              (int)dtype, (int)op);
        return ncclInvalidArgument;
    }
    int n = window_args(cc, "ireducescatter", n_parts, parts, bytes_per_rank, win_offset, win_bytes,
                        incmoe_dtype_size((incmoe_dtype_t)t), pieces);
    if (n < 0)
        return ncclInvalidArgument;
    size_t own = window_block_bytes(bytes_per_rank, win_offset, win_bytes, cc->rank);
    collnet_mr_t *sm =
        mr_for(cc, parts[0].mhandle, parts[0].address, win_bytes, "ireducescatter send");
    collnet_mr_t *rm = mr_for(cc, recv_mh, recv, own, "ireducescatter recv");
    if (sm == NULL || rm == NULL)
        return ncclInvalidArgument;
    size_t send_base = (size_t)((char *)parts[0].address - sm->base) - win_offset;
    size_t recv_own = own > 0 ? (size_t)((char *)recv - rm->base) : 0;
    if (!stream_has_room(cc, INCMOE_STREAM_REDUCESCATTER, n, request))
        return ncclSuccess;
    return post_pieces(cc, "ireducescatter", 1, pieces, n, bytes_per_rank, sm, 0, send_base, rm,
                       recv_own, 0, (incmoe_dtype_t)t, (incmoe_redop_t)o, (int)own, request);
}

/* Host memory: the library delivered into it already; nothing to flush. */
ncclResult_t collnet_iflush(void *coll_comm, void *data, int size, void *mhandle, void **request)
{
    if (coll_comm == NULL || request == NULL)
        return ncclInvalidArgument;
    *request = NULL;
    return ncclSuccess;
}

ncclResult_t collnet_test(void *request, int *done, int *size)
{
    collnet_req_t *r = request;
    if (r == NULL || done == NULL)
        return ncclInvalidArgument;
    *done = 0;
    for (int i = 0; i < r->n; i++) {
        incmoe_status_t st = incmoe_test(r->cc->comm, &r->reqs[i]);
        if (st == INCMOE_IN_PROGRESS)
            return ncclSuccess;
        if (st != INCMOE_OK) {
            collnet_comm_t *cc = r->cc;
            if (!cc->failure_reported) {
                char msg[256] = "";
                incmoe_comm_error(cc->comm, msg, sizeof(msg));
                PWARN("test: the CollNet job failed on rank %d: %s%s%s", cc->rank,
                      incmoe_strerror(st), msg[0] ? ": " : "", msg);
                cc->failure_reported = 1;
            }
            return plugin_result(st);
        }
    }
    if (size != NULL)
        *size = r->size;
    req_free(r);
    *done = 1;
    return ncclSuccess;
}

ncclResult_t collnet_close_coll(void *coll_comm)
{
    collnet_comm_t *cc = coll_comm;
    if (cc == NULL)
        return ncclInvalidArgument;
    incmoe_status_t st = incmoe_comm_destroy(cc->comm); /* releases its registrations too */
    while (cc->reqs.next != &cc->reqs)
        req_free((collnet_req_t *)cc->reqs.next);
    while (cc->mrs.next != &cc->mrs)
        mr_free((collnet_mr_t *)cc->mrs.next);
    free(cc);
    if (st != INCMOE_OK) {
        PWARN("closeColl: leaving the job: %s", incmoe_strerror(st));
        return plugin_result(st);
    }
    return ncclSuccess;
}

ncclResult_t collnet_close_listen(void *listen_comm)
{
    if (listen_comm == NULL)
        return ncclInvalidArgument;
    free(listen_comm);
    return ncclSuccess;
}
