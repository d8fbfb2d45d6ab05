/*
 * lanes.c - the communicators a layer's paths run on (lanes.h).
 *
 * A sibling communicator is keyed by the layer's communicator and its
 * algorithm and counted by the layers holding it: an HF model's dozens of MoE
 * layers on one communicator share two siblings rather than opening two each.
 * It is created outside the registry's lock: creation waits for every rank to
 * join, and another thread of this process may be creating a layer on another
 * communicator whose peers wait for it.
 */
#include "lanes.h"

#include <pthread.h>
#include <stdlib.h>

#include "wait.h"

#include "base/hash.h"
#include "base/log.h"

#define SUBSYS "moe"

struct moe_sibling {
    incmoe_comm_t *parent;
    int algo;
    incmoe_comm_t *comm;
    int refs;
    struct moe_sibling *next;
};

static pthread_mutex_t lanes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct moe_sibling *lanes_siblings;

uint64_t lanes_job_id(uint64_t job_id, int algo)
{
    uint64_t h = inc_fnv1a_u64(INC_FNV1A_INIT, job_id);
    h = inc_fnv1a(h, "moe-path", 8);
    return inc_fnv1a_u64(h, (uint64_t)(int64_t)algo);
}

const char *lanes_algo_name(int algo)
{
    switch (algo) {
    case INCMOE_ALGO_INC:
        return "inc";
    case INCMOE_ALGO_RING:
        return "ring";
    case INCMOE_ALGO_A2A:
        return "a2a";
    }
    return "comm";
}

static struct moe_sibling *sibling_find(incmoe_comm_t *parent, int algo)
{
    for (struct moe_sibling *s = lanes_siblings; s != NULL; s = s->next)
        if (s->parent == parent && s->algo == algo)
            return s;
    return NULL;
}

/* The sibling of L->comm running algo, held once more (created on first use). */
static incmoe_status_t sibling_hold(incmoe_moe_t *L, int algo, struct moe_sibling **sib_p)
{
    pthread_mutex_lock(&lanes_lock);
    struct moe_sibling *s = sibling_find(L->comm, algo);
    if (s != NULL)
        s->refs++;
    pthread_mutex_unlock(&lanes_lock);
    if (s != NULL) {
        *sib_p = s;
        return INCMOE_OK;
    }
    const incmoe_comm_params_t *cp = L->path.comm_params;
    incmoe_comm_params_t p = *cp;
    p.job_id = lanes_job_id(cp->job_id, algo);
    p.algo = (incmoe_algo_t)algo;
    p.field_mask |= INCMOE_COMM_PARAM_ALGO;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return INCMOE_ERR_NO_MEMORY;
    incmoe_status_t st = incmoe_comm_create(&p, &s->comm);
    if (st != INCMOE_OK) {
        log_error(SUBSYS, "rank %d: create: the %s communicator (job %016llx on %s) failed: %s",
                  L->rank, lanes_algo_name(algo), (unsigned long long)p.job_id,
                  p.switch_addr ? p.switch_addr : "(no switch)", incmoe_strerror(st));
        free(s);
        return st;
    }
    s->parent = L->comm;
    s->algo = algo;
    s->refs = 1;
    pthread_mutex_lock(&lanes_lock);
    s->next = lanes_siblings;
    lanes_siblings = s;
    pthread_mutex_unlock(&lanes_lock);
    *sib_p = s;
    return INCMOE_OK;
}

static void sibling_put(struct moe_sibling *s)
{
    pthread_mutex_lock(&lanes_lock);
    int last = --s->refs == 0;
    if (last) {
        struct moe_sibling **pp = &lanes_siblings;
        while (*pp != s)
            pp = &(*pp)->next;
        *pp = s->next;
    }
    pthread_mutex_unlock(&lanes_lock);
    if (last) {
        incmoe_comm_destroy(s->comm);
        free(s);
    }
}

/* The algorithm L->comm was created with (its path's comm_params), -1 when not told. */
static int own_algo(const incmoe_moe_t *L)
{
    const incmoe_comm_params_t *cp = L->has_path ? L->path.comm_params : NULL;
    if (cp == NULL)
        return -1;
    return (cp->field_mask & INCMOE_COMM_PARAM_ALGO) ? (int)cp->algo : INCMOE_ALGO_INC;
}

static incmoe_status_t lane_add(incmoe_moe_t *L, int algo)
{
    moe_lane_t *l = &L->lanes[L->nlanes];
    incmoe_status_t st = sibling_hold(L, algo, &l->sib);
    if (st != INCMOE_OK)
        return st;
    l->comm = l->sib->comm;
    l->algo = algo;
    l->dc_support = -1;
    L->nlanes++;
    st = L->ops->lane_open(L, l->comm, &l->be);
    if (st != INCMOE_OK)
        log_error(SUBSYS, "rank %d: create: registering the buffers with the %s communicator: %s",
                  L->rank, lanes_algo_name(algo), incmoe_strerror(st));
    return st;
}

/* Every rank's verdict on opening its lanes: INCMOE_OK where all opened, else the same
   error on every rank (a registration that failed on one rank only must not leave the
   others with a layer it lacks). */
static incmoe_status_t lanes_agree(incmoe_moe_t *L, incmoe_status_t mine)
{
    uint64_t *in = (uint64_t *)L->hdr, *out = in + 1;
    in[0] = mine != INCMOE_OK;
    incmoe_req_t req;
    incmoe_status_t st = incmoe_allreduce(L->comm, L->hdr_mr, 0, L->hdr_mr, sizeof(uint64_t), 1,
                                          INCMOE_UINT64, INCMOE_MAX, &req);
    if (st == INCMOE_OK)
        st = moe_wait_bounded(L->comm, L->timeout_ms, &req);
    if (st != INCMOE_OK)
        return st;
    if (mine == INCMOE_OK && *out != 0) {
        log_error(SUBSYS,
                  "rank %d: create: another rank could not open its other algorithms' "
                  "communicators (see its log)",
                  L->rank);
        return INCMOE_ERR_INVALID_ARG;
    }
    return mine;
}

static incmoe_status_t lanes_add_all(incmoe_moe_t *L)
{
    static const int all[] = {INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (all[i] == L->lanes[0].algo)
            continue;
        if (L->path.algo != INCMOE_MOE_ALGO_AUTO && L->path.algo != all[i])
            continue;
        incmoe_status_t st = lane_add(L, all[i]);
        if (st != INCMOE_OK)
            return st;
    }
    return INCMOE_OK;
}

incmoe_status_t lanes_open(incmoe_moe_t *L)
{
    L->lanes[0] = (moe_lane_t){.comm = L->comm, .algo = own_algo(L), .dc_support = -1};
    L->nlanes = 1;
    L->cur_lane = 0;
    if (!L->has_path || L->path.algo == INCMOE_MOE_ALGO_COMM)
        return INCMOE_OK;
    return lanes_agree(L, lanes_add_all(L));
}

incmoe_status_t lanes_close(incmoe_moe_t *L)
{
    incmoe_status_t first = INCMOE_OK;
    for (int i = L->nlanes - 1; i >= 1; i--) {
        moe_lane_t *l = &L->lanes[i];
        incmoe_status_t st = l->be ? L->ops->lane_close(L, l->be) : INCMOE_OK;
        if (first == INCMOE_OK)
            first = st;
        if (l->sib != NULL)
            sibling_put(l->sib);
        *l = (moe_lane_t){0};
    }
    L->nlanes = L->nlanes > 0 ? 1 : 0;
    return first;
}

void lanes_use(incmoe_moe_t *L, int i)
{
    if (L->ops->lane_use != NULL)
        L->ops->lane_use(L, L->lanes[i].be);
    L->cur_lane = i;
}

int lanes_find(const incmoe_moe_t *L, int algo)
{
    for (int i = 0; i < L->nlanes; i++)
        if (L->lanes[i].algo == algo)
            return i;
    return -1;
}

incmoe_status_t lanes_dc_probe(incmoe_moe_t *L, int i)
{
    moe_lane_t *l = &L->lanes[i];
    if (l->dc_support >= 0)
        return INCMOE_OK;
    lanes_use(L, i);
    /* No row moves; any buffer registered with the lane's communicator does. */
    incmoe_mr_t *mr = i == 0 ? L->hdr_mr : (incmoe_mr_t *)(uintptr_t)L->ctx.xs_mr;
    incmoe_dispatch_params_t p = {.send_mr = mr, .row_bytes = 1, .recv_mr = mr, .capacity = 0};
    incmoe_req_t req;
    incmoe_status_t st = incmoe_dispatch(l->comm, &p, &req);
    if (st == INCMOE_ERR_UNSUPPORTED) {
        l->dc_support = 0;
        return INCMOE_OK;
    }
    if (st == INCMOE_OK)
        st = moe_wait_bounded(l->comm, L->timeout_ms, &req);
    if (st == INCMOE_OK)
        st = incmoe_dispatch_release(l->comm, &req);
    if (st != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(l->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: forward: asking %s for dispatch and combine failed: %s (%s)",
                  L->rank, lanes_algo_name(l->algo), incmoe_strerror(st), why);
        return st;
    }
    l->dc_support = 1;
    return INCMOE_OK;
}
